"""`slascaler demo` and `slascaler bench`: the simulator's subcommands of the `slascaler` CLI.

The operator's command line finds them through the `slascaler.commands` entry point that
this distribution (`slascaler-sim`) declares, so the operator itself never imports the
simulator. `register` adds the subcommands to the parser's subcommand group.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, TextIO

EXIT_BAD_INPUT = 2


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _demo(args: argparse.Namespace, out: TextIO) -> int:
    from slascaler_sim.demo import run_demo

    run_demo(args.minutes, Path(args.plot) if args.plot else None, out)
    return 0


def _bench(args: argparse.Namespace, out: TextIO) -> int:
    from slascaler_sim.benchmark import (
        default_scenarios,
        markdown_table,
        run_matrix,
        simulator_speed,
        trace_scenario,
        write_csv,
    )
    from slascaler_sim.workload import TraceError, load_trace

    if args.speed:
        count, cpu, ratio = simulator_speed()
        out.write(
            f"simulator: 1 h of the conversation trace ({count} requests) on 8 replicas in "
            f"{cpu:.2f} s of CPU: {ratio:.0f}× real time\n"
        )
        return 0
    if args.trace:
        try:
            rows = load_trace(Path(args.trace))
        except (TraceError, OSError) as error:
            print(f"slascaler bench: {error}", file=sys.stderr)
            return EXIT_BAD_INPUT
        scenarios = [trace_scenario(rows, Path(args.trace).name, 1, args.minutes)]
    else:
        scenarios = default_scenarios(args.minutes)
    if args.scenario:
        scenarios = [s for s in scenarios if any(k in s.name for k in args.scenario)]
    seeds = [int(s) for s in args.seeds.split(",")]
    rows_out = run_matrix(
        scenarios, seeds, with_oracle=not args.no_oracle,
        progress=lambda text: print(f"running {text}", file=sys.stderr),
    )  # fmt: skip
    table = markdown_table(rows_out)
    out.write(table)
    if args.out:
        directory = Path(args.out)
        directory.mkdir(parents=True, exist_ok=True)
        write_csv(rows_out, directory / "bench.csv")
        (directory / "bench.md").write_text(table, encoding="utf-8")
        from slascaler_sim.plots import plot_bench

        plot_bench(rows_out, directory / "bench.png")
        out.write(f"\nwritten: {directory}/bench.csv, bench.md, bench.png\n")
    return 0


def register(commands: Any) -> None:
    """Add `demo` and `bench` to the `slascaler` command's subparsers."""
    demo = commands.add_parser(
        "demo", help="the Azure conversation trace through a simulated fleet: slascaler vs HPA"
    )
    demo.add_argument("--minutes", type=_positive, default=60.0, help="simulated minutes (60)")
    demo.add_argument("--plot", default="out/demo.png", help="PNG to write ('' for none)")
    demo.set_defaults(run=_demo)

    bench = commands.add_parser("bench", help="the scenario × policy benchmark matrix")
    bench.add_argument("--trace", help="your own trace: Azure CSV, or JSONL with timestamp (ms), "
                       "input_length, output_length")  # fmt: skip
    bench.add_argument("--minutes", type=_positive, default=30.0, help="simulated minutes (30)")
    bench.add_argument("--seeds", default="1,2", help="comma-separated seeds (1,2)")
    bench.add_argument(
        "--scenario", action="append", help="run only scenarios whose name contains this"
    )
    bench.add_argument("--no-oracle", action="store_true", help="skip the oracle and static runs")
    bench.add_argument("--out", default="out/bench", help="directory for bench.csv and bench.md")
    bench.add_argument("--speed", action="store_true", help="only measure the simulator's speed")
    bench.set_defaults(run=_bench)
