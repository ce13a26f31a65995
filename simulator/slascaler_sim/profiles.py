"""Cost profiles: how long one engine step takes for the tokens and sequences in it.

A step's time is a linear-ops term of the tokens it carries (interpolated between calibration
points), plus an attention term proportional to the KV-cache tokens its decodes read, plus,
for the hand-checkable `source-demo` profile, the source material's round numbers.

Where each number comes from:
- `llama3-8b-h100` / `llama3-8b-a100` linear-ops points: the published Llama-3-8B step-time
  profiles restated in DESIGN §4 (H100 ≈ 5.6 ms at 1 token, 6.4 at 128, 12 at 512, 40 at 2048,
  84 at 4096, a ~49k tokens/s plateau; A100 ≈ 9.7, 13.2, 34.6, 146, 274 ms, ~15k tokens/s).
- Attention term: each KV token of Llama-3-8B is 2 (K, V) × 32 layers × 8 KV heads × 128 dims
  × 2 bytes = 128 KiB (the model's public config); reading it at the HBM bandwidth of the card
  (H100 SXM 3.35 TB/s, A100 80 GB 2.04 TB/s, vendor data sheets) costs 0.039 µs and 0.064 µs.
- KV capacity: 80 GB cards, ~16 GB of weights, ~90% memory utilisation → ~55 GB of KV cache
  → ~420k tokens at 128 KiB/token (a rough figure; vLLM reports the real one at start-up).
- `source-demo`: the source material's 0.1 ms per prefill token and 20 ms per decode step.

Read by `sim.engine`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Final

import numpy as np


@dataclass(frozen=True)
class CostProfile:
    """Step time model of one engine replica on one GPU type."""

    name: str
    token_points: tuple[tuple[float, float], ...]  # (tokens in step, linear-ops ms); may be empty
    attention_ms_per_kv_token: float
    kv_capacity_tokens: int
    prefill_ms_per_token: float = 0.0  # source-demo only: added per prefill token
    decode_step_ms: float = 0.0  # source-demo only: added when a step carries a decode
    frontend_ms: float = 0.0  # tokenization and API overhead added to every request's TTFT

    @cached_property
    def _axes(self) -> tuple[np.ndarray, np.ndarray]:
        return (
            np.asarray([x for x, _ in self.token_points], dtype=np.float64),
            np.asarray([y for _, y in self.token_points], dtype=np.float64),
        )

    def linear_ms(self, tokens: float) -> float:
        """Linear-ops time for `tokens` tokens: interpolated, extrapolated by the last slope."""
        points = self.token_points
        if not points or tokens <= 0:
            return 0.0
        if tokens <= points[-1][0]:
            xs, ys = self._axes
            return float(np.interp(tokens, xs, ys))
        (x0, y0), (x1, y1) = points[-2], points[-1]
        return y1 + (y1 - y0) / (x1 - x0) * (tokens - x1)

    def step_ms(self, prefill_tokens: int, decode_seqs: int, kv_tokens_read: int) -> float:
        """Duration of one step with these prefill tokens, decoding sequences and KV reads."""
        time = self.linear_ms(prefill_tokens + decode_seqs)
        time += self.attention_ms_per_kv_token * kv_tokens_read
        time += self.prefill_ms_per_token * prefill_tokens
        if decode_seqs:
            time += self.decode_step_ms
        return time


PROFILES: Final[dict[str, CostProfile]] = {
    "source-demo": CostProfile(
        name="source-demo",
        token_points=(),
        attention_ms_per_kv_token=0.0,
        kv_capacity_tokens=400_000,
        prefill_ms_per_token=0.1,
        decode_step_ms=20.0,
    ),
    "llama3-8b-h100": CostProfile(
        name="llama3-8b-h100",
        token_points=((1, 5.6), (128, 6.4), (512, 12.0), (2048, 40.0), (4096, 84.0)),
        attention_ms_per_kv_token=128 * 1024 / 3.35e12 * 1e3,
        kv_capacity_tokens=420_000,
        frontend_ms=5.0,
    ),
    "llama3-8b-a100": CostProfile(
        name="llama3-8b-a100",
        token_points=((1, 9.7), (128, 13.2), (512, 34.6), (2048, 146.0), (4096, 274.0)),
        attention_ms_per_kv_token=128 * 1024 / 2.04e12 * 1e3,
        kv_capacity_tokens=420_000,
        frontend_ms=5.0,
    ),
}
