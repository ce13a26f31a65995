"""The policy's memory kept in the InferenceSLA's status (`status.memory`), as JSON.

`memory_to_status` writes `PolicyMemory` (times to 0.01 s, measurements to 0.01);
`memory_from_status` reads it back. A memory that cannot be read (edited by hand, an older
format) gives a fresh memory and a note, never an exception, so a restarted operator resumes
where it stopped and never crashes on its own status. Called by `reconcile` and by
`status.pending` (an announced action carries the memory it leads to).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from slascaler.model.latency import LoadPoint
from slascaler.policy import PolicyMemory
from slascaler.policy.state import Recommendation
from slascaler.status.values import finite as _finite
from slascaler.status.values import number as _number

MEMORY_FORMAT = 2


def memory_to_status(memory: PolicyMemory) -> dict[str, Any]:
    """The memory as JSON; times to 0.01 s and measurements to 0.01, enough for what they
    decide and short enough to read in `kubectl describe`."""
    return {
        "format": MEMORY_FORMAT,
        "lastScaleUpAt": _finite(memory.last_scale_up_at, 2),
        "lastScaleDownAt": _finite(memory.last_scale_down_at, 2),
        "lastKnobChangeAt": _finite(memory.last_knob_change_at, 2),
        "firstSeenAt": _finite(memory.first_seen_at, 2),
        "gpuLimit": memory.gpu_limit,
        "gpuLimitAt": _finite(memory.gpu_limit_at, 2),
        "replicasBackoffUntil": _finite(memory.replicas_backoff_until, 2),
        "replicasBackoffS": _finite(memory.replicas_backoff_s, 2),
        "replicasOverwriteSeenAt": _finite(memory.replicas_overwrite_seen_at, 2),
        "recommendations": [[round(r.at, 2), r.replicas] for r in memory.recommendations],
        "batchPoints": [[round(x, 2), round(y, 2)] for x, y in memory.batch_points],
        "loadPoints": [
            [
                round(p.at, 2),
                round(p.work, 1),
                round(p.ttft_ms, 1),
                round(p.itl_ms, 2) if math.isfinite(p.itl_ms) else None,
                p.replicas,
                _finite(p.tokens_per_request, 1),
            ]
            for p in memory.load_points
        ],
        "pointsKnobs": list(memory.points_knobs),
        "capacity": _finite(memory.capacity, 1),
        "capacityHistory": [[round(t, 2), round(c, 1)] for t, c in memory.capacity_history],
        "loadHistory": [[round(t, 2), round(w, 1)] for t, w in memory.load_history],
        "forecast": [round(v, 2) for v in memory.forecast] if memory.forecast else None,
        "forecastError": round(memory.forecast_error, 4),
        "startupS": _finite(memory.startup_s, 2),
        "startupFor": _finite(memory.startup_for, 2),
        "unsettledAt": _finite(memory.unsettled_at, 2),
    }


def _optional_time(raw: Mapping[str, Any], key: str) -> float | None:
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{key} is {value!r}")
    return float(value)


def _optional_count(raw: Mapping[str, Any], key: str) -> int | None:
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{key} is {value!r}")
    return value


def _rows(raw: object, key: str, width: int) -> list[Sequence[object]]:
    if not isinstance(raw, Sequence) or isinstance(raw, str):
        raise ValueError(f"{key} is not a list")
    rows = []
    for item in raw:
        if not (isinstance(item, Sequence) and not isinstance(item, str) and len(item) == width):
            raise ValueError(f"{key} holds {item!r}")
        rows.append(item)
    return rows


def _pairs(raw: object, key: str) -> list[tuple[float, float]]:
    return [(_number(a, key), _number(b, key)) for a, b in _rows(raw, key, 2)]


def _load_points(raw: object) -> tuple[LoadPoint, ...]:
    points = []
    if isinstance(raw, list):
        # Memories written before the mix was kept have five columns: the mix unknown.
        raw = [[*row, None] if isinstance(row, list) and len(row) == 5 else row for row in raw]
    for at, work, ttft, itl, replicas, per_request in _rows(raw, "loadPoints", 6):
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
            raise ValueError(f"loadPoints holds {replicas!r} replicas")
        points.append(
            LoadPoint(
                _number(at, "loadPoints"),
                _number(work, "loadPoints"),
                _number(ttft, "loadPoints"),
                math.nan if itl is None else _number(itl, "loadPoints"),
                replicas,
                math.nan if per_request is None else _number(per_request, "loadPoints"),
            )
        )
    return tuple(points)


def _knob_values(raw: object) -> tuple[int | None, int | None]:
    if raw is None:
        return (None, None)
    batch, chunk = _rows([raw], "pointsKnobs", 2)[0]
    for value in (batch, chunk):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError(f"pointsKnobs holds {value!r}")
    return (batch, chunk)  # type: ignore[return-value]


def memory_from_status(raw: object) -> tuple[PolicyMemory, str | None]:
    """The memory kept in status, or a fresh one and why the kept one was not usable."""
    if raw is None or raw == {}:
        return PolicyMemory(), None
    try:
        if not isinstance(raw, Mapping):
            raise ValueError("not an object")
        if raw.get("format") != MEMORY_FORMAT:
            raise ValueError(f"format {raw.get('format')!r}, expected {MEMORY_FORMAT}")
        capacity = _optional_time(raw, "capacity")
        forecast = raw.get("forecast")
        error = _optional_time(raw, "forecastError")
        return (
            PolicyMemory(
                last_scale_up_at=_optional_time(raw, "lastScaleUpAt"),
                last_scale_down_at=_optional_time(raw, "lastScaleDownAt"),
                last_knob_change_at=_optional_time(raw, "lastKnobChangeAt"),
                first_seen_at=_optional_time(raw, "firstSeenAt"),
                gpu_limit=_optional_count(raw, "gpuLimit"),
                gpu_limit_at=_optional_time(raw, "gpuLimitAt"),
                replicas_backoff_until=_optional_time(raw, "replicasBackoffUntil"),
                replicas_backoff_s=_optional_time(raw, "replicasBackoffS"),
                replicas_overwrite_seen_at=_optional_time(raw, "replicasOverwriteSeenAt"),
                recommendations=tuple(
                    Recommendation(at, int(n))
                    for at, n in _pairs(raw.get("recommendations", []), "recommendations")
                ),
                batch_points=tuple(_pairs(raw.get("batchPoints", []), "batchPoints")),
                load_points=_load_points(raw.get("loadPoints", [])),
                points_knobs=_knob_values(raw.get("pointsKnobs")),
                capacity=capacity if capacity is not None and capacity > 0 else None,
                capacity_history=tuple(
                    (t, c)
                    for t, c in _pairs(raw.get("capacityHistory", []), "capacityHistory")
                    if c > 0
                ),
                load_history=tuple(_pairs(raw.get("loadHistory", []), "loadHistory")),
                forecast=None if forecast is None else _pairs([forecast], "forecast")[0],
                forecast_error=min(max(error or 0.0, 0.0), 1.0),
                startup_s=_optional_time(raw, "startupS"),
                startup_for=_optional_time(raw, "startupFor"),
                unsettled_at=_optional_time(raw, "unsettledAt"),
            ),
            None,
        )
    except (ValueError, TypeError) as error:
        return PolicyMemory(), f"status.memory was not usable ({error}); starting afresh"
