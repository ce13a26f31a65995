"""The Kubernetes API as the operator uses it: one narrow interface, two implementations.

`KubeAPI` lists every read and write the reconcile loop and the Kopf wiring make, on objects
as the API server's own JSON (camelCase dicts), so that the code reads like the manifests
users write. `kube.clients.Clients` implements it over the Kubernetes client library, and the
simulator's in-memory cluster (`slascaler_sim.cluster`) implements it for the benchmark, the
demo and the unit tests of the edge, so those run the operator's own `Reconciler`.

Every method raises only `kube.errors` exceptions. Writes to a Deployment are one
conditional patch (`DeploymentPatch`, carrying the resourceVersion the decision was made on)
so that replicas and engine flags change together or not at all.

`PoolAPI` adds, for shared GPU pools (`slascaler.pools`), the reads of GPUPools, of every
InferenceSLA, of nodes and ResourceQuotas, and the GPUPool's status; both implementations
provide it too.

Used by `kube.fleet`, `kube.actuation`, `reconcile`, `pools` and `wiring`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

GROUP, VERSION, PLURAL = "slascaler.io", "v1alpha1", "inferenceslas"
KIND = "InferenceSLA"
POOL_PLURAL, POOL_KIND = "gpupools", "GPUPool"  # cluster-scoped
FIELD_MANAGER = "slascaler"

Json = dict[str, Any]


@dataclass(frozen=True)
class ContainerPatch:
    """New `command` / `args` of one container (None: leave that field as it is), and new
    literal values of some of its environment variables (the others are left as they are)."""

    name: str
    command: tuple[str, ...] | None = None
    args: tuple[str, ...] | None = None
    env: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class DeploymentPatch:
    """One conditional write of a Deployment: applied only at `resource_version`."""

    resource_version: str
    replicas: int | None = None
    container: ContainerPatch | None = None

    @property
    def empty(self) -> bool:
        return self.replicas is None and self.container is None


class KubeAPI(Protocol):
    """The API calls the operator makes; each raises only `kube.errors` exceptions."""

    def get_deployment(self, namespace: str, name: str) -> Json: ...

    def patch_deployment(self, namespace: str, name: str, patch: DeploymentPatch) -> Json:
        """Apply `patch` if the Deployment is still at its resourceVersion (else Conflict);
        returns the Deployment as written."""
        ...

    def list_pods(self, namespace: str, label_selector: str) -> list[Json]: ...

    def list_replica_sets(self, namespace: str, label_selector: str) -> list[Json]:
        """ReplicaSets matching the selector (the target's are those it owns)."""
        ...

    def get_node(self, name: str) -> Json:
        """A node (its labels say which GPU it has); Forbidden when RBAC does not grant it."""
        ...

    def list_horizontal_pod_autoscalers(self, namespace: str) -> list[Json]: ...

    def list_scaled_objects(self, namespace: str) -> list[Json]:
        """KEDA ScaledObjects; NotFound when KEDA is not installed."""
        ...

    def get_inference_sla(self, namespace: str, name: str) -> Json: ...

    def list_inference_slas(self, namespace: str | None) -> list[Json]:
        """The InferenceSLAs of a namespace (to find the one that owns a Deployment), or of
        every namespace (None)."""
        ...

    def patch_inference_sla_status(
        self, namespace: str, name: str, status: Mapping[str, Any]
    ) -> None:
        """JSON merge patch of the status subresource (keys set to None are removed)."""
        ...

    def create_event(self, namespace: str, event: Json) -> None:
        """Create a core/v1 Event; Conflict when one of that name exists already."""
        ...


class PoolAPI(KubeAPI, Protocol):
    """What the pool coordinator reads and writes besides `KubeAPI`."""

    def list_gpu_pools(self) -> list[Json]:
        """Every GPUPool (cluster-scoped); NotFound when its CRD is not installed."""
        ...

    def patch_gpu_pool_status(self, name: str, status: Mapping[str, Any]) -> None:
        """JSON merge patch of a GPUPool's status subresource."""
        ...

    def list_inference_slas(self, namespace: str | None) -> list[Json]:
        """The InferenceSLAs of a namespace, or of every namespace (None)."""
        ...

    def list_nodes(self, label_selector: str) -> list[Json]: ...

    def get_resource_quota(self, namespace: str, name: str) -> Json: ...


def kube_time(epoch_s: float) -> str:
    """RFC 3339 UTC with seconds, as Kubernetes writes times."""
    return dt.datetime.fromtimestamp(epoch_s, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_kube_time(text: object) -> float | None:
    """Epoch seconds of a Kubernetes time (RFC 3339, e.g. `2024-05-01T12:00:00Z`); None when
    absent or unreadable."""
    if not isinstance(text, str) or not text:
        return None
    try:
        parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return parsed.timestamp()
