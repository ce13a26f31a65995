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


def _window(arrivals_per_s: float = 17.0) -> WindowLoad:
    return WindowLoad(pods=5, requests_per_s=17.0, tokens_per_request=1300.0,
                      arrivals_per_s=arrivals_per_s, backlog=0.0)  # fmt: skip


def test_a_small_batch_limit_keeps_the_replicas_its_slots_need() -> None:
    """40 requests run at once; at 16 per replica they need 40 + 2·√40 ≈ 53 slots, 4
    replicas, where the model alone (its capacity read at batch 256) calls for 2 or 3."""
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


@settings(max_examples=200, deadline=None)
@given(st.floats(0.0, 400.0), st.integers(1, 512), st.floats(1.0, 60.0))
def test_the_slots_only_ever_add_replicas(running: float, batch: int, arrivals: float) -> None:
    load = _window(arrivals)
    free = size(SLA, _memory(), load, NOW, WITHOUT)
    held = size(SLA, _memory(), load, NOW, TUNABLES, slots=BatchSlots(running, batch))
    assert free.replicas is not None and held.replicas is not None
    assert held.replicas >= free.replicas
    if held.replicas > free.replicas:  # then it is exactly what the slots need
        concurrent = running * load.arriving_work / load.work
        needed = (concurrent + TUNABLES.slot_scatter * math.sqrt(concurrent)) / batch
        assert held.replicas == math.ceil(needed - 1e-9)


def test_no_max_batch_size_flag_no_slots() -> None:
    observation = observation_from_samples(source_scenario("low-load", 30, seed=1), running=12.0)
    assert _slots(observation, None) is None
    assert _slots(observation, 64) == BatchSlots(observation.running, 64)
