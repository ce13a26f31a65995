"""The benchmark's tables: bench.csv, the markdown tables, the ratios and the targets.

- `CSV_COLUMNS` / `write_csv`: one row per run, snake_case columns in a fixed order so other
  tools can read them (attainment as a fraction 0–1, empty when no window was judged: of the
  SLA, both objectives in one window, and of each objective alone;
  latencies in ms, `inf` for a request never served).
- `markdown_table`: the same runs for people ("n/a", "∞").
- `scenario_ratios`: per scenario, slascaler's GPU-hours and attainment over the oracle's
  and over the best baseline's (the baseline with the highest attainment, then the fewest
  GPU-hours), averaged over seeds.
- `target_verdicts`: each target of the control-quality issue, per scenario and seed, met
  or missed and by how much; beside target 1, the share of the oracle's windows the oracle
  without look-ahead meets (what knowing the present exactly, and not the future, reaches).
- `objectives_table`: per scenario and policy, the share of windows that met the SLA, and
  that met each objective (TTFT, ITL) on its own.
- `benchmark_document`: all of it as `docs/benchmark.md`.
- `pool_table` / `pool_section`: the shared-GPU-pool benchmark (`sim.pool_bench`): per
  arrangement each model's attainment, the priority-weighted attainment, the pool's GPU
  utilisation; `replace_section` puts it under its own heading of `docs/benchmark.md`
  (between markers, so regenerating either part keeps the other);
- the README's summary (`summary_block`, `replace_summary`): the document's ratio and target
  tables between the README's bench-summary markers.

Pure formatting of `sim.benchmark` rows. Called by `slascaler bench`.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from slascaler_sim.benchmark import (
    ABLATIONS,
    ORACLE,
    ORACLE_NO_LOOKAHEAD,
    REPLICAS_ONLY,
    SLASCALER,
    Row,
)
from slascaler_sim.pool_bench import PER_SLA, POOLED, PoolOutcome, PoolScenario
from slascaler_sim.suite import Scenario

CSV_COLUMNS = (
    "scenario",
    "seed",
    "policy",
    "sla_attainment",
    "ttft_attainment",
    "itl_attainment",
    "attainment_where_feasible",
    "feasible_windows",
    "judged_windows",
    "gpu_hours",
    "ttft_p50_ms",
    "ttft_p95_ms",
    "ttft_p99_ms",
    "itl_p95_ms",
    "failed_requests",
    "replica_changes",
    "rolling_restarts",
)
HEADERS = (
    "scenario",
    "seed",
    "policy",
    "SLA attainment",
    "TTFT met",
    "ITL met",
    "where feasible",
    "judged windows",
    "GPU-hours",
    "TTFT p50 ms",
    "TTFT p95 ms",
    "TTFT p99 ms",
    "ITL p95 ms",
    "failed",
    "replica changes",
    "rolling restarts",
)
# Targets 3 compares slascaler with these (the oracles are bounds, not competitors).
COMPETITORS_EXCLUDED = frozenset({SLASCALER, ORACLE, ORACLE_NO_LOOKAHEAD, *ABLATIONS})
WITHIN = 0.02  # target 3: "strictly better on one with the other within 2%"


def _ms_csv(value: float) -> str:
    return "inf" if math.isinf(value) else ("" if math.isnan(value) else f"{value:.1f}")


def _fraction_csv(value: float | None) -> str:
    return "" if value is None else f"{value:.4f}"


def csv_values(row: Row) -> list[str]:
    o = row.outcome
    p50, p95, p99 = o.ttft_ms
    return [
        o.scenario, str(o.seed), o.policy, _fraction_csv(o.attainment),
        _fraction_csv(o.ttft_attainment), _fraction_csv(o.itl_attainment),
        _fraction_csv(row.attainment_where_feasible),
        "" if row.feasible_windows is None else str(row.feasible_windows),
        str(len(o.windows)), f"{o.gpu_hours:.3f}", _ms_csv(p50), _ms_csv(p95), _ms_csv(p99),
        _ms_csv(o.itl_p95_ms), str(o.failed_requests), str(o.replica_changes),
        str(o.rolling_restarts),
    ]  # fmt: skip


def write_csv(rows: Sequence[Row], path: Path) -> None:
    with path.open("w", newline="", encoding="utf-8") as stream:
        writer = csv.writer(stream)
        writer.writerow(CSV_COLUMNS)
        writer.writerows(csv_values(row) for row in rows)


def percent(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def _ms(value: float) -> str:
    return "∞" if math.isinf(value) else ("n/a" if math.isnan(value) else f"{value:.0f}")


def markdown_table(rows: Sequence[Row]) -> str:
    lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    for row in rows:
        o = row.outcome
        p50, p95, p99 = o.ttft_ms
        cells = [
            o.scenario, str(o.seed), o.policy, percent(o.attainment),
            percent(o.ttft_attainment), percent(o.itl_attainment),
            percent(row.attainment_where_feasible), str(len(o.windows)), f"{o.gpu_hours:.2f}",
            _ms(p50), _ms(p95), _ms(p99), _ms(o.itl_p95_ms), str(o.failed_requests),
            str(o.replica_changes), str(o.rolling_restarts),
        ]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _mean(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


@dataclass(frozen=True)
class Ratios:
    scenario: str
    gpu_vs_oracle: float | None
    attainment_vs_oracle: float | None  # slascaler's minus the oracle's, in points
    best_baseline: str | None
    gpu_vs_best: float | None
    attainment_vs_best: float | None  # slascaler's minus the best baseline's, in points


def _policy_means(rows: Sequence[Row], policy: str) -> tuple[float | None, float | None]:
    chosen = [r.outcome for r in rows if r.policy == policy]
    return _mean(o.attainment for o in chosen), _mean(o.gpu_hours for o in chosen)


def scenario_ratios(rows: Sequence[Row]) -> list[Ratios]:
    out = []
    for scenario in dict.fromkeys(r.scenario for r in rows):
        here = [r for r in rows if r.scenario == scenario]
        attainment, gpu = _policy_means(here, SLASCALER)
        oracle_attainment, oracle_gpu = _policy_means(here, ORACLE)
        baselines = {
            p: _policy_means(here, p)
            for p in dict.fromkeys(r.policy for r in here)
            if p not in COMPETITORS_EXCLUDED
        }
        best = max(
            baselines.items(),
            key=lambda item: (item[1][0] or 0.0, -(item[1][1] or math.inf)),
            default=None,
        )
        out.append(
            Ratios(
                scenario,
                gpu / oracle_gpu if gpu is not None and oracle_gpu else None,
                _points(attainment, oracle_attainment),
                best[0] if best else None,
                gpu / best[1][1] if best and gpu is not None and best[1][1] else None,
                _points(attainment, best[1][0]) if best else None,
            )
        )
    return out


def _points(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else 100.0 * (a - b)


def ratios_table(ratios: Sequence[Ratios]) -> str:
    lines = [
        "| scenario | GPU-hours / oracle | attainment − oracle | best baseline | "
        "GPU-hours / best | attainment − best |",
        "|---|---|---|---|---|---|",
    ]
    for r in ratios:
        lines.append(
            f"| {r.scenario} | {_ratio(r.gpu_vs_oracle)} | {_signed(r.attainment_vs_oracle)} | "
            f"{r.best_baseline or 'n/a'} | {_ratio(r.gpu_vs_best)} | "
            f"{_signed(r.attainment_vs_best)} |"
        )
    return "\n".join(lines) + "\n"


def _ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}×"


def _signed(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.1f} pts"


@dataclass(frozen=True)
class Verdict:
    target: str
    scenario: str
    seed: int
    met: bool
    detail: str


def _dominates(attainment: float, gpu: float, other_attainment: float, other_gpu: float) -> bool:
    """Target 3: as good on both, or strictly better on one with the other within 2%."""
    better_or_equal = attainment >= other_attainment and gpu <= other_gpu
    ahead_on_attainment = attainment > other_attainment and gpu <= other_gpu * (1 + WITHIN)
    ahead_on_gpus = gpu < other_gpu and attainment >= other_attainment - WITHIN
    return better_or_equal or ahead_on_attainment or ahead_on_gpus


def target_verdicts(rows: Sequence[Row], scenarios: Sequence[Scenario]) -> list[Verdict]:
    """Targets 1–5 of the control-quality issue, for every scenario and seed."""
    tags = {s.name: s.tags for s in scenarios}
    verdicts: list[Verdict] = []
    for (scenario, seed), group in _groups(rows).items():
        mine = group.get(SLASCALER)
        oracle = group.get(ORACLE)
        if mine is None:
            continue
        o = mine.outcome
        attainment = o.attainment
        where = mine.attainment_where_feasible
        if where is not None:
            blind = group.get(ORACLE_NO_LOOKAHEAD)
            beside = (
                f" (oracle without look-ahead: {blind.attainment_where_feasible:.3f})"
                if blind is not None and blind.attainment_where_feasible is not None
                else ""
            )
            verdicts.append(
                Verdict(
                    "1 attainment where feasible ≥ 0.99",
                    scenario,
                    seed,
                    where >= 0.99,
                    f"{where:.3f} of {mine.feasible_windows} windows{beside}",
                )
            )
        if oracle is not None and (oracle.outcome.attainment or 0.0) >= 0.9:
            ratio = o.gpu_hours / oracle.outcome.gpu_hours
            verdicts.append(
                Verdict(
                    "2 GPU-hours ≤ 1.15× oracle", scenario, seed, ratio <= 1.15, f"{ratio:.2f}×"
                )
            )
        if attainment is not None:
            for policy, other in group.items():
                if policy in COMPETITORS_EXCLUDED or other.outcome.attainment is None:
                    continue
                ok = _dominates(
                    attainment, o.gpu_hours, other.outcome.attainment, other.outcome.gpu_hours
                )
                verdicts.append(
                    Verdict(
                        f"3 vs {policy}",
                        scenario,
                        seed,
                        ok,
                        f"{attainment:.1%} on {o.gpu_hours:.2f} GPU-h vs "
                        f"{other.outcome.attainment:.1%} on {other.outcome.gpu_hours:.2f}",
                    )
                )
        if attainment is not None and tags.get(scenario, frozenset()) & {
            "prefill-bound",
            "long-context",
        }:
            best = max(
                (r.outcome.attainment or 0.0 for p, r in group.items() if p in REPLICAS_ONLY),
                default=0.0,
            )
            gap = 100 * (attainment - best)
            restarts = o.rolling_restarts / (o.duration_s / 3600)
            verdicts.append(
                Verdict(
                    "4 ≥ 40 pts above the best replicas-only policy",
                    scenario,
                    seed,
                    gap >= 40,
                    f"{gap:+.1f} pts, {restarts:.1f} rolling restarts/h",
                )
            )
        if "partially-infeasible" in tags.get(scenario, frozenset()) and oracle is not None:
            ratio = o.gpu_hours / oracle.outcome.gpu_hours
            pinned = o.longest_at_max_s
            verdicts.append(
                Verdict(
                    "5 never pinned at max, GPU-hours ≤ 1.3× oracle",
                    scenario,
                    seed,
                    pinned < 600 and ratio <= 1.3,
                    f"longest at max {pinned / 60:.0f} min, {ratio:.2f}× oracle",
                )
            )
    return verdicts


def _groups(rows: Sequence[Row]) -> dict[tuple[str, int], dict[str, Row]]:
    groups: dict[tuple[str, int], dict[str, Row]] = {}
    for row in rows:
        groups.setdefault((row.scenario, row.outcome.seed), {})[row.policy] = row
    return groups


def verdicts_table(verdicts: Sequence[Verdict]) -> str:
    lines = ["| target | scenario | seed | met | figure |", "|---|---|---|---|---|"]
    for v in verdicts:
        lines.append(
            f"| {v.target} | {v.scenario} | {v.seed} | {'yes' if v.met else '**no**'} | "
            f"{v.detail} |"
        )
    return "\n".join(lines) + "\n"


def ablations_table(rows: Sequence[Row]) -> str:
    """Per scenario, slascaler and each variant with one mechanism off (mean over seeds)."""
    variants = [p for p in ABLATIONS if any(r.policy == p for r in rows)]
    if not variants:
        return ""
    lines = [
        "| scenario | " + " | ".join([SLASCALER, *variants]) + " |",
        "|---|" + "---|" * (1 + len(variants)),
    ]
    for scenario in dict.fromkeys(r.scenario for r in rows):
        here = [r for r in rows if r.scenario == scenario]
        cells = []
        for policy in (SLASCALER, *variants):
            attainment, gpu = _policy_means(here, policy)
            if gpu is None:
                cells.append("—")
            else:
                cells.append(f"{percent(attainment)} on {gpu:.2f} GPU-h")
        if any(c != "—" for c in cells[1:]):
            lines.append(f"| {scenario} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def objectives_table(rows: Sequence[Row]) -> str:
    """Per scenario and policy (not the ablations; mean over seeds): the share of windows
    that met the SLA, and of those whose TTFT and whose ITL met their own objective."""
    policies = [p for p in dict.fromkeys(r.policy for r in rows) if p not in ABLATIONS]
    lines = [
        "| scenario | " + " | ".join(policies) + " |",
        "|---|" + "---|" * len(policies),
    ]
    for scenario in dict.fromkeys(r.scenario for r in rows):
        cells = []
        for policy in policies:
            chosen = [r.outcome for r in rows if r.scenario == scenario and r.policy == policy]
            sla = _mean(o.attainment for o in chosen)
            ttft = _mean(o.ttft_attainment for o in chosen)
            itl = _mean(o.itl_attainment for o in chosen)
            cells.append(
                "—" if not chosen else f"{percent(sla)} ({percent(ttft)} · {percent(itl)})"
            )
        lines.append(f"| {scenario} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def benchmark_document(
    rows: Sequence[Row], scenarios: Sequence[Scenario], command: str, header: str
) -> str:
    verdicts = target_verdicts(rows, scenarios)
    met = sum(v.met for v in verdicts)
    parts = [
        "# Benchmark results\n",
        f"Generated by `{command}`. {header}\n",
        "## Ratios per scenario (slascaler, mean over seeds)\n",
        ratios_table(scenario_ratios(rows)),
        f"## Targets of the control-quality issue: {met} of {len(verdicts)} met\n",
        verdicts_table(verdicts),
        "## SLA attainment by objective: the SLA (TTFT · ITL), mean over seeds\n",
        objectives_table(rows),
        "## Ablations: each mechanism with and without (SLA attainment on GPU-hours)\n",
        ablations_table(rows) or "(run with --ablations)\n",
        "## Every run\n",
        markdown_table(rows),
    ]
    return "\n".join(parts)


# -- the shared-GPU-pool benchmark ----------------------------------------------------------

POOL_START, POOL_END = "<!-- pool-benchmark:start -->", "<!-- pool-benchmark:end -->"
POOL_TARGET_POINTS = 20.0  # the high-priority SLA's attainment, pool vs per SLA


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def pool_table(outcomes: Sequence[PoolOutcome]) -> str:
    """One row per arrangement (mean over seeds): each model's attainment, then the
    priority-weighted attainment, the pool's GPU utilisation and the moves."""
    if not outcomes:
        return ""
    models = [(m.model, m.priority) for m in outcomes[0].models]
    head = [
        "arrangement",
        *(f"{name} (priority {priority})" for name, priority in models),
        "priority-weighted",
        "GPU utilisation",
        "pool moves",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    arrangements = list(dict.fromkeys(o.arrangement for o in outcomes))
    for arrangement in arrangements:
        runs = [o for o in outcomes if o.arrangement == arrangement]
        cells = [arrangement]
        for index in range(len(models)):
            cells.append(_percent(_mean(r.models[index].attainment for r in runs)))
        cells.append(_percent(_mean(r.weighted_attainment for r in runs)))
        cells.append(_percent(_mean(r.utilisation for r in runs)))
        cells.append(f"{sum(r.moves for r in runs) / len(runs):.0f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def pool_seed_table(outcomes: Sequence[PoolOutcome]) -> str:
    """Every run: per model attainment, TTFT p95 and GPU-hours."""
    lines = [
        "| arrangement | seed | model | priority | SLA attainment | TTFT p95 ms | peak replicas "
        "| GPU-hours |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for outcome in outcomes:
        for m in outcome.models:
            p95 = "∞" if math.isinf(m.ttft_p95_ms) else f"{m.ttft_p95_ms:.0f}"
            lines.append(
                f"| {outcome.arrangement} | {outcome.seed} | {m.model} | {m.priority} | "
                f"{_percent(m.attainment)} | {p95} | {m.peak_replicas} | {m.gpu_hours:.2f} |"
            )
    return "\n".join(lines) + "\n"


def pool_verdict(outcomes: Sequence[PoolOutcome]) -> tuple[float | None, bool]:
    """The highest-priority model's attainment with the pool minus without it (points)."""
    if not outcomes:
        return None, False
    top = max(range(len(outcomes[0].models)), key=lambda i: outcomes[0].models[i].priority)
    pooled = _mean(o.models[top].attainment for o in outcomes if o.arrangement == POOLED)
    alone = _mean(o.models[top].attainment for o in outcomes if o.arrangement == PER_SLA)
    if pooled is None or alone is None:
        return None, False
    points = 100 * (pooled - alone)
    return points, points >= POOL_TARGET_POINTS


def pool_section(
    outcomes: Sequence[PoolOutcome], scenario: PoolScenario, command: str, header: str
) -> str:
    points, met = pool_verdict(outcomes)
    top = max(scenario.models, key=lambda m: m.priority)
    verdict = (
        "n/a"
        if points is None
        else f"{points:+.1f} points ({'met' if met else 'missed'}: target ≥ "
        f"{POOL_TARGET_POINTS:.0f})"
    )
    models = "; ".join(
        f"{m.name}: priority {m.priority}, {m.profile.name}, TTFT p95 ≤ {m.threshold_ms:g} ms"
        + (f", ITL p95 ≤ {m.itl_ms:g} ms" if m.itl_ms is not None else "")
        + f", {m.min_replicas}–{m.max_replicas} replicas"
        for m in scenario.models
    )
    return "\n".join(
        [
            POOL_START,
            "## Shared GPU pool: peaks that collide\n",
            f"Generated by `{command}`. {header}\n",
            f"Scenario *{scenario.name}*: {len(scenario.models)} models on {scenario.gpus} "
            f"GPUs for {scenario.duration_s / 60:.0f} minutes ({models}). Priority-weighted "
            "attainment = Σ priority × attainment / Σ priority; GPU utilisation = GPU-hours "
            "held by the models' pods / (GPUs × hours); pool moves = moves of GPUs between "
            "members the arbitration made, per run (each an Event on both InferenceSLAs).\n",
            pool_table(outcomes),
            f"The high-priority SLA ({top.name}) with the pool vs slascaler per SLA without "
            f"it, at equal GPUs: {verdict}.\n",
            "### Every run\n",
            pool_seed_table(outcomes),
            POOL_END,
        ]
    )


def replace_section(document: str, section: str) -> str:
    """`document` with its pool-benchmark section replaced by `section` (or appended)."""
    start, end = document.find(POOL_START), document.find(POOL_END)
    if start >= 0 and end > start:
        return document[:start] + section + document[end + len(POOL_END) :]
    return document.rstrip("\n") + "\n\n" + section + "\n"


# -- the README's summary of the benchmark document -------------------------------------------

SUMMARY_START, SUMMARY_END = "<!-- bench-summary:start -->", "<!-- bench-summary:end -->"
_RATIOS = "## Ratios per scenario"
_TARGETS = "## Targets of the control-quality issue"


def _targets_per_scenario(section: str) -> str:
    """The target verdicts (one row per target, scenario and seed) counted per scenario and
    target: `met/judged`, so that the README shows every target on a screen."""
    counts: dict[str, dict[str, list[int]]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 5 or not cells[0][:1].isdigit():
            continue  # the heading, the header row or the separator
        target, scenario, met = cells[0].split()[0], cells[1], cells[3] == "yes"
        tally = counts.setdefault(scenario, {}).setdefault(target, [0, 0])
        tally[0] += met
        tally[1] += 1
    targets = sorted({t for per in counts.values() for t in per})
    lines = ["| scenario | " + " | ".join(f"target {t}" for t in targets) + " |",
             "|---|" + "---|" * len(targets)]  # fmt: skip
    for scenario, per in counts.items():
        cells = [f"{per[t][0]}/{per[t][1]}" if t in per else "–" for t in targets]
        lines.append(f"| {scenario} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summary_block(document: str, link: str) -> str:
    """For the README: the ratio table of a benchmark document (as `benchmark_document`
    writes it) and its target verdicts counted per scenario (met/judged), with a link."""
    sections = re.split(r"(?m)^(?=## )", document)
    ratios = next((s for s in sections if s.startswith(_RATIOS)), None)
    targets = next((s for s in sections if s.startswith(_TARGETS)), None)
    if ratios is None or targets is None:
        raise ValueError("the benchmark document has no ratio or target tables")
    lines = document.splitlines()
    generated = next((line for line in lines if line.startswith("Generated by")), "")
    heading = targets.splitlines()[0]
    return "\n".join([
        SUMMARY_START, f"From [{link}]({link}). {generated}", "",
        "#" + ratios.rstrip("\n"), "",
        f"#{heading} (per scenario: met/judged over seeds and baselines; target 3 is judged "
        "once per baseline; every verdict with its figure is in the document)", "",
        _targets_per_scenario(targets), SUMMARY_END,
    ])  # fmt: skip


def replace_summary(readme: str, block: str) -> str:
    """`readme` with its bench-summary block replaced by `block`; it must have one."""
    start, end = readme.find(SUMMARY_START), readme.find(SUMMARY_END)
    if start < 0 or end < start:
        raise ValueError(f"no {SUMMARY_START} … {SUMMARY_END} block to replace")
    return readme[:start] + block + readme[end + len(SUMMARY_END) :]


def kept_section(document: str) -> str:
    """The pool-benchmark section of `document`, if it has one (to keep it on a rewrite)."""
    start, end = document.find(POOL_START), document.find(POOL_END)
    return document[start : end + len(POOL_END)] if start >= 0 and end > start else ""
