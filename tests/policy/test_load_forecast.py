"""The load the policy sizes for: arrivals by conservation, the trend a load kept, bursts
that recur, and the margin taken off the objective (`policy.learning`, `policy.sizing`)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import observation_from_samples, spec
from slascaler.model.latency import LoadPoint
from slascaler.policy.learning import WindowLoad, window_load
from slascaler.policy.sizing import objective_target, recent_peak, size, trend_per_s
from slascaler.policy.state import PolicyMemory
from slascaler.policy.tunables import Tunables
from slascaler.scenarios import source_scenario

NOW = 10_000.0
TUNABLES = Tunables()


def history(loads: list[float], every_s: float = 15.0) -> tuple[tuple[float, float], ...]:
    """One load per evaluation, the last one now."""
    return tuple((NOW - every_s * (len(loads) - 1 - i), w) for i, w in enumerate(loads))


def test_a_ramp_is_carried_on_at_its_slope() -> None:
    ramp = history([1000.0 + 10.0 * 15 * i for i in range(21)])  # +10 tokens/s per s
    assert trend_per_s(ramp, NOW, 300.0) == pytest.approx(10.0)


@pytest.mark.parametrize("step_at", [3, 10, 17])
def test_a_step_is_no_trend_wherever_it_falls_in_the_span(step_at: int) -> None:
    """A straight line through a step rises as steeply as the jump over the span; carried
    to now + start-up it sized the step scenario for 1.7× its load."""
    step = history([1000.0 if i < step_at else 4000.0 for i in range(21)])
    assert trend_per_s(step, NOW, 300.0) == 0.0


def test_a_falling_load_has_a_negative_trend() -> None:
    falling = history([5000.0 - 5.0 * 15 * i for i in range(21)])
    assert trend_per_s(falling, NOW, 300.0) == pytest.approx(-5.0)


def test_a_burst_is_remembered_only_when_it_comes_back_after_a_start_up() -> None:
    """Two stretches above the median count as two bursts only when apart by more than the
    gap: a burst whose estimate dips for a moment is one burst, followed, not held for."""
    calm, high = 1000.0, 5000.0
    one_with_a_dip = history([calm] * 20 + [high, high, calm, high, high] + [calm] * 10)
    assert recent_peak(one_with_a_dip, NOW, TUNABLES, gap_s=60.0) == 0.0
    two = history([calm] * 14 + [high, high] + [calm] * 8 + [high, high] + [calm] * 10)
    assert recent_peak(two, NOW, TUNABLES, gap_s=60.0) == high


def test_one_step_up_and_back_down_is_one_burst_however_its_level_scatters() -> None:
    """The e2e load step (4 → 16 → 4 req/s, an evaluation every 5 s, a 3 s start-up): once
    the low half fills the memory, the median lies between the two levels and the burst
    threshold inside the high one. Its scatter crossing the threshold is one burst, since
    the load never fell back near the median between; it had read as bursts that recur,
    and the fleet went back to its peak count a minute after stepping in."""
    low, high = 4400.0, 17600.0
    scatter = [0.94, 1.06, 0.97, 1.03, 0.95, 1.05, 0.98, 1.02]
    rise, fall = [8000.0, 10000.0], [14000.0, 12300.0]  # estimates while it turns
    level = [high * scatter[i % len(scatter)] for i in range(24)]
    stepped = [low] * 12 + rise + level + fall + [low] * 12
    loads = history(stepped, every_s=5.0)
    median = sorted(stepped)[len(stepped) // 2]
    assert min(level) < TUNABLES.burst_factor * median < max(level)
    assert recent_peak(loads, NOW, TUNABLES, gap_s=3.0) == 0.0
    # Two steps, each back to the calm level between, still recur.
    twice = [low] * 20 + [high] * 8 + [low] * 12 + [high] * 8 + [low] * 12
    assert recent_peak(history(twice, every_s=5.0), NOW, TUNABLES, gap_s=3.0) == high


@settings(max_examples=200, deadline=None)
@given(
    low=st.floats(100.0, 10_000.0),
    ratio=st.floats(2.0, 10.0),
    scatter=st.lists(st.floats(0.9, 1.1), min_size=2, max_size=60),
    calm_before=st.integers(0, 60),
    calm_after=st.integers(0, 60),
    every_s=st.floats(1.0, 30.0),
    gap_s=st.floats(0.0, 120.0),
)
def test_a_single_burst_is_never_held_for(
    low: float,
    ratio: float,
    scatter: list[float],
    calm_before: int,
    calm_after: int,
    every_s: float,
    gap_s: float,
) -> None:
    """However often the load is sampled, however short the start-up, and whichever level the
    median lands on: one stretch at a high level that scatters ±10% is one burst, followed,
    not held for."""
    burst = [low * ratio * f for f in scatter]
    loads = [low] * calm_before + burst + [low] * calm_after
    assert recent_peak(history(loads, every_s), NOW, TUNABLES, gap_s) == 0.0


def test_while_a_backlog_drains_the_arrivals_are_the_served_rate_less_the_drain() -> None:
    """Pods that came up in a burst serve the backlog on top of the arrivals: counting what
    they serve as arrivals, and the backlog again as work to drain, asked for 16 replicas
    where 6 carried the burst."""
    samples = source_scenario("high-load", 3000, seed=1)
    observation = observation_from_samples(samples, pods=8, tokens_per_request=1000.0)
    served = observation.request_rate
    draining = replace(observation, recent_window_s=30.0, recent_request_rate=served * 1.5,
                       recent_waiting_growth=-served)  # fmt: skip
    load = window_load(draining, use_short_window=True)
    assert load is not None
    assert load.arrivals_per_s == pytest.approx(served * 0.5)
    building = replace(draining, recent_waiting_growth=served)
    load = window_load(building, use_short_window=True)
    assert load is not None
    assert load.arrivals_per_s == pytest.approx(served * 2.5)


def test_the_short_window_counts_only_when_it_shows_more_than_its_noise() -> None:
    """The last 30 s holds half the window's requests, so its rate scatters √2 times as
    much: taking the larger of the two sized a steady load above itself. It stands where it
    exceeds the whole window by more than two standard deviations of its own count, or
    where the queue grew by a request per pod."""
    samples = source_scenario("high-load", 3000, seed=1)
    observation = observation_from_samples(samples, pods=8, tokens_per_request=1000.0)
    served = observation.request_rate
    counted = served * 30.0
    sigma = 1 / counted**0.5

    def arrivals(recent_rate: float, growth: float = 0.0) -> float:
        window = replace(observation, recent_window_s=30.0, recent_request_rate=recent_rate,
                         recent_waiting_growth=growth)  # fmt: skip
        load = window_load(window, use_short_window=True)
        assert load is not None
        return load.arrivals_per_s

    assert arrivals(served * (1 + sigma)) == pytest.approx(served)  # within the noise
    assert arrivals(served * (1 + 3 * sigma)) == pytest.approx(served * (1 + 3 * sigma))
    building = 8 / 30.0  # one request more waiting per pod over the short window
    assert arrivals(served, building) == pytest.approx(served + building)
    assert arrivals(served, building / 2) == pytest.approx(served)


def test_after_a_backlog_the_arrivals_are_counted_by_conservation() -> None:
    """Requests queued during the window: its first tokens include the backlog the replicas
    drained, and sized the step scenario for 27.9 requests/s where 23.0 arrived. The short
    window's conservation (first tokens + the queue's growth) counts arrivals instead, even
    when the queue no longer moves."""
    samples = source_scenario("high-load", 3000, seed=1)
    observation = observation_from_samples(samples, pods=8, tokens_per_request=1000.0)
    served = observation.request_rate
    after_a_drain = replace(
        observation, waiting=8 * 3.0, recent_window_s=30.0, recent_request_rate=served * 0.8,
        recent_waiting_growth=0.0,
    )  # fmt: skip
    load = window_load(after_a_drain, use_short_window=True)
    assert load is not None
    assert load.arrivals_per_s == pytest.approx(served * 0.8)
    no_queue = replace(after_a_drain, waiting=8 * 0.2)
    load = window_load(no_queue, use_short_window=True)
    assert load is not None
    assert load.arrivals_per_s == pytest.approx(served)


def test_the_margin_is_the_models_noise_or_the_floor_not_both() -> None:
    def target(residual_ms: float) -> float:
        return objective_target(500.0, residual_ms, TUNABLES)

    assert target(5.0) == pytest.approx(500.0 * TUNABLES.sizing_margin)  # the floor
    assert target(30.0) == pytest.approx(470.0)  # the noise, not the floor on top
    assert target(400.0) == pytest.approx(500.0 * (1 - TUNABLES.max_noise_margin))  # capped


def _lightly_loaded_memory(work_per_replica: float) -> PolicyMemory:
    """A model fitted on windows of 12 replicas at one light load, with a capacity read
    high (as lightly loaded windows of long prompts read it)."""
    points = tuple(
        LoadPoint(NOW - 15.0 * i, work_per_replica, 2500.0 + 10.0 * i, 10.0, 12) for i in range(8)
    )
    return PolicyMemory(load_points=points, capacity=30_000.0, first_seen_at=NOW - 600.0)


def _load(tokens_per_s: float) -> WindowLoad:
    return WindowLoad(pods=12, requests_per_s=3.0, tokens_per_request=tokens_per_s / 3.0,
                      arrivals_per_s=3.0, backlog=0.0)  # fmt: skip


def test_a_scale_in_goes_no_further_than_three_times_the_load_the_model_has_seen() -> None:
    """12 replicas seen at 3.7k tokens/s each: the model alone calls for 2 replicas of 22k;
    the trust region stops the scale-in at 4 (≤ 11.1k each), and says why."""
    sla = spec(objectives={"ttft": {"percentile": 95, "thresholdMs": 5000}})
    memory, load = _lightly_loaded_memory(3700.0), _load(44_400.0)
    untrusting = size(sla, memory, load, NOW, replace(TUNABLES, use_model_trust=False),
                      provisioned=12)  # fmt: skip
    sized = size(sla, memory, load, NOW, TUNABLES, provisioned=12)
    assert untrusting.replicas is not None and untrusting.replicas <= 3
    assert sized.replicas == sized.without_backlog == 4
    assert "scale-in stops at 4" in sized.why


def test_the_trust_region_never_adds_replicas() -> None:
    """A load far beyond what the model has seen, on a small fleet: the count is the
    model's, however far it extrapolates; the region only holds a scale-in."""
    sla = spec(objectives={"ttft": {"percentile": 95, "thresholdMs": 5000}})
    memory, load = _lightly_loaded_memory(3700.0), _load(44_400.0)
    without = size(sla, memory, load, NOW, replace(TUNABLES, use_model_trust=False),
                   provisioned=2)  # fmt: skip
    assert size(sla, memory, load, NOW, TUNABLES, provisioned=2).replicas == without.replicas
    assert size(sla, memory, load, NOW, TUNABLES).replicas == without.replicas


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.floats(100.0, 20_000.0), min_size=1, max_size=12),
    st.floats(5_000.0, 60_000.0),
    st.floats(0.0, 400_000.0),
    st.integers(1, 64),
)
def test_the_trust_region_only_ever_holds_a_scale_in(
    works: list[float], capacity: float, load: float, provisioned: int
) -> None:
    """Whatever the windows seen, the capacity and the load: with the trust region the count
    is the model's, or higher but never above the replicas provisioned."""
    sla = spec(objectives={"ttft": {"percentile": 95, "thresholdMs": 5000}})
    points = tuple(
        LoadPoint(NOW - 15.0 * i, w, 2500.0 + 5.0 * i, 10.0, 4) for i, w in enumerate(works)
    )
    memory = PolicyMemory(load_points=points, capacity=capacity, first_seen_at=NOW - 600.0)
    window = _load(load)
    free = size(sla, memory, window, NOW, replace(TUNABLES, use_model_trust=False),
                provisioned=provisioned)  # fmt: skip
    held = size(sla, memory, window, NOW, TUNABLES, provisioned=provisioned)
    if free.replicas is None:
        assert held.replicas is None
        return
    assert held.replicas is not None
    assert free.replicas <= held.replicas <= max(free.replicas, provisioned)
