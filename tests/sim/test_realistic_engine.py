"""The realistic engine against hand-computed cases: the context limit, prefill attention over
earlier chunks, automatic prefix caching (hits, the last-token rule, shared KV counted once,
LRU eviction, metrics as vLLM exports them), the prefix-affinity router and the shared-prefix
generator."""

from __future__ import annotations

from dataclasses import replace

import pytest
from prometheus_client.parser import text_string_to_metric_families

from slascaler.engines import vllm_token_buckets
from slascaler_sim.baselines import StaticController
from slascaler_sim.engine import Replica, Request
from slascaler_sim.exposition import HELP, render
from slascaler_sim.fleet import EngineSettings, Fleet
from slascaler_sim.kvcache import PrefixCache
from slascaler_sim.prefixes import SharedPrefixes, assign_shared_prefixes, ideal_hit_share
from slascaler_sim.profiles import PROFILES, CostProfile, prefill_pairs
from slascaler_sim.routing import prefix_affinity
from slascaler_sim.run import simulate
from slascaler_sim.workload import load_trace, modulated_poisson, read_trace, replay

DEMO = PROFILES["source-demo"]  # 0.1 ms per prefill token, 20 ms per decode step
B = 16  # tokens per block


def _replica(profile: CostProfile = DEMO, chunk: int = 8192, kv: int | None = None) -> Replica:
    """A replica still loading: requests submitted now are all there when it starts."""
    if kv is not None:
        profile = replace(profile, kv_capacity_tokens=kv)
    return Replica("r", profile, 256, chunk, ready_at=0.0)


def _run(replica: Replica) -> float:
    """Run the replica until it is idle; returns the time it ends."""
    now = replica.ready_at
    if replica.step is None:
        replica.handle_event(now)
    while replica.step is not None:
        now = replica.step.end
        replica.handle_event(now)
    return now


def _counter(replica: Replica, name: str) -> float:
    return replica.recorder.counters[f"vllm:{name}_total"]


# -- the context limit ---------------------------------------------------------------------


def test_a_prompt_at_or_over_max_model_len_is_refused_never_served_and_counted() -> None:
    fleet = Fleet(replace(DEMO, max_model_len=1000), 1)
    at_limit = Request(0, 0.0, 1000, 5)  # vLLM needs room for at least one output token
    over = Request(1, 0.0, 1200, 5)
    too_many_tokens = Request(2, 0.0, 10, 1500)  # max_tokens > max_model_len
    clamped = Request(3, 0.0, 999, 10)  # 999 + 10 > 1000: generation stops at the limit
    fine = Request(4, 0.0, 500, 5)
    fleet.feed([at_limit, over, too_many_tokens, clamped, fine])
    fleet.run_until(100.0)

    assert fleet.failed_requests == 3
    assert fleet.refused == [at_limit, over, too_many_tokens]
    assert at_limit.refused is not None and "maximum model length of 1000" in at_limit.refused
    assert over.refused is not None and "contains 1200 input tokens" in over.refused
    assert too_many_tokens.refused == "max_tokens=1500 cannot be greater than max_model_len=1000."
    for request in fleet.refused:
        assert request.scheduled_at is None and request.first_token_at is None
        assert request.done_at is None and request not in fleet.finished
    assert clamped.refused is None and clamped.output == 1 and clamped.done_at is not None
    assert fleet.finished == [clamped, fine]
    # vLLM refuses these in its API server, before the engine: no engine metric counts them.
    totals = fleet.totals()
    assert totals.counters["vllm:request_success_total"] == 2
    assert totals.counters["vllm:prompt_tokens_total"] == 999 + 500
    assert totals.counters["vllm:prefix_cache_queries_total"] == 999 + 500
    assert totals.histograms["vllm:time_to_first_token_seconds"].observations == 2
    assert totals.counters["vllm:generation_tokens_total"] == 1 + 5


