"""Status: the policy memory survives a round trip through JSON, garbage never crashes the
operator, conditions keep their transition time while unchanged. Settings: every bad
environment variable is named with the fix."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from builders import spec as make_spec
from slascaler.model.latency import LoadPoint
from slascaler.model.observation import Observation
from slascaler.policy import Change, Condition, FleetState, PolicyMemory, PolicyState, decide
from slascaler.policy.decision import Status
from slascaler.policy.state import Recommendation
from slascaler.settings import Settings, SettingsError
from slascaler.status import (
    engine_flags,
    memory_from_status,
    memory_to_status,
    merge_conditions,
    observed,
)

times = st.floats(0, 2e9, allow_nan=False)
maybe_time = st.none() | times


@st.composite
def memories(draw: st.DrawFn) -> PolicyMemory:
    return PolicyMemory(
        last_scale_up_at=draw(maybe_time),
        last_scale_down_at=draw(maybe_time),
        last_knob_change_at=draw(maybe_time),
        first_seen_at=draw(maybe_time),
        capacity=draw(st.none() | st.floats(0.1, 1e6)),
        gpu_limit=draw(st.none() | st.integers(1, 1000)),
        gpu_limit_at=draw(maybe_time),
        replicas_backoff_until=draw(maybe_time),
        replicas_backoff_s=draw(maybe_time),
        replicas_overwrite_seen_at=draw(maybe_time),
        recommendations=tuple(
            Recommendation(at, n)
            for at, n in draw(st.lists(st.tuples(times, st.integers(1, 10_000)), max_size=5))
        ),
        batch_points=tuple(
            draw(st.lists(st.tuples(st.floats(0, 1e4), st.floats(0, 1e5)), max_size=5))
        ),
        load_points=tuple(
            LoadPoint(at, work, ttft, itl, replicas, mix)
            for at, work, ttft, itl, replicas, mix in draw(
                st.lists(
                    st.tuples(
                        times,
                        st.floats(0, 1e6),
                        st.floats(0, 1e6),
                        st.floats(0, 1e5) | st.just(math.nan),
                        st.integers(1, 10_000),
                        st.floats(1, 1e6) | st.just(math.nan),
                    ),
                    max_size=5,
                )
            )
        ),
        points_knobs=(
            draw(st.none() | st.integers(1, 4096)),
            draw(st.none() | st.integers(1, 1 << 20)),
        ),
        load_history=tuple(draw(st.lists(st.tuples(times, st.floats(0, 1e7)), max_size=5))),
        forecast=draw(st.none() | st.tuples(times, st.floats(0, 1e7))),
        forecast_error=draw(st.floats(0, 1)),
        startup_s=draw(st.none() | st.floats(0, 3600)),
        startup_for=draw(maybe_time),
        unsettled_at=draw(maybe_time),
    )


def close(a: float | None, b: float | None, tolerance: float) -> bool:
    return (a is None and b is None) or (
        a is not None and b is not None and abs(a - b) <= tolerance
    )


@given(memories())
def test_memory_round_trips_through_json(memory: PolicyMemory) -> None:
    stored = json.loads(json.dumps(memory_to_status(memory)))
    restored, note = memory_from_status(stored)
    assert note is None
    for name in ("last_scale_up_at", "last_scale_down_at", "last_knob_change_at",
                 "first_seen_at", "gpu_limit_at", "replicas_backoff_until",
                 "replicas_backoff_s", "replicas_overwrite_seen_at", "startup_for",
                 "unsettled_at"):  # fmt: skip
        assert close(getattr(restored, name), getattr(memory, name), 0.005), name
    assert close(restored.capacity, memory.capacity, 0.0501)  # stored to 0.1: ±0.05 + float error
    assert restored.points_knobs == memory.points_knobs
    assert [p.replicas for p in restored.load_points] == [p.replicas for p in memory.load_points]
    assert all(
        close(a.work, b.work, 0.0501) and close(a.ttft_ms, b.ttft_ms, 0.0501)
        and (math.isnan(a.itl_ms) == math.isnan(b.itl_ms))
        and (
            close(a.tokens_per_request, b.tokens_per_request, 0.0501)
            if math.isfinite(b.tokens_per_request) else math.isnan(a.tokens_per_request)
        )
        for a, b in zip(restored.load_points, memory.load_points, strict=True)
    )  # fmt: skip
    assert len(restored.load_history) == len(memory.load_history)
    assert (restored.forecast is None) == (memory.forecast is None)
    assert close(restored.forecast_error, memory.forecast_error, 0.00005)
    assert close(restored.startup_s, memory.startup_s, 0.005)
    assert restored.gpu_limit == memory.gpu_limit
    assert [r.replicas for r in restored.recommendations] == [
        r.replicas for r in memory.recommendations
    ]
    assert all(
        close(a.at, b.at, 0.005)
        for a, b in zip(restored.recommendations, memory.recommendations, strict=True)
    )
    assert all(
        close(a[0], b[0], 0.005) and close(a[1], b[1], 0.005)
        for a, b in zip(restored.batch_points, memory.batch_points, strict=True)
    )
    # What was stored once stores the same again: the rounding is stable.
    assert memory_to_status(restored) == stored


@pytest.mark.parametrize(
    "garbage",
    [
        "text",
        [1, 2],
        {"format": 99},
        {"format": 1, "lastScaleUpAt": "yesterday"},
        {"format": 1, "recommendations": [[1, 2, 3]]},
        {"format": 1, "batchPoints": [["a", 1]]},
        {"format": 1, "lastKnobChangeAt": math.inf},
    ],
)
def test_unusable_memory_starts_afresh_with_a_note(garbage: object) -> None:
    memory, note = memory_from_status(garbage)
    assert memory == PolicyMemory()
    assert note is not None and "starting afresh" in note


def test_conditions_keep_their_transition_time_until_the_status_changes() -> None:
    first = merge_conditions(
        None, [Condition("SLAMet", Status.TRUE, "Met", "")], "1970-01-01T00:16:40Z", 1
    )
    same = merge_conditions(
        first, [Condition("SLAMet", Status.TRUE, "Met", "x")], "1970-01-01T00:33:20Z", 1
    )
    flipped = merge_conditions(
        same, [Condition("SLAMet", Status.FALSE, "Missed", "")], "1970-01-01T00:50:00Z", 2
    )
    assert first[0]["lastTransitionTime"] == same[0]["lastTransitionTime"] == "1970-01-01T00:16:40Z"
    assert flipped[0]["lastTransitionTime"] == "1970-01-01T00:50:00Z"
    assert flipped[0]["observedGeneration"] == 2


def test_engine_flags_describe_the_deployment_after_the_changes_just_made() -> None:
    fleet = FleetState(spec_replicas=4, ready_replicas=4, max_batch_size=512)
    assert engine_flags(fleet) == {"maxBatchSize": 512}
    acted = (
        Change("replicas", 4, 3),
        Change("maxBatchSize", 512, 64),
        Change("chunkSize", None, 2048),
    )
    assert engine_flags(fleet, acted) == {"maxBatchSize": 64, "chunkSize": 2048}


def test_settings_defaults() -> None:
    settings = Settings.from_env({"SLASCALER_PROMETHEUS_URL": "http://prom:9090/"})
    assert settings.prometheus_url == "http://prom:9090"
    assert settings.reconcile_interval_s == 15 and settings.watch_namespaces == ()
    assert settings.peering is None and not settings.dry_run


@pytest.mark.parametrize(
    ("env", "variable", "message"),
    [
        ({}, "SLASCALER_PROMETHEUS_URL", "not an http(s) URL"),
        ({"SLASCALER_RECONCILE_INTERVAL": "often"}, "SLASCALER_RECONCILE_INTERVAL", "duration"),
        ({"SLASCALER_RECONCILE_INTERVAL": "100ms"}, "SLASCALER_RECONCILE_INTERVAL", "at least 1s"),
        ({"SLASCALER_PROMETHEUS_RETRIES": "-1"}, "SLASCALER_PROMETHEUS_RETRIES", "outside"),
        ({"SLASCALER_DRY_RUN": "maybe"}, "SLASCALER_DRY_RUN", "not true or false"),
        ({"SLASCALER_POD_LABEL": "pod-name"}, "SLASCALER_POD_LABEL", "label name"),
        ({"SLASCALER_WATCH_NAMESPACES": "a,B_c"}, "SLASCALER_WATCH_NAMESPACES", "'B_c'"),
        ({"SLASCALER_LOG_LEVEL": "loud"}, "SLASCALER_LOG_LEVEL", "DEBUG, INFO"),
    ],
)
def test_bad_settings_name_the_variable(env: dict[str, str], variable: str, message: str) -> None:
    base = (
        {"SLASCALER_PROMETHEUS_URL": "http://prom:9090"}
        if variable != "SLASCALER_PROMETHEUS_URL"
        else {}
    )
    with pytest.raises(SettingsError) as error:
        Settings.from_env({**base, **env})
    assert error.value.variable == variable
    assert str(error.value).startswith(f"{variable}: ") and message in str(error.value)


def test_a_memory_written_before_the_mix_was_kept_reads_with_the_mix_unknown() -> None:
    stored = memory_to_status(
        PolicyMemory(load_points=(LoadPoint(10.0, 6000.0, 420.0, 30.0, 3, 950.0),))
    )
    stored["loadPoints"] = [row[:5] for row in stored["loadPoints"]]  # five columns, as before
    restored, note = memory_from_status(json.loads(json.dumps(stored)))
    assert note is None
    (point,) = restored.load_points
    assert (point.work, point.ttft_ms, point.replicas) == (6000.0, 420.0, 3)
    assert math.isnan(point.tokens_per_request)


@pytest.mark.parametrize(("window_s", "shown"), [(60.0, "60s"), (10.5123, "10.5s"), (0.04, "0s")])
def test_the_status_says_which_window_was_read(window_s: float, shown: str) -> None:
    """The spec's window, or the seconds a fleet younger than it served, to a tenth."""
    spec = make_spec()
    observation = Observation(100.0, window_s, ttft=None, queue=None, prefill=None)
    decision = decide(spec, observation, PolicyState(FleetState(2, 2)), 100.0)
    assert observed(decision, observation, spec)["window"] == shown
