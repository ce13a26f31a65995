"""The simulator's metrics as each engine release exports them, served in real time.

slascaler reads SGLang, TGI and older vLLM releases through their own metric names
(`slascaler.engine_metrics`); these renderings let the e2e suite check those queries against
a real Prometheus. Each follows the engine's own source (buckets from the fleet's layout,
`slascaler_sim.recorder.LAYOUTS`):

- `vllm-0.33`: the simulator's own exposition (`slascaler_sim.exposition.render`), with
  `vllm:num_requests_waiting_by_reason`.
- `vllm-0.10`: inter-token latency as `vllm:time_per_output_token_seconds`, only
  `vllm:num_requests_waiting` (no reason), `vllm:gpu_cache_usage_perc`; the counters but
  `vllm:prompt_tokens_cached_total` (cache hits only as `vllm:prefix_cache_hits_total`).
- `sglang-0.5.23` (labels `model_name`, `engine_type`, `tp_rank`, `pp_rank`, `moe_ep_rank`;
  TTFT also `is_streaming`): TTFT, `queue_time_seconds`, `per_stage_req_latency_seconds
  {stage="prefill_forward"}`, inter-token latency, `prompt_tokens_histogram`,
  `num_queue_reqs` / `num_running_reqs`; SGLang's buckets (TTFT from 0.1 s);
  `prompt_tokens_total` / `generation_tokens_total` (label `is_streaming`) and
  `cached_tokens_total{cache_source="device"}`, which SGLang creates at the first hit.
- `sglang-0.5.2`: the queue histogram is `sglang:queue_time_s`; no per-stage or prompt
  histogram; the token counters without the `is_streaming` and `cache_source` labels.
- `tgi` (no labels): `request_queue_duration`, `batch_forward_duration{method="prefill"}`
  observed once per prefill *batch* (engine step), `request_mean_time_per_token_duration`
  per request, `request_input_length`, `request_generated_tokens`, `queue_size` /
  `batch_current_size`; TGI's buckets.

The token counters keep the simulator's timing (vLLM's: prompt tokens at the first token,
generated tokens as they come out); SGLang counts a request's tokens when it finishes, and
TGI observes the prompt length at validation: over a window, the totals differ only by the
requests in flight at its edges.

Used by `e2e/tests/test_prometheus_source.py`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from slascaler_sim.exposition import RealtimeFleet, _labels, _number, render
from slascaler_sim.recorder import (
    LAYOUTS,
    MEAN_TIME_PER_TOKEN,
    PREFILL_BATCH,
    HistogramCounts,
    Layout,
    MetricRecorder,
)

TTFT, QUEUE, PREFILL = (
    "vllm:time_to_first_token_seconds",
    "vllm:request_queue_time_seconds",
    "vllm:request_prefill_time_seconds",
)
ITL, PROMPT = "vllm:inter_token_latency_seconds", "vllm:request_prompt_tokens"
GENERATED = "vllm:request_generation_tokens"

# Per release: recorder histogram → (exported name, extra labels on that histogram).
HISTOGRAMS: Final[dict[str, dict[str, tuple[str, str]]]] = {
    "vllm-0.10": {
        TTFT: (TTFT, ""),
        QUEUE: (QUEUE, ""),
        PREFILL: (PREFILL, ""),
        ITL: ("vllm:time_per_output_token_seconds", ""),
        PROMPT: (PROMPT, ""),
    },
    "sglang-0.5.23": {
        TTFT: ("sglang:time_to_first_token_seconds", 'is_streaming="true"'),
        QUEUE: ("sglang:queue_time_seconds", ""),
        PREFILL: ("sglang:per_stage_req_latency_seconds", 'stage="prefill_forward"'),
        ITL: ("sglang:inter_token_latency_seconds", ""),
        PROMPT: ("sglang:prompt_tokens_histogram", ""),
    },
    "sglang-0.5.2": {
        TTFT: ("sglang:time_to_first_token_seconds", ""),
        QUEUE: ("sglang:queue_time_s", ""),
        ITL: ("sglang:inter_token_latency_seconds", ""),
    },
    "tgi": {
        QUEUE: ("tgi_request_queue_duration", ""),
        PREFILL_BATCH: ("tgi_batch_forward_duration", 'method="prefill"'),
        MEAN_TIME_PER_TOKEN: ("tgi_request_mean_time_per_token_duration", ""),
        PROMPT: ("tgi_request_input_length", ""),
        GENERATED: ("tgi_request_generated_tokens", ""),
    },
}
# Per release: recorder counter → (exported name, extra labels); a counter SGLang creates at
# its first increment is left out while it is zero.
COUNTERS: Final[dict[str, dict[str, tuple[str, str]]]] = {
    "vllm-0.10": {
        name: (name, "")
        for name in (
            "vllm:request_success_total",
            "vllm:prompt_tokens_total",
            "vllm:generation_tokens_total",
            "vllm:num_preemptions_total",
            "vllm:prefix_cache_queries_total",
            "vllm:prefix_cache_hits_total",
        )
    },
    "sglang-0.5.23": {
        "vllm:prompt_tokens_total": ("sglang:prompt_tokens_total", 'is_streaming="true"'),
        "vllm:generation_tokens_total": ("sglang:generation_tokens_total", 'is_streaming="true"'),
        "vllm:prompt_tokens_cached_total": ("sglang:cached_tokens_total", 'cache_source="device"'),
    },
    "sglang-0.5.2": {
        "vllm:prompt_tokens_total": ("sglang:prompt_tokens_total", ""),
        "vllm:generation_tokens_total": ("sglang:generation_tokens_total", ""),
        "vllm:prompt_tokens_cached_total": ("sglang:cached_tokens_total", ""),
    },
    "tgi": {},
}
CREATED_AT_FIRST_INCREMENT: Final = frozenset({"sglang:cached_tokens_total"})
GAUGES: Final[dict[str, tuple[str, str]]] = {
    "vllm-0.10": ("vllm:num_requests_waiting", "vllm:num_requests_running"),
    "sglang-0.5.23": ("sglang:num_queue_reqs", "sglang:num_running_reqs"),
    "sglang-0.5.2": ("sglang:num_queue_reqs", "sglang:num_running_reqs"),
    "tgi": ("tgi_queue_size", "tgi_batch_current_size"),
}
RELEASES: Final = ("vllm-0.33", "vllm-0.10", "sglang-0.5.23", "sglang-0.5.2", "tgi")
ENGINE: Final = {release: release.split("-")[0] for release in RELEASES}


def layout(release: str) -> Layout:
    """The recorder layout (buckets) of an engine release."""
    return LAYOUTS.get(release, LAYOUTS["vllm"])


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


def _labels_of(release: str, model: str) -> dict[str, str]:
    if release.startswith("sglang"):
        return {"model_name": model, "engine_type": "unified", "tp_rank": "0",
                "pp_rank": "0", "moe_ep_rank": "0"}  # fmt: skip
    if release.startswith("vllm"):
        return {"model_name": model, "engine": "0"}
    return {}


def render_as(release: str, recorder: MetricRecorder, model: str) -> str:
    """One replica's metrics as `release` exports them."""
    if release == "vllm-0.33":
        return render([(recorder, {"model_name": model, "engine": "0"})])
    labels = _labels_of(release, model)
    lines: list[str] = []
    for source, (name, extra) in HISTOGRAMS[release].items():
        lines += _histogram(name, recorder.histograms[source], labels, extra)
    for source, (name, extra) in COUNTERS[release].items():
        value = recorder.counters[source]
        if value == 0 and name in CREATED_AT_FIRST_INCREMENT:
            continue
        lines += [f"# TYPE {name} counter", f"{name}{_labels(labels, extra)} {_number(value)}"]
    waiting, running = GAUGES[release]
    for name, value in ((waiting, recorder.waiting), (running, recorder.running)):
        lines += [f"# TYPE {name} gauge", f"{name}{_labels(labels)} {_number(value)}"]
    if release == "vllm-0.10":
        usage = _number(recorder.kv_cache_usage)
        lines += [
            "# TYPE vllm:gpu_cache_usage_perc gauge",
            f"vllm:gpu_cache_usage_perc{_labels(labels)} {usage}",
        ]
    return "\n".join(lines) + "\n"


class EngineFormatFleet(RealtimeFleet):
    """A real-time fleet whose per-pod endpoints speak one engine release's metrics (its
    Fleet must have been made with `layout(release)`)."""

    def __init__(self, release: str, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        if release not in RELEASES:
            raise ValueError(f"unknown release {release!r}; one of {', '.join(RELEASES)}")
        self.release = release

    def exposition(self, pod: str | None) -> str:
        with self.lock:
            self.fleet.run_until(self.clock() - self._origin)
            texts = []
            for replica in self.fleet.replicas:
                if pod is None or replica.name == pod:
                    replica.recorder.advance_gauges(self.fleet.now)
                    texts.append(render_as(self.release, replica.recorder, self.model_name))
            return "".join(texts)
