"""Regime classification from vLLM-style histograms."""

from __future__ import annotations

import math

import pytest

from builders import observation_from_samples
from slascaler.model.regime import Regime, analyze_observation, classify
from slascaler.model.samples import TTFTBreakdown
from slascaler.scenarios import source_scenario


def _analyze(samples: list[TTFTBreakdown], objective: float, **kwargs: object) -> Regime:
    observation = observation_from_samples(samples, **kwargs)  # type: ignore[arg-type]
    return analyze_observation(observation, 95, objective).regime


def test_high_load_over_objective_is_queue_bound() -> None:
    samples = source_scenario("high-load", 2000, seed=1)
    observation = observation_from_samples(samples)
    analysis = analyze_observation(observation, 95, 500)
    assert analysis.regime is Regime.QUEUE_BOUND
    assert analysis.ttft_ms > 500
    assert analysis.without_queue_ms <= 500
    assert analysis.queue_share == pytest.approx(200 / 330, abs=0.05)
    assert analysis.component_means_ms["tokenization"] == pytest.approx(10, abs=3)


def test_low_load_over_a_tight_objective_is_prefill_bound() -> None:
    samples = source_scenario("low-load", 2000, seed=1)
    assert _analyze(samples, 150) is Regime.PREFILL_BOUND


def test_met_objective_is_healthy_and_itl_over_is_decode_bound() -> None:
    samples = source_scenario("low-load", 2000, seed=1)
    assert _analyze(samples, 500) is Regime.HEALTHY
    observation = observation_from_samples(samples, itl_ms=[80.0] * 500)
    analysis = analyze_observation(observation, 95, 500, itl_percentile=95, itl_objective_ms=60)
    assert analysis.regime is Regime.DECODE_BOUND
    assert analysis.itl_over and not analysis.ttft_over


def test_no_requests_is_idle_unless_requests_wait() -> None:
    assert _analyze([], 500) is Regime.IDLE
    assert _analyze([], 500, waiting=12.0) is Regime.QUEUE_BOUND


def test_too_few_requests_is_unknown() -> None:
    samples = source_scenario("high-load", 5, seed=1)
    assert _analyze(samples, 500) is Regime.UNKNOWN


def test_long_prompts_with_a_queue_share_over_half_are_queue_bound() -> None:
    # Prefill alone misses the objective, but queue is most of the time: replicas help most.
    samples = [TTFTBreakdown(900.0, 10.0, 600.0, 20.0) for _ in range(100)]
    assert _analyze(samples, 500) is Regime.QUEUE_BOUND


def test_classify_names_the_numbers() -> None:
    regime, text = classify(
        requests=100,
        waiting=0,
        min_requests=20,
        percentile=95,
        ttft_ms=720,
        ttft_objective_ms=500,
        without_queue_ms=300,
        queue_share=0.58,
        tail_queue_share=0.9,
    )
    assert regime is Regime.QUEUE_BOUND
    assert "720" in text and "500" in text and "300" in text
    regime, _ = classify(
        requests=100,
        waiting=0,
        min_requests=20,
        percentile=95,
        ttft_ms=math.nan,
        ttft_objective_ms=500,
        without_queue_ms=math.nan,
        queue_share=0,
        tail_queue_share=0,
    )
    assert regime is Regime.UNKNOWN
