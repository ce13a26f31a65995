"""Every reason code a decision can carry: what it did, or why it held.

A `Reason` is a CamelCase code that becomes the status's `reasonCode`, the Event's reason
and the `reason` label of `slascaler_decisions_total`. Action reasons name what changed
(`ScaleUp`, `RaiseChunkForPrefill`, …); hold reasons name the step that stopped a change
(`HoldStabilizing`, `HoldKnobCooldown`, …). `PACING` lists the holds that only wait for an
earlier action to take effect: every action is followed by them, so they go to the status,
not to Events.

Read by the policy, the status and the Events; pure data.
"""

from __future__ import annotations

from enum import StrEnum


class Reason(StrEnum):
    NO_CHANGE = "NoChange"
    # Actions.
    SCALE_UP = "ScaleUp"
    SCALE_DOWN = "ScaleDown"
    BOUNDS_ENFORCED = "BoundsEnforced"
    RAISE_CHUNK_FOR_PREFILL = "RaiseChunkForPrefill"
    LOWER_BATCH_FOR_ITL = "LowerBatchForITL"
    LOWER_CHUNK_FOR_ITL = "LowerChunkForITL"
    RAISE_BATCH_AT_CAPACITY = "RaiseBatchAtCapacity"
    SURGE_FOR_ROLLOUT = "SurgeForRollout"
    DROP_PENDING_PODS = "DropPendingPods"
    # A shared GPU pool (GPUPool) gave this SLA's replicas to another member.
    PREEMPTED = "Preempted"
    # Holds with a cause of their own (each is an Event when it starts).
    HOLD_CONFLICT = "HoldConflict"
    HOLD_SCALED_TO_ZERO = "HoldScaledToZero"
    HOLD_REPLICAS_OVERWRITTEN = "HoldReplicasOverwritten"
    HOLD_FOREIGN_ROLLOUT = "HoldForeignRollout"
    HOLD_METRICS_UNAVAILABLE = "HoldMetricsUnavailable"
    HOLD_METRICS_STALE = "HoldMetricsStale"
    HOLD_METRICS_MISSING = "HoldMetricsMissing"
    HOLD_TOO_FEW_REQUESTS = "HoldTooFewRequests"
    CAPACITY_LIMITED = "CapacityLimited"
    PREFILL_INFEASIBLE = "PrefillInfeasible"
    PREFILL_BOUND_NO_KNOB = "PrefillBoundNoKnob"
    PREFILL_BOUND_UNKNOWN_CHUNK = "PrefillBoundUnknownChunk"
    BATCH_NOT_BINDING = "BatchNotBinding"
    BATCH_AT_MAX = "BatchAtMax"
    HOLD_NO_ITL_HEADROOM = "HoldNoITLHeadroom"
    HOLD_NO_ROLLOUT_ROOM = "HoldNoRolloutRoom"
    HOLD_SHORT_OF_CAPACITY = "HoldShortOfCapacity"
    # A shared GPU pool grants no more replicas (yet): the budget is exhausted.
    BUDGET_EXHAUSTED = "BudgetExhausted"
    # Holds that pace an earlier action (status only).
    HOLD_PODS_STARTING = "HoldPodsStarting"
    HOLD_SCALE_UP_COOLDOWN = "HoldScaleUpCooldown"
    HOLD_KNOB_COOLDOWN = "HoldKnobCooldown"
    HOLD_ROLLOUT = "HoldRollout"
    # A hold of its own: scale-down waits for the stabilization window.
    HOLD_STABILIZING = "HoldStabilizing"
    # Set by the operator around the policy (reconcile), never by `decide`.
    HOLD_TARGET_CHANGED = "HoldTargetChanged"
    ACTION_FAILED = "ActionFailed"
    DECISION_REJECTED = "DecisionRejected"


PACING = frozenset(
    {
        Reason.HOLD_PODS_STARTING,
        Reason.HOLD_SCALE_UP_COOLDOWN,
        Reason.HOLD_KNOB_COOLDOWN,
        Reason.HOLD_ROLLOUT,
    }
)
# Kept for the e2e suite's name of the set.
PACING_HOLDS = frozenset(str(r) for r in PACING)
