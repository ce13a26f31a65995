"""Parsing an InferenceSLA spec: defaults, and errors naming the field and the fix."""

from __future__ import annotations

import pytest

from slascaler.spec import Engine, Mode, SpecError, parse_duration, parse_spec

MINIMAL = {"targetRef": {"name": "llama"}, "objectives": {"ttft": {"thresholdMs": 500}}}


def test_defaults_match_the_crd() -> None:
    spec = parse_spec(MINIMAL)
    assert spec.engine is Engine.VLLM and spec.mode is Mode.AUTO
    assert spec.ttft.percentile == 95 and spec.ttft.threshold_ms == 500
    assert spec.window_s == 120 and (spec.replicas.min, spec.replicas.max) == (1, 16)
    assert spec.behavior.scale_down_stabilization_s == 300
    assert spec.max_batch_size is None and spec.itl is None


@pytest.mark.parametrize(
    ("text", "seconds"), [("30s", 30), ("2m", 120), ("1m30s", 90), ("250ms", 0.25), ("1h", 3600)]
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text, "window") == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("patch", "field", "message"),
    [
        ({"targetRef": {}}, "targetRef.name", "name the Deployment"),
        ({"engine": "triton"}, "engine", "not one of vllm, sglang, tgi"),
        (
            {"objectives": {"ttft": {"percentile": 150, "thresholdMs": 5}}},
            "objectives.ttft.percentile",
            "between 0 and 100",
        ),
        ({"objectives": {"ttft": {"thresholdMs": -1}}}, "objectives.ttft.thresholdMs", "> 0"),
        ({"window": "-2m"}, "window", "not a duration"),
        ({"window": "0s"}, "window", "longer than zero"),
        ({"window": "5s"}, "window", "between 10s and 1h"),
        ({"targetRef": {"name": "x", "container": ""}}, "targetRef.container", "name the engine"),
        ({"replicas": {"min": 5, "max": 2}}, "replicas", "min (5) must be ≤ max (2)"),
        ({"replicas": {"min": 0, "max": 2}}, "replicas.min", "≥ 1"),
        ({"knobs": {"chunkSize": {"min": 4096, "max": 512}}}, "knobs.chunkSize", "min (4096)"),
        ({"replicas": {"min": 1.5, "max": 2}}, "replicas.min", "whole number"),
        ({"mode": "Yolo"}, "mode", "Auto, Recommend"),
        ({"behavior": {"knobCooldown": "soon"}}, "behavior.knobCooldown", "not a duration"),
    ],
)
def test_errors_name_the_field(patch: dict[str, object], field: str, message: str) -> None:
    with pytest.raises(SpecError) as error:
        parse_spec({**MINIMAL, **patch})
    assert error.value.field_path == field
    assert str(error.value).startswith(f"spec.{field}: ")
    assert message in str(error.value)
