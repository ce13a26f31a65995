"""The safety invariants of DESIGN §3 as properties over random specs, fleets and windows.

- replicas never leave [min, max] and knobs never leave their bounds;
- no action but bringing values into bounds on missing, stale or NaN metrics;
- while pods of the last scale-up are starting, a new scale-up only for load beyond what
  ready and starting pods will serve;
- scale-down only after the stabilization window, never below a recent recommendation —
  except dropping Pending pods (they serve nothing) for a rollout at GPU capacity;
- knob changes only after the knob cooldown and never during a rollout;
- a prefill-bound window adds no replica for its load: only a surge for a knob rollout, or
  the replicas that keep long prompts from sharing a replica's steps (`model.collisions`);
  a conflict changes nothing;
- every decision's reason code is the reason of its largest change.

The strategies reach starting pods, unschedulable pods and a fresh memory together.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st

from builders import long_prompt_minute, observation_from_samples
from slascaler.engines import VLLM_ITL_BUCKETS_S
from slascaler.model.histogram import Histogram
from slascaler.model.latency import LoadPoint
from slascaler.model.observation import Observation
from slascaler.model.regime import Regime
from slascaler.model.samples import TTFTBreakdown
from slascaler.policy import Decision, FleetState, PolicyMemory, PolicyState, Reason, decide
from slascaler.policy.decision import Status
from slascaler.policy.state import Recommendation
from slascaler.spec import SLASpec, parse_spec

NOW = 50_000.0


@st.composite
def specs(draw: st.DrawFn) -> SLASpec:
    low = draw(st.integers(1, 8))
    high = draw(st.integers(low, 32))
    raw: dict[str, object] = {
        "targetRef": {"name": "llama"},
        "objectives": {
            "ttft": {
                "percentile": draw(st.sampled_from([50, 90, 95, 99])),
                "thresholdMs": draw(st.sampled_from([150, 300, 500, 1000])),
            }
        },
        "replicas": {"min": low, "max": high},
        "behavior": {
            "scaleUpCooldown": f"{draw(st.integers(1, 120))}s",
            "scaleDownStabilization": f"{draw(st.integers(1, 900))}s",
            "knobCooldown": f"{draw(st.integers(1, 1800))}s",
        },
    }
    if draw(st.booleans()):
        raw["objectives"]["itl"] = {
            "percentile": 95,
            "thresholdMs": draw(st.sampled_from([30, 60, 120])),
        }  # type: ignore[index]
    knobs: dict[str, object] = {}
    if draw(st.booleans()):
        b_low = draw(st.integers(1, 64))
        knobs["maxBatchSize"] = {"min": b_low, "max": draw(st.integers(b_low, 512))}
    if draw(st.booleans()):
        c_low = draw(st.integers(256, 4096))
        knobs["chunkSize"] = {"min": c_low, "max": draw(st.integers(c_low, 16384))}
    if knobs:
        raw["knobs"] = knobs
    return parse_spec(raw)


@st.composite
def fleets(draw: st.DrawFn) -> FleetState:
    rollout = draw(st.booleans())
    overwritten = draw(st.booleans())
    replicas = draw(st.integers(0, 40))
    ready = draw(st.integers(0, replicas))
    return FleetState(
        spec_replicas=replicas,
        ready_replicas=ready,
        unschedulable_pods=draw(st.integers(0, replicas - ready)),
        max_batch_size=draw(st.one_of(st.none(), st.integers(1, 1024))),
        chunk_size=draw(st.one_of(st.none(), st.integers(64, 32768))),
        rollout_in_progress=rollout,
        other_autoscaler=draw(
            st.sampled_from([None, None, None, "HorizontalPodAutoscaler/x", "InferenceSLA/old"])
        ),
        max_unavailable=draw(st.integers(0, 3)),
        foreign_rollout=rollout and draw(st.booleans()),
        replicas_overwritten_by="argocd-controller" if overwritten else None,
    )


@st.composite
def memories(draw: st.DrawFn) -> PolicyMemory:
    def maybe_time() -> float | None:
        return draw(st.one_of(st.none(), st.floats(NOW - 4000, NOW)))

    recommendations = tuple(
        Recommendation(at, n)
        for at, n in draw(
            st.lists(st.tuples(st.floats(NOW - 2000, NOW), st.integers(1, 40)), max_size=6)
        )
    )
    if draw(st.integers(0, 4)) == 0:
        return PolicyMemory()  # fresh: an operator that never saw this Deployment
    points = tuple(
        LoadPoint(at, work, ttft, itl, replicas, mix)
        for at, work, ttft, itl, replicas, mix in draw(
            st.lists(
                st.tuples(
                    st.floats(NOW - 3000, NOW), st.floats(0, 20000), st.floats(10, 5000),
                    st.floats(5, 300), st.integers(1, 40),
                    st.floats(1, 100_000) | st.just(math.nan),
                ),
                max_size=8,
            )
        )
    )  # fmt: skip
    return PolicyMemory(
        last_scale_up_at=maybe_time(),
        last_scale_down_at=maybe_time(),
        last_knob_change_at=maybe_time(),
        recommendations=recommendations,
        batch_points=tuple(
            draw(st.lists(st.tuples(st.floats(1, 256), st.floats(1, 500)), max_size=6))
        ),
        first_seen_at=maybe_time(),
        load_points=points,
        points_knobs=(None, None),
        capacity=draw(st.one_of(st.none(), st.floats(100, 50000))),
        capacity_history=tuple(
            draw(st.lists(st.tuples(st.floats(NOW - 600, NOW), st.floats(100, 50000)), max_size=8))
        ),
        load_history=tuple(
            draw(st.lists(st.tuples(st.floats(NOW - 900, NOW), st.floats(0, 1e5)), max_size=8))
        ),
        gpu_limit=draw(st.one_of(st.none(), st.integers(1, 40))),
        gpu_limit_at=maybe_time(),
        replicas_backoff_until=draw(st.one_of(st.none(), st.floats(NOW - 4000, NOW + 4000))),
        replicas_backoff_s=draw(st.one_of(st.none(), st.floats(300, 3600))),
        replicas_overwrite_seen_at=maybe_time(),
        unsettled_at=maybe_time(),
        forecast=draw(st.one_of(st.none(), st.tuples(st.floats(NOW - 300, NOW + 300),
                                                      st.floats(0, 1e5)))),
        forecast_error=draw(st.floats(0, 1)),
        startup_s=draw(st.one_of(st.none(), st.floats(1, 900))),
    )


@st.composite
def observations(draw: st.DrawFn) -> Observation | None:
    kind = draw(st.sampled_from(["good", "good", "good", "none", "stale", "nan", "missing"]))
    if kind == "none":
        return None
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    count = draw(st.sampled_from([0, 5, 50, 400]))
    queue_mean = draw(st.sampled_from([1.0, 20.0, 200.0, 2000.0]))
    prefill_mean = draw(st.sampled_from([20.0, 100.0, 600.0]))
    samples = [
        TTFTBreakdown(float(q), 10.0, float(max(1.0, p)), 20.0)
        for q, p in zip(
            rng.exponential(queue_mean, count),
            rng.normal(prefill_mean, prefill_mean / 5, count),
            strict=True,
        )
    ]
    pods = draw(st.integers(1, 16))
    observation = observation_from_samples(
        samples,
        at=NOW - draw(st.floats(0, 30)),
        pods=pods,
        itl_ms=rng.uniform(5, 150, count).tolist(),
        prompt_tokens=rng.integers(10, 8000, count).astype(float).tolist(),
        waiting=draw(st.sampled_from([0.0, 3.0, 100.0])),
        running=float(pods * draw(st.integers(0, 300))),
        tokens_per_request=draw(st.sampled_from([None, 300.0, 1400.0, 9000.0])),
    )
    if kind == "stale":
        return replace(observation, observed_at=NOW - 1000)
    if kind == "nan":
        return replace(observation, queue=Histogram((300.0, math.inf), (math.nan, 1.0), 1.0, 1.0))
    if kind == "missing":
        return replace(observation, prefill=None)
    return observation


def _clamped(bounds: object, value: int | None) -> int | None:
    return value if bounds is None or value is None else bounds.clamp(value)  # type: ignore[attr-defined]


PROPERTY_SETTINGS = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@PROPERTY_SETTINGS
@given(specs(), observations(), fleets(), memories())
def test_safety_invariants(
    spec: SLASpec, observation: Observation | None, fleet: FleetState, memory: PolicyMemory
) -> None:
    check_invariants(spec, observation, fleet, memory)


def test_invariants_hold_for_pending_pods_at_gpu_capacity_with_a_fresh_memory() -> None:
    """The review's case: 6 desired, 4 ready, 2 unschedulable, a batch rollout wanted."""
    spec = parse_spec({
        "targetRef": {"name": "llama"},
        "objectives": {"ttft": {"thresholdMs": 500}, "itl": {"thresholdMs": 60}},
        "replicas": {"min": 1, "max": 16},
        "knobs": {"maxBatchSize": {"min": 16, "max": 256}},
    })  # fmt: skip
    fleet = FleetState(6, 4, unschedulable_pods=2, max_batch_size=64, max_unavailable=1)
    observation = replace(
        _queue_bound_window(4, 1),
        running=4 * 64.0,
        itl=Histogram.from_values([20.0] * 100, [b * 1000 for b in VLLM_ITL_BUCKETS_S]),
    )
    decision = check_invariants(spec, observation, fleet, PolicyMemory())
    assert decision.replicas == 4 and decision.max_batch_size is not None
    assert [c.reason for c in decision.changes] == [
        Reason.RAISE_BATCH_AT_CAPACITY, Reason.DROP_PENDING_PODS,
    ]  # fmt: skip


