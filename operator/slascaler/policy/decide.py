"""The decision rules: from one observation to a safe, explained Decision.

Ordered steps, each with a machine-readable reason code (as HPA's normalisation steps):

1. **Conflict** — another autoscaler (or an older InferenceSLA) targets the Deployment: leave
   it alone entirely. A Deployment scaled to 0 is left alone too (scaling disabled, as the
   HPA treats it). Someone else overwrote spec.replicas after slascaler's last write: no
   replica write for a back-off period that doubles while the fight goes on (not fought).
2. **Bounds** — replicas and knobs are brought into the spec's bounds (the only change made
   without metrics: it is the user's declared intent, not an inference from data); knobs not
   while a rollout slascaler did not start is in progress.
3. **Data** — no observation, missing or NaN series, a stale window or too few requests:
   hold, and say which.
4. **Regime** (`model.regime`) selects the rule:
   - QueueBound → scale out to the count the queueing model needs (rate-limited; not while
     pods of the last scale-up are starting, nor within the scale-up cooldown); at the
     replica limit or with unschedulable pods → CapacityLimited, and raise max batch size
     if the batch limit is what binds and ITL has headroom;
   - PrefillBound → never add replicas; raise chunk size (sized by `model.chunking`) if ITL
     has headroom, or report the SLA infeasible at the largest chunk;
   - DecodeBound → lower max batch size (sized by the fitted latency-vs-batch line) or chunk
     size when TTFT has headroom, else add a replica;
   - Healthy / Idle → scale in after the stabilization window, to the highest count
     recommended during it, never below min and at most a quarter at a time.
5. **Knob rate limit** — knob changes roll the Deployment: only after the knob cooldown and
   never during a rollout.

Called by the Kopf wiring and the simulator's control loop.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from slascaler.model.batching import LinearFit, fit_line, largest_batch_within
from slascaler.model.chunking import (
    candidate_chunk_sizes,
    choose_chunk_size,
    estimate_step_cost,
)
from slascaler.model.observation import Observation
from slascaler.model.queueing import (
    QueueModel,
    calibrate_service_rate,
    replicas_needed,
    service_distribution,
)
from slascaler.model.regime import Regime, RegimeAnalysis, analyze_observation
from slascaler.policy.decision import Change, Condition, Decision, Knob, Status
from slascaler.policy.state import PolicyMemory, PolicyState
from slascaler.policy.tunables import Tunables
from slascaler.spec import Bounds, SLASpec

DEFAULT_TUNABLES = Tunables()


@dataclass
class _Draft:
    """The decision being built; local to one call of `decide`."""

    spec: SLASpec
    state: PolicyState
    now: float
    tunables: Tunables
    replicas: int
    max_batch_size: int | None
    chunk_size: int | None
    regime: Regime = Regime.UNKNOWN
    reason_code: str = "NoChange"
    reasons: list[str] = field(default_factory=list)
    conditions: dict[str, Condition] = field(default_factory=dict)
    analysis: RegimeAnalysis | None = None
    memory: PolicyMemory = field(default_factory=PolicyMemory)
    replicas_frozen: str | None = None  # why replicas may not be written now (back-off)

    def say(self, code: str, reason: str) -> None:
        """Record a reason; the first code that is not a plain note names the decision."""
        if self.reason_code == "NoChange":
            self.reason_code = code
        self.reasons.append(reason)

    def note(self, reason: str) -> None:
        """Record context for the reason without naming the decision by it."""
        self.reasons.append(reason)

    def set(self, condition_type: str, status: Status, reason: str, message: str) -> None:
        self.conditions[condition_type] = Condition(condition_type, status, reason, message)

    def flag(
        self, condition_type: str, status: Status, reason: str, code: str, message: str
    ) -> None:
        """Set a condition and give the same message as the decision's reason."""
        self.set(condition_type, status, reason, message)
        self.say(code, message)

    def finish(self) -> Decision:
        fleet = self.state.fleet
        if self.replicas_frozen is not None and self.replicas != fleet.spec_replicas:
            wanted, self.replicas = self.replicas, fleet.spec_replicas
            self.reason_code = "HoldReplicasOverwritten"
            self.reasons.insert(
                0, f"would set replicas {fleet.spec_replicas}→{wanted}, but {self.replicas_frozen}"
            )
        changes: list[Change] = []
        if self.replicas != fleet.spec_replicas:
            changes.append(Change("replicas", fleet.spec_replicas, self.replicas))
        knobs: tuple[tuple[Knob, int | None, int | None], ...] = (
            ("maxBatchSize", fleet.max_batch_size, self.max_batch_size),
            ("chunkSize", fleet.chunk_size, self.chunk_size),
        )
        for knob, old, new in knobs:
            if new is not None and new != old:
                changes.append(Change(knob, old, new))
        applied = self.memory
        if self.replicas > fleet.spec_replicas:
            applied = replace(applied, last_scale_up_at=self.now)
        elif self.replicas < fleet.spec_replicas:
            applied = replace(applied, last_scale_down_at=self.now)
        if any(c.knob != "replicas" for c in changes):
            applied = replace(applied, last_knob_change_at=self.now)
        for condition_type in ("Conflict", "MetricsAvailable", "CapacityLimited"):
            if condition_type not in self.conditions:
                self.set(condition_type, Status.FALSE, "AsExpected", "")
        if "SLAMet" not in self.conditions:
            self.set("SLAMet", Status.UNKNOWN, "NoData", "no window to judge the SLA by")
        self.set("Ready", Status.TRUE, "Reconciled", "the policy evaluated this window")
        return Decision(
            regime=self.regime,
            replicas=self.replicas,
            max_batch_size=self.max_batch_size,
            chunk_size=self.chunk_size,
            reason_code=self.reason_code,
            reason="; ".join(self.reasons) or "no change needed",
            conditions=tuple(self.conditions.values()),
            changes=tuple(changes),
            memory_if_applied=applied,
            memory_if_held=self.memory,
            analysis=self.analysis,
        )


