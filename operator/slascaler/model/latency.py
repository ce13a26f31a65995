"""How much load a fleet carries within the objectives: the engine as a shared processor.

An LLM engine with continuous batching and chunked prefill serves every admitted request at
once, sharing each step's token budget between prefill chunks and decodes; a prompt's
prefill stretches as more work shares the steps. That is a processor-sharing server, whose
jobs take their time alone divided by (1 − u), u the server's utilisation (M/G/1-PS), so
the stretch is proportional to z = u / (1 − u). Behind a least-outstanding router c replicas
pool their capacity: at one utilisation the tail waits less as c grows, as 1/√c in the
square-root staffing regime of many-server queues (Halfin–Whitt). So the TTFT percentile of
a fleet of c replicas each doing W tokens/s of work is modelled as

    TTFT_p(W, c) = I + b · z(W / W_max) / √c

with W_max a replica's token throughput when every step is full, I the TTFT of an idle
fleet (the tail prompts' own prefill: what no replica count removes) and b the weight of
contention. The inter-token latency is the step time, growing with the tokens per step:
ITL_p(W) = c0 + c1 · W / W_max.

Measured on the simulated vLLM engine (A100 profile, the Azure conversation mix, 15-minute
runs at fixed counts, `x = z/√c`): the excess of TTFT p95 over the idle floor at 5.5
requests/s per replica is 217, 127, 76 and 51 ms at 1, 2, 4 and 8 replicas, that is b =
145, 120, 101 and 96 ms: the √c pooling holds within 20% from two replicas on.

Work is counted in tokens (computed prompt tokens after the prefix cache, plus generated
tokens), not requests, so the model survives a change of the prompt/output mix.

- `step_capacity` estimates W_max from one window (the step cost fitted from the mean
  prefill time and ITL, `model.chunking`); `LoadPoint`s are windows seen at one load.
- `fit_latency` fits (I, b) and (c0, c1) to recent points by weighted least squares, the
  slope pulled towards a prior (`prior_slope`, with the weight of `prior_points` windows)
  so that windows all at one load still give a usable, cautious model; the residual is
  the fit's uncertainty. Where the windows' tokens per request are known, the floor may
  rise with them (a third term, `_fit_with_mix`): busier windows are often windows of
  longer requests, and fitted on x alone the slope took the longer prompts' own prefill
  for contention (conversation trace: 299 ms against 160 ms with the mix, over one run).
  `LatencyModel.at_mix` moves the floor to a window's own mix, which sizing uses: the
  superposed trace's hours of long code prompts raise the floor the replicas must leave
  room above.
- `replicas_for` finds the fewest replicas whose predicted latencies meet the targets.
- `ReplicaWorth` is what replicas are worth to one fleet: the TTFT the model predicts for
  its load at any replica count (so at one replica more or less), and the gain of one more
  replica; a shared GPU pool (`policy.pool`) grants replicas where they gain the most.

Pure; called by the policy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from slascaler.model.chunking import StepCost, estimate_step_cost

MAX_UTILISATION = 0.95  # never plan a replica closer to saturation than this
# Standard errors the fitted rise of the floor with the mix must clear to be believed.
MIX_SIGNIFICANCE = 2.0


@dataclass(frozen=True)
class LoadPoint:
    """One window at one load: the replicas, work per replica and the latencies it gave."""

    at: float  # when (seconds, the policy's clock)
    work: float  # tokens/s per replica (computed prompt + generated)
    ttft_ms: float  # TTFT at the objective's percentile
    itl_ms: float  # ITL at its objective's percentile (NaN when unknown)
    replicas: int = 1
    tokens_per_request: float = math.nan  # the window's mix (NaN when unknown)


def step_capacity(
    mean_prefill_ms: float,
    mean_prompt_tokens: float,
    chunk_size: int,
    decode_tokens: float,
    mean_itl_ms: float,
) -> float | None:
    """Token throughput of one replica whose steps are full (tokens/s), from one window.

    The step cost t(n) = f + k·n is fitted from the window's means (`estimate_step_cost`);
    a full step carries `chunk_size` tokens in t(chunk_size). Contention inflates the mean
    prefill time and so k: the estimate errs low (towards more replicas).
    """
    cost = estimate_step_cost(
        mean_prefill_ms, mean_prompt_tokens, chunk_size, decode_tokens, mean_itl_ms
    )
    if cost is None:
        return None
    return full_step_throughput(cost, chunk_size)


def full_step_throughput(cost: StepCost, chunk_size: int) -> float:
    return chunk_size / (cost.step_ms(chunk_size) / 1000.0)


def contention(work: float, capacity: float, replicas: int) -> float:
    """x = z(u) / √c, the stretch contention puts on the tail (see the module docstring)."""
    u = min(max(work / capacity, 0.0), MAX_UTILISATION)
    return u / (1.0 - u) / math.sqrt(max(1, replicas))


@dataclass(frozen=True)
class Curve:
    """y = floor + slope · x over the points it was fitted on, and how well it fits."""

    floor: float
    slope: float
    residual: float  # weighted root mean square residual (ms)
    points: int
    spread: float  # max − min of x over the points: 0 means one load seen
    per_token: float = 0.0  # how the floor rises per token of work a request brings (ms)
    mix: float = math.nan  # the tokens per request the floor is at (NaN: not fitted on it)


@dataclass(frozen=True)
class ItlEvidence:
    """A window's work per replica (tokens/s) and the ITL percentile it met the target at
    (work 0 and NaN: no window met it)."""

    work: float
    itl_ms: float


NO_ITL_EVIDENCE = ItlEvidence(0.0, math.nan)


@dataclass(frozen=True)
class LatencyModel:
    """TTFT and ITL as functions of the work per replica (see the module docstring)."""

    capacity: float  # W_max, tokens/s per replica
    ttft: Curve  # I + b · z(u) / √c
    itl: Curve | None  # c0 + c1 · u
    # The window with the most work per replica that met the ITL target, below any that
    # missed it (`itl_evidence`): met up to there whatever the line says.
    itl_met: ItlEvidence = NO_ITL_EVIDENCE

    def at_mix(self, tokens_per_request: float) -> LatencyModel:
        """The model for windows whose requests bring `tokens_per_request` tokens: the TTFT
        floor moved along the fitted mix term (unchanged where none was fitted)."""
        curve = self.ttft
        if curve.per_token <= 0 or not math.isfinite(curve.mix + tokens_per_request):
            return self
        floor = max(0.0, curve.floor + curve.per_token * (tokens_per_request - curve.mix))
        return replace(self, ttft=replace(curve, floor=floor, mix=tokens_per_request))

    def ttft_at(self, work: float, replicas: int) -> float:
        return self.ttft.floor + self.ttft.slope * contention(work, self.capacity, replicas)

    def itl_at(self, work: float) -> float:
        if self.itl is None:
            return math.nan
        return self.itl.floor + self.itl.slope * min(work / self.capacity, 1.0)

    def meets(
        self, work: float, replicas: int, ttft_target_ms: float, itl_target_ms: float | None
    ) -> bool:
        if work / self.capacity > MAX_UTILISATION:
            return False
        if self.ttft_at(work, replicas) > ttft_target_ms:
            return False
        if itl_target_ms is None or work <= self.itl_met.work:
            return True
        return not self.itl_at(work) > itl_target_ms


def _fit(
    xs: Sequence[float],
    ys: Sequence[float],
    weights: Sequence[float],
    prior_slope: float,
    prior_weight: float,
) -> Curve:
    """min Σ w (y − a − b·x)² + prior_weight · (b − prior_slope)² with a, b ≥ 0."""
    sw = sum(weights)
    sx = sum(w * x for w, x in zip(weights, xs, strict=True))
    sy = sum(w * y for w, y in zip(weights, ys, strict=True))
    sxx = sum(w * x * x for w, x in zip(weights, xs, strict=True)) + prior_weight
    sxy = sum(w * x * y for w, x, y in zip(weights, xs, ys, strict=True))
    sxy += prior_weight * prior_slope
    determinant = sw * sxx - sx * sx
    if determinant > 1e-12:
        slope = (sw * sxy - sx * sy) / determinant
        floor = (sy - slope * sx) / sw
    else:
        slope, floor = prior_slope, (sy - prior_slope * sx) / sw
    if slope < 0:
        slope, floor = 0.0, sy / sw
    if floor < 0:
        floor, slope = 0.0, max(0.0, sxy / sxx)
    residual = math.sqrt(
        sum(w * (y - floor - slope * x) ** 2 for w, x, y in zip(weights, xs, ys, strict=True))
        / sw
    )
    return Curve(floor, slope, residual, len(xs), max(xs) - min(xs))


def _fit_with_mix(
    xs: Sequence[float],
    ys: Sequence[float],
    mixes: Sequence[float],
    weights: Sequence[float],
    prior_slope: float,
    prior_weight: float,
) -> Curve | None:
    """min Σ w (y − a − b·x − m·(t − t̄))² + prior_weight · (b − prior_slope)², t the
    window's tokens per request and t̄ their weighted mean; the curve is y = a + b·x at the
    mean mix. None when the mix does not vary, or does not raise the TTFT (m ≤ 0), or m is
    within `MIX_SIGNIFICANCE` standard errors of 0, or a or b would be negative: the plain
    fit then stands.

    A busier window is often one of longer requests (in tokens/s the two move together), and
    a longer request's own prefill raises the tail whatever the replicas: fitted on x alone,
    the slope takes the floor's rise for contention's, and the model overstates what one
    replica fewer would cost. The residual stays that of y − a − b·x: the mix changes from
    window to window, and the margin is for that scatter too.

    Where the windows' mixes hardly differ, the slightest correlation of their TTFTs with
    the mix makes m large, and the floor moves far with a window's mix: in the e2e load
    step, mixes within ±2% of 1.1k tokens and two windows the fleet spent waiting for batch
    slots gave m = 11 ms per token, and a floor that moved from 96 to 536 ms between windows
    at 4 req/s; the fleet scaled from 2 replicas back to 6, the TTFT at 100 ms all along.
    The significance test asks that the rise stand out of the windows' scatter."""
    sw = sum(weights)
    mean_mix = sum(w * t for w, t in zip(weights, mixes, strict=True)) / sw
    ds = [t - mean_mix for t in mixes]
    moments = [[0.0] * 3 for _ in range(3)]
    rhs = [0.0] * 3
    for w, x, d, y in zip(weights, xs, ds, ys, strict=True):
        row = (1.0, x, d)
        for i in range(3):
            rhs[i] += w * row[i] * y
            for j in range(3):
                moments[i][j] += w * row[i] * row[j]
    moments[1][1] += prior_weight
    rhs[1] += prior_weight * prior_slope
    if moments[2][2] <= 1e-9 * sw:
        return None
    solution = _solve3(moments, rhs)
    if solution is None:
        return None
    floor, slope, per_token = solution
    if per_token <= 0 or slope < 0 or floor < 0:
        return None
    residuals = [
        (w, y - floor - slope * x - per_token * d)
        for w, x, d, y in zip(weights, xs, ds, ys, strict=True)
    ]
    if per_token < MIX_SIGNIFICANCE * _standard_error_of_mix(moments, residuals):
        return None
    residual = math.sqrt(
        sum(w * (y - floor - slope * x) ** 2 for w, x, y in zip(weights, xs, ys, strict=True))
        / sw
    )
    return Curve(floor, slope, residual, len(xs), max(xs) - min(xs), per_token, mean_mix)


