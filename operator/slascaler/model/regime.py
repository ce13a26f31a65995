"""The load-regime model: why is TTFT high, and would more replicas help?

TTFT = queue + tokenization/overhead + prefill (+ first decode). Replicas remove only queue
time, so the question the model answers is counterfactual: *without its queue time, would
the TTFT percentile meet the objective?*

- yes, or queue time is at least half of the mean TTFT → **QueueBound** (add replicas);
- no → **PrefillBound** (replicas cannot help; the prompts themselves take too long);
- TTFT meets its objective but inter-token latency does not → **DecodeBound**;
- both objectives met → **Healthy**; nothing served and nothing waiting → **Idle**;
- no data, NaN, or too few requests for a percentile to mean anything → **Unknown**.

From histograms the counterfactual percentile is prefill's percentile plus the residual
(TTFT − queue − prefill means, exact from `_sum/_count`), capped at TTFT's own percentile.
vLLM's prefill buckets are coarse (first bound 300 ms) and in-bucket interpolation puts
their quantiles high, so this errs towards PrefillBound when both are close — the safe
side, since a PrefillBound decision never adds GPUs.

Called by the policy and by `slascaler analyze`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from slascaler.model.attribution import largest_component_shares
from slascaler.model.observation import Observation
from slascaler.model.samples import TTFTBreakdown, analyze_samples, tail_view

QUEUE_SHARE_FOR_QUEUE_BOUND = 0.5  # queue is at least half of the mean TTFT
DEFAULT_MIN_REQUESTS = 20  # fewer requests in a window give no meaningful p95


class Regime(StrEnum):
    QUEUE_BOUND = "QueueBound"
    PREFILL_BOUND = "PrefillBound"
    DECODE_BOUND = "DecodeBound"
    HEALTHY = "Healthy"
    IDLE = "Idle"
    UNKNOWN = "Unknown"


@dataclass(frozen=True)
class RegimeAnalysis:
    """The regime with the figures that decided it (ms; shares in [0, 1])."""

    regime: Regime
    explanation: str
    requests: float
    percentile: float
    ttft_ms: float  # the TTFT at `percentile`
    ttft_objective_ms: float | None
    without_queue_ms: float  # the same percentile without queue time
    queue_share: float  # mean queue time / mean TTFT
    component_means_ms: Mapping[str, float]
    bottleneck_distribution: Mapping[str, float]
    itl_ms: float = math.nan  # inter-token latency at its objective's percentile
    itl_objective_ms: float | None = None
    ttft_quantiles_ms: Mapping[str, float] = field(default_factory=dict)
    # TTFT's own mean: not the components' sum, which exceeds it where a histogram's queue
    # and prefill means add up to more than its TTFT mean (no overhead is then left).
    ttft_mean_ms: float = math.nan

    @property
    def ttft_over(self) -> bool:
        return self.ttft_objective_ms is not None and self.ttft_ms > self.ttft_objective_ms

    @property
    def itl_over(self) -> bool:
        return self.itl_objective_ms is not None and self.itl_ms > self.itl_objective_ms

    def scores(self) -> dict[str, float]:
        """Pressure on each objective (value / objective) and the queue's share of TTFT."""
        out = {"queueShare": self.queue_share}
        if self.ttft_objective_ms:
            out["ttftPressure"] = self.ttft_ms / self.ttft_objective_ms
        if self.itl_objective_ms and math.isfinite(self.itl_ms):
            out["itlPressure"] = self.itl_ms / self.itl_objective_ms
        return out


def classify(
    *,
    requests: float,
    waiting: float,
    min_requests: int,
    percentile: float,
    ttft_ms: float,
    ttft_objective_ms: float | None,
    without_queue_ms: float,
    queue_share: float,
    tail_queue_share: float,
    itl_ms: float = math.nan,
    itl_objective_ms: float | None = None,
) -> tuple[Regime, str]:
    """The regime and a one-line explanation naming the numbers behind it.

    `tail_queue_share` (the share of the slowest requests whose largest component is queue)
    decides the regime only when there is no TTFT objective to test the counterfactual on.
    """
    p = f"p{percentile:g}"
    if requests <= 0:
        if waiting > 0:
            return (
                Regime.QUEUE_BOUND,
                f"{waiting:.0f} requests waiting and none got a first token in the window",
            )
        return Regime.IDLE, "no requests in the window"
    if requests < min_requests or not math.isfinite(ttft_ms):
        return (
            Regime.UNKNOWN,
            f"{requests:.0f} requests in the window, fewer than the {min_requests} needed",
        )
    if ttft_objective_ms is None:
        if tail_queue_share >= QUEUE_SHARE_FOR_QUEUE_BOUND:
            return (
                Regime.QUEUE_BOUND,
                f"queue time is the largest component in {tail_queue_share:.0%} of the "
                f"requests slower than the TTFT {p} of {ttft_ms:.0f} ms",
            )
        return (
            Regime.PREFILL_BOUND,
            f"TTFT {p} {ttft_ms:.0f} ms would still be {without_queue_ms:.0f} ms without any "
            f"queueing: the slowest requests are slow in their own processing, queue time is "
            f"their largest component in {tail_queue_share:.0%} of them",
        )
    if ttft_ms > ttft_objective_ms:
        head = f"TTFT {p} {ttft_ms:.0f} ms > {ttft_objective_ms:.0f} ms objective"
        if without_queue_ms <= ttft_objective_ms:
            return (
                Regime.QUEUE_BOUND,
                f"{head}; without queueing it would be {without_queue_ms:.0f} ms",
            )
        if queue_share >= QUEUE_SHARE_FOR_QUEUE_BOUND:
            return (
                Regime.QUEUE_BOUND,
                f"{head}; queue time is {queue_share:.0%} of mean TTFT",
            )
        return (
            Regime.PREFILL_BOUND,
            f"{head}; even without queueing it would be {without_queue_ms:.0f} ms "
            f"(queue is {queue_share:.0%} of mean TTFT): removing the queue alone cannot fix it",
        )
    if itl_objective_ms is not None and math.isfinite(itl_ms) and itl_ms > itl_objective_ms:
        return (
            Regime.DECODE_BOUND,
            f"inter-token latency {itl_ms:.0f} ms > {itl_objective_ms:.0f} ms objective "
            f"(TTFT {p} {ttft_ms:.0f} ms meets its {ttft_objective_ms:.0f} ms)",
        )
    itl_text = f", ITL {itl_ms:.0f} ms" if math.isfinite(itl_ms) else ""
    return (
        Regime.HEALTHY,
        f"TTFT {p} {ttft_ms:.0f} ms ≤ {ttft_objective_ms:.0f} ms objective{itl_text}",
    )


