"""The capacity models: queueing (Erlang C / Allen–Cunneen), batch curve, chunk size."""

from __future__ import annotations

import math

import pytest

from slascaler.model.batching import fit_line, largest_batch_within
from slascaler.model.chunking import (
    StepCost,
    candidate_chunk_sizes,
    choose_chunk_size,
    estimate_step_cost,
    itl_with_chunk_ms,
    prefill_time_ms,
)


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
