"""What the Prometheus source makes of odd answers: each a hold that names the problem.

Malformed answers (a JSON list, `data: null`, `status: error` with HTTP 200, a dict result, a
matrix where a vector was asked, a missing or non-numeric value, a body that is not JSON)
give `source_error`; series that are not a histogram (a garbage `le`, negative counts,
counts of 1e300, a `_count` a thousand times the +Inf bucket, counts that decrease with `le`)
are missing data; a pod scraped under two addresses counts once; a fleet younger than the
window reads its rates over the seconds it served; a slow Prometheus (503 with
a long Retry-After, or a stall) costs one evaluation its deadline, no more. Through the real
`Reconciler`, each of these writes a status with MetricsAvailable=False and the reason.
"""

from __future__ import annotations

import math
import time
from typing import Any

import pytest

from builders import spec as make_spec
from edge import Edge
from fake_prometheus import (
    POD,
    TTFT,
    Histogram,
    Pod,
    Reply,
    engine_answer,
    fake_prometheus,
    serving,
    vllm_pod,
)
from slascaler.engines import VLLM_TTFT_BUCKETS_S
from slascaler.metrics.prometheus import PrometheusSettings, PrometheusSource, Target
from slascaler.metrics.targets import GaugeReading
from slascaler.model.observation import Observation
from slascaler.policy import FleetState, PolicyState, decide


def source_for(url: str, **settings: Any) -> PrometheusSource:
    chosen: dict[str, Any] = {"retries": 0, "backoff_s": 0.01, "recording_rules": False}
    return PrometheusSource(PrometheusSettings(url, **{**chosen, **settings}))


def observe(url: str, **settings: Any) -> Observation:
    return source_for(url, **settings).observe("ns", make_spec(), time.time())


def metrics_condition(observation: Observation) -> tuple[str, str]:
    now = time.time()
    decision = decide(make_spec(), observation, PolicyState(FleetState(3, 3)), now)
    assert not decision.changes, "no action without usable metrics"
    condition = decision.condition("MetricsAvailable")
    assert condition is not None and condition.status == "False"
    return condition.reason, condition.message


def test_well_formed_answers_are_read() -> None:
    with fake_prometheus(serving([vllm_pod()])) as prometheus:
        observation = observe(prometheus.url)
    assert observation.source_error is None and not observation.problems, observation
    assert observation.ttft is not None and observation.ttft.total == 40
    assert observation.reporting_pods == 1 and observation.running == 8
    assert observation.waiting == 1.0, "requests waiting for capacity, not deferred ones"


MALFORMED: dict[str, tuple[Any, str]] = {
    "a JSON list": ([1, 2, 3], "JSON list, not an object"),
    "data null": ({"status": "success", "data": None}, "data null, not an object"),
    "status error with HTTP 200": (
        {"status": "error", "errorType": "execution", "error": "query timed out in expression"},
        "status error (execution): query timed out in expression",
    ),
    "a dict result": (
        {"status": "success", "data": {"resultType": "vector", "result": {"a": 1}}},
        "result is a dict, not a list",
    ),
    "a matrix where a vector was asked": (
        {"status": "success", "data": {"resultType": "matrix", "result": []}},
        "resultType matrix, where a vector was asked",
    ),
    "a missing value": (
        {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}}]}},
        "has no [time, value] pair",
    ),
    "a non-numeric value": (
        {"status": "success", "data": {"resultType": "vector",
                                       "result": [{"metric": {}, "value": [1, "many"]}]}},
        "has value 'many', not a number",
    ),
    "not JSON": ("<html>502 Bad Gateway</html>", "body that is not JSON"),
}


@pytest.mark.parametrize("case", list(MALFORMED), ids=list(MALFORMED))
def test_a_malformed_answer_holds_naming_the_problem(case: str) -> None:
    body, expected = MALFORMED[case]
    with fake_prometheus(lambda query, n: Reply(200, body)) as prometheus:
        observation = observe(prometheus.url)
        reason, message = metrics_condition(observation)
    assert reason == "SourceUnavailable"
    assert expected in message and prometheus.url in message


