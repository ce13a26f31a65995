"""The Prometheus source when the server misbehaves: real HTTP servers on loopback that refuse,
stall, fail then recover, or answer with stale series. Each ends in an Observation, never an
exception, and the policy holds on it with the reason."""

from __future__ import annotations

import re
import socket
import time

import pytest

from builders import spec as make_spec
from fake_prometheus import Reply, engine_answer, fake_prometheus, serving, vllm_pod
from slascaler.metrics.client import ClientSettings, PrometheusClient, QueryFailed
from slascaler.metrics.prometheus import PrometheusSettings, PrometheusSource, Target
from slascaler.policy import FleetState, PolicyState, decide


def hold_reason(source: PrometheusSource) -> tuple[str, str]:
    spec = make_spec()
    now = time.time()
    decision = decide(spec, source.observe("ns", spec, now), PolicyState(FleetState(3, 3)), now)
    assert not decision.changes, "no action without metrics"
    condition = decision.condition("MetricsAvailable")
    assert condition is not None
    return condition.reason, condition.message


def test_unreachable_server_holds_and_names_the_url() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    source = PrometheusSource(
        PrometheusSettings(f"http://127.0.0.1:{port}", retries=1, backoff_s=0.01)
    )
    reason, message = hold_reason(source)
    assert reason == "SourceUnavailable"
    assert f"Prometheus at http://127.0.0.1:{port}" in message


def test_slow_server_times_out() -> None:
    with fake_prometheus(lambda query, n: Reply(200, {}, delay_s=2.0)) as prometheus:
        source = PrometheusSource(
            PrometheusSettings(prometheus.url, timeout_s=0.3, retries=1, backoff_s=0.01)
        )
        started = time.monotonic()
        reason, message = hold_reason(source)
        elapsed = time.monotonic() - started
    assert reason == "SourceUnavailable" and "timed out" in message.lower()
    assert elapsed < 1.5, "the timeout, not the server, bounds the wait"


def test_failing_server_is_retried_with_backoff_until_it_answers() -> None:
    def flaky(query: str, count: int) -> Reply:
        if count <= 2:
            return Reply(503, {"status": "error", "error": "overloaded"})
        return Reply(200, {"status": "success", "data": {"resultType": "vector", "result": []}})

    with fake_prometheus(flaky) as prometheus:
        client = PrometheusClient(ClientSettings(prometheus.url, retries=2, backoff_s=0.01))
        assert client.query("up", time.time(), time.monotonic() + 5) == []
        assert len(prometheus.queries) == 3


def test_stale_series_read_as_stale() -> None:
    pod = vllm_pod(newest=time.time() - 600)
    with fake_prometheus(serving([pod])) as prometheus:
        reason, message = hold_reason(PrometheusSource(PrometheusSettings(prometheus.url)))
    assert reason == "Stale" and "old" in message


def test_a_bad_query_is_not_retried_and_says_why() -> None:
    def refuse(query: str, count: int) -> Reply:
        return Reply(400, {"status": "error", "errorType": "bad_data", "error": "parse error"})

    with fake_prometheus(refuse) as prometheus:
        client = PrometheusClient(ClientSettings(prometheus.url, retries=3, backoff_s=0.01))
        with pytest.raises(QueryFailed, match=r"HTTP 400, status error \(bad_data\): parse error"):
            client.query("up{", time.time(), time.monotonic() + 5)
        assert len(prometheus.queries) == 1


def test_long_batches_are_posted() -> None:
    """A batch over many namespaces is longer than a URL should be: sent as a POST form."""
    pods = [vllm_pod(namespace=f"team-{i:03d}") for i in range(300)]
    with fake_prometheus(lambda q, n: Reply(200, engine_answer(q, pods))) as prometheus:
        # The fake server builds 300 pods' answers in Python: give it time on a busy machine
        # (what is tested is the POST, not the speed).
        settings = PrometheusSettings(prometheus.url, recording_rules=False, deadline_s=120)
        source = PrometheusSource(settings)
        targets = [Target(p.namespace, make_spec()) for p in pods]
        observations = source.observe_many(targets, time.time())
        assert max(len(q) for q in prometheus.queries) > 8000
    assert all(o.ttft is not None and o.ttft.total == 40 for o in observations)


def test_prometheus_is_told_the_deadline_in_a_duration_it_parses() -> None:
    """Prometheus refuses `timeout=1.998s` (bad_data): whole milliseconds it takes."""
    with fake_prometheus(serving([vllm_pod()])) as prometheus:
        PrometheusSource(PrometheusSettings(prometheus.url)).observe("ns", make_spec(), time.time())
    budgets = [p["timeout"][0] for p in prometheus.params]
    assert budgets and all(re.fullmatch(r"[1-9][0-9]*ms", b) for b in budgets), budgets
