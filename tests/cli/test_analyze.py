"""`slascaler analyze` and `slascaler samples` as a user runs them."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from fake_prometheus import TTFT, Histogram, Pod, fake_prometheus, serving
from slascaler.cli import main
from slascaler.engines import VLLM_REQUEST_LATENCY_BUCKETS_S, VLLM_TTFT_BUCKETS_S

HEADER = "queue_time_ms,tokenization_ms,prefill_ms,first_decode_ms\n"
REPO = Path(__file__).resolve().parents[2]


def run(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    return main(argv, out), out.getvalue()


def test_bundled_high_load_sample_is_queue_bound() -> None:
    status, text = run(["analyze", str(REPO / "examples/samples/high_load.csv")])
    assert status == 0
    assert "(100 requests)" in text
    assert "Regime: QueueBound" in text
    assert "What to do: add replicas" in text


def test_json_has_the_source_keys_and_the_regime(tmp_path: Path) -> None:
    path = tmp_path / "s.csv"
    path.write_text(HEADER + "300,10,100,20\n5,10,100,20\n400,10,90,20\n")
    status, text = run(["analyze", str(path), "--format", "json", "--objective-ms", "200"])
    assert status == 0
    report = json.loads(text)
    assert {"p50_ms", "p95_ms", "p99_ms", "mean_ms", "bottleneck_distribution", "regime"} <= set(
        report
    )
    assert set(report["bottleneck_distribution"]) == {"queue", "tokenization", "prefill", "decode"}
    assert report["p50_ms"] == pytest.approx(430.0)
    assert report["mean_ms"] == pytest.approx(1085 / 3)
    assert report["bottleneck_distribution"]["queue"] == pytest.approx(2 / 3)
    assert report["regime"] == "QueueBound"


def test_jsonl_input(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    rows = [{"queue_time_ms": 1, "tokenization_ms": 10, "prefill_ms": 100, "first_decode_ms": 20}]
    path.write_text("\n".join(json.dumps(r) for r in rows * 5) + "\n")
    status, text = run(["analyze", str(path), "--format", "json"])
    assert status == 0 and json.loads(text)["regime"] == "PrefillBound"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "s.csv: no samples (the file is empty)"),
        (HEADER, "s.csv: no samples (only a header)"),
        ("queue_time_ms,prefill_ms\n1,2\n", "s.csv:1: missing column 'tokenization_ms'"),
        (HEADER + "1,2,3,4\n1,2,abc,4\n", "s.csv:3: column 'prefill_ms': 'abc' is not a number"),
        (HEADER + "1,2,,4\n", "s.csv:2: column 'prefill_ms' is empty"),
        (HEADER + "1,2,nan,4\n", "s.csv:2: column 'prefill_ms': 'nan' is not finite"),
        (HEADER + "1,2,3,4,5\n", "s.csv:2: more values than header columns"),
        ('{"queue_time_ms": 1}\n', "s.csv:1: missing key 'tokenization_ms'"),
        ('{"queue_time_ms": 1, \n', "s.csv:1: not JSON"),
    ],
)
def test_bad_input_one_clear_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    path = tmp_path / "s.csv"
    path.write_text(content)
    status, out = run(["analyze", str(path)])
    err = capsys.readouterr().err
    assert status == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1
    assert message in err
    assert str(tmp_path) in err


def test_missing_file(capsys: pytest.CaptureFixture[str]) -> None:
    status, _ = run(["analyze", "/nonexistent/samples.csv"])
    assert status == 2
    assert "/nonexistent/samples.csv: No such file or directory" in capsys.readouterr().err


def test_samples_round_trip_through_analyze(tmp_path: Path) -> None:
    path = tmp_path / "low.jsonl"
    status, _ = run(
        [
            "samples",
            "--scenario",
            "low-load",
            "--count",
            "500",
            "--seed",
            "3",
            "--format",
            "jsonl",
            "-o",
            str(path),
        ]
    )
    assert status == 0
    status, text = run(["analyze", str(path), "--format", "json"])
    report = json.loads(text)
    assert report["count"] == 500
    assert report["bottleneck_distribution"]["prefill"] > 0.97


def test_console_script_reads_standard_input() -> None:
    script = Path(sys.executable).parent / "slascaler"
    produced = subprocess.run(
        [str(script), "samples", "--count", "50"], capture_output=True, text=True, check=True
    )
    result = subprocess.run(
        [str(script), "analyze", "-", "--objective-ms", "500"],
        input=produced.stdout,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "TTFT analysis of - (50 requests)" in result.stdout


def test_prometheus_mean_is_the_ttft_histograms_mean() -> None:
    """The components' means need not add up to TTFT's (here queue + prefill > TTFT, so no
    tokenization overhead is left): the mean printed is TTFT's own."""
    latency = VLLM_REQUEST_LATENCY_BUCKETS_S
    pod = Pod(
        "llama-6d4cf56db6-x7k2p",
        histograms={
            TTFT: Histogram.of([0.3] * 20, VLLM_TTFT_BUCKETS_S),
            "vllm:request_queue_time_seconds": Histogram.of([0.2] * 20, latency),
            "vllm:request_prefill_time_seconds": Histogram.of([0.2] * 20, latency),
        },
        gauges={"vllm:num_requests_waiting": 0.0, "vllm:num_requests_running": 2.0},
    )
    with fake_prometheus(serving([pod])) as prometheus:
        status, text = run(["analyze", "--prometheus", prometheus.url, "--namespace", "ns",
                            "--deployment", "llama", "--format", "json"])  # fmt: skip
    assert status == 0, text
    report = json.loads(text)
    assert sum(report["component_means_ms"].values()) == pytest.approx(400.0)
    assert report["mean_ms"] == pytest.approx(300.0)
