"""Request streams for the simulator: the bundled Azure traces, user traces, synthetic loads.

The embedded default is the Azure LLM inference traces of November 2023 (conversation and
code; "Azure LLM inference trace 2023, Microsoft Azure, AzurePublicDataset, CC-BY 4.0";
released with Patel et al., "Splitwise", ISCA 2024), shipped in `slascaler/data/traces/`.
A trace can be replayed faster (`speedup`) and superposed with shifted copies of itself so
that it needs many replicas. Synthetic loads (Poisson, step, diurnal, burst) are seeded.

Read by the demo, the benchmarks and the real-time engines.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from pathlib import Path

import numpy as np

from slascaler_sim.engine import Request

BUNDLED = {
    "conversation": "AzureLLMInferenceTrace_conv.csv",
    "code": "AzureLLMInferenceTrace_code.csv",
}


class TraceError(ValueError):
    """A trace file is unusable; the message names the file and line."""


@dataclass(frozen=True)
class TraceRow:
    at: float  # seconds from the trace's start
    prompt: int
    output: int


def _parse_azure(name: str, lines: Sequence[str]) -> list[TraceRow]:
    reader = csv.DictReader(lines)
    need = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
    if not reader.fieldnames or any(c not in reader.fieldnames for c in need):
        raise TraceError(f"{name}:1: expected the columns {', '.join(need)}")
    rows: list[TraceRow] = []
    origin: datetime | None = None
    for row in reader:
        line = reader.line_num
        try:
            stamp = datetime.fromisoformat(row["TIMESTAMP"][:26])
            prompt, output = int(row["ContextTokens"]), int(row["GeneratedTokens"])
        except (ValueError, TypeError):
            raise TraceError(f"{name}:{line}: not a timestamp and two token counts") from None
        origin = origin or stamp
        rows.append(TraceRow((stamp - origin).total_seconds(), max(1, prompt), max(1, output)))
    return rows


def _parse_jsonl(name: str, lines: Sequence[str]) -> list[TraceRow]:
    rows: list[TraceRow] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
            rows.append(
                TraceRow(
                    float(data["timestamp"]) / 1000.0,
                    max(1, int(data["input_length"])),
                    max(1, int(data["output_length"])),
                )
            )
        except (ValueError, KeyError, TypeError):
            raise TraceError(
                f'{name}:{number}: expected {{"timestamp": ms, "input_length": n, '
                '"output_length": n}'
            ) from None
    return rows


def load_trace(source: str | Path) -> list[TraceRow]:
    """A bundled trace by name (`conversation`, `code`) or a file (Azure CSV or JSONL)."""
    if isinstance(source, str) and source in BUNDLED:
        text = resources.files("slascaler_sim.data.traces").joinpath(BUNDLED[source]).read_text()
        name = BUNDLED[source]
    else:
        path = Path(source)
        text, name = path.read_text(encoding="utf-8"), str(path)
    lines = text.splitlines()
    if not lines:
        raise TraceError(f"{name}: empty trace")
    parse = _parse_jsonl if lines[0].lstrip().startswith("{") else _parse_azure
    rows = sorted(parse(name, lines), key=lambda r: r.at)
    if not rows:
        raise TraceError(f"{name}: no requests")
    return rows


def replay(
    rows: Sequence[TraceRow], speedup: float = 1.0, copies: int = 1, seed: int = 0
) -> list[Request]:
    """Requests replaying `rows` `speedup`× faster, superposed `copies` times at random shifts."""
    span = rows[-1].at - rows[0].at or 1.0
    rng = np.random.default_rng(seed)
    shifts = [0.0, *rng.uniform(0, span, copies - 1)]
    times: list[tuple[float, int, int]] = []
    for shift in shifts:
        for row in rows:
            times.append((((row.at + shift) % (span + 1e-9)) / speedup, row.prompt, row.output))
    times.sort()
    return [Request(i, at, prompt, output) for i, (at, prompt, output) in enumerate(times)]


def modulated_poisson(
    rate: Callable[[float], float],
    peak_rate: float,
    duration_s: float,
    lengths: Sequence[TraceRow],
    seed: int,
) -> list[Request]:
    """Arrivals of a Poisson process with time-varying `rate` (≤ peak_rate), by thinning;
    prompt/output lengths drawn from `lengths` (e.g. a trace's rows)."""
    rng = np.random.default_rng(seed)
    count = rng.poisson(peak_rate * duration_s)
    candidates = np.sort(rng.uniform(0, duration_s, count))
    keep = rng.uniform(0, 1, count) * peak_rate <= np.asarray([rate(t) for t in candidates])
    picks = rng.integers(0, len(lengths), count)
    return [
        Request(i, float(t), lengths[int(p)].prompt, lengths[int(p)].output)
        for i, (t, p) in enumerate(zip(candidates[keep], picks[keep], strict=True))
    ]


def step_rate(
    low: float, high: float, at_s: float, until_s: float = math.inf
) -> Callable[[float], float]:
    return lambda t: high if at_s <= t < until_s else low


def diurnal_rate(mean: float, amplitude: float, period_s: float) -> Callable[[float], float]:
    return lambda t: mean * (1 + amplitude * math.sin(2 * math.pi * t / period_s))
