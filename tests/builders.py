"""Builders of Observations and specs for the model and policy tests."""

from __future__ import annotations

import math
from collections.abc import Sequence

from slascaler.engines import (
    VLLM_ITL_BUCKETS_S,
    VLLM_REQUEST_LATENCY_BUCKETS_S,
    VLLM_TTFT_BUCKETS_S,
    vllm_token_buckets,
)
from slascaler.model.histogram import Histogram
from slascaler.model.observation import Observation
from slascaler.model.samples import TTFTBreakdown
from slascaler.spec import SLASpec, parse_spec

TTFT_MS = [b * 1000 for b in VLLM_TTFT_BUCKETS_S]
LATENCY_MS = [b * 1000 for b in VLLM_REQUEST_LATENCY_BUCKETS_S]
ITL_MS = [b * 1000 for b in VLLM_ITL_BUCKETS_S]


def observation_from_samples(
    samples: Sequence[TTFTBreakdown],
    *,
    window_s: float = 120.0,
    at: float = 1000.0,
    itl_ms: Sequence[float] = (),
    prompt_tokens: Sequence[float] = (),
    waiting: float = 0.0,
    running: float = 8.0,
    pods: int = 2,
    tokens_per_request: float | None = None,
    waiting_now: float | None = None,
) -> Observation:
    """An Observation as vLLM would export it for these requests (vLLM's buckets).

    With `tokens_per_request`, the token counters say each request brought that many
    tokens of work (computed prompt + generated), so that the policy can size in tokens.
    """
    rate = len(samples) / window_s
    tokens = math.nan if tokens_per_request is None else rate * tokens_per_request
    return Observation(
        observed_at=at,
        window_s=window_s,
        ttft=Histogram.from_values([s.total_ms for s in samples], TTFT_MS),
        queue=Histogram.from_values([s.queue_time_ms for s in samples], LATENCY_MS),
        # vLLM's prefill time runs from scheduling to the first token: prefill + first decode.
        prefill=Histogram.from_values(
            [s.prefill_ms + s.first_decode_ms for s in samples], LATENCY_MS
        ),
        itl=Histogram.from_values(itl_ms, ITL_MS),
        prompt_tokens=Histogram.from_values(prompt_tokens, vllm_token_buckets(32768)),
        request_rate=rate,
        waiting=waiting,
        running=running,
        reporting_pods=pods,
        waiting_now=waiting if waiting_now is None else waiting_now,
        prompt_token_rate=tokens * 0.85,
        generation_token_rate=tokens * 0.15,
    )


def long_prompt_minute(
    prompts: Sequence[float], *, pods: int = 1, collided: int = 0, at: float = 1000.0
) -> Observation:
    """A minute of long prompts on `pods` replicas, as in the prefill-bound scenario: each
    prefilled alone in one step of 7 ms + 25 µs per token (6000 tokens: 157 ms), then a 7 ms
    first decode; the first `collided` shared a replica's steps with another prompt and took
    twice as long."""
    samples = [
        TTFTBreakdown(2.0, 5.0, (7.0 + 0.025 * p) * (2 if i < collided else 1), 7.0)
        for i, p in enumerate(prompts)
    ]
    return observation_from_samples(
        samples, window_s=60.0, at=at, pods=pods, itl_ms=[7.0] * 200,
        prompt_tokens=prompts, running=0.1 * pods,
        tokens_per_request=sum(prompts) / max(1, len(prompts)),
    )  # fmt: skip


def colliding_prompts(*, pods: int = 1, collided: int = 2, at: float = 1000.0) -> Observation:
    """18 prompts of 6000–7000 tokens in a minute, whose prefill alone meets 250 ms; the
    first `collided` shared a replica's steps and missed it."""
    prompts = [6000.0 + 1000.0 * i / 17 for i in range(18)]
    return long_prompt_minute(prompts, pods=pods, collided=collided, at=at)


def spec(**overrides: object) -> SLASpec:
    raw: dict[str, object] = {
        "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llama"},
        "objectives": {"ttft": {"percentile": 95, "thresholdMs": 500}},
        "replicas": {"min": 1, "max": 16},
    }
    raw.update(overrides)
    return parse_spec(raw)
