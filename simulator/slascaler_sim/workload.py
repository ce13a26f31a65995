"""Request streams for the simulator: the bundled Azure traces, user traces, synthetic loads.

The embedded default is the Azure LLM inference traces of November 2023 (conversation and
code; "Azure LLM inference trace 2023, Microsoft Azure, AzurePublicDataset, CC-BY 4.0";
released with Patel et al., "Splitwise", ISCA 2024), shipped in `slascaler_sim/data/traces/`,
beside Mooncake's one-hour conversation trace (Kimi, FAST'25 release; Apache-2.0), whose
long prompts and block hashes no synthetic load of the Azure lengths has.

A user's trace can be:
- Azure's CSV (`TIMESTAMP`, `ContextTokens`, `GeneratedTokens`; the 2023 and 2024 releases);
- BurstGPT's CSV (`Timestamp` in seconds, `Request tokens`, `Response tokens`);
- JSONL with `timestamp` in milliseconds, `input_length`, `output_length` and optionally
  `hash_ids` (the prompt's block hashes, as in the Mooncake traces, each covering
  `hash_block_tokens` prompt tokens: 512 there).
Either may be gzip-compressed (a name ending in `.gz`).

What is read is checked row by row, never silently fixed: a missing, NaN or infinite
timestamp, or a token count that is not a whole number ≥ 1, is refused naming the file, the
line and the fix (`TraceError`). The times are rebased to the first request (a trace need
not start at 0), and rows out of order are sorted, which `Trace.notes` says.

A trace is replayed faster (`speedup`) and superposed with copies of itself, each rotated by
a random offset within the trace's span so that the superposition keeps its length; with
one copy the replay is the trace itself (no randomness). Synthetic loads (Poisson, step,
diurnal, burst) are seeded.

Read by the demo, the benchmarks and the real-time engines.
"""

from __future__ import annotations

import csv
import gzip
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from importlib import resources
from pathlib import Path

import numpy as np

from slascaler_sim.engine import Request

BUNDLED = {
    "conversation": "AzureLLMInferenceTrace_conv.csv",
    "code": "AzureLLMInferenceTrace_code.csv",
    "mooncake": "mooncake_conversation_trace.jsonl.gz",
}
MOONCAKE_BLOCK_TOKENS = 512  # prompt tokens per hash id in the Mooncake JSONL traces


class TraceError(ValueError):
    """A trace file is unusable; the message names the file, the line and the fix."""


@dataclass(frozen=True)
class TraceRow:
    at: float  # seconds from the trace's first request
    prompt: int
    output: int
    block_hashes: tuple[int, ...] = ()  # the prompt's leading blocks, for prefix caching


@dataclass(frozen=True)
class Trace:
    """A trace's rows, sorted and rebased to its first request, and what was done to them."""

    name: str
    rows: list[TraceRow]
    notes: tuple[str, ...] = ()
    hash_block_tokens: int = MOONCAKE_BLOCK_TOKENS

    @property
    def span_s(self) -> float:
        return self.rows[-1].at if self.rows else 0.0


@dataclass
class _Reader:
    """Checks one file's rows; collects (time, prompt, output, hashes) with line numbers."""

    name: str
    raw: list[tuple[int, float, int, int, tuple[int, ...]]] = field(default_factory=list)

    def fail(self, line: int, message: str) -> TraceError:
        return TraceError(f"{self.name}:{line}: {message}")

    def tokens(self, line: int, column: str, text: object) -> int:
        fix = f"{column} must be a whole number ≥ 1; fix or drop the row"
        if isinstance(text, bool):
            raise self.fail(line, f"{column} is {text!r}: {fix}")
        if isinstance(text, int):
            value = text
        elif isinstance(text, float) and text.is_integer():
            value = int(text)
        elif isinstance(text, str) and text.strip().lstrip("+-").isdigit():
            value = int(text.strip())
        else:
            shown = "missing" if text in (None, "") else repr(text)
            raise self.fail(line, f"{column} is {shown}: {fix}")
        if value < 1:
            raise self.fail(line, f"{column} is {value}: {fix}")
        return value

    def time(self, line: int, column: str, value: float | None, unit: str) -> float:
        if value is None or not math.isfinite(value):
            shown = "missing" if value is None else repr(value)
            raise self.fail(
                line, f"{column} is {shown}: every row needs the request's arrival time ({unit})"
            )
        return value

    def add(self, line: int, at: float, prompt: int, output: int, hashes: tuple[int, ...]) -> None:
        self.raw.append((line, at, prompt, output, hashes))


def _number(text: object) -> float | None:
    if text is None or isinstance(text, bool) or (isinstance(text, str) and not text.strip()):
        return None
    try:
        return float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan


