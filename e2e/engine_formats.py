"""The simulator's metrics in SGLang's and TGI's names and formats, served in real time.

slascaler reads SGLang and TGI through their own metric names (`slascaler.engines`); these
renderings let the e2e suite check those queries against a real Prometheus. The mapping
follows what each engine exports:

- SGLang (`sglang:` prefix, label `model_name`): TTFT, queue time and inter-token latency
  histograms, `num_queue_reqs` / `num_running_reqs` gauges; no prefill histogram.
- TGI (`tgi_` prefix, no labels): queue duration, `batch_forward_duration{method="prefill"}`
  (here each request's prefill, where TGI times each prefill batch), mean time per token,
  `queue_size` / `batch_current_size` gauges; no TTFT histogram.

Used by `e2e/tests/test_prometheus_source.py`.
"""

from __future__ import annotations

from collections.abc import Mapping

from slascaler_sim.exposition import RealtimeFleet, _labels, _number
from slascaler_sim.recorder import HistogramCounts, MetricRecorder

SGLANG = {
    "vllm:time_to_first_token_seconds": ("sglang:time_to_first_token_seconds", ""),
    "vllm:request_queue_time_seconds": ("sglang:queue_time_seconds", ""),
    "vllm:inter_token_latency_seconds": ("sglang:inter_token_latency_seconds", ""),
}
TGI = {
    "vllm:request_queue_time_seconds": ("tgi_request_queue_duration", ""),
    "vllm:request_prefill_time_seconds": ("tgi_batch_forward_duration", 'method="prefill"'),
    "vllm:inter_token_latency_seconds": ("tgi_request_mean_time_per_token_duration", ""),
}
GAUGES = {
    "sglang": ("sglang:num_queue_reqs", "sglang:num_running_reqs"),
    "tgi": ("tgi_queue_size", "tgi_batch_current_size"),
}


def _histogram(
    name: str, counts: HistogramCounts, labels: Mapping[str, str], extra: str
) -> list[str]:
    lines = [f"# TYPE {name} histogram"]
    cumulative = 0.0
    for bound, count in zip((*counts.bounds, float("inf")), counts.counts, strict=True):
        cumulative += count
        le = 'le="' + _number(bound) + '"'
        both = ",".join(p for p in (extra, le) if p)
        lines.append(f"{name}_bucket{_labels(labels, both)} {_number(cumulative)}")
    lines.append(f"{name}_sum{_labels(labels, extra)} {_number(counts.total)}")
    lines.append(f"{name}_count{_labels(labels, extra)} {_number(counts.observations)}")
    return lines


def render_as(engine: str, recorder: MetricRecorder, model: str) -> str:
    mapping, labels = (SGLANG, {"model_name": model}) if engine == "sglang" else (TGI, {})
    lines: list[str] = []
    for source, (name, extra) in mapping.items():
        lines += _histogram(name, recorder.histograms[source], labels, extra)
    waiting, running = GAUGES[engine]
    for name, value in ((waiting, recorder.waiting), (running, recorder.running)):
        lines += [f"# TYPE {name} gauge", f"{name}{_labels(labels)} {_number(value)}"]
    return "\n".join(lines) + "\n"


class EngineFormatFleet(RealtimeFleet):
    """A real-time fleet whose per-pod endpoints speak SGLang's or TGI's metrics."""

    def __init__(self, engine: str, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.engine = engine

    def exposition(self, pod: str | None) -> str:
        with self.lock:
            self.fleet.run_until(self.clock() - self._origin)
            texts = []
            for replica in self.fleet.replicas:
                if pod is None or replica.name == pod:
                    replica.recorder.advance_gauges(self.fleet.now)
                    texts.append(render_as(self.engine, replica.recorder, self.model_name))
            return "".join(texts)
