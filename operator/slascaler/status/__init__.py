"""The InferenceSLA's status as data: what an evaluation writes, and what it reads back.

- `status.memory`: the policy memory kept in the status (`memory_to_status`,
  `memory_from_status`: an unreadable memory gives a fresh one and a note, never an
  exception).
- `status.report`: the evaluation's figures (`ttft_summary`, `observed`, `recommendation`,
  `engine_flags`) and its conditions (`merge_conditions`: a condition's
  `lastTransitionTime` only moves when its status does).
- `status.pending`: `PendingAction`, an action announced in the status before it is written
  to the Deployment (write-ahead), settled by the next evaluation.
- `status.events`: which Event an evaluation posts (`choose_event`, `conflict_event`).
- `status.bid`: a shared GPU pool member's bid (`bid_to_status`, `bid_from_status`) and the
  grant it applied (`pool_to_status`).

Pure (no I/O; the time is an argument, already formatted as Kubernetes writes it). Called by
`reconcile`, `acting`, `pools` and `pool_spec`.
"""

from slascaler.status.bid import Bid, bid_from_status, bid_to_status, pool_to_status
from slascaler.status.events import CONFLICT_HOLDS, choose_event, conflict_event
from slascaler.status.memory import MEMORY_FORMAT, memory_from_status, memory_to_status
from slascaler.status.pending import KNOB_FIELDS, PendingAction, action_message, changes_text
from slascaler.status.report import (
    engine_flags,
    merge_conditions,
    observed,
    recommendation,
    ttft_summary,
)

__all__ = [
    "CONFLICT_HOLDS",
    "KNOB_FIELDS",
    "MEMORY_FORMAT",
    "Bid",
    "PendingAction",
    "action_message",
    "bid_from_status",
    "bid_to_status",
    "changes_text",
    "choose_event",
    "conflict_event",
    "engine_flags",
    "memory_from_status",
    "memory_to_status",
    "merge_conditions",
    "observed",
    "pool_to_status",
    "recommendation",
    "ttft_summary",
]
