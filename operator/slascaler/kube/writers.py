"""Who else writes the target Deployment: what slascaler must not fight, or stack changes on.

- another autoscaler: an HPA or a KEDA ScaledObject in the namespace targeting the same
  Deployment (KEDA not installed is not an error);
- another InferenceSLA on the same Deployment: the oldest (by creationTimestamp, then name)
  owns it; every other one reports it and changes nothing, so that two specs never take
  turns writing one replica count;
- someone else resetting `spec.replicas` (a GitOps tool, a person): the Deployment's
  managedFields say which field manager owns `f:spec.f:replicas`; when slascaler wrote it
  before and another manager owns it now, that manager wrote it after slascaler did (on an
  update the manager that changes a field takes it over) — unless the Deployment was
  created again since;
- a rollout slascaler did not start: pods of an older ReplicaSet remain whose pod template
  differs from the Deployment's in more than the engine flags slascaler writes (args,
  command, env of the engine container), or in those flags when slascaler does not own
  them (managedFields): a template change of slascaler's would stack on someone else's
  rollout (perhaps a stuck one).

Called by `kube.fleet`; raises only `kube.errors` exceptions.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from slascaler.kube.api import FIELD_MANAGER, Json, KubeAPI, parse_kube_time
from slascaler.kube.errors import NotFound

HASH_LABEL = "pod-template-hash"
ENGINE_FIELDS = ("args", "command", "env")


def other_autoscaler(api: KubeAPI, namespace: str, name: str) -> str | None:
    """`Kind/name` of an HPA or KEDA ScaledObject that targets the Deployment, if any."""
    for hpa in api.list_horizontal_pod_autoscalers(namespace):
        target = hpa["spec"]["scaleTargetRef"]
        if target.get("kind") == "Deployment" and target.get("name") == name:
            return f"HorizontalPodAutoscaler/{hpa['metadata']['name']}"
    try:
        scaled = api.list_scaled_objects(namespace)
    except NotFound:  # KEDA is not installed
        return None
    for item in scaled:
        target = item["spec"].get("scaleTargetRef") or {}
        if target.get("kind", "Deployment") == "Deployment" and target.get("name") == name:
            return f"ScaledObject/{item['metadata']['name']}"
    return None


def _targets(sla: Mapping[str, Any], name: str) -> bool:
    target = (sla.get("spec") or {}).get("targetRef") or {}
    return target.get("name") == name and target.get("kind", "Deployment") == "Deployment"


def _age_key(sla: Mapping[str, Any]) -> tuple[float, str]:
    created = parse_kube_time(sla["metadata"].get("creationTimestamp"))
    return (created if created is not None else math.inf, str(sla["metadata"]["name"]))


def owning_inference_sla(api: KubeAPI, namespace: str, name: str, me: Json) -> str | None:
    """`InferenceSLA/<name>` of an older InferenceSLA targeting the same Deployment, if any.

    The oldest by creationTimestamp (then by name, for ties within a second) owns the
    Deployment; one being deleted owns nothing.
    """
    candidates = [
        sla
        for sla in api.list_inference_slas(namespace)
        if _targets(sla, name) and not sla["metadata"].get("deletionTimestamp")
    ]
    uid = me["metadata"].get("uid")
    if not any(sla["metadata"].get("uid") == uid for sla in candidates):
        candidates.append(me)  # a list that lags behind a create still counts this one
    owner = min(candidates, key=_age_key)
    if owner["metadata"].get("uid") == uid:
        return None
    return f"InferenceSLA/{owner['metadata']['name']}"


def _owns(fields: Mapping[str, Any], path: Sequence[str]) -> bool:
    node: Any = fields
    for key in path:
        if not isinstance(node, Mapping) or key not in node:
            return False
        node = node[key]
    return True


def _entries(deployment: Json) -> Iterator[tuple[str, float | None, Mapping[str, Any]]]:
    for entry in deployment["metadata"].get("managedFields") or []:
        fields = entry.get("fieldsV1")
        if isinstance(fields, Mapping):
            yield str(entry.get("manager", "")), parse_kube_time(entry.get("time")), fields


def replicas_overwritten(deployment: Json, written_at: float | None) -> str | None:
    """The field manager that overwrote spec.replicas after slascaler's write at `written_at`
    (epoch seconds), or None.

    Ownership says it: slascaler's write made it the owner, so another owner now wrote the
    field since. The entry's time, when there is one, must not be older than that write (a
    memory older than the object); writes through the scale subresource (`kubectl scale`, an
    HPA) leave entries without a time.
    """
    if written_at is None:
        return None
    created = parse_kube_time(deployment["metadata"].get("creationTimestamp"))
    if created is not None and created > written_at:
        return None  # created again since slascaler's write: its creator owns replicas
    owners = [
        (manager, at)
        for manager, at, fields in _entries(deployment)
        if _owns(fields, ("f:spec", "f:replicas"))
    ]
    if not owners or any(manager == FIELD_MANAGER for manager, _ in owners):
        return None
    # managedFields times have whole seconds: a write after ours is at or after its second.
    later = [
        (math.inf if at is None else at, manager)
        for manager, at in owners
        if at is None or at >= math.floor(written_at)
    ]
    return max(later)[1] if later else None


def _container_key(name: str) -> str:
    return "k:" + json.dumps({"name": name}, separators=(",", ":"))


def owns_engine_flags(deployment: Json, container: str) -> bool:
    """True when slascaler's field manager owns the engine container's args, command or env."""
    path = ("f:spec", "f:template", "f:spec", "f:containers", _container_key(container))
    for manager, _, fields in _entries(deployment):
        if manager != FIELD_MANAGER:
            continue
        if any(_owns(fields, (*path, f"f:{name}")) for name in ENGINE_FIELDS):
            return True
    return False


def _template(template: Mapping[str, Any]) -> Json:
    """A pod template without the ReplicaSet's own hash label, to compare it."""
    copied: Json = copy.deepcopy(dict(template))
    labels = (copied.get("metadata") or {}).get("labels")
    if isinstance(labels, dict):
        labels.pop(HASH_LABEL, None)
    return copied


