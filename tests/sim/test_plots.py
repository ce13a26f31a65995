"""The benchmark plot tells every policy apart, however many the run compares."""

from __future__ import annotations

from pathlib import Path

import pytest

from slascaler_sim.benchmark import ABLATIONS, BASELINES, ORACLE, SLASCALER, Outcome, rows
from slascaler_sim.plots import bar_styles, plot_bench


def test_every_policy_of_the_full_benchmark_gets_its_own_bar_style() -> None:
    policies = list(dict.fromkeys([SLASCALER, *BASELINES, ORACLE, *ABLATIONS]))
    styles = bar_styles(policies)
    assert len(policies) > 10  # more than matplotlib's default cycle of 10 colours
    assert len(set(styles)) == len(policies), list(zip(policies, styles, strict=True))


def test_styles_stay_distinct_past_the_palette_and_ablations_are_hatched() -> None:
    policies = [f"policy {i}" for i in range(30)] + [f"slascaler − part {i}" for i in range(30)]
    styles = bar_styles(policies)
    assert len(set(styles)) == len(policies)
    for policy, (_, hatch) in zip(policies, styles, strict=True):
        assert ("//" in hatch) == policy.startswith("slascaler −"), (policy, hatch)


def test_plot_bench_writes_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    windows = ((0.0, 100.0), (60.0, 900.0))
    policies = [SLASCALER, ORACLE, "slascaler − trend"]
    outcomes = [
        Outcome("step", 1, p, 500.0, windows, 1.0 + i, (0, 0, 0), 10, 0, 0, 0, 0, 120, (), 0)
        for i, p in enumerate(policies)
    ]
    path = tmp_path / "bench.png"
    plot_bench(rows(outcomes), path)
    assert path.read_bytes().startswith(b"\x89PNG")
