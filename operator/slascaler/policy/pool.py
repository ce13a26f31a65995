"""Arbitration of one GPU budget between the InferenceSLAs of a pool (a `GPUPool`).

Each member's own policy says what it wants (`wanted`: the replicas its load calls for),
what its own rules keep (`held`: the highest count it recommended over its scale-down
stabilization window, at least `wanted`) and what each replica is worth to it
(`ReplicaWorth`: the TTFT its latency model predicts at any replica count). Within the
pool's GPU limit, `arbitrate` grants replicas one at a time, in this order:

1. every member's `replicas.min`, by priority (a limit below the sum of the minimums grants
   the minimums by priority and says which do not fit: no member ever goes below its min);
2. **needs**: replicas up to what each member's load calls for, by priority, then by the
   largest predicted gain (the share of its TTFT objective the replica takes off; a replica
   without which the fleet is saturated first), then to whoever has been granted fewer.
   Replicas a member *took* from others stay in this tier at its priority, ahead of any
   finite gain, while its own stabilization still keeps them (`protected_up_to`): a replica
   taken is not given back within the stabilization window unless the taker's load fell
   for that whole window, so two members of one priority never trade a replica back and
   forth on noise in their gains;
3. **spare headroom**: replicas beyond a member's need that its stabilization still keeps,
   by priority. Spare replicas come after every need, so a member short of GPUs takes
   them first from members with spare headroom, then from lower-priority ones; but spare
   headroom is never lent to a member of lower priority (`pool_shares.allocate`).

A member that does not follow a grant (mode Recommend, a dry run, another autoscaler on
its Deployment, not evaluated yet: `acting=False`) keeps what it runs, counted against the
budget first; it is also arbitrated as if it acted, and its grant says what it would get
(Recommend mode reports what it would move). A member whose pods ask for no GPU is outside
the budget.

A grant has two numbers: `granted`, the member's share, and `allowed`, what it may run now.
A share shrinks at once (the member scales down: it is preempted); it grows only into GPUs
that are free now, counting as in use every GPU the previous arbitration allowed and that
may still be taken (`issued`) and every GPU a pod still holds (`holding`: a terminating pod
holds its GPUs until it is gone): so a taker waits until its giver's pods are gone, and the
pool never asks for more GPUs than its limit, whatever order the members act in (its pods
never go Pending for GPUs another member is still giving up).

`moves` pairs the members whose share fell with those whose share rose since the previous
arbitration, for the Events on both sides. Pure: called by the operator's pool coordinator
(`slascaler.pools`); each member's grant reaches its own reconcile as `PolicyState.grant`
and is applied by `policy.steps.budget`.

The data (`Member`, `PoolGrant`, `Move`, `Arbitration`) lives in `policy.pool_types` and is
re-exported here; the numbers (`allocate`, `admit`) in `policy.pool_shares`. This module
assembles the grants and explains them (the moves, each grant's message).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from slascaler.model.latency import ReplicaWorth
from slascaler.policy.pool_shares import admit, allocate
from slascaler.policy.pool_types import Arbitration, Member, Move, PoolGrant, Preemption

__all__ = [
    "Arbitration",
    "Member",
    "Move",
    "PoolGrant",
    "Preemption",
    "arbitrate",
    "held_at_current",
]


# -- explanations -------------------------------------------------------------------------------


def _ttft(worth: ReplicaWorth | None, replicas: int) -> str:
    if worth is None:
        return "unknown"
    value = worth.ttft_ms(replicas)
    return "unbounded" if math.isinf(value) else f"{value:.0f} ms"


def _takers(member: Member, acting: Sequence[Member], shares: Mapping[str, int]) -> list[Member]:
    """The members that `member`'s replicas go to: those that grow, when only spare headroom
    is taken from it; else those of its priority or higher granted more than their min."""
    others = [o for o in acting if o.key != member.key]
    if shares[member.key] >= member.need:
        return [o for o in others if shares[o.key] > o.replicas]
    return [o for o in others if o.priority >= member.priority and shares[o.key] > o.min_replicas]


def _preemption(member: Member, takers: Sequence[Member], share: int) -> Preemption:
    if share >= member.need:
        return Preemption.SPARE_HEADROOM
    if any(t.priority > member.priority for t in takers):
        return Preemption.BY_HIGHER_PRIORITY
    return Preemption.BY_GREATER_GAIN


def _move_reason(giver: Member, taker: Member, share: int) -> str:
    if share >= giver.keep:
        return "released by its own scale-down"
    if taker.priority > giver.priority:
        return f"priority {taker.priority} > {giver.priority}"
    if share >= giver.need:
        return "spare headroom"
    return f"equal priority {taker.priority}, greater predicted gain"


def _moves(
    members: Sequence[Member],
    shares: Mapping[str, int],
    previous: Mapping[str, int],
) -> tuple[Move, ...]:
    """Pair the members whose share fell with those whose share rose (in GPUs): givers of
    the lowest priority first, takers of the highest first."""
    fell: list[tuple[Member, int]] = []
    rose: list[tuple[Member, int]] = []
    for member in members:
        before = previous.get(member.key, member.replicas)
        delta = (shares[member.key] - before) * member.gpus_per_replica
        if delta < 0:
            fell.append((member, -delta))
        elif delta > 0:
            rose.append((member, delta))
    givers = sorted(fell, key=lambda x: (x[0].priority, x[0].key))
    left = [gpus for _, gpus in givers]
    moves: list[Move] = []
    for taker, wanted in sorted(rose, key=lambda x: (-x[0].priority, x[0].key)):
        for index, (giver, _) in enumerate(givers):
            if wanted == 0:
                break
            gpus = min(left[index], wanted)
            if gpus == 0:
                continue
            left[index] -= gpus
            wanted -= gpus
            share, taker_share = shares[giver.key], shares[taker.key]
            why = (
                f"{_move_reason(giver, taker, share)}; TTFT predicted for {taker.key} "
                f"{_ttft(taker.worth, previous.get(taker.key, taker.replicas))} → "
                f"{_ttft(taker.worth, taker_share)} at {taker_share} replicas, for "
                f"{giver.key} {_ttft(giver.worth, previous.get(giver.key, giver.replicas))} "
                f"→ {_ttft(giver.worth, share)} at {share}"
            )
            moves.append(Move(giver.key, taker.key, gpus, share < giver.keep, why))
    return tuple(moves)


def _message(
    member: Member,
    share: int,
    allowed: int,
    takers: Sequence[Member],
    holders: Sequence[Member],
    limit: int,
    blockers: Sequence[tuple[Member, int]] = (),
) -> str:
    parts = []
    if share < member.need:
        others = ", ".join(f"{t.key} (priority {t.priority})" for t in takers)
        parts.append(
            f"the pool's {limit} GPUs grant {share} of the {member.need} replicas the load "
            f"calls for" + (f"; the rest go to {others}" if others else "")
        )
    elif share < member.keep:
        others = ", ".join(t.key for t in takers)
        parts.append(
            f"{member.keep - share} replicas of spare headroom go to {others or 'the pool'}"
        )
    if allowed < share:
        waiting = ", ".join(h.key for h in holders) or "other members"
        parts.append(f"{share - allowed} more once {waiting} release their GPUs")
    if share < member.need:
        for other, extra in blockers:
            parts.append(
                f"{other.key} ({other.why_not_acting or 'does not follow grants'}) runs "
                f"{extra} replicas more than the pool would grant it: they count as they run"
            )
    return "; ".join(parts)


# -- the arbitration ----------------------------------------------------------------------------


def arbitrate(
    pool: str,
    limit: int,
    members: Sequence[Member],
    previous: Mapping[str, int] | None = None,
) -> Arbitration:
    """Grants for every member of `pool` within `limit` GPUs.

    `previous` maps members to their share in the previous arbitration (for the moves).
    """
    previous = previous or {}
    budgeted = [m for m in members if m.gpus_per_replica > 0]
    outside = [m for m in members if m.gpus_per_replica <= 0]
    acting = [m for m in budgeted if m.acting]
    fixed = [m for m in budgeted if not m.acting]
    fixed_gpus = sum(m.replicas * m.gpus_per_replica for m in fixed)
    shares, unfunded = allocate(acting, limit - fixed_gpus)
    would, _ = allocate(budgeted, limit)  # as if every member followed its grant
    allowed = admit(acting, shares, fixed, limit)
    moves = _moves(acting, shares, previous)
    grants: dict[str, PoolGrant] = {}
    protected: dict[str, int | None] = {}
    holders = [h for h in acting if shares[h.key] < h.replicas or (h.issued or 0) > h.replicas]
    holders += [f for f in fixed if would[f.key] < f.replicas]
    blockers = [(f, f.replicas - would[f.key]) for f in fixed if would[f.key] < f.replicas]
    for member in acting:
        share = shares[member.key]
        takers = _takers(member, acting, shares)
        preempted = share < member.keep and bool(takers)
        grants[member.key] = PoolGrant(
            pool=pool,
            granted=share,
            allowed=allowed[member.key],
            wanted=member.need,
            preempted_by=tuple(t.key for t in takers) if preempted else (),
            preemption=_preemption(member, takers, share) if preempted else None,
            message=_message(
                member, share, allowed[member.key], takers,
                [h for h in holders if h.key != member.key], limit, blockers,
            ),
        )  # fmt: skip
        # What it took stays protected while its own rules keep it; the record only shrinks
        # (to what those rules keep) until a new take.
        took = any(mv.taker == member.key and mv.preempted for mv in moves)
        kept = None
        if member.protected_up_to is not None:
            kept = min(member.protected_up_to, member.held_bounded)
        if took:
            kept = max(kept or 0, share)
        protected[member.key] = kept if kept is not None and kept > member.min_replicas else None
    for member in fixed:
        share = would[member.key]
        takers = _takers(member, budgeted, would)
        preempted = share < member.keep and bool(takers)
        why = member.why_not_acting or "it does not follow the pool's grants"
        told = _message(member, share, share, takers, [], limit)
        grants[member.key] = PoolGrant(
            pool=pool,
            granted=share,
            allowed=share,  # what it would run: reported, never enforced (it does not act)
            wanted=member.need,
            preempted_by=tuple(t.key for t in takers) if preempted else (),
            preemption=_preemption(member, takers, share) if preempted else None,
            message=f"{why}: the pool would grant it {share} replicas"
            + (f" ({told})" if told else "")
            + f"; its {member.replicas} count against the budget as they are",
            acting=False,
        )
    for member in outside:
        grants[member.key] = PoolGrant(
            pool=pool,
            granted=member.keep,
            allowed=member.max_replicas,
            wanted=member.need,
            message="its pods ask for no GPU: outside the pool's budget",
            acting=member.acting,
        )
    used = sum(m.replicas * m.gpus_per_replica for m in budgeted)
    granted_gpus = fixed_gpus + sum(shares[m.key] * m.gpus_per_replica for m in acting)
    minimum = fixed_gpus + sum(m.min_replicas * m.gpus_per_replica for m in acting)
    return Arbitration(
        limit=limit,
        grants=grants,
        moves=moves,
        used=used,
        granted_gpus=granted_gpus,
        minimums_unfunded=unfunded,
        minimum_gpus=minimum,
        protected_up_to=protected,
    )


def held_at_current(pool: str, members: Sequence[Member], why: str) -> Arbitration:
    """No limit to arbitrate by (it could not be read): every member held where it is."""
    grants = {
        m.key: PoolGrant(pool, m.bounded(m.replicas), m.bounded(m.replicas), m.need,
                         message=f"held at its count: {why}", acting=m.acting)
        for m in members
    }  # fmt: skip
    used = sum(m.replicas * max(0, m.gpus_per_replica) for m in members)
    return Arbitration(0, grants, (), used, used, (), used)
