"""`slascaler demo`: the Azure conversation trace through a simulated fleet, slascaler vs HPA.

Replays the bundled conversation trace superposed 4× (≈ 22 requests/s, so it needs several
A100 replicas) under slascaler and under the HPA-on-queue-length recipe, prints a side-by-side
table and writes a PNG: TTFT p95 per minute against the SLA, replicas over time, and
slascaler's regime. Called by the CLI.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

from slascaler_sim.baselines import QUEUE_TARGET_PER_POD, HPAController
from slascaler_sim.benchmark import rows, summarise
from slascaler_sim.plots import plot_demo
from slascaler_sim.report import markdown_table
from slascaler_sim.run import OperatorController, RunResult, simulate
from slascaler_sim.suite import trace_scenario
from slascaler_sim.workload import load_trace


class _Progress:
    """Prints how far a run has got, every 10% of simulated time."""

    def __init__(self, name: str, duration_s: float, err: TextIO) -> None:
        self.name, self.duration_s, self.err, self.shown = name, duration_s, err, -1

    def tick(self, now: float) -> None:
        tenth = int(10 * now / self.duration_s)
        if tenth != self.shown:
            self.shown = tenth
            self.err.write(f"\r{self.name:>14}: {10 * tenth:3d}% of the simulated time")
            self.err.flush()


def run_demo(
    minutes: float, plot_path: Path | None, out: TextIO, err: TextIO = sys.stderr
) -> list[RunResult]:
    scenario = trace_scenario(load_trace("conversation"), "conversation trace ×4", 4, minutes)
    results: list[RunResult] = []
    for controller in (
        OperatorController(scenario.sla_spec()),
        HPAController("queue", QUEUE_TARGET_PER_POD, 1, scenario.max_replicas),
    ):
        progress = _Progress(controller.name, scenario.duration_s, err)
        results.append(
            simulate(
                scenario.workload(1),
                controller,
                scenario.profile,
                scenario.settings,
                scenario.initial_replicas,
                scenario.startup_s,
                scenario.duration_s,
                scenario.threshold_ms,
                scenario.percentile,
                on_tick=progress.tick,
                itl_threshold_ms=scenario.itl_ms,
            )
        )
        err.write("\n")
    out.write(
        f"Azure conversation trace ×4, {minutes:g} min, {scenario.profile.name}, SLA: TTFT p95 ≤ "
        f"{scenario.threshold_ms:.0f} ms, ITL p95 ≤ {scenario.itl_ms:.0f} ms, start-up "
        f"{scenario.startup_s:.0f} s\n\n"
    )
    outcomes = [summarise(r, scenario, 1, r.name, 0.0) for r in results]
    out.write(markdown_table(rows(outcomes)))
    if plot_path is not None:
        plot_demo(results, scenario.threshold_ms, plot_path)
        out.write(f"\nplot written to {plot_path}\n")
    return results
