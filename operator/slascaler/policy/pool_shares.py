"""The numbers of a pool's arbitration: each member's share, and what it may run now.

`allocate` grants replicas one at a time in claim order (minimums by priority; then needs by
priority, predicted gain and fewest granted, a replica a member took staying protected while
its own rules keep it; then spare headroom), then keeps spare headroom from members of lower
priority. `admit` lets a growing share into the GPUs that are free now only (counting what
the previous arbitration allowed and what pods still hold), so the pool never asks for more
than its limit. Pure. Called by `policy.pool.arbitrate`.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence

from slascaler.policy.pool_types import Member

# -- the greedy allocation ------------------------------------------------------------------


PROTECTED_GAIN = 1e9  # a taken replica ranks after replicas that make a fleet stable at all


def _claim_key(member: Member, replica: int, granted: int) -> tuple[float, ...]:
    """The order of the claim on `member`'s `replica`-th replica (smaller goes first).

    Needs (and replicas it took, while its own rules keep them) come before spare headroom;
    within them, priority, then the predicted gain: a replica without which a fleet is
    saturated first (infinite gain), then a taken one, then the others by their gain.
    """
    protected = member.protected_up_to is not None and replica <= member.protected
    if replica <= member.need or protected:
        gain = member.worth.gain(replica) if member.worth is not None else 0.0
        if protected:
            gain = max(gain, PROTECTED_GAIN)
        return (0, -member.priority, -gain, granted)
    return (1, -member.priority, 0.0, granted)


def greedy_shares(
    members: Sequence[Member], budget: int, start: Mapping[str, int] | None = None
) -> tuple[dict[str, int], tuple[str, ...]]:
    """Shares for `members` within `budget` GPUs in claim order (from their minimums, or from
    `start`); the members whose min did not fit (lowest priority first)."""
    shares = dict(start) if start is not None else {m.key: m.min_replicas for m in members}
    remaining = budget
    unfunded: list[str] = []
    for member in sorted(members, key=lambda m: (-m.priority, m.key)):
        cost = shares[member.key] * member.gpus_per_replica
        if cost > remaining:
            unfunded.append(member.key)
        remaining -= cost
    if remaining < 0:  # the minimums alone exceed the budget: nothing more is granted
        return shares, tuple(reversed(unfunded))
    by_key = {m.key: m for m in members}
    heap: list[tuple[tuple[float, ...], str]] = []

    def offer(member: Member) -> None:
        replica = shares[member.key] + 1
        if replica <= member.claim_limit:
            key = _claim_key(member, replica, shares[member.key] - member.min_replicas)
            heapq.heappush(heap, (key, member.key))

    for member in members:
        offer(member)
    while heap:
        _, key = heapq.heappop(heap)
        member = by_key[key]
        if member.gpus_per_replica > remaining:
            continue  # its next replica does not fit (nor do the ones after it)
        shares[key] += 1
        remaining -= member.gpus_per_replica
        offer(member)
    return shares, ()


def allocate(members: Sequence[Member], budget: int) -> tuple[dict[str, int], tuple[str, ...]]:
    """Shares in claim order, then spare headroom kept from members of lower priority.

    In claim order every need comes before any spare headroom, so a member short of GPUs
    takes spare headroom first. But a member's spare headroom (what its stabilization still
    keeps) is insurance for its own load coming back: lending it to a member of lower
    priority would only have it taken back, a pod start-up later. So each member keeps the
    share it would get if only members of its priority or higher competed, the difference
    taken from members of lower priority (the lowest first, never below their min).
    """
    shares, unfunded = greedy_shares(members, budget)
    if unfunded:
        return shares, unfunded
    levels = sorted({m.priority for m in members}, reverse=True)
    for level in levels[:-1]:
        upper = [m for m in members if m.priority >= level]
        lower = [m for m in members if m.priority < level]
        reserved = sum(m.min_replicas * m.gpus_per_replica for m in lower)
        alone, _ = greedy_shares(upper, budget - reserved)
        for member in (m for m in upper if m.priority == level):
            missing = alone[member.key] - shares[member.key]
            givers = sorted(lower, key=lambda m: (m.priority, m.key))
            available = sum((shares[g.key] - g.min_replicas) * g.gpus_per_replica for g in givers)
            restore = min(missing, available // max(1, member.gpus_per_replica))
            if restore <= 0:
                continue
            owed = restore * member.gpus_per_replica
            for giver in givers:
                taken = 0
                while owed > 0 and shares[giver.key] > giver.min_replicas:
                    shares[giver.key] -= 1
                    owed -= giver.gpus_per_replica
                    taken += 1
                if owed < 0:  # took more than owed: give back the whole replicas it can
                    back = min(taken, -owed // giver.gpus_per_replica)
                    shares[giver.key] += back
                    owed += back * giver.gpus_per_replica
            shares[member.key] += restore
    # GPUs left over by whole replicas of different sizes go to the claims that fit them.
    shares, _ = greedy_shares(members, budget, shares)
    return shares, ()


# -- admission into free GPUs -----------------------------------------------------------------


def admit(
    members: Sequence[Member], shares: Mapping[str, int], fixed: Sequence[Member], limit: int
) -> dict[str, int]:
    """What each acting member may run now: its share when it shrinks; when it grows, what
    it already holds or was allowed, plus what is free now, by the order of the claims."""
    reserve = {m.key: max(m.replicas, m.issued or 0, m.holding or 0) for m in members}
    free = limit - sum(reserve[m.key] * m.gpus_per_replica for m in members)
    free -= sum(max(m.replicas, m.holding or 0) * m.gpus_per_replica for m in fixed)
    allowed: dict[str, int] = {}
    growing = []
    for member in members:
        share = shares[member.key]
        if share <= member.replicas:
            allowed[member.key] = share
        else:
            growing.append(member)
    for member in sorted(growing, key=lambda m: (-m.priority, m.key)):
        share = shares[member.key]
        # What it may already run: its replicas, or what it was allowed before (its own
        # terminating pods count as used, never as room for new ones).
        start = min(share, max(member.replicas, member.issued or 0))
        more = 0
        if member.gpus_per_replica > 0:
            more = min(share - start, max(0, free) // member.gpus_per_replica)
        else:
            more = share - start
        free -= more * member.gpus_per_replica
        allowed[member.key] = start + more
    return allowed