def check_invariants(
    spec: SLASpec, observation: Observation | None, fleet: FleetState, memory: PolicyMemory
) -> Decision:
    decision = decide(spec, observation, PolicyState(fleet, memory), NOW)
    if fleet.other_autoscaler or fleet.spec_replicas == 0:
        # Another autoscaler's Deployment, or one scaled to 0 (scaling disabled, as for the
        # HPA): left exactly as it is.
        assert not decision.acts
        return decision
    backoff = decision.memory_if_held.replicas_backoff_until
    if backoff is not None and backoff > NOW:  # someone else writes replicas: not fought
        assert decision.replicas == fleet.spec_replicas
        conflict = decision.condition("Conflict")
        assert conflict is not None and conflict.status is Status.TRUE
    else:
        assert spec.replicas.min <= decision.replicas <= spec.replicas.max
    if fleet.foreign_rollout:  # no template change stacked on someone else's rollout
        assert (decision.max_batch_size, decision.chunk_size) == (
            fleet.max_batch_size,
            fleet.chunk_size,
        )
    if fleet.foreign_rollout or (backoff is not None and backoff > NOW):
        if decision.acts:
            assert decision.reason_code is decision.changes[0].reason
        return decision
    for bounds, value in (
        (spec.max_batch_size, decision.max_batch_size),
        (spec.chunk_size, decision.chunk_size),
    ):
        if bounds is not None and value is not None:
            assert bounds.min <= value <= bounds.max

    bounded_replicas = spec.replicas.clamp(fleet.spec_replicas)
    bounded_batch = _clamped(spec.max_batch_size, fleet.max_batch_size)
    bounded_chunk = _clamped(spec.chunk_size, fleet.chunk_size)
    unusable = (
        observation is None
        or NOW - observation.observed_at > 90
        or bool(observation.missing_inputs(spec.itl is not None))
    )
    if unusable or decision.regime is Regime.UNKNOWN:
        assert decision.replicas == bounded_replicas
        assert decision.max_batch_size == bounded_batch
        assert decision.chunk_size == bounded_chunk
        return decision

    replicas_reason = next((c.reason for c in decision.changes if c.knob == "replicas"), None)
    if fleet.starting_pods > 0 and decision.replicas > bounded_replicas:
        assert replicas_reason is Reason.SURGE_FOR_ROLLOUT or (
            decision.wanted_replicas is not None
            and decision.wanted_replicas > bounded_replicas
        ), "stacked scale-up"
    if decision.regime is Regime.PREFILL_BOUND and decision.replicas > bounded_replicas:
        assert_prefill_bound_growth(decision, replicas_reason)
    if decision.replicas < bounded_replicas:
        if replicas_reason is Reason.DROP_PENDING_PODS:
            assert decision.replicas >= spec.replicas.clamp(
                fleet.spec_replicas - fleet.unschedulable_pods
            )
        else:
            window = spec.behavior.scale_down_stabilization_s
            assert memory.first_seen_at is not None and memory.first_seen_at <= NOW - window
            assert memory.last_scale_up_at is None or memory.last_scale_up_at <= NOW - window
            recent = [r.replicas for r in decision.memory_if_held.recommendations]
            assert decision.replicas >= spec.replicas.clamp(max(recent))
    knobs_changed = (decision.max_batch_size, decision.chunk_size) != (bounded_batch, bounded_chunk)
    if knobs_changed:
        assert not fleet.rollout_in_progress
        assert (
            memory.last_knob_change_at is None
            or NOW - memory.last_knob_change_at >= spec.behavior.knob_cooldown_s
        )
    if decision.acts:
        assert decision.reason_code is decision.changes[0].reason
        assert str(decision.changes[0]) in decision.summary()
    assert decision.reason
    return decision


