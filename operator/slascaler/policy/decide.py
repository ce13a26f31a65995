"""The policy as a pipeline: one observation in, one safe, explained Decision out.

1. **Conflict** — another autoscaler (or an older InferenceSLA) targets the Deployment: leave
   it alone entirely. A Deployment scaled to 0 is left alone too (scaling disabled, as the
   HPA treats it). Someone else overwrote spec.replicas after slascaler's last write: no
   replica write for a back-off period that doubles while the fight goes on (not fought).
2. **Bounds** — replicas and knobs into the spec's bounds (the only change made without
   metrics: it is the user's declared intent, not an inference from data); knobs not while
   a rollout slascaler did not start is in progress.
3. **Data** — no observation, a failing source, a stale window, missing or NaN series, or
   too few requests: hold, and say which (`MetricsAvailable`).
4. **Learn** — the window's load and latencies go into the memory (`policy.learning`).
5. **Regime and rule** — the regime (`model.regime`, checked against the latency model:
   a TTFT over its objective that less contention would bring under it is QueueBound) picks
   the rule (`policy.rules`), which proposes replicas (sized for the load: `policy.sizing`)
   and knob values, each with its reason.
6. **Steps** (`policy.steps`) — bounds → GPU capacity → rate limit → starting pods →
   scale-up cooldown → stabilization → a shared GPU pool's grant for replicas; at the
   capacity limit a larger max batch size; then the knob gate (rollout, cooldown, capacity
   to roll with). The pool's grant (`PolicyState.grant`, from `policy.pool`) also holds
   when there is no window to decide on: a share given to another member is given up.
7. **Decision** — the changes, each with the reason that made it; the decision's reason
   code is its largest change's (replicas before knobs, and a surge after the knob it
   serves), or the step that held a change back.

Pure: no I/O and no clock (`now` is an argument). Called by the operator's reconcile loop
(and so by the simulator, which runs that loop).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from slascaler.model.latency import ReplicaWorth
from slascaler.model.observation import Observation
from slascaler.model.regime import Regime, RegimeAnalysis, analyze_observation
from slascaler.policy import steps
from slascaler.policy.decision import Change, Condition, Decision, Status
from slascaler.policy.knobs import KNOBS
from slascaler.policy.learning import learn, window_load
from slascaler.policy.reasons import Reason
from slascaler.policy.rules import RULES, Context, Proposal
from slascaler.policy.sizing import Sizing, size, sustainable_rate
from slascaler.policy.state import PolicyMemory, PolicyState
from slascaler.policy.tunables import Tunables
from slascaler.spec import SLASpec

DEFAULT_TUNABLES = Tunables()

# Which change names the decision: the user's bounds first, then replicas, then knobs; a
# replica change made for a knob's rollout comes after that knob.
_PRIORITY = {
    Reason.BOUNDS_ENFORCED: 0,
    Reason.SCALE_UP: 1,
    Reason.SCALE_DOWN: 1,
    Reason.RAISE_CHUNK_FOR_PREFILL: 2,
    Reason.LOWER_BATCH_FOR_ITL: 2,
    Reason.LOWER_CHUNK_FOR_ITL: 2,
    Reason.RAISE_BATCH_AT_CAPACITY: 2,
    Reason.SURGE_FOR_ROLLOUT: 3,
    Reason.DROP_PENDING_PODS: 3,
    Reason.PREEMPTED: 1,
}


@dataclass
class _Outcome:
    """The decision being assembled (local to one call of `decide`)."""

    spec: SLASpec
    state: PolicyState
    now: float
    memory: PolicyMemory
    replicas: int
    knobs: dict[str, int | None]
    reasons: dict[str, Reason] = field(default_factory=dict)  # per changed knob / replicas
    texts: list[str] = field(default_factory=list)
    holds: list[steps.Limit] = field(default_factory=list)
    conditions: dict[str, Condition] = field(default_factory=dict)
    regime: Regime = Regime.UNKNOWN
    analysis: RegimeAnalysis | None = None
    wanted: int | None = None
    sustainable: float | None = None
    replicas_frozen: str | None = None  # why replicas may not be written now (back-off)
    held: int | None = None
    worth: ReplicaWorth | None = None

    def hold(self, limit: steps.Limit) -> None:
        self.holds.append(limit)
        self.texts.append(limit.text)
        if limit.condition is not None:
            kind, reason = limit.condition
            self.set(kind, Status.TRUE, reason, limit.text)

    def set(self, kind: str, status: Status, reason: str, message: str) -> None:
        self.conditions[kind] = Condition(kind, status, reason, message)

    def finish(self) -> Decision:
        fleet = self.state.fleet
        if self.replicas_frozen is not None and self.replicas != fleet.spec_replicas:
            wanted, self.replicas = self.replicas, fleet.spec_replicas
            self.reasons.pop("replicas", None)
            text = f"would set replicas {fleet.spec_replicas}→{wanted}, but {self.replicas_frozen}"
            self.holds.insert(0, steps.Limit(Reason.HOLD_REPLICAS_OVERWRITTEN, text))
            self.texts.insert(0, text)
        changes: list[Change] = []
        if self.replicas != fleet.spec_replicas:
            reason = self.reasons.get("replicas") or (
                Reason.SCALE_UP if self.replicas > fleet.spec_replicas else Reason.SCALE_DOWN
            )
            changes.append(Change("replicas", fleet.spec_replicas, self.replicas, reason))
        for knob in KNOBS:
            new = self.knobs.get(knob.name)
            if new is not None and new != fleet.knob(knob.name):
                reason = self.reasons.get(knob.name, Reason.BOUNDS_ENFORCED)
                changes.append(Change(knob.name, fleet.knob(knob.name), new, reason))
        changes.sort(key=lambda c: _PRIORITY.get(c.reason, 2))
        if changes:
            code = changes[0].reason
        else:
            code = next((h.reason for h in self.holds if h.reason not in _ANNOTATIONS),
                        Reason.NO_CHANGE)  # fmt: skip
        applied = self.memory
        if self.replicas > fleet.spec_replicas:
            applied = replace(applied, last_scale_up_at=self.now)
        elif self.replicas < fleet.spec_replicas:
            applied = replace(applied, last_scale_down_at=self.now)
        if any(c.knob != "replicas" for c in changes):
            applied = replace(applied, last_knob_change_at=self.now)
        for kind in ("Conflict", "MetricsAvailable", "CapacityLimited"):
            self.conditions.setdefault(kind, Condition(kind, Status.FALSE, "AsExpected", ""))
        self.conditions.setdefault(
            "SLAMet", Condition("SLAMet", Status.UNKNOWN, "NoData", "no window to judge the SLA by")
        )
        self.set("Ready", Status.TRUE, "Reconciled", "the policy evaluated this window")
        return Decision(
            regime=self.regime,
            replicas=self.replicas,
            max_batch_size=self.knobs.get("maxBatchSize"),
            chunk_size=self.knobs.get("chunkSize"),
            reason_code=code,
            reason="; ".join(t for t in self.texts if t) or "no change needed",
            conditions=tuple(self.conditions.values()),
            changes=tuple(changes),
            memory_if_applied=applied,
            memory_if_held=self.memory,
            analysis=self.analysis,
            wanted_replicas=self.wanted,
            sustainable_rate=self.sustainable,
            held_replicas=self.held,
            worth=self.worth,
        )


# Limits that describe a change rather than hold one back (rate limit, stabilized step).
_ANNOTATIONS = frozenset({Reason.SCALE_UP, Reason.SCALE_DOWN})


def decide(
    spec: SLASpec,
    observation: Observation | None,
    state: PolicyState,
    now: float,
    tunables: Tunables = DEFAULT_TUNABLES,
) -> Decision:
    """The decision for one window. Pure: the same inputs always give the same decision."""
    fleet = state.fleet
    out = _Outcome(
        spec, state, now, state.memory, fleet.spec_replicas,
        {k.name: fleet.knob(k.name) for k in KNOBS},
    )  # fmt: skip
    if fleet.other_autoscaler:
        if fleet.other_autoscaler.startswith("InferenceSLA/"):
            message = (
                f"{fleet.other_autoscaler} also targets {spec.target.name} and is older: it "
                "holds this Deployment's SLA, and this InferenceSLA changes nothing until that "
                "one is deleted or retargeted"
            )
            out.set("Conflict", Status.TRUE, "OtherInferenceSLA", message)
        else:
            message = (
                f"{fleet.other_autoscaler} also targets {spec.target.name}; slascaler leaves it "
                "alone until that autoscaler is removed"
            )
            out.set("Conflict", Status.TRUE, "OtherAutoscaler", message)
        out.hold(steps.Limit(Reason.HOLD_CONFLICT, message))
        return out.finish()
    if fleet.spec_replicas == 0:
        out.hold(steps.Limit(
            Reason.HOLD_SCALED_TO_ZERO,
            f"{spec.target.name} is scaled to 0 replicas: scaling is disabled, as the HPA treats "
            "0; scale it to 1 or more for slascaler to hold its SLA again",
        ))  # fmt: skip
        return out.finish()
    _replicas_backoff(out, tunables)

    _bounds(out)
    problem = _data_problem(spec, observation, now, tunables)
    if problem is not None or observation is None:
        if problem is not None:
            code, condition_reason, message = problem
            out.set("MetricsAvailable", Status.FALSE, condition_reason, message)
            out.hold(steps.Limit(code, message))
        _budget(out, out.replicas, None)
        return out.finish()
    out.set("MetricsAvailable", Status.TRUE, "Available", "")
    analysis = analyze_observation(
        observation,
        percentile=spec.ttft.percentile,
        objective_ms=spec.ttft.threshold_ms,
        itl_percentile=spec.itl.percentile if spec.itl else None,
        itl_objective_ms=spec.itl.threshold_ms if spec.itl else None,
        min_requests=tunables.min_requests,
    )
    out.analysis = analysis
    if analysis.regime is Regime.UNKNOWN:
        out.set("SLAMet", Status.UNKNOWN, "TooFewRequests", analysis.explanation)
        out.hold(steps.Limit(Reason.HOLD_TOO_FEW_REQUESTS, analysis.explanation))
        _budget(out, out.replicas, None)
        return out.finish()

    load = window_load(observation, tunables.use_short_window)
    memory = out.memory
    if load is not None:
        memory = learn(spec, fleet, memory, observation, analysis, load, now, tunables)
    memory = _with_batch_point(memory, observation, analysis, tunables)
    sizing = size(spec, memory, load, now, tunables) if load is not None else None
    if sizing is not None:
        memory = replace(memory, forecast=memory.forecast or sizing.forecast)
        out.sustainable = sustainable_rate(sizing, load) if load is not None else None
        if sizing.model is not None:
            out.worth = ReplicaWorth.of(sizing.model, sizing.load, spec.ttft.threshold_ms)
    regime = _regime(analysis, sizing)
    out.regime = regime
    out.texts.append(_explanation(analysis, regime))
    _judge_sla(out, analysis)
    ctx = Context(
        spec, fleet, memory, observation, analysis, load, sizing, now, tunables,
        out.replicas, dict(out.knobs), regime, state.grant,
    )  # fmt: skip
    proposal = RULES[regime](ctx)
    for reason, text in proposal.holds:
        out.hold(steps.Limit(reason, text))
        if reason is Reason.PREFILL_INFEASIBLE:
            out.set("SLAMet", Status.FALSE, "InfeasibleForPrompts", text)
    if proposal.why:
        out.texts.append(proposal.why)
    _replicas(out, ctx, proposal, sizing, memory)
    return out.finish()


def _bounds(out: _Outcome) -> None:
    spec, fleet = out.spec, out.state.fleet
    bounded = spec.replicas.clamp(fleet.spec_replicas)
    if bounded != fleet.spec_replicas:
        out.replicas = bounded
        out.reasons["replicas"] = Reason.BOUNDS_ENFORCED
        out.texts.append(
            f"replicas {fleet.spec_replicas} outside spec.replicas "
            f"[{spec.replicas.min}, {spec.replicas.max}]: set to {bounded}"
        )
    for knob in KNOBS:
        bounds, value = knob.bounds(spec), fleet.knob(knob.name)
        if bounds is None or value is None or bounds.contains(value):
            continue
        clamped = bounds.clamp(value)
        if fleet.foreign_rollout:
            out.hold(steps.Limit(
                Reason.HOLD_FOREIGN_ROLLOUT,
                f"{knob.name} {value} outside spec.knobs.{knob.name} [{bounds.min}, "
                f"{bounds.max}], but a rollout slascaler did not start is in progress: the "
                "flag is changed once it has finished (a template change now would stack on "
                "it)",
            ))  # fmt: skip
            continue
        out.knobs[knob.name] = clamped
        out.reasons[knob.name] = Reason.BOUNDS_ENFORCED
        out.texts.append(
            f"{knob.name} {value} outside spec.knobs.{knob.name} [{bounds.min}, {bounds.max}]: "
            f"set to {clamped}"
        )


def _replicas_backoff(out: _Outcome, tunables: Tunables) -> None:
    """Someone else wrote spec.replicas after slascaler did: back off, do not fight.

    An overwrite not answered yet (none was, or slascaler wrote replicas again since the last
    one) starts a back-off of `replicas_backoff_s`, doubled (up to the maximum) when the fight
    resumes within twice the last period after it ended. While it lasts, the replicas stay as
    they are (`_Outcome.finish`) and Conflict says who writes them and the fix.
    """
    fleet, memory, now = out.state.fleet, out.memory, out.now
    who = fleet.replicas_overwritten_by
    until, period = memory.replicas_backoff_until, memory.replicas_backoff_s
    if who is not None and (until is None or now >= until):
        seen = memory.replicas_overwrite_seen_at
        writes = [t for t in (memory.last_scale_up_at, memory.last_scale_down_at) if t is not None]
        if seen is None or (writes and max(writes) > seen):
            length = tunables.replicas_backoff_s
            if until is not None and period is not None and now - until < 2 * period:
                length = min(tunables.replicas_backoff_max_s, 2 * period)
            out.memory = replace(
                memory,
                replicas_backoff_until=now + length,
                replicas_backoff_s=length,
                replicas_overwrite_seen_at=now,
            )
    until = out.memory.replicas_backoff_until
    if until is None or now >= until:
        return
    writer = who or "another field manager"
    out.replicas_frozen = (
        f"{writer} set spec.replicas of {out.spec.target.name} after slascaler did: slascaler "
        f"does not write replicas for {until - now:.0f} s more instead of fighting it; to let "
        f"slascaler scale, drop `replicas` from what {writer} applies (as with an HPA), or "
        "delete this InferenceSLA"
    )
    out.set("Conflict", Status.TRUE, "ReplicasOverwritten", out.replicas_frozen)


def _data_problem(
    spec: SLASpec, observation: Observation | None, now: float, tunables: Tunables
) -> tuple[Reason, str, str] | None:
    """(hold reason, condition reason, message) when the window cannot be decided on."""
    if observation is None:
        return (Reason.HOLD_METRICS_UNAVAILABLE, "NoObservation",
                "no observation could be made (metrics source unreachable?)")  # fmt: skip
    if observation.source_error is not None:
        return (Reason.HOLD_METRICS_UNAVAILABLE, "SourceUnavailable",
                f"holding: {observation.source_error}")  # fmt: skip
    age = now - observation.observed_at
    if age > tunables.max_observation_age_s:
        return (Reason.HOLD_METRICS_STALE, "Stale",
                f"the latest observation is {age:.0f} s old (limit "
                f"{tunables.max_observation_age_s:.0f} s)")  # fmt: skip
    missing = observation.missing_inputs(need_itl=spec.itl is not None)
    if missing:
        return (Reason.HOLD_METRICS_MISSING, "MissingSeries",
                f"holding: {'; '.join(missing)}")  # fmt: skip
    return None


def _regime(analysis: RegimeAnalysis, sizing: Sizing | None) -> Regime:
    """The regime, with the latency model's word on whether replicas can help.

    The counterfactual of `model.regime` (the percentile without queue time) counts as
    intrinsic the prefill time that contention stretched; the latency model separates the
    two, so where it says less contention would meet the objective, replicas help.
    """
    regime = analysis.regime
    if sizing is None or sizing.model is None:
        return regime
    if regime is Regime.PREFILL_BOUND and sizing.feasible:
        return Regime.QUEUE_BOUND
    if regime is Regime.QUEUE_BOUND and not sizing.feasible:
        return Regime.PREFILL_BOUND
    return regime


def _explanation(analysis: RegimeAnalysis, regime: Regime) -> str:
    if regime is analysis.regime:
        return analysis.explanation
    if regime is Regime.QUEUE_BOUND:
        return (
            f"{analysis.explanation.split(';')[0]}; the latency model says less contention "
            "would meet it"
        )
    return (
        f"{analysis.explanation.split(';')[0]}; the latency model says even an idle replica "
        "would miss it"
    )


def _judge_sla(out: _Outcome, analysis: RegimeAnalysis) -> None:
    if analysis.regime is Regime.IDLE:
        out.set("SLAMet", Status.TRUE, "Idle", "no requests in the window")
    elif analysis.ttft_over or analysis.itl_over:
        out.set("SLAMet", Status.FALSE, "ObjectiveMissed", analysis.explanation)
    else:
        out.set("SLAMet", Status.TRUE, "ObjectivesMet", analysis.explanation)


def _with_batch_point(
    memory: PolicyMemory, observation: Observation, analysis: RegimeAnalysis, tunables: Tunables
) -> PolicyMemory:
    """(running per replica, ITL) for the latency-vs-batch fit of the batch knob."""
    if not (math.isfinite(analysis.itl_ms) and math.isfinite(observation.running)):
        return memory
    point = (observation.running / max(1, observation.reporting_pods), analysis.itl_ms)
    return replace(
        memory, batch_points=(*memory.batch_points, point)[-tunables.batch_points_kept :]
    )


def _replicas(
    out: _Outcome, ctx: Context, proposal: Proposal, sizing: Sizing | None, memory: PolicyMemory
) -> None:
    """Run the steps on the proposal and record the outcome in `out`."""
    spec, fleet = out.spec, out.state.fleet
    wanted = proposal.replicas
    out.wanted = proposal.wanted
    target, limit = steps.bounds(ctx, wanted)
    # At the capacity limit: the fleet already runs all the replicas it may (the maximum, or
    # what the GPUs hold) and the load wants more: only a knob can add capacity now.
    capped = limit is not None and ctx.replicas >= spec.replicas.max
    if limit is not None:
        out.hold(limit)
    memory = steps.remember_gpu_limit(ctx, memory)
    target, limit = steps.gpu_capacity(ctx, target)
    capped = capped or limit is not None
    if limit is not None:
        out.hold(limit)
    recommended = target
    for step in (steps.rate_limit,):
        target, limit = step(ctx, target)
        if limit is not None:
            out.texts.append(limit.text)
    beyond = sizing.without_backlog if sizing is not None else None
    target, limit = steps.starting_pods(ctx, target, beyond)
    if limit is not None:
        out.hold(limit)
    target, limit = steps.scale_up_cooldown(ctx, target)
    if limit is not None:
        out.hold(limit)
    memory = memory.recommending(out.now, recommended, spec.behavior.scale_down_stabilization_s)
    target, limit = steps.stabilization(ctx, target, memory)
    if limit is not None:
        if limit.reason is Reason.SCALE_DOWN:
            out.texts.append(limit.text)
        else:
            out.hold(limit)
    need = spec.replicas.clamp(proposal.wanted) if proposal.wanted is not None else None
    # What its own rules keep: the highest count recommended over the stabilization window
    # (a shared GPU pool protects what this SLA took while it is that high).
    recent = max((r.replicas for r in memory.recommendations), default=target)
    out.held = spec.replicas.clamp(max(target, recent, need if need is not None else target))
    before = target
    target = _budget(out, target, need)
    capped = capped or target < before or (need is not None and need > target)
    if target != out.replicas:
        out.replicas = target
        out.reasons["replicas"] = proposal.replicas_reason if proposal.replicas_reason in (
            Reason.SCALE_UP, Reason.SCALE_DOWN
        ) else (Reason.SCALE_UP if target > fleet.spec_replicas else Reason.SCALE_DOWN)  # fmt: skip
    knobs = dict(proposal.knobs)
    if capped and ctx.regime is Regime.QUEUE_BOUND:
        batch, limit = steps.batch_at_capacity(ctx)
        if limit is not None:
            out.hold(limit)
        elif batch is not None:
            knobs["maxBatchSize"] = (batch, Reason.RAISE_BATCH_AT_CAPACITY)
            out.texts.append(
                f"maxBatchSize {ctx.knobs.get('maxBatchSize')}→{batch}: replicas are capped "
                f"and the batch limit binds ({ctx.running_per_pod():.0f} running per replica)"
            )
    short = (
        sizing is not None
        and sizing.replicas is not None
        and sizing.feasible
        and sizing.replicas > fleet.provisioned
        and not capped
    )
    gate = steps.knob_gate(ctx, knobs, out.replicas, short)
    if gate.limit is not None:
        out.hold(gate.limit)
    for name, (value, reason) in gate.knobs.items():
        out.knobs[name] = value
        out.reasons[name] = reason
    if gate.replicas_reason is not None and gate.replicas != out.replicas:
        out.replicas = gate.replicas
        out.reasons["replicas"] = gate.replicas_reason
        out.texts.append(gate.note)
    out.memory = memory


def _budget(out: _Outcome, target: int, need: int | None) -> int:
    """Apply a shared GPU pool's grant (`steps.budget`) and set the Preempted condition.

    Outside any pool it does nothing, so an SLA in no pool decides exactly as before.
    """
    grant = out.state.grant
    if grant is None:
        return target
    if grant.preemption is not None:
        takers = ", ".join(grant.preempted_by)
        message = f"pool {grant.pool} gave replicas of this SLA to {takers}: {grant.message}"
        out.set("Preempted", Status.TRUE, str(grant.preemption), message)
    else:
        out.set("Preempted", Status.FALSE, "NotPreempted", f"pool {grant.pool}")
    current = out.state.fleet.spec_replicas
    capped, limit = steps.budget(out.spec, current, target, need, grant)
    if limit is None:
        return capped
    if limit.reason is Reason.PREEMPTED:
        out.texts.append(limit.text)
        if limit.condition is not None:
            kind, reason = limit.condition
            out.set(kind, Status.TRUE, reason, limit.text)
        if capped != out.replicas:
            out.replicas = capped
            out.reasons["replicas"] = Reason.PREEMPTED
    else:
        out.hold(limit)
    return capped
