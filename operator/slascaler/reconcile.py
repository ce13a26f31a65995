"""One evaluation of one InferenceSLA: observe → decide → act → status.

1. Parse the spec (a spec the API server let through but the operator cannot use gets
   Ready=False/SpecInvalid, never an exception).
2. Read the target Deployment (`kube.fleet`): its pods by ownership, its engine flags where
   the engine reads them, and who else writes it (another autoscaler or an older
   InferenceSLA, someone resetting its replicas since slascaler's last write, a rollout
   slascaler did not start). A missing Deployment or container, or an API error (no answer
   within the request timeout included), gets Ready=False with the reason, and nothing
   else happens.
3. Settle an action announced by an earlier evaluation that stopped before finishing it
   (`status.pendingAction`): the Deployment carries it → it is recorded as done, with its
   Event; it does not → it was never made, and the status says so.
4. Observe the window (`MetricSource`) and decide (`policy.decide`, pure) with the memory
   kept in the status and, in a shared GPU pool, the grant of the pool's coordinator
   (`GrantSource`, answered by `pools.PoolCoordinator`: at most the replicas the pool
   allows it now).
5. Act (`acting.act`), in mode Auto only, after re-validating the decision: it must keep
   every bound, and a fresh read of the Deployment must match the one decided on in
   everything the decision depends on (else hold, `HoldTargetChanged`). The action is
   announced in the status first (write-ahead: `pendingAction`, with the memory that
   records it), then written as one conditional patch of the Deployment (replicas and
   engine flags together), so an operator killed in between restarts into step 3 instead
   of repeating or forgetting it. A refused write changes nothing and says why; a write
   whose outcome is unknown (no answer) stays pending and is settled by the next
   evaluation.
6. Write the status (with the EngineFlags condition: every flag usable where it lives, or
   each value that is not and the fix) and post Events (`status.choose_event`; a Warning
   Event when the Conflict condition turns True or changes reason, `status.conflict_event`);
   the status keeps the bid the pool's coordinator arbitrates with next (`status.bid`) and
   the grant applied (`status.pool`). The metric source reads the pods Kubernetes says the
   Deployment has (`view.pods`). A status write that finds the InferenceSLA deleted since
   it was read ends the evaluation there: no action, no Event, an info line.

Called by the Kopf wiring and by the simulator's control loop (the same object, over the
in-memory cluster); the clock is passed in.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

from slascaler.acting import Acted, act
from slascaler.kube.actuation import action_event_name, patch_status, post_event
from slascaler.kube.api import Json, KubeAPI, kube_time
from slascaler.kube.errors import KubeError, NotFound
from slascaler.kube.fleet import ContainerMissing, FleetView, TargetMissing, read_fleet
from slascaler.metrics.source import MetricSource
from slascaler.policy import (
    Change,
    Condition,
    Decision,
    PolicyMemory,
    PolicyState,
    Tunables,
    decide,
)
from slascaler.policy.decide import DEFAULT_TUNABLES
from slascaler.policy.decision import Status
from slascaler.policy.pool import PoolGrant
from slascaler.resolution import objective_resolvable
from slascaler.spec import Mode, SpecError, parse_spec
from slascaler.status import (
    PendingAction,
    bid_to_status,
    choose_event,
    conflict_event,
    engine_flags,
    memory_from_status,
    memory_to_status,
    merge_conditions,
    observed,
    pool_to_status,
    recommendation,
    ttft_summary,
)
from slascaler.telemetry import Telemetry

log = logging.getLogger("slascaler.reconcile")

NOT_EVALUATED = (
    "SLAMet", "MetricsAvailable", "CapacityLimited", "Conflict", "EngineFlags",
    "ObjectiveResolvable",
)  # fmt: skip


class Written(Enum):
    """How a status write ended: written, refused, or the InferenceSLA is gone."""

    YES = "yes"
    NO = "no"
    GONE = "gone"


@dataclass(frozen=True)
class Evaluation:
    """What one reconcile saw and did (for logs and tests)."""

    decision: Decision | None
    acted: tuple[Change, ...] = ()
    status: Mapping[str, Any] = field(default_factory=dict)


class GrantSource(Protocol):
    """What the `Reconciler` asks before deciding: this InferenceSLA's share of its GPU pool
    (`pools.PoolCoordinator` answers it)."""

    def grant_for(self, sla: Json) -> PoolGrant | None: ...


class Reconciler:
    """Evaluates one InferenceSLA at a time (`reconcile`), over any `KubeAPI`."""

    def __init__(
        self,
        api: KubeAPI,
        source: MetricSource,
        telemetry: Telemetry,
        clock: Callable[[], float],
        dry_run: bool = False,
        tunables: Tunables = DEFAULT_TUNABLES,
        pools: GrantSource | None = None,
    ) -> None:
        self.api = api
        self.source = source
        self.telemetry = telemetry
        self.clock = clock
        self.dry_run = dry_run
        self.tunables = tunables
        self.pools = pools  # shared GPU pools' grants; None: no pools

    # -- the pipeline -------------------------------------------------------------------

    def reconcile(self, sla: Json, source: MetricSource | None = None) -> Evaluation:
        """One evaluation; `source` (e.g. a batch's answers) replaces `self.source` once."""
        with self.telemetry.duration.time():
            return self._reconcile(sla, source or self.source)

    def _reconcile(self, sla: Json, source: MetricSource) -> Evaluation:
        meta = sla["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        previous: Mapping[str, Any] = sla.get("status") or {}
        now = self.clock()
        try:
            spec = parse_spec(sla.get("spec") or {})
        except SpecError as error:
            self.telemetry.reconciles.labels(namespace, name, "invalid_spec").inc()
            return self._not_evaluated(sla, "SpecInvalid", str(error), now)
        memory, memory_note = memory_from_status(previous.get("memory"))
        pending = PendingAction.from_status(previous.get("pendingAction"))
        written_at = _replicas_written_at(memory)
        try:
            view = read_fleet(self.api, namespace, spec, sla, written_at)
        except TargetMissing as error:
            self.telemetry.reconciles.labels(namespace, name, "target_missing").inc()
            return self._not_evaluated(sla, "TargetNotFound", str(error), now)
        except ContainerMissing as error:
            self.telemetry.reconciles.labels(namespace, name, "target_missing").inc()
            return self._not_evaluated(sla, "ContainerNotFound", str(error), now)
        except KubeError as error:  # e.g. RBAC refusing a read: say so, retry next interval
            self.telemetry.errors.labels("kubernetes").inc()
            self.telemetry.reconciles.labels(namespace, name, "kubernetes_error").inc()
            message = f"reading the target failed: {error}"
            return self._not_evaluated(sla, "KubernetesError", message, now)

        notes = [*view.notes]
        if memory_note:
            notes.append(memory_note)
        last_action = previous.get("lastAction")
        if pending is not None:
            if pending.landed(view.state):
                memory, last_action = pending.memory, pending.last_action()
                self._event(
                    sla, "Normal", pending.reason_code, pending.message, now,
                    name=action_event_name(name, pending.key),
                )  # fmt: skip
                notes.append(f"the action of {pending.time} ({pending.change}) was made")
            else:
                notes.append(
                    f"the action announced at {pending.time} ({pending.change}) was never "
                    "written to the Deployment (the operator stopped first, or the write "
                    "failed): nothing was changed"
                )

        observation = source.observe(namespace, spec, now, pods=view.pods)
        if observation.source_error is not None:
            self.telemetry.errors.labels("metrics").inc()
        grant = self.pools.grant_for(sla) if self.pools is not None else None
        state = PolicyState(view.state, memory, grant)
        decision = decide(spec, observation, state, now, self.tunables)
        notes += observation.derived + observation.notes

        auto = spec.mode is Mode.AUTO and not self.dry_run
        memory_out = decision.memory_if_held
        conditions = {c.type: c for c in decision.conditions}
        conditions["EngineFlags"] = engine_flags_condition(view)
        # Whether the engine's buckets can tell if the objectives are met (metrics side).
        conditions["ObjectiveResolvable"] = objective_resolvable(spec, observation)
        reason_code, reason = decision.reason_code, decision.reason
        outcome = Acted(last_action=last_action)
        announced: list[Written] = []

        def announce(patch: Mapping[str, Any]) -> bool:
            announced.append(self._write_status(namespace, name, patch))
            return announced[-1] is Written.YES

        if decision.acts and auto:
            outcome = act(
                self.api, self.telemetry, announce,
                sla, spec, view, decision, now, last_action, written_at,
            )  # fmt: skip
            if announced and announced[-1] is Written.GONE:  # nothing to act for, nor tell
                return Evaluation(decision)
            if outcome.acted:
                memory_out = decision.memory_if_applied
                for change in outcome.acted:
                    self.telemetry.actions.labels(namespace, name, change.knob).inc()
            elif outcome.pending is not None:
                memory_out = outcome.pending.memory
            if outcome.hold is not None:
                reason_code, reason, failed = outcome.hold
                if failed:
                    conditions["Ready"] = Condition("Ready", Status.FALSE, "ActionFailed", reason)
        why_not_auto = "dry run (SLASCALER_DRY_RUN)" if self.dry_run else "mode Recommend"
        event = choose_event(
            decision, previous.get("recommendation"), bool(outcome.acted), auto,
            outcome.hold, why_not_auto,
        )  # fmt: skip

        stamp = kube_time(now)
        written = outcome.written
        status = {
            "observedGeneration": meta.get("generation"),
            "lastEvaluated": stamp,
            "regime": str(decision.regime),
            "ttft": ttft_summary(decision, spec),
            "replicas": view.state.spec_replicas
            + sum(c.new - (c.old or 0) for c in outcome.acted if c.knob == "replicas"),
            "readyReplicas": _ready(written, view),
            "engineFlags": engine_flags(view.state, outcome.acted) or None,
            "observed": observed(decision, observation, spec, decision.sustainable_rate) or None,
            "recommendation": {
                **recommendation(decision),
                "reasonCode": reason_code,
                "reason": reason,
            },
            "lastAction": outcome.last_action,
            "pendingAction": outcome.pending.to_status() if outcome.pending else None,
            "notes": notes or None,
            "conditions": merge_conditions(
                previous.get("conditions"),
                list(conditions.values()),
                stamp,
                meta.get("generation", 0),
            ),
            "memory": memory_to_status(memory_out),
            "bid": bid_to_status(decision, view.state.spec_replicas),
            "pool": pool_to_status(grant),
        }
        if event is not None and outcome.acted:
            key = PendingAction.of(decision, stamp).key
            self._event(sla, *event, now, name=action_event_name(name, key))
        if self._write_status(namespace, name, status) is Written.GONE:
            return Evaluation(decision, outcome.acted)
        conflict = conflict_event(previous.get("conditions"), decision)
        if conflict is not None:
            self._event(sla, *conflict, now)
        if event is not None and not outcome.acted:
            self._event(sla, *event, now)
        self.telemetry.evaluated(namespace, name, spec, decision, view.state.spec_replicas, status)
        rate = decision.sustainable_rate
        log.info(
            "%s/%s: %s [%s req/s per replica within the SLA]",
            namespace, name, decision.summary(), f"{rate:.2f}" if rate else "unknown",
        )  # fmt: skip
        return Evaluation(decision, outcome.acted, status)

    # -- status and events ------------------------------------------------------------------

    def _not_evaluated(self, sla: Json, reason: str, message: str, now: float) -> Evaluation:
        meta = sla["metadata"]
        previous: Mapping[str, Any] = sla.get("status") or {}
        conditions = [Condition("Ready", Status.FALSE, reason, message)] + [
            Condition(t, Status.UNKNOWN, reason, "not evaluated") for t in NOT_EVALUATED
        ]
        stamp = kube_time(now)
        status = {
            "observedGeneration": meta.get("generation"),
            "lastEvaluated": stamp,
            "regime": "Unknown",
            "bid": None,  # nothing evaluated: nothing to arbitrate with
            "pool": None,
            "conditions": merge_conditions(
                previous.get("conditions"), conditions, stamp, meta.get("generation", 0)
            ),
        }
        if self._write_status(meta["namespace"], meta["name"], status) is Written.GONE:
            return Evaluation(None, (), status)
        was = next(
            (
                c.get("reason")
                for c in previous.get("conditions") or []
                if isinstance(c, Mapping) and c.get("type") == "Ready"
            ),
            None,
        )
        if was != reason:
            self._event(sla, "Warning", reason, message, now)
        log.warning("%s/%s: %s: %s", meta["namespace"], meta["name"], reason, message)
        return Evaluation(None, (), status)

    def _write_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> Written:
        try:
            patch_status(self.api, namespace, name, status)
        except NotFound:  # deleted since it was read: nothing left to tell
            log.info("%s/%s: deleted meanwhile; status not written", namespace, name)
            return Written.GONE
        except KubeError as error:
            self.telemetry.errors.labels("status").inc()
            log.error("%s/%s: status not written: %s", namespace, name, error)
            return Written.NO
        return Written.YES

    def _event(
        self,
        sla: Json,
        event_type: str,
        reason: str,
        message: str,
        now: float,
        name: str | None = None,
    ) -> None:
        try:
            post_event(self.api, sla, event_type, reason, message, now, name)
        except KubeError as error:
            self.telemetry.errors.labels("kubernetes").inc()
            log.error("event %s not posted: %s", reason, error)


def _replicas_written_at(memory: PolicyMemory) -> float | None:
    """When slascaler last wrote spec.replicas, by its memory. (An announced action that may
    not have landed does not count: if it did, slascaler owns the field now anyway.)"""
    known = [t for t in (memory.last_scale_up_at, memory.last_scale_down_at) if t is not None]
    return max(known) if known else None


def engine_flags_condition(view: FleetView) -> Condition:
    """EngineFlags: True when every flag slascaler reads or tunes is usable where it lives;
    False naming each value that is not and the fix (that knob is then left alone)."""
    blocking = [p for p in view.problems if p.blocking]
    if blocking:
        return Condition(
            "EngineFlags", Status.FALSE, blocking[0].reason, "; ".join(p.message for p in blocking)
        )
    read = ", ".join(
        f"{knob} {s.describe()}" if s.where != "default" else f"{knob}: {s.flag} not set"
        for knob, s in view.settings.items()
    )
    container = f"container {view.container.name}" if view.container else "no engine container"
    return Condition(
        "EngineFlags", Status.TRUE, "Readable", f"{container}: {read}" if read else container
    )


def _ready(written: Json | None, view: FleetView) -> int:
    """Ready pods: from the Deployment as written when there was a write, else as read."""
    if written is not None:
        return int((written.get("status") or {}).get("readyReplicas", 0))
    return view.state.ready_replicas
