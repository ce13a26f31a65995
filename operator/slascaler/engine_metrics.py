"""What slascaler reads from each engine's `/metrics`, per engine and release.

Each engine's quantities (TTFT, queue time, prefill time, inter-token latency, prompt length;
waiting and running requests) are listed as the series that carry them, newest release
first; an older name still in wide use comes after the current one, and the Prometheus
source reads the first one a pod exports. Checked against each engine's own source:

- vLLM 0.33.0 (`vllm/v1/metrics/loggers.py`, `buckets.py`), 0.11.0 and 0.6.6
  (`vllm/engine/metrics.py`): inter-token latency is `vllm:inter_token_latency_seconds`
  since 0.11 (`vllm:time_per_output_token_seconds` before, deprecated in 0.11); the queue
  that more replicas shorten is `vllm:num_requests_waiting_by_reason{reason="capacity"}`
  where it exists (0.33.0; not in 0.11.0): `vllm:num_requests_waiting` also counts requests
  deferred for a LoRA budget or a KV transfer. Every bucket family can be replaced with
  `--custom-histogram-buckets` (0.33.0), so buckets are read from the series, never assumed.
- SGLang 0.5.23 (`srt/observability/metrics_collector.py`, `req_time_stats.py`), 0.5.10,
  0.5.2 and 0.4.x (`srt/metrics/collector.py`): metrics exist only with `--enable-metrics`;
  queue time is `sglang:queue_time_seconds` (0.5.10 on), `sglang:queue_time_s` in 0.5.2,
  and no histogram at all in 0.4.x; per-request prefill time is
  `sglang:per_stage_req_latency_seconds{stage="prefill_forward"}` (from the request's first
  forward to the end of its prefill, chunks included; 0.5.10 on); the prompt-length
  histogram `sglang:prompt_tokens_histogram` is always on in 0.5.23 and needs
  `--collect-tokens-histogram` before. TTFT buckets start at 0.1 s by default
  (`--bucket-time-to-first-token` changes them).
- TGI (router/src/server.rs, backends/v3): no TTFT histogram; `tgi_batch_forward_duration
  {method="prefill"}` is observed once per prefill *batch* (the running batch it joins
  included), so it is never read as a per-request prefill time: its shape only approximates
  one, said so in the status. Buckets are fixed (0.00015 s × 1.5^k).

Read by `metrics.promql` / `metrics.prometheus` (what to query and how to read it), by
`model.resolution` (which flag sets the buckets) and by the simulator (what to export for
each engine release). Pure data.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from slascaler.spec import Engine

SECONDS_TO_MS: Final = 1000.0


@dataclass(frozen=True)
class Series:
    """One series an engine release exports a quantity as."""

    name: str
    matchers: str = ""  # extra label matchers, e.g. 'stage="prefill_forward"'
    releases: str = ""  # which releases export it under this name, for messages

    def __str__(self) -> str:
        return f"{self.name}{{{self.matchers}}}" if self.matchers else self.name


@dataclass(frozen=True)
class HistogramFamily:
    """A latency (or length) histogram, as each release names it, newest first."""

    key: str  # ttft, queue, prefill, itl, prompt_tokens (the Observation field it fills)
    series: tuple[Series, ...]
    scale: float = SECONDS_TO_MS  # from the exported unit to the Observation's (ms, tokens)
    # How a user changes its buckets (for the resolution condition), the bounds in seconds
    # (or tokens) written where `<json list>` or `<values>` stands; None: fixed buckets.
    bucket_flag: str | None = None
    # Observed once per engine batch, not per request (TGI's prefill forward duration).
    per_batch: bool = False

    @property
    def current(self) -> Series:
        return self.series[0]


@dataclass(frozen=True)
class GaugeFamily:
    """A gauge of requests (waiting or running), as each release names it, newest first."""

    key: str
    series: tuple[Series, ...]

    @property
    def current(self) -> Series:
        return self.series[0]


@dataclass(frozen=True)
class CounterFamily:
    """Tokens an engine counts, as each release names the series, newest first: a counter
    (`…_total`) or a per-request histogram's `_sum`; read as its increase over the window."""

    key: str  # prompt_tokens, cached_tokens, generated_tokens
    series: tuple[Series, ...]
    # The engine creates the series at its first increment: a pod that exports the other
    # token counters but not this one has counted none yet.
    created_on_first_increment: bool = False

    @property
    def current(self) -> Series:
        return self.series[0]


@dataclass(frozen=True)
class EngineMetrics:
    """Everything slascaler reads from one engine's metrics."""

    engine: Engine
    name: str  # as users know it
    histograms: Mapping[str, HistogramFamily]  # absent key: the engine exports no such series
    waiting: GaugeFamily
    running: GaugeFamily
    # Observed once per request served: its `_count` is what `request_rate` counts.
    served_requests: Series
    tokens: Mapping[str, CounterFamily]  # absent key: the engine counts no such tokens
    # What the user must enable for any of these series to exist ("" when always on).
    enable: str = ""

    def histogram(self, key: str) -> HistogramFamily | None:
        return self.histograms.get(key)


