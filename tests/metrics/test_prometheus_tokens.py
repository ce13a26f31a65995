"""The Prometheus source's token work and short recent window, for each engine's layout.

Prompt tokens computed per second (prompt tokens less the prefix cache's), generated tokens
per second, the requests served in the last 30 s and the growth of the waiting requests
since then — as the simulator's source computes them — from vLLM's, SGLang's and TGI's
series; a counter that is absent leaves its rate NaN and says so; a batch gives what each
target's own queries give; a malformed or negative answer never raises.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

import pytest
from test_prometheus_answers import source_for

from builders import spec as make_spec
from fake_prometheus import (
    Histogram,
    Pod,
    Reply,
    engine_answer,
    fake_prometheus,
    serving,
    vllm_pod,
)
from slascaler.engine_metrics import TGI_DURATION_BUCKETS_S
from slascaler.engines import VLLM_TTFT_BUCKETS_S
from slascaler.metrics.prometheus import Target
from slascaler.model.observation import Observation
from slascaler.policy.learning import tokens_per_request

WINDOW_S, RECENT_S = 120.0, 30.0  # the spec's default window, the recent window


def observe(pods: list[Pod], **spec: Any) -> Observation:
    with fake_prometheus(serving(pods)) as prometheus:
        return source_for(prometheus.url).observe("ns", make_spec(**spec), time.time())


def replaced(pod: Pod, **fields: Any) -> Pod:
    values = {name: getattr(pod, name) for name in ("histograms", "gauges", "counters",
                                                     "recent", "gauges_then")}  # fmt: skip
    values.update(fields)
    return Pod(pod.name, pod.namespace, **values)


def test_vllm_rates_are_the_counters_increases_summed_over_pods() -> None:
    observation = observe([vllm_pod("llama-6d4cf56db6-x7k2p", 40),
                           vllm_pod("llama-6d4cf56db6-q9zt4", 20)])  # fmt: skip
    assert observation.prompt_token_rate == pytest.approx((500 - 100) * 60 / WINDOW_S)
    assert observation.generation_token_rate == pytest.approx(200 * 60 / WINDOW_S)
    assert observation.recent_window_s == RECENT_S
    assert observation.recent_request_rate == pytest.approx(15 / RECENT_S)
    # waiting for capacity: 1 per pod now, 0.5 per pod 30 s ago
    assert observation.recent_waiting_growth == pytest.approx(1.0 / RECENT_S)
    assert not observation.derived and not observation.problems
    assert tokens_per_request(observation) == pytest.approx(400 + 200)


def test_older_vllm_cache_hits_are_read_under_their_names() -> None:
    pod = vllm_pod()
    counters = dict(pod.counters)
    counters["vllm:prefix_cache_hits_total"] = counters.pop("vllm:prompt_tokens_cached_total")
    observation = observe([replaced(pod, counters=counters)])
    assert observation.prompt_token_rate == pytest.approx(400 * 40 / WINDOW_S)
    assert "1 pod(s) read under vllm:prefix_cache_hits_total" in " ".join(observation.notes)


def test_vllm_without_a_cache_counter_counts_every_prompt_token_and_says_so() -> None:
    pod = vllm_pod()
    counters = {k: v for k, v in pod.counters.items() if "cached" not in k}
    observation = observe([replaced(pod, counters=counters)])
    assert observation.prompt_token_rate == pytest.approx(500 * 40 / WINDOW_S)
    assert any("vllm:prompt_tokens_cached_total" in d for d in observation.derived)


def sglang_pod(requests: int = 40, cached: float | None = 30.0) -> Pod:
    ttft = Histogram.of([0.3] * requests, VLLM_TTFT_BUCKETS_S)
    counters = {"sglang:prompt_tokens_total": 700.0 * requests,
                "sglang:generation_tokens_total": 50.0 * requests}  # fmt: skip
    if cached is not None:
        counters["sglang:cached_tokens_total"] = cached * requests
    return Pod(
        "llama-6d4cf56db6-x7k2p",
        histograms={"sglang:time_to_first_token_seconds": ttft, "sglang:queue_time_s": ttft},
        gauges={"sglang:num_queue_reqs": 4.0, "sglang:num_running_reqs": 8.0},
        gauges_then={"sglang:num_queue_reqs": 10.0},
        counters=counters,
        recent={"sglang:time_to_first_token_seconds_count": 9.0},
    )


@pytest.mark.parametrize("cached", [30.0, None], ids=["cache hits", "no hit yet"])
def test_sglang_rates(cached: float | None) -> None:
    """SGLang creates `sglang:cached_tokens_total` at its first hit: absent, none so far."""
    observation = observe([sglang_pod(cached=cached)], engine="sglang")
    assert observation.prompt_token_rate == pytest.approx((700 - (cached or 0)) * 40 / WINDOW_S)
    assert observation.generation_token_rate == pytest.approx(50 * 40 / WINDOW_S)
    assert observation.recent_request_rate == pytest.approx(9 / RECENT_S)
    assert observation.recent_waiting_growth == pytest.approx((4 - 10) / RECENT_S)
    assert not any("token" in d for d in observation.derived)
    assert not any("token rates are unknown" in n for n in observation.notes)


def tgi_pod(requests: int = 40, sums: bool = True) -> Pod:
    queue = Histogram.of([0.05] * requests, TGI_DURATION_BUCKETS_S)
    counters = {
        "tgi_request_input_length_sum": 300.0 * requests,
        "tgi_request_generated_tokens_sum": 80.0 * requests,
    }
    return Pod(
        "llama-6d4cf56db6-x7k2p",
        histograms={"tgi_request_queue_duration": queue},
        gauges={"tgi_queue_size": 2.0, "tgi_batch_current_size": 8.0},
        gauges_then={"tgi_queue_size": 2.0},
        counters=counters if sums else {},
        recent={"tgi_request_queue_duration_count": 12.0},
    )


def test_tgi_rates_come_from_its_histograms_sums() -> None:
    observation = observe([tgi_pod()], engine="tgi")
    assert observation.prompt_token_rate == pytest.approx(300 * 40 / WINDOW_S)
    assert observation.generation_token_rate == pytest.approx(80 * 40 / WINDOW_S)
    assert observation.recent_request_rate == pytest.approx(12 / RECENT_S)
    assert observation.recent_waiting_growth == 0.0
    assert any("TGI exports no prefix-cache counter" in d for d in observation.derived)


@pytest.mark.parametrize(
    ("engine", "pod"),
    [("vllm", replaced(vllm_pod(), counters={}, recent={})), ("tgi", tgi_pod(sums=False))],
    ids=["vllm", "tgi"],
)
def test_absent_counters_leave_the_rates_nan_and_say_so(engine: str, pod: Pod) -> None:
    observation = observe([pod], engine=engine)
    assert math.isnan(observation.prompt_token_rate)
    assert math.isnan(observation.generation_token_rate)
    notes = " ".join(observation.notes)
    assert "token rates are unknown" in notes
    assert "prompt-length histogram's mean" in notes
    if engine == "vllm":
        assert math.isnan(observation.recent_request_rate)
        assert "vllm:prompt_tokens_total" in notes and "vllm:generation_tokens_total" in notes


def test_a_pod_without_a_waiting_sample_then_started_since() -> None:
    pod = replaced(vllm_pod(), gauges_then={})
    observation = observe([pod])
    assert observation.recent_waiting_growth == pytest.approx(1.0 / RECENT_S)


def test_a_batch_of_every_engine_gives_what_single_queries_give() -> None:
    pods = {
        "vllm": [vllm_pod("llama-6d4cf56db6-x7k2p", 40), vllm_pod("llama-6d4cf56db6-q9zt4", 20)],
        "sglang": [sglang_pod()],
        "tgi": [tgi_pod()],
    }
    namespaced = [
        Pod(p.name, engine, p.histograms, p.gauges, counters=p.counters, recent=p.recent,
            gauges_then=p.gauges_then)
        for engine, group in pods.items()
        for p in group
    ]  # fmt: skip
    targets = [Target(engine, make_spec(engine=engine)) for engine in pods]
    with fake_prometheus(serving(namespaced)) as prometheus:
        source = source_for(prometheus.url)
        now = time.time()
        batch = source.observe_many(targets, now)
        queries = len(prometheus.queries)
        single = [source.observe_target(t, now) for t in targets]
    assert queries == 7 + 7 + 6, "per engine: its histogram families, gauges, counters"
    for ours, theirs in zip(batch, single, strict=True):
        assert repr(ours) == repr(theirs)  # NaN (TGI's request rate here) equal to NaN
        assert math.isfinite(ours.prompt_token_rate) and math.isfinite(ours.recent_request_rate)


def counters_answer(bad: Mapping[str, Any]) -> Any:
    """A Prometheus that answers the counters query with `bad` samples, the rest truly."""

    def behaviour(query: str, _: int) -> Reply:
        if "increase(vllm:prompt_tokens_total" in query:
            return Reply(200, {"status": "success",
                               "data": {"resultType": "vector", "result": [bad]}})  # fmt: skip
        return Reply(200, engine_answer(query, [vllm_pod()]))

    return behaviour


def test_a_malformed_counters_answer_holds_naming_it() -> None:
    with fake_prometheus(counters_answer({"metric": {}, "value": [1, "5"]})) as prometheus:
        observation = source_for(prometheus.url).observe("ns", make_spec(), time.time())
    assert observation.source_error is not None
    assert "slascaler_part" in observation.source_error


def test_a_negative_increase_is_not_read_and_nothing_raises() -> None:
    sample = {"metric": {"namespace": "ns", "pod": vllm_pod().name,
                         "slascaler_part": "prompt_tokens:0:increase"},
              "value": [1, "-5"]}  # fmt: skip
    with fake_prometheus(counters_answer(sample)) as prometheus:
        observation = source_for(prometheus.url).observe("ns", make_spec(), time.time())
    assert observation.source_error is None
    assert math.isnan(observation.prompt_token_rate)
    assert "vllm:prompt_tokens_total decreased (-5) in the window" in " ".join(observation.notes)
