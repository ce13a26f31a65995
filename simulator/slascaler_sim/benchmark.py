"""The policy × scenario × seed matrix: run it (in parallel), and what each run came to.

For every scenario and seed, the oracle's per-window requirement is computed first (its
sweep of replica counts, `sim.oracle`); every policy then starts from the oracle's
first-minute count (what a user who sized the Deployment for the opening load would have),
and the static and oracle policies are built from it. The runs are independent and go to a
pool of worker processes; each returns an `Outcome`, a compact summary (per-window TTFT and
ITL percentiles, GPU-hours, changes, a sampled timeline), never the requests themselves.
`rows` then judges every run against the oracle's own run of the same scenario and seed
(`attainment_where_feasible`: of the windows the oracle meets, the share this policy meets).

Called by `slascaler bench`, the demo and `make bench`; `sim.report` writes the tables.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, replace

from slascaler.policy.decide import DEFAULT_TUNABLES
from slascaler_sim.baselines import (
    QUEUE_TARGET_PER_POD,
    DynamoLoadPlanner,
    HPAController,
    KPAController,
    LlmdSLOController,
    OracleController,
    StaticChoice,
    StaticController,
    StaticRuns,
    hindsight_best_static,
    oracle_requirements,
)
from slascaler_sim.engine import Request
from slascaler_sim.fleet import EngineSettings, Fleet
from slascaler_sim.prefixes import assign_shared_prefixes
from slascaler_sim.profiles import PROFILES
from slascaler_sim.run import Controller, OperatorController, RunResult, judge_windows, simulate
from slascaler_sim.suite import Scenario
from slascaler_sim.workload import load_trace, replay

SLASCALER = "slascaler"
ORACLE = "Oracle"
ORACLE_NO_LOOKAHEAD = "Oracle (no look-ahead)"
STATIC_PEAK = "Static (peak)"
STATIC_HINDSIGHT = "Static (hindsight)"
TIMELINE_STEP_S = 30.0


@dataclass(frozen=True)
class Plan:
    """What the runs at fixed counts say of one scenario and seed, to build the policies."""

    needed: tuple[int, ...]  # per 1-minute window, the oracle's count (`baselines.oracle`)
    hindsight: StaticChoice  # the hindsight-best static configuration
    profiling_runs: int  # runs at fixed counts the two took
    feasible: tuple[bool, ...] = ()  # per window: some count meets it

    @property
    def initial(self) -> int:
        """Where every online policy starts: the count of the first window some count meets
        (what a user who sized the Deployment for the opening load would have)."""
        for needed, feasible in zip(self.needed, self.feasible or (True,) * len(self.needed),
                                    strict=False):  # fmt: skip
            if feasible:
                return needed
        return 1

    @property
    def peak(self) -> int:
        return max(self.needed, default=1)


PolicyFactory = Callable[[Scenario, Plan], tuple[Controller, int, EngineSettings]]


def _slascaler(scenario: Scenario, plan: Plan) -> tuple[Controller, int, EngineSettings]:
    return OperatorController(scenario.sla_spec()), plan.initial, scenario.settings


def _ablation(switch: str) -> PolicyFactory:
    """slascaler with one mechanism (a `Tunables.use_*` switch) turned off."""

    def factory(scenario: Scenario, plan: Plan) -> tuple[Controller, int, EngineSettings]:
        tunables = replace(DEFAULT_TUNABLES, **{switch: False})
        controller = OperatorController(scenario.sla_spec(), tunables=tunables)
        return controller, plan.initial, scenario.settings

    return factory


# Each mechanism of the policy, shown with and without (`slascaler bench --ablations`).
ABLATIONS: dict[str, str] = {
    "slascaler − latency model": "use_latency_model",
    "slascaler − short window": "use_short_window",
    "slascaler − trend": "use_trend",
    "slascaler − burst memory": "use_burst_memory",
    "slascaler − warm credit": "use_warm_credit",
    "slascaler − surge": "use_surge_for_rollouts",
    "slascaler − regime sizing": "use_regime_sizing",
    "slascaler − collision sizing": "use_collision_sizing",
    "slascaler − model trust": "use_model_trust",
    "slascaler − cautious scale-in": "use_cautious_scale_in",
    "slascaler − evidence cap": "use_evidence_cap",
    "slascaler − slot sizing": "use_slot_sizing",
    "slascaler − chunk-step diagnosis": "use_chunk_step_diagnosis",
    "slascaler − ITL evidence": "use_itl_evidence",
}


def _hpa_queue(scenario: Scenario, plan: Plan) -> tuple[Controller, int, EngineSettings]:
    controller = HPAController("queue", QUEUE_TARGET_PER_POD, 1, scenario.max_replicas)
    return controller, plan.initial, scenario.settings


def _keda_ttft(scenario: Scenario, plan: Plan) -> tuple[Controller, int, EngineSettings]:
    controller = HPAController("ttft", scenario.threshold_ms, 1, scenario.max_replicas)
    return controller, plan.initial, scenario.settings


def _llmd(scenario: Scenario, plan: Plan) -> tuple[Controller, int, EngineSettings]:
    itl = scenario.itl_ms if scenario.itl_ms is not None else math.inf
    controller = LlmdSLOController(scenario.threshold_ms, itl, 1, scenario.max_replicas)
    return controller, plan.initial, scenario.settings


def _dynamo(scenario: Scenario, plan: Plan) -> tuple[Controller, int, EngineSettings]:
    itl = scenario.itl_ms if scenario.itl_ms is not None else math.inf
    controller = DynamoLoadPlanner(
        scenario.threshold_ms, itl, scenario.max_replicas, scenario.profile.kv_capacity_tokens
    )
    return controller, plan.initial, scenario.settings


def _kpa(scenario: Scenario, plan: Plan) -> tuple[Controller, int, EngineSettings]:
    return KPAController(1, scenario.max_replicas), plan.initial, scenario.settings


def _static_peak(scenario: Scenario, plan: Plan) -> tuple[Controller, int, EngineSettings]:
    return StaticController(plan.peak), plan.peak, scenario.settings


def _static_hindsight(scenario: Scenario, plan: Plan) -> tuple[Controller, int, EngineSettings]:
    best = plan.hindsight
    controller = StaticController(best.replicas, name=STATIC_HINDSIGHT, settings=best.settings)
    return controller, best.replicas, best.settings


def _oracle(scenario: Scenario, plan: Plan) -> tuple[Controller, int, EngineSettings]:
    oracle = OracleController(plan.needed, scenario.startup_s)
    return oracle, oracle.target(0.0), scenario.settings


def _oracle_no_lookahead(
    scenario: Scenario, plan: Plan
) -> tuple[Controller, int, EngineSettings]:
    oracle = OracleController(
        plan.needed, scenario.startup_s, name=ORACLE_NO_LOOKAHEAD, looks_ahead=False
    )
    return oracle, oracle.target(0.0), scenario.settings


POLICIES: dict[str, PolicyFactory] = {
    SLASCALER: _slascaler,
    "HPA on queue": _hpa_queue,
    "KEDA on TTFT": _keda_ttft,
    "llm-d SLO-aware": _llmd,
    "Dynamo planner": _dynamo,
    "AIBrix KPA": _kpa,
    STATIC_PEAK: _static_peak,
    STATIC_HINDSIGHT: _static_hindsight,
    ORACLE: _oracle,
    ORACLE_NO_LOOKAHEAD: _oracle_no_lookahead,
}
BASELINES = tuple(POLICIES)
POLICIES.update({name: _ablation(switch) for name, switch in ABLATIONS.items()})
# Policies that only change replicas, the engine flags fixed at the scenario's (the oracle's
# too); the hindsight-best static configuration chooses flags as well, so it is not one.
REPLICAS_ONLY = frozenset(BASELINES) - {SLASCALER, STATIC_HINDSIGHT}


@dataclass(frozen=True)
class Outcome:
    """One run, summarised: what the tables and plots need, and nothing heavy."""

    scenario: str
    seed: int
    policy: str
    threshold_ms: float
    windows: tuple[tuple[float, float], ...]  # judged windows: (start s, TTFT percentile ms)
    gpu_hours: float
    ttft_ms: tuple[float, float, float]  # p50, p95, p99 over the run
    itl_p95_ms: float
    failed_requests: int
    replica_changes: int
    rolling_restarts: int
    longest_at_max_s: float  # the longest stretch the desired count sat at replicas.max
    duration_s: float
    timeline: tuple[tuple[float, int, int, str], ...]  # (t, desired, GPUs, regime)
    cpu_s: float
    # Judged windows that emitted tokens: (start s, ITL percentile ms), and the ITL objective
    # (None: the scenario declares none).
    itl_windows: tuple[tuple[float, float], ...] = ()
    itl_threshold_ms: float | None = None

    @property
    def met(self) -> frozenset[float]:
        """The judged windows that met the SLA: TTFT and ITL (`run.judge_windows`)."""
        verdicts = judge_windows(
            self.windows, self.itl_windows, self.threshold_ms, self.itl_threshold_ms
        )
        return frozenset(start for start, met in verdicts if met)

    @property
    def attainment(self) -> float | None:
        return len(self.met) / len(self.windows) if self.windows else None

    @property
    def ttft_attainment(self) -> float | None:
        """Share of the judged windows whose TTFT percentile met its objective."""
        if not self.windows:
            return None
        return sum(1 for _, p in self.windows if p <= self.threshold_ms) / len(self.windows)

    @property
    def itl_attainment(self) -> float | None:
        """Share of the windows with tokens whose ITL percentile met the ITL objective; None
        without an ITL objective or without such a window."""
        if self.itl_threshold_ms is None or not self.itl_windows:
            return None
        met = sum(1 for _, p in self.itl_windows if p <= self.itl_threshold_ms)
        return met / len(self.itl_windows)


def summarise(
    result: RunResult, scenario: Scenario, seed: int, policy: str, cpu_s: float
) -> Outcome:
    longest = stretch = 0.0
    for before, after in zip(result.timeline, result.timeline[1:], strict=False):
        stretch = stretch + (after.at - before.at) if before.desired >= scenario.max_replicas else 0
        longest = max(longest, stretch)
    step = max(1, round(TIMELINE_STEP_S / (result.timeline[1].at - result.timeline[0].at)))
    return Outcome(
        scenario=scenario.name,
        seed=seed,
        policy=policy,
        threshold_ms=scenario.threshold_ms,
        windows=tuple(result.window_p95()),
        gpu_hours=result.gpu_hours,
        ttft_ms=result.ttft_percentiles(),
        itl_p95_ms=result.itl_p95_ms,
        failed_requests=result.failed_requests,
        replica_changes=result.replica_changes,
        rolling_restarts=result.rolling_restarts,
        longest_at_max_s=longest,
        duration_s=scenario.duration_s,
        timeline=tuple((s.at, s.desired, s.gpus, s.regime) for s in result.timeline[::step]),
        cpu_s=cpu_s,
        itl_windows=tuple(result.itl_windows),
        itl_threshold_ms=scenario.itl_ms,
    )


def requests_of(scenario: Scenario, seed: int) -> list[Request]:
    return [r for r in scenario.workload(seed) if r.arrival <= scenario.duration_s]


def plan_of(scenario: Scenario, seed: int) -> Plan:
    """The oracle's schedule and the hindsight-best static configuration (shared runs)."""
    runs = StaticRuns(
        lambda: requests_of(scenario, seed), scenario.profile, scenario.duration_s,
        scenario.threshold_ms, scenario.percentile, scenario.itl_ms,
    )  # fmt: skip
    needed = oracle_requirements(
        runs, scenario.settings, scenario.max_replicas, scenario.startup_s, scenario.gpu_limit
    )
    itl = scenario.itl_ms if scenario.itl_ms is not None else math.inf
    best = hindsight_best_static(
        runs, scenario.settings, scenario.knobs, scenario.max_replicas, itl, scenario.startup_s
    )
    return Plan(tuple(needed.counts), best, runs.runs_made, tuple(needed.feasible))


