"""histogram_quantile as Prometheus computes it, and the Histogram helpers."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from slascaler.model.histogram import Histogram, histogram_quantile

INF = math.inf
BOUNDS = (1.0, 2.0, 4.0, INF)
COUNTS = (10.0, 20.0, 30.0, 40.0)


@pytest.mark.parametrize(
    ("q", "expected"),
    [
        (0.0, 0.0),  # rank 0 lands in the lowest bucket, interpolated from 0
        (0.25, 1.0),  # rank 10: the top of the first bucket
        (0.5, 2.0),  # rank 20: the top of the second
        (0.625, 3.0),  # rank 25: halfway through (2, 4]
        (0.75, 4.0),  # rank 30: the top of the last finite bucket
        (0.9, 4.0),  # rank 36 lands in +Inf: the second-highest bound
        (1.0, 4.0),
    ],
)
def test_interpolation_inside_buckets(q: float, expected: float) -> None:
    assert histogram_quantile(q, BOUNDS, COUNTS) == pytest.approx(expected)


def test_out_of_range_and_nan_quantiles() -> None:
    assert histogram_quantile(-0.1, BOUNDS, COUNTS) == -INF
    assert histogram_quantile(1.1, BOUNDS, COUNTS) == INF
    assert math.isnan(histogram_quantile(math.nan, BOUNDS, COUNTS))


@pytest.mark.parametrize(
    ("bounds", "counts"),
    [
        ((1.0, 2.0), (1.0, 2.0)),  # no +Inf bucket
        ((INF,), (5.0,)),  # fewer than two buckets
        ((1.0, INF), (0.0, 0.0)),  # no observation
        ((), ()),  # empty
    ],
)
def test_degenerate_histograms_give_nan(
    bounds: tuple[float, ...], counts: tuple[float, ...]
) -> None:
    assert math.isnan(histogram_quantile(0.5, bounds, counts))


def test_lowest_bucket_with_non_positive_bound_returns_that_bound() -> None:
    assert histogram_quantile(0.2, (-1.0, 1.0, INF), (5.0, 10.0, 10.0)) == -1.0


def test_unsorted_duplicate_and_non_monotonic_buckets() -> None:
    # Sorted first, duplicate bounds merged: (1: 10, 2: 20, +Inf: 20).
    assert histogram_quantile(0.5, (2.0, INF, 1.0, 1.0), (20.0, 20.0, 5.0, 5.0)) == pytest.approx(
        1.0
    )
    # A dip in the counts is forced monotonic: (10, 10, 10), so the median is 0.5.
    assert histogram_quantile(0.5, (1.0, 2.0, INF), (10.0, 5.0, 10.0)) == pytest.approx(0.5)


def test_float_noise_between_counts_is_smoothed() -> None:
    noisy = (10.0, 10.0 * (1 - 1e-13), 10.0)
    assert histogram_quantile(0.99, (1.0, 2.0, INF), noisy) == pytest.approx(0.99)


def test_rank_zero_in_an_empty_lowest_bucket_is_nan_as_in_go() -> None:
    assert math.isnan(histogram_quantile(0.0, (1.0, 2.0, INF), (0.0, 4.0, 4.0)))


def test_nan_count_follows_prometheus() -> None:
    # A NaN total makes the rank NaN; Prometheus then returns the second-highest bound.
    assert histogram_quantile(0.5, (1.0, 2.0, INF), (1.0, 2.0, math.nan)) == 2.0


def test_from_values_bins_like_a_client_library() -> None:
    histogram = Histogram.from_values([0.5, 1.0, 1.5, 3.0, 9.0], [1.0, 2.0, 4.0])
    assert histogram.upper_bounds == (1.0, 2.0, 4.0, INF)
    assert histogram.cumulative_counts == (2.0, 3.0, 4.0, 5.0)  # 1.0 falls in le="1"
    assert histogram.mean == pytest.approx(3.0)
    assert histogram.is_finite


def test_empty_histogram() -> None:
    histogram = Histogram.empty([1.0, 2.0])
    assert histogram.total == 0
    assert math.isnan(histogram.mean)
    assert math.isnan(histogram.quantile(0.5))


def test_scaled_and_added() -> None:
    a = Histogram.from_values([0.1, 0.2], [0.25, 0.5])
    b = Histogram.from_values([0.4], [0.25, 0.5])
    total = (a + b).scaled(1000.0)
    assert total.upper_bounds == (250.0, 500.0, INF)
    assert total.cumulative_counts == (2.0, 3.0, 3.0)
    assert total.mean == pytest.approx(700.0 / 3)
    with pytest.raises(ValueError, match="different bucket bounds"):
        _ = a + Histogram.from_values([0.4], [0.3])


def test_cell_masses_sum_to_one_and_follow_uniformity() -> None:
    histogram = Histogram(BOUNDS, COUNTS, sum=60.0, count=40.0)
    edges = np.asarray([0.0, 0.5, 1.0, 2.0, 4.0])
    masses = histogram.cell_masses(edges)
    assert masses.sum() == pytest.approx(1.0)
    assert masses[0] == pytest.approx(0.125)  # half of the first bucket's 0.25
    assert masses[-1] == pytest.approx(0.25 + 0.25)  # (2, 4] plus the +Inf bucket


bucket_counts = st.lists(st.integers(min_value=0, max_value=1000), min_size=2, max_size=12)


@given(bucket_counts, st.floats(min_value=0, max_value=1), st.floats(min_value=0, max_value=1))
def test_quantile_is_monotone_and_within_the_bounds(
    increments: list[int], q1: float, q2: float
) -> None:
    bounds = (*(float(2**i) for i in range(len(increments) - 1)), INF)
    counts = tuple(float(c) for c in np.cumsum(increments))
    if counts[-1] == 0:
        return
    low, high = sorted((q1, q2))
    a, b = histogram_quantile(low, bounds, counts), histogram_quantile(high, bounds, counts)
    if math.isnan(a):
        # Prometheus's 0/0: rank 0 in an empty lowest bucket.
        assert low == 0 and increments[0] == 0
        return
    assert a <= b + 1e-9
    assert a >= 0 and b <= bounds[-2]