def _standard_error_of_mix(
    moments: list[list[float]], residuals: Sequence[tuple[float, float]]
) -> float:
    """The standard error of the mix term of a weighted least-squares fit with these normal
    equations (`moments`) and (weight, residual) per window: σ² (M⁻¹)₂₂, σ² estimated from
    the residuals over n − 3 degrees of freedom; infinite with too few windows to say."""
    if len(residuals) <= 3:
        return math.inf
    variance = sum(w * r * r for w, r in residuals) / (len(residuals) - 3)
    (a, b, _), (c, d, _), _ = moments
    determinant = _det3(moments)
    if determinant <= 0:
        return math.inf
    return math.sqrt(max(0.0, variance * (a * d - b * c) / determinant))


def _det3(m: list[list[float]]) -> float:
    return (
        m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1])
        - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
        + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0])
    )


def _solve3(matrix: list[list[float]], rhs: list[float]) -> tuple[float, float, float] | None:
    """Cramer's rule for a 3×3 system; None when it is (nearly) singular."""
    whole = _det3(matrix)
    scale = max(abs(v) for row in matrix for v in row)
    if abs(whole) <= 1e-12 * scale**3:
        return None
    values = []
    for column in range(3):
        replaced = [
            [rhs[i] if j == column else matrix[i][j] for j in range(3)] for i in range(3)
        ]
        values.append(_det3(replaced) / whole)
    return values[0], values[1], values[2]


