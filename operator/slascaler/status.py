"""The InferenceSLA's status as data: built from a decision, and the policy memory kept in it.

- `evaluated_status` turns one evaluation (the decision, the Deployment as it is after the
  action, the observation) into the `status` object the CRD describes: regime, observed
  figures, recommendation, conditions (a condition's `lastTransitionTime` only moves when its
  status does), notes, and the policy memory.
- `memory_to_status` / `memory_from_status` round-trip `PolicyMemory` through JSON; a memory
  that cannot be read (edited by hand, an older format) gives a fresh memory and a note,
  never an exception, so a restarted operator resumes where it stopped and never crashes.
- `PendingAction` is an action announced in the status before it is written to the
  Deployment (write-ahead): if the operator stops between the two, the next evaluation
  compares the Deployment with it (`PendingAction.landed`) and records it as done, with its
  Event, or as never made — so the status always says what was written.
- `choose_event` decides which Event, if any, an evaluation posts.
- `bid_to_status` / `bid_from_status`: what the policy wants and what a replica is worth to
  it (`status.bid`), which a shared GPU pool's coordinator reads to arbitrate; and
  `pool_to_status`: the grant the evaluation applied (`status.pool`).

Pure (no I/O; the time is an argument, already formatted as Kubernetes writes it). Called by
`reconcile`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from slascaler.model.latency import LoadPoint, ReplicaWorth
from slascaler.model.observation import Observation
from slascaler.policy import Change, Condition, Decision, FleetState, PolicyMemory, Reason
from slascaler.policy.decision import Status
from slascaler.policy.pool import PoolGrant
from slascaler.policy.state import Recommendation
from slascaler.spec import SLASpec

MEMORY_FORMAT = 2


def _finite(value: float | None, digits: int = 1) -> float | None:
    """`value` rounded; None when there is no finite value to report."""
    return round(value, digits) if value is not None and math.isfinite(value) else None


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
            ]
            for p in memory.load_points
        ],
        "pointsKnobs": list(memory.points_knobs),
        "capacity": _finite(memory.capacity, 1),
        "loadHistory": [[round(t, 2), round(w, 1)] for t, w in memory.load_history],
        "forecast": [round(v, 2) for v in memory.forecast] if memory.forecast else None,
        "forecastError": round(memory.forecast_error, 4),
        "startupS": _finite(memory.startup_s, 2),
        "startupFor": _finite(memory.startup_for, 2),
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


def _number(item: object, key: str) -> float:
    if isinstance(item, bool) or not isinstance(item, int | float) or not math.isfinite(item):
        raise ValueError(f"{key} holds {item!r}")
    return float(item)


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
    for at, work, ttft, itl, replicas in _rows(raw, "loadPoints", 5):
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
            raise ValueError(f"loadPoints holds {replicas!r} replicas")
        points.append(
            LoadPoint(
                _number(at, "loadPoints"),
                _number(work, "loadPoints"),
                _number(ttft, "loadPoints"),
                math.nan if itl is None else _number(itl, "loadPoints"),
                replicas,
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
                load_history=tuple(_pairs(raw.get("loadHistory", []), "loadHistory")),
                forecast=None if forecast is None else _pairs([forecast], "forecast")[0],
                forecast_error=min(max(error or 0.0, 0.0), 1.0),
                startup_s=_optional_time(raw, "startupS"),
                startup_for=_optional_time(raw, "startupFor"),
            ),
            None,
        )
    except (ValueError, TypeError) as error:
        return PolicyMemory(), f"status.memory was not usable ({error}); starting afresh"


def merge_conditions(
    previous: object, current: Sequence[Condition], now: str, generation: int
) -> list[dict[str, Any]]:
    """Conditions for the status; a condition keeps its transition time while unchanged."""
    before: dict[str, Mapping[str, Any]] = {}
    if isinstance(previous, Sequence):
        for item in previous:
            if isinstance(item, Mapping) and isinstance(item.get("type"), str):
                before[item["type"]] = item
    out = []
    for condition in current:
        old = before.get(condition.type)
        changed = old is None or old.get("status") != str(condition.status)
        out.append(
            {
                "type": condition.type,
                "status": str(condition.status),
                "reason": condition.reason,
                "message": condition.message,
                "lastTransitionTime": now
                if changed or not isinstance(old, Mapping) or "lastTransitionTime" not in old
                else old["lastTransitionTime"],
                "observedGeneration": generation,
            }
        )
    return out


def ttft_summary(decision: Decision, spec: SLASpec) -> str:
    analysis = decision.analysis
    p = f"p{spec.ttft.percentile:g}"
    if analysis is None or not math.isfinite(analysis.ttft_ms):
        return f"{p} - / {spec.ttft.threshold_ms:g}ms"
    return f"{p} {analysis.ttft_ms:.0f}ms / {spec.ttft.threshold_ms:g}ms"


def observed(
    decision: Decision,
    observation: Observation | None,
    spec: SLASpec,
    service_rate: float | None = None,
) -> dict[str, Any]:
    if observation is None:
        return {}
    out: dict[str, Any] = {"window": f"{observation.window_s:g}s"}
    analysis = decision.analysis
    if analysis is not None:
        quantiles = {k: _finite(v) for k, v in analysis.ttft_quantiles_ms.items()}
        quantiles[f"p{spec.ttft.percentile:g}"] = _finite(analysis.ttft_ms)
        out.update(
            requests=_finite(analysis.requests),
            ttftMs={k: v for k, v in quantiles.items() if v is not None},
            withoutQueueMs=_finite(analysis.without_queue_ms),
            itlMs=_finite(analysis.itl_ms),
            queueShare=_finite(analysis.queue_share, 3),
            componentMeansMs={
                k: v
                for k, v in ((k, _finite(v)) for k, v in analysis.component_means_ms.items())
                if v is not None
            },
        )
    out.update(
        requestRate=_finite(observation.request_rate, 3),
        waiting=_finite(observation.waiting, 2),
        running=_finite(observation.running, 2),
        pods=observation.reporting_pods,
        serviceRatePerReplica=_finite(service_rate, 3) if service_rate else None,
    )
    return {k: v for k, v in out.items() if v is not None}


def recommendation(decision: Decision) -> dict[str, Any]:
    out: dict[str, Any] = {
        "replicas": decision.replicas,
        "reasonCode": decision.reason_code,
        "reason": decision.reason,
    }
    if decision.max_batch_size is not None:
        out["maxBatchSize"] = decision.max_batch_size
    if decision.chunk_size is not None:
        out["chunkSize"] = decision.chunk_size
    return out


def engine_flags(fleet: FleetState, acted: Sequence[Change] = ()) -> dict[str, int]:
    """The engine flags the Deployment carries, after the changes just made to it."""
    flags = {}
    if fleet.max_batch_size is not None:
        flags["maxBatchSize"] = fleet.max_batch_size
    if fleet.chunk_size is not None:
        flags["chunkSize"] = fleet.chunk_size
    for change in acted:
        if change.knob != "replicas":
            flags[change.knob] = change.new
    return flags


KNOB_FIELDS = ("maxBatchSize", "chunkSize")


def changes_text(changes: Sequence[Change]) -> str:
    return ", ".join(str(c) for c in changes)


def action_message(decision: Decision) -> str:
    """The changes, then the reason without repeating them."""
    parts = decision.reason.split("; ")
    for change in decision.changes:
        parts = [p.removeprefix(f"{change}: ") for p in parts]
    return f"{changes_text(decision.changes)}: {'; '.join(parts)}"


@dataclass(frozen=True)
class PendingAction:
    """An action announced before it is written: what the Deployment should then carry."""

    time: str
    change: str
    reason_code: str
    reason: str
    message: str
    target: Mapping[str, int]  # replicas / maxBatchSize / chunkSize after the action
    memory: PolicyMemory  # the policy's memory once the action is made

    @classmethod
    def of(cls, decision: Decision, time: str) -> PendingAction:
        return cls(
            time=time,
            change=changes_text(decision.changes),
            reason_code=decision.reason_code,
            reason=decision.reason,
            message=action_message(decision),
            target={c.knob: c.new for c in decision.changes},
            memory=decision.memory_if_applied,
        )

    @property
    def key(self) -> str:
        """What identifies this action (its Event's name is derived from it)."""
        return f"{self.time}|{self.change}"

    def last_action(self) -> dict[str, Any]:
        return {
            "time": self.time,
            "change": self.change,
            "reasonCode": self.reason_code,
            "reason": self.reason,
        }

    def to_status(self) -> dict[str, Any]:
        return {
            **self.last_action(),
            "message": self.message,
            "target": dict(self.target),
            "memory": memory_to_status(self.memory),
        }

    @classmethod
    def from_status(cls, raw: object) -> PendingAction | None:
        """The pending action kept in status; None when there is none or it is unreadable."""
        if not isinstance(raw, Mapping):
            return None
        target = raw.get("target")
        memory, problem = memory_from_status(raw.get("memory"))
        texts = [raw.get(k) for k in ("time", "change", "reasonCode", "reason", "message")]
        if (
            problem is not None
            or not isinstance(target, Mapping)
            or not all(isinstance(t, str) for t in texts)
            or not all(
                k in ("replicas", *KNOB_FIELDS) and isinstance(v, int) and not isinstance(v, bool)
                for k, v in target.items()
            )
        ):
            return None
        time, change, code, reason, message = (str(t) for t in texts)
        return cls(time, change, code, reason, message, dict(target), memory)

    def landed(self, fleet: FleetState) -> bool:
        """True when the Deployment carries every value the action was to write."""
        have = {
            "replicas": fleet.spec_replicas,
            "maxBatchSize": fleet.max_batch_size,
            "chunkSize": fleet.chunk_size,
        }
        return all(have.get(knob) == value for knob, value in self.target.items())


# Holds whose reason is a Conflict condition: its Warning Event (posted when the condition
# turns True or changes reason) says it, with the fix, so no second Event is posted.
CONFLICT_HOLDS = frozenset({"HoldConflict", "HoldReplicasOverwritten"})


def choose_event(
    decision: Decision,
    previous_recommendation: object,
    acted: bool,
    auto: bool,
    hold: tuple[Reason, str, bool] | None,
    why_not_auto: str,
) -> tuple[str, str, str] | None:
    """(type, reason, message) of the Event this evaluation posts, or None.

    One per action; one whenever the reason for holding or recommending changes (a steady
    hold is one Event, not one per interval); none for the holds that only pace an earlier
    action (cooldowns, pods starting, a rollout), nor for conflicts (their condition's
    Warning Event, `conflict_event`, says them).
    """
    before = previous_recommendation if isinstance(previous_recommendation, Mapping) else {}
    if decision.reason_code in CONFLICT_HOLDS:
        return None  # the Warning Event of the Conflict condition says it (reconcile)
    if acted:
        return ("Normal", decision.reason_code, action_message(decision))
    if decision.acts and auto:
        if hold is None:
            return None
        code, reason, failed = hold
        return ("Warning" if failed else "Normal", code, reason)
    if decision.acts:
        message = f"would change {changes_text(decision.changes)} ({why_not_auto}): " + (
            decision.reason
        )
        if _target_of(before) != _target_of(recommendation(decision)):
            return ("Normal", f"Recommend{decision.reason_code}", message)
        return None
    if (
        decision.reason_code != "NoChange"
        and not decision.pacing
        and before.get("reasonCode") != decision.reason_code
    ):
        return ("Normal", decision.reason_code, decision.reason)
    return None


def conflict_event(previous_conditions: object, decision: Decision) -> tuple[str, str, str] | None:
    """The Warning Event (type, reason, message) when the Conflict condition turns True or
    changes its reason; None while it stays as it was (a steady conflict is one Event)."""
    condition = decision.condition("Conflict")
    if condition is None or condition.status is not Status.TRUE:
        return None
    before: Mapping[str, Any] = {}
    if isinstance(previous_conditions, Sequence):
        before = next(
            (
                c
                for c in previous_conditions
                if isinstance(c, Mapping) and c.get("type") == "Conflict"
            ),
            {},
        )
    if before.get("status") == "True" and before.get("reason") == condition.reason:
        return None
    return ("Warning", condition.reason, condition.message)


def _target_of(recommended: Mapping[str, Any]) -> tuple[object, ...]:
    """What a recommendation asks for, without its (ever-changing) wording."""
    keys = ("replicas", "maxBatchSize", "chunkSize", "reasonCode")
    return tuple(recommended.get(k) for k in keys)


def _ms(value: float) -> float | None:
    return round(value, 1) if math.isfinite(value) else None


def bid_to_status(decision: Decision, replicas: int) -> dict[str, Any] | None:
    """`status.bid`: the replicas the load calls for, what the SLA's own rules keep, and the
    latency model's worth of a replica (None when the window gave no count to bid)."""
    if decision.wanted_replicas is None:
        return None
    held = decision.held_replicas if decision.held_replicas is not None else replicas
    out: dict[str, Any] = {
        "replicas": replicas,
        "wanted": decision.wanted_replicas,
        "held": max(held, decision.wanted_replicas),
    }
    worth = decision.worth
    if worth is not None:
        fewer, now, more = worth.around(replicas)
        out["ttftMs"] = {
            k: v for k, v in (("fewer", _ms(fewer)), ("current", _ms(now)), ("more", _ms(more)))
            if v is not None
        }  # fmt: skip
        out["worth"] = {
            "workTokensPerS": round(worth.work, 1),
            "capacityTokensPerS": round(worth.capacity, 1),
            "floorMs": round(worth.floor_ms, 2),
            "slopeMs": round(worth.slope_ms, 2),
            "objectiveMs": worth.objective_ms,
        }
    return out


@dataclass(frozen=True)
class Bid:
    """A member's bid as its status keeps it."""

    wanted: int
    held: int
    worth: ReplicaWorth | None


def bid_from_status(raw: object) -> Bid | None:
    """The bid kept in an InferenceSLA's status; None when absent or unreadable."""
    if not isinstance(raw, Mapping):
        return None
    wanted, held = raw.get("wanted"), raw.get("held", raw.get("wanted"))
    for value in (wanted, held):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            return None
    assert isinstance(wanted, int) and isinstance(held, int)
    worth = None
    curve = raw.get("worth")
    if isinstance(curve, Mapping):
        try:
            numbers = [
                _number(curve.get(k), k)
                for k in ("workTokensPerS", "capacityTokensPerS", "floorMs", "slopeMs",
                          "objectiveMs")
            ]  # fmt: skip
        except ValueError:
            numbers = []
        if numbers and numbers[1] > 0 and numbers[4] > 0:
            worth = ReplicaWorth(*numbers)
    return Bid(wanted, max(held, wanted), worth)


def pool_to_status(grant: PoolGrant | None) -> dict[str, Any] | None:
    """`status.pool`: the pool's grant this evaluation applied (None outside any pool)."""
    if grant is None:
        return None
    out: dict[str, Any] = {
        "name": grant.pool,
        "granted": grant.granted,
        "allowed": grant.allowed,
        "applied": grant.acting,
    }
    if grant.message:
        out["message"] = grant.message
    if grant.preempted_by:
        out["preemptedBy"] = list(grant.preempted_by)
    return out
