"""Benchmark scenarios, the policy × scenario matrix, and its tables.

Each `Scenario` is a workload, a cost profile, engine settings, an SLA and limits. `run_matrix`
runs every policy on every scenario and seed (slascaler, HPA on queue length, KEDA on TTFT,
static peak provisioning and the oracle) and `markdown_table`/`write_csv` report GPU-hours,
SLA attainment per 1-minute window and the rest side by side. Called by `slascaler bench`
and `slascaler demo`.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from slascaler.spec import SLASpec, parse_spec
from slascaler_sim.baselines import QUEUE_TARGET_PER_POD, HPAController, StaticController
from slascaler_sim.engine import Request
from slascaler_sim.fleet import EngineSettings
from slascaler_sim.oracle import OracleController, window_requirements
from slascaler_sim.profiles import PROFILES, CostProfile
from slascaler_sim.run import Controller, RunResult, SlascalerController, simulate
from slascaler_sim.workload import (
    TraceRow,
    diurnal_rate,
    load_trace,
    modulated_poisson,
    replay,
    step_rate,
)

DEFAULT_SETTINGS = EngineSettings(max_num_seqs=256, max_num_batched_tokens=2048)


@dataclass(frozen=True)
class Scenario:
    name: str
    workload: Callable[[int], list[Request]]  # seed → requests
    duration_s: float
    profile: CostProfile = PROFILES["llama3-8b-a100"]
    settings: EngineSettings = DEFAULT_SETTINGS
    threshold_ms: float = 500.0
    itl_ms: float = 100.0
    max_replicas: int = 32
    initial_replicas: int = 2
    startup_s: float = 60.0
    gpu_limit: int | None = None
    knobs: dict[str, dict[str, int]] = field(
        default_factory=lambda: {
            "maxBatchSize": {"min": 16, "max": 512},
            "chunkSize": {"min": 512, "max": 8192},
        }
    )

    def spec(self) -> SLASpec:
        return parse_spec(
            {
                "targetRef": {"name": self.name},
                "objectives": {
                    "ttft": {"percentile": 95, "thresholdMs": self.threshold_ms},
                    "itl": {"percentile": 95, "thresholdMs": self.itl_ms},
                },
                "replicas": {"min": 1, "max": self.max_replicas},
                "window": "1m",
                "knobs": self.knobs,
                "behavior": {"scaleDownStabilization": "3m", "knobCooldown": "5m"},
            }
        )


def trace_scenario(rows: Sequence[TraceRow], name: str, copies: int, minutes: float) -> Scenario:
    def workload(seed: int) -> list[Request]:
        return [r for r in replay(rows, copies=copies, seed=seed) if r.arrival < minutes * 60]

    return Scenario(name, workload, minutes * 60)


def default_scenarios(minutes: float = 30.0) -> list[Scenario]:
    conversation, code = load_trace("conversation"), load_trace("code")
    duration = minutes * 60
    base = len(conversation) / conversation[-1].at  # mean requests/s of the trace

    def poisson(
        rate: Callable[[float], float], peak: float, rows: Sequence[TraceRow]
    ) -> Callable[[int], list[Request]]:
        return lambda seed: modulated_poisson(rate, peak, duration, rows, seed)

    very_long_prompts = [r for r in code if r.prompt >= 6000]
    return [
        trace_scenario(conversation, "conversation trace ×4", 4, minutes),
        trace_scenario(code, "code trace ×8", 8, minutes),
        Scenario(
            "step load ×4",
            poisson(step_rate(base, 4 * base, duration / 3), 4 * base, conversation),
            duration,
        ),
        Scenario(
            "diurnal",
            poisson(diurnal_rate(2.5 * base, 0.8, duration), 4.5 * base, conversation),
            duration,
        ),
        Scenario(
            "burst",
            poisson(
                step_rate(base, 6 * base, duration / 2, duration / 2 + 180), 6 * base, conversation
            ),
            duration,
        ),
        Scenario(
            "prefill-bound low load",
            poisson(lambda t: 0.3, 0.3, very_long_prompts),
            duration,
            profile=PROFILES["llama3-8b-h100"],
            settings=EngineSettings(256, 256),
            threshold_ms=200.0,
            itl_ms=200.0,
            max_replicas=8,
            knobs={"maxBatchSize": {"min": 16, "max": 512}, "chunkSize": {"min": 256, "max": 8192}},
        ),
        Scenario(
            "capacity-limited",
            poisson(lambda t: 3 * base, 3 * base, conversation),
            duration,
            max_replicas=6,
            gpu_limit=6,
        ),
    ]


POLICIES = ("slascaler", "HPA on queue", "KEDA on TTFT", "Static (peak)", "Oracle")


def _controllers(scenario: Scenario, seed: int, with_oracle: bool) -> list[tuple[Controller, int]]:
    """The policies, each with the replicas it starts from.

    With the oracle, every policy starts from the oracle's first-minute requirement (what a
    user who sized the Deployment for the opening load would have); without, from the
    scenario's initial count.
    """
    spec = scenario.spec()
    initial = scenario.initial_replicas
    extra: list[tuple[Controller, int]] = []
    if with_oracle:
        needed = window_requirements(
            lambda: scenario.workload(seed), scenario.profile, scenario.settings,
            scenario.duration_s, scenario.threshold_ms, 95.0, scenario.max_replicas,
        )  # fmt: skip
        oracle = OracleController(needed, scenario.startup_s)
        peak = max(n or 1 for n in needed)
        initial = needed[0] or scenario.initial_replicas
        extra = [(StaticController(peak), peak), (oracle, oracle.target(0.0))]
    return [
        (SlascalerController(spec), initial),
        (HPAController("queue", QUEUE_TARGET_PER_POD, 1, scenario.max_replicas), initial),
        (HPAController("ttft", scenario.threshold_ms, 1, scenario.max_replicas), initial),
        *extra,
    ]


@dataclass(frozen=True)
class Row:
    scenario: str
    seed: int
    result: RunResult


def run_matrix(
    scenarios: Sequence[Scenario],
    seeds: Sequence[int],
    with_oracle: bool = True,
    progress: Callable[[str], None] = lambda _: None,
) -> list[Row]:
    rows: list[Row] = []
    for scenario in scenarios:
        for seed in seeds:
            for controller, initial in _controllers(scenario, seed, with_oracle):
                progress(f"{scenario.name} / seed {seed} / {controller.name}")
                result = simulate(
                    scenario.workload(seed),
                    controller,
                    scenario.profile,
                    scenario.settings,
                    initial,
                    scenario.startup_s,
                    scenario.duration_s,
                    scenario.threshold_ms,
                    gpu_limit=scenario.gpu_limit,
                )
                rows.append(Row(scenario.name, seed, result))
    return rows


COLUMNS = (
    "scenario", "seed", "policy", "SLA attainment", "TTFT p50 ms", "TTFT p95 ms", "TTFT p99 ms",
    "ITL p95 ms", "GPU-hours", "replica changes", "rolling restarts",
)  # fmt: skip


def _cells(row: Row) -> list[str]:
    r = row.result
    p50, p95, p99 = r.ttft_percentiles()

    def ms(v: float) -> str:
        return f"{v:.0f}" if math.isfinite(v) else "∞"

    return [
        row.scenario, str(row.seed), r.name, f"{r.attainment:.1%}", ms(p50), ms(p95), ms(p99),
        ms(r.itl_p95_ms), f"{r.gpu_hours:.2f}", str(r.replica_changes), str(r.rolling_restarts),
    ]  # fmt: skip


def markdown_table(rows: Sequence[Row]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(_cells(row)) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def write_csv(rows: Sequence[Row], path: Path) -> None:
    with path.open("w", newline="", encoding="utf-8") as stream:
        writer = csv.writer(stream)
        writer.writerow(COLUMNS)
        for row in rows:
            writer.writerow(_cells(row))


def simulator_speed(
    replicas: int = 8, router: str = "least-outstanding"
) -> tuple[int, float, float]:
    """(requests, CPU seconds, virtual/CPU ratio) for one hour of the conversation trace, its
    prompts sharing prefixes (`prefixes.SharedPrefixes()`, so prefix caching is at work)."""
    import time

    from slascaler_sim.fleet import Fleet
    from slascaler_sim.prefixes import assign_shared_prefixes

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
