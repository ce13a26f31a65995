"""The shared-GPU-pool benchmark's parts: shared GPUs, the runs, the table and its section.

- Fleets that share GPUs leave replicas Pending beyond the free GPUs, count GPUs per replica,
  and start Pending replicas on freed GPUs oldest-Pending first.
- A short run of two models under every arrangement: with the GPUPool the fleets never ask
  for more GPUs than the pool holds and the pool's status is written; the high-priority
  model gets GPUs from the low-priority one; the weighted attainment is what it says.
- Each model's evaluations start at its own seeded phase of the period (not in lockstep,
  where the first model would win every race for GPUs).
- The table, the verdict and the document's section (replaced in place; the matrix's
  `--doc` keeps it), and the command line's refusals.
"""

from __future__ import annotations

import io

import pytest

from slascaler.cli import main
from slascaler_sim.engine import Request
from slascaler_sim.fleet import EngineSettings, Fleet, SharedGPUs
from slascaler_sim.pool_bench import (
    ARRANGEMENTS,
    KEDA,
    PER_SLA,
    POOLED,
    ModelOutcome,
    PoolModel,
    PoolOutcome,
    PoolScenario,
    _phase,
    run_arrangement,
)
from slascaler_sim.profiles import PROFILES
from slascaler_sim.report import (
    kept_section,
    pool_section,
    pool_table,
    pool_verdict,
    replace_section,
)
from slascaler_sim.workload import load_trace, modulated_poisson, step_rate

A100 = PROFILES["llama3-8b-a100"]


def test_fleets_sharing_gpus_wait_for_free_ones_oldest_first() -> None:
    gpus = SharedGPUs(6)
    a = Fleet(A100, 2, startup_s=10, gpus_per_replica=2, shared=gpus)
    b = Fleet(A100, 1, startup_s=10, shared=gpus)
    c = Fleet(A100, 1, startup_s=10, shared=gpus)
    assert (a.gpus_in_use, gpus.free()) == (4, 0)
    b.scale(2)  # Pending first
    for fleet in (a, b, c):
        fleet.run_until(5.0)
    c.scale(3)  # Pending later
    assert (b.unschedulable, c.unschedulable) == (1, 2)
    a.scale(1)  # frees 2 GPUs once its replica drained
    for fleet in (a, b, c):
        fleet.run_until(30.0)
    gpus.refill()
    assert (b.unschedulable, c.unschedulable) == (0, 1), "b has waited longer"
    assert gpus.in_use == 6


def _tiny(minutes: float = 8.0) -> PoolScenario:
    """Two models on 6 GPUs: the high one's load triples from minute 3, the low one is busy."""
    rows = load_trace("conversation")
    duration = minutes * 60

    def load(low: float, high: float, at: float) -> object:
        return lambda seed: modulated_poisson(step_rate(low, high, at), high, duration, rows, seed)

    high = PoolModel("high", 10, load(5.0, 16.0, 180.0), A100, 500.0, None, initial=2,  # type: ignore[arg-type]
                     max_replicas=6)  # fmt: skip
    low = PoolModel("low", 1, load(14.0, 14.0, 0.0), A100, 500.0, None, initial=4,  # type: ignore[arg-type]
                    max_replicas=6)  # fmt: skip
    return PoolScenario("tiny", (high, low), gpus=6, duration_s=duration, startup_s=30.0)


@pytest.fixture(scope="module")
def tiny_runs() -> dict[str, PoolOutcome]:
    return {a: run_arrangement(_tiny(), a, seed=1) for a in (POOLED, PER_SLA, KEDA)}


def test_with_the_pool_the_fleets_never_ask_for_more_gpus_than_it_holds(
    tiny_runs: dict[str, PoolOutcome],
) -> None:
    pooled = tiny_runs[POOLED]
    assert all(sum(desired) <= 6 for _, desired in pooled.timeline)
    assert pooled.moves >= 1, "the high-priority model took GPUs from the low one"
    peak_high = max(desired[0] for _, desired in pooled.timeline)
    alone_high = max(desired[0] for _, desired in tiny_runs[PER_SLA].timeline)
    assert peak_high >= alone_high
    for outcome in tiny_runs.values():
        assert [m.model for m in outcome.models] == ["high", "low"]
        assert 0 < outcome.utilisation <= 1


