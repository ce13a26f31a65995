"""The simulator in real time: vLLM's /metrics for a real Prometheus to scrape.

`render` writes one replica's recorder in the Prometheus text exposition format (0.0.4) with
vLLM's metric names, its `model_name` and `engine` labels, and a `pod` label; label values
are escaped as the format requires. `RealtimeFleet` advances a `Fleet` with the wall clock
in a background thread and serves every replica's metrics at `/metrics` (all pods, with a
`pod` label) and `/metrics/<pod>` (one pod, with vLLM's labels only) on 127.0.0.1. Used by
the integration and e2e tests. HELP texts are vLLM 0.33.0's (`vllm/v1/metrics/loggers.py`).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from slascaler_sim.fleet import Fleet
from slascaler_sim.recorder import MetricRecorder

HELP = {
    "vllm:time_to_first_token_seconds": "Histogram of time to first token in seconds.",
    "vllm:request_queue_time_seconds": "Histogram of time spent in WAITING phase for request.",
    "vllm:request_prefill_time_seconds": "Histogram of time spent in PREFILL phase for request.",
    "vllm:request_decode_time_seconds": "Histogram of time spent in DECODE phase for request.",
    "vllm:e2e_request_latency_seconds": "Histogram of e2e request latency in seconds.",
    "vllm:inter_token_latency_seconds": "Histogram of inter-token latency in seconds.",
    "vllm:request_prompt_tokens": "Number of prefill tokens processed.",
    "vllm:request_generation_tokens": "Number of generation tokens processed.",
    "vllm:request_prefill_kv_computed_tokens": (
        "Histogram of new KV tokens computed during prefill (excluding cached tokens)."
    ),
    "vllm:request_success_total": "Count of successfully processed requests.",
    "vllm:prompt_tokens_total": "Number of prefill tokens processed.",
    "vllm:prompt_tokens_cached_total": "Number of cached prompt tokens (local + external).",
    "vllm:generation_tokens_total": "Number of generation tokens processed.",
    "vllm:num_preemptions_total": "Cumulative number of preemption from the engine.",
    "vllm:prefix_cache_queries_total": (
        "Prefix cache queries, in terms of number of queried tokens."
    ),
    "vllm:prefix_cache_hits_total": "Prefix cache hits, in terms of number of cached tokens.",
    "vllm:num_requests_waiting": "Number of requests waiting to be processed.",
    "vllm:num_requests_waiting_by_reason": (
        "Number of waiting requests by reason. capacity: waiting for scheduling capacity. "
        "deferred: deferred for LoRA budget or KV transfer. Sum of all reasons equals "
        "vllm:num_requests_waiting."
    ),
    "vllm:num_requests_running": "Number of requests in model execution batches.",
    "vllm:kv_cache_usage_perc": "KV-cache usage. 1 means 100 percent usage.",
}
GAUGES = ("vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc")


def _gauge(recorder: MetricRecorder, name: str) -> float:
    if name == "vllm:num_requests_waiting":
        return recorder.waiting
    if name == "vllm:num_requests_running":
        return recorder.running
    return recorder.kv_cache_usage


def escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(labels: Mapping[str, str], extra: str = "") -> str:
    parts = [f'{k}="{escape_label(v)}"' for k, v in labels.items()]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}"


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def render(pods: Sequence[tuple[MetricRecorder, Mapping[str, str]]]) -> str:
    """Replicas' metrics as Prometheus text exposition, each family once with every pod."""
    lines: list[str] = []
    if not pods:
        return ""
    first = pods[0][0]
    for name in first.histograms:
        if name not in HELP:  # another engine's histogram (a layout's): not vLLM's
            continue
        lines += [f"# HELP {name} {HELP[name]}", f"# TYPE {name} histogram"]
        for recorder, labels in pods:
            histogram = recorder.histograms[name]
            cumulative = 0.0
            for bound, count in zip((*histogram.bounds, math.inf), histogram.counts, strict=True):
                cumulative += count
                le = 'le="' + _number(bound) + '"'
                lines.append(f"{name}_bucket{_labels(labels, le)} {_number(cumulative)}")
            lines.append(f"{name}_sum{_labels(labels)} {_number(histogram.total)}")
            lines.append(f"{name}_count{_labels(labels)} {_number(histogram.observations)}")
    for name in first.counters:
        # The 0.0.4 text format names a counter's TYPE line with its _total suffix, as
        # prometheus_client (and so vLLM) writes it.
        lines += [f"# HELP {name} {HELP[name]}", f"# TYPE {name} counter"]
        for recorder, labels in pods:
            lines.append(f"{name}{_labels(labels)} {_number(recorder.counters[name])}")
    for name in GAUGES:
        lines += [f"# HELP {name} {HELP[name]}", f"# TYPE {name} gauge"]
        for recorder, labels in pods:
            lines.append(f"{name}{_labels(labels)} {_number(_gauge(recorder, name))}")
    # vLLM 0.33: the waiting requests by reason (the simulator defers none: all capacity).
    name = "vllm:num_requests_waiting_by_reason"
    lines += [f"# HELP {name} {HELP[name]}", f"# TYPE {name} gauge"]
    for recorder, labels in pods:
        for reason, value in (("capacity", recorder.waiting), ("deferred", 0.0)):
            extra = f'reason="{reason}"'
            lines.append(f"{name}{_labels(labels, extra)} {_number(value)}")
    return "\n".join(lines) + "\n"


class RealtimeFleet:
    """A Fleet advanced by the wall clock, its replicas' metrics served over HTTP."""

    def __init__(
        self,
        fleet: Fleet,
        model_name: str = "meta-llama/Llama-3.1-8B-Instruct",
        port: int = 0,
        clock: Callable[[], float] = time.monotonic,
        tick_s: float = 0.05,
    ) -> None:
        self.fleet = fleet
        self.model_name = model_name
        self.clock = clock
        self.tick_s = tick_s
        self.lock = threading.Lock()
        self._origin = clock() - fleet.now
        self._stop = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                pod = self.path.removeprefix("/metrics").strip("/")
                if not self.path.startswith("/metrics"):
                    self.send_error(404)
                    return
                body = owner.exposition(pod or None).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._threads = [
            threading.Thread(target=self.server.serve_forever, daemon=True),
            threading.Thread(target=self._advance, daemon=True),
        ]

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def exposition(self, pod: str | None) -> str:
        with self.lock:
            self.fleet.run_until(self.clock() - self._origin)
            pods: list[tuple[MetricRecorder, Mapping[str, str]]] = []
            for replica in self.fleet.replicas:
                if pod is not None and replica.name != pod:
                    continue
                replica.recorder.advance_gauges(self.fleet.now)
                # One pod's endpoint carries vLLM's own labels only; the scraper adds the
                # pod's identity, as a Kubernetes service discovery does.
                labels = {"model_name": self.model_name, "engine": "0"}
                if pod is None:
                    labels["pod"] = replica.name
                pods.append((replica.recorder, labels))
            return render(pods)

    def _advance(self) -> None:
        while not self._stop.wait(self.tick_s):
            with self.lock:
                self.fleet.run_until(self.clock() - self._origin)

    def __enter__(self) -> RealtimeFleet:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.server.shutdown()
        self.server.server_close()
