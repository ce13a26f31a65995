"""What slascaler knows of each inference engine: histogram buckets and flags.

One table per engine (vLLM v1, SGLang, TGI), from each engine's own source: the buckets the
simulator exports (vLLM's exactly), and the command-line flags the actuation layer rewrites.
No vLLM metric exposes the max batch or chunk size, so these are read from (and written to)
the Deployment's container args. The series slascaler reads, per engine and release, are in
`engine_metrics`.

Read by the actuation layer and the simulator; pure data.
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
    """Flag names of one engine."""

    max_batch_flag: str
    chunk_flag: str
    default_max_batch: int
    default_chunk: int


ENGINES: Final[dict[Engine, EngineFlavour]] = {
    Engine.VLLM: EngineFlavour(
        max_batch_flag="--max-num-seqs",
        chunk_flag="--max-num-batched-tokens",
        default_max_batch=256,
        default_chunk=8192,
    ),
    Engine.SGLANG: EngineFlavour(
        max_batch_flag="--max-running-requests",
        chunk_flag="--chunked-prefill-size",
        default_max_batch=256,
        default_chunk=8192,
    ),
    Engine.TGI: EngineFlavour(
        max_batch_flag="--max-batch-size",
        chunk_flag="--max-batch-prefill-tokens",
        default_max_batch=256,
        default_chunk=4096,
    ),
}
