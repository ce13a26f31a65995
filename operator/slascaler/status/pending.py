"""An action announced in the status before it is written to the Deployment (write-ahead).

`PendingAction.of` announces a decision's changes (`status.pendingAction`, with the memory the
action leads to); if the operator stops between the announcement and the write, the next
evaluation compares the Deployment with it (`PendingAction.landed`) and records it as done,
with its Event, or as never made, so the status always says what was written.
`action_message` is the text of an action's Event. Called by `reconcile` and `acting`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from slascaler.policy import Change, Decision, FleetState, PolicyMemory
from slascaler.status.memory import memory_from_status, memory_to_status

KNOB_FIELDS = ("maxBatchSize", "chunkSize")


def changes_text(changes: Sequence[Change]) -> str:
    return ", ".join(str(c) for c in changes)


def action_message(decision: Decision) -> str:
    """The changes, then the reason without repeating them."""
    parts = decision.reason.split("; ")
    for change in decision.changes:
        parts = [p.removeprefix(f"{change}: ") for p in parts]
    return f"{changes_text(decision.changes)}: {'; '.join(parts)}"


@dataclass(frozen=True)
class PendingAction:
    """An action announced before it is written: what the Deployment should then carry."""

    time: str
    change: str
    reason_code: str
    reason: str
    message: str
    target: Mapping[str, int]  # replicas / maxBatchSize / chunkSize after the action
    memory: PolicyMemory  # the policy's memory once the action is made

    @classmethod
    def of(cls, decision: Decision, time: str) -> PendingAction:
        return cls(
            time=time,
            change=changes_text(decision.changes),
            reason_code=decision.reason_code,
            reason=decision.reason,
            message=action_message(decision),
            target={c.knob: c.new for c in decision.changes},
            memory=decision.memory_if_applied,
        )

    @property
    def key(self) -> str:
        """What identifies this action (its Event's name is derived from it)."""
        return f"{self.time}|{self.change}"

    def last_action(self) -> dict[str, Any]:
        return {
            "time": self.time,
            "change": self.change,
            "reasonCode": self.reason_code,
            "reason": self.reason,
        }

    def to_status(self) -> dict[str, Any]:
        return {
            **self.last_action(),
            "message": self.message,
            "target": dict(self.target),
            "memory": memory_to_status(self.memory),
        }

    @classmethod
    def from_status(cls, raw: object) -> PendingAction | None:
        """The pending action kept in status; None when there is none or it is unreadable."""
        if not isinstance(raw, Mapping):
            return None
        target = raw.get("target")
        memory, problem = memory_from_status(raw.get("memory"))
        texts = [raw.get(k) for k in ("time", "change", "reasonCode", "reason", "message")]
        if (
            problem is not None
            or not isinstance(target, Mapping)
            or not all(isinstance(t, str) for t in texts)
            or not all(
                k in ("replicas", *KNOB_FIELDS) and isinstance(v, int) and not isinstance(v, bool)
                for k, v in target.items()
            )
        ):
            return None
        time, change, code, reason, message = (str(t) for t in texts)
        return cls(time, change, code, reason, message, dict(target), memory)

    def landed(self, fleet: FleetState) -> bool:
        """True when the Deployment carries every value the action was to write."""
        have = {
            "replicas": fleet.spec_replicas,
            "maxBatchSize": fleet.max_batch_size,
            "chunkSize": fleet.chunk_size,
        }
        return all(have.get(knob) == value for knob, value in self.target.items())
