"""Shared GPU pools at the edge: once a cycle, arbitrate every GPUPool and keep each grant.

`PoolCoordinator.refresh` (called by the Kopf wiring before evaluations, at most once per
interval, and by the simulator's control loop once per cycle):

1. lists the GPUPools (none, or the CRD not installed: nothing to do) and the InferenceSLAs
   (of every namespace, or of the watched ones);
2. per pool: parses its spec (`pool_spec`), reads its limit (a number; or the allocatable
   GPUs of the Ready, schedulable nodes its nodeSelector matches; or a ResourceQuota's hard
   `requests.<resource>`), and builds its members: the Deployment's replicas and the GPUs
   one of its pods asks for, the SLA's priority, bounds and mode, the bid its last
   evaluation kept in its status (`status.bid`: what its load calls for, what its own
   rules keep, what a replica is worth), its pods that hold GPUs (terminating ones too:
   their GPUs are not free yet), and the previous arbitration from the pool's own
   status (its memory: a restarted or failed-over operator resumes it);
3. arbitrates (`policy.pool.arbitrate`, pure), writes the pool's status, then posts an
   Event on both InferenceSLAs of every move (PreemptedByPool or ReturnedToPool on the one
   that gives, GrantedByPool on the one that takes);
4. keeps every member's grant for `grant_for`, which the `Reconciler` asks before deciding;
   the policy applies it as a step (`policy.steps.budget`).

What it cannot read, it holds: a pool whose spec or limit cannot be read, or that it cannot
arbitrate, holds its members where they are (no growth, no preemption) and says so in its
Ready condition; a member without a recent bid is held at its count; an InferenceSLA that
two pools select is held at its count in both (a condition of each pool names it); one
that is not in mode Auto, or that another autoscaler targets, runs what it runs, counted
first. Nothing here raises to the caller. Called by `wiring` and `slascaler_sim.run`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from slascaler.kube.actuation import post_event
from slascaler.kube.api import Json, PoolAPI, kube_time, parse_kube_time
from slascaler.kube.errors import KubeError, NotFound
from slascaler.kube.pods import label_selector
from slascaler.policy.decision import Condition, Status
from slascaler.policy.pool import Arbitration, Member, PoolGrant, arbitrate, held_at_current
from slascaler.pool_spec import (
    LimitKind,
    MemberView,
    PoolSpec,
    PoolSpecError,
    gpus_per_replica,
    parse_pool,
    pool_status,
    previous_shares,
    whole_quantity,
)
from slascaler.spec import Mode, SLASpec, SpecError, parse_spec
from slascaler.status import bid_from_status, merge_conditions

log = logging.getLogger("slascaler.pools")

STALE_BID_INTERVALS = 4  # a bid older than this many intervals (at least 2 minutes) is not used


class GrantSource(Protocol):
    """What the `Reconciler` asks before deciding: this InferenceSLA's share of its pool."""

    def grant_for(self, sla: Json) -> PoolGrant | None: ...


class LimitUnavailable(Exception):
    """The pool's limit could not be read (nodes, quota, API error)."""


def _condition(sla: Mapping[str, Any], kind: str) -> str | None:
    for item in (sla.get("status") or {}).get("conditions") or []:
        if isinstance(item, Mapping) and item.get("type") == kind:
            status = item.get("status")
            return status if isinstance(status, str) else None
    return None


def _holds(pod: Mapping[str, Any]) -> bool:
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


def _key(sla: Mapping[str, Any]) -> str:
    meta = sla["metadata"]
    return f"{meta['namespace']}/{meta['name']}"


