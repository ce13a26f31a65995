"""One rule per regime: what the window asks for, before any limit.

Every rule returns a `Proposal`: a replica count (from `policy.sizing`, so that every regime
sizes the fleet for its load and an oversized fleet shrinks whatever the regime), engine
knob values, the reason for each, and the notes that explain it.

- QueueBound: the count the load calls for (while no steady window has been measured: the
  load at `unmodelled_utilisation` of a replica's known throughput, else a step in
  proportion to the TTFT pressure).
- PrefillBound: the count that keeps contention small, and a larger chunk (the smallest
  one the step-cost model predicts meets the objective, aiming under it), or the reason
  none can: no chunkSize knob, an unreadable flag, the maximum reached, no ITL headroom.
- DecodeBound: when TTFT has headroom, a smaller max batch size (the largest the fitted
  ITL-vs-batch line allows, or a step down from what runs), else a smaller chunk (the
  largest the step-cost model keeps within the ITL objective); the chunk comes first where
  that model says the steps carrying a prefill chunk, not the decodes, make the ITL tail.
  Otherwise the count that brings ITL under its objective.
- Healthy: the count the load calls for (scale-in happens through stabilization).
- Idle: `replicas.min`.

Pure; called by `policy.decide`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from slascaler.model.batching import LinearFit, fit_line, largest_batch_within
from slascaler.model.chunking import (
    StepCost,
    candidate_chunk_sizes,
    choose_chunk_size,
    estimate_step_cost,
    itl_with_chunk_ms,
)
from slascaler.model.observation import Observation
from slascaler.model.regime import Regime, RegimeAnalysis
from slascaler.policy.learning import WindowLoad
from slascaler.policy.pool import PoolGrant
from slascaler.policy.reasons import Reason
from slascaler.policy.sizing import Sizing
from slascaler.policy.state import FleetState, PolicyMemory
from slascaler.policy.tunables import Tunables
from slascaler.spec import Bounds, SLASpec


@dataclass(frozen=True)
class Context:
    """Everything a rule or step may read about this window."""

    spec: SLASpec
    fleet: FleetState
    memory: PolicyMemory
    observation: Observation
    analysis: RegimeAnalysis
    load: WindowLoad | None
    sizing: Sizing | None
    now: float
    tunables: Tunables
    replicas: int  # the count after bounds: the rules' starting point
    knobs: Mapping[str, int | None]  # knob values after bounds
    regime: Regime = Regime.UNKNOWN
    grant: PoolGrant | None = None  # the share of a shared GPU pool, if in one

    def replica_ceiling(self) -> int:
        """The most replicas the SLA may run: spec.replicas.max, or a pool's grant."""
        if self.grant is None:
            return self.spec.replicas.max
        return self.spec.replicas.clamp(min(self.spec.replicas.max, self.grant.allowed))

    def running_per_pod(self) -> float:
        return self.observation.running / max(1, self.observation.reporting_pods)

    def itl_headroom(self) -> bool:
        itl = self.spec.itl
        return itl is None or self.analysis.itl_ms <= itl.threshold_ms * self.tunables.headroom

    def ttft_headroom(self) -> bool:
        return self.analysis.ttft_ms <= self.spec.ttft.threshold_ms * self.tunables.headroom


@dataclass(frozen=True)
class Proposal:
    """What a rule asks for: replicas and knob values, each with its reason."""

    replicas: int
    replicas_reason: Reason = Reason.NO_CHANGE
    knobs: Mapping[str, tuple[int, Reason]] = field(default_factory=dict)
    why: str = ""  # the reason for the replica count, with its numbers
    holds: tuple[tuple[Reason, str], ...] = ()  # what a rule could not do, and why
    wanted: int | None = None  # the count the load calls for, before any limit


def _sized(ctx: Context) -> tuple[int | None, str]:
    """The count the load calls for; without a model, when requests queue, the load at a
    cautious utilisation of a replica's throughput, or a proportional step if none is known
    (never fewer than the replicas that keep long prompts apart, `model.collisions`)."""
    sizing = ctx.sizing
    if sizing is not None and sizing.replicas is not None:
        return sizing.replicas, sizing.why
    wanted, why = _sized_without_model(ctx)
    apart = sizing.for_collisions if sizing is not None else None
    if wanted is not None and apart is not None and apart > wanted:
        return apart, f"{why}; {apart} replicas keep long prompts from sharing a replica's steps"
    return wanted, why


