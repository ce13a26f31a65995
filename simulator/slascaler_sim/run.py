"""Closed-loop runs in virtual time: a workload, a fleet, an autoscaler, and what came of it.

Every run puts the fleet behind a Deployment of the in-memory cluster (`sim.cluster`).
slascaler is the operator's own `Reconciler` (`OperatorController`): it reads the
Deployment and its pods through `KubeAPI`, observes through the simulator's `MetricSource`,
decides, writes the status, posts Events and patches the Deployment, exactly as in a real
cluster; the fleet then follows the Deployment (scaling, rolling updates). The baselines
read the fleet's observation and scale it, as an external autoscaler scales a Deployment.
`simulate` advances the fleet tick by tick, calls the controller every period, and returns a
`RunResult` with the per-request outcomes, a timeline and the figures the benchmarks compare:
SLA attainment per 1-minute window (`judge_windows`: the TTFT percentile of the requests that
arrived in it, and where the SLA has an ITL objective, the ITL percentile of the tokens emitted
in it, as Prometheus reads the engines' histogram: a window meets the SLA when both meet their
objectives), TTFT and ITL percentiles over the run, GPU-hours, replica changes and rolling
restarts.

Called by the demo, the benchmarks and the oracle.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from slascaler.engines import ENGINES
from slascaler.model.regime import Regime
from slascaler.policy import Tunables
from slascaler.policy.decide import DEFAULT_TUNABLES
from slascaler.reconcile import Evaluation, GrantSource, Reconciler
from slascaler.spec import Engine
from slascaler.telemetry import Telemetry
from slascaler_sim.cluster import SimCluster, SimDeployment
from slascaler_sim.engine import Request
from slascaler_sim.fleet import EngineSettings, Fleet
from slascaler_sim.profiles import CostProfile
from slascaler_sim.recorder import HistogramCounts
from slascaler_sim.source import SimulatedSource

TICK_S = 5.0
WINDOW_S = 60.0  # SLA attainment is judged per 1-minute window of arrivals
UNSERVED_MS = 1e15  # stands for "never served" inside percentile arithmetic
# A percentile this high was interpolated towards an unserved request: it is +inf.
REACHES_UNSERVED_MS = UNSERVED_MS / 1000
ITL_HISTOGRAM = "vllm:inter_token_latency_seconds"
NAMESPACE = "bench"
DEPLOYMENT = "llm"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"


class Controller(Protocol):
    name: str
    period_s: float

    def control(self, fleet: Fleet, now: float) -> None: ...


@runtime_checkable
class ClusterController(Protocol):
    """A controller that works through the cluster's API, bound to the run's Deployment."""

    def bind(self, cluster: SimCluster, deployment: SimDeployment) -> None: ...


def engine_args(engine: Engine, settings: EngineSettings) -> tuple[str, ...]:
    """A Deployment's container args for an engine started with `settings`."""
    flavour = ENGINES[engine]
    return (
        "--model", MODEL,
        flavour.max_batch_flag, str(settings.max_num_seqs),
        flavour.chunk_flag, str(settings.max_num_batched_tokens),
    )  # fmt: skip


