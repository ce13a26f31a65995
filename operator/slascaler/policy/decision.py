"""A decision as data: what the fleet should look like, why, and the conditions to report.

Built by `policy.decide`; executed by the actuation layer (operator) or the simulator's
control loop, which re-validate it against the live Deployment before acting.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from slascaler.model.regime import Regime, RegimeAnalysis
from slascaler.policy.state import PolicyMemory

Knob = Literal["replicas", "maxBatchSize", "chunkSize"]

# Holds that only pace an earlier action (its pods or rollout still coming up, a cooldown):
# every action would be followed by them, so they are said in the status, not as Events.
PACING_HOLDS = frozenset(
    {"HoldPodsStarting", "HoldScaleUpCooldown", "HoldKnobCooldown", "HoldRollout"}
)


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

    def __str__(self) -> str:
        old = "unset" if self.old is None else str(self.old)
        return f"{self.knob} {old}→{self.new}"


@dataclass(frozen=True)
class Decision:
    """The fleet the policy wants, with the reason and conditions; changes are vs. the live one.

    `reason_code` is machine-readable (CamelCase), `reason` names the numbers behind it.
    `memory_if_applied` is the memory to carry forward once the changes are made;
    `memory_if_held` the one to carry when they are not (Recommend mode, a failed write).
    """

    regime: Regime
    replicas: int
    max_batch_size: int | None
    chunk_size: int | None
    reason_code: str
    reason: str
    conditions: tuple[Condition, ...]
    changes: tuple[Change, ...]
    memory_if_applied: PolicyMemory
    memory_if_held: PolicyMemory
    analysis: RegimeAnalysis | None = None

    @property
    def acts(self) -> bool:
        return bool(self.changes)

    @property
    def pacing(self) -> bool:
        """True for a hold that only waits for an earlier action to take effect."""
        return self.reason_code in PACING_HOLDS

    def condition(self, condition_type: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == condition_type), None)

    def summary(self) -> str:
        changes = ", ".join(str(c) for c in self.changes) or "no change"
        return f"{self.regime}: {changes} ({self.reason_code}: {self.reason})"