def test_a_run_reports_its_failed_requests() -> None:
    requests = [Request(i, 0.5 * i, 2000 if i % 3 == 0 else 200, 5) for i in range(30)]
    result = simulate(
        requests, StaticController(1), replace(DEMO, max_model_len=1000), EngineSettings(),
        1, 0.0, 60.0, 500.0,
    )  # fmt: skip
    assert result.failed_requests == 10
    assert len(result.requests) == 20  # the refused never reach the TTFT windows


def test_token_buckets_follow_the_profiles_context() -> None:
    fleet = Fleet(PROFILES["llama3-8b-h100"], 2)
    fleet.feed([Request(0, 0.0, 100, 2)])
    fleet.run_until(5.0)
    fleet.snapshot()
    prompt = fleet.totals().histograms["vllm:request_prompt_tokens"]
    assert prompt.bounds == tuple(float(b) for b in vllm_token_buckets(8192))
    assert prompt.bounds[-1] == 5000.0
    assert fleet.observation(60.0).prompt_tokens is not None
    assert PROFILES["llama3.1-8b-h100"].max_model_len == 131072


# -- prefill attention --------------------------------------------------------------------


def test_the_second_chunk_pays_attention_over_the_first() -> None:
    profile = replace(DEMO, attention_ms_per_token_pair=1e-4)
    replica = _replica(profile, chunk=1000)
    request = Request(0, 0.0, 2000, 1)
    replica.submit(request, 0.0)
    replica.handle_event(0.0)
    assert replica.step is not None
    # Chunk 1: 1000 tokens × 0.1 ms + 1000 × (0 + 500) pairs × 1e-4 ms = 100 + 50 ms.
    assert replica.step.duration == pytest.approx(0.150)
    replica.handle_event(replica.step.end)
    # Chunk 2 after 1000 tokens: 100 ms + 1000 × (1000 + 500) × 1e-4 ms = 100 + 150 ms.
    assert replica.step is not None
    assert replica.step.duration == pytest.approx(0.250)
    _run(replica)
    assert request.first_token_at == pytest.approx(0.400)


@pytest.mark.parametrize(
    ("profile", "linear_ms", "attention_ms"),
    [
        # Linear ops extrapolated past 4096 tokens by the last slope; attention from
        # AIConfigurator's measured 8k prefill (0.912 and 3.120 ms per layer, 32 layers).
        ("llama3-8b-h100", 84 + 44 / 2048 * 4096, 32 * 0.912),
        ("llama3-8b-a100", 274 + 128 / 2048 * 4096, 32 * 3.120),
    ],
)
def test_an_8k_prefill_costs_linear_ops_plus_its_measured_attention(
    profile: str, linear_ms: float, attention_ms: float
) -> None:
    cost = PROFILES[profile]
    assert cost.step_ms(8192, 0, 0, prefill_pairs(8192, 0)) == pytest.approx(
        linear_ms + attention_ms
    )
    # The same prompt in two chunks: the second attends to the first (3× the first's pairs).
    first = cost.step_ms(4096, 0, 0, prefill_pairs(4096, 0))
    second = cost.step_ms(4096, 0, 0, prefill_pairs(4096, 4096))
    assert second - first == pytest.approx(attention_ms / 2)


# -- automatic prefix caching ---------------------------------------------------------------


def _warm(replica: Replica) -> float:
    """Serve a 100-token prompt whose 6 full blocks are 1…6 (block 7 is partial)."""
    replica.submit(Request(0, 0.0, 100, 2, block_hashes=(1, 2, 3, 4, 5, 6, 7)), 0.0)
    return _run(replica)


def test_a_cached_prefix_skips_exactly_its_blocks() -> None:
    profile = replace(DEMO, attention_ms_per_token_pair=1e-4)
    replica = _replica(profile)
    now = _warm(replica)  # 100 × 0.1 + 100 × 50 × 1e-4 = 10.5 ms, then one 20 ms decode
    assert now == pytest.approx(0.0305)
    assert replica.cache is not None and replica.cache.cached_blocks == 6
    # 120 tokens sharing blocks 1…5 (80 tokens); its blocks 6 and 7 differ.
    shared = Request(1, now, 120, 1, block_hashes=(1, 2, 3, 4, 5, 50, 51, 52))
    replica.submit(shared, now)
    assert replica.step is not None and replica.step.chunks == [(shared, 40)]
    # 40 tokens × 0.1 ms + 40 × (80 + 20) pairs × 1e-4 ms = 4 + 0.4 ms.
    assert replica.step.duration == pytest.approx(0.0044)
    end = _run(replica)
    assert shared.first_token_at == pytest.approx(now + 0.0044) == end
    assert shared.cached_tokens == 80