def test_each_model_is_evaluated_at_its_own_phase_the_same_in_every_arrangement() -> None:
    phases = {(seed, m): _phase(seed, m, 15.0) for seed in range(1, 9) for m in ("a", "b")}
    assert all(p in (0.0, 5.0, 10.0) for p in phases.values())
    assert phases == {(seed, m): _phase(seed, m, 15.0) for seed, m in phases}
    assert any(phases[seed, "a"] != phases[seed, "b"] for seed in range(1, 9))
    assert len({phases[seed, "a"] for seed in range(1, 9)}) > 1


def test_weighted_attainment_and_the_verdict() -> None:
    def outcome(arrangement: str, high: float, low: float) -> PoolOutcome:
        def model(name: str, priority: int, met: float) -> ModelOutcome:
            windows = tuple((i * 60.0, 100.0 if i < met * 10 else 900.0) for i in range(10))
            return ModelOutcome(name, priority, 500.0, windows, 1.0, 400.0, 3)

        return PoolOutcome("s", arrangement, 1, 4, 600.0, (model("a", 30, high),
                                                            model("b", 10, low)))  # fmt: skip

    pooled, alone = outcome(POOLED, 0.9, 0.5), outcome(PER_SLA, 0.6, 1.0)
    assert pooled.weighted_attainment == pytest.approx((30 * 0.9 + 10 * 0.5) / 40)
    assert pooled.utilisation == pytest.approx(2.0 / (4 * 600 / 3600))
    points, met = pool_verdict([pooled, alone])
    assert points == pytest.approx(30.0) and met
    assert pool_verdict([outcome(POOLED, 0.7, 0.5), alone]) == (pytest.approx(10.0), False)
    table = pool_table([pooled, alone])
    assert "| slascaler + GPUPool | 90.0% | 50.0% | 80.0% |" in table
    assert table.splitlines()[0].startswith("| arrangement | a (priority 30) | b (priority 10)")


def test_a_window_that_missed_its_itl_objective_counts_against_the_model(
    tiny_runs: dict[str, PoolOutcome],
) -> None:
    ttft = tuple((i * 60.0, 100.0) for i in range(4))
    itl = ((0.0, 50.0), (60.0, 150.0), (120.0, 90.0))  # minute 3 emitted no token
    model = ModelOutcome("a", 30, 500.0, ttft, 1.0, 100.0, 2, itl, itl_threshold_ms=100.0)
    assert model.attainment == pytest.approx(0.75)
    assert ModelOutcome("a", 30, 500.0, ttft, 1.0, 100.0, 2, itl).attainment == 1.0
    # The runs read each window's ITL from the engines' histogram, window by window.
    for outcome in tiny_runs.values():
        for m in outcome.models:
            starts = [start for start, _ in m.windows]
            assert [start for start, _ in m.itl_windows] == starts[: len(m.itl_windows)]
            assert len(m.itl_windows) >= len(starts) - 1
            assert all(0 < p < 1000 for _, p in m.itl_windows)


def test_the_section_is_replaced_in_place_and_kept_by_the_matrix(
    tiny_runs: dict[str, PoolOutcome],
) -> None:
    outcomes = list(tiny_runs.values())
    section = pool_section(outcomes, _tiny(), "slascaler bench --pools", "header.")
    document = "# Benchmark results\n\nthe matrix\n"
    once = replace_section(document, section)
    assert once.startswith(document.rstrip("\n")) and once.count("## Shared GPU pool") == 1
    assert replace_section(once, section) == once
    assert kept_section(once) == section
    assert "| slascaler per SLA |" in section and "| KEDA on TTFT per SLA |" in section


def test_the_command_line_refuses_what_the_pool_benchmark_cannot_use(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["bench", "--pools", "--trace", "x.csv"], io.StringIO()) == 2
    assert "--pools runs its own scenario" in capsys.readouterr().err
    assert main(["bench", "--pools", "--minutes", "2"], io.StringIO()) == 2
    assert "at least 5 minutes" in capsys.readouterr().err
    assert set(ARRANGEMENTS) == {POOLED, PER_SLA, KEDA, "slascaler + GPUPool, priority-blind"}


def test_requests_are_those_of_the_scenario() -> None:
    scenario = _tiny(4)
    requests: list[Request] = scenario.models[0].workload(1)
    assert requests and all(r.arrival <= scenario.duration_s for r in requests)
    assert EngineSettings(256, 2048) == scenario.models[0].settings
