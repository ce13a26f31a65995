"""Plots of simulated runs: the demo's timeline and the benchmark's policy comparison.

matplotlib is imported inside each function (Agg backend), so importing this module costs
nothing and the operator never needs matplotlib. Called by `sim.demo` and `slascaler bench`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slascaler_sim.run import RunResult

if TYPE_CHECKING:
    from slascaler_sim.benchmark import Row

REGIME_COLOURS = {
    "QueueBound": "#d62728",
    "PrefillBound": "#9467bd",
    "DecodeBound": "#ff7f0e",
    "Healthy": "#2ca02c",
    "Idle": "#7f7f7f",
    "Unknown": "#cccccc",
}


# Bar colours (matplotlib's "tab20"), taken in order; past 20 policies the cycle repeats
# with another hatch. slascaler's ablation rows are hatched too, so they read as one family.
BAR_COLOURS = (
    "#1f77b4", "#aec7e8", "#ff7f0e", "#ffbb78", "#2ca02c", "#98df8a", "#d62728", "#ff9896",
    "#9467bd", "#c5b0d5", "#8c564b", "#c49c94", "#e377c2", "#f7b6d2", "#7f7f7f", "#c7c7c7",
    "#bcbd22", "#dbdb8d", "#17becf", "#9edae5",
)  # fmt: skip
CYCLE_HATCHES = ("", "..", "xx", "oo")
ABLATION_PREFIX = "slascaler −"


def bar_styles(policies: Sequence[str]) -> list[tuple[str, str]]:
    """A (colour, hatch) per policy, no two alike: colours in order, another hatch once they
    have all been used; an ablation row ("slascaler − …") adds "//" to its hatch."""
    styles = []
    for index, policy in enumerate(policies):
        colour = BAR_COLOURS[index % len(BAR_COLOURS)]
        hatch = CYCLE_HATCHES[(index // len(BAR_COLOURS)) % len(CYCLE_HATCHES)]
        if policy.startswith(ABLATION_PREFIX):
            hatch += "//"
        styles.append((colour, hatch))
    return styles


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_demo(results: Sequence[RunResult], threshold_ms: float, path: Path) -> None:
    plt = _pyplot()
    figure, (latency, replicas, regimes) = plt.subplots(
        3, 1, figsize=(10, 8), sharex=True, gridspec_kw={"height_ratios": [3, 2, 0.6]}
    )
    for result in results:
        windows = result.window_p95()
        latency.plot(
            [s / 60 for s, _ in windows],
            [p if math.isfinite(p) else float("nan") for _, p in windows],
            marker=".", label=result.name,
        )  # fmt: skip
        replicas.step(
            [s.at / 60 for s in result.timeline], [s.gpus for s in result.timeline],
            where="post", label=result.name,
        )  # fmt: skip
    latency.axhline(threshold_ms, color="black", linestyle="--", label="SLA")
    latency.set_yscale("log")
    latency.set_ylabel("TTFT p95 per minute (ms)")
    latency.legend()
    replicas.set_ylabel("GPUs (replicas)")
    replicas.legend()
    slascaler = results[0]
    for sample in slascaler.timeline:
        colour = REGIME_COLOURS.get(sample.regime, "#cccccc")
        regimes.axvspan(sample.at / 60, sample.at / 60 + 5 / 60, color=colour, linewidth=0)
    regimes.set_yticks([])
    regimes.set_ylabel("regime")
    from matplotlib.patches import Patch

    handles = [Patch(color=c) for c in REGIME_COLOURS.values()]
    regimes.legend(handles, REGIME_COLOURS.keys(), ncol=6, fontsize=7, loc="upper center",
                   bbox_to_anchor=(0.5, -0.6))  # fmt: skip
    regimes.set_xlabel("minutes")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)


def plot_bench(rows: Sequence[Row], path: Path) -> None:
    """Per scenario, GPU-hours and SLA attainment of each policy (first seed)."""
    plt = _pyplot()
    scenarios = list(dict.fromkeys(row.scenario for row in rows))
    policies = list(dict.fromkeys(row.policy for row in rows))
    figure, axes = plt.subplots(2, 1, figsize=(17, 8), sharex=True)
    width = 0.8 / max(1, len(policies))
    styles = bar_styles(policies)
    for index, (policy, (colour, hatch)) in enumerate(zip(policies, styles, strict=True)):
        hours, attainment = [], []
        for scenario in scenarios:
            chosen = [r.outcome for r in rows if r.scenario == scenario and r.policy == policy]
            share = chosen[0].attainment if chosen else None
            hours.append(chosen[0].gpu_hours if chosen else math.nan)
            attainment.append(100 * share if share is not None else math.nan)
        xs = [i + index * width for i in range(len(scenarios))]
        style = {"color": colour, "hatch": hatch, "edgecolor": "white", "linewidth": 0}
        axes[0].bar(xs, hours, width, label=policy, **style)
        axes[1].bar(xs, attainment, width, label=policy, **style)
    axes[0].set_ylabel("GPU-hours")
    axes[0].set_yscale("log")
    # Beside the axes, not on them: with every ablation there are too many policies to fit.
    axes[0].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    axes[1].set_ylabel("SLA attainment (% of 1-min windows)")
    axes[1].set_ylim(0, 105)
    axes[1].set_xticks([i + 0.4 - width / 2 for i in range(len(scenarios))])
    axes[1].set_xticklabels(scenarios, rotation=15, fontsize=8)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
