"""Reading and writing per-request TTFT samples as CSV or JSONL.

Columns (CSV header or JSON keys) are the source's `TTFTBreakdown` fields: `queue_time_ms`,
`tokenization_ms`, `prefill_ms`, `first_decode_ms`; other columns are ignored. Every problem
is reported as one `SampleFileError` naming the file, line and column, so the CLI can print
one clear line and exit 2.

Called by the CLI (`slascaler analyze`, `slascaler samples`).
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Final, TextIO

from slascaler.model.samples import TTFTBreakdown

FIELDS: Final = ("queue_time_ms", "tokenization_ms", "prefill_ms", "first_decode_ms")


class SampleFileError(ValueError):
    """A sample file is unusable; the message is `FILE:LINE: what is wrong`."""


def _value(name: str, line: int, column: str, raw: object) -> float:
    if isinstance(raw, bool) or raw is None or raw == "":
        raise SampleFileError(f"{name}:{line}: column {column!r} is empty or not a number")
    try:
        value = float(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise SampleFileError(
            f"{name}:{line}: column {column!r}: {raw!r} is not a number"
        ) from None
    if not math.isfinite(value):
        raise SampleFileError(f"{name}:{line}: column {column!r}: {raw!r} is not finite")
    return value


def _breakdown(name: str, line: int, row: Mapping[str, object]) -> TTFTBreakdown:
    q, t, p, d = (_value(name, line, column, row.get(column)) for column in FIELDS)
    return TTFTBreakdown(queue_time_ms=q, tokenization_ms=t, prefill_ms=p, first_decode_ms=d)


def _csv_rows(name: str, text: str) -> Iterator[TTFTBreakdown]:
    reader = csv.DictReader(io.StringIO(text))
    header = reader.fieldnames or []
    missing = [c for c in FIELDS if c not in header]
    if missing:
        raise SampleFileError(
            f"{name}:1: missing column {', '.join(map(repr, missing))} "
            f"(the header has {', '.join(header) or 'nothing'})"
        )
    for row in reader:
        if None in row:
            raise SampleFileError(f"{name}:{reader.line_num}: more values than header columns")
        yield _breakdown(name, reader.line_num, row)


def _jsonl_rows(name: str, text: str) -> Iterator[TTFTBreakdown]:
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise SampleFileError(f"{name}:{number}: not JSON ({error.msg})") from None
        if not isinstance(row, dict):
            raise SampleFileError(f"{name}:{number}: expected a JSON object per line")
        missing = [c for c in FIELDS if c not in row]
        if missing:
            raise SampleFileError(f"{name}:{number}: missing key {', '.join(map(repr, missing))}")
        yield _breakdown(name, number, row)


def read_samples(stream: TextIO, name: str) -> list[TTFTBreakdown]:
    """All samples in a CSV or JSONL stream (JSONL if its first character is `{`)."""
    text = stream.read()
    if not text.strip():
        raise SampleFileError(f"{name}: no samples (the file is empty)")
    rows = _jsonl_rows if text.lstrip().startswith("{") else _csv_rows
    samples = list(rows(name, text))
    if not samples:
        raise SampleFileError(f"{name}: no samples (only a header)")
    return samples


def write_samples(samples: Iterable[TTFTBreakdown], stream: TextIO, fmt: str) -> None:
    """Write samples as `csv` or `jsonl`, values rounded to µs."""
    if fmt == "jsonl":
        for s in samples:
            stream.write(
                json.dumps(dict(zip(FIELDS, (round(v, 3) for v in s.components()), strict=True)))
                + "\n"
            )
        return
    writer = csv.writer(stream, lineterminator="\n")
    writer.writerow(FIELDS)
    for s in samples:
        writer.writerow([f"{v:.3f}" for v in s.components()])
