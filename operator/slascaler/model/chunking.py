"""The effect of the chunked-prefill token budget (chunk size) on prefill time and ITL.

vLLM v1 schedules each engine step under a token budget C (`--max-num-batched-tokens`):
running decodes take one token each (d per step), and a prompt is prefilled in chunks of
what remains, C − d tokens. With a linear step cost t(n) = f + k · n for n tokens in a step
(the shape of published profiles for Llama-3-8B: ≈ 5.6 ms at 1 token, 40 ms at 2048 on an
H100), a prompt of L tokens needs ⌈L / (C − d)⌉ steps and its prefill takes

    prefill(L, C) = Σ over its steps of (f + k · (d + tokens of the chunk)),

so a larger C means fewer fixed costs f paid per prompt, at the price of longer steps for
the requests decoding alongside: ITL ≈ f + k · C in a step that carries a full chunk.
Raising C therefore shortens prefill-bound TTFT and lengthens ITL; `choose_chunk_size`
picks the smallest C that meets the TTFT budget while its ITL stays within the ITL limit.

The step cost (f, k) is estimated from one window by `estimate_step_cost`: decode-only
steps give ITL ≈ f + k · d, a prompt's steps give mean prefill / steps ≈ f + k · C.

Called by the policy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class StepCost:
    """Engine step time = fixed_ms + per_token_ms × tokens in the step."""

    fixed_ms: float
    per_token_ms: float

    def step_ms(self, tokens: float) -> float:
        return self.fixed_ms + self.per_token_ms * tokens


def prefill_time_ms(
    prompt_tokens: float, chunk_size: int, decode_tokens: float, cost: StepCost
) -> float:
    """Time to prefill one prompt of `prompt_tokens` with `decode_tokens` decodes per step."""
    if prompt_tokens <= 0:
        return 0.0
    per_step = max(1.0, chunk_size - decode_tokens)
    full_steps = math.floor(prompt_tokens / per_step)
    remainder = prompt_tokens - full_steps * per_step
    time = full_steps * cost.step_ms(decode_tokens + per_step)
    if remainder > 0:
        time += cost.step_ms(decode_tokens + remainder)
    return time


def itl_with_chunk_ms(chunk_size: int, cost: StepCost) -> float:
    """Inter-token latency of a decode sharing its step with a full prefill chunk."""
    return cost.step_ms(chunk_size)


def estimate_step_cost(
    mean_prefill_ms: float,
    mean_prompt_tokens: float,
    chunk_size: int,
    decode_tokens: float,
    mean_itl_ms: float,
) -> StepCost | None:
    """(f, k) from one window's means; None when the figures are inconsistent with the model."""
    values = (mean_prefill_ms, mean_prompt_tokens, decode_tokens, mean_itl_ms)
    if not all(math.isfinite(v) for v in values) or mean_prompt_tokens <= 0:
        return None
    per_step = max(1.0, chunk_size - decode_tokens)
    steps = math.ceil(mean_prompt_tokens / per_step)
    chunk_step_ms = mean_prefill_ms / steps
    tokens_in_chunk_step = decode_tokens + min(per_step, mean_prompt_tokens)
    spread = tokens_in_chunk_step - decode_tokens
    if spread <= 0:
        return None
    per_token = (chunk_step_ms - mean_itl_ms) / spread
    fixed = mean_itl_ms - per_token * decode_tokens
    if per_token <= 0 or fixed < 0:
        return None
    return StepCost(fixed_ms=fixed, per_token_ms=per_token)


@dataclass(frozen=True)
class ChunkChoice:
    """The chosen chunk size and what the model predicts for it."""

    chunk_size: int
    prefill_ms: float
    itl_ms: float
    meets_ttft: bool


def candidate_chunk_sizes(low: int, high: int) -> list[int]:
    """The bounds and the powers of two between them, ascending."""
    sizes = {low, high}
    power = 1
    while power < high:
        power *= 2
        if low < power < high:
            sizes.add(power)
    return sorted(sizes)


def choose_chunk_size(
    prompt_tokens: float,
    prefill_budget_ms: float,
    itl_limit_ms: float | None,
    decode_tokens: float,
    cost: StepCost,
    candidates: Sequence[int],
) -> ChunkChoice | None:
    """The smallest candidate meeting the prefill budget with ITL ≤ limit.

    If none meets the budget, the candidate with the shortest prefill among those within
    the ITL limit, with `meets_ttft=False`. None if no candidate is within the ITL limit.
    """
    allowed = [
        c for c in candidates if itl_limit_ms is None or itl_with_chunk_ms(c, cost) <= itl_limit_ms
    ]
    if not allowed:
        return None
    timed = [(c, prefill_time_ms(prompt_tokens, c, decode_tokens, cost)) for c in allowed]
    for c, prefill in timed:
        if prefill <= prefill_budget_ms:
            return ChunkChoice(c, prefill, itl_with_chunk_ms(c, cost), True)
    c, prefill = min(timed, key=lambda item: (item[1], item[0]))
    return ChunkChoice(c, prefill, itl_with_chunk_ms(c, cost), False)