def fit_latency(
    points: Sequence[LoadPoint],
    capacity: float,
    now: float,
    half_life_s: float,
    prior_slope_fraction: float,
    prior_points: float,
) -> LatencyModel | None:
    """Fit the TTFT and ITL curves to `points` (recent ones weigh more: `half_life_s`).

    The TTFT slope is pulled towards `prior_slope_fraction` × the mean TTFT observed, with
    the weight of `prior_points` windows spread over one unit of contention; windows at
    several loads outweigh it quickly.
    """
    usable = [p for p in points if p.work >= 0 and math.isfinite(p.ttft_ms)]
    if not usable or capacity <= 0:
        return None
    weights = [0.5 ** max(0.0, (now - p.at) / half_life_s) for p in usable]
    xs = [contention(p.work, capacity, p.replicas) for p in usable]
    ys = [p.ttft_ms for p in usable]
    level = sum(w * y for w, y in zip(weights, ys, strict=True)) / sum(weights)
    prior_slope = prior_slope_fraction * level
    prior_weight = prior_points * sum(weights) / len(weights)
    mixes = [p.tokens_per_request for p in usable]
    ttft = None
    if all(math.isfinite(t) and t > 0 for t in mixes):
        ttft = _fit_with_mix(xs, ys, mixes, weights, prior_slope, prior_weight)
    if ttft is None:
        ttft = _fit(xs, ys, weights, prior_slope, prior_weight)
    with_itl = [(p, w) for p, w in zip(usable, weights, strict=True) if math.isfinite(p.itl_ms)]
    itl = None
    if with_itl:
        us = [min(p.work / capacity, 1.0) for p, _ in with_itl]
        values = [p.itl_ms for p, _ in with_itl]
        itl = _fit(us, values, [w for _, w in with_itl], 0.0, 0.0)
    return LatencyModel(capacity, ttft, itl)