@PROPERTY_SETTINGS
@given(specs(), observations(), fleets(), memories())
def test_held_memory_never_records_an_action(
    spec: SLASpec, observation: Observation | None, fleet: FleetState, memory: PolicyMemory
) -> None:
    decision = decide(spec, observation, PolicyState(fleet, memory), NOW)
    held = decision.memory_if_held
    assert held.last_scale_up_at == memory.last_scale_up_at
    assert held.last_scale_down_at == memory.last_scale_down_at
    assert held.last_knob_change_at == memory.last_knob_change_at
    if not decision.acts:
        assert decision.memory_if_applied == held


def _queue_bound_window(pods: int, seed: int) -> Observation:
    rng = np.random.default_rng(seed)
    samples = [TTFTBreakdown(float(q), 10.0, 100.0, 20.0) for q in rng.exponential(800.0, 600)]
    return observation_from_samples(samples, at=NOW, pods=pods, waiting=50.0, running=pods * 8.0)


def _healthy_window(pods: int, seed: int) -> Observation:
    rng = np.random.default_rng(seed)
    samples = [TTFTBreakdown(float(q), 10.0, 60.0, 10.0) for q in rng.exponential(2.0, 300)]
    return observation_from_samples(samples, at=NOW, pods=pods, waiting=0.0, running=pods * 2.0)


