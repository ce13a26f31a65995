"""The Prometheus source when the server misbehaves: real HTTP servers on loopback that refuse,
stall, fail then recover, or answer with NaN. Each ends in an Observation, never an exception,
and the policy holds on it with the reason."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from builders import spec as make_spec
from slascaler.metrics.prometheus import PrometheusSettings, PrometheusSource
from slascaler.policy import FleetState, PolicyState, decide

Behaviour = Callable[[BaseHTTPRequestHandler, int], None]


def vector(value: str, labels: dict[str, str] | None = None) -> dict[str, object]:
    return {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [{"metric": labels or {}, "value": [1.0, value]}],
        },
    }


def reply(handler: BaseHTTPRequestHandler, status: int, body: dict[str, object]) -> None:
    data = json.dumps(body).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


@pytest.fixture
def server() -> Iterator[Callable[[Behaviour], tuple[str, list[str]]]]:
    servers: list[ThreadingHTTPServer] = []

    def start(behaviour: Behaviour) -> tuple[str, list[str]]:
        seen: list[str] = []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                seen.append(self.path)
                behaviour(self, len(seen))

            def log_message(self, *args: object) -> None:
                return

        httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        servers.append(httpd)
        return f"http://127.0.0.1:{httpd.server_address[1]}", seen

    yield start
    for httpd in servers:
        httpd.shutdown()
        httpd.server_close()


def hold_reason(observation_source: PrometheusSource) -> tuple[str, str]:
    spec = make_spec()
    now = time.time()
    decision = decide(
        spec, observation_source.observe("ns", spec, now), PolicyState(FleetState(3, 3)), now
    )
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
    assert f"Prometheus at http://127.0.0.1:{port} did not answer" in message


def test_slow_server_times_out(server) -> None:  # type: ignore[no-untyped-def]
    def stall(handler: BaseHTTPRequestHandler, _: int) -> None:
        time.sleep(2)
        reply(handler, 200, vector("1"))

    url, seen = server(stall)
    source = PrometheusSource(PrometheusSettings(url, timeout_s=0.3, retries=1, backoff_s=0.01))
    started = time.monotonic()
    reason, message = hold_reason(source)
    assert reason == "SourceUnavailable" and "timed out" in message.lower()
    assert len(seen) == 2, "one try and one retry"
    assert time.monotonic() - started < 2.0, "the timeout, not the server, bounds the wait"


def test_failing_server_is_retried_with_backoff_until_it_answers(server) -> None:  # type: ignore[no-untyped-def]
    def flaky(handler: BaseHTTPRequestHandler, count: int) -> None:
        if count <= 2:
            reply(handler, 503, {"status": "error", "error": "overloaded"})
        else:
            reply(handler, 200, vector("7"))

    url, seen = server(flaky)
    source = PrometheusSource(PrometheusSettings(url, retries=2, backoff_s=0.01))
    assert source._scalar("up", time.time()) == 7.0
    assert len(seen) == 3


def test_nan_and_inf_answers_make_histograms_not_finite(server) -> None:  # type: ignore[no-untyped-def]
    def answer(handler: BaseHTTPRequestHandler, _: int) -> None:
        path = handler.path
        if "_bucket" in path:
            body = {
                "status": "success",
                "data": {
                    "resultType": "vector",
                    "result": [
                        {"metric": {"le": "0.5"}, "value": [1.0, "NaN"]},
                        {"metric": {"le": "+Inf"}, "value": [1.0, "NaN"]},
                    ],
                },
            }
            reply(handler, 200, body)
        elif "timestamp" in path:
            reply(handler, 200, vector(str(time.time())))
        else:
            reply(handler, 200, vector("+Inf"))

    url, _ = server(answer)
    source = PrometheusSource(PrometheusSettings(url, retries=0))
    observation = source.observe("ns", make_spec(), time.time())
    assert observation.ttft is not None and not observation.ttft.is_finite
    reason, message = hold_reason(source)
    assert reason == "MissingSeries" and "NaN or infinite" in message


def test_stale_series_read_as_stale(server) -> None:  # type: ignore[no-untyped-def]
    old = time.time() - 600

    def answer(handler: BaseHTTPRequestHandler, _: int) -> None:
        if "timestamp" in handler.path:
            reply(handler, 200, vector(str(old)))
        elif "_bucket" in handler.path:
            body = {
                "status": "success",
                "data": {"resultType": "vector", "result": [
                    {"metric": {"le": "0.5"}, "value": [1.0, "30"]},
                    {"metric": {"le": "+Inf"}, "value": [1.0, "30"]},
                ]},
            }  # fmt: skip
            reply(handler, 200, body)
        else:
            reply(handler, 200, vector("1"))

    url, _ = server(answer)
    reason, message = hold_reason(PrometheusSource(PrometheusSettings(url, retries=0)))
    assert reason == "Stale" and "old" in message
