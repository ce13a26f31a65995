"""The only code that writes to the Kubernetes API: the Deployment, Events, the status.

- A decision's changes (replicas and engine flags together) are **one conditional patch** of
  the Deployment, carrying the resourceVersion of the read the decision was re-validated on:
  it lands whole or not at all, so there is never a Deployment scaled but not re-flagged.
  Engine flags are set where the engine reads them (`engine_container.set_setting`): in the
  engine container's command line, or in its environment variable for TGI when that is
  where the value lives (every other argument, variable and the rest of the template
  untouched); the Deployment then rolls, as it does for any template change.
- A 409 Conflict (someone wrote in between) is retried at once on the Deployment read again
  when that write left its spec and rollout as they were (`fleet.rebased`: an annotation, a
  label, the controller's status), else on a full re-read as long as nothing the decision
  depends on changed (`FleetView.same_as`): a Deployment written to many times a second does
  not starve a needed change. Otherwise `TargetChanged`.
- Events are core/v1 Events on the InferenceSLA (what `kubectl describe` shows), from
  component `slascaler`. An action's Event has a name derived from the action, so posting it
  again after a restart is a no-op (409), never a duplicate. One refused because its
  namespace is being deleted is dropped with an info line: the InferenceSLA goes with it.
- Status goes through the status subresource as a JSON merge patch.

Called by `reconcile`, and by `pools.coordinator` for Events.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from collections.abc import Callable, Mapping
from typing import Any

from slascaler.engine_args import EngineArgsError
from slascaler.engine_container import set_setting
from slascaler.kube.api import (
    GROUP,
    KIND,
    VERSION,
    ContainerPatch,
    DeploymentPatch,
    Json,
    KubeAPI,
    kube_time,
)
from slascaler.kube.errors import Conflict, NamespaceTerminating, NotFound
from slascaler.kube.fleet import FleetView, rebased

log = logging.getLogger(__name__)

CONFLICT_RETRIES = 10
EVENT_MESSAGE_LIMIT = 1024


class TargetChanged(Exception):
    """The live Deployment no longer matches what the decision was made on."""


def planned_patch(
    view: FleetView, replicas: int | None, knobs: Mapping[str, int]
) -> DeploymentPatch:
    """The write that gives the Deployment `replicas` and the knobs' engine flags (knob →
    value), each where it lives (args or env, `engine_container.set_setting`), at `view`'s
    version. A knob the view has no readable setting for is refused (never guessed)."""
    container = None
    if knobs:
        if view.container is None:
            raise EngineArgsError("EngineContainerUnknown", "the engine's container is not known")
        line = view.container.line
        env: dict[str, str] = {}
        for knob, value in knobs.items():
            setting = view.settings.get(knob)
            if setting is None:
                raise EngineArgsError("NotReadable", f"{knob} cannot be read, so it is not set")
            change = set_setting(line, setting, value)
            if change.line is not None:
                line = change.line
            if change.env is not None:
                env[change.env[0]] = change.env[1]
        was = view.container.line
        env_changes = tuple(
            (name, text)
            for name, text in env.items()
            if view.container.env_value(name) != (True, text)
        )
        if line != was or env_changes:
            container = ContainerPatch(
                name=view.container.name,
                args=line.args if line.args != was.args else None,
                command=line.command if line.command != was.command else None,
                env=env_changes,
            )
    if replicas == view.state.spec_replicas:
        replicas = None
    return DeploymentPatch(view.resource_version, replicas=replicas, container=container)


def apply_changes(
    api: KubeAPI,
    namespace: str,
    name: str,
    view: FleetView,
    replicas: int | None,
    knobs: Mapping[str, int],
    reread: Callable[[], FleetView],
) -> Json | None:
    """Write replicas and knobs' flags in one conditional patch; the Deployment as written.

    None when the Deployment already has them (nothing to write). Raises `TargetChanged`
    when the Deployment changed in what the decision depends on, and `kube.errors`
    exceptions when the API refuses or does not answer.
    """
    basis = view
    for _ in range(CONFLICT_RETRIES):
        patch = planned_patch(basis, replicas, knobs)
        if patch.empty:
            return None
        try:
            return api.patch_deployment(namespace, name, patch)
        except Conflict:
            # Most conflicts are writes to nothing decided on (an annotation, the controller's
            # status): one read of the Deployment says so, and the patch is retried at once
            # at its version; a full re-read, which takes longer than a busy Deployment stays
            # unchanged, only when its spec or rollout changed.
            try:
                latest = api.get_deployment(namespace, name)
            except NotFound:
                raise TargetChanged("the Deployment was deleted") from None
            quick = rebased(basis, latest)
            if quick is not None:
                basis = quick
                continue
            fresh = reread()
            if not fresh.same_as(basis):
                raise TargetChanged(
                    "the Deployment changed in what the decision depends on"
                ) from None
            basis = fresh
    raise TargetChanged(
        f"the Deployment kept changing under us ({CONFLICT_RETRIES} conflicting writes)"
    )


def action_event_name(sla_name: str, action_key: str) -> str:
    """A stable Event name for one action: re-posting it after a restart is refused (409)."""
    digest = hashlib.sha256(action_key.encode()).hexdigest()[:16]
    return f"{sla_name[:200]}.{digest}"


def post_event(
    api: KubeAPI,
    sla: Json,
    event_type: str,
    reason: str,
    message: str,
    now: float,
    name: str | None = None,
) -> bool:
    """A core/v1 Event on the InferenceSLA; False when one of that `name` exists already or
    the namespace is being deleted (the API server then refuses anything new in it)."""
    metadata = sla["metadata"]
    stamp = kube_time(now)
    body = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": name or f"{metadata['name'][:200]}.{secrets.token_hex(8)}",
            "namespace": metadata["namespace"],
        },
        "involvedObject": {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": KIND,
            "name": metadata["name"],
            "namespace": metadata["namespace"],
            "uid": metadata.get("uid"),
            "resourceVersion": metadata.get("resourceVersion"),
        },
        "type": event_type,
        "reason": reason,
        "message": message[:EVENT_MESSAGE_LIMIT],
        "source": {"component": "slascaler"},
        "reportingComponent": "slascaler",
        "reportingInstance": "slascaler",
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
    try:
        api.create_event(metadata["namespace"], body)
    except Conflict:
        return False
    except NamespaceTerminating:  # the SLA goes with its namespace: no one will read the event
        namespace = metadata["namespace"]
        log.info("event %s not posted: namespace %s is being deleted", reason, namespace)
        return False
    return True


def patch_status(api: KubeAPI, namespace: str, name: str, status: Mapping[str, Any]) -> None:
    """Merge `status` into the InferenceSLA's status (keys set to None are removed)."""
    api.patch_inference_sla_status(namespace, name, status)
