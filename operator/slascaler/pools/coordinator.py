"""Shared GPU pools at the edge: once a cycle, arbitrate every GPUPool and keep each grant.

`PoolCoordinator.refresh` (called by the Kopf wiring before evaluations, at most once per
interval, and by the simulator's control loop once per cycle):

1. lists the GPUPools (none, or the CRD not installed: nothing to do) and the InferenceSLAs
   (of every namespace, or of the watched ones);
2. per pool: parses its spec (`pool_spec`), reads its limit (`pools.limits`: a number; or
   the allocatable GPUs of the Ready, schedulable nodes its nodeSelector matches; or a
   ResourceQuota's hard `requests.<resource>`), and builds its members (`pools.members`):
   the Deployment's replicas and the GPUs one of its pods asks for, the SLA's priority,
   bounds and mode, the bid its last evaluation kept in its status (`status.bid`: what its
   load calls for, what its own rules keep, what a replica is worth), its pods that hold
   GPUs (terminating ones too: their GPUs are not free yet), and the previous arbitration
   from the pool's own status (its memory: a restarted or failed-over operator resumes it);
3. arbitrates (`policy.pool.arbitrate`, pure), writes the pool's status (its conditions:
   `pools.report`), then posts an Event on both InferenceSLAs of every move
   (PreemptedByPool or ReturnedToPool on the one that gives, GrantedByPool on the one that
   takes);
4. keeps every member's grant for `grant_for`, which the `Reconciler` asks before deciding;
   the policy applies it as a step (`policy.steps.budget`).

A release sharded by `SLASCALER_SELECTOR` arbitrates only the pools with members in its
shard; a pool whose members are split across shards would be granted whole by each, so its
members here are held at their counts and its Ready condition says which are elsewhere.

What it cannot read, it holds: a pool whose spec or limit cannot be read, or that it cannot
arbitrate, holds its members where they are (no growth, no preemption) and says so in its
Ready condition; a member without a recent bid is held at its count; an InferenceSLA that
two pools select is held at its count in both (a condition of each pool names it); one
that is not in mode Auto, or that another autoscaler targets, runs what it runs, counted
first. Nothing here raises to the caller. Called by `wiring` and by the simulator
(`slascaler_sim.run`, `slascaler_sim.pool_bench`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from slascaler.kube.actuation import post_event
from slascaler.kube.api import Json, PoolAPI, kube_time
from slascaler.kube.errors import KubeError, NotFound
from slascaler.policy.decision import Condition, Status
from slascaler.policy.pool import Arbitration, Member, PoolGrant, arbitrate, held_at_current
from slascaler.pool_spec import (
    MemberView,
    PoolSpec,
    PoolSpecError,
    parse_pool,
    pool_status,
    previous_shares,
)
from slascaler.pools.limits import LimitUnavailable, read_limit
from slascaler.pools.members import member_key, read_member
from slascaler.pools.report import move_events, pool_conditions
from slascaler.status import merge_conditions

log = logging.getLogger("slascaler.pools")


@dataclass
class PoolCoordinator:
    """Arbitrates every GPUPool once a cycle; `grant_for` answers from the last arbitration."""

    api: PoolAPI
    clock: Callable[[], float]
    interval_s: float = 15.0
    dry_run: bool = False
    namespaces: tuple[str, ...] = ()  # watched namespaces; empty: every namespace
    on_error: Callable[[str], None] = lambda where: None  # counts an API failure
    # Whether an InferenceSLA's labels put it in this release's shard (SLASCALER_SELECTOR).
    in_shard: Callable[[Mapping[str, str]], bool] = lambda labels: True
    _grants: dict[str, PoolGrant] = field(default_factory=dict)
    _pools: list[PoolSpec] = field(default_factory=list)
    _last: float | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _crd_missing: bool = False
    _unseen: set[str] = field(default_factory=set)  # SLAs a refresh was forced for
    arbitrations: dict[str, Arbitration] = field(default_factory=dict)  # the last, per pool

    # -- what the Reconciler asks -----------------------------------------------------

    def grant_for(self, sla: Json) -> PoolGrant | None:
        key = member_key(sla)
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
            pool = next((p.name for p in self._pools if self._selects(p, sla)), None)
            if pool is None:  # the refresh found its pool deleted: not pooled any more
                return None
            return PoolGrant(
                pool, replicas, replicas, replicas, message="not arbitrated yet: held at its count"
            )
        return None

    def _selects(self, pool: PoolSpec, sla: Mapping[str, Any]) -> bool:
        meta = sla["metadata"]
        return pool.selects(meta["namespace"], meta.get("labels") or {})

    def _selected(self, sla: Mapping[str, Any]) -> bool:
        meta = sla["metadata"]
        watched = not self.namespaces or meta["namespace"] in self.namespaces
        ours = watched and self.in_shard(meta.get("labels") or {})
        return ours and any(self._selects(p, sla) for p in self._pools)

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
                    membership.setdefault(member_key(sla), []).append(chosen.name)
        grants: dict[str, PoolGrant] = {}
        for raw, pool, problem in specs:
            if pool is None:
                invalid = Condition("Ready", Status.FALSE, "SpecInvalid", problem)
                conditions = self._conditions(raw, [invalid], now)
                self._write(raw, {"conditions": conditions}, str(raw["metadata"]["name"]))
                continue
            ours: list[Json] = []
            others: list[str] = []  # members in other shards
            for sla in (s for s in slas if self._selects(pool, s)):
                if self.in_shard(sla["metadata"].get("labels") or {}):
                    ours.append(sla)
                else:
                    others.append(member_key(sla))
            if others and not ours:
                continue  # another shard's pool: its release arbitrates it
            grants.update(self._arbitrate(raw, pool, ours, membership, now, others))
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
        other_shards: Sequence[str] = (),
    ) -> dict[str, PoolGrant]:
        previous = previous_shares(raw.get("status"))
        members: list[Member] = []
        views: list[MemberView] = []
        shared: list[str] = []
        for sla in slas:
            key = member_key(sla)
            pools = membership.get(key, [])
            built = read_member(
                self.api, sla, pool, previous, now, pools,
                interval_s=self.interval_s, dry_run=self.dry_run, on_error=self.on_error,
            )  # fmt: skip
            if built is None:
                continue
            member, view = built
            members.append(member)
            views.append(view)
            if len(pools) > 1:
                shared.append(f"{key} (also in {', '.join(p for p in pools if p != pool.name)})")
        if other_shards:
            why = (
                f"members {', '.join(other_shards)} are outside this release's shard "
                "(SLASCALER_SELECTOR): each shard would grant the whole limit to its own; keep "
                "a GPUPool's members in one shard"
            )
            return self._hold(raw, pool, members, views, "SplitAcrossShards", why, "not read", now)
        try:
            limit, source = read_limit(self.api, pool, self.on_error)
        except LimitUnavailable as error:
            reason, why = "LimitUnavailable", str(error)
            return self._hold(raw, pool, members, views, reason, why, "unavailable", now)
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
        conditions = pool_conditions(pool, outcome, members, shared, source)
        self._write(raw, self._status(raw, outcome, views, source, conditions, now), pool.name)
        self._post_moves(pool, outcome, slas, now)
        self.arbitrations[pool.name] = outcome
        return grants

    def _hold(
        self,
        raw: Json,
        pool: PoolSpec,
        members: Sequence[Member],
        views: Sequence[MemberView],
        reason: str,
        why: str,
        source: str,
        now: float,
    ) -> dict[str, PoolGrant]:
        """Nothing to arbitrate by: every member held where it is, and Ready says why."""
        outcome = held_at_current(pool.name, members, why)
        conditions = [Condition("Ready", Status.FALSE, reason, why)]
        self._write(raw, self._status(raw, outcome, views, source, conditions, now), pool.name)
        self.arbitrations[pool.name] = outcome
        return dict(outcome.grants)

    # -- status and events -------------------------------------------------------------

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
        except NotFound:  # deleted since it was listed: its members are unpooled next refresh
            log.info("GPUPool %s: deleted meanwhile; status not written", name)
        except KubeError as error:
            log.error("GPUPool %s: status not written: %s", name, error)
            self.on_error("status")

    def _post_moves(
        self, pool: PoolSpec, outcome: Arbitration, slas: Sequence[Json], now: float
    ) -> None:
        for sla, kind, reason, message in move_events(pool, outcome, slas):
            try:
                post_event(self.api, sla, kind, reason, message, now)
            except KubeError as error:
                log.error("event %s not posted: %s", reason, error)
                self.on_error("kubernetes")
