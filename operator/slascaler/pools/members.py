"""One InferenceSLA as a member of a GPU pool, read from the cluster.

`read_member` builds the arbitration's `Member` (and the pool status's `MemberView`): the
Deployment's replicas and the GPUs one of its pods asks for, the SLA's priority, bounds and
mode, the bid its last evaluation kept in its status (`status.bid`, used while recent:
`STALE_BID_INTERVALS`), and its pods that hold GPUs (terminating ones too: their GPUs are not
free yet). `why_not_acting` says why a member does not follow grants (mode Recommend, a dry
run, another autoscaler, not evaluated, selected by two pools). Called by
`pools.coordinator`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from slascaler.kube.api import Json, PoolAPI, parse_kube_time
from slascaler.kube.errors import KubeError, NotFound
from slascaler.kube.pods import label_selector
from slascaler.policy.pool import Member
from slascaler.pool_spec import MemberView, PoolSpec, gpus_per_replica
from slascaler.spec import Mode, SLASpec, SpecError, parse_spec
from slascaler.status import bid_from_status

log = logging.getLogger("slascaler.pools")

STALE_BID_INTERVALS = 4  # a bid older than this many intervals (at least 2 minutes) is not used


def condition_status(sla: Mapping[str, Any], kind: str) -> str | None:
    """The status ("True", "False", "Unknown") of the InferenceSLA's condition `kind`."""
    for item in (sla.get("status") or {}).get("conditions") or []:
        if isinstance(item, Mapping) and item.get("type") == kind:
            status = item.get("status")
            return status if isinstance(status, str) else None
    return None


def holds_gpus(pod: Mapping[str, Any]) -> bool:
    """Whether a pod holds its GPUs: scheduled and not finished (terminating ones included)."""
    status = pod.get("status") or {}
    if status.get("phase") in ("Succeeded", "Failed"):
        return False
    if status.get("phase") == "Running" or (pod.get("spec") or {}).get("nodeName"):
        return True
    return any(
        c.get("type") == "PodScheduled" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


def member_key(sla: Mapping[str, Any]) -> str:
    """`namespace/name`: how the arbitration names an InferenceSLA."""
    meta = sla["metadata"]
    return f"{meta['namespace']}/{meta['name']}"


def read_member(
    api: PoolAPI,
    sla: Json,
    pool: PoolSpec,
    previous: Mapping[str, Any],
    now: float,
    pools: Sequence[str],
    *,
    interval_s: float,
    dry_run: bool,
    on_error: Callable[[str], None],
) -> tuple[Member, MemberView] | None:
    """`sla` as a member of `pool`: its Deployment's replicas and GPUs per pod, its pods that
    hold GPUs, its bounds and priority, its bid if recent; None when its Deployment could not
    be read (an API error, counted by `on_error`)."""
    meta = sla["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    key = f"{namespace}/{name}"
    status = sla.get("status") or {}
    try:
        spec: SLASpec | None = parse_spec(sla.get("spec") or {})
    except SpecError:
        spec = None
    target = (
        spec.target.name
        if spec is not None
        else (((sla.get("spec") or {}).get("targetRef") or {}).get("name"))
    )
    replicas, gpus, holding = 0, 0, 0
    if isinstance(target, str) and target:
        try:
            deployment = api.get_deployment(namespace, target)
            replicas = int((deployment.get("spec") or {}).get("replicas", 1))
            gpus = gpus_per_replica(deployment, pool.resource)
            selector = label_selector((deployment.get("spec") or {}).get("selector") or {})
            holding = sum(1 for pod in api.list_pods(namespace, selector) if holds_gpus(pod))
        except NotFound:
            pass
        except KubeError as error:
            log.error("%s: reading its Deployment: %s", key, error)
            on_error("kubernetes")
            return None
    why = why_not_acting(sla, spec, pools, dry_run)
    bid = None
    evaluated = parse_kube_time(status.get("lastEvaluated"))
    fresh = max(120.0, STALE_BID_INTERVALS * interval_s)
    if evaluated is not None and now - evaluated <= fresh:
        bid = bid_from_status(status.get("bid"))
    before = previous.get(key)
    low = spec.replicas.min if spec is not None else replicas
    high = spec.replicas.max if spec is not None else replicas
    member = Member(
        key=key,
        priority=spec.priority if spec is not None else 0,
        gpus_per_replica=gpus,
        min_replicas=low,
        max_replicas=max(high, low),
        replicas=replicas,
        wanted=bid.wanted if bid is not None else None,
        held=bid.held if bid is not None else None,
        worth=bid.worth if bid is not None else None,
        acting=not why,
        why_not_acting=why,
        issued=getattr(before, "allowed", None),
        holding=holding,
        protected_up_to=getattr(before, "protected_up_to", None),
    )
    met = condition_status(sla, "SLAMet")
    view = MemberView(
        namespace,
        name,
        member.priority,
        gpus,
        replicas,
        True if met == "True" else False if met == "False" else None,
        not why,
    )
    return member, view

def why_not_acting(sla: Json, spec: SLASpec | None, pools: Sequence[str], dry_run: bool) -> str:
    """Why the member does not follow the pool's grants; empty when it does."""
    if spec is None:
        return "its spec is invalid"
    if len(pools) > 1:
        return f"selected by the GPUPools {', '.join(pools)}"
    if spec.mode is not Mode.AUTO:
        return "mode Recommend"
    if dry_run:
        return "dry run (SLASCALER_DRY_RUN)"
    if condition_status(sla, "Conflict") == "True":
        return "another autoscaler targets its Deployment"
    if condition_status(sla, "Ready") not in ("True", None):
        return "not evaluated (Ready=False)"
    return ""