def run_policy(scenario: Scenario, seed: int, policy: str, plan: Plan) -> Outcome:
    return run_controller(scenario, seed, policy, *POLICIES[policy](scenario, plan))


def run_controller(
    scenario: Scenario,
    seed: int,
    policy: str,
    controller: Controller,
    initial: int,
    settings: EngineSettings,
) -> Outcome:
    """One run of `controller` (named `policy` in the outcome) on the scenario."""
    started = time.process_time()
    result = simulate(
        requests_of(scenario, seed), controller, scenario.profile, settings, initial,
        scenario.startup_s, scenario.duration_s, scenario.threshold_ms, scenario.percentile,
        gpu_limit=scenario.gpu_limit, router=scenario.router, itl_threshold_ms=scenario.itl_ms,
    )  # fmt: skip
    result.name = policy
    return summarise(result, scenario, seed, policy, time.process_time() - started)


# -- the matrix, in worker processes ----------------------------------------------------

_SCENARIOS: list[Scenario] = []  # set before the pool forks: workloads are closures


def _plan_task(index: int, seed: int) -> Plan:
    return plan_of(_SCENARIOS[index], seed)


def _run_task(index: int, seed: int, policy: str, plan: Plan) -> Outcome:
    return run_policy(_SCENARIOS[index], seed, policy, plan)