def itl_evidence(points: Sequence[LoadPoint], itl_target_ms: float) -> ItlEvidence:
    """The window with the most work per replica that met the ITL target, among the windows
    below the least work at which one missed it (work 0 where none did), with its ITL (the
    highest of the windows at that work).

    The percentile of ITL does not grow along a line with the load: it is the decode-only
    step while few of a replica's steps carry a prefill chunk, and jumps to the chunk step
    (several times longer) once more than the percentile's complement of the tokens come
    from such steps. A line through windows on both sides of that jump puts its limit
    below the loads that met the target (Azure's code trace ×3 on an A100, ITL ≤ 60 ms:
    23 ms at 1.8k tokens/s per replica, 178 ms at 2.9k and more, and the line's limit at
    1.1k). Windows that met the target are direct evidence, up to the first that missed.

    The other way, a line fitted through windows well under the target can promise more than
    the last of them shows: on the conversation trace (A100, ITL ≤ 100 ms, target 92) the
    line 116.5·u allowed 3 replicas at 8.3k tokens/s each, 73 ms, where the window at 7.1k
    had met at 88 ms; at 3 replicas the ITL of the next minute was 133 ms. So a scale-in
    stops where the ITL, grown in proportion to the work from that window, would miss the
    target (`policy.sizing`).
    """
    missed = min(
        (p.work for p in points if math.isfinite(p.itl_ms) and p.itl_ms > itl_target_ms),
        default=math.inf,
    )
    met = [p for p in points if p.itl_ms <= itl_target_ms and p.work < missed]
    if not met:
        return NO_ITL_EVIDENCE
    work = max(p.work for p in met)
    return ItlEvidence(work, max(p.itl_ms for p in met if p.work == work))


