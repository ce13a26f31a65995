"""vLLM's metrics for one simulated replica: the same names, labels and histogram buckets.

A `MetricRecorder` keeps each histogram as per-bucket counts (seconds, vLLM v1 buckets; token
counts in vLLM's 1-2-5 buckets up to the profile's `max_model_len`, as vLLM builds them), the
counters, and the gauges with their time integrals (so window averages are exact). The fleet
sums recorders into an `Observation` in virtual time; the real-time server renders them as
Prometheus text exposition for a real Prometheus to scrape.

Prefix-cache metrics follow vLLM 0.33.0 (`vllm/v1/metrics/loggers.py`, `stats.py`):
`prefix_cache_queries_total` / `prefix_cache_hits_total` count tokens looked up and found at
a request's first admission (not at re-admissions after a preemption);
`prompt_tokens_total` counts every prompt token, cached or computed, once per request when
its first token comes out, and `prompt_tokens_cached_total` the cached ones among them;
`request_prompt_tokens` observes the full prompt and `request_prefill_kv_computed_tokens`
the prompt less its cached tokens, when the request finishes; `kv_cache_usage_perc` is the
share of KV blocks in use (cached blocks no request uses count as free).

Other engines and releases (what `slascaler.engine_metrics` reads) are exported from the same
recorder: a `layout` (`LAYOUTS`) replaces the buckets of the histograms it names (SGLang's
TTFT buckets start at 0.1 s; TGI's are 0.00015 s × 1.5^k; vLLM's `--custom-histogram-buckets`)
and adds the histograms only those engines have: TGI's prefill-batch forward duration (one
observation per engine step that computes prompt tokens, not per request) and its per-request
mean time per token. A fleet's recorders share one layout.

Written by `sim.engine`; read by `sim.fleet` and the metrics servers (`sim.exposition`,
`e2e.engine_formats`).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Final

from slascaler.engine_metrics import (
    SGLANG_ITL_BUCKETS_S,
    SGLANG_PROMPT_TOKEN_BUCKETS,
    SGLANG_QUEUE_BUCKETS_S,
    SGLANG_QUEUE_S_BUCKETS_S,
    SGLANG_STAGE_BUCKETS_S,
    SGLANG_TTFT_BUCKETS_S,
    TGI_DURATION_BUCKETS_S,
    tgi_generated_tokens_buckets,
    tgi_input_length_buckets,
)
from slascaler.engines import (
    VLLM_ITL_BUCKETS_S,
    VLLM_REQUEST_LATENCY_BUCKETS_S,
    VLLM_TTFT_BUCKETS_S,
    vllm_token_buckets,
)
from slascaler.model.histogram import Histogram

MAX_MODEL_LEN: Final = 32768  # default context limit, where no profile gives one


@cache
def token_buckets(max_model_len: int) -> tuple[float, ...]:
    return tuple(float(b) for b in vllm_token_buckets(max_model_len))


TOKEN_BUCKETS: Final = token_buckets(MAX_MODEL_LEN)
TOKEN_HISTOGRAMS: Final = (
    "vllm:request_prompt_tokens",
    "vllm:request_generation_tokens",
    "vllm:request_prefill_kv_computed_tokens",
)

HISTOGRAMS: Final[dict[str, tuple[float, ...]]] = {
    "vllm:time_to_first_token_seconds": VLLM_TTFT_BUCKETS_S,
    "vllm:request_queue_time_seconds": VLLM_REQUEST_LATENCY_BUCKETS_S,
    "vllm:request_prefill_time_seconds": VLLM_REQUEST_LATENCY_BUCKETS_S,
    "vllm:request_decode_time_seconds": VLLM_REQUEST_LATENCY_BUCKETS_S,
    "vllm:e2e_request_latency_seconds": VLLM_REQUEST_LATENCY_BUCKETS_S,
    "vllm:inter_token_latency_seconds": VLLM_ITL_BUCKETS_S,
    **{name: TOKEN_BUCKETS for name in TOKEN_HISTOGRAMS},
}
# Histograms only some engines export (added by a layout that gives their buckets).
PREFILL_BATCH: Final = "batch:prefill_forward_seconds"  # per engine step with prompt tokens
MEAN_TIME_PER_TOKEN: Final = "request:mean_time_per_token_seconds"  # per request (TGI)
EXTRA_HISTOGRAMS: Final = (PREFILL_BATCH, MEAN_TIME_PER_TOKEN)

Layout = Mapping[str, tuple[float, ...]]

# Bucket layouts of the engine releases the simulator exports, by the recorder's names.
LAYOUTS: Final[dict[str, Layout]] = {
    "vllm": {},
    "sglang-0.5.23": {
        "vllm:time_to_first_token_seconds": SGLANG_TTFT_BUCKETS_S,
        "vllm:request_queue_time_seconds": SGLANG_QUEUE_BUCKETS_S,
        "vllm:request_prefill_time_seconds": SGLANG_STAGE_BUCKETS_S,
        "vllm:inter_token_latency_seconds": SGLANG_ITL_BUCKETS_S,
        "vllm:request_prompt_tokens": SGLANG_PROMPT_TOKEN_BUCKETS,
    },
    "sglang-0.5.2": {
        "vllm:time_to_first_token_seconds": SGLANG_TTFT_BUCKETS_S,
        "vllm:request_queue_time_seconds": SGLANG_QUEUE_S_BUCKETS_S,
        "vllm:inter_token_latency_seconds": SGLANG_ITL_BUCKETS_S,
    },
    "tgi": {
        "vllm:request_queue_time_seconds": TGI_DURATION_BUCKETS_S,
        "vllm:request_prompt_tokens": tgi_input_length_buckets(4096),
        "vllm:request_generation_tokens": tgi_generated_tokens_buckets(4096),
        PREFILL_BATCH: TGI_DURATION_BUCKETS_S,
        MEAN_TIME_PER_TOKEN: TGI_DURATION_BUCKETS_S,
    },
}

COUNTERS: Final = (
    "vllm:request_success_total",
    "vllm:prompt_tokens_total",
    "vllm:prompt_tokens_cached_total",
    "vllm:generation_tokens_total",
    "vllm:num_preemptions_total",
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
)


@dataclass
class HistogramCounts:
    """A growing classic histogram: per-bucket counts (last is +Inf), sum and count."""

    bounds: tuple[float, ...]
    counts: list[float] = field(default_factory=list)
    total: float = 0.0
    observations: float = 0.0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0.0] * (len(self.bounds) + 1)

    def observe(self, value: float, weight: float = 1.0) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += weight
        self.total += value * weight
        self.observations += weight

    def add(self, other: HistogramCounts) -> None:
        self.counts = [mine + theirs for mine, theirs in zip(self.counts, other.counts,
                                                             strict=True)]  # fmt: skip
        self.total += other.total
        self.observations += other.observations

    def minus(self, earlier: HistogramCounts) -> HistogramCounts:
        return HistogramCounts(
            self.bounds,
            [a - b for a, b in zip(self.counts, earlier.counts, strict=True)],
            self.total - earlier.total,
            self.observations - earlier.observations,
        )

    def copy(self) -> HistogramCounts:
        return HistogramCounts(self.bounds, list(self.counts), self.total, self.observations)

    def to_histogram(self, scale: float = 1.0) -> Histogram:
        cumulative: list[float] = []
        running = 0.0
        for c in self.counts:
            running += c
            cumulative.append(running)
        return Histogram(
            upper_bounds=(*(b * scale for b in self.bounds), float("inf")),
            cumulative_counts=tuple(cumulative),
            sum=self.total * scale,
            count=self.observations,
        )


@dataclass
class MetricRecorder:
    """All of one replica's metrics (or a sum of several); token histograms bucketed up to
    `max_model_len`, as the engine's own."""

    max_model_len: int = MAX_MODEL_LEN
    layout: Layout = field(default_factory=dict)  # buckets replaced or added (`LAYOUTS`)
    histograms: dict[str, HistogramCounts] = field(default_factory=dict)
    counters: dict[str, float] = field(default_factory=lambda: dict.fromkeys(COUNTERS, 0.0))
    # Gauges: current value, and ∫ value dt up to `gauge_time`.
    waiting: float = 0.0
    running: float = 0.0
    waiting_integral: float = 0.0
    running_integral: float = 0.0
    gauge_time: float = 0.0
    kv_cache_usage: float = 0.0  # current value only (a share, 0–1)

    def __post_init__(self) -> None:
        if not self.histograms:
            tokens = token_buckets(self.max_model_len)
            self.histograms = {
                name: HistogramCounts(tokens if name in TOKEN_HISTOGRAMS else bounds)
                for name, bounds in HISTOGRAMS.items()
            }
            for name, bounds in self.layout.items():
                self.histograms[name] = HistogramCounts(tuple(float(b) for b in bounds))

    def advance_gauges(self, now: float) -> None:
        if now > self.gauge_time:
            elapsed = now - self.gauge_time
            self.waiting_integral += self.waiting * elapsed
            self.running_integral += self.running * elapsed
            self.gauge_time = now

    def set_gauges(self, now: float, waiting: int, running: int) -> None:
        self.advance_gauges(now)
        self.waiting, self.running = float(waiting), float(running)

    def observe(self, name: str, value: float, weight: float = 1.0) -> None:
        self.histograms[name].observe(value, weight)

    def observe_extra(self, name: str, value: float, weight: float = 1.0) -> None:
        """Observe a histogram only some engines export, when the layout has it."""
        histogram = self.histograms.get(name)
        if histogram is not None:
            histogram.observe(value, weight)

    def add(self, other: MetricRecorder) -> None:
        for name, h in other.histograms.items():
            self.histograms[name].add(h)
        for name, v in other.counters.items():
            self.counters[name] += v
        self.waiting_integral += other.waiting_integral
        self.running_integral += other.running_integral

    def copy(self) -> MetricRecorder:
        clone = MetricRecorder(
            max_model_len=self.max_model_len,
            layout=self.layout,
            histograms={n: h.copy() for n, h in self.histograms.items()},
            counters=dict(self.counters),
        )
        clone.waiting, clone.running = self.waiting, self.running
        clone.kv_cache_usage = self.kv_cache_usage
        clone.waiting_integral, clone.running_integral = (
            self.waiting_integral,
            self.running_integral,
        )
        clone.gauge_time = self.gauge_time
        return clone
