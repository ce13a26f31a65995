"""Prometheus classic histograms over a window, and what can be read from them.

A `Histogram` holds bucket upper bounds and cumulative counts exactly as Prometheus exposes a
classic histogram (`_bucket{le=...}`, `_sum`, `_count`), usually as the increase over the
evaluation window. `histogram_quantile` reproduces PromQL's function of the same name
(promql/quantile.go, `bucketQuantile`) to the letter, special cases included, so that a
quantile computed here equals the one a user sees in Grafana.

Called by `model.attribution`, `model.regime`, the metric sources (which build histograms from
query results) and the simulator (which fills them from observations).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

_PRECISION_TOLERANCE = 1e-12  # PromQL's tolerance for float noise between bucket counts


def _search(n: int, predicate: list[bool]) -> int:
    """Go's sort.Search: the smallest i in [0, n) with predicate[i], by the same bisection.

    Written out instead of a linear scan so that inputs violating monotonicity (NaN counts)
    give the same answer as Prometheus.
    """
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi) // 2
        if not predicate[mid]:
            lo = mid + 1
        else:
            hi = mid
    return lo


def histogram_quantile(q: float, upper_bounds: Sequence[float], counts: Sequence[float]) -> float:
    """The q-quantile (0 ≤ q ≤ 1) of a classic histogram, as PromQL's histogram_quantile.

    Special cases, all as Prometheus: q NaN → NaN; q < 0 → -Inf; q > 1 → +Inf; no +Inf bucket,
    fewer than two buckets or zero observations → NaN; a quantile in the +Inf bucket → the
    second-highest bound; the lowest bucket interpolates from 0 unless its bound is ≤ 0, in
    which case that bound is returned. Buckets with the same bound are merged, float noise
    below 1e-12 relative is smoothed, and non-monotonic counts are forced monotonic.
    """
    if math.isnan(q):
        return math.nan
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    if not upper_bounds or len(upper_bounds) != len(counts):
        return math.nan
    buckets = sorted(zip(upper_bounds, counts, strict=True), key=lambda b: b[0])
    if not math.isinf(buckets[-1][0]) or buckets[-1][0] < 0:
        return math.nan

    merged: list[list[float]] = []
    for bound, count in buckets:
        if merged and merged[-1][0] == bound:
            merged[-1][1] += count
        else:
            merged.append([bound, count])

    prev = merged[0][1]
    for bucket in merged[1:]:
        delta = abs(bucket[1] - prev)
        if delta == 0:
            continue
        if delta / bucket[1] <= _PRECISION_TOLERANCE:
            bucket[1] = prev
        else:
            prev = bucket[1]

    running_max = merged[0][1]
    for bucket in merged[1:]:
        if bucket[1] > running_max:
            running_max = bucket[1]
        elif bucket[1] < running_max:
            bucket[1] = running_max

    if len(merged) < 2:
        return math.nan
    observations = merged[-1][1]
    if observations == 0:
        return math.nan
    rank = q * observations
    b = _search(len(merged) - 1, [bucket[1] >= rank for bucket in merged[:-1]])
    if b == len(merged) - 1:
        return merged[-2][0]
    if b == 0 and merged[0][0] <= 0:
        return merged[0][0]
    bucket_start = 0.0
    bucket_end = merged[b][0]
    count = merged[b][1]
    if b > 0:
        bucket_start = merged[b - 1][0]
        count -= merged[b - 1][1]
        rank -= merged[b - 1][1]
    return bucket_start + (bucket_end - bucket_start) * _float_divide(rank, count)


def _float_divide(a: float, b: float) -> float:
    """IEEE division as Go does it: x/0 is ±Inf and 0/0 is NaN instead of an exception."""
    if b != 0:
        return a / b
    if a == 0 or math.isnan(a):
        return math.nan
    return math.copysign(math.inf, a)


@dataclass(frozen=True)
class Histogram:
    """A classic histogram: ascending upper bounds ending in +Inf, cumulative counts.

    `sum` and `count` are the `_sum` and `_count` series; `count` equals the +Inf bucket for
    well-formed input. Units are whatever the caller chose; the model uses milliseconds.
    """

    upper_bounds: tuple[float, ...]
    cumulative_counts: tuple[float, ...]
    sum: float
    count: float

    @classmethod
    def from_values(cls, values: Iterable[float], finite_bounds: Sequence[float]) -> Histogram:
        """Bin raw observations as a Prometheus client does (a value v lands in le ≥ v)."""
        bounds = np.asarray(sorted(finite_bounds), dtype=np.float64)
        data = np.asarray(list(values), dtype=np.float64)
        cumulative = [float(np.count_nonzero(data <= b)) for b in bounds]
        cumulative.append(float(data.size))
        return cls(
            upper_bounds=(*map(float, bounds), math.inf),
            cumulative_counts=tuple(cumulative),
            sum=float(data.sum()),
            count=float(data.size),
        )

    @classmethod
    def empty(cls, finite_bounds: Sequence[float]) -> Histogram:
        return cls.from_values([], finite_bounds)

    def scaled(self, factor: float) -> Histogram:
        """The same histogram with every value multiplied by factor (e.g. seconds → ms)."""
        return Histogram(
            upper_bounds=tuple(b * factor for b in self.upper_bounds),
            cumulative_counts=self.cumulative_counts,
            sum=self.sum * factor,
            count=self.count,
        )

    def shifted(self, offset: float) -> Histogram:
        """Every value moved by `offset` (bounds clamped at 0): an engine's missing series
        approximated from another, e.g. TTFT ≈ queue time + mean prefill time."""
        return Histogram(
            upper_bounds=tuple(
                max(0.0, b + offset) if math.isfinite(b) else b for b in self.upper_bounds
            ),
            cumulative_counts=self.cumulative_counts,
            sum=max(0.0, self.sum + offset * self.count),
            count=self.count,
        )

    def __add__(self, other: Histogram) -> Histogram:
        """Sum of two histograms with the same bounds (as `sum by (le)` does)."""
        if self.upper_bounds != other.upper_bounds:
            raise ValueError("cannot add histograms with different bucket bounds")
        return Histogram(
            upper_bounds=self.upper_bounds,
            cumulative_counts=tuple(
                a + b for a, b in zip(self.cumulative_counts, other.cumulative_counts, strict=True)
            ),
            sum=self.sum + other.sum,
            count=self.count + other.count,
        )

    @property
    def total(self) -> float:
        """Observations in the window: the +Inf bucket's count."""
        return self.cumulative_counts[-1] if self.cumulative_counts else 0.0

    @property
    def is_finite(self) -> bool:
        """No NaN or infinite count, sum or bound other than the final +Inf bound."""
        values = (*self.cumulative_counts, self.sum, self.count, *self.upper_bounds[:-1])
        return (
            all(math.isfinite(v) for v in values)
            and bool(self.upper_bounds)
            and math.isinf(self.upper_bounds[-1])
        )

    def quantile(self, q: float) -> float:
        return histogram_quantile(q, self.upper_bounds, self.cumulative_counts)

    @property
    def mean(self) -> float:
        """Exact mean from `_sum / _count`; NaN when the window saw no observation."""
        return self.sum / self.count if self.count > 0 else math.nan

    def cell_masses(self, edges: FloatArray) -> FloatArray:
        """Probability mass in each cell [edges[i], edges[i+1]) under in-bucket uniformity.

        `edges` must start at 0 and contain every finite bound of this histogram, so that each
        cell lies inside one bucket. Mass of the +Inf bucket is placed in the last cell
        (ending at the highest finite bound), which is where `histogram_quantile` puts it.
        """
        cdf = self.cdf(edges)
        masses = np.diff(cdf)
        masses[-1] += 1.0 - cdf[-1]
        return masses

    def cdf(self, points: FloatArray) -> FloatArray:
        """P(X ≤ x) at each point, by linear interpolation inside buckets from a lower edge of 0."""
        if self.total <= 0:
            return np.full(points.shape, math.nan)
        finite = np.asarray(self.upper_bounds[:-1], dtype=np.float64)
        counts = np.maximum.accumulate(np.asarray(self.cumulative_counts[:-1], dtype=np.float64))
        xs = np.concatenate(([0.0], finite))
        ys = np.concatenate(([0.0], counts)) / self.total
        return np.asarray(np.interp(points, xs, ys), dtype=np.float64)
