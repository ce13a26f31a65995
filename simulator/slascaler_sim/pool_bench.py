"""The shared-GPU-pool benchmark: several models on one set of GPUs whose peaks collide.

A `PoolScenario` is a few models (each a workload, a cost profile, an SLA and a priority)
served by Deployments of one in-memory cluster whose GPUs they share (`fleet.SharedGPUs`: a
pod asked for beyond the free GPUs stays Pending until some are freed, oldest first, as
the scheduler does). The same scenario runs under each arrangement, always on the same
number of GPUs:

- **slascaler + GPUPool**: the operator's own Reconciler per InferenceSLA and the pool
  coordinator (`slascaler.pools`) arbitrating one GPUPool whose limit is the GPUs;
- **slascaler + GPUPool, priority-blind**: the same with every priority 0, so the budget goes
  by predicted gain alone (what a limiter that hands GPUs out by need does);
- **slascaler per SLA**: the operator without a pool: each SLA scales on its own and the
  GPUs go to whoever asks first (Pending pods, the GPU-exhaustion memory);
- **KEDA on TTFT per SLA**: the KEDA-on-TTFT baseline (`baselines.hpa`) on each Deployment.

Per model the run gives SLA attainment (the share of judged 1-minute windows whose TTFT
percentile meets its objective and whose ITL percentile meets its own where the model has
one, as `sim.run` judges); per arrangement the priority-weighted
attainment (Σ priority × attainment / Σ priority) and the pool's GPU utilisation (GPU-hours
held / (GPUs × hours)).

`collision_scenario` is the scenario of the benchmark: three models on 16 A100s — a chat
model (priority 30) whose load quintuples for 20 minutes, a code assistant (20) whose load
doubles, and a batch summarizer (10, a loose objective) that scales up first — whose peaks
overlap between minutes 20 and 30.

Called by `slascaler bench --pools`; `sim.report.pool_table` writes the table.
"""

from __future__ import annotations

import math
import multiprocessing
import random
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from slascaler.pools import PoolCoordinator
from slascaler.spec import Engine
from slascaler_sim.baselines.hpa import HPAController
from slascaler_sim.cluster import SimCluster
from slascaler_sim.engine import Request
from slascaler_sim.fleet import EngineSettings, Fleet, SharedGPUs
from slascaler_sim.profiles import PROFILES, CostProfile
from slascaler_sim.run import (
    NAMESPACE,
    TICK_S,
    ClusterController,
    Controller,
    ItlMarks,
    OperatorController,
    RunResult,
    Sample,
    engine_args,
    judge_windows,
    share_met,
)
from slascaler_sim.suite import DEFAULT_SETTINGS, heavy_tailed_prompts
from slascaler_sim.workload import load_trace, modulated_poisson

POOLED = "slascaler + GPUPool"
BLIND = "slascaler + GPUPool, priority-blind"
PER_SLA = "slascaler per SLA"
KEDA = "KEDA on TTFT per SLA"
ARRANGEMENTS = (POOLED, BLIND, PER_SLA, KEDA)
POOL_LABEL = "slascaler.io/pool"

Workload = Callable[[int], list[Request]]


@dataclass(frozen=True)
class PoolModel:
    """One model of the fleet: its Deployment, its load and its InferenceSLA."""

    name: str
    priority: int
    workload: Workload
    profile: CostProfile
    threshold_ms: float
    itl_ms: float | None
    initial: int
    max_replicas: int
    min_replicas: int = 1
    settings: EngineSettings = DEFAULT_SETTINGS
    gpus_per_replica: int = 1

    def sla_spec(self, priority: int) -> dict[str, Any]:
        objectives: dict[str, Any] = {"ttft": {"percentile": 95, "thresholdMs": self.threshold_ms}}
        if self.itl_ms is not None:
            objectives["itl"] = {"percentile": 95, "thresholdMs": self.itl_ms}
        return {
            "targetRef": {"name": self.name},
            "objectives": objectives,
            "replicas": {"min": self.min_replicas, "max": self.max_replicas},
            "window": "1m",
            "behavior": {"scaleDownStabilization": "3m", "knobCooldown": "5m"},
            "priority": priority,
        }