def _without_engine_flags(template: Json, container: str | None) -> Json:
    stripped = copy.deepcopy(template)
    for item in (stripped.get("spec") or {}).get("containers") or []:
        if container is not None and item.get("name") == container:
            for name in ENGINE_FIELDS:
                item.pop(name, None)
    return stripped


def rollout_in_progress(deployment: Json) -> bool:
    """As `kubectl rollout status` judges it: the controller has not caught up with the spec,
    or updated pods are fewer than wanted, or old pods remain."""
    spec, status = deployment["spec"], deployment.get("status") or {}
    wanted = spec.get("replicas", 1)
    if deployment["metadata"].get("generation", 0) > status.get("observedGeneration", 0):
        return True
    updated = status.get("updatedReplicas", 0)
    return bool(updated < wanted or status.get("replicas", 0) > updated)


def foreign_rollout(deployment: Json, replica_sets: Sequence[Json], container: str | None) -> bool:
    """True when a rollout is in progress that slascaler did not start (see the module)."""
    if not rollout_in_progress(deployment):
        return False
    current = _template(deployment["spec"]["template"])
    old = [
        _template(rs["spec"]["template"])
        for rs in replica_sets
        if int((rs.get("status") or {}).get("replicas", 0) or 0) > 0
        or int(rs["spec"].get("replicas", 0) or 0) > 0
    ]
    old = [template for template in old if template != current]
    if not old:
        return False  # nothing to roll away from: a scale, or the controller catching up
    bare = _without_engine_flags(current, container)
    if any(_without_engine_flags(template, container) != bare for template in old):
        return True
    return container is None or not owns_engine_flags(deployment, container)