def test_a_fully_cached_prompt_recomputes_its_last_block() -> None:
    replica = _replica()
    now = _warm(replica)
    # 96 tokens = blocks 1…6, all cached: vLLM caps the hit at 95 tokens, whole blocks: 5.
    again = Request(1, now, 96, 1, block_hashes=(1, 2, 3, 4, 5, 6))
    replica.submit(again, now)
    assert replica.step is not None and replica.step.chunks == [(again, 16)]
    assert replica.step.duration == pytest.approx(0.0016)
    assert replica.cached_prefix_tokens(again) == 80


def test_prefix_cache_metrics_follow_vllm() -> None:
    replica = _replica()
    now = _warm(replica)
    shared = Request(1, now, 120, 3, block_hashes=(1, 2, 3, 4, 5, 50, 51, 52))
    replica.submit(shared, now)
    _run(replica)
    # Queries and hits count tokens at first admission; prompt_tokens counts every prompt
    # token, cached or not; prompt_tokens_cached the cached ones (vLLM 0.33.0).
    assert _counter(replica, "prefix_cache_queries") == 100 + 120
    assert _counter(replica, "prefix_cache_hits") == 0 + 80
    assert _counter(replica, "prompt_tokens") == 100 + 120
    assert _counter(replica, "prompt_tokens_cached") == 80
    histograms = replica.recorder.histograms
    assert histograms["vllm:request_prompt_tokens"].total == 100 + 120  # the full prompts
    assert histograms["vllm:request_prefill_kv_computed_tokens"].total == 100 + 40
    text = render([(replica.recorder, {"model_name": "m", "engine": "0"})])
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name in ("prefix_cache_queries", "prefix_cache_hits", "prompt_tokens_cached"):
        family = families[f"vllm:{name}"]
        assert family.type == "counter"
        assert family.documentation == HELP[f"vllm:{name}_total"]
    assert families["vllm:prefix_cache_hits"].samples[0].value == 80
    assert families["vllm:kv_cache_usage_perc"].type == "gauge"
    assert families["vllm:request_prefill_kv_computed_tokens"].type == "histogram"


def test_shared_blocks_count_once_in_the_kv_cache() -> None:
    replica = _replica(kv=10_000)
    replica.cache = PrefixCache(B)  # blocks 1…6 cached by an earlier request, now free
    replica.cache.release((1, 2, 3, 4, 5, 6), replica.cache.extend((1, 2, 3, 4, 5, 6), 0, 6)[0])
    b = Request(1, 0.0, 120, 5, block_hashes=(1, 2, 3, 4, 5, 50, 51, 52))
    c = Request(2, 0.0, 120, 5, block_hashes=(1, 2, 3, 4, 5, 60, 61, 62))
    replica.submit(b, 0.0)
    replica.submit(c, 0.0)
    replica.handle_event(0.0)  # ready: both admitted, each hits blocks 1…5
    assert replica.kv_used == 80  # the hit blocks, once
    assert replica.step is not None and replica.step.chunks == [(b, 40), (c, 40)]
    replica.handle_event(replica.step.end)  # both prefilled, first tokens out
    # Blocks 1…5 (80 tokens) once, then each request's 40 computed tokens and 1 output token.
    assert replica.kv_used == 80 + 2 * (40 + 1)
    assert b.kv == c.kv == 121  # each still reads its whole context
    assert replica.recorder.kv_cache_usage == pytest.approx(162 / 10_000)
    _run(replica)
    assert replica.kv_used == 0
    cache = replica.cache
    assert cache is not None and cache.free_blocks == cache.cached_blocks == 6 + 2 + 2