def _clamp_knob(bounds: Bounds | None, value: int | None) -> int | None:
    if bounds is None or value is None:
        return value
    return bounds.clamp(value)


def decide(
    spec: SLASpec,
    observation: Observation | None,
    state: PolicyState,
    now: float,
    tunables: Tunables = DEFAULT_TUNABLES,
) -> Decision:
    """The decision for one window. Pure: the same inputs always give the same decision."""
    fleet = state.fleet
    draft = _Draft(
        spec=spec,
        state=state,
        now=now,
        tunables=tunables,
        replicas=fleet.spec_replicas,
        max_batch_size=fleet.max_batch_size,
        chunk_size=fleet.chunk_size,
        memory=state.memory,
    )
    if fleet.other_autoscaler:
        if fleet.other_autoscaler.startswith("InferenceSLA/"):
            message = (
                f"{fleet.other_autoscaler} also targets {spec.target.name} and is older: it "
                "holds this Deployment's SLA, and this InferenceSLA changes nothing until that "
                "one is deleted or retargeted"
            )
            draft.flag("Conflict", Status.TRUE, "OtherInferenceSLA", "HoldConflict", message)
        else:
            message = (
                f"{fleet.other_autoscaler} also targets {spec.target.name}; slascaler leaves "
                "it alone until that autoscaler is removed"
            )
            draft.flag("Conflict", Status.TRUE, "OtherAutoscaler", "HoldConflict", message)
        return draft.finish()
    if fleet.spec_replicas == 0:
        draft.say(
            "HoldScaledToZero",
            f"{spec.target.name} is scaled to 0 replicas: scaling is disabled, as the HPA "
            "treats 0; scale it to 1 or more for slascaler to hold its SLA again",
        )
        return draft.finish()
    _replicas_backoff(draft)

    _enforce_bounds(draft)
    if not _data_usable(draft, observation):
        return draft.finish()
    assert observation is not None  # _data_usable returned False otherwise
    analysis = analyze_observation(
        observation,
        percentile=spec.ttft.percentile,
        objective_ms=spec.ttft.threshold_ms,
        itl_percentile=spec.itl.percentile if spec.itl else None,
        itl_objective_ms=spec.itl.threshold_ms if spec.itl else None,
        min_requests=tunables.min_requests,
    )
    draft.analysis = analysis
    draft.regime = analysis.regime
    if analysis.regime is Regime.UNKNOWN:
        draft.set("MetricsAvailable", Status.TRUE, "Available", "")
        draft.set("SLAMet", Status.UNKNOWN, "TooFewRequests", analysis.explanation)
        draft.say("HoldTooFewRequests", analysis.explanation)
        return draft.finish()
    draft.set("MetricsAvailable", Status.TRUE, "Available", "")
    _judge_sla(draft, analysis)

    service_rate = _calibrated_service_rate(draft, observation, analysis)
    pods = max(1, observation.reporting_pods or fleet.ready_replicas)
    batch_point = None
    if math.isfinite(analysis.itl_ms) and math.isfinite(observation.running):
        batch_point = (observation.running / pods, analysis.itl_ms)

    recommendation = _apply_regime_rule(draft, observation, analysis, service_rate)
    draft.memory = draft.memory.remembering(
        now=now,
        recommendation=recommendation,
        window_s=spec.behavior.scale_down_stabilization_s,
        batch_point=batch_point,
        service_rate=service_rate,
        keep_points=tunables.batch_points_kept,
    )
    _stabilize_scale_down(draft)
    return draft.finish()