@dataclass(frozen=True)
class PoolScenario:
    name: str
    models: tuple[PoolModel, ...]
    gpus: int
    duration_s: float
    startup_s: float = 60.0
    period_s: float = 15.0


@dataclass(frozen=True)
class ModelOutcome:
    """One model's run under one arrangement, summarised."""

    model: str
    priority: int
    threshold_ms: float
    windows: tuple[tuple[float, float], ...]  # judged windows: (start s, TTFT p95 ms)
    gpu_hours: float
    ttft_p95_ms: float
    peak_replicas: int
    # (start s, ITL p95 ms) of the tokens emitted in each window, and the ITL objective
    itl_windows: tuple[tuple[float, float], ...] = ()
    itl_threshold_ms: float | None = None

    @property
    def attainment(self) -> float | None:
        """Share of the judged windows that met both objectives (`run.judge_windows`)."""
        return share_met(
            judge_windows(self.windows, self.itl_windows, self.threshold_ms, self.itl_threshold_ms)
        )


@dataclass(frozen=True)
class PoolOutcome:
    """One arrangement's run of a scenario."""

    scenario: str
    arrangement: str
    seed: int
    gpus: int
    duration_s: float
    models: tuple[ModelOutcome, ...]
    moves: int = 0  # moves the pool's arbitration made (Events on both sides)
    timeline: tuple[tuple[float, tuple[int, ...]], ...] = field(default=())  # (t, desired each)

    @property
    def weighted_attainment(self) -> float | None:
        """Σ priority × attainment / Σ priority over the models judged."""
        judged = [(m.priority, m.attainment) for m in self.models if m.attainment is not None]
        weight = sum(p for p, _ in judged)
        if not judged or weight <= 0:
            return None
        return sum(p * a for p, a in judged if a is not None) / weight

    @property
    def utilisation(self) -> float:
        """GPU-hours held by the models' replicas over the pool's GPU-hours."""
        return sum(m.gpu_hours for m in self.models) / (self.gpus * self.duration_s / 3600.0)


def _controller(
    model: PoolModel, arrangement: str, coordinator: PoolCoordinator | None, period_s: float
) -> Controller:
    if arrangement == KEDA:
        return HPAController("ttft", model.threshold_ms, model.min_replicas, model.max_replicas)
    priority = 0 if arrangement == BLIND else model.priority
    labels = {POOL_LABEL: "shared"} if coordinator is not None else {}
    return OperatorController(
        model.sla_spec(priority), period_s, labels=labels, pools=coordinator, name=arrangement
    )


def _phase(seed: int, model: str, period_s: float) -> float:
    """When a model's first evaluation comes: a whole number of ticks within the period."""
    ticks = max(1, round(period_s / TICK_S))
    return random.Random(f"{seed}:{model}").randrange(ticks) * TICK_S


