"""Offline profiling runs: the workload on a fixed fleet, and each window's replica need.

What a careful engineer measures before deploying, with the future known: one simulated run
of the whole workload on n always-ready replicas at fixed engine settings gives every
1-minute window's TTFT percentile at n, and its ITL percentile where the SLA has an ITL
objective (`StaticRuns` makes each run at most once, so the oracle and the hindsight-best
static search share them; `StaticRuns.meets` judges a window as `run.judge_windows` does).

`window_requirements` finds, per window, the fewest replicas that meet the SLA (TTFT and
ITL); where none up to `max_replicas` does but some count meets the TTFT objective (an ITL
that no count brings down: the engine flags make it), the fewest that meet the TTFT
objective; where none meets even that, the count that gives the lowest TTFT percentile: the
fewest replicas within 1% (`LOWEST_PERCENTILE_TIE`: the same minute's percentile up to
noise) of the percentile at `max_replicas` (more replicas are assumed not to make a window
slower, so the lowest is at the maximum). Cheaply: counts are probed by doubling (1, 2, 4, …)
until every window is met or `max_replicas` is reached; then each window's requirement is
bisected between the largest count that failed it and the smallest that met it, all windows
at once (each further run is at the median of the open windows' midpoints), exactly up to 8
replicas and within an eighth above that. That assumes a window's percentiles do not rise
with more replicas; it takes about log2(max) runs plus a few per distinct requirement,
instead of one per count. Windows are judged as if independent; `baselines.oracle` corrects
for the backlog one window hands the next.

Called by `baselines.oracle` and `baselines.static`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from slascaler_sim.baselines.interface import FleetView
from slascaler_sim.engine import Request
from slascaler_sim.fleet import EngineSettings
from slascaler_sim.profiles import CostProfile
from slascaler_sim.run import WINDOW_S, itl_meets, simulate

LOWEST_PERCENTILE_TIE = 0.01


@dataclass
class _Hold:
    """Keeps the fleet as it started: no autoscaler."""

    period_s: float = 60.0
    name: str = "fixed"

    def control(self, fleet: FleetView, now: float) -> None:
        return None


@dataclass(frozen=True)
class StaticRun:
    """One window-by-window outcome of the workload on a fixed fleet."""

    percentiles: tuple[float, ...]  # per 1-minute window from t=0; NaN: no arrival in it
    itl_p95_ms: float
    # ITL percentile per 1-minute window from t=0; NaN: no token emitted in it
    itl_percentiles: tuple[float, ...] = ()


@dataclass
class StaticRuns:
    """Runs of one workload on n always-ready replicas with fixed engine settings, each made
    at most once."""

    workload: Callable[[], Sequence[Request]]
    profile: CostProfile
    duration_s: float
    threshold_ms: float
    percentile: float = 95.0
    itl_threshold_ms: float | None = None  # the ITL objective (None: the SLA has none)
    _cache: dict[tuple[EngineSettings, int], StaticRun] = field(default_factory=dict)

    @property
    def windows(self) -> int:
        return math.ceil(self.duration_s / WINDOW_S)

    @property
    def runs_made(self) -> int:
        return len(self._cache)

    def run(self, settings: EngineSettings, replicas: int) -> StaticRun:
        key = (settings, replicas)
        if key not in self._cache:
            result = simulate(
                self.workload(), _Hold(), self.profile, settings,
                replicas, 0.0, self.duration_s, self.threshold_ms, self.percentile,
            )  # fmt: skip
            # A window with unserved requests that comes back NaN (inf − inf in the
            # interpolation) is a missed window, not an empty one.
            ttft = ((start, math.inf if math.isnan(p) else p) for start, p in result.window_p95())
            self._cache[key] = StaticRun(
                self._by_window(ttft), result.itl_p95_ms, self._by_window(result.itl_windows)
            )
        return self._cache[key]

    def _by_window(self, values: Iterable[tuple[float, float]]) -> tuple[float, ...]:
        """(window start, value) pairs as one value per window from t=0, NaN where none."""
        out = [math.nan] * self.windows
        for start, value in values:
            if int(start // WINDOW_S) < self.windows:
                out[int(start // WINDOW_S)] = value
        return tuple(out)

    def ttft_meets(self, run: StaticRun, window: int) -> bool:
        """The window's TTFT percentile meets the objective (an empty window needs nothing)."""
        p = run.percentiles[window]
        return math.isnan(p) or p <= self.threshold_ms

    def meets(self, run: StaticRun, window: int) -> bool:
        """The window meets the SLA: its TTFT and, with an ITL objective, its ITL (a minute
        that emitted no token has nothing to miss)."""
        if not self.ttft_meets(run, window):
            return False
        if window >= len(run.itl_percentiles):
            return True
        return itl_meets(run.itl_percentiles[window], self.itl_threshold_ms)

    def probed(self, settings: EngineSettings) -> dict[int, StaticRun]:
        return {n: run for (s, n), run in self._cache.items() if s == settings}