def _replicas_backoff(draft: _Draft) -> None:
    """Someone else wrote spec.replicas after slascaler did: back off, do not fight.

    An overwrite not answered yet (none was, or slascaler wrote replicas again since the last
    one) starts a back-off of `replicas_backoff_s`, doubled (up to the maximum) when the
    fight resumes within twice the last period after it ended. While it lasts, the replicas
    stay as they are (`finish`) and Conflict says who writes them and the fix.
    """
    fleet, memory, tunables, now = draft.state.fleet, draft.memory, draft.tunables, draft.now
    who = fleet.replicas_overwritten_by
    until, period = memory.replicas_backoff_until, memory.replicas_backoff_s
    if who is not None and (until is None or now >= until):
        seen = memory.replicas_overwrite_seen_at
        writes = [t for t in (memory.last_scale_up_at, memory.last_scale_down_at) if t is not None]
        if seen is None or (writes and max(writes) > seen):
            length = tunables.replicas_backoff_s
            if until is not None and period is not None and now - until < 2 * period:
                length = min(tunables.replicas_backoff_max_s, 2 * period)
            draft.memory = replace(
                memory,
                replicas_backoff_until=now + length,
                replicas_backoff_s=length,
                replicas_overwrite_seen_at=now,
            )
    until = draft.memory.replicas_backoff_until
    if until is None or now >= until:
        return
    writer = who or "another field manager"
    draft.replicas_frozen = (
        f"{writer} set spec.replicas of {draft.spec.target.name} after slascaler did: "
        f"slascaler does not write replicas for {until - now:.0f} s more instead of "
        f"fighting it; to let slascaler scale, drop `replicas` from what {writer} applies (as "
        "with an HPA), or delete this InferenceSLA"
    )
    draft.set("Conflict", Status.TRUE, "ReplicasOverwritten", draft.replicas_frozen)


def _enforce_bounds(draft: _Draft) -> None:
    spec, fleet = draft.spec, draft.state.fleet
    bounded = spec.replicas.clamp(fleet.spec_replicas)
    if bounded != fleet.spec_replicas:
        draft.replicas = bounded
        draft.say(
            "BoundsEnforced",
            f"replicas {fleet.spec_replicas} outside spec.replicas "
            f"[{spec.replicas.min}, {spec.replicas.max}]: set to {bounded}",
        )
    for knob, bounds, value in (
        ("maxBatchSize", spec.max_batch_size, fleet.max_batch_size),
        ("chunkSize", spec.chunk_size, fleet.chunk_size),
    ):
        clamped = _clamp_knob(bounds, value)
        if clamped != value and bounds is not None and fleet.foreign_rollout:
            draft.say(
                "HoldForeignRollout",
                f"{knob} {value} outside spec.knobs.{knob} [{bounds.min}, {bounds.max}], but a "
                "rollout slascaler did not start is in progress: the flag is changed once it "
                "has finished (a template change now would stack on it)",
            )
            continue
        if clamped != value and bounds is not None:
            draft.say(
                "BoundsEnforced",
                f"{knob} {value} outside spec.knobs.{knob} [{bounds.min}, {bounds.max}]: "
                f"set to {clamped}",
            )
            if knob == "maxBatchSize":
                draft.max_batch_size = clamped
            else:
                draft.chunk_size = clamped


def _data_usable(draft: _Draft, observation: Observation | None) -> bool:
    """False (and a hold with the reason) when the window cannot be decided on."""
    if observation is None:
        message = "no observation could be made (metrics source unreachable?)"
        draft.flag(
            "MetricsAvailable", Status.FALSE, "NoObservation", "HoldMetricsUnavailable", message
        )
        return False
    if observation.source_error is not None:
        draft.flag(
            "MetricsAvailable",
            Status.FALSE,
            "SourceUnavailable",
            "HoldMetricsUnavailable",
            f"holding: {observation.source_error}",
        )
        return False
    age = draft.now - observation.observed_at
    if age > draft.tunables.max_observation_age_s:
        message = (
            f"the latest observation is {age:.0f} s old "
            f"(limit {draft.tunables.max_observation_age_s:.0f} s)"
        )
        draft.flag("MetricsAvailable", Status.FALSE, "Stale", "HoldMetricsStale", message)
        return False
    missing = observation.missing_inputs(need_itl=draft.spec.itl is not None)
    if missing:
        message = "; ".join(missing)
        draft.set("MetricsAvailable", Status.FALSE, "MissingSeries", message)
        draft.say("HoldMetricsMissing", f"holding: {message}")
        return False
    return True