def test_a_malformed_answer_still_gets_a_status_through_the_reconciler() -> None:
    """The real Reconciler over the in-memory cluster: status written, nothing raised."""
    edge = Edge({"objectives": {"ttft": {"percentile": 95, "thresholdMs": 500}}})
    body = {"status": "success", "data": None}
    with fake_prometheus(lambda query, n: Reply(200, body)) as prometheus:
        edge.reconciler.source = source_for(prometheus.url)
        evaluation = edge.reconcile()
    assert evaluation.acted == ()
    condition = edge.condition("MetricsAvailable")
    assert condition["status"] == "False" and condition["reason"] == "SourceUnavailable"
    assert "data null" in condition["message"]
    assert edge.status["lastEvaluated"]


def broken(**fields: Any) -> Pod:
    """A pod whose TTFT series is replaced by `fields` (a Histogram's)."""
    pod = vllm_pod()
    histograms = dict(pod.histograms)
    histograms[TTFT] = Histogram(**fields)
    return Pod(pod.name, pod.namespace, histograms, pod.gauges)


NOT_HISTOGRAMS = {
    "garbage le": (
        broken(buckets={"0.5": 3.0, "abc": 5.0, "+Inf": 5.0}, sum=1.0),
        "le='abc', which is not a number",
    ),
    "no +Inf bucket": (broken(buckets={"0.5": 3.0, "1.0": 5.0}, sum=1.0), 'no le="+Inf" bucket'),
    "negative counts": (
        broken(buckets={"0.5": -30.0, "+Inf": -30.0}, sum=1.0),
        "negative bucket counts",
    ),
    "counts of 1e300": (
        broken(buckets={"0.5": 1e300, "+Inf": 1e300}, sum=1.0),
        "counts 1e+300 observations in one window",
    ),
    "_count a thousand times +Inf": (
        broken(buckets={"0.5": 3.0, "+Inf": 5.0}, sum=1.0, count=5000.0),
        '_count 5000 but 5 in its le="+Inf" bucket',
    ),
    "counts decreasing with le": (
        broken(buckets={"0.25": 30.0, "0.5": 20.0, "+Inf": 30.0}, sum=5.0),
        "decrease with le (le=0.25: 30, le=0.5: 20)",
    ),
}


@pytest.mark.parametrize("case", list(NOT_HISTOGRAMS), ids=list(NOT_HISTOGRAMS))
def test_a_histogram_that_is_not_one_is_missing_data(case: str) -> None:
    pod, expected = NOT_HISTOGRAMS[case]
    with fake_prometheus(serving([pod])) as prometheus:
        observation = observe(prometheus.url)
    assert observation.ttft is None
    reason, message = metrics_condition(observation)
    assert reason == "MissingSeries"
    assert f"{TTFT} of pod {POD}" in message and expected in message
    assert "not a histogram" in message


def test_a_pod_scraped_under_two_addresses_counts_once() -> None:
    twice = vllm_pod(scrapes=(("10.0.0.1:8000", "pods"), ("10.0.0.1:8001", "services")))
    other = vllm_pod("llama-6d4cf56db6-q9zt4")
    with fake_prometheus(serving([twice, other])) as prometheus:
        observation = observe(prometheus.url)
    assert observation.ttft is not None and observation.ttft.total == 80, "40 requests per pod"
    assert observation.reporting_pods == 2 and observation.running == 16
    assert any(f"pod {POD} is scraped under 2 addresses" in n for n in observation.notes)


def test_a_long_retry_after_fails_at_once_within_the_deadline() -> None:
    with fake_prometheus(
        lambda query, n: Reply(503, {"status": "error"}, {"Retry-After": "3600"})
    ) as prometheus:
        started = time.monotonic()
        observation = source_for(prometheus.url, retries=3).observe("ns", make_spec(), time.time())
        elapsed = time.monotonic() - started
    assert elapsed < 2.0, "Retry-After is capped by the evaluation's deadline"
    assert observation.source_error is not None
    expected = "asked to retry after 3600 s, past this evaluation's deadline"
    assert expected in observation.source_error