@dataclass(frozen=True)
class Requirements:
    """Per window: the replicas the oracle needs, and whether that count meets the SLA
    (False: no count up to the maximum does; the count meets the TTFT objective alone, or
    gives the lowest TTFT percentile)."""

    counts: tuple[int, ...]
    feasible: tuple[bool, ...]

    def peak(self) -> int:
        return max(self.counts, default=1)


def _resolution(lo: int) -> int:
    """How close the search brackets a requirement: exactly up to 8 replicas, within an
    eighth above (a window needing 20 may be given 22), which spares most runs at high
    counts, where the percentile is flat enough for neighbouring counts to be noise."""
    return max(1, lo // 8)


def window_requirements(
    runs: StaticRuns,
    settings: EngineSettings,
    max_replicas: int,
    lowest_percentile: bool = True,
) -> Requirements:
    """Per 1-minute window, the fewest always-ready replicas that meet the SLA; where none up
    to `max_replicas` does, the fewest that meet the TTFT objective, else the count with the
    lowest TTFT percentile (or `max_replicas` when `lowest_percentile` is False: callers that
    only need the feasible windows)."""
    windows = runs.windows

    # Doubling: the smallest power of two meeting every window, or the maximum.
    n = 1
    while True:
        probe = runs.run(settings, n)
        if all(runs.meets(probe, w) for w in range(windows)) or n >= max_replicas:
            break
        n = min(2 * n, max_replicas)

    probes = runs.probed(settings)
    feasible = [any(runs.meets(run, w) for run in probes.values()) for w in range(windows)]
    ttft_feasible = [any(runs.ttft_meets(r, w) for r in probes.values()) for w in range(windows)]
    limits: list[float] = [runs.threshold_ms] * windows
    for w in range(windows):
        if not ttft_feasible[w] and lowest_percentile:
            limits[w] = probes[max_replicas].percentiles[w] * (1 + LOWEST_PERCENTILE_TIE)

    def ok(w: int, run: StaticRun) -> bool:
        if feasible[w]:
            return runs.meets(run, w)
        p = run.percentiles[w]
        return math.isnan(p) or p <= limits[w]

    # Bisection, all windows at once. lo: largest count known to fail; hi: smallest to pass.
    lo = [0] * windows
    hi = [max_replicas] * windows
    for w in range(windows):
        if not feasible[w] and not lowest_percentile:
            lo[w] = max_replicas - 1  # resolved: nothing to search
            continue
        for count, run in sorted(probes.items()):
            if ok(w, run):
                hi[w] = min(hi[w], count)
        for count, run in sorted(probes.items()):
            if count < hi[w] and not ok(w, run):
                lo[w] = max(lo[w], count)
    while True:
        open_windows = [w for w in range(windows) if hi[w] - lo[w] > _resolution(lo[w])]
        if not open_windows:
            break
        count = int(statistics.median_low([(lo[w] + hi[w]) // 2 for w in open_windows]))
        run = runs.run(settings, count)
        for w in open_windows:
            if lo[w] < count < hi[w]:
                if ok(w, run):
                    hi[w] = count
                else:
                    lo[w] = count
    return Requirements(tuple(max(1, h) for h in hi), tuple(feasible))