def seeds_for(scenario: Scenario, seeds: Sequence[int]) -> list[int]:
    """A scenario whose workload does not depend on the seed runs once."""
    return list(seeds) if scenario.seeded else list(seeds[:1])


def run_matrix(
    scenarios: Sequence[Scenario],
    seeds: Sequence[int],
    policies: Sequence[str] = BASELINES,
    jobs: int | None = None,
    progress: Callable[[int, int], None] = lambda done, total: None,
) -> list[Outcome]:
    """Every policy on every scenario and seed; outcomes in scenario, seed, policy order."""
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        raise ValueError(f"unknown policies {unknown}; choose from {', '.join(POLICIES)}")
    global _SCENARIOS
    _SCENARIOS = list(scenarios)
    cases = [(i, seed) for i, s in enumerate(scenarios) for seed in seeds_for(s, seeds)]
    total = len(cases) * (1 + len(policies))
    done = 0
    workers = jobs or os.cpu_count() or 1
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        plans: dict[tuple[int, int], Future[Plan]] = {
            case: pool.submit(_plan_task, *case) for case in cases
        }
        runs: dict[tuple[int, int, str], Future[Outcome]] = {}
        for case, planned in plans.items():
            plan = planned.result()
            done += 1
            progress(done, total)
            for policy in policies:
                runs[(*case, policy)] = pool.submit(_run_task, *case, policy, plan)
        outcomes = []
        for future in runs.values():
            outcomes.append(future.result())
            done += 1
            progress(done, total)
    return outcomes