def test_a_short_retry_after_is_honoured() -> None:
    pods = [vllm_pod()]

    def behaviour(query: str, count: int) -> Reply:
        if count == 1:
            return Reply(503, {"status": "error"}, {"Retry-After": "0"})
        return Reply(200, engine_answer(query, pods))

    with fake_prometheus(behaviour) as prometheus:
        observation = source_for(prometheus.url, retries=1).observe("ns", make_spec(), time.time())
    assert observation.source_error is None and observation.ttft is not None


def test_a_stalled_prometheus_costs_one_deadline() -> None:
    with fake_prometheus(lambda query, n: Reply(200, {}, delay_s=5.0)) as prometheus:
        source = source_for(prometheus.url, timeout_s=30.0)
        started = time.monotonic()
        observation = source.observe_target(
            Target("ns", make_spec()), time.time(), deadline=time.monotonic() + 0.5
        )
        elapsed = time.monotonic() - started
    assert 0.4 < elapsed < 1.5, elapsed
    assert observation.source_error is not None
    assert "no answer within this evaluation's deadline" in observation.source_error


def test_a_batch_gives_each_target_what_its_own_queries_give() -> None:
    """Two Deployments in one namespace and one in another: one batch of queries, split per
    target, equals each target's own narrowed queries."""
    pods = [
        vllm_pod("llama-6d4cf56db6-x7k2p", 40),
        vllm_pod("llama-6d4cf56db6-q9zt4", 20),
        vllm_pod("llama-chat-7f9b8c6d5-bcdfg", 30),
        vllm_pod("llama-5c9d8b7f6-x7k2p", 10, namespace="other"),
    ]
    targets = [
        Target("ns", make_spec()),
        Target("ns", make_spec(targetRef={"name": "llama-chat"})),
        Target("other", make_spec()),
    ]
    with fake_prometheus(serving(pods)) as prometheus:
        source = source_for(prometheus.url)
        now = time.time()
        batch = source.observe_many(targets, now)
        batch_queries = len(prometheus.queries)
        single = [source.observe_target(t, now) for t in targets]
    assert batch_queries == 7, "one query per histogram family, the gauges, the counters"
    assert [b.ttft.total for b in batch if b.ttft] == [60, 30, 10]
    assert [b.generation_token_rate * 120 for b in batch] == pytest.approx([12000, 6000, 2000])
    for ours, theirs in zip(batch, single, strict=True):
        assert ours == theirs


def test_older_names_are_read_and_said() -> None:
    """vLLM ≤ 0.11 names inter-token latency `time_per_output_token` and has no
    waiting-by-reason gauge."""
    old = vllm_pod(itl_name="vllm:time_per_output_token_seconds", capacity_waiting=None)
    with fake_prometheus(serving([old])) as prometheus:
        observation = observe(prometheus.url)
    assert observation.itl is not None and observation.itl.total == 400
    assert observation.waiting == 3.0
    notes = " ".join(observation.notes)
    assert "read under vllm:time_per_output_token_seconds (vLLM ≤ 0.11)" in notes
    assert "waiting requests read from vllm:num_requests_waiting" in notes


def test_a_histogram_created_only_once_observed_holds_with_the_right_hint() -> None:
    """An engine that creates the queue-time histogram lazily: the pods' other series are
    there, so the hint is not about Prometheus labels."""
    pod = vllm_pod()
    histograms = {k: v for k, v in pod.histograms.items() if "queue" not in k}
    with fake_prometheus(serving([Pod(pod.name, "ns", histograms, pod.gauges)])) as prometheus:
        observation = observe(prometheus.url)
    reason, message = metrics_condition(observation)
    assert reason == "MissingSeries"
    assert "no vllm:request_queue_time_seconds series from pods of llama in namespace ns" in message
    assert "the labels are right" in message and "only once it has observed a value" in message
    assert "scraping them with" not in message


def test_nothing_at_all_names_the_labels_and_sglangs_flag() -> None:
    with fake_prometheus(serving([])) as prometheus:
        observation = source_for(prometheus.url).observe(
            "ns", make_spec(engine="sglang"), time.time()
        )
    message = " ".join(observation.problems)
    assert "is Prometheus scraping them with the 'namespace' and 'pod' labels?" in message
    assert "SGLang exports metrics only when started with --enable-metrics" in message