def run_arrangement(scenario: PoolScenario, arrangement: str, seed: int) -> PoolOutcome:
    """Every model of `scenario` under `arrangement`, in virtual time, on shared GPUs."""
    if arrangement not in ARRANGEMENTS:
        raise ValueError(f"unknown arrangement {arrangement!r}; choose from {ARRANGEMENTS}")
    clock = [0.0]
    shared = SharedGPUs(scenario.gpus)
    cluster = SimCluster()
    coordinator = None
    if arrangement in (POOLED, BLIND):
        coordinator = PoolCoordinator(cluster, clock=lambda: clock[0], interval_s=scenario.period_s)
        cluster.add_gpu_pool(
            "shared",
            {"selector": {"matchLabels": {POOL_LABEL: "shared"}}, "limit": {"gpus": scenario.gpus}},
        )
    fleets: list[Fleet] = []
    controllers: list[Controller] = []
    for model in scenario.models:
        fleet = Fleet(
            model.profile, model.initial, model.settings, startup_s=scenario.startup_s,
            gpus_per_replica=model.gpus_per_replica, shared=shared,
        )  # fmt: skip
        deployment = cluster.add_deployment(
            NAMESPACE, model.name, fleet, args=engine_args(Engine.VLLM, model.settings),
            gpus=model.gpus_per_replica,
        )  # fmt: skip
        controller = _controller(model, arrangement, coordinator, scenario.period_s)
        if isinstance(controller, ClusterController):
            controller.bind(cluster, deployment)
        fleet.feed([r for r in model.workload(seed) if r.arrival <= scenario.duration_s])
        fleets.append(fleet)
        controllers.append(controller)
    timelines: list[list[Sample]] = [[] for _ in fleets]
    itl_marks = [ItlMarks(scenario.startup_s) for _ in fleets]
    gpu_seconds = [0.0 for _ in fleets]
    joint: list[tuple[float, tuple[int, ...]]] = []
    # Each SLA's evaluations start at its own phase of the period, as the operator's timers
    # do (each starts when its InferenceSLA is seen): in lockstep, the first model's pods
    # would be the oldest Pending ones at every collision and win every race for GPUs.
    # Seeded per model, so every arrangement meets the same phases.
    next_control = {
        id(c): _phase(seed, model.name, c.period_s)
        for model, c in zip(scenario.models, controllers, strict=True)
    }
    now = 0.0
    while now <= scenario.duration_s:
        clock[0] = now
        for fleet, marks in zip(fleets, itl_marks, strict=True):
            fleet.run_until(now)
            fleet.snapshot()
            marks.observe(now, fleet)
        shared.refill()
        if coordinator is not None and now >= min(next_control.values()):
            coordinator.refresh()
        for fleet, controller in zip(fleets, controllers, strict=True):
            if now >= next_control[id(controller)]:
                controller.control(fleet, now)
                next_control[id(controller)] += controller.period_s
        for index, fleet in enumerate(fleets):
            timelines[index].append(
                Sample(now, fleet.gpus_in_use, fleet.ready_replicas, fleet.desired, "")
            )
            if now < scenario.duration_s:  # the tick's GPUs held until the next one
                gpu_seconds[index] += fleet.gpus_in_use * TICK_S
        joint.append((now, tuple(f.desired for f in fleets)))
        now += TICK_S
    outcomes = []
    for index, (model, fleet) in enumerate(zip(scenario.models, fleets, strict=True)):
        fleet.run_until(scenario.duration_s + 900.0)
        pending = [*fleet.backlog]
        for replica in fleet.replicas:
            pending.extend(replica.waiting)
            pending.extend(replica.running)
        result = RunResult(
            name=arrangement,
            requests=[*fleet.finished, *(r for r in pending if r.done_at is None)],
            timeline=timelines[index],
            gpu_hours=gpu_seconds[index] / 3600.0,
            replica_changes=0,
            rolling_restarts=fleet.rolling_restarts,
            itl_p95_ms=math.nan,
            threshold_ms=model.threshold_ms,
            percentile=95.0,
            skip_s=scenario.startup_s,
            frontend_ms=model.profile.frontend_ms,
            itl_windows=itl_marks[index].percentiles(95.0),
            itl_threshold_ms=model.itl_ms,
        )
        outcomes.append(
            ModelOutcome(
                model=model.name,
                priority=model.priority,
                threshold_ms=model.threshold_ms,
                windows=tuple(result.window_p95()),
                gpu_hours=result.gpu_hours,
                ttft_p95_ms=result.ttft_percentiles()[1],
                peak_replicas=max(s.desired for s in timelines[index]),
                itl_windows=tuple(result.itl_windows),
                itl_threshold_ms=model.itl_ms,
            )
        )
    moves = 0
    if coordinator is not None:
        moves = sum(1 for e in cluster.events if e["reason"] == "GrantedByPool")
    return PoolOutcome(
        scenario.name, arrangement, seed, scenario.gpus, scenario.duration_s,
        tuple(outcomes), moves, tuple(joint[:: max(1, round(30 / TICK_S))]),
    )  # fmt: skip