def _judge_sla(draft: _Draft, analysis: RegimeAnalysis) -> None:
    if analysis.regime is Regime.IDLE:
        draft.set("SLAMet", Status.TRUE, "Idle", "no requests in the window")
        return
    if analysis.ttft_over or analysis.itl_over:
        draft.set("SLAMet", Status.FALSE, "ObjectiveMissed", analysis.explanation)
    else:
        draft.set("SLAMet", Status.TRUE, "ObjectivesMet", analysis.explanation)


def _calibrated_service_rate(
    draft: _Draft, observation: Observation, analysis: RegimeAnalysis
) -> float | None:
    """μ per replica from this window's queueing, or the remembered one.

    When the replicas' batches are full over the window (requests running per replica at the
    max batch size) every slot is busy: the fleet serves at capacity, c·μ, so μ = served
    rate / c. That holds while a backlog builds up and while it drains. Inverting the
    steady-state mean wait instead would read a transient backlog's wait as a slow server
    and under-estimate μ, over-sizing the scale-up and, remembered, delaying the scale-in.
    Waiting requests alone do not show saturation: a backlog queued at one replica stays
    there (requests are routed on arrival) while the others have free slots.
    The inversion is used for the mild queueing of a fleet below saturation.
    """
    servers = observation.reporting_pods or draft.state.fleet.ready_replicas
    batch = draft.state.fleet.max_batch_size
    running = observation.running / servers if servers > 0 else math.nan
    saturated = (
        batch is not None
        and math.isfinite(running)
        and running >= draft.tunables.batch_saturation * batch
    )
    if saturated and observation.request_rate > 0:
        return observation.request_rate / servers
    # A request that arrives mid-step waits for the step to end even with slots free: a queue
    # time of about one engine step is scheduling, not contention, and says nothing of μ.
    step_ms = observation.itl.mean if observation.itl is not None and observation.itl.count else 0
    queue_ms = analysis.component_means_ms["queue"]
    if not queue_ms > draft.tunables.step_alignment_steps * max(step_ms, 1.0):
        return draft.memory.service_rate
    calibrated = calibrate_service_rate(observation.request_rate, servers, queue_ms)
    return calibrated if calibrated is not None else draft.memory.service_rate


def _running_per_pod(observation: Observation) -> float:
    """Requests running per pod that reported, averaged over the window."""
    return observation.running / max(1, observation.reporting_pods)


def _apply_regime_rule(
    draft: _Draft, observation: Observation, analysis: RegimeAnalysis, service_rate: float | None
) -> int:
    """Run the rule of the regime; return the replica count recommended for this window."""
    draft.note(analysis.explanation)
    if analysis.regime is Regime.QUEUE_BOUND:
        return _queue_bound(draft, observation, analysis, service_rate)
    if analysis.regime is Regime.PREFILL_BOUND:
        _prefill_bound(draft, observation, analysis)
        return draft.replicas
    if analysis.regime is Regime.DECODE_BOUND:
        return _decode_bound(draft, observation, analysis)
    return _scale_in_candidate(draft, observation, analysis, service_rate)


def _offered_rate(observation: Observation, horizon_s: float) -> float:
    """Requests/s to size for: those served, plus draining the backlog within `horizon_s`.

    In overload the served rate is capped at the fleet's capacity and hides the arrivals;
    the requests waiting now are the part of the load it did not serve. The horizon is the
    scale-up cooldown: the backlog should be gone before the next scale-up could be made.
    """
    backlog = max(
        value
        for value in (observation.waiting, observation.waiting_now, 0.0)
        if math.isfinite(value)
    )
    return observation.request_rate + backlog / max(15.0, horizon_s)