def _vllm_buckets(family: str) -> str:
    return f"--custom-histogram-buckets '{{\"{family}\": <json list>}}' (vLLM ≥ 0.33)"


VLLM: Final = EngineMetrics(
    engine=Engine.VLLM,
    name="vLLM",
    histograms={
        "ttft": HistogramFamily(
            "ttft",
            (Series("vllm:time_to_first_token_seconds", releases="vLLM 0.6–0.33"),),
            bucket_flag=_vllm_buckets("time_to_first_token"),
        ),
        "queue": HistogramFamily(
            "queue",
            (Series("vllm:request_queue_time_seconds", releases="vLLM 0.6–0.33"),),
            bucket_flag=_vllm_buckets("request_latency"),
        ),
        "prefill": HistogramFamily(
            "prefill",
            (Series("vllm:request_prefill_time_seconds", releases="vLLM 0.6–0.33"),),
            bucket_flag=_vllm_buckets("request_latency"),
        ),
        "itl": HistogramFamily(
            "itl",
            (
                Series("vllm:inter_token_latency_seconds", releases="vLLM ≥ 0.11"),
                Series("vllm:time_per_output_token_seconds", releases="vLLM ≤ 0.11"),
            ),
            bucket_flag=_vllm_buckets("inter_token_latency"),
        ),
        "prompt_tokens": HistogramFamily(
            "prompt_tokens",
            (Series("vllm:request_prompt_tokens", releases="vLLM 0.6–0.33"),),
            scale=1.0,
            bucket_flag=_vllm_buckets("request_tokens"),
        ),
    },
    waiting=GaugeFamily(
        "waiting",
        (
            Series(
                "vllm:num_requests_waiting_by_reason",
                'reason="capacity"',
                "vLLM 0.33 (requests waiting for capacity only)",
            ),
            Series("vllm:num_requests_waiting", releases="every vLLM"),
        ),
    ),
    running=GaugeFamily("running", (Series("vllm:num_requests_running"),)),
    served_requests=Series("vllm:time_to_first_token_seconds_count"),
    tokens={
        "prompt_tokens": CounterFamily(
            "prompt_tokens", (Series("vllm:prompt_tokens_total", releases="every vLLM"),)
        ),
        "cached_tokens": CounterFamily(
            "cached_tokens",
            (
                Series("vllm:prompt_tokens_cached_total", releases="vLLM 0.33"),
                Series(
                    "vllm:prefix_cache_hits_total",
                    releases="vLLM v1 releases before 0.33 (hits counted at admission)",
                ),
                Series(
                    "vllm:gpu_prefix_cache_hits_total",
                    releases="early vLLM v1 releases (hits counted at admission)",
                ),
            ),
        ),
        "generated_tokens": CounterFamily(
            "generated_tokens", (Series("vllm:generation_tokens_total", releases="every vLLM"),)
        ),
    },
)

SGLANG: Final = EngineMetrics(
    engine=Engine.SGLANG,
    name="SGLang",
    histograms={
        "ttft": HistogramFamily(
            "ttft",
            (Series("sglang:time_to_first_token_seconds", releases="SGLang 0.4–0.5.23"),),
            bucket_flag="--bucket-time-to-first-token <values>",
        ),
        "queue": HistogramFamily(
            "queue",
            (
                Series("sglang:queue_time_seconds", releases="SGLang ≥ 0.5.10"),
                Series("sglang:queue_time_s", releases="SGLang 0.5.2"),
            ),
        ),
        "prefill": HistogramFamily(
            "prefill",
            (
                Series(
                    "sglang:per_stage_req_latency_seconds",
                    'stage="prefill_forward"',
                    "SGLang ≥ 0.5.10",
                ),
            ),
        ),
        "itl": HistogramFamily(
            "itl",
            (Series("sglang:inter_token_latency_seconds", releases="SGLang 0.4–0.5.23"),),
            bucket_flag="--bucket-inter-token-latency <values>",
        ),
        "prompt_tokens": HistogramFamily(
            "prompt_tokens",
            (
                Series(
                    "sglang:prompt_tokens_histogram",
                    releases="SGLang 0.5.23 (before: with --collect-tokens-histogram)",
                ),
            ),
            scale=1.0,
            bucket_flag="--prompt-tokens-buckets custom <values>",
        ),
    },
    waiting=GaugeFamily("waiting", (Series("sglang:num_queue_reqs"),)),
    running=GaugeFamily("running", (Series("sglang:num_running_reqs"),)),
    served_requests=Series("sglang:time_to_first_token_seconds_count"),
    tokens={
        "prompt_tokens": CounterFamily(
            "prompt_tokens", (Series("sglang:prompt_tokens_total", releases="SGLang 0.4–0.5.23"),)
        ),
        "cached_tokens": CounterFamily(
            "cached_tokens",
            (Series("sglang:cached_tokens_total", releases="SGLang 0.4–0.5.23"),),
            created_on_first_increment=True,
        ),
        "generated_tokens": CounterFamily(
            "generated_tokens",
            (Series("sglang:generation_tokens_total", releases="SGLang 0.4–0.5.23"),),
        ),
    },
    enable="--enable-metrics",
)