def analyze_sample_regime(
    samples: Sequence[TTFTBreakdown],
    percentile: float = 95.0,
    objective_ms: float | None = None,
    min_requests: int = 1,
) -> RegimeAnalysis:
    """The regime of per-request samples, optionally against a TTFT objective."""
    stats = analyze_samples(samples)
    tail = tail_view(samples, percentile)
    queue_share = stats.component_means_ms["queue"] / stats.mean_ms if stats.mean_ms > 0 else 0.0
    regime, explanation = classify(
        requests=len(samples),
        waiting=0.0,
        min_requests=min_requests,
        percentile=percentile,
        ttft_ms=tail.ttft_ms,
        ttft_objective_ms=objective_ms,
        without_queue_ms=tail.without_queue_ms,
        queue_share=queue_share,
        tail_queue_share=tail.bottleneck_distribution.get("queue", 0.0),
    )
    return RegimeAnalysis(
        regime=regime,
        explanation=explanation,
        requests=len(samples),
        percentile=percentile,
        ttft_ms=tail.ttft_ms,
        ttft_objective_ms=objective_ms,
        without_queue_ms=tail.without_queue_ms,
        queue_share=queue_share,
        component_means_ms={str(k): v for k, v in stats.component_means_ms.items()},
        bottleneck_distribution={str(k): v for k, v in stats.bottleneck_distribution.items()},
        ttft_quantiles_ms={"p50": stats.p50_ms, "p95": stats.p95_ms, "p99": stats.p99_ms},
        ttft_mean_ms=stats.mean_ms,
    )


def analyze_observation(
    observation: Observation,
    percentile: float,
    objective_ms: float | None,
    itl_percentile: float | None = None,
    itl_objective_ms: float | None = None,
    min_requests: int = DEFAULT_MIN_REQUESTS,
) -> RegimeAnalysis:
    """The regime of one window of histograms. The caller has checked nothing is missing."""
    ttft, queue, prefill = observation.ttft, observation.queue, observation.prefill
    if ttft is None or queue is None or prefill is None:
        raise ValueError("analyze_observation needs TTFT, queue and prefill histograms")
    q = percentile / 100.0
    requests = ttft.total
    ttft_p = ttft.quantile(q)
    queue_mean = queue.mean if queue.total > 0 else 0.0
    prefill_mean = prefill.mean if prefill.total > 0 else 0.0
    ttft_mean = ttft.mean
    overhead = max(0.0, ttft_mean - queue_mean - prefill_mean) if math.isfinite(ttft_mean) else 0.0
    prefill_p = prefill.quantile(q) if prefill.total > 0 else math.nan
    without_queue = min(ttft_p, prefill_p + overhead) if math.isfinite(prefill_p) else ttft_p
    queue_share = queue_mean / ttft_mean if ttft_mean and ttft_mean > 0 else 0.0
    shares = largest_component_shares(
        {"queue": queue, "prefill": prefill}, {"tokenization": overhead} if overhead > 0 else {}
    )
    itl_p = math.nan
    itl = observation.itl
    if itl is not None and itl.total > 0:
        itl_p = itl.quantile((itl_percentile or percentile) / 100.0)
    waiting = observation.waiting if math.isfinite(observation.waiting) else 0.0
    regime, explanation = classify(
        requests=requests,
        waiting=waiting,
        min_requests=min_requests,
        percentile=percentile,
        ttft_ms=ttft_p,
        ttft_objective_ms=objective_ms,
        without_queue_ms=without_queue,
        queue_share=queue_share,
        tail_queue_share=shares.get("queue", 0.0),
        itl_ms=itl_p,
        itl_objective_ms=itl_objective_ms,
    )
    return RegimeAnalysis(
        regime=regime,
        explanation=explanation,
        requests=requests,
        percentile=percentile,
        ttft_ms=ttft_p,
        ttft_objective_ms=objective_ms,
        without_queue_ms=without_queue,
        queue_share=queue_share,
        component_means_ms={
            "queue": queue_mean,
            "tokenization": overhead,
            "prefill": prefill_mean,
            "decode": 0.0,
        },
        bottleneck_distribution=shares,
        itl_ms=itl_p,
        itl_objective_ms=itl_objective_ms,
        ttft_quantiles_ms={f"p{k}": ttft.quantile(k / 100.0) for k in (50, 95, 99)},
        ttft_mean_ms=ttft_mean,
    )
