"""The InferenceSLA spec as typed, validated data.

`parse_spec` turns the `spec` of an InferenceSLA (a plain mapping, as the API server stores
it) into an `SLASpec`, applying the same defaults as the CRD schema and raising `SpecError`
naming the field and the fix for anything the schema should already have refused. The API
server is the first line of defence; this is the second, so that the operator never crashes
on what a user wrote.

Called by the Kopf wiring, the simulator's control loop and the tests; pure (no I/O).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import cast

_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)(ms|s|m|h))+$")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
WINDOW_MIN_S, WINDOW_MAX_S = 10.0, 3600.0  # as the CRD's CEL rule on spec.window
PRIORITY_MIN, PRIORITY_MAX = -1_000_000_000, 1_000_000_000  # as the CRD's bounds


class SpecError(ValueError):
    """A spec field is wrong: `field` is its path, the message says what to write instead."""

    def __init__(self, field_path: str, message: str) -> None:
        super().__init__(f"spec.{field_path}: {message}")
        self.field_path = field_path


class Engine(StrEnum):
    VLLM = "vllm"
    SGLANG = "sglang"
    TGI = "tgi"


class Mode(StrEnum):
    AUTO = "Auto"
    RECOMMEND = "Recommend"


@dataclass(frozen=True)
class Objective:
    percentile: float  # in (0, 100)
    threshold_ms: float  # > 0

    @property
    def quantile(self) -> float:
        return self.percentile / 100.0


@dataclass(frozen=True)
class Bounds:
    min: int
    max: int

    def clamp(self, value: int) -> int:
        return max(self.min, min(self.max, value))

    def contains(self, value: int) -> bool:
        return self.min <= value <= self.max


@dataclass(frozen=True)
class Behavior:
    scale_up_cooldown_s: float = 30.0
    scale_down_stabilization_s: float = 300.0
    knob_cooldown_s: float = 600.0


@dataclass(frozen=True)
class TargetRef:
    name: str
    kind: str = "Deployment"
    api_version: str = "apps/v1"
    container: str | None = None  # the engine's container; None: the first one


@dataclass(frozen=True)
class SLASpec:
    target: TargetRef
    ttft: Objective
    replicas: Bounds
    engine: Engine = Engine.VLLM
    itl: Objective | None = None
    window_s: float = 120.0
    max_batch_size: Bounds | None = None
    chunk_size: Bounds | None = None
    behavior: Behavior = field(default_factory=Behavior)
    mode: Mode = Mode.AUTO
    priority: int = 0  # in a shared GPU pool, higher wins


def parse_duration(text: str, field_path: str) -> float:
    """Seconds in a Go-style duration such as `90s`, `2m`, `1m30s`, `250ms` (must be > 0)."""
    if not isinstance(text, str) or not _DURATION.match(text.strip()):
        raise SpecError(field_path, f"{text!r} is not a duration; write e.g. 30s, 2m or 1h")
    seconds = sum(
        float(n) * _UNIT_SECONDS[unit] for n, unit in _DURATION_PART.findall(text.strip())
    )
    if seconds <= 0:
        raise SpecError(field_path, f"{text!r} must be longer than zero")
    return seconds


def _mapping(raw: object, field_path: str) -> Mapping[str, object]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise SpecError(field_path, f"must be an object, got {type(raw).__name__}")
    return cast(Mapping[str, object], raw)


def _number(raw: Mapping[str, object], key: str, field_path: str) -> float:
    value = raw.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise SpecError(f"{field_path}.{key}", f"must be a number, got {value!r}")
    return float(value)


def _integer(raw: Mapping[str, object], key: str, field_path: str) -> int:
    value = raw.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(f"{field_path}.{key}", f"must be a whole number, got {value!r}")
    return value


def _objective(raw: object, field_path: str) -> Objective:
    data = _mapping(raw, field_path)
    percentile = _number(data, "percentile", field_path) if "percentile" in data else 95.0
    if not 0 < percentile < 100:
        raise SpecError(
            f"{field_path}.percentile", f"must be between 0 and 100 exclusive, got {percentile:g}"
        )
    threshold = _number(data, "thresholdMs", field_path)
    if threshold <= 0:
        raise SpecError(f"{field_path}.thresholdMs", f"must be > 0, got {threshold:g}")
    return Objective(percentile=percentile, threshold_ms=threshold)


def _bounds(raw: object, field_path: str, lowest: int) -> Bounds:
    data = _mapping(raw, field_path)
    low, high = _integer(data, "min", field_path), _integer(data, "max", field_path)
    if low < lowest:
        raise SpecError(f"{field_path}.min", f"must be ≥ {lowest}, got {low}")
    if low > high:
        raise SpecError(field_path, f"min ({low}) must be ≤ max ({high})")
    return Bounds(low, high)


def _duration_or(behavior: Mapping[str, object], key: str, default: float) -> float:
    if key not in behavior:
        return default
    return parse_duration(cast(str, behavior[key]), f"behavior.{key}")


def parse_spec(raw: Mapping[str, object]) -> SLASpec:
    """Validate an InferenceSLA spec and fill in the CRD's defaults."""
    target = _mapping(raw.get("targetRef"), "targetRef")
    name = target.get("name")
    if not isinstance(name, str) or not name:
        raise SpecError("targetRef.name", "name the Deployment to hold the SLA for")
    container = target.get("container")
    if container is not None and (not isinstance(container, str) or not container):
        raise SpecError("targetRef.container", "name the engine's container, or leave it out")
    kind = target.get("kind", "Deployment")
    if kind != "Deployment":
        raise SpecError("targetRef.kind", f"only Deployment is supported, got {kind!r}")
    engine_text = raw.get("engine", "vllm")
    try:
        engine = Engine(str(engine_text))
    except ValueError:
        choices = ", ".join(e.value for e in Engine)
        raise SpecError("engine", f"{engine_text!r} is not one of {choices}") from None
    objectives = _mapping(raw.get("objectives"), "objectives")
    if "ttft" not in objectives:
        raise SpecError("objectives.ttft", "a TTFT objective is required")
    ttft = _objective(objectives["ttft"], "objectives.ttft")
    itl = _objective(objectives["itl"], "objectives.itl") if "itl" in objectives else None
    window_s = parse_duration(cast(str, raw.get("window", "2m")), "window")
    if not WINDOW_MIN_S <= window_s <= WINDOW_MAX_S:
        raise SpecError("window", "must be a duration between 10s and 1h, e.g. 2m")
    replicas = _bounds(raw.get("replicas", {"min": 1, "max": 16}), "replicas", lowest=1)
    knobs = _mapping(raw.get("knobs"), "knobs")
    max_batch = (
        _bounds(knobs["maxBatchSize"], "knobs.maxBatchSize", lowest=1)
        if "maxBatchSize" in knobs
        else None
    )
    chunk = (
        _bounds(knobs["chunkSize"], "knobs.chunkSize", lowest=1) if "chunkSize" in knobs else None
    )
    behavior_raw = _mapping(raw.get("behavior"), "behavior")
    defaults = Behavior()
    behavior = Behavior(
        scale_up_cooldown_s=_duration_or(
            behavior_raw, "scaleUpCooldown", defaults.scale_up_cooldown_s
        ),
        scale_down_stabilization_s=_duration_or(
            behavior_raw, "scaleDownStabilization", defaults.scale_down_stabilization_s
        ),
        knob_cooldown_s=_duration_or(behavior_raw, "knobCooldown", defaults.knob_cooldown_s),
    )
    priority = raw.get("priority", 0)
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise SpecError("priority", f"must be a whole number, got {priority!r}")
    if not PRIORITY_MIN <= priority <= PRIORITY_MAX:
        raise SpecError("priority", f"must be between {PRIORITY_MIN} and {PRIORITY_MAX}")
    mode_text = raw.get("mode", "Auto")
    try:
        mode = Mode(str(mode_text))
    except ValueError:
        raise SpecError("mode", f"{mode_text!r} is not one of Auto, Recommend") from None
    return SLASpec(
        target=TargetRef(
            name=name,
            kind="Deployment",
            api_version=str(target.get("apiVersion", "apps/v1")),
            container=container,
        ),
        engine=engine,
        ttft=ttft,
        itl=itl,
        window_s=window_s,
        replicas=replicas,
        max_batch_size=max_batch,
        chunk_size=chunk,
        behavior=behavior,
        mode=mode,
        priority=priority,
    )