@dataclass
class PoolCoordinator:
    """Arbitrates every GPUPool once a cycle; `grant_for` answers from the last arbitration."""

    api: PoolAPI
    clock: Callable[[], float]
    interval_s: float = 15.0
    dry_run: bool = False
    namespaces: tuple[str, ...] = ()  # watched namespaces; empty: every namespace
    on_error: Callable[[str], None] = lambda where: None  # counts an API failure
    _grants: dict[str, PoolGrant] = field(default_factory=dict)
    _pools: list[PoolSpec] = field(default_factory=list)
    _last: float | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _crd_missing: bool = False
    _unseen: set[str] = field(default_factory=set)  # SLAs a refresh was forced for
    arbitrations: dict[str, Arbitration] = field(default_factory=dict)  # the last, per pool

    # -- what the Reconciler asks -----------------------------------------------------

    def grant_for(self, sla: Json) -> PoolGrant | None:
        key = _key(sla)
        grant = self._grants.get(key)
        if grant is not None or not self._selected(sla):
            return grant
        if key not in self._unseen:
            # A pool selects it but the last arbitration did not see it (created since):
            # arbitrate now, once (a refresh that still misses it holds it where it is).
            self._unseen.add(key)
            self.refresh(force=True)
            grant = self._grants.get(key)
            if grant is not None:
                return grant
        replicas = (sla.get("status") or {}).get("replicas")
        if isinstance(replicas, int) and not isinstance(replicas, bool):
            pool = next(p.name for p in self._pools if self._selects(p, sla))
            return PoolGrant(
                pool, replicas, replicas, replicas, message="not arbitrated yet: held at its count"
            )
        return None

    def _selects(self, pool: PoolSpec, sla: Mapping[str, Any]) -> bool:
        meta = sla["metadata"]
        return pool.selects(meta["namespace"], meta.get("labels") or {})

    def _selected(self, sla: Mapping[str, Any]) -> bool:
        watched = not self.namespaces or sla["metadata"]["namespace"] in self.namespaces
        return watched and any(self._selects(p, sla) for p in self._pools)

    # -- the cycle ----------------------------------------------------------------------

    def refresh_if_due(self) -> None:
        self.refresh(force=False)

    def refresh(self, force: bool = True) -> None:
        """Arbitrate every pool now (or, without `force`, if the last is an interval old)."""
        with self._lock:
            now = self.clock()
            if not force and self._last is not None and now - self._last < self.interval_s * 0.9:
                return
            self._last = now
            try:
                self._refresh(now)
            except Exception:  # never let a pool stop the evaluations
                log.exception("arbitrating the GPU pools failed")
                self.on_error("pools")

    def _refresh(self, now: float) -> None:
        try:
            raw_pools = self.api.list_gpu_pools()
        except NotFound:
            if not self._crd_missing:
                log.info("the GPUPool CRD is not installed: no shared GPU pools")
            self._crd_missing = True
            self._pools, self._grants = [], {}
            return
        except KubeError as error:
            log.error("listing GPUPools: %s; keeping the last grants", error)
            self.on_error("kubernetes")
            return
        self._crd_missing = False
        slas = self._list_slas()
        if slas is None:
            return
        specs: list[tuple[Json, PoolSpec | None, str]] = []
        for raw in sorted(raw_pools, key=lambda p: str(p["metadata"]["name"])):
            try:
                specs.append((raw, parse_pool(raw), ""))
            except PoolSpecError as error:
                specs.append((raw, None, str(error)))
        valid = [s for _, s, _ in specs if s is not None]
        self._pools = valid
        membership: dict[str, list[str]] = {}
        for sla in slas:
            for chosen in valid:
                if self._selects(chosen, sla):
                    membership.setdefault(_key(sla), []).append(chosen.name)
        grants: dict[str, PoolGrant] = {}
        for raw, pool, problem in specs:
            if pool is None:
                invalid = Condition("Ready", Status.FALSE, "SpecInvalid", problem)
                conditions = self._conditions(raw, [invalid], now)
                self._write(raw, {"conditions": conditions}, str(raw["metadata"]["name"]))
                continue
            members = [s for s in slas if self._selects(pool, s)]
            grants.update(self._arbitrate(raw, pool, members, membership, now))
        self._grants = grants

    def _list_slas(self) -> list[Json] | None:
        try:
            if not self.namespaces:
                return self.api.list_inference_slas(None)
            out: list[Json] = []
            for namespace in self.namespaces:
                out.extend(self.api.list_inference_slas(namespace))
            return out
        except KubeError as error:
            log.error("listing InferenceSLAs: %s; keeping the last grants", error)
            self.on_error("kubernetes")
            return None

    # -- one pool ---------------------------------------------------------------------

    def _arbitrate(
        self,
        raw: Json,
        pool: PoolSpec,
        slas: Sequence[Json],
        membership: Mapping[str, list[str]],
        now: float,
    ) -> dict[str, PoolGrant]:
        previous = previous_shares(raw.get("status"))
        members: list[Member] = []
        views: list[MemberView] = []
        shared: list[str] = []
        for sla in slas:
            key = _key(sla)
            pools = membership.get(key, [])
            built = self._member(sla, pool, previous, now, pools)
            if built is None:
                continue
            member, view = built
            members.append(member)
            views.append(view)
            if len(pools) > 1:
                shared.append(f"{key} (also in {', '.join(p for p in pools if p != pool.name)})")
        try:
            limit, source = self._limit(pool)
        except LimitUnavailable as error:
            outcome = held_at_current(pool.name, members, str(error))
            conditions = [Condition("Ready", Status.FALSE, "LimitUnavailable", str(error))]
            self._write(
                raw, self._status(raw, outcome, views, "unavailable", conditions, now), pool.name
            )
            self.arbitrations[pool.name] = outcome
            return dict(outcome.grants)
        outcome = arbitrate(pool.name, limit, members, {k: p.granted for k, p in previous.items()})
        grants = dict(outcome.grants)
        for member in members:
            if len(membership.get(member.key, [])) > 1:
                others = ", ".join(membership[member.key])
                grants[member.key] = PoolGrant(
                    pool.name,
                    member.replicas,
                    member.replicas,
                    member.need,
                    message=f"selected by the GPUPools {others}: held at its count until "
                    "only one selects it",
                )
        conditions = self._pool_conditions(pool, outcome, members, shared, source)
        self._write(raw, self._status(raw, outcome, views, source, conditions, now), pool.name)
        self._post_moves(pool, outcome, slas, now)
        self.arbitrations[pool.name] = outcome
        return grants

    def _member(
        self,
        sla: Json,
        pool: PoolSpec,
        previous: Mapping[str, Any],
        now: float,
        pools: Sequence[str],
    ) -> tuple[Member, MemberView] | None:
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
                deployment = self.api.get_deployment(namespace, target)
                replicas = int((deployment.get("spec") or {}).get("replicas", 1))
                gpus = gpus_per_replica(deployment, pool.resource)
                selector = label_selector((deployment.get("spec") or {}).get("selector") or {})
                holding = sum(1 for pod in self.api.list_pods(namespace, selector) if _holds(pod))
            except NotFound:
                pass
            except KubeError as error:
                log.error("%s: reading its Deployment: %s", key, error)
                self.on_error("kubernetes")
                return None
        why = self._why_not_acting(sla, spec, pools)
        bid = None
        evaluated = parse_kube_time(status.get("lastEvaluated"))
        fresh = max(120.0, STALE_BID_INTERVALS * self.interval_s)
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
        met = _condition(sla, "SLAMet")
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

    def _why_not_acting(self, sla: Json, spec: SLASpec | None, pools: Sequence[str]) -> str:
        if spec is None:
            return "its spec is invalid"
        if len(pools) > 1:
            return f"selected by the GPUPools {', '.join(pools)}"
        if spec.mode is not Mode.AUTO:
            return "mode Recommend"
        if self.dry_run:
            return "dry run (SLASCALER_DRY_RUN)"
        if _condition(sla, "Conflict") == "True":
            return "another autoscaler targets its Deployment"
        if _condition(sla, "Ready") not in ("True", None):
            return "not evaluated (Ready=False)"
        return ""

    def _limit(self, pool: PoolSpec) -> tuple[int, str]:
        limit = pool.limit
        if limit.kind is LimitKind.FIXED:
            assert limit.gpus is not None
            return limit.gpus, "spec.limit.gpus"
        if limit.kind is LimitKind.NODES:
            assert limit.node_selector is not None
            selector = label_selector(limit.node_selector.to_json())
            try:
                nodes = self.api.list_nodes(selector)
            except KubeError as error:
                self.on_error("kubernetes")
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
            quota = self.api.get_resource_quota(namespace, name)
        except KubeError as error:
            self.on_error("kubernetes")
            raise LimitUnavailable(f"reading ResourceQuota {namespace}/{name}: {error}") from None
        resource = f"requests.{pool.resource}"
        hard = ((quota.get("spec") or {}).get("hard") or {}).get(resource)
        value = whole_quantity(hard)
        if value is None:
            raise LimitUnavailable(
                f"ResourceQuota {namespace}/{name} sets no whole {resource} in spec.hard"
            )
        return value, f"ResourceQuota {namespace}/{name} ({resource})"

    # -- status and events -------------------------------------------------------------

    def _pool_conditions(
        self,
        pool: PoolSpec,
        outcome: Arbitration,
        members: Sequence[Member],
        shared: Sequence[str],
        source: str,
    ) -> list[Condition]:
        conditions = [
            Condition(
                "Ready",
                Status.TRUE,
                "Arbitrated",
                f"{len(members)} members, limit {outcome.limit} GPUs from {source}",
            ),
        ]
        if outcome.minimum_gpus > outcome.limit:
            beyond = ", ".join(outcome.minimums_unfunded) or "members that do not follow grants"
            conditions.append(
                Condition(
                    "MinimumsFit",
                    Status.FALSE,
                    "MinimumsExceedLimit",
                    f"the members' replicas.min (and what members that do not follow grants run) "
                    f"need {outcome.minimum_gpus} GPUs, the limit is {outcome.limit}: the "
                    f"minimums are granted by priority, and those of {beyond} run beyond it",
                )
            )
        else:
            conditions.append(
                Condition(
                    "MinimumsFit",
                    Status.TRUE,
                    "WithinLimit",
                    f"the minimums need {outcome.minimum_gpus} GPUs",
                )
            )
        short = [
            f"{key} {g.granted}/{g.wanted}"
            for key, g in sorted(outcome.grants.items())
            if g.acting and g.granted < g.wanted
        ]
        if short:
            conditions.append(
                Condition(
                    "Exhausted",
                    Status.TRUE,
                    "BudgetExhausted",
                    "granted/wanted replicas: " + ", ".join(short),
                )
            )
        else:
            conditions.append(
                Condition(
                    "Exhausted", Status.FALSE, "NeedsGranted", "every member's need is granted"
                )
            )
        if shared:
            conditions.append(
                Condition(
                    "MemberConflict",
                    Status.TRUE,
                    "SelectedByOtherPools",
                    "held at their count: " + "; ".join(shared),
                )
            )
        else:
            conditions.append(Condition("MemberConflict", Status.FALSE, "NoConflict", ""))
        return conditions

    def _conditions(
        self, raw: Json, conditions: Sequence[Condition], now: float
    ) -> list[dict[str, Any]]:
        generation = int(raw["metadata"].get("generation", 0))
        return merge_conditions(
            (raw.get("status") or {}).get("conditions"), conditions, kube_time(now), generation
        )

    def _status(
        self,
        raw: Json,
        outcome: Arbitration,
        views: Sequence[MemberView],
        source: str,
        conditions: Sequence[Condition],
        now: float,
    ) -> dict[str, Any]:
        return pool_status(
            outcome,
            views,
            source,
            conditions,
            raw.get("status") or {},
            kube_time(now),
            int(raw["metadata"].get("generation", 0)),
        )

    def _write(self, raw: Json, status: Mapping[str, Any], name: str) -> None:
        try:
            self.api.patch_gpu_pool_status(name, status)
        except KubeError as error:
            log.error("GPUPool %s: status not written: %s", name, error)
            self.on_error("status")

    def _post_moves(
        self, pool: PoolSpec, outcome: Arbitration, slas: Sequence[Json], now: float
    ) -> None:
        by_key = {_key(s): s for s in slas}
        for move in outcome.moves:
            giver, taker = by_key.get(move.giver), by_key.get(move.taker)
            if giver is None or taker is None:
                continue
            gpus = f"{move.gpus} GPU{'s' if move.gpus != 1 else ''}"
            if move.preempted:
                given = (
                    "Warning",
                    "PreemptedByPool",
                    f"pool {pool.name}: {gpus} of this SLA go to {move.taker}: {move.why}",
                )
            else:
                given = (
                    "Normal",
                    "ReturnedToPool",
                    f"pool {pool.name}: {gpus} this SLA released go to {move.taker}: {move.why}",
                )
            taken = (
                "Normal",
                "GrantedByPool",
                f"pool {pool.name}: {gpus} from {move.giver}: {move.why}",
            )
            for sla, (kind, reason, message) in ((giver, given), (taker, taken)):
                try:
                    post_event(self.api, sla, kind, reason, message, now)
                except KubeError as error:
                    log.error("event %s not posted: %s", reason, error)
                    self.on_error("kubernetes")