TGI: Final = EngineMetrics(
    engine=Engine.TGI,
    name="TGI",
    histograms={
        "queue": HistogramFamily("queue", (Series("tgi_request_queue_duration"),)),
        # Per batch: the shape of prefill batches' durations, never a per-request count.
        "prefill": HistogramFamily(
            "prefill",
            (Series("tgi_batch_forward_duration", 'method="prefill"'),),
            per_batch=True,
        ),
        # A per-request mean: inference time / generated tokens (prefill included).
        "itl": HistogramFamily("itl", (Series("tgi_request_mean_time_per_token_duration"),)),
        "prompt_tokens": HistogramFamily(
            "prompt_tokens", (Series("tgi_request_input_length"),), scale=1.0
        ),
    },
    waiting=GaugeFamily("waiting", (Series("tgi_queue_size"),)),
    running=GaugeFamily("running", (Series("tgi_batch_current_size"),)),
    served_requests=Series("tgi_request_queue_duration_count"),
    tokens={
        "prompt_tokens": CounterFamily(
            "prompt_tokens", (Series("tgi_request_input_length_sum", releases="TGI's router"),)
        ),
        "generated_tokens": CounterFamily(
            "generated_tokens",
            (Series("tgi_request_generated_tokens_sum", releases="TGI's router"),),
        ),
    },
)

ENGINE_METRICS: Final[dict[Engine, EngineMetrics]] = {
    Engine.VLLM: VLLM,
    Engine.SGLANG: SGLANG,
    Engine.TGI: TGI,
}

HISTOGRAM_KEYS: Final = ("ttft", "queue", "prefill", "itl", "prompt_tokens")
DESCRIPTIONS: Final = {
    "ttft": "time-to-first-token histogram",
    "queue": "queue-time histogram",
    "prefill": "prefill-time histogram",
    "itl": "inter-token-latency histogram",
    "prompt_tokens": "prompt-length histogram",
}

# Default buckets of the releases the simulator exports (seconds, or tokens).
SGLANG_TTFT_BUCKETS_S: Final = (
    0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0,
    200.0, 400.0,
)  # fmt: skip
SGLANG_ITL_BUCKETS_S: Final = (
    0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060,
    0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.0, 2.0, 4.0, 6.0, 8.0,
)  # fmt: skip
SGLANG_QUEUE_BUCKETS_S: Final = (
    0.0, 0.001, 0.005, 0.010, 0.050, 0.100, 0.200, 0.500, 1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 15.0,
    20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 100.0, 200.0, 300.0, 400.0, 500.0, 600.0,
    700.0, 800.0, 900.0, 1000.0, 1200.0, 1400.0, 1600.0, 1800.0, 2000.0, 2500.0, 3000.0,
)  # fmt: skip
SGLANG_QUEUE_S_BUCKETS_S: Final = (  # 0.5.2's sglang:queue_time_s
    0.0, 0.1, 0.2, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
    70.0, 80.0, 90.0, 100.0, 200.0, 300.0, 400.0, 500.0, 600.0, 700.0, 800.0, 900.0, 1000.0,
    1200.0, 1400.0, 1600.0, 1800.0, 2000.0, 2500.0, 3000.0,
)  # fmt: skip
SGLANG_STAGE_BUCKETS_S: Final = tuple(0.001 * 1.62**i for i in range(30))
SGLANG_PROMPT_TOKEN_BUCKETS: Final = (
    100.0, 300.0, 500.0, 700.0, 1000.0, 1500.0, 2000.0, 3000.0, 4000.0, 5000.0, 6000.0,
    7000.0, 8000.0, 9000.0, 10000.0, 12500.0, 15000.0, 17500.0, 20000.0, 22500.0, 25000.0,
    27500.0, 30000.0, 35000.0, 40000.0, 60000.0, 80000.0, 100000.0, 200000.0, 300000.0,
    400000.0, 600000.0, 800000.0, 1000000.0, 1100000.0,
)  # fmt: skip
TGI_DURATION_BUCKETS_S: Final = tuple(0.0001 * 1.5 ** (i + 1) for i in range(35))


def tgi_input_length_buckets(max_input_tokens: int) -> tuple[float, ...]:
    """TGI's prompt-length buckets: a hundred equal steps up to `--max-input-tokens`."""
    return tuple(max_input_tokens / 100.0 * (i + 1) for i in range(100))


def tgi_generated_tokens_buckets(max_total_tokens: int) -> tuple[float, ...]:
    """TGI's generated-length buckets: a hundred equal steps up to `--max-total-tokens`."""
    return tuple(max_total_tokens / 100.0 * (i + 1) for i in range(100))
