"""The oracle: knows the future arrivals, pays the start-up delay, uses the fewest GPUs.

For every count n it replays the workload on n always-ready replicas and notes which
1-minute windows meet the TTFT objective; each window's requirement is the smallest such n.
The oracle then asks, at every moment, for the largest requirement of the windows between
now and now + start-up delay + one window (so replicas are ready when the load arrives), and
releases them as soon as no coming window needs them. It is the limit an online autoscaler
can approach, not reach. Called by the benchmarks.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from slascaler_sim.baselines import StaticController
from slascaler_sim.engine import Request
from slascaler_sim.fleet import EngineSettings, Fleet
from slascaler_sim.profiles import CostProfile
from slascaler_sim.run import WINDOW_S, simulate


def window_requirements(
    workload: Callable[[], Sequence[Request]],
    profile: CostProfile,
    settings: EngineSettings,
    duration_s: float,
    threshold_ms: float,
    percentile: float,
    max_replicas: int,
) -> list[int | None]:
    """Per 1-minute window, the fewest always-ready replicas that meet the objective; None
    where no count up to `max_replicas` does (replicas cannot fix that window)."""
    windows = math.ceil(duration_s / WINDOW_S)
    needed: list[int | None] = [None] * windows
    unresolved = set(range(windows))
    for n in range(1, max_replicas + 1):
        result = simulate(
            workload(),
            StaticController(n),
            profile,
            settings,
            n,
            0.0,
            duration_s,
            threshold_ms,
            percentile,
        )
        met = {int(start // WINDOW_S) for start, p in result.window_p95() if p <= threshold_ms}
        empty = set(range(windows)) - {int(s // WINDOW_S) for s, _ in result.window_p95()}
        for w in list(unresolved):
            if w in met or w in empty:
                needed[w] = n if w in met else 1
                unresolved.discard(w)
        if not unresolved:
            break
    return needed


@dataclass
class OracleController:
    """Where no count meets the objective, the oracle runs one replica: more would not help."""

    needed: Sequence[int | None]
    startup_s: float
    period_s: float = 5.0
    name: str = "Oracle"

    def target(self, now: float) -> int:
        first = int(now // WINDOW_S)
        last = int((now + self.startup_s + WINDOW_S) // WINDOW_S)
        ahead = self.needed[first : last + 1] or [self.needed[-1]]
        return max(n or 1 for n in ahead)

    def control(self, fleet: Fleet, now: float) -> None:
        target = self.target(now)
        if target != fleet.desired:
            fleet.scale(target)
