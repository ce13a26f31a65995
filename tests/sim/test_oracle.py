"""The oracle is a bound, and the hindsight-best static configuration is what profiling finds."""

from __future__ import annotations

import math

from slascaler_sim.baselines import (
    QUEUE_TARGET_PER_POD,
    DynamoLoadPlanner,
    HPAController,
    KPAController,
    LlmdSLOController,
    OracleController,
    StaticController,
    StaticRuns,
    hindsight_best_static,
    oracle_requirements,
    window_requirements,
)
from slascaler_sim.engine import Request
from slascaler_sim.fleet import EngineSettings
from slascaler_sim.profiles import PROFILES
from slascaler_sim.run import Controller, simulate
from slascaler_sim.workload import load_trace, modulated_poisson, step_rate

DEMO = PROFILES["source-demo"]  # 0.1 ms per prefill token, 20 ms per decode step
A100 = PROFILES["llama3-8b-a100"]


def _long_prompt_minute() -> list[Request]:
    """Minute 0: light; minute 1: 2 requests/s of 8000-token prompts (0.8 s of prefill each,
    so no count meets 500 ms, but one replica also queues them); minute 2: light again."""
    requests: list[Request] = []
    for i in range(180):
        at = i * 1.0
        if 60 <= at < 120:
            requests += [Request(2 * i, at, 8000, 20), Request(2 * i + 1, at + 0.5, 8000, 20)]
        else:
            requests.append(Request(2 * i, at, 200, 20))
    return requests


def test_where_no_count_meets_a_window_the_oracle_takes_the_lowest_percentile() -> None:
    runs = StaticRuns(_long_prompt_minute, DEMO, 180.0, 500.0)
    settings = EngineSettings(256, 8192)
    needed = window_requirements(runs, settings, 8)
    assert needed.feasible == (True, False, True)
    assert needed.counts[0] == 1
    probed = runs.probed(settings)
    best = min(run.percentiles[1] for run in probed.values())
    at_count = probed[needed.counts[1]].percentiles[1]
    assert needed.counts[1] > 1  # not one replica: one queues the long prompts
    assert at_count <= best * 1.01
    assert all(
        run.percentiles[1] > at_count * 1.01 for n, run in probed.items() if n < needed.counts[1]
    )
    assert runs.runs_made <= 6  # doubling to 8, then bisection: not one run per count


def _policies(max_replicas: int, threshold_ms: float, peak: int) -> list[Controller]:
    return [
        HPAController("queue", QUEUE_TARGET_PER_POD, 1, max_replicas),
        HPAController("ttft", threshold_ms, 1, max_replicas),
        LlmdSLOController(threshold_ms, 100.0, 1, max_replicas),
        DynamoLoadPlanner(threshold_ms, 100.0, max_replicas, A100.kv_capacity_tokens),
        KPAController(1, max_replicas),
        StaticController(peak),
    ]


def test_the_oracle_meets_at_least_as_many_windows_as_every_replicas_only_policy() -> None:
    rows = load_trace("conversation")
    base = len(rows) / rows[-1].at
    duration, startup, threshold, top = 360.0, 60.0, 500.0, 3
    settings = EngineSettings(256, 2048)
    scenarios = {
        # A step up at 2.5 minutes, which the maximum count can serve.
        "step": lambda: modulated_poisson(
            step_rate(0.5 * base, 2 * base, 150.0), 2 * base, duration, rows, seed=3
        ),
        # A burst beyond what the maximum can serve: some windows no count meets.
        "burst": lambda: modulated_poisson(
            step_rate(0.5 * base, 4 * base, 150.0, 270.0), 4 * base, duration, rows, seed=4
        ),
    }
    for name, workload in scenarios.items():
        runs = StaticRuns(workload, A100, duration, threshold)
        needed = oracle_requirements(runs, settings, top, startup)
        oracle = OracleController(needed.counts, startup)
        initial = needed.counts[0]
        result = simulate(
            workload(), oracle, A100, settings, oracle.target(0.0), startup, duration, threshold
        )
        for policy in _policies(top, threshold, needed.peak()):
            start = needed.peak() if isinstance(policy, StaticController) else initial
            other = simulate(
                workload(), policy, A100, settings, start, startup, duration, threshold
            )
            assert result.attainment >= other.attainment, (name, policy.name)
        if name == "step":
            assert result.attainment == 1.0
        else:
            assert not all(needed.feasible)
            assert needed.peak() == top  # the burst's windows get the lowest percentile


def test_hindsight_static_finds_the_chunk_size_that_prefill_bound_load_needs() -> None:
    long_prompts = [r for r in load_trace("code") if r.prompt >= 6000]
    duration = 300.0

    def workload() -> list[Request]:
        return modulated_poisson(lambda t: 0.3, 0.3, duration, long_prompts, seed=1)

    h100 = PROFILES["llama3-8b-h100"]
    runs = StaticRuns(workload, h100, duration, 200.0)
    settings = EngineSettings(256, 256)
    knobs = {"maxBatchSize": {"min": 16, "max": 512}, "chunkSize": {"min": 256, "max": 8192}}
    default = window_requirements(runs, settings, 8)
    assert not any(default.feasible)  # 256-token chunks: no count meets 200 ms
    choice = hindsight_best_static(runs, settings, knobs, 8, 200.0, 60.0)
    assert choice.settings.max_num_batched_tokens == 8192
    assert choice.windows_met == 4 and choice.replicas == 1
    result = simulate(
        workload(),
        StaticController(choice.replicas, settings=choice.settings),
        h100, choice.settings, choice.replicas, 60.0, duration, 200.0,
    )  # fmt: skip
    assert result.rolling_restarts == 0
    assert math.isclose(result.attainment, 1.0)
