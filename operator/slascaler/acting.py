"""Acting on a decision in mode Auto, so that a restart never repeats nor forgets an action.

`act` re-validates the decision (it must keep every bound of the spec: a decision that does
not is a bug in the policy, refused loudly) and re-reads the Deployment: it must match the
one decided on in everything the decision depends on, else it holds (`HoldTargetChanged`).
Then it announces the action in the status first (write-ahead: `status.pendingAction`, with
the memory that records it) and writes it as one conditional patch of the Deployment
(replicas and engine flags together). A refused write changes nothing and says why; a write
whose outcome is unknown (no answer) stays pending and is settled by the next evaluation.
The result (`Acted`) says what was changed, or why not.

Called by `reconcile.Reconciler`, which passes how to write the status (`announce`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from slascaler.engine_args import EngineArgsError
from slascaler.kube.actuation import TargetChanged, apply_changes
from slascaler.kube.api import Json, KubeAPI, kube_time
from slascaler.kube.errors import KubeError, Unreachable
from slascaler.kube.fleet import ContainerMissing, FleetView, TargetMissing, read_fleet
from slascaler.policy import Change, Decision, Reason
from slascaler.spec import SLASpec
from slascaler.status import PendingAction
from slascaler.telemetry import Telemetry

log = logging.getLogger("slascaler.reconcile")


@dataclass(frozen=True)
class Acted:
    """How acting on a decision went."""

    acted: tuple[Change, ...] = ()
    last_action: Any = None
    hold: tuple[Reason, str, bool] | None = None  # (reason code, reason, failed)
    pending: PendingAction | None = None  # announced, outcome unknown: settled next time
    written: Json | None = None  # the Deployment as the API server wrote it


def validate_decision(decision: Decision, spec: SLASpec) -> str | None:
    """Why the decision breaks a bound of the spec, or None; checked again before acting."""
    if not spec.replicas.contains(decision.replicas):
        return f"replicas {decision.replicas} outside [{spec.replicas.min}, {spec.replicas.max}]"
    for knob, bounds, value in (
        ("maxBatchSize", spec.max_batch_size, decision.max_batch_size),
        ("chunkSize", spec.chunk_size, decision.chunk_size),
    ):
        changed = any(c.knob == knob for c in decision.changes)
        if changed and (bounds is None or value is None or not bounds.contains(value)):
            return f"{knob} {value} outside spec.knobs.{knob}"
    return None


def act(
    api: KubeAPI,
    telemetry: Telemetry,
    announce: Callable[[Mapping[str, Any]], bool],
    sla: Json,
    spec: SLASpec,
    view: FleetView,
    decision: Decision,
    now: float,
    last_action: Any,
    written_at: float | None,
) -> Acted:
    """Make `decision`'s changes to the Deployment read as `view`, or say why not.

    `announce` writes a status patch (the pending action) and says whether it was written;
    `written_at` is when slascaler last wrote the replicas (for reading who else writes them).
    """
    meta = sla["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    broken = validate_decision(decision, spec)
    if broken is not None:  # a bug in the policy: refuse it loudly, never act on it
        log.error("%s/%s: decision rejected: %s", namespace, name, broken)
        return Acted(
            last_action=last_action,
            hold=(Reason.DECISION_REJECTED, f"decision rejected: {broken}", True),
        )

    def reread() -> FleetView:
        return read_fleet(api, namespace, spec, sla, written_at)

    try:
        fresh = reread()
    except (TargetMissing, ContainerMissing, KubeError) as error:
        return Acted(
            last_action=last_action,
            hold=(Reason.HOLD_TARGET_CHANGED, f"re-reading the target: {error}", False),
        )
    if not fresh.same_as(view):
        return Acted(
            last_action=last_action,
            hold=(
                Reason.HOLD_TARGET_CHANGED,
                "the Deployment changed while deciding: deciding again next window",
                False,
            ),
        )
    pending = PendingAction.of(decision, kube_time(now))
    # Write-ahead: a restart after this point finds the action and settles it.
    if not announce({"pendingAction": pending.to_status()}):
        return Acted(
            last_action=last_action,
            hold=(
                Reason.ACTION_FAILED,
                "not acting: the status could not be written first (see the operator's "
                "log), and an action the status does not announce could be repeated",
                True,
            ),
        )
    knobs: dict[str, int] = {c.knob: c.new for c in decision.changes if c.knob != "replicas"}
    replicas = next((c.new for c in decision.changes if c.knob == "replicas"), None)
    try:
        written = apply_changes(api, namespace, spec.target.name, fresh, replicas, knobs, reread)
    except EngineArgsError as error:  # a knob the view cannot set: a bug, refused loudly
        log.error("%s/%s: not acting: %s", namespace, name, error)
        return Acted(
            last_action=last_action,
            hold=(Reason.ACTION_FAILED, f"not acting: {error}", True),
        )
    except TargetChanged as error:
        return Acted(
            last_action=last_action,
            hold=(Reason.HOLD_TARGET_CHANGED, f"not acting: {error}", False),
        )
    except (TargetMissing, ContainerMissing) as error:
        return Acted(
            last_action=last_action,
            hold=(Reason.HOLD_TARGET_CHANGED, f"not acting: {error}", False),
        )
    except Unreachable as error:
        telemetry.errors.labels("kubernetes").inc()
        return Acted(
            last_action=last_action,
            hold=(
                Reason.ACTION_FAILED,
                f"writing {pending.change} got no answer ({error}): whether it was made is "
                "checked on the next evaluation",
                True,
            ),
            pending=pending,
        )
    except KubeError as error:
        telemetry.errors.labels("kubernetes").inc()
        return Acted(
            last_action=last_action,
            hold=(Reason.ACTION_FAILED, f"could not change {pending.change}: {error}", True),
        )
    return Acted(decision.changes, pending.last_action(), None, None, written)