@dataclass(frozen=True)
class Row:
    """One run judged: the columns of bench.csv."""

    outcome: Outcome
    feasible_windows: int | None  # windows the oracle's run met (None: no oracle run)
    attainment_where_feasible: float | None

    @property
    def scenario(self) -> str:
        return self.outcome.scenario

    @property
    def policy(self) -> str:
        return self.outcome.policy


def rows(outcomes: Sequence[Outcome]) -> list[Row]:
    """Every outcome judged against the oracle's run of the same scenario and seed."""
    oracle = {(o.scenario, o.seed): o for o in outcomes if o.policy == ORACLE}
    judged = []
    for outcome in outcomes:
        reference = oracle.get((outcome.scenario, outcome.seed))
        if reference is None:
            judged.append(Row(outcome, None, None))
            continue
        feasible = reference.met
        where = len(outcome.met & feasible) / len(feasible) if feasible else None
        judged.append(Row(outcome, len(feasible), where))
    return judged


def simulator_speed(
    replicas: int = 8, router: str = "least-outstanding"
) -> tuple[int, float, float]:
    """(requests, CPU seconds, virtual/CPU ratio) for one hour of the conversation trace, its
    prompts sharing prefixes (`prefixes.SharedPrefixes()`, so prefix caching is at work)."""
    requests = assign_shared_prefixes(replay(load_trace("conversation")), seed=1)
    fleet = Fleet(PROFILES["llama3-8b-h100"], replicas, EngineSettings(256, 8192), router=router)
    fleet.feed(requests)
    span = requests[-1].arrival
    started = time.process_time()
    tick = 0.0
    while tick <= span:
        fleet.run_until(tick)
        fleet.snapshot()
        tick += 15.0
    fleet.run_until(span + 300.0)
    cpu = time.process_time() - started
    return len(requests), cpu, span / cpu
