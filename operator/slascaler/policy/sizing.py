"""How many replicas the load calls for, whatever the regime.

1. The latency model (`model.latency`) is fitted to the windows remembered at the current
   knob values, its floor moved to this window's tokens per request; its residual, at
   least `sizing_margin`'s share, is taken off the objectives (`objective_target`). Its
   inverse gives the most work one replica carries within both objectives; for ITL at
   least the work per replica that windows met the ITL target at, below the least at which
   one missed it (`model.latency.itl_evidence`: the ITL percentile jumps, it does not
   follow the fitted line); a scale-in stops where the ITL, grown in proportion to the
   work from that window, would miss the target (`_itl_held_replicas`).
2. The load to carry: the work arriving now (`learning.window_load`: the short window in a
   burst), plus the backlog drained within a start-up delay, plus the trend the last
   minutes kept (a rise in both halves of them, not a step) carried to now + start-up
   (only upwards: a falling load is followed, not anticipated), at least the recent peaks
   where bursts recur, with headroom for how far the forecasts have been off.
3. Replicas = load / work per replica. When even an idle replica misses the TTFT objective
   (prefill-bound), replicas cannot help: the count is the one at which contention adds at
   most `PREFILL_BOUND_STRETCH` to the idle TTFT, so an oversized fleet still shrinks.
4. A scale-in stops where the load per replica would pass `model_trust` times the highest
   work per replica of the windows the model was fitted on (never above the replicas
   provisioned now): beyond, its capacity and slope are an extrapolation, and the next
   step in waits for a steady window at the new count to confirm them. A scale-in is also
   sized at the lowest capacity estimated within `capacity_memory_s` (`size`): the estimate
   moves with each window's mix, and one made at its high end saturates the replicas left.
5. A steady window that met both targets bounds how far the model may go past it: at most
   `evidence_slack` replicas above those that served it, scaled by the load coming
   (`Evidence`). Where the model's floor sits a few ms under the target, its count
   explodes (the superposed traces: 49–121 replicas called for while 32 met the target
   with ITL at a tenth of its objective); a healthy window is direct evidence that the
   present count suffices, and the slack still lets the model step ahead of a rise. A
   window that misses a target bounds nothing.
6. At least the replicas whose batch slots (max batch size each) hold the requests that
   run at once, scaled by the load coming, with room for their Poisson scatter
   (`BatchSlots`): the latency model reads its capacity where the batch limit did not
   bind, and after a cut of max batch size (or with a small one set by the user) a replica
   saturates well below it (Azure conversation trace on an A100 with an 80 ms ITL
   objective: a cut to 16 left the model calling for 3 replicas, each of which then
   queued). Below the count serving now the requests run longer (busier replicas take
   longer steps) and a scale-in must leave room for more scatter than a scale-out is called
   at: otherwise the requests running at N + 1 call for N, and at N for N + 1.
7. At least the replicas that keep long prompts from sharing a replica's steps in more than
   `collision_risk` of windows (`model.collisions`, computed by the caller from the window):
   a collision the latency model does not see at low utilisation, and one more replica
   removes it.

Without a model (no steady window yet) it gives the load only; the caller then sizes from a
replica's throughput, or steps proportionally.

Pure; called by `policy.decide`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from slascaler.model.collisions import PromptCollisions
from slascaler.model.latency import (
    ItlEvidence,
    LatencyModel,
    fit_latency,
    itl_evidence,
    replicas_for,
)
from slascaler.policy.learning import WindowLoad
from slascaler.policy.state import PolicyMemory
from slascaler.policy.tunables import Tunables
from slascaler.spec import SLASpec

PREFILL_BOUND_STRETCH = 0.1  # prefill-bound: contention may add 10% to the idle TTFT


@dataclass(frozen=True)
class Evidence:
    """A steady window (every pod ready, no rollout, no backlog) and what it measured:
    `pods` served `work` tokens/s at these percentiles."""

    pods: int
    work: float
    ttft_ms: float
    itl_ms: float  # NaN where the engine reports none


@dataclass(frozen=True)
class BatchSlots:
    """The requests running now (all pods) and the engine's max batch size per replica."""

    running: float
    max_batch: int


@dataclass(frozen=True)
class Sizing:
    """The replica count the load calls for, and what it rests on."""

    replicas: int | None  # None: no model yet
    without_backlog: int | None  # the same, for the arrivals alone (the backlog drains)
    why: str
    feasible: bool  # False: even an idle replica misses the TTFT objective
    model: LatencyModel | None
    per_replica: float | None  # tokens/s one replica carries within the objectives
    load: float  # tokens/s sized for
    forecast: tuple[float, float] | None  # (for time, tokens/s) to check later
    # The fewest replicas that keep long prompts from colliding in more windows than the
    # risk allows (`model.collisions`); None where unknown or where replicas cannot help.
    for_collisions: int | None = None