def collision_scenario(minutes: float = 60.0) -> PoolScenario:
    """Three models on 16 A100s whose peaks collide (see the module docstring).

    Each peak alone fits in the GPUs the others leave; together they do not: from minute 10
    the batch summarizer's backlog asks for most of the pool, from minute 15 the code
    assistant's load doubles, and from minute 20 to 40 the chat model's quintuples.
    """
    duration = minutes * 60.0
    scale = duration / 3600.0  # the shape of the hour, for shorter runs
    conversation, code = load_trace("conversation"), load_trace("code")
    base = len(conversation) / conversation[-1].at  # requests/s of the conversation trace
    code_base = len(code) / code[-1].at
    documents = heavy_tailed_prompts(4000, 3000, 0.6, 12_000, 150, seed=11)

    def window(
        low: float, high: float, start_min: float, end_min: float
    ) -> Callable[[float], float]:
        start, end = start_min * 60 * scale, end_min * 60 * scale
        return lambda t: high if start <= t < end else low

    def load(rate: Callable[[float], float], peak: float, rows: Sequence[Any]) -> Workload:
        return lambda seed: modulated_poisson(rate, peak, duration, rows, seed)

    chat = PoolModel(
        "chat", 30, load(window(1.5 * base, 5 * base, 20, 40), 5 * base, conversation),
        PROFILES["llama3-8b-a100"], threshold_ms=500.0, itl_ms=100.0, initial=2,
        max_replicas=12,
    )  # fmt: skip
    assistant = PoolModel(
        "code", 20, load(window(3 * code_base, 7 * code_base, 15, 35), 7 * code_base, code),
        PROFILES["llama3.1-8b-a100"], threshold_ms=1500.0, itl_ms=None, initial=3,
        max_replicas=10,
    )  # fmt: skip
    batch = PoolModel(
        "batch", 10, load(window(2.0, 20.0, 10, 45), 20.0, documents),
        PROFILES["llama3.1-8b-a100"], threshold_ms=4000.0, itl_ms=None, initial=3,
        max_replicas=12,
    )  # fmt: skip
    return PoolScenario("peaks collide", (chat, assistant, batch), gpus=16, duration_s=duration)


_SCENARIO: list[PoolScenario] = []


def _task(arrangement: str, seed: int) -> PoolOutcome:
    return run_arrangement(_SCENARIO[0], arrangement, seed)


def run_pool_benchmark(
    scenario: PoolScenario,
    seeds: Sequence[int],
    arrangements: Sequence[str] = ARRANGEMENTS,
    jobs: int | None = None,
    progress: Callable[[int, int], None] = lambda done, total: None,
) -> list[PoolOutcome]:
    """Every arrangement on every seed, in worker processes; in arrangement, seed order."""
    _SCENARIO[:] = [scenario]
    cases = [(a, s) for a in arrangements for s in seeds]
    context = multiprocessing.get_context("fork")
    outcomes: dict[tuple[str, int], PoolOutcome] = {}
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        futures = {case: pool.submit(_task, *case) for case in cases}
        for done, (case, future) in enumerate(futures.items(), start=1):
            outcomes[case] = future.result()
            progress(done, len(cases))
    return [outcomes[case] for case in cases]


def mean_by_arrangement(outcomes: Sequence[PoolOutcome]) -> Mapping[str, list[PoolOutcome]]:
    grouped: dict[str, list[PoolOutcome]] = {}
    for outcome in outcomes:
        grouped.setdefault(outcome.arrangement, []).append(outcome)
    return grouped
