"""Read the target Deployment as the policy needs it: a `FleetState` and what it was read from.

- replicas from the Deployment's spec, ready replicas from its status;
- unschedulable pods: the Deployment's pods that are Pending with the scheduler's
  `Unschedulable` reason (e.g. no GPU left), so that the policy stops adding replicas;
- a rollout is in progress while the controller has not caught up with the spec, or updated
  pods are fewer than wanted, or old pods remain (as `kubectl rollout status` judges it);
- the engine flags from the engine container's command line (`engine_args`); a flag that is
  absent means the engine's default, which is said in `notes`;
- another autoscaler: an HPA or a KEDA ScaledObject in the namespace targeting the same
  Deployment (KEDA not installed is not an error);
- how many pods a rolling update may take down (the strategy's maxUnavailable, resolved).

Raises `TargetMissing` when the Deployment does not exist, `ContainerMissing` when the engine
container is not in it, and `kube.errors` exceptions when the API fails. Called by
`reconcile`, once to decide and once more just before acting (to re-validate the decision).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from slascaler.engine_args import CommandLine, EngineArgsError, read_flag
from slascaler.engines import ENGINES
from slascaler.kube.api import Json, KubeAPI
from slascaler.kube.errors import NotFound
from slascaler.policy import FleetState
from slascaler.policy.state import DEFAULT_MAX_UNAVAILABLE, resolve_max_unavailable
from slascaler.spec import SLASpec


class TargetMissing(Exception):
    """The target Deployment does not exist."""


class ContainerMissing(Exception):
    """The named engine container is not in the Deployment's pod template."""


@dataclass(frozen=True)
class FleetView:
    """The FleetState and the live object it was read from."""

    state: FleetState
    deployment: Json
    container: str
    command_line: CommandLine
    notes: tuple[str, ...] = ()

    @property
    def resource_version(self) -> str:
        return str(self.deployment["metadata"]["resourceVersion"])

    def same_as(self, other: FleetView) -> bool:
        """True when nothing the decision depends on changed between the two reads.

        Writes that touch nothing decided on (annotations, labels, a status update) leave
        the decision valid, so a busy Deployment does not starve its scaling.
        """
        mine, theirs = self.state, other.state
        return (
            mine.spec_replicas == theirs.spec_replicas
            and mine.max_batch_size == theirs.max_batch_size
            and mine.chunk_size == theirs.chunk_size
            and mine.other_autoscaler == theirs.other_autoscaler
            and mine.rollout_in_progress == theirs.rollout_in_progress
            and self.container == other.container
            and self.command_line == other.command_line
        )


def label_selector(selector: Mapping[str, Any]) -> str:
    """A Deployment's spec.selector as a label-selector string."""
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values")
        if operator == "In":
            parts.append(f"{key} in ({','.join(values)})")
        elif operator == "NotIn":
            parts.append(f"{key} notin ({','.join(values)})")
        elif operator == "Exists":
            parts.append(key)
        elif operator == "DoesNotExist":
            parts.append(f"!{key}")
    return ",".join(parts)


def engine_container(deployment: Json, name: str | None) -> Json:
    containers: list[Json] = deployment["spec"]["template"]["spec"]["containers"]
    if name is None:
        return containers[0]
    for container in containers:
        if container["name"] == name:
            return container
    names = ", ".join(c["name"] for c in containers)
    raise ContainerMissing(
        f"the Deployment has no container named {name!r} (it has {names}); "
        "fix spec.targetRef.container"
    )


def command_line(container: Mapping[str, Any]) -> CommandLine:
    return CommandLine(tuple(container.get("command") or ()), tuple(container.get("args") or ()))


def rollout_in_progress(deployment: Json) -> bool:
    spec, status = deployment["spec"], deployment.get("status") or {}
    wanted = spec.get("replicas", 1)
    if deployment["metadata"].get("generation", 0) > status.get("observedGeneration", 0):
        return True
    updated = status.get("updatedReplicas", 0)
    return bool(updated < wanted or status.get("replicas", 0) > updated)


def max_unavailable(deployment: Json) -> int:
    """Pods a rolling update may take down, as the Deployment controller resolves it."""
    spec = deployment["spec"]
    replicas = int(spec.get("replicas", 1))
    strategy = spec.get("strategy") or {}
    if strategy.get("type") == "Recreate":
        return replicas
    rolling = strategy.get("rollingUpdate") or {}
    return resolve_max_unavailable(rolling.get("maxUnavailable", DEFAULT_MAX_UNAVAILABLE), replicas)


def _unschedulable(api: KubeAPI, namespace: str, deployment: Json) -> int:
    selector = label_selector(deployment["spec"]["selector"])
    pods = api.list_pods(namespace, selector)
    count = 0
    for pod in pods:
        if pod["metadata"].get("deletionTimestamp") or pod["status"].get("phase") != "Pending":
            continue
        for condition in pod["status"].get("conditions") or []:
            if (
                condition.get("type") == "PodScheduled"
                and condition.get("status") == "False"
                and condition.get("reason") == "Unschedulable"
            ):
                count += 1
    return count


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


def read_fleet(api: KubeAPI, namespace: str, spec: SLASpec) -> FleetView:
    try:
        deployment = api.get_deployment(namespace, spec.target.name)
    except NotFound:
        raise TargetMissing(
            f"Deployment {spec.target.name} not found in namespace {namespace}"
        ) from None
    container = engine_container(deployment, spec.target.container)
    line = command_line(container)
    flavour = ENGINES[spec.engine]
    notes: list[str] = []
    flags: dict[str, int | None] = {}
    for knob, flag, default, wanted in (
        ("maxBatchSize", flavour.max_batch_flag, flavour.default_max_batch, spec.max_batch_size),
        ("chunkSize", flavour.chunk_flag, flavour.default_chunk, spec.chunk_size),
    ):
        try:
            value = read_flag(line, flag)
        except EngineArgsError as error:
            flags[knob] = None
            if wanted is not None:
                notes.append(f"spec.knobs.{knob} cannot be tuned: {error}")
            continue
        if value is None and wanted is not None:
            notes.append(f"{flag} is not set: assuming the engine's default {default}")
            value = default
        flags[knob] = value
    status = deployment.get("status") or {}
    state = FleetState(
        spec_replicas=int(deployment["spec"].get("replicas", 1)),
        ready_replicas=int(status.get("readyReplicas", 0)),
        unschedulable_pods=_unschedulable(api, namespace, deployment),
        max_batch_size=flags["maxBatchSize"],
        chunk_size=flags["chunkSize"],
        rollout_in_progress=rollout_in_progress(deployment),
        other_autoscaler=other_autoscaler(api, namespace, spec.target.name),
        max_unavailable=max_unavailable(deployment),
    )
    return FleetView(state, deployment, str(container["name"]), line, tuple(notes))