def _sized_without_model(ctx: Context) -> tuple[int | None, str]:
    sizing = ctx.sizing
    pressure = ctx.analysis.ttft_ms / ctx.spec.ttft.threshold_ms
    if ctx.analysis.ttft_over and ctx.analysis.regime is Regime.QUEUE_BOUND:
        capacity = ctx.memory.capacity
        if sizing is not None and capacity is not None and capacity > 0 and sizing.load > 0:
            # Requests queue and a replica's throughput is known (measured while they
            # queued, or from the step cost): the arrivals and the backlog to drain, at a
            # cautious utilisation. The TTFT grows with the queue while pods load, and a
            # step in proportion to it asked for 8, 16, 38, then 153 replicas where 5 carry
            # the load (the demo's first two minutes).
            utilisation = ctx.tunables.unmodelled_utilisation
            return math.ceil(sizing.load / (capacity * utilisation)), (
                f"no steady window measured yet: {sizing.load:.0f} tokens/s to carry at "
                f"{utilisation:.0%} of {capacity:.0f} tokens/s per replica"
            )
        # Step in proportion, from the pods that served the window (pods still starting did
        # not make its TTFT; they count as capacity afterwards). A slow TTFT without a queue
        # (one giant prompt, a new knob value) waits for a steady window to measure it.
        served_by = ctx.observation.reporting_pods or ctx.fleet.ready_replicas
        if math.isfinite(pressure):
            return math.ceil(max(1, served_by) * pressure), (
                f"no steady window measured yet: proportional step (TTFT at {pressure:.1f}× "
                "its objective)"
            )
        return ctx.replicas * 2, "requests are waiting and none was served: doubling"
    waiting = ctx.observation.waiting
    no_queue = math.isfinite(waiting) and waiting / max(1, ctx.replicas) < 0.5
    if ctx.ttft_headroom() and ctx.itl_headroom() and no_queue and ctx.replicas > 1:
        return ctx.replicas - 1, (
            "no steady window measured yet: one fewer, TTFT and ITL have headroom and nothing "
            "queues"
        )
    return None, "no steady window measured yet"


def queue_bound(ctx: Context) -> Proposal:
    wanted, why = _sized(ctx)
    if wanted is None:
        return Proposal(ctx.replicas, why=why)
    reason = Reason.SCALE_UP if wanted > ctx.replicas else Reason.SCALE_DOWN
    return Proposal(wanted, reason, why=why, wanted=wanted)


def healthy(ctx: Context) -> Proposal:
    wanted, why = _sized(ctx)
    if wanted is None:
        return Proposal(ctx.replicas, why=why)
    reason = Reason.SCALE_UP if wanted > ctx.replicas else Reason.SCALE_DOWN
    return Proposal(wanted, reason, why=why, wanted=wanted)


def idle(ctx: Context) -> Proposal:
    low = ctx.spec.replicas.min
    return Proposal(low, Reason.SCALE_DOWN, why="no requests in the window", wanted=low)