def replicas_for(
    total_work: float,
    model: LatencyModel,
    ttft_target_ms: float,
    itl_target_ms: float | None,
    limit: int,
) -> int | None:
    """The fewest replicas (≤ `limit`) that carry `total_work` tokens/s within the targets;
    None when no count up to the limit does."""
    if total_work <= 0:
        return 1
    lowest = max(1, math.ceil(total_work / (model.capacity * MAX_UTILISATION) - 1e-9))
    for replicas in range(lowest, limit + 1):
        if model.meets(total_work / replicas, replicas, ttft_target_ms, itl_target_ms):
            return replicas
    return None


@dataclass(frozen=True)
class ReplicaWorth:
    """What replicas are worth to one fleet: its predicted TTFT for a load, by replica count.

    `work` is the total load to carry (tokens/s); the curve is the fitted TTFT one. Past
    saturation (the load over the fleet's capacity) the TTFT is unbounded: +inf. Between
    `MAX_UTILISATION` and saturation the model's own formula is used without its cap, so
    the worth of a replica keeps growing as the fleet nears saturation.
    """

    work: float  # tokens/s the fleet carries
    capacity: float  # W_max, tokens/s per replica
    floor_ms: float  # I: the TTFT of an idle fleet
    slope_ms: float  # b: the weight of contention
    objective_ms: float  # the TTFT objective, to compare gains across fleets

    @classmethod
    def of(cls, model: LatencyModel, work: float, objective_ms: float) -> ReplicaWorth:
        return cls(work, model.capacity, model.ttft.floor, model.ttft.slope, objective_ms)

    def ttft_ms(self, replicas: int) -> float:
        """The TTFT percentile predicted with `replicas` replicas sharing the load."""
        if replicas < 1 or self.capacity <= 0:
            return math.inf
        u = max(self.work, 0.0) / (replicas * self.capacity)
        if u >= 1.0:
            return math.inf
        return self.floor_ms + self.slope_ms * u / (1.0 - u) / math.sqrt(replicas)

    def around(self, replicas: int) -> tuple[float, float, float]:
        """The predicted TTFT with one replica fewer, as many, and one more."""
        return self.ttft_ms(replicas - 1), self.ttft_ms(replicas), self.ttft_ms(replicas + 1)

    def gain(self, replicas: int) -> float:
        """What the `replicas`-th replica takes off the TTFT, as a share of the objective;
        +inf when the fleet without it is saturated (it is needed before any TTFT exists)."""
        before, after = self.ttft_ms(replicas - 1), self.ttft_ms(replicas)
        if math.isinf(before):
            return math.inf
        return max(0.0, before - after) / self.objective_ms