@dataclass
class OperatorController:
    """slascaler in the loop: the operator's `Reconciler` on an InferenceSLA of the cluster."""

    spec: Mapping[str, Any]  # the InferenceSLA's spec, as a user writes it
    period_s: float = 15.0
    name: str = "slascaler"
    tunables: Tunables = DEFAULT_TUNABLES
    labels: Mapping[str, str] = field(default_factory=dict)  # the InferenceSLA's labels
    pools: GrantSource | None = None  # a shared GPU pool's coordinator, if any
    last: Evaluation | None = None
    evaluations: int = 0
    _reconciler: Reconciler | None = field(default=None, repr=False)
    _cluster: SimCluster | None = field(default=None, repr=False)

    def bind(self, cluster: SimCluster, deployment: SimDeployment) -> None:
        spec = {**self.spec, "targetRef": {**self.spec.get("targetRef", {}),
                                           "name": deployment.name}}  # fmt: skip
        fleet = deployment.fleet
        cluster.clock = lambda: fleet.now  # the cluster's times (managedFields) on the run's clock
        cluster.add_inference_sla(deployment.namespace, deployment.name, spec, self.labels)
        self._cluster = cluster
        self._reconciler = Reconciler(
            cluster,
            SimulatedSource(cluster),
            Telemetry(),
            clock=lambda: fleet.now,
            tunables=self.tunables,
            pools=self.pools,
        )
        self._key = (deployment.namespace, deployment.name)

    def control(self, fleet: Fleet, now: float) -> None:
        if self._reconciler is None or self._cluster is None:
            raise RuntimeError("OperatorController.bind was not called")
        sla = self._cluster.get_inference_sla(*self._key)
        self.last = self._reconciler.reconcile(sla)
        self.evaluations += 1


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
    failed_requests: int = 0  # refused by the engines (over the context limit), never served
    # (window start, ITL percentile ms) per judged 1-minute window in which tokens were emitted
    itl_windows: list[tuple[float, float]] = field(default_factory=list)
    itl_threshold_ms: float | None = None  # the ITL objective (None: the SLA has none)

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
        """(window start, TTFT percentile) per judged 1-minute window of arrivals.

        A window holding a request that was never served has that request's TTFT infinite:
        its percentile is +inf when the percentile reaches it (a missed window), never NaN.
        Windows before `skip_s` (the first start-up) are not judged.
        """
        ttft = self.client_ttft_ms()
        arrivals = np.asarray([r.arrival for r in self.requests])
        out: list[tuple[float, float]] = []
        if arrivals.size == 0:
            return out
        finite = np.where(np.isfinite(ttft), ttft, UNSERVED_MS)
        for start in np.arange(self.skip_s, arrivals.max() + 1e-9, WINDOW_S):
            mask = (arrivals >= start) & (arrivals < start + WINDOW_S)
            if mask.any():
                value = float(np.percentile(finite[mask], self.percentile))
                out.append((float(start), math.inf if value >= REACHES_UNSERVED_MS else value))
        return out

    def window_verdicts(self) -> list[tuple[float, bool]]:
        """(window start, whether it met the SLA) per judged window (`judge_windows`)."""
        return judge_windows(
            self.window_p95(), self.itl_windows, self.threshold_ms, self.itl_threshold_ms
        )

    @property
    def attainment(self) -> float | None:
        """Share of judged windows meeting the SLA; None when no window was judged."""
        return share_met(self.window_verdicts())

    def ttft_percentiles(self) -> tuple[float, float, float]:
        ttft = self.client_ttft_ms()
        if ttft.size == 0:
            return math.nan, math.nan, math.nan
        finite = np.where(np.isfinite(ttft), ttft, UNSERVED_MS)
        values = [float(v) for v in np.percentile(finite, [50, 95, 99])]
        p50, p95, p99 = (math.inf if v >= REACHES_UNSERVED_MS else v for v in values)
        return p50, p95, p99


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
    cluster: SimCluster | None = None,
    router: str = "least-outstanding",
    itl_threshold_ms: float | None = None,
) -> RunResult:
    """Run `requests` through a fleet under `controller` for `duration_s` virtual seconds.

    The fleet runs a Deployment of `cluster` (a new in-memory cluster if none is given; pass
    one to look at its objects, Events and calls afterwards).
    """
    fleet = Fleet(
        profile, replicas, settings, startup_s=startup_s, gpu_limit=gpu_limit, router=router
    )
    cluster = cluster if cluster is not None else SimCluster()
    deployment = cluster.add_deployment(
        NAMESPACE, DEPLOYMENT, fleet, args=engine_args(Engine.VLLM, settings)
    )
    if isinstance(controller, ClusterController):
        controller.bind(cluster, deployment)
    fleet.feed(requests)
    timeline: list[Sample] = []
    gpu_seconds = 0.0
    changes = 0
    next_control = 0.0
    itl_marks = ItlMarks(startup_s)
    now = 0.0
    while now <= duration_s:
        fleet.run_until(now)
        fleet.snapshot()
        itl_marks.observe(now, fleet)
        if now >= next_control:
            before = fleet.desired
            controller.control(fleet, now)
            changes += fleet.desired != before
            next_control += controller.period_s
        last = getattr(controller, "last", None)
        decision = last.decision if isinstance(last, Evaluation) else None
        regime = decision.regime if decision is not None else Regime.UNKNOWN
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
        failed_requests=fleet.failed_requests,
        itl_windows=itl_marks.percentiles(percentile),
        itl_threshold_ms=itl_threshold_ms,
    )