def prefill_bound(ctx: Context) -> Proposal:
    sized = healthy(ctx)
    if (
        sized.wanted is None
        or ctx.sizing is None
        or ctx.sizing.replicas is None
        or not ctx.tunables.use_regime_sizing
    ):
        # No model to size with: replicas cannot help a prefill-bound TTFT, keep the count.
        sized = Proposal(ctx.replicas, why="replicas cannot help a prefill-bound TTFT")
    elif sized.replicas > ctx.replicas:
        # Sized for small contention: an oversized fleet shrinks, but no replica is added
        # for a TTFT that replicas cannot bring under its objective.
        sized = Proposal(ctx.replicas, why=f"replicas cannot help a prefill-bound TTFT "
                         f"({sized.why})", wanted=sized.wanted)  # fmt: skip
    spec, chunk = ctx.spec, ctx.knobs.get("chunkSize")
    bounds = spec.chunk_size
    p = f"p{spec.ttft.percentile:g}"
    if bounds is None:
        return _apart_or_hold(ctx, sized, Reason.PREFILL_BOUND_NO_KNOB,
                              "replicas cannot help a prefill-bound TTFT; declare "
                              "spec.knobs.chunkSize to let slascaler raise the chunked-prefill "
                              "budget")  # fmt: skip
    if chunk is None:
        return _apart_or_hold(ctx, sized, Reason.PREFILL_BOUND_UNKNOWN_CHUNK,
                              "the engine's chunk size flag could not be read")  # fmt: skip
    if chunk >= bounds.max:
        return _apart_or_hold(
            ctx,
            sized,
            Reason.PREFILL_INFEASIBLE,
            f"TTFT {p} would be {ctx.analysis.without_queue_ms:.0f} ms even without "
            f"queueing and chunkSize is at its maximum {bounds.max}: the SLA is "
            "infeasible for these prompts",
        )
    if not ctx.itl_headroom():
        return _apart_or_hold(ctx, sized, Reason.HOLD_NO_ITL_HEADROOM,
                              f"raising chunkSize would lengthen ITL, already "
                              f"{ctx.analysis.itl_ms:.0f} ms")  # fmt: skip
    target, how = _chunk_target(ctx, chunk, bounds)
    return Proposal(
        sized.replicas, sized.replicas_reason,
        {"chunkSize": (target, Reason.RAISE_CHUNK_FOR_PREFILL)},
        why=f"chunkSize {chunk}→{target}: {how}; replicas: {sized.why}", wanted=sized.wanted,
    )  # fmt: skip


def _apart_or_hold(ctx: Context, sized: Proposal, reason: Reason, text: str) -> Proposal:
    """Where no larger chunk can shorten the prompts' prefill: the replicas that keep long
    prompts from sharing a replica's steps (`model.collisions`), when those are what misses
    the objective; otherwise the hold. A larger chunk comes first where one is possible: it
    shortens every prefill, and with it the prompts a collision fails, and costs no GPU."""
    apart = ctx.sizing.for_collisions if ctx.sizing is not None else None
    if apart is None or apart <= ctx.replicas:
        return _with_hold(sized, reason, text)
    return Proposal(
        apart, Reason.SCALE_UP,
        why=f"the prompts' own prefill meets the TTFT objective, but long prompts that share "
        f"a replica's steps stretch each other: {ctx.sizing.why if ctx.sizing else ''}",
        wanted=apart,
    )  # fmt: skip


def _with_hold(proposal: Proposal, reason: Reason, text: str) -> Proposal:
    return Proposal(
        proposal.replicas, proposal.replicas_reason, proposal.knobs, proposal.why,
        (*proposal.holds, (reason, text)), proposal.wanted,
    )  # fmt: skip


def window_step_cost(ctx: Context, chunk: int) -> StepCost | None:
    """The engine's step cost (f, k) fitted on this window at chunk size `chunk`, or None
    without the prompt-length and ITL histograms or where the window is inconsistent with
    the linear step model (`model.chunking.estimate_step_cost`)."""
    prompts, itl = ctx.observation.prompt_tokens, ctx.observation.itl
    if prompts is None or prompts.total <= 0 or itl is None or itl.total <= 0:
        return None
    prefill_ms = ctx.analysis.component_means_ms.get("prefill", math.nan)
    return estimate_step_cost(prefill_ms, prompts.mean, chunk, ctx.running_per_pod(), itl.mean)


