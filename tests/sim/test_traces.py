"""User traces and `slascaler bench` as a new user meets them: every bad row refused with
the file, the line and the fix; what is fixed silently elsewhere (order, origin) said; no
figure that misleads (100% with no window judged, NaN windows, files nobody asked for)."""

from __future__ import annotations

import gzip
import io
import math
from pathlib import Path

import pytest

from slascaler.cli import main
from slascaler_sim.engine import Request
from slascaler_sim.report import CSV_COLUMNS
from slascaler_sim.run import RunResult
from slascaler_sim.workload import TraceError, read_trace, replay


def jsonl(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "mine.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def row(at: float | str, prompt: object = 100, output: object = 10) -> str:
    return f'{{"timestamp": {at}, "input_length": {prompt}, "output_length": {output}}}'


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (row(1000, -5), "mine.jsonl:2: input_length is -5: input_length must be a whole number "
         "≥ 1; fix or drop the row"),
        (row(1000, 100, 2.5), "mine.jsonl:2: output_length is 2.5: output_length must be a "
         "whole number ≥ 1; fix or drop the row"),
        (row(1000, '"many"'), "mine.jsonl:2: input_length is 'many': input_length must be a "
         "whole number ≥ 1; fix or drop the row"),
        (row("NaN"), "mine.jsonl:2: timestamp is nan: every row needs the request's arrival "
         "time (milliseconds)"),
        ('{"input_length": 5, "output_length": 5}', "mine.jsonl:2: timestamp is missing: every "
         "row needs the request's arrival time (milliseconds)"),
        ("[1, 2]", "mine.jsonl:2: not a JSON object; write one request per line"),
    ],
)  # fmt: skip
def test_bad_rows_are_refused_with_file_line_and_fix(
    tmp_path: Path, bad: str, message: str
) -> None:
    path = jsonl(tmp_path, row(0), bad)
    with pytest.raises(TraceError) as refused:
        read_trace(path)
    assert str(refused.value) == f"{tmp_path}/{message}"


def test_azure_csv_rows_are_checked_too(tmp_path: Path) -> None:
    path = tmp_path / "azure.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:17:03.9799600,4808,10\n"
        "2023-11-16 18:17:04.0319600,0,8\n",
        encoding="utf-8",
    )
    with pytest.raises(TraceError) as refused:
        read_trace(path)
    assert str(refused.value) == (
        f"{path}:3: ContextTokens is 0: ContextTokens must be a whole number ≥ 1; "
        "fix or drop the row"
    )


def test_a_trace_is_rebased_to_its_first_request_not_rotated(tmp_path: Path) -> None:
    path = jsonl(tmp_path, row(5_000_000), row(5_010_000), row(5_030_000))
    trace = read_trace(path)
    assert [r.at for r in trace.rows] == [0.0, 10.0, 30.0]
    assert trace.notes == (f"{path}: times rebased to the first request (5000 → 0)",)
    assert [r.arrival for r in replay(trace.rows)] == [0.0, 10.0, 30.0]


def test_unsorted_rows_are_sorted_and_said(tmp_path: Path) -> None:
    path = jsonl(tmp_path, row(0), row(3000), row(1000))
    trace = read_trace(path)
    assert [r.at for r in trace.rows] == [0.0, 1.0, 3.0]
    assert trace.notes == (f"{path}: 2 rows were out of time order and were sorted",)


def test_a_window_with_an_unserved_request_is_missed_not_nan() -> None:
    served = Request(0, 70.0, 10, 1, first_token_at=70.1)
    never = Request(1, 71.0, 10, 1)
    result = RunResult("x", [served, never], [], 0.0, 0, 0, 0.0, 500.0, 95.0, 60.0, 0.0)
    [(start, p95)] = result.window_p95()
    assert start == 60.0 and math.isinf(p95) and p95 > 0
    assert result.attainment == 0.0


def test_no_judged_window_is_not_attainment(tmp_path: Path) -> None:
    result = RunResult("x", [Request(0, 5.0, 10, 1, first_token_at=5.1)], [], 0.0, 0, 0,
                       0.0, 500.0, 95.0, 60.0, 0.0)  # fmt: skip
    assert result.window_p95() == [] and result.attainment is None


def test_bench_on_a_short_trace_says_n_a_and_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = jsonl(tmp_path, *(row(i * 500, 200, 20) for i in range(60)))  # 30 s of requests
    out = io.StringIO()
    status = main(["bench", "--trace", str(path), "--policies", "slascaler,Oracle",
                   "--seeds", "1,2"], out)  # fmt: skip
    assert status == 0
    err = capsys.readouterr().err
    assert "mine.jsonl: a trace replayed once is the same for every seed: one run" in err
    assert "is not longer than the start-up (60 s) plus one window: no window can be judged" in err
    table = out.getvalue()
    assert "| mine.jsonl | 1 | slascaler | n/a | n/a | n/a | n/a | 0 |" in table
    assert "| 2 |" not in table