def _slascaler_alone(fleet: FleetState, memory: PolicyMemory) -> tuple[FleetState, PolicyMemory]:
    """A running Deployment that slascaler alone writes: no other autoscaler or writer, no
    foreign rollout, no back-off (the properties below are about its own pacing)."""
    fleet = replace(
        fleet,
        other_autoscaler=None,
        spec_replicas=max(1, fleet.spec_replicas),
        ready_replicas=min(fleet.ready_replicas, max(1, fleet.spec_replicas)),
        replicas_overwritten_by=None,
        foreign_rollout=False,
    )
    return fleet, replace(memory, replicas_backoff_until=None)


@PROPERTY_SETTINGS
@given(specs(), fleets(), memories(), st.integers(0, 1000))
def test_no_stacked_scale_up_under_heavy_queueing(
    spec: SLASpec, fleet: FleetState, memory: PolicyMemory, seed: int
) -> None:
    fleet, memory = _slascaler_alone(fleet, memory)
    observation = _queue_bound_window(max(1, fleet.ready_replicas), seed)
    decision = decide(spec, observation, PolicyState(fleet, memory), NOW)
    bounded = spec.replicas.clamp(fleet.spec_replicas)
    if decision.replicas > bounded:
        assert fleet.unschedulable_pods == 0
        if fleet.starting_pods > 0:
            assert decision.wanted_replicas is not None and decision.wanted_replicas > bounded
        last_up = memory.last_scale_up_at
        assert last_up is None or NOW - last_up >= spec.behavior.scale_up_cooldown_s
        assert decision.replicas <= max(2 * bounded, bounded + 4) + fleet.max_unavailable


