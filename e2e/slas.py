"""InferenceSLA and GPUPool objects and their status, for the e2e tests.

`inference_sla` and `gpu_pool` build manifests; `SLAWatch` reads an InferenceSLA back (status,
conditions, the events posted on it) and `PoolWatch` a GPUPool, so tests can poll for what
they expect.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kubernetes.client.exceptions import ApiException

from e2e.cluster.processes import poll
from e2e.kube import Kube

ROOT = Path(__file__).resolve().parents[1]
CRD_FILE = ROOT / "manifests" / "crds" / "slascaler.io_inferenceslas.yaml"
POOL_CRD_FILE = ROOT / "manifests" / "crds" / "slascaler.io_gpupools.yaml"
GROUP, VERSION, PLURAL = "slascaler.io", "v1alpha1", "inferenceslas"
POOL_PLURAL = "gpupools"


def inference_sla(
    name: str, target: str, labels: Mapping[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "targetRef": {"name": target},
        "objectives": {"ttft": {"percentile": 95, "thresholdMs": 500}},
    }
    body.update(spec)
    metadata: dict[str, Any] = {"name": name}
    if labels:
        metadata["labels"] = dict(labels)
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "InferenceSLA",
        "metadata": metadata,
        "spec": body,
    }


def gpu_pool(name: str, selector: Mapping[str, Any], limit: Mapping[str, Any],
             namespaces: list[str] | None = None) -> dict[str, Any]:  # fmt: skip
    spec: dict[str, Any] = {"selector": dict(selector), "limit": dict(limit)}
    if namespaces:
        spec["namespaces"] = list(namespaces)
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "GPUPool",
        "metadata": {"name": name},
        "spec": spec,
    }


def install_crd(kube: Kube) -> None:
    kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))
    kube.kubectl(
        "wait", "--for=condition=Established", "crd/inferenceslas.slascaler.io", "--timeout=30s"
    )


def install_pool_crd(kube: Kube) -> None:
    kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(POOL_CRD_FILE))
    kube.kubectl(
        "wait", "--for=condition=Established", "crd/gpupools.slascaler.io", "--timeout=30s"
    )


class PoolWatch:
    """A GPUPool (cluster-scoped) read back."""

    def __init__(self, kube: Kube, name: str) -> None:
        self.kube, self.name = kube, name

    def status(self) -> dict[str, Any]:
        try:
            custom = self.kube.custom
            pool = custom.get_cluster_custom_object(GROUP, VERSION, POOL_PLURAL, self.name)
        except ApiException:
            return {}
        return dict(pool.get("status") or {})

    def condition(self, condition_type: str) -> Mapping[str, Any]:
        for condition in self.status().get("conditions") or []:
            if condition["type"] == condition_type:
                return dict(condition)
        return {}

    def members(self) -> dict[str, dict[str, Any]]:
        return {m["name"]: m for m in self.status().get("members") or []}


class SLAWatch:
    def __init__(self, kube: Kube, namespace: str, name: str) -> None:
        self.kube, self.namespace, self.name = kube, namespace, name

    def get(self) -> dict[str, Any]:
        result: dict[str, Any] = self.kube.custom.get_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, self.name
        )
        return result

    def status(self) -> dict[str, Any]:
        try:
            return dict(self.get().get("status") or {})
        except ApiException:
            return {}

    def condition(self, condition_type: str) -> Mapping[str, Any]:
        for condition in self.status().get("conditions") or []:
            if condition["type"] == condition_type:
                return dict(condition)
        return {}

    def wait_condition(
        self, condition_type: str, status: str, reason: str | None = None, timeout: float = 60
    ) -> Mapping[str, Any]:
        def matches() -> Mapping[str, Any] | None:
            condition = self.condition(condition_type)
            ok = condition.get("status") == status and (
                reason is None or condition.get("reason") == reason
            )
            return condition if ok else None

        return poll(
            matches,
            timeout=timeout,
            what=f"{condition_type}={status}" + (f" ({reason})" if reason else ""),
            describe=lambda: f"status: {self.status()}",
        )

    def events(self) -> list[dict[str, Any]]:
        items = self.kube.core.list_namespaced_event(
            self.namespace, field_selector=f"involvedObject.name={self.name}"
        ).items
        return [
            {
                "type": e.type,
                "reason": e.reason,
                "message": e.message,
                "source": e.source.component,
                "count": e.count or 1,
                "at": e.last_timestamp or e.event_time or e.first_timestamp,
            }
            for e in items
        ]

    def story(self) -> str:
        """Every Event on the SLA, oldest first, one line each with its time and count: what a
        failing scenario prints, so that CI's log says why each step was taken."""
        events = sorted(self.events(), key=lambda e: (e["at"] is None, e["at"] or 0))
        return "\n".join(
            f"{e['at']:%H:%M:%S} ×{e['count']} {e['reason']}: {e['message']}"
            if e["at"] is not None
            else f"? ×{e['count']} {e['reason']}: {e['message']}"
            for e in events
        )

    def wait_event(self, reason: str, timeout: float = 60) -> dict[str, Any]:
        return poll(
            lambda: next((e for e in self.events() if e["reason"] == reason), None),
            timeout=timeout,
            what=f"an event {reason} on {self.name}",
            describe=lambda: f"events: {self.events()}",
        )
