"""Closed-loop runs in virtual time: a workload, a fleet, an autoscaler, and what came of it.

`SlascalerController` drives the real policy (`slascaler.policy.decide`) with the fleet's
virtual-time `Observation`, exactly the data the Prometheus source will give it, and applies
its decisions as the actuation layer will (scale, then a rolling update for knob changes).
`simulate` advances the fleet tick by tick, calls the controller every period, and returns a
`RunResult` with the per-request outcomes, a timeline and the figures the benchmarks compare:
TTFT SLA attainment per 1-minute window, TTFT and ITL percentiles, GPU-hours, replica changes
and rolling restarts.

Called by the demo, the benchmarks and the oracle.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from slascaler.model.regime import Regime
from slascaler.policy import Decision, FleetState, PolicyMemory, PolicyState, decide
from slascaler.policy.state import DEFAULT_MAX_UNAVAILABLE, resolve_max_unavailable
from slascaler.spec import SLASpec
from slascaler_sim.engine import Request
from slascaler_sim.fleet import EngineSettings, Fleet
from slascaler_sim.profiles import CostProfile

TICK_S = 5.0
WINDOW_S = 60.0  # SLA attainment is judged per 1-minute window of arrivals


class Controller(Protocol):
    name: str
    period_s: float

    def control(self, fleet: Fleet, now: float) -> None: ...


@dataclass
class SlascalerController:
    """The slascaler policy in the loop, with its memory carried as the operator carries it."""

    spec: SLASpec
    period_s: float = 15.0
    name: str = "slascaler"
    memory: PolicyMemory = field(default_factory=PolicyMemory)
    last: Decision | None = None

    def control(self, fleet: Fleet, now: float) -> None:
        state = FleetState(
            spec_replicas=fleet.desired,
            ready_replicas=fleet.ready_replicas,
            unschedulable_pods=fleet.unschedulable,
            max_batch_size=fleet.settings.max_num_seqs,
            chunk_size=fleet.settings.max_num_batched_tokens,
            rollout_in_progress=fleet.rollout_in_progress,
            max_unavailable=resolve_max_unavailable(DEFAULT_MAX_UNAVAILABLE, fleet.desired),
        )
        decision = decide(
            self.spec, fleet.observation(self.spec.window_s), PolicyState(state, self.memory), now
        )
        if decision.replicas != fleet.desired:
            fleet.scale(decision.replicas)
        knobs = EngineSettings(
            decision.max_batch_size or fleet.settings.max_num_seqs,
            decision.chunk_size or fleet.settings.max_num_batched_tokens,
        )
        if knobs != fleet.settings:
            fleet.reconfigure(knobs)
        self.memory = decision.memory_if_applied
        self.last = decision


@dataclass(frozen=True)
class Sample:
    at: float
    gpus: int
    ready: int
    desired: int
    regime: str


@dataclass
class RunResult:
    name: str
    requests: Sequence[Request]
    timeline: list[Sample]
    gpu_hours: float
    replica_changes: int
    rolling_restarts: int
    itl_p95_ms: float
    threshold_ms: float
    percentile: float
    skip_s: float  # windows before this (the first start-up) are not judged
    frontend_ms: float

    def client_ttft_ms(self) -> np.ndarray:
        """Arrival at the router to first token (+ frontend), inf for never served."""
        return np.asarray(
            [
                (r.first_token_at - r.arrival) * 1000 + self.frontend_ms
                if r.first_token_at is not None
                else math.inf
                for r in self.requests
            ]
        )

    def window_p95(self) -> list[tuple[float, float]]:
        """(window start, TTFT percentile) per 1-minute window of arrivals, judged windows only."""
        ttft = self.client_ttft_ms()
        arrivals = np.asarray([r.arrival for r in self.requests])
        out: list[tuple[float, float]] = []
        if arrivals.size == 0:
            return out
        for start in np.arange(self.skip_s, arrivals.max() + 1e-9, WINDOW_S):
            mask = (arrivals >= start) & (arrivals < start + WINDOW_S)
            if mask.any():
                out.append((float(start), float(np.percentile(ttft[mask], self.percentile))))
        return out

    @property
    def attainment(self) -> float:
        windows = self.window_p95()
        if not windows:
            return 1.0
        return sum(1 for _, p in windows if p <= self.threshold_ms) / len(windows)

    def ttft_percentiles(self) -> tuple[float, float, float]:
        ttft = self.client_ttft_ms()
        p50, p95, p99 = np.percentile(ttft, [50, 95, 99])
        return float(p50), float(p95), float(p99)


def simulate(
    requests: Sequence[Request],
    controller: Controller,
    profile: CostProfile,
    settings: EngineSettings,
    replicas: int,
    startup_s: float,
    duration_s: float,
    threshold_ms: float,
    percentile: float = 95.0,
    gpu_limit: int | None = None,
    on_tick: Callable[[float], None] | None = None,
) -> RunResult:
    """Run `requests` through a fleet under `controller` for `duration_s` virtual seconds."""
    fleet = Fleet(profile, replicas, settings, startup_s=startup_s, gpu_limit=gpu_limit)
    fleet.feed(requests)
    timeline: list[Sample] = []
    gpu_seconds = 0.0
    changes = 0
    next_control = 0.0
    now = 0.0
    while now <= duration_s:
        fleet.run_until(now)
        fleet.snapshot()
        if now >= next_control:
            before = fleet.desired
            controller.control(fleet, now)
            changes += fleet.desired != before
            next_control += controller.period_s
        last = getattr(controller, "last", None)
        regime = last.regime if isinstance(last, Decision) else Regime.UNKNOWN
        timeline.append(
            Sample(
                now,
                fleet.gpus_in_use,
                fleet.ready_replicas,
                fleet.desired,
                str(regime),
            )
        )
        gpu_seconds += fleet.gpus_in_use * TICK_S
        if on_tick is not None:
            on_tick(now)
        now += TICK_S
    fleet.run_until(duration_s + 900.0)  # let what arrived finish; not counted in GPU-hours
    itl = fleet.totals().histograms["vllm:inter_token_latency_seconds"].to_histogram(1000.0)
    return RunResult(
        name=controller.name,
        requests=[*fleet.finished, *_unfinished(fleet)],
        timeline=timeline,
        gpu_hours=gpu_seconds / 3600.0,
        replica_changes=changes,
        rolling_restarts=fleet.rolling_restarts,
        itl_p95_ms=itl.quantile(0.95),
        threshold_ms=threshold_ms,
        percentile=percentile,
        skip_s=startup_s,
        frontend_ms=profile.frontend_ms,
    )


def _unfinished(fleet: Fleet) -> list[Request]:
    pending = list(fleet.backlog)
    for replica in fleet.replicas:
        pending.extend(replica.waiting)
        pending.extend(replica.running)
    return [r for r in pending if r.done_at is None]
