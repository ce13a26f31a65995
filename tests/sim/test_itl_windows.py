"""A window meets the SLA when its TTFT and its ITL meet their objectives, and the oracle
is sized for both."""

from __future__ import annotations

import math

from slascaler_sim.baselines import StaticRuns, window_requirements
from slascaler_sim.engine import Request
from slascaler_sim.fleet import EngineSettings
from slascaler_sim.profiles import PROFILES
from slascaler_sim.recorder import HistogramCounts
from slascaler_sim.run import judge_windows, simulate, window_percentiles
from slascaler_sim.workload import load_trace, modulated_poisson

A100 = PROFILES["llama3-8b-a100"]
BOUNDS_S = (0.01, 0.05, 0.1, 0.2)


def _counts(*per_bucket: float) -> HistogramCounts:
    """A cumulative-source histogram with these counts per bucket (the last is +Inf)."""
    return HistogramCounts(BOUNDS_S, list(per_bucket), 0.0, sum(per_bucket))


def test_a_window_that_met_ttft_but_missed_itl_missed_the_sla() -> None:
    ttft = [(60.0, 400.0), (120.0, 400.0), (180.0, 600.0), (240.0, 400.0)]
    itl = [(60.0, 80.0), (120.0, 150.0), (180.0, 80.0)]  # no token emitted in minute 4
    assert judge_windows(ttft, itl, 500.0, 100.0) == [
        (60.0, True), (120.0, False), (180.0, False), (240.0, True),
    ]  # fmt: skip
    assert judge_windows(ttft, itl, 500.0, None) == [
        (60.0, True), (120.0, True), (180.0, False), (240.0, True),
    ]  # fmt: skip


def test_each_window_reads_what_the_histogram_gained_in_it() -> None:
    marks = [
        (60.0, _counts(0, 0, 0, 0, 0)),
        (120.0, _counts(0, 100, 0, 0, 0)),  # 100 tokens at 10–50 ms
        (180.0, _counts(0, 100, 0, 0, 0)),  # none: not judged
        (240.0, _counts(0, 100, 0, 100, 0)),  # 100 tokens at 100–200 ms
    ]
    windows = window_percentiles(marks, 95.0)
    assert [start for start, _ in windows] == [60.0, 180.0]
    (_, first), (_, third) = windows
    assert 10.0 < first <= 50.0
    assert 100.0 < third <= 200.0


def _conversation(duration: float, rate: float) -> list[Request]:
    rows = load_trace("conversation")
    return modulated_poisson(lambda t: rate, rate, duration, rows, seed=5)


class _Fixed:
    """No autoscaler: the fleet keeps its count."""

    period_s = 60.0
    name = "fixed"

    def control(self, fleet: object, now: float) -> None:
        return None


def test_a_run_judges_itl_in_the_same_windows_as_ttft() -> None:
    duration = 240.0
    result = simulate(
        _conversation(duration, 6.0), _Fixed(), A100, EngineSettings(256, 2048), 1, 60.0,
        duration, 500.0, itl_threshold_ms=100.0,
    )  # fmt: skip
    ttft_starts = [start for start, _ in result.window_p95()]
    itl_starts = [start for start, _ in result.itl_windows]
    assert ttft_starts == [60.0, 120.0, 180.0]
    assert itl_starts == ttft_starts
    assert all(math.isfinite(p) and p > 0 for _, p in result.itl_windows)
    judged = judge_windows(result.window_p95(), result.itl_windows, 500.0, 100.0)
    assert result.window_verdicts() == judged


def test_the_oracle_adds_the_replicas_the_itl_objective_needs() -> None:
    duration, settings = 360.0, EngineSettings(256, 2048)

    def workload() -> list[Request]:
        return _conversation(duration, 12.0)

    ttft_only = StaticRuns(workload, A100, duration, 2000.0)
    by_ttft = window_requirements(ttft_only, settings, 8)
    itl_at = [
        ttft_only.run(settings, n).itl_percentiles[w] for w, n in enumerate(by_ttft.counts)
    ]
    # An ITL objective that some of those windows miss at the count TTFT alone needs.
    itl_objective = sorted(itl_at)[len(itl_at) // 2] - 1.0
    both = StaticRuns(workload, A100, duration, 2000.0, itl_threshold_ms=itl_objective)
    by_both = window_requirements(both, settings, 8)
    assert all(b >= t for b, t in zip(by_both.counts, by_ttft.counts, strict=True))
    assert by_both.counts != by_ttft.counts
    for w, n in enumerate(by_both.counts):
        if by_both.feasible[w]:
            assert both.meets(both.run(settings, n), w), (w, n)