def _chunk_target(ctx: Context, current: int, bounds: Bounds) -> tuple[int, str]:
    tunables, observation, analysis = ctx.tunables, ctx.observation, ctx.analysis
    fallback = bounds.clamp(math.ceil(current * tunables.chunk_step_up))
    prompts, itl = observation.prompt_tokens, observation.itl
    if prompts is None or prompts.total <= 0 or itl is None or itl.total <= 0:
        return fallback, "no prompt-length histogram: doubling"
    decode_tokens = ctx.running_per_pod()
    cost = window_step_cost(ctx, current)
    if cost is None:
        return fallback, "step cost not identifiable from this window: doubling"
    spec = ctx.spec
    budget = (
        spec.ttft.threshold_ms * tunables.chunk_target_fraction
        - analysis.component_means_ms["tokenization"]
    )
    itl_limit = spec.itl.threshold_ms * tunables.headroom if spec.itl else None
    candidates = [c for c in candidate_chunk_sizes(bounds.min, bounds.max) if c > current]
    prompt_tail = prompts.quantile(spec.ttft.quantile)
    choice = choose_chunk_size(prompt_tail, budget, itl_limit, decode_tokens, cost, candidates)
    if choice is None:
        return fallback, "no larger chunk keeps ITL within its objective by the model: one step"
    met = "meets" if choice.meets_ttft else "is the closest to"
    return choice.chunk_size, (
        f"predicted prefill {choice.prefill_ms:.0f} ms for a p{spec.ttft.percentile:g} "
        f"prompt of {prompt_tail:.0f} tokens {met} the {budget:.0f} ms budget, ITL "
        f"{choice.itl_ms:.0f} ms (step cost {cost.fixed_ms:.1f} ms + "
        f"{cost.per_token_ms * 1000:.1f} µs/token)"
    )


def trusted_batch_fit(ctx: Context) -> LinearFit | None:
    fit = fit_line(ctx.memory.batch_points)
    if fit is None or fit.slope <= 0 or fit.r_squared < ctx.tunables.min_fit_r_squared:
        return None
    return fit


def decode_bound(ctx: Context) -> Proposal:
    spec, tunables, itl = ctx.spec, ctx.tunables, ctx.spec.itl
    assert itl is not None  # DecodeBound needs an ITL objective
    batch, chunk = ctx.knobs.get("maxBatchSize"), ctx.knobs.get("chunkSize")
    batch_bounds, chunk_bounds = spec.max_batch_size, spec.chunk_size
    sized = healthy(ctx)
    cost = None  # the step cost the diagnosis and the chunk's target read, fitted once
    if tunables.use_chunk_step_diagnosis and chunk is not None:
        cost = window_step_cost(ctx, chunk)
    chunk_steps = _chunk_steps_miss(ctx, cost, chunk)
    if (
        ctx.ttft_headroom()
        and batch_bounds is not None
        and batch is not None
        and batch > batch_bounds.min
        and not chunk_steps
    ):
        running = ctx.running_per_pod()
        binding = min(batch, math.ceil(running)) if math.isfinite(running) else batch
        target = math.floor(binding * tunables.batch_step_down)
        how = (
            f"step ×{tunables.batch_step_down:g} from the {binding} running per replica "
            "(no trusted latency-vs-batch fit)"
        )
        fit = trusted_batch_fit(ctx)
        if fit is not None:
            limit = largest_batch_within(fit, itl.threshold_ms * tunables.headroom)
            if limit is not None and limit < batch:
                target = max(limit, math.floor(binding / 2))
                how = (
                    f"fitted ITL ≈ {fit.intercept:.1f} + {fit.slope:.2f}·batch ms "
                    f"(R² {fit.r_squared:.2f}, {fit.points} windows)"
                )
        target = batch_bounds.clamp(min(target, batch - 1))
        replicas, reason, first = _replicas_before_a_knob(ctx, sized)
        return Proposal(
            replicas, reason, {"maxBatchSize": (target, Reason.LOWER_BATCH_FOR_ITL)},
            why=f"{first}maxBatchSize {batch}→{target}: {how}", wanted=sized.wanted,
        )  # fmt: skip
    if (
        ctx.ttft_headroom()
        and chunk_bounds is not None
        and chunk is not None
        and chunk > chunk_bounds.min
    ):
        target, how = _lower_chunk_target(ctx, cost, chunk, chunk_bounds)
        replicas, reason, first = _replicas_before_a_knob(ctx, sized)
        return Proposal(
            replicas, reason, {"chunkSize": (target, Reason.LOWER_CHUNK_FOR_ITL)},
            why=f"{first}chunkSize {chunk}→{target}: "
            f"{'; '.join(filter(None, (chunk_steps, how)))}",
            wanted=sized.wanted,
        )  # fmt: skip
    if not ctx.ttft_headroom():
        why = "ITL over its objective and TTFT has no headroom for a smaller batch"
    elif chunk_steps:
        why = f"ITL over its objective and no smaller chunk to lower: {chunk_steps}"
    else:
        why = "ITL over its objective and no knob left to lower"
    regime_sized = ctx.tunables.use_regime_sizing
    if regime_sized and sized.wanted is not None and sized.wanted > ctx.replicas:
        return Proposal(sized.replicas, Reason.SCALE_UP, why=f"{why}: {sized.why}",
                        wanted=sized.wanted)  # fmt: skip
    wanted = ctx.replicas + 1
    effect = (
        "another replica leaves fewer prompts to share each replica's steps"
        if chunk_steps
        else "another replica lowers the batch per replica"
    )
    return Proposal(wanted, Reason.SCALE_UP, why=f"{why}: {effect}", wanted=wanted)


