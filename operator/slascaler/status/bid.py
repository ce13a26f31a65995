"""A member's bid in a shared GPU pool (`status.bid`) and the grant it applied (`status.pool`).

`bid_to_status` writes what the policy wants, what its own rules keep and what a replica is
worth to it (the latency model's TTFT around the current count); `bid_from_status` reads it
back for the pool's coordinator (None when absent or unreadable); `pool_to_status` writes the
grant an evaluation applied. Called by `reconcile` (writing) and `pools` (reading).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from slascaler.model.latency import ReplicaWorth
from slascaler.policy import Decision
from slascaler.policy.pool import PoolGrant
from slascaler.status.values import number as _number


def _ms(value: float) -> float | None:
    return round(value, 1) if math.isfinite(value) else None


def bid_to_status(decision: Decision, replicas: int) -> dict[str, Any] | None:
    """`status.bid`: the replicas the load calls for, what the SLA's own rules keep, and the
    latency model's worth of a replica (None when the window gave no count to bid)."""
    if decision.wanted_replicas is None:
        return None
    held = decision.held_replicas if decision.held_replicas is not None else replicas
    out: dict[str, Any] = {
        "replicas": replicas,
        "wanted": decision.wanted_replicas,
        "held": max(held, decision.wanted_replicas),
    }
    worth = decision.worth
    if worth is not None:
        fewer, now, more = worth.around(replicas)
        out["ttftMs"] = {
            k: v for k, v in (("fewer", _ms(fewer)), ("current", _ms(now)), ("more", _ms(more)))
            if v is not None
        }  # fmt: skip
        out["worth"] = {
            "workTokensPerS": round(worth.work, 1),
            "capacityTokensPerS": round(worth.capacity, 1),
            "floorMs": round(worth.floor_ms, 2),
            "slopeMs": round(worth.slope_ms, 2),
            "objectiveMs": worth.objective_ms,
        }
    return out


@dataclass(frozen=True)
class Bid:
    """A member's bid as its status keeps it."""

    wanted: int
    held: int
    worth: ReplicaWorth | None


def bid_from_status(raw: object) -> Bid | None:
    """The bid kept in an InferenceSLA's status; None when absent or unreadable."""
    if not isinstance(raw, Mapping):
        return None
    wanted, held = raw.get("wanted"), raw.get("held", raw.get("wanted"))
    for value in (wanted, held):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            return None
    assert isinstance(wanted, int) and isinstance(held, int)
    worth = None
    curve = raw.get("worth")
    if isinstance(curve, Mapping):
        try:
            numbers = [
                _number(curve.get(k), k)
                for k in ("workTokensPerS", "capacityTokensPerS", "floorMs", "slopeMs",
                          "objectiveMs")
            ]  # fmt: skip
        except ValueError:
            numbers = []
        if numbers and numbers[1] > 0 and numbers[4] > 0:
            worth = ReplicaWorth(*numbers)
    return Bid(wanted, max(held, wanted), worth)


def pool_to_status(grant: PoolGrant | None) -> dict[str, Any] | None:
    """`status.pool`: the pool's grant this evaluation applied (None outside any pool)."""
    if grant is None:
        return None
    out: dict[str, Any] = {
        "name": grant.pool,
        "granted": grant.granted,
        "allowed": grant.allowed,
        "applied": grant.acting,
    }
    if grant.message:
        out["message"] = grant.message
    if grant.preempted_by:
        out["preemptedBy"] = list(grant.preempted_by)
    return out
