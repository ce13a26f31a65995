"""A fake Prometheus on loopback for the metric-source tests: real HTTP, scripted answers.

`FakePrometheus` serves `/api/v1/query` (GET and POST, as the client sends them) and
`/api/v1/rules`, answering each query with what a `Behaviour` returns. `engine_answer`
answers the operator's queries the way Prometheus would for a set of `Pod`s: it reads which
series and statistic each `slascaler_part` of the query asks for, and returns every pod's
value under that part (so a test writes series per pod, not PromQL results): histograms,
gauges (now and a while ago), counters' increases over the window and over the recent window.
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from slascaler.engines import (
    VLLM_ITL_BUCKETS_S,
    VLLM_REQUEST_LATENCY_BUCKETS_S,
    VLLM_TTFT_BUCKETS_S,
)

POD = "llama-6d4cf56db6-x7k2p"
TTFT = "vllm:time_to_first_token_seconds"

Body = Mapping[str, Any] | list[Any] | str


@dataclass
class Reply:
    status: int = 200
    body: Body = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


Behaviour = Callable[[str, int], Reply]  # (query, how many requests so far) → reply


def vector(samples: list[tuple[Mapping[str, str], str]]) -> dict[str, Any]:
    return {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [{"metric": dict(m), "value": [1.0, v]} for m, v in samples],
        },
    }


@dataclass
class Histogram:
    """One pod's histogram series: cumulative bucket counts by `le` as written, sum, count."""

    buckets: Mapping[str, float]
    sum: float
    count: float | None = None  # None: the +Inf bucket's

    @classmethod
    def of(cls, values: list[float], bounds: tuple[float, ...]) -> Histogram:
        buckets = {repr(float(b)): float(sum(1 for v in values if v <= b)) for b in bounds}
        buckets["+Inf"] = float(len(values))
        return cls(buckets, float(sum(values)))


@dataclass
class Pod:
    """One pod's series: histograms and gauges by series name (with matchers, as queried);
    `counters`, the increases over the window by series name (`vllm:prompt_tokens_total`,
    `tgi_request_input_length_sum`); `recent`, the increases over the recent window
    (`vllm:time_to_first_token_seconds_count`); `gauges_then`, the gauges' values the recent
    window ago (absent: no sample then)."""

    name: str
    namespace: str = "ns"
    histograms: Mapping[str, Histogram] = field(default_factory=dict)
    gauges: Mapping[str, float] = field(default_factory=dict)  # name → value (avg and now)
    samples: float = 30.0  # samples of the running gauge in the window
    newest: float | None = None  # the newest sample's time; None: now
    oldest: float | None = None  # the oldest sample's time in the window; None: a day ago
    scrapes: tuple[tuple[str, str], ...] = (("10.0.0.1:8000", "engines"),)
    counters: Mapping[str, float] = field(default_factory=dict)
    recent: Mapping[str, float] = field(default_factory=dict)
    gauges_then: Mapping[str, float] = field(default_factory=dict)


_PART = re.compile(r'label_replace\((?P<expr>.*?), "slascaler_part", "(?P<part>[^"]+)", "", ""\)')
_MATCHER = r'\s*[a-zA-Z_]\w*\s*(?:=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"\s*,?'
_NAME = re.compile(rf"([a-zA-Z_:][a-zA-Z0-9_:]*)\{{(?P<matchers>(?:{_MATCHER})*)\}}")
_ONE = re.compile(r'([a-zA-Z_]\w*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')


def engine_answer(query: str, pods: list[Pod]) -> dict[str, Any]:
    """What Prometheus answers to the operator's family or gauge query for these pods."""
    samples: list[tuple[Mapping[str, str], str]] = []
    for match in _PART.finditer(query):
        part = match.group("part")
        found = _NAME.search(match.group("expr"))
        assert found is not None, match.group("expr")
        name, matchers = found.group(1), found.group("matchers")
        extra = [
            f'{k}{op}"{v}"' for k, op, v in _ONE.findall(matchers) if k not in ("namespace", "pod")
        ]
        key = name + ("{" + ",".join(extra) + "}" if extra else "")
        for pod in pods:
            if not _selected(pod, matchers):
                continue
            for instance, job in pod.scrapes:
                labels = {"namespace": pod.namespace, "pod": pod.name, "instance": instance,
                          "job": job, "slascaler_part": part}  # fmt: skip
                samples += _values(pod, key, part, labels)
    return vector(samples)


def _selected(pod: Pod, matchers: str) -> bool:
    for label, op, raw in _ONE.findall(matchers):
        if label not in ("namespace", "pod"):
            continue
        value = re.sub(r"\\(.)", r"\1", raw)  # the PromQL string's escapes
        actual = pod.namespace if label == "namespace" else pod.name
        if (op == "=" and actual != value) or (op == "=~" and not re.fullmatch(value, actual)):
            return False
    return True


