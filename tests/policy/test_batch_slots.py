"""The batch slots bound a replica's throughput where the latency model cannot see it:
never fewer replicas than hold the requests that run at once (`policy.sizing._slot_replicas`)."""

from __future__ import annotations

import math
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from builders import observation_from_samples, spec
from slascaler.model.latency import LoadPoint
from slascaler.policy.decide import _slots
from slascaler.policy.learning import WindowLoad
from slascaler.policy.sizing import BatchSlots, size
from slascaler.policy.state import PolicyMemory
from slascaler.policy.tunables import Tunables
from slascaler.scenarios import source_scenario

NOW = 10_000.0
TUNABLES = Tunables()
WITHOUT = replace(TUNABLES, use_slot_sizing=False)
SLA = spec(replicas={"min": 1, "max": 32})


def _memory() -> PolicyMemory:
    """A model fitted where the batch limit did not bind: 13.4k tokens/s per replica."""
    points = tuple(
        LoadPoint(NOW - 15.0 * i, 4500.0 + 200.0 * i, 300.0 + 8.0 * i, 25.0, 5) for i in range(8)
    )
    return PolicyMemory(load_points=points, capacity=13_400.0, first_seen_at=NOW - 600.0)


def _window(arrivals_per_s: float = 17.0, pods: int = 4) -> WindowLoad:
    return WindowLoad(pods=pods, requests_per_s=17.0, tokens_per_request=1300.0,
                      arrivals_per_s=arrivals_per_s, backlog=0.0)  # fmt: skip


def test_a_small_batch_limit_keeps_the_replicas_its_slots_need() -> None:
    """40 requests run at once on 4 replicas; at 16 per replica they need 40 + 2·√40 ≈ 53
    slots, 4 replicas, where the model alone (its capacity read at batch 256) calls for 2
    or 3."""
    load = _window()
    free = size(SLA, _memory(), load, NOW, WITHOUT)
    held = size(SLA, _memory(), load, NOW, TUNABLES, slots=BatchSlots(40.0, 16))
    assert free.replicas is not None and free.replicas <= 3
    assert held.replicas == held.without_backlog == 4
    assert "4 replicas hold in their batch slots (16 each)" in held.why


def test_a_batch_limit_far_above_what_runs_changes_nothing() -> None:
    load = _window()
    free = size(SLA, _memory(), load, NOW, WITHOUT)
    assert size(SLA, _memory(), load, NOW, TUNABLES, slots=BatchSlots(40.0, 256)) == free


def test_the_slots_are_sized_for_the_load_coming() -> None:
    """Arrivals at twice what the window served: twice the requests will run at once."""
    load = _window(arrivals_per_s=34.0)
    held = size(SLA, _memory(), load, NOW, TUNABLES, slots=BatchSlots(40.0, 16))
    concurrent = 80.0
    assert held.replicas is not None
    assert held.replicas >= math.ceil((concurrent + 2 * math.sqrt(concurrent)) / 16)


def test_a_scale_in_leaves_the_slots_room_for_the_longer_steps_and_more_scatter() -> None:
    """Served by 5 replicas, the same 40 requests do not let the fleet step in to 4: on
    4 each replica is busier (22.1k tokens/s over 4 × 13.4k: u 0.41, against 0.33 on 5),
    its steps 1.13× longer, so 45 requests would run at once, and a scale-in must leave room
    for 3 standard deviations of their scatter (45 + 3·√45 ≈ 65 > 64 slots): the fleet holds
    at 5, where a scale-out is called only at 2 (53 slots, 4 replicas, above)."""
    held = size(SLA, _memory(), _window(pods=5), NOW, TUNABLES, slots=BatchSlots(40.0, 16))
    assert held.replicas == 5
    assert "longer steps" in held.why


def test_a_fleet_whose_slots_bind_does_not_step_in_and_straight_back_out() -> None:
    """The running requests a window at N + 1 replicas shows, carried to N, call for N + 1
    at N: what a scale-in to N is refused for is what a window at N would scale out for."""
    memory, served, batch, capacity = _memory(), _window(), 16, 13_400.0
    stepped_in = 0
    for running_at_5 in (10.0, 20.0, 30.0, 40.0, 50.0, 60.0):
        fewer = size(SLA, memory, _window(pods=5), NOW, TUNABLES,
                     slots=BatchSlots(running_at_5, batch))  # fmt: skip
        assert fewer.replicas is not None
        if fewer.replicas >= 5:
            continue
        stepped_in += 1
        # At the count it stepped in to, the same load runs longer on each replica.
        spare_at_5 = 1 - served.work / (5 * capacity)
        stretch = spare_at_5 / (1 - served.work / (fewer.replicas * capacity))
        back = size(SLA, memory, _window(pods=fewer.replicas), NOW, TUNABLES,
                    slots=BatchSlots(running_at_5 * stretch, batch))  # fmt: skip
        assert back.replicas is not None and back.replicas <= fewer.replicas, running_at_5
    assert stepped_in >= 2


@settings(max_examples=200, deadline=None)
@given(st.floats(0.0, 400.0), st.integers(1, 512), st.floats(1.0, 60.0), st.integers(1, 12))
def test_the_slots_only_ever_add_replicas(
    running: float, batch: int, arrivals: float, pods: int
) -> None:
    load = _window(arrivals, pods)
    free = size(SLA, _memory(), load, NOW, WITHOUT)
    held = size(SLA, _memory(), load, NOW, TUNABLES, slots=BatchSlots(running, batch))
    assert free.replicas is not None and held.replicas is not None
    assert held.replicas >= free.replicas
    if held.replicas > free.replicas:
        # A scale-out goes exactly to the replicas whose slots hold 2 standard deviations;
        # below the count serving now, a scale-in may stop anywhere up to that count.
        concurrent = running * load.arriving_work / load.work
        spread = concurrent + TUNABLES.slot_scatter * math.sqrt(concurrent)
        out = math.ceil(spread / batch - 1e-9)
        out = min(out, 4 * SLA.replicas.max)  # the sizing's bound
        if out >= pods:
            assert held.replicas == out
        else:
            assert out <= held.replicas <= pods


@settings(max_examples=200, deadline=None)
@given(st.floats(1.0, 400.0), st.integers(1, 512), st.integers(1, 12))
def test_more_requests_running_never_call_for_fewer_replicas(
    running: float, batch: int, pods: int
) -> None:
    load = _window(pods=pods)
    fewer = size(SLA, _memory(), load, NOW, TUNABLES, slots=BatchSlots(running, batch))
    more = size(SLA, _memory(), load, NOW, TUNABLES, slots=BatchSlots(running * 1.5, batch))
    assert fewer.replicas is not None and more.replicas is not None
    assert more.replicas >= fewer.replicas


def test_no_max_batch_size_flag_no_slots() -> None:
    observation = observation_from_samples(source_scenario("low-load", 30, seed=1), running=12.0)
    assert _slots(observation, None) is None
    assert _slots(observation, 64) == BatchSlots(observation.running, 64)
