"""`slascaler demo` and `slascaler bench`: the simulator's subcommands of the `slascaler` CLI.

The operator's command line finds them through the `slascaler.commands` entry point that
this distribution (`slascaler-sim`) declares, so the operator itself never imports the
simulator. `register` adds the subcommands to the parser's subcommand group.

`slascaler bench` runs the policy × scenario matrix (`sim.benchmark`) on the default suite
or on a user's trace, prints the tables, and writes files only when asked (`--out` for
bench.csv, bench.md and bench.png; `--doc` for docs/benchmark.md). `slascaler bench --pools`
runs the shared-GPU-pool benchmark (`sim.pool_bench`) instead; with `--doc` it replaces only
its own section of the document (and the matrix's `--doc` keeps that section).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path
from typing import Any, TextIO

EXIT_BAD_INPUT = 2


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be ≥ 1, got {text}")
    return value


def _percentile(text: str) -> float:
    value = _positive(text)
    if not value < 100:
        raise argparse.ArgumentTypeError(f"must be between 0 and 100 exclusive, got {text}")
    return value


def _seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be whole numbers separated by commas, e.g. 1,2; got {text!r}"
        ) from None
    if not seeds:
        raise argparse.ArgumentTypeError("give at least one seed, e.g. 1")
    return seeds


class Progress:
    """A progress bar on standard error, shown once a run has taken a few seconds."""

    def __init__(self, err: TextIO, label: str, after_s: float = 3.0) -> None:
        self.err, self.label, self.after_s = err, label, after_s
        self.started = time.monotonic()
        self.shown = False

    def __call__(self, done: int, total: int) -> None:
        elapsed = time.monotonic() - self.started
        if elapsed < self.after_s and done < total:
            return
        if not self.shown and done >= total and elapsed < self.after_s:
            return
        width = 30
        filled = int(width * done / max(1, total))
        self.err.write(
            f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] {done}/{total} "
            f"{int(elapsed) // 60}m{int(elapsed) % 60:02d}s"
        )
        if done >= total:
            self.err.write("\n")
        self.err.flush()
        self.shown = True


def _demo(args: argparse.Namespace, out: TextIO) -> int:
    from slascaler_sim.demo import run_demo

    run_demo(args.minutes, Path(args.plot) if args.plot else None, out)
    return 0


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    from slascaler_sim.profiles import PROFILES

    chosen: dict[str, Any] = {}
    if args.ttft_ms is not None:
        chosen["threshold_ms"] = args.ttft_ms
    if args.itl_ms is not None:
        chosen["itl_ms"] = args.itl_ms
    if args.percentile is not None:
        chosen["percentile"] = args.percentile
    if args.profile is not None:
        chosen["profile"] = PROFILES[args.profile]
    if args.startup_s is not None:
        chosen["startup_s"] = args.startup_s
    if args.max_replicas is not None:
        chosen["max_replicas"] = args.max_replicas
    if args.router is not None:
        chosen["router"] = args.router
    return chosen


def _bench(args: argparse.Namespace, out: TextIO, err: TextIO | None = None) -> int:
    from slascaler_sim.benchmark import (
        ABLATIONS,
        BASELINES,
        POLICIES,
        rows,
        run_matrix,
        seeds_for,
        simulator_speed,
    )
    from slascaler_sim.report import benchmark_document, markdown_table, write_csv
    from slascaler_sim.suite import default_scenarios, trace_scenario
    from slascaler_sim.workload import TraceError, read_trace

    err = err or sys.stderr
    if args.pools:
        return _bench_pools(args, out, err)
    if args.speed:
        count, cpu, ratio = simulator_speed()
        out.write(
            f"simulator: 1 h of the conversation trace ({count} requests) on 8 replicas in "
            f"{cpu:.2f} s of CPU: {ratio:.0f}× real time\n"
        )
        return 0
    minutes = 8.0 if args.quick and args.minutes is None else args.minutes
    overrides = _overrides(args)
    if args.trace:
        try:
            trace = read_trace(Path(args.trace))
        except (TraceError, OSError) as error:
            print(f"slascaler bench: {error}", file=err)
            return EXIT_BAD_INPUT
        for note in trace.notes:
            print(f"slascaler bench: {note}", file=err)
        scenario = trace_scenario(
            trace, Path(args.trace).name, args.copies, minutes, args.speedup, **overrides
        )
        scenarios = [scenario]
    else:
        if args.copies != 1 or args.speedup != 1.0:
            print("slascaler bench: --copies and --speedup apply to --trace", file=err)
            return EXIT_BAD_INPUT
        scenarios = [dataclasses.replace(s, **overrides) for s in default_scenarios(minutes)]
        if args.scenario:
            scenarios = [s for s in scenarios if any(k in s.name for k in args.scenario)]
            if not scenarios:
                print(f"slascaler bench: no scenario matches {args.scenario}", file=err)
                return EXIT_BAD_INPUT
    seeds = args.seeds[:1] if args.quick else args.seeds
    for scenario in scenarios:
        if not scenario.seeded and len(seeds) > 1:
            print(
                f"slascaler bench: {scenario.name}: a trace replayed once is the same for "
                "every seed: one run (use --copies to superpose rotated copies)",
                file=err,
            )
        if scenario.duration_s < scenario.startup_s + 60:
            print(
                f"slascaler bench: {scenario.name}: {scenario.duration_s:.0f} s is not longer "
                f"than the start-up ({scenario.startup_s:.0f} s) plus one window: no window "
                "can be judged",
                file=err,
            )
    policies = args.policies or list(BASELINES)
    if args.ablations:
        policies += [p for p in ABLATIONS if p not in policies]
    if args.summary and not args.doc:
        print("slascaler bench: --summary copies the tables of the --doc report: give --doc too",
              file=err)  # fmt: skip
        return EXIT_BAD_INPUT
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        print(
            f"slascaler bench: unknown policy {unknown[0]!r}; choose from {', '.join(POLICIES)}",
            file=err,
        )
        return EXIT_BAD_INPUT
    total_runs = sum(len(seeds_for(s, seeds)) for s in scenarios)
    started = time.monotonic()
    outcomes = run_matrix(
        scenarios, seeds, policies, jobs=args.jobs,
        progress=Progress(err, f"{total_runs} scenario runs × {len(policies)} policies"),
    )  # fmt: skip
    wall = time.monotonic() - started
    judged = rows(outcomes)
    out.write(markdown_table(judged))
    out.write(f"\n{len(outcomes)} runs in {wall:.0f} s wall\n")
    command = "slascaler " + " ".join(args.argv)
    if args.out:
        directory = Path(args.out)
        directory.mkdir(parents=True, exist_ok=True)
        write_csv(judged, directory / "bench.csv")
        (directory / "bench.md").write_text(markdown_table(judged), encoding="utf-8")
        from slascaler_sim.plots import plot_bench

        plot_bench(judged, directory / "bench.png")
        out.write(f"written: {directory}/bench.csv, bench.md, bench.png\n")
    if args.doc:
        header = (
            f"{len(outcomes)} runs, {wall / 60:.1f} min wall on {_cores()} cores. Every online "
            "policy starts from the oracle's first-minute replica count; 60 s start-up unless "
            "a scenario says otherwise; SLA attainment is the share of 1-minute windows (after "
            "the first start-up) that meet both objectives: the client-side TTFT percentile of "
            "the requests arriving in the window, and the ITL percentile of the tokens emitted "
            "in it (the engines' histogram, as Prometheus reads it). The oracle and the "
            "hindsight-best static configuration are sized for both. The oracle asks for "
            "replicas a start-up delay before a window needs them; the oracle without "
            "look-ahead knows each window's need from the moment it begins and nothing "
            "later (a reference for what anticipation is worth, not a competitor)."
        )
        from slascaler_sim.report import kept_section

        existing = Path(args.doc).read_text(encoding="utf-8") if Path(args.doc).exists() else ""
        document = benchmark_document(judged, scenarios, command, header)
        pools = kept_section(existing)  # the pool benchmark's section, made by --pools
        if pools:
            document = document.rstrip("\n") + "\n\n" + pools + "\n"
        Path(args.doc).write_text(document, encoding="utf-8")
        out.write(f"written: {args.doc}\n")
        if args.summary:
            _write_summary(Path(args.summary), Path(args.doc), document)
            out.write(f"written: the benchmark summary in {args.summary}\n")
    return 0


def _write_summary(readme: Path, doc: Path, document: str) -> None:
    from slascaler_sim.report import replace_summary, summary_block

    link = os.path.relpath(doc, readme.parent)
    text = readme.read_text(encoding="utf-8")
    readme.write_text(replace_summary(text, summary_block(document, link)), encoding="utf-8")


def _bench_pools(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from slascaler_sim.pool_bench import ARRANGEMENTS, collision_scenario, run_pool_benchmark
    from slascaler_sim.report import pool_section, pool_table, pool_verdict, replace_section

    if args.trace or args.scenario or args.policies:
        print("slascaler bench: --pools runs its own scenario: drop --trace, --scenario and "
              "--policies", file=err)  # fmt: skip
        return EXIT_BAD_INPUT
    minutes = args.minutes if args.minutes is not None else (20.0 if args.quick else 60.0)
    if minutes < 5:
        print("slascaler bench: --pools needs at least 5 minutes (a start-up and some windows)",
              file=err)  # fmt: skip
        return EXIT_BAD_INPUT
    seeds = args.seeds[:1] if args.quick else args.seeds
    scenario = collision_scenario(minutes)
    started = time.monotonic()
    outcomes = run_pool_benchmark(
        scenario, seeds, ARRANGEMENTS, jobs=args.jobs,
        progress=Progress(err, f"{len(ARRANGEMENTS)} arrangements × {len(seeds)} seeds"),
    )  # fmt: skip
    wall = time.monotonic() - started
    out.write(pool_table(outcomes))
    points, met = pool_verdict(outcomes)
    if points is not None:
        out.write(
            f"\nhigh-priority SLA, pool vs per SLA: {points:+.1f} points "
            f"({'met' if met else 'missed'}: target ≥ 20)\n"
        )
    out.write(f"{len(outcomes)} runs in {wall:.0f} s wall\n")
    if args.doc:
        command = "slascaler " + " ".join(args.argv)
        header = (
            f"{len(outcomes)} runs ({len(seeds)} seed{'s' if len(seeds) > 1 else ''}), "
            f"{wall / 60:.1f} min wall on {_cores()} cores; means over the seeds; 60 s start-up; "
            "SLA attainment = share of 1-minute windows (after the first start-up) whose "
            "client-side TTFT p95 meets the model's objective, and whose ITL p95 (the tokens "
            "emitted in the window) meets the model's ITL objective where it has one."
        )
        path = Path(args.doc)
        existing = path.read_text(encoding="utf-8") if path.exists() else "# Benchmark results\n"
        path.write_text(
            replace_section(existing, pool_section(outcomes, scenario, command, header)),
            encoding="utf-8",
        )
        out.write(f"written: {args.doc}\n")
    return 0


def _cores() -> int:
    import os

    return os.cpu_count() or 1


def register(commands: Any) -> None:
    """Add `demo` and `bench` to the `slascaler` command's subparsers."""
    from slascaler_sim.profiles import PROFILES

    demo = commands.add_parser(
        "demo", help="the Azure conversation trace through a simulated fleet: slascaler vs HPA"
    )
    demo.add_argument("--minutes", type=_positive, default=60.0, help="simulated minutes (60)")
    demo.add_argument("--plot", default="out/demo.png", help="PNG to write ('' for none)")
    demo.set_defaults(run=_demo)

    bench = commands.add_parser(
        "bench",
        help="the scenario × policy benchmark matrix",
        description="Run every policy on every scenario (or on your trace) in simulated "
        "time and compare SLA attainment and GPU-hours.",
    )
    bench.add_argument(
        "--trace",
        help="your own trace: Azure CSV, BurstGPT CSV, or JSONL with timestamp (ms), "
        "input_length, output_length and optionally hash_ids; gzip-compressed if it ends in .gz",
    )
    bench.add_argument("--copies", type=_count, default=1,
                       help="with --trace: superpose this many rotated copies (1)")  # fmt: skip
    bench.add_argument("--speedup", type=_positive, default=1.0,
                       help="with --trace: replay this many times faster (1)")  # fmt: skip
    bench.add_argument("--minutes", type=_positive, default=None,
                       help="cut every scenario to this many simulated minutes")  # fmt: skip
    bench.add_argument("--quick", action="store_true",
                       help="CI-sized: 8 minutes per scenario and the first seed only")  # fmt: skip
    bench.add_argument("--seeds", type=_seeds, default=[1, 2], help="comma-separated (1,2)")
    bench.add_argument("--scenario", action="append",
                       help="only scenarios whose name contains this (repeatable)")  # fmt: skip
    bench.add_argument("--policies", type=lambda t: [p.strip() for p in t.split(",")],
                       help="comma-separated policies to run (default: all)")  # fmt: skip
    bench.add_argument("--ablations", action="store_true",
                       help="also run slascaler with each mechanism turned off")  # fmt: skip
    bench.add_argument("--ttft-ms", type=_positive, help="TTFT objective (scenario's own)")
    bench.add_argument("--itl-ms", type=_positive, help="ITL objective (scenario's own)")
    bench.add_argument("--percentile", type=_percentile, help="objectives' percentile (95)")
    bench.add_argument("--profile", choices=sorted(PROFILES), help="GPU cost profile")
    bench.add_argument("--startup-s", type=_positive, help="replica start-up delay (60)")
    bench.add_argument("--max-replicas", type=_count, help="replicas.max (32)")
    bench.add_argument("--router", choices=["least-outstanding", "prefix-affinity",
                                            "round-robin"], help="request router")  # fmt: skip
    bench.add_argument("--jobs", type=_count, help="worker processes (one per core)")
    bench.add_argument("--out", help="directory to write bench.csv, bench.md and bench.png")
    bench.add_argument("--doc", help="write the full report (e.g. docs/benchmark.md)")
    bench.add_argument(
        "--summary",
        help="with --doc: replace the bench-summary block of this file (e.g. README.md) with "
        "the report's ratio and target tables",
    )
    bench.add_argument("--speed", action="store_true", help="only measure the simulator's speed")
    bench.add_argument(
        "--pools",
        action="store_true",
        help="the shared-GPU-pool benchmark: three models whose peaks collide on 16 GPUs, "
        "slascaler with a GPUPool vs without, KEDA per SLA and a priority-blind pool "
        "(60 minutes; --doc replaces its section only)",
    )
    bench.set_defaults(run=_bench)