def test_lru_eviction_takes_the_least_recently_freed_blocks_tail_first() -> None:
    cache = PrefixCache(B)
    x, y, z = (1, 2, 3), (10, 11), (1, 2, 99)
    assert cache.extend(x, 0, 3) == (3, 0)
    assert cache.extend(y, 0, 2) == (2, 0)
    assert cache.release(x, 3) == 3 * B
    assert cache.release(y, 2) == 2 * B
    assert cache.free_queue() == [3, 2, 1, 11, 10]  # each request's tail first
    assert cache.match(z, 3) == (2, 2 * B)  # blocks 1, 2 cached, nobody holds them
    assert cache.acquire(z, 2) == 2 * B
    assert cache.free_queue() == [3, 11, 10]
    cache.evict_to(B)  # room for one free block
    assert cache.free_queue() == [10]
    assert sorted(cache.index) == [1, 2, 10]
    assert cache.match(x, 3) == (2, 0) and cache.evictions == 2
    assert cache.release(z, 2) == 2 * B
    assert cache.free_queue() == [10, 2, 1]


def _assert_consistent(replica: Replica) -> None:
    """KV in use = each running request's own tokens + every held run once; a run's holders
    are the running requests whose held blocks cover it; free runs fit in the free space
    (none is left where a step's prefill chunks overran the capacity)."""
    cache = replica.cache
    assert cache is not None
    runs = {id(run): run for run in cache.index.values()}.values()
    holders: dict[int, int] = {}
    for request in replica.running:
        done = 0
        while done < request.held:
            run = cache.index[request.block_hashes[done]]
            holders[id(run)] = holders.get(id(run), 0) + 1
            done += len(run.blocks)
        assert done == request.held
    assert all(run.refs == holders.get(id(run), 0) for run in runs)
    held = sum(len(run.blocks) for run in runs if run.refs)
    own = sum(r.kv - r.held * B for r in replica.running)
    assert replica.kv_used == own + held * B
    assert cache.free_blocks == sum(len(run.blocks) for run in runs if not run.refs)
    assert cache.free_blocks * B <= max(0, replica.profile.kv_capacity_tokens - replica.kv_used)


def test_a_full_kv_cache_evicts_cached_prefixes_and_stays_consistent() -> None:
    requests = modulated_poisson(
        lambda t: 40.0, 40.0, 60.0, load_trace("conversation")[:2000], seed=3
    )
    assign_shared_prefixes(requests, SharedPrefixes(groups=8), seed=3)
    replica = _replica(PROFILES["llama3-8b-h100"], chunk=2048, kv=40_000)
    accepted = [r for r in requests if r.prompt + r.output < 8192]
    for request in accepted:
        replica.submit(request, 0.0)
    replica.handle_event(0.0)
    while replica.step is not None:
        replica.handle_event(replica.step.end)
        _assert_consistent(replica)
    cache = replica.cache
    assert cache is not None and cache.evictions > 0
    assert replica.recorder.counters["vllm:num_preemptions_total"] > 0
    assert all(r.done_at is not None for r in accepted)
    assert replica.kv_used == 0 and cache.free_blocks == cache.cached_blocks
    assert cache.free_blocks * B <= 40_000
    assert all(run.refs == 0 for run in cache.index.values())


def test_a_traces_hash_ids_reach_the_prefix_cache(tmp_path) -> None:  # type: ignore[no-untyped-def]
    trace = tmp_path / "mooncake.jsonl"
    trace.write_text(
        '{"timestamp": 0, "input_length": 1500, "output_length": 1, "hash_ids": [1, 2, 3]}\n'
        '{"timestamp": 1000, "input_length": 1500, "output_length": 1, "hash_ids": [1, 2, 9]}\n'
    )
    first, second = replay(read_trace(trace).rows)
    assert second.block_hashes == (1, 2, 9) and second.hash_block_tokens == 512
    fleet = Fleet(DEMO, 1)
    fleet.feed([first, second])
    fleet.run_until(10.0)
    # 1500 tokens = 2 full blocks of 512 + 476: the second finds both blocks, prefills 476.
    assert second.cached_tokens == 1024
    assert second.first_token_at == pytest.approx(1.0 + 0.0476)
    copies = replay(read_trace(trace).rows, copies=2, seed=1)
    assert len({r.block_hashes[0] for r in copies}) == 2  # each copy's prefixes are its own