def _sized_replicas(
    draft: _Draft,
    observation: Observation,
    analysis: RegimeAnalysis,
    service_rate: float | None,
    objective_fraction: float,
) -> int | None:
    """Replicas the queueing model needs for the objective × fraction; None if it cannot say."""
    if service_rate is None or observation.prefill is None or observation.request_rate <= 0:
        return None
    model = QueueModel(
        _offered_rate(observation, draft.spec.behavior.scale_up_cooldown_s), service_rate
    )
    service = service_distribution(
        observation.prefill,
        analysis.component_means_ms["tokenization"],
        draft.tunables.service_cells_per_bucket,
    )
    sizing = replicas_needed(
        model,
        draft.spec.ttft.threshold_ms * objective_fraction,
        1.0 - draft.spec.ttft.quantile,
        service,
        limit=draft.spec.replicas.max * 4,
    )
    return sizing.replicas


def _scale_up_blocked(draft: _Draft) -> bool:
    """True (with the reason) when no new scale-up may start now."""
    fleet, memory, behavior = draft.state.fleet, draft.memory, draft.spec.behavior
    if fleet.starting_pods > 0:
        draft.say(
            "HoldPodsStarting",
            f"{fleet.starting_pods} pods of the last scale-up are still starting: "
            "no new scale-up until they are ready",
        )
        return True
    if (
        memory.last_scale_up_at is not None
        and draft.now - memory.last_scale_up_at < behavior.scale_up_cooldown_s
    ):
        remaining = behavior.scale_up_cooldown_s - (draft.now - memory.last_scale_up_at)
        draft.say("HoldScaleUpCooldown", f"scale-up cooldown: {remaining:.0f} s left")
        return True
    return False


def _scale_up_to(draft: _Draft, wanted: int, why: str) -> int:
    """Scale up towards `wanted` within rate and replica limits; returns the recommendation."""
    fleet, spec, tunables = draft.state.fleet, draft.spec, draft.tunables
    current = draft.replicas
    rate_limit = max(
        math.ceil(current * tunables.scale_up_max_factor), current + tunables.scale_up_min_pods
    )
    target = min(max(wanted, current + 1), rate_limit)
    if fleet.unschedulable_pods > 0:
        message = (
            f"{fleet.unschedulable_pods} pods cannot be scheduled (no GPU left): "
            f"not adding replicas; {why}"
        )
        draft.flag("CapacityLimited", Status.TRUE, "Unschedulable", "CapacityLimited", message)
        draft.memory = replace(
            draft.memory,
            gpu_limit=max(1, current - fleet.unschedulable_pods),
            gpu_limit_at=draft.now,
        )
        return current
    memory = draft.memory
    if (
        memory.gpu_limit is not None
        and memory.gpu_limit_at is not None
        and draft.now - memory.gpu_limit_at < tunables.gpu_limit_memory_s
    ):
        # The GPUs held this many replicas a moment ago: asking for more would only make
        # Pending pods again. Retried once the memory expires (GPUs may have been freed).
        since = draft.now - memory.gpu_limit_at
        retry = tunables.gpu_limit_memory_s - since
        if current >= memory.gpu_limit:
            message = (
                f"the GPUs held {memory.gpu_limit} replicas {since:.0f} s ago: not adding "
                f"replicas for {retry:.0f} s more; {why}"
            )
            draft.flag("CapacityLimited", Status.TRUE, "GPUsExhausted", "CapacityLimited", message)
            return current
        target = min(target, memory.gpu_limit)
    if current >= spec.replicas.max:
        message = f"at spec.replicas.max = {spec.replicas.max}; {why}"
        draft.flag("CapacityLimited", Status.TRUE, "AtMaxReplicas", "CapacityLimited", message)
        return current
    if target > spec.replicas.max:
        draft.set(
            "CapacityLimited",
            Status.TRUE,
            "AtMaxReplicas",
            f"needs {wanted} replicas, spec.replicas.max is {spec.replicas.max}",
        )
        target = spec.replicas.max
    if _scale_up_blocked(draft):
        return max(current, min(wanted, spec.replicas.max))
    draft.replicas = target
    limited = " (rate-limited)" if target < wanted and target == rate_limit else ""
    draft.say("ScaleUp", f"replicas {current}→{target}{limited}: {why}")
    return target


