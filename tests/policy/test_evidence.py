"""A healthy window bounds the latency model: it may step ahead of the replicas that just
met the targets, not leap (`policy.sizing._proven_replicas`, `policy.decide._evidence`)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import observation_from_samples, spec
from slascaler.model.latency import LoadPoint, contention
from slascaler.model.observation import Observation
from slascaler.model.regime import RegimeAnalysis, analyze_observation
from slascaler.model.samples import TTFTBreakdown
from slascaler.policy.decide import _evidence
from slascaler.policy.learning import WindowLoad, window_load
from slascaler.policy.sizing import BatchSlots, Evidence, size
from slascaler.policy.state import FleetState, PolicyMemory
from slascaler.policy.tunables import Tunables

NOW = 10_000.0
TUNABLES = Tunables()
UNCAPPED = replace(TUNABLES, use_evidence_cap=False)
SLA = spec(replicas={"min": 1, "max": 32})  # TTFT p95 ≤ 500 ms: sized for 475


def _memory_with_floor_near_the_target(floor_ms: float = 466.0) -> PolicyMemory:
    """A model whose idle TTFT sits 9 ms under the sizing target: a few ms of contention
    call for many replicas (long prompts in the tail put the floor there)."""
    capacity = 14_000.0
    seen = [(1300.0, 32), (2000.0, 20), (3000.0, 12), (4500.0, 8), (1500.0, 28), (2500.0, 16)]
    points = tuple(
        LoadPoint(NOW - 15.0 * i, work, floor_ms + 150.0 * contention(work, capacity, n), 10.0, n)
        for i, (work, n) in enumerate(seen)
    )
    return PolicyMemory(load_points=points, capacity=capacity, first_seen_at=NOW - 600.0)


def _window(pods: int, arrivals_per_s: float = 27.0) -> WindowLoad:
    return WindowLoad(pods=pods, requests_per_s=27.0, tokens_per_request=1500.0,
                      arrivals_per_s=arrivals_per_s, backlog=0.0)  # fmt: skip


def test_a_window_that_met_the_target_stops_the_models_leap_at_one_replica_more() -> None:
    memory, load = _memory_with_floor_near_the_target(), _window(8)
    free = size(SLA, memory, load, NOW, UNCAPPED, provisioned=8)
    met = Evidence(8, load.work, ttft_ms=440.0, itl_ms=10.0)
    capped = size(SLA, memory, load, NOW, TUNABLES, provisioned=8, evidence=met)
    assert free.replicas is not None and free.replicas >= 12
    assert capped.replicas == capped.without_backlog == 8 + TUNABLES.evidence_slack
    assert "at most 9: 8 replicas just met TTFT p95 ≤ 475 ms" in capped.why


@pytest.mark.parametrize(("ttft_ms", "itl_ms"), [(476.0, 10.0), (900.0, 10.0), (440.0, 500.0)])
def test_a_window_that_missed_a_target_bounds_nothing(ttft_ms: float, itl_ms: float) -> None:
    sla = spec(replicas={"min": 1, "max": 32},
               objectives={"ttft": {"percentile": 95, "thresholdMs": 500},
                           "itl": {"percentile": 95, "thresholdMs": 100}})  # fmt: skip
    memory, load = _memory_with_floor_near_the_target(), _window(8)
    missed = Evidence(8, load.work, ttft_ms, itl_ms)
    free = size(sla, memory, load, NOW, UNCAPPED, provisioned=8)
    assert size(sla, memory, load, NOW, TUNABLES, provisioned=8, evidence=missed) == free


def test_the_bound_grows_with_the_load_coming() -> None:
    """Twice the arrivals the window carried: twice its replicas, plus the slack."""
    memory, load = _memory_with_floor_near_the_target(), _window(8, arrivals_per_s=54.0)
    met = Evidence(8, load.work, ttft_ms=440.0, itl_ms=10.0)
    assert size(SLA, memory, load, NOW, TUNABLES, provisioned=8, evidence=met).replicas == 17


@settings(max_examples=200, deadline=None)
@given(
    st.floats(380.0, 500.0),
    st.integers(1, 32),
    st.floats(1.0, 80.0),
    st.floats(1.0, 80.0),
    st.floats(100.0, 600.0),
)
def test_the_bound_only_ever_stops_a_scale_up_beyond_the_proven_count(
    floor_ms: float, pods: int, served: float, arriving: float, observed_ms: float
) -> None:
    """Whatever the model, the window and what it measured: with the evidence the count is
    the model's or lower, and never lower than the replicas that served the window (plus
    the slack) unless the model asks for fewer itself."""
    memory = _memory_with_floor_near_the_target(floor_ms)
    load = WindowLoad(pods=pods, requests_per_s=served, tokens_per_request=1500.0,
                      arrivals_per_s=arriving, backlog=0.0)  # fmt: skip
    evidence = Evidence(pods, load.work, observed_ms, 10.0)
    free = size(SLA, memory, load, NOW, UNCAPPED, provisioned=pods)
    bounded = size(SLA, memory, load, NOW, TUNABLES, provisioned=pods, evidence=evidence)
    if free.replicas is None:
        assert bounded.replicas is None
        return
    assert bounded.replicas is not None
    assert bounded.replicas <= free.replicas
    assert bounded.replicas >= min(free.replicas, pods + TUNABLES.evidence_slack)


def _observation(*, ttft_ms: float, waiting: float = 0.0, waiting_now: float = 0.0) -> Observation:
    samples = [TTFTBreakdown(5.0, 10.0, ttft_ms - 35.0, 20.0)] * 60
    return observation_from_samples(samples, at=NOW, pods=4, waiting=waiting,
                                    waiting_now=waiting_now, tokens_per_request=1500.0)  # fmt: skip


def _analysis(observation: Observation) -> RegimeAnalysis:
    return analyze_observation(
        observation, percentile=95, objective_ms=500.0, itl_percentile=None,
        itl_objective_ms=None, min_requests=10,
    )  # fmt: skip


def test_a_healthy_window_over_a_steady_fleet_is_evidence() -> None:
    observation = _observation(ttft_ms=300.0)
    load = window_load(observation, use_short_window=True)
    evidence = _evidence(FleetState(4, 4), observation, _analysis(observation), load, TUNABLES)
    assert evidence is not None and evidence.pods == 4
    assert evidence.ttft_ms <= 500.0


@pytest.mark.parametrize(
    ("fleet", "ttft_ms", "waiting", "waiting_now"),
    [
        (FleetState(5, 4), 300.0, 0.0, 0.0),  # a pod is starting: the window is not the fleet's
        (FleetState(4, 4, rollout_in_progress=True), 300.0, 0.0, 0.0),
        (FleetState(5, 4, unschedulable_pods=1), 300.0, 0.0, 0.0),
        (FleetState(4, 4), 300.0, 8.0, 8.0),  # a backlog over the window hides the arrivals
        (FleetState(4, 4), 300.0, 0.0, 15.0),  # a queue forming at its end: not steady
        (FleetState(4, 4), 900.0, 0.0, 0.0),  # not healthy
        (FleetState(6, 6), 300.0, 0.0, 0.0),  # served by fewer pods than are ready now
    ],
)
def test_a_window_over_an_unsteady_fleet_or_a_missed_objective_is_no_evidence(
    fleet: FleetState, ttft_ms: float, waiting: float, waiting_now: float
) -> None:
    observation = _observation(ttft_ms=ttft_ms, waiting=waiting, waiting_now=waiting_now)
    load = window_load(observation, use_short_window=True)
    assert _evidence(fleet, observation, _analysis(observation), load, TUNABLES) is None


def test_a_vanishing_load_gives_a_count_not_an_overflow() -> None:
    """A window that served 5e-324 tokens/s (hypothesis found one fitted into the model)
    makes every ratio over it infinite: the count is still a whole number, within bounds."""
    tiny = 5e-324
    memory = replace(
        _memory_with_floor_near_the_target(),
        load_points=(LoadPoint(NOW, tiny, 300.0, 10.0, 4),),
    )
    load = WindowLoad(pods=4, requests_per_s=tiny, tokens_per_request=1.0,
                      arrivals_per_s=27.0, backlog=0.0)  # fmt: skip
    sized = size(SLA, memory, load, NOW, TUNABLES, provisioned=4,
                 evidence=Evidence(4, tiny, 300.0, 10.0), slots=BatchSlots(8.0, 16))  # fmt: skip
    assert sized.replicas is not None
    assert 1 <= sized.replicas <= SLA.replicas.max * 4


def _memory_with_a_convex_itl() -> PolicyMemory:
    """Windows at 4–6 replicas whose ITL p95 rises faster than a line: fitted through them,
    the line promises 73 ms at 8.3k tokens/s per replica, where the busiest window, at 7.1k,
    met the target at 88 ms (the conversation trace, seed 2, minute 56)."""
    capacity = 13_222.0
    seen = [(5000.0, 45.0, 6), (5300.0, 50.0, 6), (5600.0, 57.0, 5), (6000.0, 64.0, 5),
            (6500.0, 74.0, 5), (6800.0, 81.0, 5), (7072.0, 88.0, 5)]  # fmt: skip
    points = tuple(
        LoadPoint(NOW - 15.0 * i, work, 300.0 + 100.0 * contention(work, capacity, n), itl, n)
        for i, (work, itl, n) in enumerate(seen)
    )
    return PolicyMemory(load_points=points, capacity=capacity, first_seen_at=NOW - 600.0)


def test_the_itl_of_the_busiest_window_that_met_it_holds_a_scale_in_never_adds() -> None:
    sla = spec(replicas={"min": 1, "max": 32},
               objectives={"ttft": {"percentile": 95, "thresholdMs": 500},
                           "itl": {"percentile": 95, "thresholdMs": 100}})  # fmt: skip
    memory = _memory_with_a_convex_itl()
    load = WindowLoad(pods=4, requests_per_s=20.0, tokens_per_request=1250.0,
                      arrivals_per_s=20.0, backlog=0.0)  # fmt: skip
    line_only = size(sla, memory, load, NOW, replace(TUNABLES, use_itl_evidence=False),
                     provisioned=4)  # fmt: skip
    held = size(sla, memory, load, NOW, TUNABLES, provisioned=4)
    assert line_only.replicas == 3  # the line allows 8.3k tokens/s per replica
    assert held.replicas == 4  # 88 ms × 8.3k / 7.1k = 104 ms: over the target at 3
    at_three = size(sla, memory, replace(load, pods=3), NOW, TUNABLES, provisioned=3)
    assert at_three.replicas == 3  # it holds a scale-in; it adds no replica