def _read_csv(reader: _Reader, lines: Sequence[str]) -> None:
    table = csv.DictReader(lines)
    columns = table.fieldnames or []
    if all(c in columns for c in ("TIMESTAMP", "ContextTokens", "GeneratedTokens")):
        time_column, prompt_column, output_column = "TIMESTAMP", "ContextTokens", "GeneratedTokens"
        azure = True
    elif all(c in columns for c in ("Timestamp", "Request tokens", "Response tokens")):
        time_column, prompt_column, output_column = "Timestamp", "Request tokens", "Response tokens"
        azure = False
    else:
        raise reader.fail(
            1,
            "expected the columns TIMESTAMP, ContextTokens, GeneratedTokens (Azure) or "
            f"Timestamp, Request tokens, Response tokens (BurstGPT); found {', '.join(columns)}",
        )
    for row in table:
        line = table.line_num
        stamp = row.get(time_column)
        if azure:
            try:
                at = datetime.fromisoformat(str(stamp).strip()[:26]).timestamp() if stamp else None
            except ValueError:
                raise reader.fail(
                    line, f"{time_column} is {stamp!r}: write e.g. 2023-11-16 18:17:03.979960"
                ) from None
        else:
            at = _number(stamp)
        unit = "a date and time" if azure else "seconds"
        reader.add(
            line,
            reader.time(line, time_column, at, unit),
            reader.tokens(line, prompt_column, row.get(prompt_column)),
            reader.tokens(line, output_column, row.get(output_column)),
            (),
        )


def _read_jsonl(reader: _Reader, lines: Sequence[str]) -> None:
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            data = json.loads(text)
        except ValueError:
            raise reader.fail(number, "not a JSON object; write one request per line") from None
        if not isinstance(data, dict):
            raise reader.fail(number, "not a JSON object; write one request per line")
        hashes = data.get("hash_ids", [])
        if not isinstance(hashes, list) or not all(
            isinstance(h, int) and not isinstance(h, bool) for h in hashes
        ):
            raise reader.fail(number, "hash_ids must be a list of whole numbers")
        at = _number(data.get("timestamp"))
        reader.add(
            number,
            reader.time(number, "timestamp", at, "milliseconds") / 1000.0,
            reader.tokens(number, "input_length", data.get("input_length")),
            reader.tokens(number, "output_length", data.get("output_length")),
            tuple(hashes),
        )


def read_trace(source: str | Path, hash_block_tokens: int = MOONCAKE_BLOCK_TOKENS) -> Trace:
    """A bundled trace by name (`conversation`, `code`, `mooncake`) or a file (CSV or JSONL,
    either gzip-compressed when its name ends in `.gz`), checked."""
    if isinstance(source, str) and source in BUNDLED:
        name = BUNDLED[source]
        data = resources.files("slascaler_sim.data.traces").joinpath(name).read_bytes()
    else:
        path = Path(source)
        data, name = path.read_bytes(), str(path)
    if name.endswith(".gz"):
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as error:
            why = f"not a readable gzip file ({error}); recompress it, or drop the .gz suffix"
            raise _Reader(name).fail(1, why) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        why = f"not UTF-8 text ({error.reason} at byte {error.start}); save it as UTF-8"
        raise _Reader(name).fail(1, why) from None
    lines = text.splitlines()
    reader = _Reader(name)
    if not any(line.strip() for line in lines):
        raise reader.fail(1, "empty trace")
    if lines[0].lstrip().startswith("{"):
        _read_jsonl(reader, lines)
    else:
        _read_csv(reader, lines)
    if not reader.raw:
        raise reader.fail(1, "no requests")
    notes: list[str] = []
    order = sorted(reader.raw, key=lambda r: r[1])
    if order != reader.raw:
        moved = sum(1 for a, b in zip(order, reader.raw, strict=True) if a is not b)
        notes.append(f"{name}: {moved} rows were out of time order and were sorted")
    origin = order[0][1]
    if origin != 0:
        notes.append(f"{name}: times rebased to the first request ({origin:g} → 0)")
    rows = [TraceRow(at - origin, p, o, h) for _, at, p, o, h in order]
    return Trace(name, rows, tuple(notes), hash_block_tokens)


def load_trace(source: str | Path) -> list[TraceRow]:
    """The rows of `read_trace(source)`."""
    return read_trace(source).rows


def replay(
    rows: Sequence[TraceRow],
    speedup: float = 1.0,
    copies: int = 1,
    seed: int = 0,
    hash_block_tokens: int = MOONCAKE_BLOCK_TOKENS,
) -> list[Request]:
    """Requests replaying `rows` `speedup`× faster, superposed `copies` times.

    Copy 0 is the trace as it is; every other copy is rotated by a random offset within the
    trace's span (what runs past the end wraps to the start), so the superposition keeps
    the trace's length and `copies` times its rate. A copy's block hashes are its own (a
    prefix shared within the trace stays shared within each copy).
    """
    if not rows:
        return []
    span = rows[-1].at - rows[0].at or 1.0
    rng = np.random.default_rng(seed)
    shifts = [0.0, *rng.uniform(0, span, copies - 1)]
    times: list[tuple[float, TraceRow, int]] = []
    for copy, shift in enumerate(shifts):
        for row in rows:
            at = row.at - rows[0].at + shift
            if at >= span + 1e-9:
                at -= span
            times.append((at / speedup, row, copy))
    times.sort(key=lambda item: item[0])
    return [
        _request(i, at, row, copy, hash_block_tokens) for i, (at, row, copy) in enumerate(times)
    ]


def _request(index: int, at: float, row: TraceRow, copy: int, block_tokens: int) -> Request:
    hashes = row.block_hashes
    if copy and hashes:
        # Another copy's users share prefixes among themselves, not with copy 0's: hashing
        # (copy, hash) keeps equal hashes equal within the copy, so chains stay chains.
        hashes = tuple(hash((copy, block)) for block in hashes)
    return Request(
        index, at, row.prompt, row.output, block_hashes=hashes, hash_block_tokens=block_tokens
    )


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