def _queue_bound(
    draft: _Draft, observation: Observation, analysis: RegimeAnalysis, service_rate: float | None
) -> int:
    current = draft.replicas
    sized = _sized_replicas(
        draft, observation, analysis, service_rate, draft.tunables.sizing_margin
    )
    if sized is not None:
        why = (
            f"the queueing model (μ = {service_rate:.2f} req/s per replica at "
            f"λ = {_offered_rate(observation, draft.spec.behavior.scale_up_cooldown_s):.2f} "
            f"req/s) needs {sized} replicas for TTFT "
            f"p{draft.spec.ttft.percentile:g} ≤ "
            f"{draft.spec.ttft.threshold_ms * draft.tunables.sizing_margin:.0f} ms"
        )
        wanted = sized
    else:
        pressure = analysis.ttft_ms / draft.spec.ttft.threshold_ms
        wanted = math.ceil(current * pressure) if math.isfinite(pressure) else current * 2
        why = (
            "no queueing-model calibration yet: proportional step "
            f"(TTFT at {pressure:.1f}× its objective)"
            if math.isfinite(pressure)
            else "requests are waiting and none was served: doubling"
        )
    recommendation = _scale_up_to(draft, wanted, why)
    capacity = draft.conditions.get("CapacityLimited")
    if capacity is not None and capacity.status is Status.TRUE:
        _raise_batch_at_capacity(draft, observation, analysis)
    return recommendation


def _knob_blocked(draft: _Draft, knob: str) -> bool:
    """True (with the reason) when a knob change may not roll the Deployment now."""
    fleet, memory, behavior = draft.state.fleet, draft.memory, draft.spec.behavior
    if fleet.rollout_in_progress:
        draft.say("HoldRollout", f"a rollout is in progress: {knob} change deferred")
        return True
    if (
        memory.last_knob_change_at is not None
        and draft.now - memory.last_knob_change_at < behavior.knob_cooldown_s
    ):
        remaining = behavior.knob_cooldown_s - (draft.now - memory.last_knob_change_at)
        draft.say(
            "HoldKnobCooldown",
            f"knob cooldown: {knob} may change again in {remaining:.0f} s",
        )
        return True
    return False


def _itl_headroom(draft: _Draft, analysis: RegimeAnalysis) -> bool:
    if draft.spec.itl is None:
        return True
    return analysis.itl_ms <= draft.spec.itl.threshold_ms * draft.tunables.headroom


def _ttft_headroom(draft: _Draft, analysis: RegimeAnalysis) -> bool:
    return analysis.ttft_ms <= draft.spec.ttft.threshold_ms * draft.tunables.headroom


def _raise_batch_at_capacity(
    draft: _Draft, observation: Observation, analysis: RegimeAnalysis
) -> None:
    bounds, current = draft.spec.max_batch_size, draft.max_batch_size
    if bounds is None or current is None:
        return
    per_pod = _running_per_pod(observation)
    if per_pod < current * draft.tunables.batch_saturation:
        draft.say(
            "BatchNotBinding",
            f"{per_pod:.0f} requests run per replica, under the batch limit {current}: "
            "raising it would not drain the queue",
        )
        return
    if current >= bounds.max:
        draft.say("BatchAtMax", f"maxBatchSize already at its maximum {bounds.max}")
        return
    if not _itl_headroom(draft, analysis):
        draft.say(
            "HoldNoITLHeadroom",
            f"ITL {analysis.itl_ms:.0f} ms has no headroom to raise maxBatchSize",
        )
        return
    if _knob_blocked(draft, "maxBatchSize"):
        return
    fleet = draft.state.fleet
    if fleet.unschedulable_pods > 0:
        # The rolling update that changes the flag needs a GPU: with none free, only a pod
        # the rollout may take down makes room, and Pending pods would keep the rollout from
        # ever counting as available. So: drop the Pending pods (they serve nothing), and
        # change the flag only if the Deployment lets the rollout take a pod down.
        if fleet.max_unavailable < 1:
            draft.say(
                "HoldNoRolloutRoom",
                "raising maxBatchSize rolls the Deployment, and with no GPU free the rollout "
                "can only proceed by taking a pod down: set the Deployment's "
                "spec.strategy.rollingUpdate.maxUnavailable to 1 or more",
            )
            return
        trimmed = max(draft.spec.replicas.min, draft.replicas - fleet.unschedulable_pods)
        if trimmed < draft.replicas:
            draft.note(
                f"replicas {draft.replicas}→{trimmed}: {fleet.unschedulable_pods} Pending pods "
                "serve nothing and would block the rollout"
            )
            draft.replicas = trimmed
    target = math.ceil(current * draft.tunables.batch_step_up)
    fit = _trusted_batch_fit(draft)
    if fit is not None and draft.spec.itl is not None:
        limit = largest_batch_within(fit, draft.spec.itl.threshold_ms * draft.tunables.headroom)
        if limit is not None:
            target = min(target, limit)
    target = bounds.clamp(max(target, current + 1))
    draft.max_batch_size = target
    draft.say(
        "RaiseBatchAtCapacity",
        f"maxBatchSize {current}→{target}: replicas are capped and the batch limit binds "
        f"({per_pod:.0f} running per replica)",
    )


