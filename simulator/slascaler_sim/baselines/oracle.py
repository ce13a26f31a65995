"""The oracle: knows the future arrivals, pays the start-up delay, uses the fewest replicas.

It is the bound an online replicas-only autoscaler can approach, not reach; it follows no
published autoscaler. Its schedule is, per 1-minute window of arrivals, the requirement
`baselines.profiling.window_requirements` finds in runs at fixed counts: the fewest
always-ready replicas that meet the SLA (TTFT, and ITL where the SLA has an ITL objective);
where none up to `max_replicas` does, the fewest that meet the TTFT objective, else the count
that gives the lowest percentile (not one: a window no count can save still hands
its backlog to the next, and more replicas drain it).

Windows are not independent: a window's backlog carries into the next, and in a run at a
fixed count every window starts with that count's backlog, while the oracle, which changes
its count, may enter a window with the larger backlog of fewer replicas before it. So
`oracle_requirements` checks the schedule in a closed-loop run of `OracleController` and, for
every window some count can meet but the oracle missed, raises that window to the next count
that met it in a fixed-count run (one more where none was run: near the objective the
percentile is not exactly monotone in the count) and, once the window was already raised,
the window before to the same count (its backlog is what carried over), up to
`REFINEMENT_ROUNDS` times.

`OracleController` asks, at every moment, for the largest requirement of the windows between
now and now + start-up delay + one window (so replicas are ready when the load arrives) and
releases them as soon as no coming window needs them. Without look-ahead (`looks_ahead`
False) it asks for the present window's requirement only, from the moment that window
begins: what a policy that knew the present load exactly and forecast nothing would do. Its
new replicas are ready a start-up delay into the window, so it loses the windows where the
need rises; the benchmark reports it beside the oracle to show how much of the oracle's
attainment rests on knowing the future. Called by the benchmarks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from slascaler_sim.baselines.interface import FleetView
from slascaler_sim.baselines.profiling import Requirements, StaticRuns, window_requirements
from slascaler_sim.fleet import EngineSettings
from slascaler_sim.run import WINDOW_S, simulate

REFINEMENT_ROUNDS = 6


@dataclass
class OracleController:
    """Replicas for the coming windows, asked for one start-up delay ahead (or, without
    look-ahead, for the present window)."""

    needed: Sequence[int]
    startup_s: float
    period_s: float = 5.0
    name: str = "Oracle"
    looks_ahead: bool = True

    def target(self, now: float) -> int:
        first = int(now // WINDOW_S)
        last = int((now + self.startup_s + WINDOW_S) // WINDOW_S) if self.looks_ahead else first
        ahead = self.needed[first : last + 1] or [self.needed[-1]]
        return max(ahead)

    def control(self, fleet: FleetView, now: float) -> None:
        target = self.target(now)
        if target != fleet.desired:
            fleet.scale(target)


def _next_meeting_count(
    runs: StaticRuns, settings: EngineSettings, window: int, count: int, max_replicas: int
) -> int:
    """The smallest count above `count` that met the window in a fixed-count run (one more
    when none was run): percentiles are not exactly monotone near the objective."""
    meeting = [
        n for n, run in runs.probed(settings).items() if n > count and runs.meets(run, window)
    ]
    return min(meeting, default=min(count + 1, max_replicas))


def oracle_requirements(
    runs: StaticRuns,
    settings: EngineSettings,
    max_replicas: int,
    startup_s: float,
    gpu_limit: int | None = None,
) -> Requirements:
    """`window_requirements`, checked in closed loop and raised where backlog carried over
    made the oracle miss a window that some count meets (see the module docstring)."""
    requirements = window_requirements(runs, settings, max_replicas)
    counts = list(requirements.counts)
    raised: set[int] = set()
    for _ in range(REFINEMENT_ROUNDS):
        oracle = OracleController(counts, startup_s)
        result = simulate(
            runs.workload(), oracle, runs.profile, settings, oracle.target(0.0), startup_s,
            runs.duration_s, runs.threshold_ms, runs.percentile, gpu_limit=gpu_limit,
            itl_threshold_ms=runs.itl_threshold_ms,
        )  # fmt: skip
        missed = [
            int(start // WINDOW_S)
            for start, met in result.window_verdicts()
            if not met and int(start // WINDOW_S) < len(counts)
        ]
        changed = False
        for w in missed:
            if not requirements.feasible[w]:
                continue
            raise_to = _next_meeting_count(runs, settings, w, counts[w], max_replicas)
            if raise_to > counts[w]:
                counts[w], changed = raise_to, True
            if w in raised and w > 0 and counts[w - 1] < counts[w]:
                counts[w - 1], changed = counts[w], True  # the backlog came from before
            raised.add(w)
        if not changed:
            break
    return Requirements(tuple(counts), requirements.feasible)
