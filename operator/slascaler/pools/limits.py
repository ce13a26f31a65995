"""A GPU pool's limit, read from where its spec says it lives.

`read_limit` answers `spec.limit.gpus` as it is; or the allocatable GPUs of the Ready,
schedulable nodes `spec.limit.nodeSelector` matches; or the hard `requests.<resource>` of a
ResourceQuota. What cannot be read raises `LimitUnavailable` (the pool is then held where
it is). Called by `pools.coordinator`.
"""

from __future__ import annotations

from collections.abc import Callable

from slascaler.kube.api import PoolAPI
from slascaler.kube.errors import KubeError
from slascaler.kube.pods import label_selector
from slascaler.pool_spec import LimitKind, PoolSpec, whole_quantity


class LimitUnavailable(Exception):
    """The pool's limit could not be read (nodes, quota, API error)."""


def read_limit(
    api: PoolAPI, pool: PoolSpec, on_error: Callable[[str], None]
) -> tuple[int, str]:
    """The pool's limit in GPUs and where it was read; LimitUnavailable when it could not be
    (an API error is also counted by `on_error`)."""
    limit = pool.limit
    if limit.kind is LimitKind.FIXED:
        assert limit.gpus is not None
        return limit.gpus, "spec.limit.gpus"
    if limit.kind is LimitKind.NODES:
        assert limit.node_selector is not None
        selector = label_selector(limit.node_selector.to_json())
        try:
            nodes = api.list_nodes(selector)
        except KubeError as error:
            on_error("kubernetes")
            raise LimitUnavailable(f"listing nodes: {error}") from None
        total, counted, skipped = 0, 0, 0
        for node in nodes:
            ready = any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in (node.get("status") or {}).get("conditions") or []
            )
            if not ready or (node.get("spec") or {}).get("unschedulable"):
                skipped += 1
                continue
            allocatable = (node.get("status") or {}).get("allocatable") or {}
            total += whole_quantity(allocatable.get(pool.resource, 0)) or 0
            counted += 1
        source = f"{counted} nodes matching spec.limit.nodeSelector"
        if skipped:
            source += f" ({skipped} more not Ready or cordoned)"
        return total, source
    assert limit.quota is not None
    namespace, name = limit.quota
    try:
        quota = api.get_resource_quota(namespace, name)
    except KubeError as error:
        on_error("kubernetes")
        raise LimitUnavailable(f"reading ResourceQuota {namespace}/{name}: {error}") from None
    resource = f"requests.{pool.resource}"
    hard = ((quota.get("spec") or {}).get("hard") or {}).get(resource)
    value = whole_quantity(hard)
    if value is None:
        raise LimitUnavailable(
            f"ResourceQuota {namespace}/{name} sets no whole {resource} in spec.hard"
        )
    return value, f"ResourceQuota {namespace}/{name} ({resource})"
