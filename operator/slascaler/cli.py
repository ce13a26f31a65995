"""The `slascaler` command line: `run` the operator, `analyze`, `samples`, `demo`, `bench`.

`slascaler demo` and `slascaler bench` come from the simulator distribution (`slascaler-sim`,
found through the `slascaler.commands` entry point), when it is installed.

`slascaler analyze FILE` prints the TTFT analysis (P50/P95/P99/mean, bottleneck distribution,
regime and what to do about it) of per-request samples; `--prometheus URL --namespace NS
--deployment NAME` prints the same for a Deployment's live histograms over `--window`.
`--format json` prints the keys of the source's `analyze_ttft_samples` plus the regime. Bad
input prints one line naming the file, line and column, and exits 2; metrics that cannot be
read exit 3 with the reason. `slascaler samples` writes seeded samples of the source's
scenarios. `slascaler run` starts the operator with settings from `SLASCALER_*` variables.

Entry point of the `slascaler` console script (pyproject.toml).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, TextIO

from slascaler import __version__
from slascaler.model.regime import Regime, RegimeAnalysis, analyze_sample_regime
from slascaler.model.samples import COMPONENTS
from slascaler.sample_files import SampleFileError, read_samples, write_samples
from slascaler.scenarios import QUEUE_MEAN_MS, source_scenario

EXIT_BAD_INPUT = 2

ADVICE = {
    Regime.QUEUE_BOUND: "add replicas: requests spend their time waiting for a slot, and more "
    "capacity removes exactly that wait.",
    Regime.PREFILL_BOUND: "raise the chunked-prefill token budget (vLLM "
    "--max-num-batched-tokens) or shorten prompts: the prompts themselves take long to prefill. "
    "More replicas help only where long prompts arrive together and share one replica's "
    "prefill steps; the operator sizes for that (status.recommendation.replicasForCollisions).",
    Regime.DECODE_BOUND: "lower the max batch size (vLLM --max-num-seqs) or the chunk size so "
    "each decode step is shorter.",
    Regime.HEALTHY: "nothing: TTFT meets the objective.",
    Regime.IDLE: "nothing: there were no requests.",
    Regime.UNKNOWN: "collect more requests before deciding.",
}


def _report(analysis: RegimeAnalysis) -> dict[str, object]:
    q = analysis.ttft_quantiles_ms
    return {
        "count": int(analysis.requests),
        "p50_ms": q["p50"],
        "p95_ms": q["p95"],
        "p99_ms": q["p99"],
        "mean_ms": analysis.ttft_mean_ms,
        "bottleneck_distribution": {
            c: analysis.bottleneck_distribution.get(c, 0.0) for c in COMPONENTS
        },
        "component_means_ms": dict(analysis.component_means_ms),
        "percentile": analysis.percentile,
        "objective_ms": analysis.ttft_objective_ms,
        "without_queue_ms": analysis.without_queue_ms,
        "regime": str(analysis.regime),
        "explanation": analysis.explanation,
        "advice": ADVICE[analysis.regime],
    }


def _print_text(name: str, report: dict[str, object], out: TextIO) -> None:
    shares = report["bottleneck_distribution"]
    assert isinstance(shares, dict)
    out.write(f"TTFT analysis of {name} ({report['count']} requests)\n")
    out.write(
        f"  P50: {report['p50_ms']:.0f} ms   P95: {report['p95_ms']:.0f} ms   "
        f"P99: {report['p99_ms']:.0f} ms   mean: {report['mean_ms']:.0f} ms\n"
    )
    out.write("  Bottleneck distribution (share of requests in which it is the largest part):\n")
    for component, share in sorted(shares.items(), key=lambda item: -item[1]):
        if share > 0:
            shown = f"{share:6.1%}" if share >= 0.001 else " <0.1%"
            out.write(f"    {component:<13}{shown}\n")
    out.write(f"  Regime: {report['regime']} ({report['explanation']})\n")
    out.write(f"  What to do: {report['advice']}\n")


EXIT_NO_METRICS = 3


def _emit(name: str, report: dict[str, object], args: argparse.Namespace, out: TextIO) -> None:
    if args.format == "json":
        json.dump(report, out, indent=2)
        out.write("\n")
    else:
        _print_text(name, report, out)


def _analyze_prometheus(args: argparse.Namespace, out: TextIO) -> int:
    """The same analysis from a live Prometheus: the Deployment's histograms over a window."""
    import time

    from slascaler.metrics.prometheus import PrometheusSettings, PrometheusSource
    from slascaler.model.regime import analyze_observation
    from slascaler.spec import SpecError, parse_spec

    if not (args.namespace and args.deployment):
        print("slascaler analyze: --prometheus needs --namespace and --deployment", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        spec = parse_spec(
            {
                "targetRef": {"name": args.deployment},
                "engine": args.engine,
                "objectives": {"ttft": {"percentile": args.percentile, "thresholdMs": 1}},
                "window": args.window,
            }
        )
    except SpecError as error:
        print(f"slascaler analyze: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    source = PrometheusSource(PrometheusSettings(args.prometheus, retries=1))
    observation = source.observe(args.namespace, spec, time.time())
    missing = observation.missing_inputs(need_itl=False)
    if observation.source_error or missing:
        reason = observation.source_error or "; ".join(missing)
        print(f"slascaler analyze: {reason}", file=sys.stderr)
        return EXIT_NO_METRICS
    analysis = analyze_observation(observation, args.percentile, args.objective_ms, min_requests=1)
    name = f"{args.namespace}/{args.deployment} over the last {args.window} ({args.prometheus})"
    _emit(name, _report(analysis), args, out)
    return 0


def _analyze(args: argparse.Namespace, out: TextIO) -> int:
    if args.prometheus:
        return _analyze_prometheus(args, out)
    if args.file is None:
        print("slascaler analyze: give a FILE of samples, or --prometheus URL", file=sys.stderr)
        return EXIT_BAD_INPUT
    name = args.file
    try:
        if name == "-":
            samples = read_samples(sys.stdin, "<stdin>")
        else:
            with Path(name).open(encoding="utf-8") as stream:
                samples = read_samples(stream, name)
    except OSError as error:
        print(f"slascaler analyze: {name}: {error.strerror}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except SampleFileError as error:
        print(f"slascaler analyze: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    analysis = analyze_sample_regime(samples, args.percentile, args.objective_ms)
    _emit(name, _report(analysis), args, out)
    return 0


def _samples(args: argparse.Namespace, out: TextIO) -> int:
    samples = source_scenario(args.scenario, args.count, args.seed)
    if args.output:
        with Path(args.output).open("w", encoding="utf-8") as stream:
            write_samples(samples, stream, args.format)
    else:
        write_samples(samples, out, args.format)
    return 0


def _run(args: argparse.Namespace, out: TextIO) -> int:
    from slascaler.settings import Settings, SettingsError

    try:
        settings = Settings.from_env(os.environ)
    except SettingsError as error:
        print(f"slascaler run: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    from slascaler.wiring import run

    run(settings)
    return 0


def _percentile(text: str) -> float:
    value = float(text)
    if not 0 < value < 100:
        raise argparse.ArgumentTypeError(f"must be between 0 and 100 exclusive, got {text}")
    return value


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="slascaler", description="Hold latency SLAs for LLM inference Deployments."
    )
    parser.add_argument("--version", action="version", version=f"slascaler {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    analyze = commands.add_parser(
        "analyze",
        help="analyze per-request TTFT samples (CSV or JSONL)",
        description="TTFT percentiles, bottleneck distribution and regime of per-request "
        "samples with columns queue_time_ms, tokenization_ms, prefill_ms, first_decode_ms.",
    )
    analyze.add_argument(
        "file", nargs="?", help="CSV or JSONL file of samples, or - for standard input"
    )
    analyze.add_argument(
        "--prometheus", metavar="URL", help="analyze a Deployment's live histograms instead"
    )
    analyze.add_argument("--namespace", help="with --prometheus: the Deployment's namespace")
    analyze.add_argument("--deployment", help="with --prometheus: the Deployment's name")
    analyze.add_argument(
        "--engine", choices=["vllm", "sglang", "tgi"], default="vllm", help="default vllm"
    )
    analyze.add_argument("--window", default="2m", help="with --prometheus: default 2m")
    analyze.add_argument("--format", choices=["text", "json"], default="text")
    analyze.add_argument("--percentile", type=_percentile, default=95.0, help="default 95")
    analyze.add_argument(
        "--objective-ms", type=_positive, default=None, help="TTFT objective at that percentile"
    )
    analyze.set_defaults(run=_analyze)

    samples = commands.add_parser(
        "samples", help="write seeded samples of the source material's TTFT scenarios"
    )
    samples.add_argument("--scenario", choices=sorted(QUEUE_MEAN_MS), default="high-load")
    samples.add_argument("--count", type=int, default=100)
    samples.add_argument("--seed", type=int, default=1)
    samples.add_argument("--format", choices=["csv", "jsonl"], default="csv")
    samples.add_argument("-o", "--output", help="file to write (default: standard output)")
    samples.set_defaults(run=_samples)

    _add_plugin_commands(commands)
    operator = commands.add_parser(
        "run",
        help="run the operator (settings from SLASCALER_* environment variables)",
        description="Run the slascaler operator against the cluster of the in-cluster\n"
        "service account, or of the kubeconfig (KUBECONFIG).",
        epilog="settings (environment variables):\n"
        + "\n".join(f"  {name:<43} {text}" for name, text in _variables().items()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    operator.set_defaults(run=_run)
    return parser


PLUGIN_GROUP = "slascaler.commands"
SIMULATOR_COMMANDS = {
    "demo": "the Azure conversation trace through a simulated fleet: slascaler vs HPA",
    "bench": "the scenario × policy benchmark matrix",
}


def _add_plugin_commands(commands: Any) -> None:
    """Subcommands of other distributions (`slascaler-sim` adds demo and bench); where the
    simulator is not installed, demo and bench say how to get it."""
    for entry in entry_points(group=PLUGIN_GROUP):
        entry.load()(commands)
    for name, text in SIMULATOR_COMMANDS.items():
        if name not in commands.choices:
            missing = commands.add_parser(name, help=f"{text} (needs slascaler-sim)")
            missing.set_defaults(run=_simulator_missing, command_name=name)


def _simulator_missing(args: argparse.Namespace, out: TextIO) -> int:
    print(
        f"slascaler {args.command_name}: the simulator is not installed; install it with "
        "`pip install ./simulator` from a clone of the repository (distribution slascaler-sim)",
        file=sys.stderr,
    )
    return EXIT_BAD_INPUT


def _variables() -> dict[str, str]:
    from slascaler.settings import VARIABLES

    return dict(VARIABLES)


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    args = _parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    status: int = args.run(args, out or sys.stdout)
    return status


if __name__ == "__main__":
    sys.exit(main())
