"""The capacity models: queueing (Erlang C / Allen–Cunneen), batch curve, chunk size."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slascaler.model.batching import fit_line, largest_batch_within
from slascaler.model.chunking import (
    StepCost,
    candidate_chunk_sizes,
    choose_chunk_size,
    estimate_step_cost,
    itl_with_chunk_ms,
    prefill_time_ms,
)
from slascaler.model.histogram import Histogram
from slascaler.model.queueing import (
    QueueModel,
    calibrate_service_rate,
    erlang_c,
    replicas_needed,
    service_distribution,
)


def test_erlang_c_textbook_values() -> None:
    # M/M/1: P(wait) = ρ.
    assert erlang_c(1, 0.7) == pytest.approx(0.7)
    # c = 2, a = 1: C = (a²/2 · 1/(1−ρ)) / (1 + a + a²/2 · 1/(1−ρ)) = 1/3.
    assert erlang_c(2, 1.0) == pytest.approx(1 / 3)
    # A call centre classic: 10 agents, 8 Erlang offered: C ≈ 0.409.
    assert erlang_c(10, 8.0) == pytest.approx(0.4092, abs=1e-3)
    assert erlang_c(3, 3.0) == 1.0 and erlang_c(3, 0.0) == 0.0


def test_mm1_mean_wait_and_tail() -> None:
    model = QueueModel(arrival_rate=8.0, service_rate=10.0)
    # M/M/1: Wq = ρ / (μ − λ) = 0.8 / 2 s = 400 ms; P(W > t) = ρ · e^{−(μ−λ)t}.
    assert model.mean_wait_ms(1) == pytest.approx(400.0)
    assert model.wait_exceeds(1, 500.0) == pytest.approx(0.8 * math.exp(-2 * 0.5))
    assert model.wait_exceeds(1, -1.0) == 1.0
    assert math.isinf(QueueModel(10.0, 10.0).mean_wait_ms(1))


def test_allen_cunneen_scales_by_variability() -> None:
    deterministic = QueueModel(8.0, 10.0, arrival_scv=1.0, service_scv=0.0)
    assert deterministic.mean_wait_ms(1) == pytest.approx(200.0)  # M/D/1: half of M/M/1


@given(
    st.floats(min_value=0.5, max_value=50),
    st.integers(min_value=1, max_value=20),
    st.floats(min_value=1.05, max_value=5),
)
def test_calibration_inverts_the_mean_wait(arrival: float, servers: int, headroom: float) -> None:
    mu = arrival / servers * headroom
    wait = QueueModel(arrival, mu).mean_wait_ms(servers)
    if wait <= 0.01:
        return
    calibrated = calibrate_service_rate(arrival, servers, wait)
    assert calibrated == pytest.approx(mu, rel=1e-4)


def test_calibration_needs_queueing() -> None:
    assert calibrate_service_rate(5.0, 2, 0.0) is None
    assert calibrate_service_rate(0.0, 2, 100.0) is None


def test_replicas_needed_is_the_smallest_sufficient_count() -> None:
    model = QueueModel(arrival_rate=20.0, service_rate=3.0)
    service = [(150.0, 1.0)]
    sizing = replicas_needed(model, 500.0, 0.05, service, limit=64)
    assert sizing.replicas is not None
    c = sizing.replicas
    assert model.ttft_exceeds(c, 500.0, service) <= 0.05
    assert model.ttft_exceeds(c - 1, 500.0, service) > 0.05
    assert sizing.floor_exceedance == 0.0


def test_replicas_cannot_fix_a_service_time_over_the_objective() -> None:
    sizing = replicas_needed(QueueModel(5.0, 2.0), 500.0, 0.05, [(700.0, 1.0)], limit=64)
    assert sizing.replicas is None
    assert sizing.floor_exceedance == 1.0


def test_service_distribution_keeps_mass_and_adds_overhead() -> None:
    prefill = Histogram.from_values([100.0, 200.0, 400.0], [300.0, 500.0])
    points = service_distribution(prefill, 10.0, cells_per_bucket=4)
    assert sum(p for _, p in points) == pytest.approx(1.0)
    assert min(v for v, _ in points) == pytest.approx(10.0 + 300.0 / 8)
    assert max(v for v, _ in points) <= 510.0


def test_source_batch_curve_gives_26_not_32() -> None:
    points = [(b, 100 + 15 * b) for b in (1, 2, 4, 8, 16, 32, 64)]
    fit = fit_line(points)
    assert fit is not None
    assert fit.intercept == pytest.approx(100.0)
    assert fit.slope == pytest.approx(15.0)
    assert fit.r_squared == pytest.approx(1.0)
    assert largest_batch_within(fit, 500.0) == 26  # 100 + 15·26 = 490; 27 gives 505


def test_batch_fit_needs_two_distinct_points_and_a_rising_line() -> None:
    assert fit_line([(8, 50.0), (8, 55.0)]) is None
    flat = fit_line([(1, 50.0), (8, 40.0)])
    assert flat is not None and largest_batch_within(flat, 60.0) is None


def test_prefill_time_with_the_source_profile() -> None:
    # 0.1 ms per prompt token, no fixed cost: a 1000-token prompt takes 100 ms however chunked.
    cost = StepCost(fixed_ms=0.0, per_token_ms=0.1)
    assert prefill_time_ms(1000, 8192, 0, cost) == pytest.approx(100.0)
    assert prefill_time_ms(1000, 256, 0, cost) == pytest.approx(100.0)


def test_larger_chunks_pay_fewer_fixed_costs_and_lengthen_itl() -> None:
    cost = StepCost(fixed_ms=5.0, per_token_ms=0.02)
    small, large = prefill_time_ms(8000, 512, 32, cost), prefill_time_ms(8000, 4096, 32, cost)
    # 8000 / 480 → 17 steps vs 8000 / 4064 → 2 steps, each paying the 5 ms fixed cost.
    assert small == pytest.approx(17 * 5.0 + 0.02 * (8000 + 17 * 32))
    assert large < small
    assert itl_with_chunk_ms(4096, cost) > itl_with_chunk_ms(512, cost)


def test_choose_chunk_size_smallest_meeting_the_budget() -> None:
    cost = StepCost(fixed_ms=5.0, per_token_ms=0.02)
    candidates = candidate_chunk_sizes(512, 8192)
    assert candidates == [512, 1024, 2048, 4096, 8192]
    choice = choose_chunk_size(8000, 250.0, 100.0, 32, cost, candidates)
    assert choice is not None and choice.meets_ttft
    assert prefill_time_ms(8000, choice.chunk_size, 32, cost) <= 250.0
    smaller = [c for c in candidates if c < choice.chunk_size]
    assert all(prefill_time_ms(8000, c, 32, cost) > 250.0 for c in smaller)
    # An ITL limit of 60 ms rules out chunks whose step exceeds it: 5 + 0.02·C ≤ 60 → C ≤ 2750.
    limited = choose_chunk_size(8000, 100.0, 60.0, 32, cost, candidates)
    assert limited is not None and limited.chunk_size == 2048 and not limited.meets_ttft


def test_step_cost_recovered_from_one_window() -> None:
    truth = StepCost(fixed_ms=6.0, per_token_ms=0.017)
    decode_tokens, chunk, prompt = 24.0, 2048, 6000.0
    steps = math.ceil(prompt / (chunk - decode_tokens))
    prefill = steps * truth.step_ms(decode_tokens + (chunk - decode_tokens))
    itl = truth.step_ms(decode_tokens)
    estimate = estimate_step_cost(prefill, prompt, chunk, decode_tokens, itl)
    assert estimate is not None
    assert estimate.fixed_ms == pytest.approx(6.0, rel=0.05)
    assert estimate.per_token_ms == pytest.approx(0.017, rel=0.05)
    assert estimate_step_cost(math.nan, prompt, chunk, decode_tokens, itl) is None
