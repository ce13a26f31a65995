"""What slascaler knows of each inference engine: metric names, histogram buckets, flags.

One table per engine (vLLM v1, SGLang, TGI), from each engine's own source: the metric
names the Prometheus source queries, the buckets the simulator exports (vLLM's exactly), and
the command-line flags the actuation layer rewrites. No vLLM metric exposes the max batch or
chunk size, so these are read from (and written to) the Deployment's container args.

Read by the metric sources, the actuation layer and the simulator; pure data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from slascaler.spec import Engine

# vLLM v1 (vllm/v1/metrics/loggers.py), in seconds.
VLLM_TTFT_BUCKETS_S: Final = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
VLLM_REQUEST_LATENCY_BUCKETS_S: Final = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
    50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
VLLM_ITL_BUCKETS_S: Final = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip


def vllm_token_buckets(max_model_len: int) -> tuple[int, ...]:
    """vLLM's 1-2-5 buckets for token counts, up to the model's context length."""
    buckets: list[int] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > max_model_len:
                return tuple(buckets)
            buckets.append(value)
        exponent += 1


@dataclass(frozen=True)
class EngineFlavour:
    """Metric names (None: the engine has no such series) and flag names of one engine."""

    ttft: str | None
    queue_time: str | None
    prefill_time: str | None
    inter_token: str | None
    prompt_tokens: str | None
    waiting: str
    running: str
    max_batch_flag: str
    chunk_flag: str
    default_max_batch: int
    default_chunk: int
    prefill_label_filter: str = ""  # extra matcher for engines that label one histogram


ENGINES: Final[dict[Engine, EngineFlavour]] = {
    Engine.VLLM: EngineFlavour(
        ttft="vllm:time_to_first_token_seconds",
        queue_time="vllm:request_queue_time_seconds",
        prefill_time="vllm:request_prefill_time_seconds",
        inter_token="vllm:inter_token_latency_seconds",
        prompt_tokens="vllm:request_prompt_tokens",
        waiting="vllm:num_requests_waiting",
        running="vllm:num_requests_running",
        max_batch_flag="--max-num-seqs",
        chunk_flag="--max-num-batched-tokens",
        default_max_batch=256,
        default_chunk=8192,
    ),
    Engine.SGLANG: EngineFlavour(
        ttft="sglang:time_to_first_token_seconds",
        queue_time="sglang:queue_time_seconds",
        prefill_time=None,
        inter_token="sglang:inter_token_latency_seconds",
        prompt_tokens=None,
        waiting="sglang:num_queue_reqs",
        running="sglang:num_running_reqs",
        max_batch_flag="--max-running-requests",
        chunk_flag="--chunked-prefill-size",
        default_max_batch=256,
        default_chunk=8192,
    ),
    Engine.TGI: EngineFlavour(
        ttft=None,
        queue_time="tgi_request_queue_duration",
        prefill_time="tgi_batch_forward_duration",
        inter_token="tgi_request_mean_time_per_token_duration",
        prompt_tokens="tgi_request_input_length",
        waiting="tgi_queue_size",
        running="tgi_batch_current_size",
        max_batch_flag="--max-batch-size",
        chunk_flag="--max-batch-prefill-tokens",
        default_max_batch=256,
        default_chunk=4096,
        prefill_label_filter='method="prefill"',
    ),
}
