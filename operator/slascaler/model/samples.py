"""Per-request TTFT samples: the breakdown of one request, and statistics over many.

TTFT = queue time + tokenization + prefill + first decode step. `analyze_samples` gives the
percentiles of the total (numpy's linear interpolation, as `np.percentile`), the mean, the
mean of each component, and the bottleneck distribution: the share of requests in which each
component is the largest. The tail view (`tail_bottleneck_distribution`, and the TTFT the
slowest requests would have without their queue time) is what the regime classifier needs:
it says whether removing queueing, the only thing replicas remove, would bring the tail under
an objective.

Called by `model.regime`, the `slascaler analyze` command and the tests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

import numpy as np

Component = Literal["queue", "tokenization", "prefill", "decode"]
COMPONENTS: Final[tuple[Component, ...]] = ("queue", "tokenization", "prefill", "decode")


@dataclass(frozen=True)
class TTFTBreakdown:
    """Where one request's time to first token went, in milliseconds."""

    queue_time_ms: float
    tokenization_ms: float
    prefill_ms: float
    first_decode_ms: float

    @property
    def total_ms(self) -> float:
        return self.queue_time_ms + self.tokenization_ms + self.prefill_ms + self.first_decode_ms

    def components(self) -> tuple[float, float, float, float]:
        """The four components in the order of COMPONENTS."""
        return (self.queue_time_ms, self.tokenization_ms, self.prefill_ms, self.first_decode_ms)

    def bottleneck(self) -> Component:
        """The largest component; on a tie, the first in COMPONENTS order."""
        values = self.components()
        return COMPONENTS[values.index(max(values))]


@dataclass(frozen=True)
class SampleAnalysis:
    """Statistics of many TTFT samples (milliseconds; shares in [0, 1])."""

    count: int
    p50_ms: float
    p95_ms: float
    p99_ms: float
    mean_ms: float
    component_means_ms: Mapping[Component, float]
    bottleneck_distribution: Mapping[Component, float]


@dataclass(frozen=True)
class TailView:
    """The slowest requests at one percentile, and what they would be without queueing.

    `ttft_ms` is the percentile of TTFT; `without_queue_ms` the same percentile of
    TTFT − queue time (what infinitely many replicas could at best achieve);
    `bottleneck_distribution` the bottleneck shares among requests at or above `ttft_ms`.
    """

    percentile: float
    ttft_ms: float
    without_queue_ms: float
    bottleneck_distribution: Mapping[Component, float]


def _as_matrix(samples: Sequence[TTFTBreakdown]) -> np.ndarray:
    if not samples:
        raise ValueError("at least one sample is needed")
    return np.asarray([s.components() for s in samples], dtype=np.float64)


def _bottleneck_shares(matrix: np.ndarray) -> dict[Component, float]:
    winners = np.argmax(matrix, axis=1)  # argmax keeps the first on ties, as bottleneck() does
    counts = np.bincount(winners, minlength=len(COMPONENTS))
    total = counts.sum()
    return {c: float(counts[i] / total) for i, c in enumerate(COMPONENTS) if counts[i] > 0}


def analyze_samples(samples: Sequence[TTFTBreakdown]) -> SampleAnalysis:
    """Percentiles, mean, component means and bottleneck distribution of TTFT samples."""
    matrix = _as_matrix(samples)
    totals = matrix.sum(axis=1)
    p50, p95, p99 = np.percentile(totals, [50, 95, 99])
    means = matrix.mean(axis=0)
    return SampleAnalysis(
        count=len(samples),
        p50_ms=float(p50),
        p95_ms=float(p95),
        p99_ms=float(p99),
        mean_ms=float(totals.mean()),
        component_means_ms={c: float(means[i]) for i, c in enumerate(COMPONENTS)},
        bottleneck_distribution=_bottleneck_shares(matrix),
    )


def tail_view(samples: Sequence[TTFTBreakdown], percentile: float) -> TailView:
    """The tail at `percentile` (0 < percentile < 100) and its counterfactual without queue."""
    if not 0 < percentile < 100:
        raise ValueError(f"percentile must be in (0, 100), got {percentile}")
    matrix = _as_matrix(samples)
    totals = matrix.sum(axis=1)
    threshold = float(np.percentile(totals, percentile))
    without_queue = float(np.percentile(totals - matrix[:, 0], percentile))
    tail = matrix[totals >= threshold]
    return TailView(
        percentile=percentile,
        ttft_ms=threshold,
        without_queue_ms=without_queue,
        bottleneck_distribution=_bottleneck_shares(tail),
    )
