"""The simulated engine against what is known: calibration points, source figures, vLLM v1
scheduler semantics, replica lifecycle and regimes under load."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from slascaler.model.regime import Regime, analyze_observation
from slascaler_sim.engine import Phase, Replica, Request
from slascaler_sim.fleet import EngineSettings, Fleet
from slascaler_sim.profiles import PROFILES
from slascaler_sim.workload import TraceError, load_trace, modulated_poisson, replay

H100 = PROFILES["llama3-8b-h100"]
A100 = PROFILES["llama3-8b-a100"]
DEMO = PROFILES["source-demo"]


@pytest.mark.parametrize(
    ("profile", "points"),
    [
        (H100, {1: 5.6, 128: 6.4, 512: 12.0, 2048: 40.0, 4096: 84.0}),
        (A100, {1: 9.7, 128: 13.2, 512: 34.6, 2048: 146.0, 4096: 274.0}),
    ],
)
def test_step_times_match_the_calibration_points(profile, points) -> None:  # type: ignore[no-untyped-def]
    for tokens, ms in points.items():
        assert profile.step_ms(tokens, 0, 0) == pytest.approx(ms)
    # The H100 plateau: 4096 tokens in 84 ms is ≈ 49k tokens/s.
    if profile is H100:
        assert 4096 / profile.step_ms(4096, 0, 0) * 1000 == pytest.approx(48_762, rel=0.01)


def _alone(prompt: int, output: int, settings: EngineSettings | None = None) -> Request:
    fleet = Fleet(DEMO, 1, settings or EngineSettings())
    request = Request(0, 0.0, prompt, output)
    fleet.feed([request])
    fleet.run_until(1000.0)
    assert request.done_at is not None
    return request


def test_source_demo_prefill_and_shares() -> None:
    short, long = _alone(1000, 10), _alone(1000, 500)
    assert short.first_token_at == pytest.approx(0.100)  # 1000 tokens × 0.1 ms
    # The prefill step makes the first token; 9 more decode steps of 20 ms follow.
    short_share = 0.100 / short.done_at  # type: ignore[operator]
    long_share = 0.100 / long.done_at  # type: ignore[operator]
    assert short_share == pytest.approx(0.33, abs=0.04)
    assert long_share < 0.01


def test_long_prompts_are_chunked_by_the_token_budget() -> None:
    request = _alone(5000, 2, EngineSettings(max_num_batched_tokens=2048))
    # ⌈5000 / 2048⌉ = 3 prefill steps: with the demo profile the time is per token, 500 ms.
    assert request.first_token_at == pytest.approx(0.5)
    assert request.done_at == pytest.approx(0.52)


def _replica(seqs: int = 256, chunk: int = 8192, kv: int | None = None) -> Replica:
    """A replica still loading: requests submitted now are all there when it starts."""
    profile = DEMO if kv is None else replace(DEMO, kv_capacity_tokens=kv)
    return Replica("r", profile, seqs, chunk, ready_at=0.0)


def test_running_requests_are_served_before_new_ones_and_max_num_seqs_holds() -> None:
    replica = _replica(seqs=2)
    for i in range(3):
        replica.submit(Request(i, 0.0, 100, 50), 0.0)
    replica.handle_event(0.0)
    assert [r.id for r in replica.running] == [0, 1]  # the third waits: max_num_seqs = 2
    assert [r.id for r in replica.waiting] == [2]
    assert replica.step is not None and replica.step.decodes == []
    replica.handle_event(replica.step.end)  # prefill of both done: first tokens out
    assert all(r.first_token_at is not None for r in replica.running)
    assert len(replica.waiting) == 1  # still no slot
    assert replica.step is not None and len(replica.step.decodes) == 2


def test_budget_is_shared_between_decodes_and_a_new_prompt_chunk() -> None:
    replica = _replica(chunk=512)
    replica.submit(Request(0, 0.0, 100, 20), 0.0)
    replica.handle_event(0.0)
    assert replica.step is not None
    replica.handle_event(replica.step.end)
    replica.submit(Request(1, 0.0, 2000, 5), replica.step.start)  # arrives during decode
    # The decode-only run was cut at the arrival: next step carries 1 decode + 511 prompt tokens.
    replica.handle_event(replica.step.end)
    assert replica.step is not None
    assert [t for _, t in replica.step.chunks] == [511]
    assert len(replica.step.decodes) == 1


def test_full_kv_cache_preempts_the_newest_request() -> None:
    replica = _replica(kv=1000)
    replica.submit(Request(0, 0.0, 450, 200), 0.0)
    replica.submit(Request(1, 0.0, 450, 200), 0.0)
    replica.handle_event(0.0)
    while replica.step is not None and not replica.recorder.counters["vllm:num_preemptions_total"]:
        replica.handle_event(replica.step.end)
    assert replica.recorder.counters["vllm:num_preemptions_total"] >= 1
    assert replica.waiting[0].id == 1 and replica.waiting[0].preemptions == 1
    assert replica.kv_used <= 1000


def test_scale_up_pays_the_start_up_delay_and_scale_down_drains() -> None:
    fleet = Fleet(DEMO, 1, startup_s=30.0)
    fleet.scale(3)
    assert fleet.ready_replicas == 1 and fleet.starting_replicas == 2
    fleet.run_until(29.0)
    assert fleet.ready_replicas == 1
    fleet.run_until(30.0)
    assert fleet.ready_replicas == 3
    long = Request(0, 30.0, 100, 1000)
    fleet.feed([long])
    fleet.run_until(31.0)
    fleet.scale(1)
    assert fleet.gpus_in_use >= 1
    fleet.run_until(100.0)
    assert long.done_at is not None  # the replica serving it finished it before stopping
    assert fleet.gpus_in_use == 1


def test_knob_change_is_a_rolling_update() -> None:
    fleet = Fleet(DEMO, 4, EngineSettings(64, 2048), startup_s=10.0)
    fleet.reconfigure(EngineSettings(32, 2048))
    assert fleet.rolling_restarts == 1
    assert fleet.ready_replicas >= 3  # maxUnavailable 25% of 4 = 1
    fleet.run_until(100.0)
    live = [r for r in fleet.replicas if r.phase is Phase.READY]
    assert len(live) == 4 and all(r.max_num_seqs == 32 for r in live)


def test_regime_flips_from_prefill_bound_to_queue_bound_as_load_rises() -> None:
    rows = [row for row in load_trace("code") if row.prompt > 3000][:500]

    def regime(rate: float) -> Regime:
        fleet = Fleet(A100, 2, EngineSettings(256, 512))
        fleet.feed(modulated_poisson(lambda t: rate, rate, 300.0, rows, seed=1))
        for t in range(0, 301, 15):
            fleet.run_until(float(t))
            fleet.snapshot()
        return analyze_observation(fleet.observation(120.0), 95, 500.0).regime

    assert regime(0.2) is Regime.PREFILL_BOUND
    assert regime(6.0) is Regime.QUEUE_BOUND


def test_bundled_traces_and_replay() -> None:
    conversation = load_trace("conversation")
    assert len(conversation) == 19_366
    assert conversation[0].at == 0.0 and 3400 < conversation[-1].at < 3560
    requests = replay(conversation[:100], speedup=2.0, copies=3, seed=1)
    assert len(requests) == 300
    assert all(a.arrival <= b.arrival for a, b in itertools.pairwise(requests))


def test_malformed_traces_name_the_line(tmp_path) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "t.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 5, "output_length": 2}\n{"timestamp": 1}\n')
    with pytest.raises(TraceError, match=r"t\.jsonl:2"):
        load_trace(bad)
    csv = tmp_path / "t.csv"
    csv.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,10,x\n")
    with pytest.raises(TraceError, match=r"t\.csv:2"):
        load_trace(csv)
