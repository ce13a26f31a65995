"""A decision as data: what the fleet should look like, why, and the conditions to report.

Each `Change` carries the `Reason` that made it; the decision's reason code is the reason of
its first change (replicas before knobs: the largest change), or, when nothing changes, the
step that held a change back. Built by `policy.decide`; executed by the operator's
reconcile loop, which re-validates it against the live Deployment before acting.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from slascaler.model.latency import ReplicaWorth
from slascaler.model.regime import Regime, RegimeAnalysis
from slascaler.policy.knobs import KnobName
from slascaler.policy.reasons import PACING, Reason
from slascaler.policy.state import PolicyMemory

Knob = KnobName  # "replicas" or an engine knob's name


class Status(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


@dataclass(frozen=True)
class Condition:
    """A Kubernetes-style condition: type, status, CamelCase reason, message."""

    type: str
    status: Status
    reason: str
    message: str


@dataclass(frozen=True)
class Change:
    knob: Knob
    old: int | None
    new: int
    reason: Reason = Reason.NO_CHANGE

    def __str__(self) -> str:
        old = "unset" if self.old is None else str(self.old)
        return f"{self.knob} {old}→{self.new}"


@dataclass(frozen=True)
class Decision:
    """The fleet the policy wants, with the reason and conditions; changes are vs. the live one.

    `reason` names the numbers behind `reason_code`. `wanted_replicas` is what the load
    calls for before the limits (rate, GPUs, starting pods, stabilization, bounds).
    `memory_if_applied` is the memory to carry forward once the changes are made;
    `memory_if_held` the one to carry when they are not (Recommend mode, a failed write).
    For a shared GPU pool (`policy.pool`): `held_replicas` is the highest count recommended
    over the scale-down stabilization window (at least `wanted_replicas`: what the SLA's own
    rules keep), and `worth` what a replica more or less is worth (the TTFT the latency
    model predicts for the load).
    """

    regime: Regime
    replicas: int
    max_batch_size: int | None
    chunk_size: int | None
    reason_code: Reason
    reason: str
    conditions: tuple[Condition, ...]
    changes: tuple[Change, ...]
    memory_if_applied: PolicyMemory
    memory_if_held: PolicyMemory
    analysis: RegimeAnalysis | None = None
    wanted_replicas: int | None = None
    sustainable_rate: float | None = None  # requests/s one replica serves within the SLA
    held_replicas: int | None = None  # highest recommended over the window (≥ wanted)
    worth: ReplicaWorth | None = None  # predicted TTFT by replica count, for the load
    # The fewest replicas that keep long prompts from sharing a replica's steps in more than
    # `Tunables.collision_risk` of windows (`model.collisions`); None: unknown or no help.
    replicas_for_collisions: int | None = None

    def ttft_around(self, replicas: int) -> tuple[float, float, float] | None:
        """Predicted TTFT with one replica fewer, `replicas`, and one more (None: no model)."""
        return self.worth.around(replicas) if self.worth is not None else None

    @property
    def acts(self) -> bool:
        return bool(self.changes)

    @property
    def pacing(self) -> bool:
        """True for a hold that only waits for an earlier action to take effect."""
        return self.reason_code in PACING

    def condition(self, condition_type: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == condition_type), None)

    def summary(self) -> str:
        changes = ", ".join(str(c) for c in self.changes) or "no change"
        return f"{self.regime}: {changes} ({self.reason_code}: {self.reason})"
