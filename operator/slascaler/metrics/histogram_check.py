"""One pod's histogram series checked to be a histogram, and pods' histograms summed.

A pod's series that is not a histogram is refused, naming the pod and the fault: an `le`
that is not a number, no `+Inf` bucket, a negative count or `_sum`, counts that decrease
with `le`, counts beyond any engine's (1e12 in a window), a `_count` that is not the `+Inf`
bucket's, buckets without `_sum`/`_count`. NaN and ±Inf are kept as they are, so that the
Observation says the histogram is not finite. Pods that export different buckets (one with
`--custom-histogram-buckets`, a rollout between releases) are summed over the bounds they
share, which `sum_pods` says in a note.

Pure (no I/O). Called by `metrics.targets`.
"""

from __future__ import annotations

import itertools
import math

from slascaler.engine_metrics import Series
from slascaler.metrics.answers import RawHistogram
from slascaler.model.histogram import Histogram

MAX_PLAUSIBLE_COUNT = 1e12  # observations in one window: far beyond any engine
_DECREASE_TOLERANCE = 1e-6  # relative: increase() of counters scraped together stays monotone
_COUNT_TOLERANCE = 0.01  # relative, plus one observation: `_count` vs the +Inf bucket


def check_histogram(
    series: Series, pod: str, raw: RawHistogram, scale: float
) -> tuple[Histogram | None, str | None]:
    """One pod's histogram, or why it is not one."""
    where = f"{series} of pod {pod}"
    if not raw.buckets:
        return None, f"{where} has `_sum`/`_count` but no buckets: not a histogram"
    points: list[tuple[float, float]] = []
    for le, value in raw.buckets.items():
        try:
            bound = float(le)
        except ValueError:
            return None, f"{where} has a bucket le={le!r}, which is not a number: not a histogram"
        if math.isnan(bound):
            return None, f"{where} has a bucket le={le!r}: not a histogram"
        points.append((bound, value))
    points.sort()
    merged: list[list[float]] = []
    for bound, value in points:  # "1" and "1.0" are one bucket, as in histogram_quantile
        if merged and merged[-1][0] == bound:
            merged[-1][1] += value
        else:
            merged.append([bound, value])
    bounds = tuple(b for b, _ in merged)
    counts = tuple(c for _, c in merged)
    if not math.isinf(bounds[-1]) or bounds[-1] < 0:
        return None, f'{where} has no le="+Inf" bucket: not a histogram'
    total = raw.sum if raw.sum is not None else math.nan
    count = raw.count if raw.count is not None else math.nan
    if raw.sum is None or raw.count is None:
        parts = (("_sum", raw.sum), ("_count", raw.count))
        missing = " and ".join(name for name, value in parts if value is None)
        return None, f"{where} has buckets but no {missing} series: not a histogram"
    histogram = Histogram(
        upper_bounds=tuple(b * scale if math.isfinite(b) else b for b in bounds),
        cumulative_counts=counts,
        sum=total * scale,
        count=count,
    )
    values = (*counts, total, count)
    if not all(math.isfinite(v) for v in values):
        return histogram, None  # kept: the Observation reports it as not finite
    if min(counts) < 0 or count < 0:
        return None, f"{where} has negative bucket counts ({min(counts):g}): not a histogram"
    if total < 0:
        return None, f"{where} has a negative _sum ({total:g}): not a histogram"
    if max(counts[-1], count) > MAX_PLAUSIBLE_COUNT:
        return None, (
            f"{where} counts {max(counts[-1], count):.3g} observations in one window, more "
            "than any engine serves: not a histogram"
        )
    for (low_bound, low), (high_bound, high) in itertools.pairwise(merged):
        if high < low - _DECREASE_TOLERANCE * max(1.0, abs(low)):
            return None, (
                f"{where} has counts that decrease with le (le={low_bound:g}: {low:g}, "
                f"le={high_bound:g}: {high:g}): not a histogram"
            )
    inf = counts[-1]
    if abs(count - inf) > _COUNT_TOLERANCE * max(count, inf) + 1.0:
        return None, (
            f'{where} has _count {count:g} but {inf:g} in its le="+Inf" bucket: not a histogram'
        )
    return histogram, None


def sum_pods(histograms: list[Histogram]) -> tuple[Histogram, str | None]:
    """Pods' histograms summed (as `sum by (le)`), over the bounds every pod has."""
    shared = set(histograms[0].upper_bounds)
    for histogram in histograms[1:]:
        shared &= set(histogram.upper_bounds)
    bounds = tuple(sorted(shared))
    note = None
    if any(h.upper_bounds != bounds for h in histograms):
        note = f"pods export different buckets: summed over the {len(bounds)} bounds they share"
    counts = [0.0] * len(bounds)
    total = observations = 0.0
    for histogram in histograms:
        index = dict(zip(histogram.upper_bounds, histogram.cumulative_counts, strict=True))
        for i, bound in enumerate(bounds):
            counts[i] += index[bound]
        total += histogram.sum
        observations += histogram.count
    return Histogram(bounds, tuple(counts), total, observations), note
