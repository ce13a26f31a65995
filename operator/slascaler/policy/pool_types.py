"""What the arbitration of a GPU pool reads and answers.

`Member`: one InferenceSLA as the arbitration sees it (its priority, the GPUs one replica
asks for, its bounds and replicas, its bid: `wanted`, `held`, `worth`; whether it follows
grants; what the previous arbitration allowed it and what it took). `PoolGrant`: one
member's share and what it may run now, with why. `Move`: GPUs that went from one member to
another. `Arbitration`: the outcome for the whole pool. Pure data, used by `policy.pool`
(which re-exports them), `policy.pool_shares`, the policy's steps and the operator's pool
coordinator.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from slascaler.model.latency import ReplicaWorth


class Preemption(StrEnum):
    """Why a member's share is below what it would keep (the `Preempted` condition's reason)."""

    BY_HIGHER_PRIORITY = "ByHigherPriority"
    BY_GREATER_GAIN = "ByGreaterGain"
    SPARE_HEADROOM = "SpareHeadroom"


@dataclass(frozen=True)
class Member:
    """One InferenceSLA of the pool, as the arbitration sees it."""

    key: str  # namespace/name
    priority: int
    gpus_per_replica: int  # GPUs one pod of its Deployment asks for (0: outside the budget)
    min_replicas: int
    max_replicas: int
    replicas: int  # the Deployment's spec.replicas now
    wanted: int | None = None  # what its load calls for; None: no bid (held where it is)
    held: int | None = None  # highest count its rules recommended over its window (≥ wanted)
    worth: ReplicaWorth | None = None
    acting: bool = True  # False: it does not follow a grant (see the module docstring)
    why_not_acting: str = ""
    issued: int | None = None  # `allowed` of the previous arbitration
    holding: int | None = None  # pods that hold GPUs now (scheduled, terminating included)
    protected_up_to: int | None = None  # replicas it took, kept while its rules keep them

    def bounded(self, value: int) -> int:
        return max(self.min_replicas, min(self.max_replicas, value))

    @property
    def need(self) -> int:
        """What its load calls for, within its bounds (its current count without a bid)."""
        return self.bounded(self.replicas if self.wanted is None else self.wanted)

    @property
    def keep(self) -> int:
        """What it runs by its own rules: its need, or more while stabilization holds it."""
        held = self.need if self.held is None else self.bounded(self.held)
        return max(self.need, min(held, self.bounded(self.replicas)))

    @property
    def held_bounded(self) -> int:
        return self.need if self.held is None else max(self.need, self.bounded(self.held))

    @property
    def protected(self) -> int:
        """Up to which count its replicas are protected as needs: those it took, while its
        own rules still want them (`held`: the highest count recommended over its
        stabilization window), even before its new pods run."""
        if self.protected_up_to is None:
            return self.need
        return max(self.need, min(self.held_bounded, self.protected_up_to))

    @property
    def claim_limit(self) -> int:
        """The most replicas it claims: what it keeps, or what it took and still wants."""
        return max(self.keep, self.protected)


@dataclass(frozen=True)
class PoolGrant:
    """One member's grant: its share, what it may run now, and why, in words."""

    pool: str
    granted: int  # its share of the budget (replicas)
    allowed: int  # what it may run now (≤ granted while GPUs owed to it are still held)
    wanted: int  # its need, within its bounds
    preempted_by: tuple[str, ...] = ()  # the members its replicas went to
    preemption: Preemption | None = None
    message: str = ""  # why the share is what it is
    acting: bool = True


@dataclass(frozen=True)
class Move:
    """GPUs that went from one member's share to another's in one arbitration."""

    giver: str
    taker: str
    gpus: int
    preempted: bool  # True: taken from the giver; False: the giver's own rules released them
    why: str


@dataclass(frozen=True)
class Arbitration:
    """The outcome for the whole pool."""

    limit: int
    grants: Mapping[str, PoolGrant]
    moves: tuple[Move, ...]
    used: int  # GPUs of the members' current replicas
    granted_gpus: int  # GPUs of the shares (acting members) and of what the others run
    minimums_unfunded: tuple[str, ...]  # members whose min does not fit, lowest priority first
    minimum_gpus: int  # GPUs the minimums (and what non-acting members run) need
    protected_up_to: Mapping[str, int | None] = field(default_factory=dict)

    @property
    def exhausted(self) -> bool:
        """Some acting member's need is not granted."""
        return any(g.acting and g.granted < g.wanted for g in self.grants.values())
