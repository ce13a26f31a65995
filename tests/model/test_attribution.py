"""Bottleneck shares estimated exactly from component histograms."""

from __future__ import annotations

import numpy as np
import pytest

from slascaler.engines import VLLM_REQUEST_LATENCY_BUCKETS_S
from slascaler.model.attribution import largest_component_shares
from slascaler.model.histogram import Histogram
from slascaler.scenarios import source_scenario

VLLM_MS = [b * 1000 for b in VLLM_REQUEST_LATENCY_BUCKETS_S]


def _uniform_within_buckets(
    histogram: Histogram, size: int, rng: np.random.Generator
) -> np.ndarray:
    """Draw from the distribution the model assumes: uniform inside each bucket."""
    bounds = np.asarray([0.0, *histogram.upper_bounds[:-1]])
    counts = np.diff(np.asarray([0.0, *histogram.cumulative_counts[:-1]]))
    cells = rng.choice(len(counts), size=size, p=counts / counts.sum())
    return rng.uniform(bounds[cells], bounds[cells + 1])


def test_identical_single_bucket_components_split_evenly() -> None:
    a = Histogram.from_values([10.0] * 5, [100.0])
    b = Histogram.from_values([20.0] * 5, [100.0])
    shares = largest_component_shares({"queue": a, "prefill": b})
    assert shares == pytest.approx({"queue": 0.5, "prefill": 0.5})


def test_matches_monte_carlo_of_the_same_model() -> None:
    rng = np.random.default_rng(1)
    queue = Histogram.from_values(rng.exponential(400, 5000), VLLM_MS)
    prefill = Histogram.from_values(rng.normal(600, 150, 5000), VLLM_MS)
    shares = largest_component_shares({"queue": queue, "prefill": prefill}, {"tokenization": 250})
    draws = 400_000
    q = _uniform_within_buckets(queue, draws, rng)
    p = _uniform_within_buckets(prefill, draws, rng)
    stacked = np.vstack([q, p, np.full(draws, 250.0)])
    winners = np.bincount(np.argmax(stacked, axis=0), minlength=3) / draws
    assert shares["queue"] == pytest.approx(winners[0], abs=0.005)
    assert shares["prefill"] == pytest.approx(winners[1], abs=0.005)
    assert shares["tokenization"] == pytest.approx(winners[2], abs=0.005)


def test_source_high_load_shares_from_fine_histograms() -> None:
    samples = source_scenario("high-load", 100_000, seed=2)
    fine = list(np.arange(5.0, 3000.0, 5.0))
    queue = Histogram.from_values([s.queue_time_ms for s in samples], fine)
    prefill = Histogram.from_values([s.prefill_ms for s in samples], fine)
    shares = largest_component_shares({"queue": queue, "prefill": prefill})
    # Exact: P(Q > P) = E[exp(−P/200)] = exp(−100/200 + 20²/(2·200²)) = 0.6096.
    assert shares["queue"] == pytest.approx(0.6096, abs=0.01)


def test_empty_histograms_are_ignored() -> None:
    full = Histogram.from_values([1.0, 2.0], [5.0])
    shares = largest_component_shares({"queue": Histogram.empty([5.0]), "prefill": full})
    assert shares == {"prefill": 1.0}
    assert largest_component_shares({}) == {}
