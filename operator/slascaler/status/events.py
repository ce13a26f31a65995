"""Which Event, if any, an evaluation posts.

`choose_event`: one per action, one whenever the reason for holding or recommending changes,
none for the holds that only pace an earlier action; `conflict_event`: a Warning when the
Conflict condition turns True or changes reason. Pure: the caller (`reconcile`) posts them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from slascaler.policy import Decision, Reason
from slascaler.policy.decision import Status
from slascaler.status.pending import action_message, changes_text
from slascaler.status.report import recommendation

# Holds whose reason is a Conflict condition: its Warning Event (posted when the condition
# turns True or changes reason) says it, with the fix, so no second Event is posted.
CONFLICT_HOLDS = frozenset({"HoldConflict", "HoldReplicasOverwritten"})


def choose_event(
    decision: Decision,
    previous_recommendation: object,
    acted: bool,
    auto: bool,
    hold: tuple[Reason, str, bool] | None,
    why_not_auto: str,
) -> tuple[str, str, str] | None:
    """(type, reason, message) of the Event this evaluation posts, or None.

    One per action; one whenever the reason for holding or recommending changes (a steady
    hold is one Event, not one per interval); none for the holds that only pace an earlier
    action (cooldowns, pods starting, a rollout), nor for conflicts (their condition's
    Warning Event, `conflict_event`, says them).
    """
    before = previous_recommendation if isinstance(previous_recommendation, Mapping) else {}
    if decision.reason_code in CONFLICT_HOLDS:
        return None  # the Warning Event of the Conflict condition says it (reconcile)
    if acted:
        return ("Normal", decision.reason_code, action_message(decision))
    if decision.acts and auto:
        if hold is None:
            return None
        code, reason, failed = hold
        return ("Warning" if failed else "Normal", code, reason)
    if decision.acts:
        message = f"would change {changes_text(decision.changes)} ({why_not_auto}): " + (
            decision.reason
        )
        if _target_of(before) != _target_of(recommendation(decision)):
            return ("Normal", f"Recommend{decision.reason_code}", message)
        return None
    if (
        decision.reason_code != "NoChange"
        and not decision.pacing
        and before.get("reasonCode") != decision.reason_code
    ):
        return ("Normal", decision.reason_code, decision.reason)
    return None


def conflict_event(previous_conditions: object, decision: Decision) -> tuple[str, str, str] | None:
    """The Warning Event (type, reason, message) when the Conflict condition turns True or
    changes its reason; None while it stays as it was (a steady conflict is one Event)."""
    condition = decision.condition("Conflict")
    if condition is None or condition.status is not Status.TRUE:
        return None
    before: Mapping[str, Any] = {}
    if isinstance(previous_conditions, Sequence):
        before = next(
            (
                c
                for c in previous_conditions
                if isinstance(c, Mapping) and c.get("type") == "Conflict"
            ),
            {},
        )
    if before.get("status") == "True" and before.get("reason") == condition.reason:
        return None
    return ("Warning", condition.reason, condition.message)


def _target_of(recommended: Mapping[str, Any]) -> tuple[object, ...]:
    """What a recommendation asks for, without its (ever-changing) wording."""
    keys = ("replicas", "maxBatchSize", "chunkSize", "reasonCode")
    return tuple(recommended.get(k) for k in keys)
