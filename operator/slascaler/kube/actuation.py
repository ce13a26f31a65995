"""The only code that writes to the Kubernetes API: replicas, engine flags, events, status.

- Replicas go through the Deployment's `scale` subresource, as `kubectl scale` and the HPA
  do, with the resourceVersion read just before as a precondition (a conditional patch).
- Engine flags are set in the engine container's command line (`engine_args.with_flag`:
  every other arg, the env and the rest of the pod template untouched) by a strategic merge
  patch that carries the resourceVersion, so it applies only to the object the decision was
  made on. The Deployment then rolls, as it does for any template change.
- A 409 Conflict (someone else wrote in between) is retried on fresh state, a few times,
  and only while the fresh state still warrants the same write; otherwise `TargetChanged`.
- Events are core/v1 Events on the InferenceSLA (what `kubectl describe` shows), from
  component `slascaler`.
- Status goes through the status subresource as a JSON merge patch.

Called by `reconcile` only.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Any

from kubernetes.client import CoreV1Event
from kubernetes.client.exceptions import ApiException

from slascaler.engine_args import CommandLine, with_flag
from slascaler.kube.clients import GROUP, KIND, PLURAL, VERSION, Clients, Json, kube_time, raw
from slascaler.kube.fleet import command_line, engine_container

CONFLICT_RETRIES = 3
FIELD_MANAGER = "slascaler"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


class TargetChanged(Exception):
    """The live Deployment no longer matches what the decision was made on."""


def scale(
    clients: Clients, namespace: str, name: str, replicas: int, expected_current: int
) -> None:
    """Set the Deployment's replicas to `replicas` if it still has `expected_current`."""
    for _ in range(CONFLICT_RETRIES):
        current = raw(clients.apps.read_namespaced_deployment_scale, name, namespace)
        have = int(current["spec"].get("replicas", 0))
        if have == replicas:
            return  # already done (e.g. by an earlier attempt that timed out)
        if have != expected_current:
            raise TargetChanged(
                f"replicas are {have}, not the {expected_current} the decision was made on"
            )
        # The resourceVersion makes the patch a conditional write: 409 if anyone wrote since.
        body = {
            "metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
            "spec": {"replicas": replicas},
        }
        try:
            clients.apps.patch_namespaced_deployment_scale(
                name, namespace, body, field_manager=FIELD_MANAGER, _content_type=MERGE_PATCH
            )
            return
        except ApiException as error:
            if error.status != 409:
                raise
    raise TargetChanged(f"replicas kept changing under us ({CONFLICT_RETRIES} conflicts)")


def set_flags(
    clients: Clients,
    namespace: str,
    name: str,
    container: str,
    flags: Mapping[str, int],
    expected: CommandLine,
) -> bool:
    """Set engine flags in the container's command line; False if they already had the values.

    `expected` is the command line the decision was made on; if someone changed it since,
    nothing is written (`TargetChanged`).
    """
    for _ in range(CONFLICT_RETRIES):
        deployment = raw(clients.apps.read_namespaced_deployment, name, namespace)
        live = command_line(engine_container(deployment, container))
        if live != expected:
            raise TargetChanged("the engine container's command line changed since the decision")
        wanted = live
        for flag, value in flags.items():
            wanted = with_flag(wanted, flag, value)
        if wanted == live:
            return False
        patched: dict[str, Any] = {"name": container, "args": list(wanted.args)}
        if wanted.command != live.command:
            patched["command"] = list(wanted.command)
        body = {
            "metadata": {"resourceVersion": deployment["metadata"]["resourceVersion"]},
            "spec": {"template": {"spec": {"containers": [patched]}}},
        }
        try:
            clients.apps.patch_namespaced_deployment(
                name,
                namespace,
                body,
                field_manager=FIELD_MANAGER,
                _content_type=STRATEGIC_MERGE_PATCH,
            )
            return True
        except ApiException as error:
            if error.status != 409:
                raise
    raise TargetChanged(f"the Deployment kept changing under us ({CONFLICT_RETRIES} conflicts)")


def post_event(
    clients: Clients, sla: Json, event_type: str, reason: str, message: str, now: float
) -> None:
    """A core/v1 Event on the InferenceSLA (message truncated to the API's 1 KiB limit)."""
    metadata = sla["metadata"]
    stamp = kube_time(now)
    body = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{metadata['name']}.{secrets.token_hex(8)}",
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
        "message": message[:1024],
        "source": {"component": "slascaler"},
        "reportingComponent": "slascaler",
        "reportingInstance": "slascaler",
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
    event = CoreV1Event.from_dict(body)
    assert event is not None  # from_dict returns None only for None
    clients.core.create_namespaced_event(metadata["namespace"], event)


def patch_status(clients: Clients, namespace: str, name: str, status: Mapping[str, Any]) -> None:
    """Merge `status` into the InferenceSLA's status (keys set to None are removed)."""
    clients.custom.patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        name,
        {"status": dict(status)},
        field_manager=FIELD_MANAGER,
        _content_type=MERGE_PATCH,
    )
