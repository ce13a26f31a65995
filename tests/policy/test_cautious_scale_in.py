"""A scale-in is sized at the lowest capacity the policy estimated within
`capacity_memory_s`, a scale-out at the present estimate (`policy.sizing.size`,
`use_cautious_scale_in`): the estimate moves with each window's mix, and a scale-in made at its
high end saturates the replicas it leaves. The estimates are learned window by window
(`policy.learning.learn`) and kept in the status (`status.memory`)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from builders import observation_from_samples, spec
from slascaler.model.latency import LoadPoint, contention
from slascaler.policy import FleetState, PolicyState, decide
from slascaler.policy.learning import WindowLoad
from slascaler.policy.sizing import size
from slascaler.policy.state import PolicyMemory
from slascaler.policy.tunables import Tunables
from slascaler.scenarios import source_scenario
from slascaler.status.memory import memory_from_status, memory_to_status

NOW = 10_000.0
TUNABLES = Tunables()
AT_PRESENT = replace(TUNABLES, use_cautious_scale_in=False)
SLA = spec(replicas={"min": 1, "max": 32})  # TTFT p95 ≤ 500 ms


def _memory(capacity: float = 14_000.0, lowest: float | None = 7_000.0) -> PolicyMemory:
    """A model fitted at `capacity` tokens/s per replica; within the last minutes one
    window's mix read `lowest`."""
    seen = [(1500.0, 8), (2500.0, 8), (3500.0, 6), (4500.0, 6), (5500.0, 4), (6500.0, 4)]
    points = tuple(
        LoadPoint(NOW - 15.0 * i, work, 300.0 + 150.0 * contention(work, capacity, n), 10.0, n)
        for i, (work, n) in enumerate(seen)
    )
    history = ((NOW - 120.0, lowest), (NOW - 15.0, capacity)) if lowest is not None else ()
    return PolicyMemory(load_points=points, capacity=capacity, capacity_history=history,
                        first_seen_at=NOW - 600.0)  # fmt: skip


def _window(pods: int, arrivals_per_s: float) -> WindowLoad:
    return WindowLoad(pods=pods, requests_per_s=arrivals_per_s, tokens_per_request=1500.0,
                      arrivals_per_s=arrivals_per_s, backlog=0.0)  # fmt: skip


def test_a_scale_in_stops_where_the_lowest_recent_capacity_needs_the_replicas() -> None:
    memory, load = _memory(), _window(8, 25.0)  # 37.5k tokens/s on 8 replicas
    at_present = size(SLA, memory, load, NOW, AT_PRESENT, provisioned=8)
    cautious = size(SLA, memory, load, NOW, TUNABLES, provisioned=8)
    assert at_present.replicas is not None and cautious.replicas is not None
    assert at_present.replicas < cautious.replicas <= 8
    assert "the lowest capacity estimated in the last 300 s" in cautious.why
    # The count the model fitted at 7k tokens/s per replica calls for.
    low = size(SLA, replace(memory, capacity=7_000.0), load, NOW, AT_PRESENT, provisioned=8)
    assert cautious.replicas == low.replicas


def test_a_scale_out_is_sized_at_the_present_estimate() -> None:
    memory, load = _memory(), _window(2, 20.0)
    at_present = size(SLA, memory, load, NOW, AT_PRESENT, provisioned=2)
    assert at_present.replicas is not None and at_present.replicas > 2
    assert size(SLA, memory, load, NOW, TUNABLES, provisioned=2) == at_present


def test_without_a_lower_recent_estimate_nothing_changes() -> None:
    load = _window(8, 20.0)
    for memory in (_memory(lowest=None), _memory(lowest=20_000.0)):
        assert size(SLA, memory, load, NOW, TUNABLES, provisioned=8) == size(
            SLA, memory, load, NOW, AT_PRESENT, provisioned=8
        )


@settings(max_examples=150, deadline=None)
@given(
    st.floats(6_000.0, 30_000.0),
    st.floats(0.3, 1.5),
    st.integers(1, 32),
    st.floats(0.5, 80.0),
)
def test_the_cautious_count_lies_between_the_present_one_and_the_fleet(
    capacity: float, low_share: float, provisioned: int, arrivals_per_s: float
) -> None:
    """It never scales out (at most the replicas provisioned) and never scales in further
    than the present estimate would."""
    memory, load = _memory(capacity, capacity * low_share), _window(provisioned, arrivals_per_s)
    at_present = size(SLA, memory, load, NOW, AT_PRESENT, provisioned=provisioned)
    cautious = size(SLA, memory, load, NOW, TUNABLES, provisioned=provisioned)
    assert at_present.replicas is not None and cautious.replicas is not None
    assert at_present.replicas <= cautious.replicas <= max(at_present.replicas, provisioned)


def test_the_estimates_survive_a_restart_in_the_status() -> None:
    memory = _memory()
    restored, problem = memory_from_status(memory_to_status(memory))
    assert problem is None
    assert restored.capacity_history == memory.capacity_history


def _decide_on_light_load(memory: PolicyMemory, batch: int) -> PolicyMemory:
    samples = source_scenario("low-load", 600, seed=1)
    observation = observation_from_samples(
        samples, at=NOW, pods=4, itl_ms=[20.0] * 500, running=12.0, tokens_per_request=1400.0
    )
    fleet = FleetState(spec_replicas=4, ready_replicas=4, max_batch_size=batch, chunk_size=2048)
    sla = spec(knobs={"maxBatchSize": {"min": 8, "max": 256}})
    return decide(sla, observation, PolicyState(fleet, memory), NOW).memory_if_applied


def test_each_window_adds_its_estimate_and_those_past_the_memory_or_other_knobs_go() -> None:
    kept = PolicyMemory(
        first_seen_at=NOW - 3600.0, capacity=12_000.0, points_knobs=(64, 2048),
        capacity_history=((NOW - 400.0, 5_000.0), (NOW - 100.0, 11_000.0)),
    )  # fmt: skip
    learned = _decide_on_light_load(kept, batch=64)
    assert learned.capacity is not None
    assert learned.capacity_history == ((NOW - 100.0, 11_000.0), (NOW, learned.capacity))
    # At other knob values the capacity is learned afresh, and so are its estimates.
    relearned = _decide_on_light_load(kept, batch=32)
    assert relearned.capacity is not None
    assert relearned.capacity_history == ((NOW, relearned.capacity),)