def _replicas_before_a_knob(ctx: Context, sized: Proposal) -> tuple[int, Reason, str]:
    """The replica count that goes with a knob change: the count sized for the load where it
    is above the fleet, else the current one (with the reason, and a clause saying why).

    The knob gate defers a rolling restart while the load wants replicas the fleet does not
    have: proposing the knob at the current count would wait for replicas nothing adds.
    """
    if ctx.tunables.use_regime_sizing and sized.wanted is not None and sized.wanted > ctx.replicas:
        why = f"replicas {ctx.replicas}→{sized.replicas} before any rollout ({sized.why}); "
        return sized.replicas, Reason.SCALE_UP, why
    return ctx.replicas, Reason.NO_CHANGE, ""


def _chunk_steps_miss(ctx: Context, cost: StepCost | None, chunk: int | None) -> str:
    """Why the steps carrying a prefill chunk, not the decode batch, miss the ITL objective
    (empty without a step cost fitted on the window, or where the decode batch is the cause).

    Every step carries the running decodes, a few carry a prefill chunk too. The step-cost
    model fitted on the window gives a decode-only step of f + k·d, the window's mean ITL;
    when that is within the objective with headroom while a step carrying a full chunk is
    over it, the tail is made of chunk steps: a smaller max batch size would shorten every
    step by only k per decode left out, and cost the slots of the requests it turns away.
    """
    itl = ctx.spec.itl
    if cost is None or chunk is None or itl is None:
        return ""
    decode_step = cost.step_ms(ctx.running_per_pod())
    chunk_step = itl_with_chunk_ms(chunk, cost)
    if decode_step > itl.threshold_ms * ctx.tunables.headroom or chunk_step <= itl.threshold_ms:
        return ""
    return (
        f"a decode-only step takes {decode_step:.0f} ms and one carrying a {chunk}-token "
        f"prefill chunk {chunk_step:.0f} ms (step cost {cost.fixed_ms:.1f} ms + "
        f"{cost.per_token_ms * 1000:.1f} µs/token): the chunk steps, not the batch, lengthen ITL"
    )


def _lower_chunk_target(
    ctx: Context, cost: StepCost | None, chunk: int, bounds: Bounds
) -> tuple[int, str]:
    """The largest chunk below `chunk` whose full step the model keeps within the ITL
    objective with headroom (the minimum if none), or half of it without a fitted step cost."""
    halved = bounds.clamp(chunk // 2), "shorter prefill chunks shorten the steps that decodes share"
    itl = ctx.spec.itl
    if cost is None or itl is None:
        return halved
    limit = itl.threshold_ms * ctx.tunables.headroom
    smaller = [c for c in candidate_chunk_sizes(bounds.min, bounds.max) if c < chunk]
    within = [c for c in smaller if itl_with_chunk_ms(c, cost) <= limit]
    target = max(within) if within else bounds.min
    return target, (
        f"a step carrying a {target}-token chunk takes {itl_with_chunk_ms(target, cost):.0f} ms "
        f"by the step-cost model ({cost.fixed_ms:.1f} ms + {cost.per_token_ms * 1000:.1f} "
        "µs/token)"
    )


RULES = {
    Regime.QUEUE_BOUND: queue_bound,
    Regime.PREFILL_BOUND: prefill_bound,
    Regime.DECODE_BOUND: decode_bound,
    Regime.HEALTHY: healthy,
    Regime.IDLE: idle,
}