@PROPERTY_SETTINGS
@given(specs(), fleets(), memories(), st.integers(0, 1000))
def test_scale_down_only_after_the_stabilization_window(
    spec: SLASpec, fleet: FleetState, memory: PolicyMemory, seed: int
) -> None:
    fleet, memory = _slascaler_alone(fleet, memory)
    observation = _healthy_window(max(1, fleet.ready_replicas), seed)
    decision = decide(spec, observation, PolicyState(fleet, memory), NOW)
    bounded = spec.replicas.clamp(fleet.spec_replicas)
    reason = next((c.reason for c in decision.changes if c.knob == "replicas"), None)
    if decision.replicas < bounded and reason is not Reason.DROP_PENDING_PODS:
        window = spec.behavior.scale_down_stabilization_s
        assert memory.first_seen_at is not None and memory.first_seen_at <= NOW - window
        assert memory.last_scale_up_at is None or memory.last_scale_up_at <= NOW - window
        assert fleet.starting_pods == 0 and not fleet.rollout_in_progress
        recent = [r.replicas for r in decision.memory_if_held.recommendations]
        assert decision.replicas >= spec.replicas.clamp(max(recent))
        assert decision.replicas >= bounded - max(1, bounded // 2)


def assert_prefill_bound_growth(decision: Decision, reason: Reason | None) -> None:
    """A prefill-bound window grows the fleet only by a surge for a knob rollout, or up to
    the replicas that keep long prompts apart; never for its load."""
    if reason is Reason.SURGE_FOR_ROLLOUT:
        return
    apart = decision.replicas_for_collisions
    assert reason is Reason.SCALE_UP, "no replica for a prefill-bound load"
    assert apart is not None and decision.replicas <= apart, "no replica for a prefill-bound load"


def _knob_window(kind: str, pods: int, seed: int) -> Observation:
    """A window whose regime asks for a knob change: long prompts, or slow decodes."""
    rng = np.random.default_rng(seed)
    if kind == "prefill":
        samples = [TTFTBreakdown(2.0, 10.0, float(p), 20.0) for p in rng.normal(900, 50, 300)]
        itl = rng.uniform(5, 15, 300).tolist()
    else:
        samples = [TTFTBreakdown(2.0, 10.0, 40.0, 10.0) for _ in range(300)]
        itl = rng.uniform(150, 400, 300).tolist()
    return observation_from_samples(
        samples,
        at=NOW,
        pods=pods,
        itl_ms=itl,
        prompt_tokens=rng.integers(4000, 8000, 300).astype(float).tolist(),
        running=pods * 16.0,
    )


@PROPERTY_SETTINGS
@given(specs(), fleets(), memories(), st.sampled_from(["prefill", "decode"]), st.integers(0, 99))
def test_knob_changes_respect_cooldown_and_rollouts(
    spec: SLASpec, fleet: FleetState, memory: PolicyMemory, kind: str, seed: int
) -> None:
    spec = replace(
        spec,
        ttft=replace(spec.ttft, threshold_ms=500.0),
        itl=spec.itl
        or parse_spec(
            {
                "targetRef": {"name": "x"},
                "objectives": {"ttft": {"thresholdMs": 500}, "itl": {"thresholdMs": 100}},
            }
        ).itl,
    )
    fleet, memory = _slascaler_alone(fleet, memory)
    decision = decide(
        spec,
        _knob_window(kind, max(1, fleet.ready_replicas), seed),
        PolicyState(fleet, memory),
        NOW,
    )
    bounded = (
        _clamped(spec.max_batch_size, fleet.max_batch_size),
        _clamped(spec.chunk_size, fleet.chunk_size),
    )
    if (decision.max_batch_size, decision.chunk_size) != bounded:
        assert not fleet.rollout_in_progress
        last = memory.last_knob_change_at
        assert last is None or NOW - last >= spec.behavior.knob_cooldown_s
        assert decision.memory_if_applied.last_knob_change_at == NOW
    grew = decision.replicas > spec.replicas.clamp(fleet.spec_replicas)
    if decision.regime is Regime.PREFILL_BOUND and grew:
        reason = next(c.reason for c in decision.changes if c.knob == "replicas")
        assert_prefill_bound_growth(decision, reason)


def test_the_strategies_reach_starting_and_pending_pods_with_a_fresh_memory() -> None:
    """The invariant suite is only as good as what it draws: pods starting, pods Pending for
    GPUs and a memory that has never seen the Deployment all at once (the case that broke an
    invariant before), and the GPU limit remembered."""
    fleet, memory = find(
        st.tuples(fleets(), memories()),
        lambda case: case[0].starting_pods > 0
        and case[0].unschedulable_pods > 0
        and case[1] == PolicyMemory(),
    )
    assert fleet.starting_pods > 0 and fleet.unschedulable_pods > 0 and not memory.load_points
    remembered = find(memories(), lambda m: m.gpu_limit is not None and m.gpu_limit_at is not None)
    assert remembered.gpu_limit is not None


def _colliding_window(pods: int, collided: int, seed: int) -> Observation:
    # Python floats, as a metrics source parses them (numpy scalars warn where floats give inf).
    prompts = np.random.default_rng(seed).uniform(6000, 7000, 18).tolist()
    return long_prompt_minute(prompts, pods=pods, collided=collided, at=NOW)


def _prefill_bound_spec(spec: SLASpec) -> SLASpec:
    return replace(spec, ttft=replace(spec.ttft, threshold_ms=250.0, percentile=95.0), itl=None)


@PROPERTY_SETTINGS
@given(specs(), fleets(), memories(), st.integers(0, 4), st.integers(0, 99))
def test_invariants_hold_where_long_prompts_collide(
    spec: SLASpec, fleet: FleetState, memory: PolicyMemory, collided: int, seed: int
) -> None:
    spec = _prefill_bound_spec(spec)
    observation = _colliding_window(max(1, fleet.ready_replicas), collided, seed)
    check_invariants(spec, observation, fleet, memory)


def test_the_strategies_reach_a_scale_up_that_keeps_long_prompts_apart() -> None:
    """The amended prefill-bound invariant is exercised: some drawn case grows the fleet for
    colliding prompts (and the invariant checks it stops at the collision count)."""

    def grows_for_collisions(case: tuple[SLASpec, FleetState, PolicyMemory, int]) -> bool:
        spec, fleet, memory, collided = case
        fleet, memory = _slascaler_alone(fleet, memory)
        window = _colliding_window(max(1, fleet.ready_replicas), collided, 0)
        decision = decide(_prefill_bound_spec(spec), window, PolicyState(fleet, memory), NOW)
        return (
            decision.regime is Regime.PREFILL_BOUND
            and decision.replicas > spec.replicas.clamp(fleet.spec_replicas)
            and decision.replicas_for_collisions is not None
        )

    # About 0.4% of drawn cases grow the fleet for collisions (6 of 1500): the default search
    # missed them in one CI run. Derandomized, the search is the same on every run.
    spec, fleet, memory, collided = find(
        st.tuples(specs(), fleets(), memories(), st.integers(1, 4)),
        grows_for_collisions,
        settings=settings(max_examples=5000, deadline=None, database=None, derandomize=True),
    )
    fleet, memory = _slascaler_alone(fleet, memory)
    check_invariants(_prefill_bound_spec(spec), _colliding_window(
        max(1, fleet.ready_replicas), collided, 0), fleet, memory)  # fmt: skip