class ItlMarks:
    """The fleet's cumulative ITL histogram at the start of each judged 1-minute window, as
    Prometheus would read it at the boundaries; `percentiles` gives each window's ITL
    percentile (`window_percentiles`). Fed once per tick by the simulation loops (`simulate`,
    the pool benchmark's `run_arrangement`)."""

    def __init__(self, first_window_s: float) -> None:
        self.first_window_s = first_window_s
        self.marks: list[tuple[float, HistogramCounts]] = []

    def observe(self, now: float, fleet: Fleet) -> None:
        """Mark the histogram if `now` reached the next window's start."""
        boundary = self.first_window_s + WINDOW_S * len(self.marks)
        if now + 1e-9 >= boundary:
            self.marks.append((boundary, fleet.totals().histograms[ITL_HISTOGRAM].copy()))

    def percentiles(self, percentile: float) -> list[tuple[float, float]]:
        return window_percentiles(self.marks, percentile)


def judge_windows(
    ttft_windows: Sequence[tuple[float, float]],
    itl_windows: Sequence[tuple[float, float]],
    threshold_ms: float,
    itl_threshold_ms: float | None,
) -> list[tuple[float, bool]]:
    """(window start, met) per window of arrivals: its TTFT percentile within `threshold_ms`
    and, with an ITL objective, the ITL percentile of the tokens emitted in the same minute
    within `itl_threshold_ms` (a minute that emitted none has nothing to miss)."""
    itl = {round(start, 3): p for start, p in itl_windows}
    return [
        (start, p <= threshold_ms and itl_meets(itl.get(round(start, 3), math.nan),
                                                 itl_threshold_ms))
        for start, p in ttft_windows
    ]  # fmt: skip


def share_met(verdicts: Sequence[tuple[float, bool]]) -> float | None:
    """Share of the (window start, met) verdicts that met the SLA; None when there are none."""
    if not verdicts:
        return None
    return sum(1 for _, met in verdicts if met) / len(verdicts)


def itl_meets(itl_ms: float, itl_threshold_ms: float | None) -> bool:
    """A window's ITL percentile meets the ITL objective: there is none, the window emitted
    no token (NaN: nothing to miss), or it is within the threshold."""
    return itl_threshold_ms is None or math.isnan(itl_ms) or itl_ms <= itl_threshold_ms


def window_percentiles(
    marks: Sequence[tuple[float, HistogramCounts]], percentile: float
) -> list[tuple[float, float]]:
    """(window start, percentile in ms) of what a cumulative histogram (in seconds) gained
    between consecutive marks; windows that gained nothing are left out (no token was
    emitted: nothing to judge)."""
    out: list[tuple[float, float]] = []
    for (start, earlier), (_, later) in itertools.pairwise(marks):
        gained = later.minus(earlier)
        if gained.observations > 0:
            out.append((start, gained.to_histogram(1000.0).quantile(percentile / 100.0)))
    return out


def _unfinished(fleet: Fleet) -> list[Request]:
    pending = list(fleet.backlog)
    for replica in fleet.replicas:
        pending.extend(replica.waiting)
        pending.extend(replica.running)
    return [r for r in pending if r.done_at is None]
