"""The baselines' formulas against hand-computed cases, the oracle, and the closed loop."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from slascaler.cli import main
from slascaler_sim.baselines import HPAController, OracleController, StaticController
from slascaler_sim.benchmark import BASELINES
from slascaler_sim.fleet import EngineSettings, Fleet
from slascaler_sim.profiles import PROFILES
from slascaler_sim.run import OperatorController, simulate
from slascaler_sim.workload import load_trace, modulated_poisson, step_rate

DEMO = PROFILES["source-demo"]


@pytest.mark.parametrize(
    ("current", "value", "expected"),
    [
        (4, 5.4, 4),  # ratio 1.08: inside the 10% tolerance
        (4, 5.6, 5),  # ceil(4 × 1.12) = 5
        (4, 20.0, 16),  # ceil(4 × 4)
        (4, 0.0, 0),  # scale to zero recommended; clamped to min by the controller
        (3, 2.0, 2),  # ceil(3 × 0.4) = 2
    ],
)
def test_hpa_replica_calculator(current: int, value: float, expected: int) -> None:
    assert HPAController("queue", 5.0, 1, 100).desired(current, value) == expected


class _StubFleet(Fleet):
    """A fleet whose queue metric is set by the test."""

    waiting_per_pod = 0.0

    def observation(self, window_s: float):  # type: ignore[no-untyped-def,override]
        base = super().observation(window_s)
        from dataclasses import replace

        return replace(base, waiting=self.waiting_per_pod * max(1, self.ready_replicas))


def test_hpa_scale_up_limit_and_scale_down_stabilization() -> None:
    fleet = _StubFleet(DEMO, 2, startup_s=0.0)
    hpa = HPAController("queue", 5.0, 1, 100)
    fleet.waiting_per_pod = 500.0  # wants 200 replicas
    hpa.control(fleet, 0.0)
    assert fleet.desired == 6  # max(2 + 4 pods, 2 × 200%) = 6
    fleet.run_until(1.0)
    hpa.control(fleet, 15.0)
    assert fleet.desired == 12  # max(6 + 4, 6 × 2)
    fleet.waiting_per_pod = 0.0  # wants min
    for t in range(30, 300, 15):
        hpa.control(fleet, float(t))
        assert fleet.desired == 12, t  # the 300 s window keeps the highest recommendation
    hpa.control(fleet, 330.0)
    assert fleet.desired == 1


def test_static_and_oracle_controllers() -> None:
    fleet = Fleet(DEMO, 2)
    StaticController(5).control(fleet, 0.0)
    assert fleet.desired == 5
    oracle = OracleController([1, 1, 4, 4, 2, 1], startup_s=60.0)
    assert oracle.target(0.0) == 4  # minute 2 needs 4 and is within start-up + one window
    assert oracle.target(200.0) == 4
    assert oracle.target(250.0) == 2
    assert oracle.target(330.0) == 1
    blind = OracleController([1, 1, 4, 4, 2, 1], startup_s=60.0, looks_ahead=False)
    assert [blind.target(t) for t in (0.0, 119.0, 120.0, 200.0, 250.0)] == [1, 1, 4, 4, 2]


def test_closed_loop_slascaler_recovers_from_a_step_within_the_bound() -> None:
    rows = load_trace("conversation")
    requests = modulated_poisson(step_rate(5.0, 20.0, 600.0), 20.0, 1500.0, rows, seed=1)
    spec = {
        "targetRef": {"name": "x"},
        "objectives": {"ttft": {"thresholdMs": 500}, "itl": {"thresholdMs": 100}},
        "replicas": {"min": 1, "max": 32}, "window": "1m",
    }  # fmt: skip
    result = simulate(
        requests, OperatorController(spec), PROFILES["llama3-8b-a100"],
        EngineSettings(256, 2048), 2, 60.0, 1500.0, 500.0,
    )  # fmt: skip
    after_step = [(s, p) for s, p in result.window_p95() if s >= 600]
    # Back under the SLA within start-up delay + 2 minutes of the step, and it stays there.
    recovered = [s for s, p in after_step if p <= 500]
    assert recovered and recovered[0] <= 600 + 60 + 120
    late = [p for s, p in after_step if s >= 600 + 60 + 120]
    assert sum(p <= 500 for p in late) / len(late) >= 0.9
    peak = max(sample.desired for sample in result.timeline)
    assert peak >= 4


def test_demo_prints_the_table_and_writes_the_plot(tmp_path: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    from slascaler_sim.demo import run_demo

    results = run_demo(6.0, tmp_path / "demo.png", out, err)
    text = out.getvalue()
    assert "| slascaler |" in text and "| HPA on queue |" in text
    assert "GPU-hours" in text and "SLA attainment" in text
    assert (tmp_path / "demo.png").stat().st_size > 10_000
    assert "100% of the simulated time" in err.getvalue()
    assert [r.name for r in results] == ["slascaler", "HPA on queue"]


def test_bench_refuses_a_malformed_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "mine.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 10, "output_length": 5}\n{"oops": 1}\n')
    assert main(["bench", "--trace", str(trace)], io.StringIO()) == 2
    assert "mine.jsonl:2" in capsys.readouterr().err


def test_bench_on_a_user_trace(tmp_path: Path) -> None:
    trace = tmp_path / "mine.jsonl"
    lines = [
        f'{{"timestamp": {i * 250}, "input_length": 800, "output_length": 40}}' for i in range(800)
    ]
    trace.write_text("\n".join(lines) + "\n")
    out = io.StringIO()
    status = main(
        ["bench", "--trace", str(trace), "--minutes", "3", "--seeds", "1", "--out", str(tmp_path)],
        out,
    )
    assert status == 0
    table = out.getvalue()
    for policy in BASELINES:
        assert f"| {policy} |" in table
    assert (tmp_path / "bench.csv").read_text().count("\n") == len(BASELINES) + 1
