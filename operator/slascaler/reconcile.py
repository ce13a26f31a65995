"""One evaluation of one InferenceSLA: observe → decide → act → status.

1. Parse the spec (a spec the API server let through but the operator cannot use gets
   Ready=False/SpecInvalid, never an exception).
2. Read the target Deployment (`kube.fleet`); a missing Deployment or container gets
   Ready=False with the reason, and nothing else happens.
3. Observe the window (`MetricSource`) and decide (`policy.decide`, pure) with the memory
   kept in the status.
4. Act, in mode Auto only, after re-validating the decision: it must keep every bound, and a
   fresh read of the Deployment must match the one the decision was made on (else hold,
   `HoldTargetChanged`). The memory that records the action is written to the status *before*
   the action (write-ahead), so an operator killed in between restarts into the cooldown
   instead of repeating the action; if the action fails, the memory without it is restored.
5. Write the status and post Events: one per action, and one whenever the reason for holding
   or recommending changes (so a steady hold is one event, not one per interval), except for
   the holds that only pace an earlier action (cooldowns, pods starting, a rollout).

Called by the Kopf timer in `wiring` and by the e2e tests; the clock is passed in.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client.exceptions import ApiException

from slascaler.engines import ENGINES
from slascaler.kube.actuation import TargetChanged, patch_status, post_event, scale, set_flags
from slascaler.kube.clients import Clients, Json, describe, kube_time
from slascaler.kube.fleet import ContainerMissing, FleetView, TargetMissing, read_fleet
from slascaler.metrics.source import MetricSource
from slascaler.policy import Change, Condition, Decision, PolicyState, Tunables, decide
from slascaler.policy.decide import DEFAULT_TUNABLES
from slascaler.policy.decision import Status
from slascaler.spec import Mode, SLASpec, SpecError, parse_spec
from slascaler.status import (
    engine_flags,
    memory_from_status,
    memory_to_status,
    merge_conditions,
    observed,
    recommendation,
    ttft_summary,
)
from slascaler.telemetry import Telemetry

log = logging.getLogger("slascaler.reconcile")

NOT_EVALUATED = ("SLAMet", "MetricsAvailable", "CapacityLimited", "Conflict")


@dataclass(frozen=True)
class Evaluation:
    """What one reconcile saw and did (for logs and tests)."""

    decision: Decision | None
    acted: tuple[Change, ...] = ()
    status: Mapping[str, Any] = field(default_factory=dict)


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


class Reconciler:
    def __init__(
        self,
        clients: Clients,
        source: MetricSource,
        telemetry: Telemetry,
        clock: Callable[[], float],
        dry_run: bool = False,
        tunables: Tunables = DEFAULT_TUNABLES,
    ) -> None:
        self.clients = clients
        self.source = source
        self.telemetry = telemetry
        self.clock = clock
        self.dry_run = dry_run
        self.tunables = tunables

    # -- the pipeline -------------------------------------------------------------------

    def reconcile(self, sla: Json) -> Evaluation:
        with self.telemetry.duration.time():
            return self._reconcile(sla)

    def _reconcile(self, sla: Json) -> Evaluation:
        meta = sla["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        previous: Mapping[str, Any] = sla.get("status") or {}
        now = self.clock()
        try:
            spec = parse_spec(sla.get("spec") or {})
        except SpecError as error:
            self.telemetry.reconciles.labels(namespace, name, "invalid_spec").inc()
            return self._not_evaluated(sla, "SpecInvalid", str(error), now)
        try:
            view = read_fleet(self.clients, namespace, spec)
        except TargetMissing as error:
            self.telemetry.reconciles.labels(namespace, name, "target_missing").inc()
            return self._not_evaluated(sla, "TargetNotFound", str(error), now)
        except ContainerMissing as error:
            self.telemetry.reconciles.labels(namespace, name, "target_missing").inc()
            return self._not_evaluated(sla, "ContainerNotFound", str(error), now)
        except ApiException as error:  # e.g. RBAC refusing a read: say so, retry next interval
            self.telemetry.errors.labels("kubernetes").inc()
            self.telemetry.reconciles.labels(namespace, name, "kubernetes_error").inc()
            message = f"reading the target failed: {describe(error)}"
            return self._not_evaluated(sla, "KubernetesError", message, now)

        memory, memory_note = memory_from_status(previous.get("memory"))
        observation = self.source.observe(namespace, spec, now)
        if observation.source_error is not None:
            self.telemetry.errors.labels("metrics").inc()
        decision = decide(spec, observation, PolicyState(view.state, memory), now, self.tunables)
        notes = [*view.notes, *observation.derived]
        if memory_note:
            notes.append(memory_note)

        auto = spec.mode is Mode.AUTO and not self.dry_run
        memory_out = decision.memory_if_held
        acted: tuple[Change, ...] = ()
        last_action = previous.get("lastAction")
        conditions = {c.type: c for c in decision.conditions}
        reason_code, reason = decision.reason_code, decision.reason
        event: tuple[str, str, str] | None = None

        if decision.acts and auto:
            outcome = self._act(sla, spec, view, decision, now)
            acted, last_action, hold = outcome
            if acted:
                memory_out = decision.memory_if_applied
                event = ("Normal", decision.reason_code, _action_message(decision))
                for change in acted:
                    self.telemetry.actions.labels(namespace, name, change.knob).inc()
            elif hold is not None:
                reason_code, reason, failed = hold
                if failed:
                    conditions["Ready"] = Condition("Ready", Status.FALSE, "ActionFailed", reason)
                event = ("Warning" if failed else "Normal", reason_code, reason)
        elif decision.acts:
            why = "dry run (SLASCALER_DRY_RUN)" if self.dry_run else "mode Recommend"
            message = f"would change {_changes(decision.changes)} ({why}): {decision.reason}"
            if _target_of(previous.get("recommendation")) != _target_of(recommendation(decision)):
                event = ("Normal", f"Recommend{decision.reason_code}", message)
        elif (
            decision.reason_code != "NoChange"
            and not decision.pacing
            and (previous.get("recommendation") or {}).get("reasonCode") != decision.reason_code
        ):
            event = ("Normal", decision.reason_code, decision.reason)

        stamp = kube_time(now)
        status = {
            "observedGeneration": meta.get("generation"),
            "lastEvaluated": stamp,
            "regime": str(decision.regime),
            "ttft": ttft_summary(decision, spec),
            "replicas": view.state.spec_replicas
            + sum(c.new - (c.old or 0) for c in acted if c.knob == "replicas"),
            "readyReplicas": view.state.ready_replicas,
            "engineFlags": engine_flags(view.state, acted) or None,
            "observed": observed(decision, observation, spec, memory_out.service_rate) or None,
            "recommendation": {
                **recommendation(decision),
                "reasonCode": reason_code,
                "reason": reason,
            },
            "lastAction": last_action,
            "notes": notes or None,
            "conditions": merge_conditions(
                previous.get("conditions"),
                list(conditions.values()),
                stamp,
                meta.get("generation", 0),
            ),
            "memory": memory_to_status(memory_out),
        }
        self._write_status(namespace, name, status)
        if event is not None:
            self._event(sla, *event, now)
        self.telemetry.evaluated(namespace, name, spec, decision, view.state.spec_replicas, status)
        rate = memory_out.service_rate
        log.info(
            "%s/%s: %s [μ %s req/s per replica]",
            namespace, name, decision.summary(), f"{rate:.2f}" if rate else "unknown",
        )  # fmt: skip
        return Evaluation(decision, acted, status)

    # -- acting ---------------------------------------------------------------------------

    def _act(
        self, sla: Json, spec: SLASpec, view: FleetView, decision: Decision, now: float
    ) -> tuple[tuple[Change, ...], Any, tuple[str, str, bool] | None]:
        """(changes made, lastAction, (hold code, reason, failed) when nothing was made)."""
        meta = sla["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        previous_action = (sla.get("status") or {}).get("lastAction")
        broken = validate_decision(decision, spec)
        if broken is not None:  # a bug in the policy: refuse it loudly, never act on it
            log.error("%s/%s: decision rejected: %s", namespace, name, broken)
            return (), previous_action, ("DecisionRejected", f"decision rejected: {broken}", True)
        try:
            fresh = read_fleet(self.clients, namespace, spec)
        except (TargetMissing, ContainerMissing, ApiException) as error:
            return (
                (),
                previous_action,
                ("HoldTargetChanged", f"re-reading the target: {error}", False),
            )
        if not fresh.same_as(view):
            return (
                (),
                previous_action,
                (
                    "HoldTargetChanged",
                    "the Deployment changed while deciding: deciding again next window",
                    False,
                ),
            )
        action = {
            "time": kube_time(now),
            "change": _changes(decision.changes),
            "reasonCode": decision.reason_code,
            "reason": decision.reason,
        }
        # Write-ahead: a restart after this point sees the action in the memory.
        self._write_status(
            namespace,
            name,
            {"memory": memory_to_status(decision.memory_if_applied), "lastAction": action},
        )
        flavour = ENGINES[spec.engine]
        try:
            flags = {}
            for change in decision.changes:
                if change.knob == "maxBatchSize":
                    flags[flavour.max_batch_flag] = change.new
                elif change.knob == "chunkSize":
                    flags[flavour.chunk_flag] = change.new
            for change in decision.changes:
                if change.knob == "replicas":
                    scale(
                        self.clients,
                        namespace,
                        spec.target.name,
                        change.new,
                        fresh.state.spec_replicas,
                    )
            if flags:
                set_flags(
                    self.clients,
                    namespace,
                    spec.target.name,
                    fresh.container,
                    flags,
                    fresh.command_line,
                )
        except TargetChanged as error:
            self._write_status(namespace, name, {"lastAction": previous_action})
            return (), previous_action, ("HoldTargetChanged", f"not acting: {error}", False)
        except ApiException as error:
            self.telemetry.errors.labels("kubernetes").inc()
            self._write_status(namespace, name, {"lastAction": previous_action})
            return (
                (),
                previous_action,
                (
                    "ActionFailed",
                    f"could not change {_changes(decision.changes)}: {describe(error)}",
                    True,
                ),
            )
        return decision.changes, action, None

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
            "conditions": merge_conditions(
                previous.get("conditions"), conditions, stamp, meta.get("generation", 0)
            ),
        }
        self._write_status(meta["namespace"], meta["name"], status)
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

    def _write_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        try:
            patch_status(self.clients, namespace, name, status)
        except ApiException as error:
            self.telemetry.errors.labels("status").inc()
            log.error("%s/%s: status not written: %s", namespace, name, describe(error))

    def _event(self, sla: Json, event_type: str, reason: str, message: str, now: float) -> None:
        try:
            post_event(self.clients, sla, event_type, reason, message, now)
        except ApiException as error:
            self.telemetry.errors.labels("kubernetes").inc()
            log.error("event %s not posted: %s", reason, describe(error))


def _target_of(recommended: object) -> tuple[object, ...]:
    """What a recommendation asks for, without its (ever-changing) wording."""
    if not isinstance(recommended, Mapping):
        return ()
    keys = ("replicas", "maxBatchSize", "chunkSize", "reasonCode")
    return tuple(recommended.get(k) for k in keys)


def _changes(changes: tuple[Change, ...]) -> str:
    return ", ".join(str(c) for c in changes)


def _action_message(decision: Decision) -> str:
    """The changes, then the reason without repeating them."""
    parts = decision.reason.split("; ")
    for change in decision.changes:
        parts = [p.removeprefix(f"{change}: ") for p in parts]
    return f"{_changes(decision.changes)}: {'; '.join(parts)}"
