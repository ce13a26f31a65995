"""Telemetry: the series alerts and the chart's dashboard read are set from the status the
reconcile wrote (conditions as one-hot gauges, engine flags, failed actions counted), counters
start at 0 so that a first action or failure is an increase, and a deleted InferenceSLA's
series go away."""

from __future__ import annotations

from typing import Any

from slascaler.model.regime import Regime
from slascaler.policy import Decision
from slascaler.policy.state import PolicyMemory
from slascaler.spec import parse_spec
from slascaler.telemetry import Telemetry

SPEC = parse_spec(
    {
        "targetRef": {"name": "llama"},
        "engine": "vllm",
        "objectives": {"ttft": {"percentile": 95, "thresholdMs": 500}},
        "knobs": {"maxBatchSize": {"min": 8, "max": 64}},
    }
)
DECISION = Decision(
    regime=Regime.QUEUE_BOUND, replicas=3, max_batch_size=16, chunk_size=None,
    reason_code="ScaleUp", reason="", conditions=(), changes=(),
    memory_if_applied=PolicyMemory(), memory_if_held=PolicyMemory(),
)  # fmt: skip


def status(ready_reason: str = "Reconciled", outcome: str = "ScaleUp") -> dict[str, Any]:
    return {
        "conditions": [
            {"type": "Ready", "status": "True", "reason": ready_reason},
            {"type": "MetricsAvailable", "status": "False", "reason": "MissingSeries"},
        ],
        "engineFlags": {"maxBatchSize": 16},
        "recommendation": {"reasonCode": outcome},
    }


def value(telemetry: Telemetry, metric: str, /, **labels: str) -> float | None:
    return telemetry.registry.get_sample_value(metric, labels)


def test_status_becomes_series_for_alerts_and_the_dashboard() -> None:
    telemetry = Telemetry()
    sla = {"namespace": "team-a", "name": "chat"}
    telemetry.evaluated("team-a", "chat", SPEC, DECISION, 2, status())
    assert (
        value(telemetry, "slascaler_condition", **sla, type="MetricsAvailable", status="False") == 1
    )
    assert (
        value(telemetry, "slascaler_condition", **sla, type="MetricsAvailable", status="True") == 0
    )
    assert value(telemetry, "slascaler_condition", **sla, type="Ready", status="True") == 1
    assert value(telemetry, "slascaler_engine_flag", **sla, knob="maxBatchSize") == 16
    assert value(telemetry, "slascaler_target_info", **sla, deployment="llama", engine="vllm") == 1
    # Counters exist at 0 before anything happened.
    assert value(telemetry, "slascaler_actions_total", **sla, knob="replicas") == 0
    assert value(telemetry, "slascaler_actions_total", **sla, knob="maxBatchSize") == 0
    assert value(telemetry, "slascaler_actions_total", **sla, knob="chunkSize") is None
    assert value(telemetry, "slascaler_action_failures_total", **sla, reason="ActionFailed") == 0
    assert value(telemetry, "slascaler_errors_total", stage="metrics") == 0

    telemetry.evaluated("team-a", "chat", SPEC, DECISION, 2, status("ActionFailed", "ActionFailed"))
    assert value(telemetry, "slascaler_action_failures_total", **sla, reason="ActionFailed") == 1

    telemetry.forget("team-a", "chat")
    for name in ("slascaler_condition", "slascaler_engine_flag", "slascaler_target_info"):
        assert not [
            s
            for metric in telemetry.registry.collect()
            if metric.name == name
            for s in metric.samples
        ], name


def test_query_durations_are_a_histogram() -> None:
    telemetry = Telemetry()
    telemetry.query_done(0.02, "ok")
    telemetry.query_done(0.5, "timeout")
    assert value(telemetry, "slascaler_prometheus_query_duration_seconds_count") == 2
    assert value(telemetry, "slascaler_prometheus_queries_total", outcome="timeout") == 1
