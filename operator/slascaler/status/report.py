"""The figures of one evaluation as the status shows them, and its conditions.

`merge_conditions` keeps a condition's `lastTransitionTime` while its status is unchanged;
`ttft_summary`, `observed`, `recommendation` and `engine_flags` turn a decision, its
observation and the Deployment's flags into the status's `ttft`, `observed`,
`recommendation` and `engineFlags`. Pure. Called by `reconcile`, by `pools` and `pool_spec`
(a GPUPool's conditions) and by the events of `status.events`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from slascaler.model.observation import Observation
from slascaler.policy import Change, Condition, Decision, FleetState
from slascaler.spec import SLASpec
from slascaler.status.values import finite as _finite


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
    # The window read: the spec's, or the seconds a fleet younger than it has served.
    out: dict[str, Any] = {"window": f"{round(observation.window_s, 1):g}s"}
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
    if decision.replicas_for_collisions is not None:
        out["replicasForCollisions"] = decision.replicas_for_collisions
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