def _slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (time, load) points; 0 for fewer than two distinct times."""
    if len(points) < 2:
        return 0.0
    mean_t = sum(t for t, _ in points) / len(points)
    mean_w = sum(w for _, w in points) / len(points)
    var = sum((t - mean_t) ** 2 for t, _ in points)
    if var <= 0:
        return 0.0
    return sum((t - mean_t) * (w - mean_w) for t, w in points) / var


def trend_per_s(history: tuple[tuple[float, float], ...], now: float, span_s: float) -> float:
    """The slope (tokens/s per s) the load kept over the last `span_s`: the smaller of the
    least-squares slopes of its two halves when both rise (or both fall), else 0. A ramp
    rises in both halves; a step rises in neither, or in one, and a straight line through
    it would carry the jump on as a rise that is not coming."""
    recent = [(t, w) for t, w in history if now - t <= span_s]
    if len(recent) < 4:
        return 0.0
    middle = now - span_s / 2
    first = _slope([(t, w) for t, w in recent if t <= middle])
    second = _slope([(t, w) for t, w in recent if t > middle])
    if first > 0 and second > 0:
        return min(first, second)
    if first < 0 and second < 0:
        return max(first, second)
    return 0.0


def recent_peak(
    history: tuple[tuple[float, float], ...], now: float, tunables: Tunables, gap_s: float
) -> float:
    """The `burst_quantile` of the load over the last `burst_memory_s`, when bursts recur
    there (at least `recurring_bursts` stretches above `burst_factor` × the median, each
    after the load fell back to the median for longer than `gap_s` — a start-up delay: a
    burst whose estimate dips for less is one burst, and capacity kept through so short a
    dip is what following it does anyway); 0 otherwise: a single burst is followed, not
    held for.

    A burst ends only where the load is back at the median, not where it dips under the
    burst threshold: once a step up and back down fills half the memory, the median lies
    between the two levels, the threshold inside the high one, and its noise crossing the
    threshold read as bursts that recur (the e2e load step, 4 → 16 → 4 req/s with 5 s
    evaluations and a 3 s start-up, went back to its peak count a minute after stepping in)."""
    recent = [(t, w) for t, w in sorted(history) if now - t <= tunables.burst_memory_s]
    if not recent:
        return 0.0
    ordered = sorted(w for _, w in recent)
    median = ordered[len(ordered) // 2]
    bursts, last_high, in_burst = 0, -math.inf, False
    for t, w in recent:
        if w > tunables.burst_factor * median:
            bursts += not in_burst and t - last_high > gap_s
            last_high, in_burst = t, True
        elif w <= (1 + tunables.burst_factor) / 2 * median:
            in_burst = False
    if bursts < tunables.recurring_bursts:
        return 0.0
    return ordered[min(len(ordered) - 1, int(tunables.burst_quantile * len(ordered)))]


def latency_model(memory: PolicyMemory, now: float, tunables: Tunables) -> LatencyModel | None:
    if memory.capacity is None or not memory.load_points:
        return None
    return fit_latency(
        memory.load_points,
        memory.capacity,
        now,
        tunables.load_points_half_life_s,
        tunables.prior_slope_fraction,
        tunables.prior_points,
    )


def objective_target(objective_ms: float, residual_ms: float, tunables: Tunables) -> float:
    """The objective less the model's noise, and at least the sizing margin. Both stand for
    the same thing, the window-to-window scatter of a percentile and the model's error: the
    residual measures it, the margin is the floor while the windows are too few or too alike
    to show it (taking both would count it twice). The noise taken off is capped: windows
    dominated by one giant prompt scatter far more than any replica count changes, and
    sizing for them would add replicas that cannot help."""
    noise = min(tunables.residual_weight * residual_ms, tunables.max_noise_margin * objective_ms)
    return objective_ms - max(noise, objective_ms * (1 - tunables.sizing_margin))


@dataclass(frozen=True)
class _Carried:
    """The load to size for (tokens/s), whatever the replicas' capacity: `predicted` at
    now + start-up with its forecast headroom, `wanted` that and the backlog to drain."""

    rising: float  # tokens/s per s the trend adds (0: none)
    headroom: float
    predicted: float
    wanted: float
    forecast: tuple[float, float]  # (for time, tokens/s) to check later


def size(
    spec: SLASpec,
    memory: PolicyMemory,
    load: WindowLoad,
    now: float,
    tunables: Tunables,
    collisions: PromptCollisions | None = None,
    provisioned: int | None = None,
    evidence: Evidence | None = None,
    slots: BatchSlots | None = None,
) -> Sizing:
    """The replicas the load calls for (see the module docstring); a scale-in is sized at
    the lowest capacity estimated within `capacity_memory_s` (`use_cautious_scale_in`)."""
    carried = _carried(memory, load, now, tunables)
    bounds = _Bounds(collisions, provisioned, evidence, slots)
    model = latency_model(memory, now, tunables) if tunables.use_latency_model else None
    sizing = _count(spec, memory, model, carried, load, tunables, bounds)
    lowest = min((c for _, c in memory.capacity_history), default=None)
    if (
        not tunables.use_cautious_scale_in
        or lowest is None
        or memory.capacity is None
        or not lowest < memory.capacity
        or provisioned is None
        or sizing.replicas is None
        or sizing.replicas >= provisioned
    ):
        return sizing
    # Only the model depends on the capacity: refitted at the lowest, on the same load.
    low_model = latency_model(replace(memory, capacity=lowest), now, tunables)
    cautious = _count(spec, memory, low_model, carried, load, tunables, bounds)
    if cautious.replicas is None or cautious.replicas <= sizing.replicas:
        return sizing
    replicas = min(provisioned, cautious.replicas)
    return replace(
        sizing,
        replicas=replicas,
        without_backlog=max(
            sizing.without_backlog or 0, min(provisioned, cautious.without_backlog or 0)
        ),
        why=f"{sizing.why}; scale-in stops at {replicas}: at "
        f"{lowest:.0f} tokens/s per replica, the lowest capacity estimated in the last "
        f"{tunables.capacity_memory_s:.0f} s, the load needs them",
    )


@dataclass(frozen=True)
class _Bounds:
    """What bounds the model's count besides the load: the caller's readings (`size`)."""

    collisions: PromptCollisions | None
    provisioned: int | None
    evidence: Evidence | None
    slots: BatchSlots | None


def _carried(memory: PolicyMemory, load: WindowLoad, now: float, tunables: Tunables) -> _Carried:
    """The load to size for (the module docstring's point 2)."""
    startup = memory.startup_s or tunables.default_startup_s
    drain = load.backlog_work / max(startup * tunables.backlog_drain_startups, 15.0)
    current = load.arriving_work
    rising = 0.0
    if tunables.use_trend:
        rising = max(0.0, trend_per_s(memory.load_history, now, tunables.trend_window_s))
    headroom = 1.0 + min(memory.forecast_error, tunables.max_forecast_headroom)
    predicted = current + rising * startup
    if tunables.use_burst_memory:
        # Bursts that came and went in the last minutes come again: a fleet sized only for
        # the present is caught by each one while new pods load.
        predicted = max(predicted, recent_peak(memory.load_history, now, tunables, startup))
    forecast = (now + startup, predicted) if rising > 0 else (now + 60.0, current)
    return _Carried(rising, headroom, predicted, predicted * headroom + drain, forecast)


def _count(
    spec: SLASpec,
    memory: PolicyMemory,
    model: LatencyModel | None,
    carried: _Carried,
    load: WindowLoad,
    tunables: Tunables,
    bounds: _Bounds,
) -> Sizing:
    """The replicas `model` calls for to carry the load, within the bounds (module
    docstring, points 1 and 3–7)."""
    collisions, provisioned = bounds.collisions, bounds.provisioned
    evidence, slots = bounds.evidence, bounds.slots
    rising, headroom, predicted = carried.rising, carried.headroom, carried.predicted
    wanted_load, forecast = carried.wanted, carried.forecast
    for_collisions = collisions.replicas if collisions is not None else None
    if model is None:
        return Sizing(None, None, "no steady window measured yet", True, None, None,
                      wanted_load, forecast, for_collisions)  # fmt: skip
    # The floor at this window's mix: the tail prompts' own prefill, which the replicas
    # cannot change, is longer when the requests are (`model.latency`).
    model = model.at_mix(load.tokens_per_request)
    ttft_target = objective_target(spec.ttft.threshold_ms, model.ttft.residual, tunables)
    itl_target = None
    if spec.itl is not None and model.itl is not None:
        itl_target = objective_target(spec.itl.threshold_ms, model.itl.residual, tunables)
        if tunables.use_itl_evidence:
            model = replace(model, itl_met=itl_evidence(memory.load_points, itl_target))
    limit = spec.replicas.max * 4
    feasible = model.ttft.floor < ttft_target
    target = ttft_target
    if not feasible:
        # Replicas cannot bring TTFT under the objective: keep contention small instead.
        target = model.ttft.floor * (1 + PREFILL_BOUND_STRETCH)
    count = replicas_for(wanted_load, model, target, itl_target, limit)
    without_backlog = replicas_for(predicted * headroom, model, target, itl_target, limit)
    by_model = count
    proven = _proven_replicas(evidence, predicted, ttft_target, itl_target, limit, tunables)
    if proven is not None and count is not None and without_backlog is not None:
        count, without_backlog = min(count, proven), min(without_backlog, proven)
    for_slots = _slot_replicas(
        slots, load.work, predicted, headroom, load.pods,
        provisioned if provisioned is not None else load.pods, model.capacity, limit, tunables,
    )
    if for_slots is not None and count is not None and without_backlog is not None:
        count, without_backlog = max(count, for_slots), max(without_backlog, for_slots)
    seen = max((p.work for p in memory.load_points), default=0.0)
    trusted = _trusted_replicas(seen, wanted_load, provisioned, tunables)
    if trusted is not None and count is not None and without_backlog is not None:
        count, without_backlog = max(count, trusted), max(without_backlog, trusted)
    held = _itl_held_replicas(wanted_load, model.itl_met, itl_target, provisioned)
    if held is not None and count is not None and without_backlog is not None:
        count, without_backlog = max(count, held), max(without_backlog, held)
    before_collisions = count
    if for_collisions is not None and count is not None and without_backlog is not None:
        count, without_backlog = max(count, for_collisions), max(without_backlog, for_collisions)
    per_replica = wanted_load / count if count else None
    trend = f", rising {rising * 60:.0f} tokens/s per min" if rising > 0 else ""
    backlog = f", backlog {load.backlog:.0f} requests" if load.backlog >= 1 else ""
    why = (
        f"{wanted_load:.0f} tokens/s to carry ({load.arrivals_per_s:.2f} req/s × "
        f"{load.tokens_per_request:.0f} tokens{trend}{backlog}) need "
        + (f"{by_model} replicas" if by_model else f"more than {limit} replicas")
        + " for "
        + (
            f"TTFT p{spec.ttft.percentile:g} ≤ {ttft_target:.0f} ms"
            if feasible
            else "10% of its idle TTFT (the objective is out of reach of replicas)"
        )
        + (f" and ITL ≤ {itl_target:.0f} ms" if itl_target is not None else "")
        + f" (model: TTFT ≈ {model.ttft.floor:.0f} + {model.ttft.slope:.0f}·z(u)/√replicas, "
        f"u = load / {model.capacity:.0f} tokens/s per replica, {model.ttft.points} windows)"
    )
    if evidence is not None and proven is not None and by_model is not None and proven < by_model:
        why += (
            f"; at most {proven}: {evidence.pods} replicas just met TTFT "
            f"p{spec.ttft.percentile:g} ≤ {ttft_target:.0f} ms on {evidence.work:.0f} tokens/s"
        )
    if slots is not None and for_slots is not None and by_model is not None and (
        for_slots > by_model
    ):
        why += (
            f"; {for_slots} replicas hold in their batch slots ({slots.max_batch} each) the "
            f"requests that run at once ({slots.running:.0f} now, scaled by the load coming and "
            "by the longer steps of busier replicas)"
        )
    if trusted is not None and by_model is not None and trusted > by_model:
        why += (
            f"; scale-in stops at {trusted}: the model has seen at most {seen:.0f} tokens/s "
            f"per replica and is trusted to {tunables.model_trust:g}× that"
        )
    if (
        collisions is not None
        and before_collisions is not None
        and count is not None
        and count > before_collisions
    ):
        why += (
            f"; {count} replicas keep long prompts from sharing a replica's steps in more than "
            f"{tunables.collision_risk:.0%} of windows ({collisions.exposed:.0%} of requests "
            f"would miss the objective if they did, {collisions.requests:.0f} per window)"
        )
    return Sizing(
        count, without_backlog, why, feasible, model, per_replica, wanted_load, forecast,
        for_collisions,
    )  # fmt: skip


def _slot_replicas(
    slots: BatchSlots | None,
    served: float,
    coming: float,
    margin: float,
    pods: int,
    current: int,
    capacity: float,
    limit: int,
    tunables: Tunables,
) -> int | None:
    """The fewest replicas whose batch slots hold the requests that will run at once, with
    `slot_scatter` standard deviations of their Poisson scatter (square-root staffing over
    the slots): those running now over the `pods` that served the window, scaled by the load
    `coming` over the load `served`.

    A count below `current` (the replicas provisioned now) is a scale-in, and holds more:
    the requests are taken at the load with its forecast `margin`, with
    `slot_scale_in_scatter` standard deviations, and stretched by how much longer each stays
    there. A step carries every running sequence's next token, so a replica busy a fraction
    u of its `capacity` (tokens/s) takes steps 1 / (1 − u) times its idle one, and a
    request's time on it grows with them (simulated A100, 4.5 req/s of 1.1k tokens: 1.23 s
    at 2 replicas, 1.56 s at 1, the ratio 1.27 this predicts). Carried unchanged, the
    requests running at N + 1 replicas call for N where at N they call for N + 1, and a
    fleet whose slots bind steps in and straight back out. More replicas are not credited
    with shorter stays: a replica near saturation reads a capacity too close to its load
    for the stretch to shorten anything reliably. Without a capacity there is no stretch."""
    if not tunables.use_slot_sizing or slots is None or slots.max_batch <= 0:
        return None
    if not (math.isfinite(slots.running) and slots.running > 0 and served > 0):
        return None
    at_load = slots.running * coming / served
    known = math.isfinite(capacity) and capacity > 0

    def fits(replicas: int) -> bool:
        if replicas >= current:
            concurrent, scatter = at_load, tunables.slot_scatter
        else:
            stretch = 1.0
            if known:
                spare = 1.0 - served / (replicas * capacity)
                if spare <= 0.0:
                    return False
                stretch = max(1.0, (1.0 - served / (max(1, pods) * capacity)) / spare)
            concurrent = at_load * margin * stretch
            scatter = tunables.slot_scale_in_scatter
        spread = concurrent + scatter * math.sqrt(concurrent)
        return spread <= replicas * slots.max_batch + 1e-9

    spread_now = at_load + tunables.slot_scatter * math.sqrt(at_load)
    fewest = max(1, _whole(spread_now / slots.max_batch, limit))
    return next((n for n in range(fewest, limit) if fits(n)), limit)


def _proven_replicas(
    evidence: Evidence | None,
    predicted: float,
    ttft_target: float,
    itl_target: float | None,
    limit: int,
    tunables: Tunables,
) -> int | None:
    """The most replicas a steady window that met both targets leaves the model: those that
    served it, scaled by the load coming over the load it carried, plus `evidence_slack`;
    None where the window proves nothing (no evidence, or it missed a target)."""
    if not tunables.use_evidence_cap or evidence is None or not evidence.work > 0:
        return None
    if not evidence.ttft_ms <= ttft_target:
        return None
    if itl_target is not None and not evidence.itl_ms <= itl_target:
        return None
    scaled = _whole(evidence.pods * predicted / evidence.work, limit)
    return max(evidence.pods, scaled) + tunables.evidence_slack


def _trusted_replicas(
    seen: float, load: float, provisioned: int | None, tunables: Tunables
) -> int | None:
    """The fewest replicas that keep the load per replica within `model_trust` times
    `seen`, the highest the model was fitted on, at most those provisioned now (it holds a
    scale-in, never adds replicas); None where it does not apply."""
    if not tunables.use_model_trust or provisioned is None or not seen > 0:
        return None
    return min(provisioned, max(1, _whole(load / (tunables.model_trust * seen), provisioned)))


def _itl_held_replicas(
    load: float, evidence: ItlEvidence, itl_target: float | None, provisioned: int | None
) -> int | None:
    """The fewest replicas whose work each keeps the ITL within its target, the ITL grown in
    proportion to the work from the last window that met it (a decode step carries every
    running sequence, and they grow with the load), at most those provisioned now: past
    the windows seen, the fitted line is an extrapolation, so it holds a scale-in and never
    adds replicas. None where it does not apply (no ITL target, no such window)."""
    if itl_target is None or provisioned is None:
        return None
    if not evidence.work > 0 or not math.isfinite(evidence.itl_ms):
        return None
    need = _whole(load * evidence.itl_ms / (evidence.work * itl_target), provisioned)
    return min(provisioned, max(1, need))


def _whole(replicas: float, unbounded: int) -> int:
    """`replicas` rounded up; `unbounded` where it is not finite: a ratio over a vanishing
    load (a window that served 5e-324 tokens/s) is infinite, and has no integer."""
    if not math.isfinite(replicas):
        return unbounded
    return math.ceil(replicas - 1e-9)


def sustainable_rate(sizing: Sizing, load: WindowLoad) -> float | None:
    """Requests/s one replica serves within the objectives, for the status."""
    if sizing.per_replica is None or load.tokens_per_request <= 0:
        return None
    value = sizing.per_replica / load.tokens_per_request
    return value if math.isfinite(value) else None