def _trusted_batch_fit(draft: _Draft) -> LinearFit | None:
    fit = fit_line(draft.memory.batch_points)
    if fit is None or fit.slope <= 0 or fit.r_squared < draft.tunables.min_fit_r_squared:
        return None
    return fit


def _prefill_bound(draft: _Draft, observation: Observation, analysis: RegimeAnalysis) -> None:
    bounds, current = draft.spec.chunk_size, draft.chunk_size
    if bounds is None:
        draft.say(
            "PrefillBoundNoKnob",
            "replicas cannot help a prefill-bound TTFT; declare spec.knobs.chunkSize to let "
            "slascaler raise the chunked-prefill budget",
        )
        return
    if current is None:
        draft.say("PrefillBoundUnknownChunk", "the engine's chunk size flag could not be read")
        return
    if current >= bounds.max:
        message = (
            f"TTFT p{draft.spec.ttft.percentile:g} would be {analysis.without_queue_ms:.0f} ms "
            f"even without queueing and chunkSize is at its maximum {bounds.max}: the SLA is "
            "infeasible for these prompts"
        )
        draft.flag("SLAMet", Status.FALSE, "InfeasibleForPrompts", "PrefillInfeasible", message)
        return
    if not _itl_headroom(draft, analysis):
        draft.say(
            "HoldNoITLHeadroom",
            f"raising chunkSize would lengthen ITL, already {analysis.itl_ms:.0f} ms",
        )
        return
    if _knob_blocked(draft, "chunkSize"):
        return
    target, how = _chunk_target(draft, observation, analysis, current, bounds)
    draft.chunk_size = target
    draft.say("RaiseChunkForPrefill", f"chunkSize {current}→{target}: {how}")


def _chunk_target(
    draft: _Draft,
    observation: Observation,
    analysis: RegimeAnalysis,
    current: int,
    bounds: Bounds,
) -> tuple[int, str]:
    fallback = bounds.clamp(math.ceil(current * draft.tunables.chunk_step_up))
    prompts, itl = observation.prompt_tokens, observation.itl
    if prompts is None or prompts.total <= 0 or itl is None or itl.total <= 0:
        return fallback, "no prompt-length histogram: doubling"
    decode_tokens = _running_per_pod(observation)
    cost = estimate_step_cost(
        analysis.component_means_ms["prefill"], prompts.mean, current, decode_tokens, itl.mean
    )
    if cost is None:
        return fallback, "step cost not identifiable from this window: doubling"
    budget = draft.spec.ttft.threshold_ms - analysis.component_means_ms["tokenization"]
    itl_limit = draft.spec.itl.threshold_ms * draft.tunables.headroom if draft.spec.itl else None
    candidates = [c for c in candidate_chunk_sizes(bounds.min, bounds.max) if c > current]
    prompt_tail = prompts.quantile(draft.spec.ttft.quantile)
    choice = choose_chunk_size(prompt_tail, budget, itl_limit, decode_tokens, cost, candidates)
    if choice is None:
        return fallback, "no larger chunk keeps ITL within its objective by the model: one step"
    met = "meets" if choice.meets_ttft else "is the closest to"
    return choice.chunk_size, (
        f"predicted prefill {choice.prefill_ms:.0f} ms for a p{draft.spec.ttft.percentile:g} "
        f"prompt of {prompt_tail:.0f} tokens {met} the {budget:.0f} ms budget, ITL "
        f"{choice.itl_ms:.0f} ms (step cost {cost.fixed_ms:.1f} ms + "
        f"{cost.per_token_ms * 1000:.1f} µs/token)"
    )