def test_files_only_with_out_and_the_csv_columns_in_order(tmp_path: Path) -> None:
    path = jsonl(tmp_path, *(row(i * 250, 300, 30) for i in range(900)))
    before = set(tmp_path.iterdir())
    main(["bench", "--trace", str(path), "--policies", "slascaler,Oracle"], io.StringIO())
    assert set(tmp_path.iterdir()) == before, "no file written without --out"
    out = tmp_path / "out"
    main(["bench", "--trace", str(path), "--policies", "slascaler,Oracle", "--out", str(out)],
         io.StringIO())  # fmt: skip
    header, *lines = (out / "bench.csv").read_text().splitlines()
    assert tuple(header.split(",")) == CSV_COLUMNS
    assert [line.split(",")[2] for line in lines] == ["slascaler", "Oracle"]
    oracle = dict(zip(CSV_COLUMNS, lines[1].split(","), strict=True))
    assert 0.0 <= float(oracle["sla_attainment"]) <= 1.0
    assert oracle["attainment_where_feasible"] == "1.0000"


def test_unknown_policy_and_bad_seeds_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--quick", "--policies", "Magic"], io.StringIO()) == 2
    assert "unknown policy 'Magic'; choose from slascaler" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["bench", "--seeds", "one"], io.StringIO())
    assert "must be whole numbers separated by commas" in capsys.readouterr().err


def test_the_readme_summary_is_the_reports_ratio_and_target_tables(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = jsonl(tmp_path, *(row(i * 250, 300, 30) for i in range(900)))
    readme = tmp_path / "README.md"
    readme.write_text("# x\n\nbefore\n<!-- bench-summary:start -->\nold\n"
                      "<!-- bench-summary:end -->\nafter\n")  # fmt: skip
    doc = tmp_path / "docs" / "benchmark.md"
    doc.parent.mkdir()
    argv = ["bench", "--trace", str(path), "--policies", "slascaler,Oracle", "--doc", str(doc)]
    assert main([*argv, "--summary", str(readme)], io.StringIO()) == 0
    text = readme.read_text()
    assert text.startswith("# x\n\nbefore\n<!-- bench-summary:start -->\nFrom [docs/benchmark.md]")
    assert text.endswith("<!-- bench-summary:end -->\nafter\n") and "old" not in text
    report = doc.read_text()
    ratios = report.split("## Ratios per scenario")[1].split("\n## ")[0]
    assert "### Ratios per scenario" + ratios.rstrip("\n") in text
    # The target verdicts counted per scenario and target: mine.jsonl, judged once per seed.
    verdicts = report.split("## Targets of the control-quality issue")[1].split("\n## ")[0]
    judged = [line for line in verdicts.splitlines() if line.startswith("| 1 ")]
    met = [line for line in judged if "| yes |" in line]
    assert f"| mine.jsonl | {len(met)}/{len(judged)} |" in text
    assert "## Every run" in report and "Every run" not in text
    # Without --doc there is nothing to copy: refused, and the README is left as it was.
    assert main(["bench", "--quick", "--summary", str(readme)], io.StringIO()) == 2
    assert "give --doc too" in capsys.readouterr().err
    assert readme.read_text() == text


def test_a_gzip_compressed_trace_reads_as_the_plain_one(tmp_path: Path) -> None:
    plain = jsonl(tmp_path, row(0), row(1500, 300, 20))
    packed = tmp_path / "mine.jsonl.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert read_trace(packed).rows == read_trace(plain).rows


def test_a_broken_gzip_or_non_utf8_file_is_refused_naming_it(tmp_path: Path) -> None:
    broken = tmp_path / "mine.jsonl.gz"
    broken.write_bytes(b"not gzip at all")
    gzip_fix = r"mine\.jsonl\.gz:1: not a readable gzip file .*; recompress it, or drop the \.gz"
    with pytest.raises(TraceError, match=gzip_fix):
        read_trace(broken)
    latin = tmp_path / "latin.csv"
    latin.write_bytes("TIMESTAMP,ContextTokens,GeneratedTokens\n\xe9".encode("latin-1"))
    with pytest.raises(TraceError, match=r"latin\.csv:1: not UTF-8 text .*; save it as UTF-8"):
        read_trace(latin)


def test_the_bundled_mooncake_trace_is_kimis_hour_with_its_block_hashes() -> None:
    """The figures of the traces' README: 12,031 requests over 58.9 minutes, prompts of
    12,035 tokens on average, one 512-token block hash per started block."""
    trace = read_trace("mooncake")
    assert len(trace.rows) == 12_031
    assert trace.rows[-1].at / 60 == pytest.approx(58.95, abs=0.01)
    assert sum(r.prompt for r in trace.rows) / len(trace.rows) == pytest.approx(12_035, abs=1)
    assert all(len(r.block_hashes) == math.ceil(r.prompt / 512) for r in trace.rows)