def _values(
    pod: Pod, key: str, part: str, labels: dict[str, str]
) -> list[tuple[Mapping[str, str], str]]:
    stat = part.split(":")[-1]
    if stat in ("bucket", "sum", "count"):
        base = key.replace(f"_{stat}", "", 1)
        histogram = pod.histograms.get(base)
        if histogram is None:
            return []
        if stat == "bucket":
            return [({**labels, "le": le}, _num(v)) for le, v in histogram.buckets.items()]
        if stat == "sum":
            return [(labels, _num(histogram.sum))]
        count = histogram.count
        if count is None:
            count = histogram.buckets.get("+Inf", max(histogram.buckets.values()))
        return [(labels, _num(count))]
    if stat in ("avg", "now"):
        return [(labels, _num(pod.gauges[key]))] if key in pod.gauges else []
    for values, name in ((pod.gauges_then, "then"), (pod.counters, "increase"),
                         (pod.recent, "recent")):  # fmt: skip
        if stat == name:
            return [(labels, _num(values[key]))] if key in values else []
    if key not in pod.gauges:
        return []
    if stat == "samples":
        return [(labels, _num(pod.samples))]
    if stat == "oldest":
        return [(labels, _num(pod.oldest if pod.oldest is not None else time.time() - 86400))]
    return [(labels, _num(pod.newest if pod.newest is not None else time.time()))]


def _num(value: float) -> str:
    return "NaN" if value != value else repr(float(value)).replace("inf", "Inf")


class FakePrometheus:
    """A loopback HTTP server answering queries with a behaviour; `queries` records them."""

    def __init__(self, behaviour: Behaviour, rules: Mapping[str, Any] | None = None) -> None:
        self.behaviour = behaviour
        self.queries: list[str] = []
        self.params: list[Mapping[str, list[str]]] = []
        self.lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, params: Mapping[str, list[str]]) -> None:
                path = urllib.parse.urlparse(self.path).path
                if path == "/api/v1/rules":
                    self._send(Reply(200, {"status": "success", "data": rules or {"groups": []}}))
                    return
                query = params.get("query", [""])[0]
                with owner.lock:
                    owner.queries.append(query)
                    owner.params.append(params)
                    count = len(owner.queries)
                self._send(owner.behaviour(query, count))

            def _send(self, reply: Reply) -> None:
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                body = reply.body if isinstance(reply.body, str) else json.dumps(reply.body)
                data = body.encode()
                try:
                    self.send_response(reply.status)
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (its deadline): nothing to do

            def do_GET(self) -> None:
                self._answer(urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query))

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                self._answer(urllib.parse.parse_qs(self.rfile.read(length).decode()))

            def log_message(self, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@contextmanager
def fake_prometheus(
    behaviour: Behaviour, rules: Mapping[str, Any] | None = None
) -> Iterator[FakePrometheus]:
    server = FakePrometheus(behaviour, rules)
    server.thread.start()
    try:
        yield server
    finally:
        server.close()


def serving(pods: list[Pod]) -> Behaviour:
    """A Prometheus that answers every query from these pods' series."""
    return lambda query, _: Reply(200, engine_answer(query, pods))


def vllm_pod(
    name: str = POD,
    requests: int = 40,
    namespace: str = "ns",
    queue_s: float = 0.05,
    itl_name: str = "vllm:inter_token_latency_seconds",
    capacity_waiting: float | None = 1.0,
    **overrides: Any,
) -> Pod:
    """A vLLM pod that served `requests` requests in the window (TTFT 0.2–0.4 s), a quarter
    of them in the recent window, its waiting requests doubled since then."""
    ttft = [0.2 + 0.2 * i / requests for i in range(requests)]
    histograms = {
        TTFT: Histogram.of(ttft, VLLM_TTFT_BUCKETS_S),
        "vllm:request_queue_time_seconds": Histogram.of(
            [queue_s] * requests, VLLM_REQUEST_LATENCY_BUCKETS_S
        ),
        "vllm:request_prefill_time_seconds": Histogram.of(
            [t - queue_s for t in ttft], VLLM_REQUEST_LATENCY_BUCKETS_S
        ),
        itl_name: Histogram.of([0.02] * requests * 10, VLLM_ITL_BUCKETS_S),
    }
    gauges = {"vllm:num_requests_waiting": 3.0, "vllm:num_requests_running": 8.0}
    if capacity_waiting is not None:
        gauges['vllm:num_requests_waiting_by_reason{reason="capacity"}'] = capacity_waiting
    counters = {  # 500-token prompts, 100 of them cached, 200 tokens out
        "vllm:prompt_tokens_total": 500.0 * requests,
        "vllm:prompt_tokens_cached_total": 100.0 * requests,
        "vllm:generation_tokens_total": 200.0 * requests,
    }
    recent = {f"{TTFT}_count": requests / 4}
    gauges_then = {key: value / 2 for key, value in gauges.items()}
    fields: dict[str, Any] = {
        "histograms": histograms,
        "gauges": gauges,
        "counters": counters,
        "recent": recent,
        "gauges_then": gauges_then,
    }
    fields.update(overrides)
    return Pod(name, namespace, **fields)