# -- routing ----------------------------------------------------------------------------


def test_prefix_affinity_prefers_the_cache_within_a_load_bound() -> None:
    cold, warm = _replica(), _replica()
    _warm(warm)
    request = Request(9, 0.0, 120, 1, block_hashes=(1, 2, 3, 4, 5, 50, 51, 52))
    assert prefix_affinity([cold, warm], request) is warm
    for i in range(8):
        warm.waiting.append(Request(100 + i, 0.0, 10, 1))
    assert prefix_affinity([cold, warm], request) is warm  # 8 more than the least loaded
    warm.waiting.append(Request(200, 0.0, 10, 1))
    assert prefix_affinity([cold, warm], request) is cold  # 9 more: least outstanding
    assert prefix_affinity([cold, warm], Request(10, 0.0, 120, 1)) is cold  # no hashes


@pytest.mark.parametrize(
    ("router", "queried"),
    [("least-outstanding", [10 + 120, 100 + 10]), ("prefix-affinity", [10, 100 + 10 + 120])],
)
def test_the_fleet_routes_a_shared_prefix_to_the_replica_that_cached_it(
    router: str, queried: list[int]
) -> None:
    fleet = Fleet(DEMO, 2, router=router)
    group = (1, 2, 3, 4, 5)
    busy = Request(0, 0.0, 10, 2000)  # → engine-0
    first = Request(1, 0.01, 100, 2, block_hashes=(*group, 6, 7))  # → engine-1 (idle)
    other = Request(2, 1.0, 10, 2000)  # → engine-1: both have one request now
    second = Request(3, 2.0, 120, 2, block_hashes=(*group, 50, 51, 52))
    fleet.feed([busy, first, other, second])
    fleet.run_until(3.0)
    # Prompt tokens looked up in each replica's cache tell which replica served whom.
    assert [r.recorder.counters["vllm:prefix_cache_queries_total"] for r in fleet.replicas] == (
        queried
    )
    assert second.cached_tokens == (80 if router == "prefix-affinity" else 0)


def test_unknown_router_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown router"):
        Fleet(DEMO, 1, EngineSettings(), router="random")


# -- the shared-prefix generator ------------------------------------------------------------


def test_shared_prefix_groups_share_exactly_their_leading_blocks() -> None:
    params = SharedPrefixes(groups=4, prefix_tokens=(64, 512), max_prompt_share=0.5)
    requests = assign_shared_prefixes(replay(load_trace("conversation")[:3000]), params, seed=7)
    again = assign_shared_prefixes(replay(load_trace("conversation")[:3000]), params, seed=7)
    assert [r.block_hashes for r in requests] == [r.block_hashes for r in again]
    prefixes: dict[int, int] = {}
    grouped = 0
    for request in requests:
        hashes = request.block_hashes
        assert len(hashes) == -(-request.prompt // B) and request.hash_block_tokens == B
        shared = [h for h in hashes if h > 0]
        assert hashes[: len(shared)] == tuple(shared)  # shared blocks lead
        if shared:
            grouped += 1
            group = shared[0] >> 32
            assert shared == list(range(group << 32, (group << 32) + len(shared)))
            assert prefixes.setdefault(group, len(shared)) == len(shared)  # whole prefix
            assert len(shared) * B <= 0.5 * request.prompt
    assert 1 <= len(prefixes) <= 4 and grouped > 1000
    private = [h for r in requests for h in r.block_hashes if h < 0]
    assert len(private) == len(set(private))
    assert 0.1 < ideal_hit_share(requests) < 0.5


def test_default_shared_prefixes_give_a_third_to_two_thirds_of_conversation_tokens() -> None:
    requests = assign_shared_prefixes(replay(load_trace("conversation")), seed=1)
    assert ideal_hit_share(requests) == pytest.approx(0.41, abs=0.01)
