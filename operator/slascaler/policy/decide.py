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
6. **Steps** (`policy.steps`, run in order by `policy.apply_steps`) — bounds → GPU
   capacity → rate limit → starting pods → scale-up cooldown → stabilization → a shared GPU
   pool's grant for replicas; at the capacity limit a larger max batch size; then the knob
   gate (rollout, cooldown, capacity to roll with). The pool's grant (`PolicyState.grant`,
   from `policy.pool`) also holds when there is no window to decide on: a share given to
   another member is given up.
7. **Decision** (`policy.draft`) — the changes, each with the reason that made it; the
   decision's reason code is its largest change's (replicas before knobs, and a surge after
   the knob it serves), or the step that held a change back.

Pure: no I/O and no clock (`now` is an argument). Called by the operator's reconcile loop
(and so by the simulator, which runs that loop).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace

from slascaler.model.collisions import PromptCollisions, prompt_collisions
from slascaler.model.latency import ReplicaWorth
from slascaler.model.observation import Observation
from slascaler.model.regime import Regime, RegimeAnalysis, analyze_observation
from slascaler.policy import steps
from slascaler.policy.apply_steps import apply_budget, apply_steps
from slascaler.policy.decision import Decision, Status
from slascaler.policy.draft import Draft
from slascaler.policy.knobs import KNOBS
from slascaler.policy.learning import WindowLoad, learn, serving_steadily, window_load
from slascaler.policy.reasons import Reason
from slascaler.policy.rules import RULES, Context
from slascaler.policy.sizing import BatchSlots, Evidence, Sizing, size, sustainable_rate
from slascaler.policy.state import FleetState, PolicyMemory, PolicyState
from slascaler.policy.tunables import Tunables
from slascaler.spec import SLASpec

DEFAULT_TUNABLES = Tunables()

def decide(
    spec: SLASpec,
    observation: Observation | None,
    state: PolicyState,
    now: float,
    tunables: Tunables = DEFAULT_TUNABLES,
) -> Decision:
    """The decision for one window. Pure: the same inputs always give the same decision."""
    fleet = state.fleet
    out = Draft(
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
        apply_budget(out, out.replicas, None)
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
        apply_budget(out, out.replicas, None)
        return out.finish()

    load = window_load(observation, tunables.use_short_window)
    memory = out.memory
    if load is not None:
        memory = learn(spec, fleet, memory, observation, analysis, load, now, tunables)
    memory = _with_batch_point(memory, observation, analysis, tunables)
    collisions = _collisions(spec, fleet, memory, out.knobs, observation, analysis, tunables)
    evidence = _evidence(fleet, observation, analysis, load, tunables)
    sizing = (
        size(spec, memory, load, now, tunables, collisions, fleet.provisioned, evidence,
             _slots(observation, out.knobs.get("maxBatchSize")))
        if load is not None
        else None
    )
    if sizing is not None:
        out.for_collisions = sizing.for_collisions
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
    apply_steps(out, ctx, proposal, sizing, memory)
    return out.finish()


def _slots(observation: Observation, max_batch: int | None) -> BatchSlots | None:
    if max_batch is None:
        return None
    return BatchSlots(observation.running, max_batch)


def _evidence(
    fleet: FleetState,
    observation: Observation,
    analysis: RegimeAnalysis,
    load: WindowLoad | None,
    tunables: Tunables,
) -> Evidence | None:
    """The window as evidence of what the replicas now ready carry: a healthy window over a
    steady fleet only (every pod ready and serving, no rollout, no backlog)."""
    if load is None or analysis.regime is not Regime.HEALTHY:
        return None
    if not serving_steadily(fleet, observation, load, tunables):
        return None
    return Evidence(load.pods, load.work, analysis.ttft_ms, analysis.itl_ms)


def _collisions(
    spec: SLASpec,
    fleet: FleetState,
    memory: PolicyMemory,
    knobs: Mapping[str, int | None],
    observation: Observation,
    analysis: RegimeAnalysis,
    tunables: Tunables,
) -> PromptCollisions | None:
    """How often long prompts would share a replica's steps (`model.collisions`)."""
    chunk = knobs.get("chunkSize") or fleet.chunk_size
    prefill = analysis.component_means_ms.get("prefill")
    if not tunables.use_collision_sizing or chunk is None or prefill is None:
        return None
    if analysis.regime not in (Regime.HEALTHY, Regime.PREFILL_BOUND):
        return None  # a queue stretches the prefill the step cost is read from
    waiting = observation.waiting / max(1, observation.reporting_pods)
    if not waiting < tunables.steady_waiting_per_pod:
        return None
    return prompt_collisions(
        observation, prefill, analysis.component_means_ms.get("tokenization", 0.0), chunk,
        spec.ttft.threshold_ms, spec.ttft.quantile, tunables.collision_risk, spec.replicas.max,
        memory.capacity,
    )  # fmt: skip


def _bounds(out: Draft) -> None:
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


def _replicas_backoff(out: Draft, tunables: Tunables) -> None:
    """Someone else wrote spec.replicas after slascaler did: back off, do not fight.

    An overwrite not answered yet (none was, or slascaler wrote replicas again since the last
    one) starts a back-off of `replicas_backoff_s`, doubled (up to the maximum) when the fight
    resumes within twice the last period after it ended. While it lasts, the replicas stay as
    they are (`Draft.finish`) and Conflict says who writes them and the fix.
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


def _judge_sla(out: Draft, analysis: RegimeAnalysis) -> None:
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