def _decode_bound(draft: _Draft, observation: Observation, analysis: RegimeAnalysis) -> int:
    assert draft.spec.itl is not None  # DecodeBound needs an ITL objective
    ttft_headroom = _ttft_headroom(draft, analysis)
    batch_bounds, batch = draft.spec.max_batch_size, draft.max_batch_size
    chunk_bounds, chunk = draft.spec.chunk_size, draft.chunk_size
    if (
        ttft_headroom
        and batch_bounds is not None
        and batch is not None
        and batch > batch_bounds.min
    ):
        if not _knob_blocked(draft, "maxBatchSize"):
            # A limit above what runs per replica binds nothing: step down from what runs.
            running = _running_per_pod(observation)
            binding = min(batch, math.ceil(running)) if math.isfinite(running) else batch
            target = math.floor(binding * draft.tunables.batch_step_down)
            how = (
                f"step ×{draft.tunables.batch_step_down:g} from the {binding} running per "
                "replica (no trusted latency-vs-batch fit)"
            )
            fit = _trusted_batch_fit(draft)
            if fit is not None:
                limit = largest_batch_within(
                    fit, draft.spec.itl.threshold_ms * draft.tunables.headroom
                )
                if limit is not None and limit < batch:
                    target = max(limit, math.floor(binding / 2))
                    how = (
                        f"fitted ITL ≈ {fit.intercept:.1f} + {fit.slope:.2f}·batch ms "
                        f"(R² {fit.r_squared:.2f}, {fit.points} windows)"
                    )
            target = batch_bounds.clamp(min(target, batch - 1))
            draft.max_batch_size = target
            draft.say("LowerBatchForITL", f"maxBatchSize {batch}→{target}: {how}")
        return draft.replicas
    if (
        ttft_headroom
        and chunk_bounds is not None
        and chunk is not None
        and chunk > chunk_bounds.min
    ):
        if not _knob_blocked(draft, "chunkSize"):
            target = chunk_bounds.clamp(chunk // 2)
            draft.chunk_size = target
            draft.say(
                "LowerChunkForITL",
                f"chunkSize {chunk}→{target}: shorter prefill chunks shorten the steps "
                "that decodes share",
            )
        return draft.replicas
    why = (
        "ITL over its objective and TTFT has no headroom for a smaller batch: another replica "
        "lowers the batch per replica"
        if not ttft_headroom
        else "ITL over its objective and no knob left to lower: another replica lowers the batch"
    )
    return _scale_up_to(draft, draft.replicas + 1, why)


def _scale_in_candidate(
    draft: _Draft, observation: Observation, analysis: RegimeAnalysis, service_rate: float | None
) -> int:
    """The replica count this Healthy/Idle window would allow (scale-down happens later)."""
    spec, tunables, current = draft.spec, draft.tunables, draft.replicas
    if analysis.regime is Regime.IDLE:
        return spec.replicas.min
    pods = max(1, observation.reporting_pods)
    ttft_low = _ttft_headroom(draft, analysis)
    itl_low = _itl_headroom(draft, analysis)
    no_queue = observation.waiting / pods < tunables.no_queue_waiting_per_pod
    if analysis.ttft_over or not (itl_low and no_queue):
        return current
    # With a calibrated queueing model: the count it needs (same margin as a scale-up, so the
    # two agree), but at most one fewer while TTFT has no headroom. Without a model: one
    # fewer, and only with TTFT headroom.
    sized = _sized_replicas(draft, observation, analysis, service_rate, tunables.sizing_margin)
    if sized is not None:
        return spec.replicas.clamp(min(sized, current) if ttft_low else max(sized, current - 1))
    return spec.replicas.clamp(current - 1 if ttft_low else current)


def _stabilize_scale_down(draft: _Draft) -> None:
    """Scale down only to the highest count recommended over the stabilization window."""
    spec, memory, current = draft.spec, draft.memory, draft.replicas
    if draft.replicas != draft.state.fleet.spec_replicas or draft.reason_code == "ScaleUp":
        return
    if not memory.recommendations:
        return
    window = spec.behavior.scale_down_stabilization_s
    stabilized = max(r.replicas for r in memory.recommendations)
    if stabilized >= current:
        return
    observed_for = draft.now - (
        memory.first_seen_at if memory.first_seen_at is not None else draft.now
    )
    last_up = memory.last_scale_up_at
    since_up = math.inf if last_up is None else draft.now - last_up
    if observed_for < window or since_up < window:
        waited = min(observed_for, since_up)
        draft.say(
            "HoldStabilizing",
            f"could run {stabilized} replicas, but scale-down waits for {window:.0f} s of "
            f"stable recommendations ({waited:.0f} s so far)",
        )
        return
    if draft.state.fleet.starting_pods > 0 or draft.state.fleet.rollout_in_progress:
        draft.say("HoldPodsStarting", "pods are still starting: scale-down deferred")
        return
    step_floor = current - max(1, math.floor(current * draft.tunables.scale_down_max_fraction))
    target = spec.replicas.clamp(max(stabilized, step_floor))
    draft.replicas = target
    limited = f" (at most {current - step_floor} per step)" if target > stabilized else ""
    draft.say(
        "ScaleDown",
        f"replicas {current}→{target}{limited}: {stabilized} is the highest count recommended "
        f"over the last {window:.0f} s",
    )