def test_nan_values_are_kept_and_reported_as_not_finite() -> None:
    pod = broken(buckets={"0.5": math.nan, "+Inf": math.nan}, sum=math.nan)
    with fake_prometheus(serving([pod])) as prometheus:
        observation = observe(prometheus.url)
    assert observation.ttft is not None and not observation.ttft.is_finite
    reason, message = metrics_condition(observation)
    assert reason == "MissingSeries" and "NaN or infinite" in message


CUSTOM_TTFT_BUCKETS_S = (0.1, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 1.5, 2.0)  # --custom-histogram-buckets


def test_custom_buckets_are_read_from_the_series_and_pods_summed_over_shared_bounds() -> None:
    """vLLM's `--custom-histogram-buckets` needs nothing on slascaler's side: the bounds are
    read from the series; during a rollout two pods with different bounds are summed over the
    bounds they share."""
    ttft = [0.15 + 0.01 * i for i in range(40)]  # 0.15 … 0.54 s
    custom = vllm_pod(histograms={**vllm_pod().histograms,
                                  TTFT: Histogram.of(ttft, CUSTOM_TTFT_BUCKETS_S)})  # fmt: skip
    with fake_prometheus(serving([custom])) as prometheus:
        alone = observe(prometheus.url)
    assert alone.ttft is not None and not alone.problems
    assert alone.ttft.upper_bounds[:-1] == tuple(b * 1000 for b in CUSTOM_TTFT_BUCKETS_S)
    assert alone.ttft.total == 40
    # 38 of 40 at or below 0.5 s: the p95 lies in the 0.5–0.75 s bucket, not at vLLM's 1 s.
    assert 500 < alone.ttft.quantile(0.95) <= 750
    default = vllm_pod("llama-6d4cf56db6-q9zt4")  # vLLM's default buckets, 40 requests
    with fake_prometheus(serving([custom, default])) as prometheus:
        both = observe(prometheus.url)
    assert both.ttft is not None and both.ttft.total == 80
    shared = sorted(set(CUSTOM_TTFT_BUCKETS_S) & set(VLLM_TTFT_BUCKETS_S))  # 0.1 0.5 0.75 1
    assert both.ttft.upper_bounds[:-1] == pytest.approx([b * 1000 for b in shared])


def test_a_fleet_younger_than_the_window_reads_rates_over_the_span_it_served() -> None:
    """Two pods whose oldest samples are 10 and 6 s old (a 1 s scrape: 11 and 7 samples) in a
    60 s window: their 80 requests came in 10.5 s (since the oldest sample and the half
    interval `increase()` extrapolates before it), not 60."""
    now = time.time()
    pods = [
        vllm_pod("llama-6d4cf56db6-x7k2p", oldest=now - 10, newest=now, samples=11),
        vllm_pod("llama-6d4cf56db6-q9zt4", oldest=now - 6, newest=now, samples=7),
    ]
    with fake_prometheus(serving(pods)) as prometheus:
        observation = source_for(prometheus.url).observe("ns", make_spec(), now)
    assert observation.window_s == pytest.approx(10.5)
    assert observation.recent_window_s == pytest.approx(10.5)
    assert observation.request_rate == pytest.approx(80 / 10.5)
    assert observation.prompt_token_rate == pytest.approx(80 * 400 / 10.5)
    assert observation.recent_request_rate == pytest.approx(20 / 10.5)


@pytest.mark.parametrize(
    ("age", "interval_s", "served"),
    [
        (None, 2.0, 60.0),  # the series is older than the window
        (59.5, 1.0, 60.0),  # its oldest sample within a subquery step of the window's start
        (0.0, math.nan, 60.0),  # one sample: no increase yet, nothing to scale
        (30.0, math.nan, 30.0),  # no interval known: nothing to extrapolate by
        (30.0, 2.0, 31.0),  # a 2 s scrape: extrapolated 1 s before the first
    ],
)
def test_the_span_served_is_the_window_or_the_fleets_age(
    age: float | None, interval_s: float, served: float
) -> None:
    now = 1000.0
    reading = GaugeReading(oldest=None if age is None else now - age, scrape_interval_s=interval_s)
    assert reading.served_s(60.0, now, late_s=1.0) == pytest.approx(served)
