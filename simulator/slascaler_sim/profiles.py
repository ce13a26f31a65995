"""Cost profiles: how long one engine step takes for the tokens and sequences in it, and the
context limit of the model served.

A step's time is a linear-ops term of the tokens it carries (interpolated between calibration
points), plus the attention of its prefill chunks (proportional to the query-key pairs they
compute), plus an attention term proportional to the KV-cache tokens its decodes read, plus,
for the hand-checkable `source-demo` profile, the source material's round numbers.

Where each number comes from:
- Model: Llama-3-8B's public config (`config.json` of meta-llama/Meta-Llama-3-8B-Instruct):
  32 layers, hidden size 4096, 32 query heads and 8 KV heads of 128 dims,
  `max_position_embeddings` 8192. Llama-3.1-8B(-Instruct) has the same shapes and 131072.
- `max_model_len`: vLLM's default is the model's `max_position_embeddings` (when the KV cache
  holds that many tokens, as ~420k tokens do here): 8192 for the `llama3-8b-*` profiles,
  131072 for the `llama3.1-8b-*` ones (same costs, for long-context loads). `source-demo`
  keeps the simulator's former 32768.
- Linear-ops points of `llama3-8b-h100` / `llama3-8b-a100`: the published Llama-3-8B
  step-time profiles restated in DESIGN §4 (H100 ≈ 5.6 ms at 1 token, 6.4 at 128, 12 at 512,
  40 at 2048, 84 at 4096, a ~49k tokens/s plateau; A100 ≈ 9.7, 13.2, 34.6, 146, 274 ms,
  ~15k tokens/s). Cross-check: the bf16 GEMMs of one Llama-3-8B forward pass (QKV, O,
  gate-up, down; 32 layers) summed from NVIDIA AIConfigurator's measured GEMM tables
  (`aiconfigurator-core` 0.12.0, `systems/data/{h100_sxm,a100_sxm}/gemm/vllm/`) give H100
  5.4, 5.9, 9.2, 34.6, 71.9 ms and A100 10.1, 12.8, 31.4, 113, 223 ms at the same token
  counts: the profiles lie between 4% below and 30% above the GEMMs alone, the rest being
  norms, activations, rotary embedding and sampling.
- Prefill attention (`attention_ms_per_token_pair`): a chunk of t new tokens after k tokens
  already in the KV cache (earlier chunks, cached prefix blocks) computes t·(k + t/2) causal
  query-key pairs, each 4·32·4096 FLOPs (QKᵀ and PV, 32 layers, 32 heads × 128 dims; FLOPs
  counted as FlashAttention's papers count them). The time per pair is calibrated on
  AIConfigurator's measured vLLM context-attention tables for this exact shape (32/8 heads,
  head dim 128, bf16 KV, batch 1): one 8192-token causal prefill takes 0.912 ms per layer on
  H100 SXM (vLLM 0.24.0, FlashAttention 3; `h100_sxm/attention/vllm/0.24.0/`) and 3.120 ms
  per layer on A100 SXM 80 GB (vLLM 0.14.0, FlashAttention 2; `a100_sxm/attention/vllm/
  0.14.0/`), i.e. 29.2 ms and 99.8 ms over 32 layers (≈ 603 and 176 TFLOP/s achieved, 61%
  and 56% of the cards' 989 and 312 bf16 TFLOP/s). So one 8192-token prefill in one step
  costs 172 + 29.2 ≈ 201 ms on H100 and 530 + 99.8 ≈ 630 ms on A100 (linear ops
  extrapolated past 4096 tokens by the last slope; AIConfigurator's GEMMs and attention
  alone sum to 181 and 552 ms). The per-pair model is exact at 8k; at 2k
  it is ~1 ms (H100) / ~2.5 ms (A100) below the same tables, where kernel overheads weigh
  more (negligible beside the 40 / 146 ms of linear ops there).
- Decode attention: each KV token of Llama-3-8B is 2 (K, V) × 32 layers × 8 KV heads × 128
  dims × 2 bytes = 128 KiB; reading it at the HBM bandwidth of the card (H100 SXM 3.35 TB/s,
  A100 80 GB 2.04 TB/s, vendor data sheets) costs 0.039 µs and 0.064 µs. (AIConfigurator's
  measured decode-attention tables give 0.042–0.056 µs on H100 and 0.083–0.094 µs on A100
  for batches of 16–64 at 2k–8k tokens: the bandwidth figure is a lower bound.)
- KV capacity: 80 GB cards, ~16 GB of weights, ~90% memory utilisation → ~55 GB of KV cache
  → ~420k tokens at 128 KiB/token (a rough figure; vLLM reports the real one at start-up).
- `source-demo`: the source material's 0.1 ms per prefill token and 20 ms per decode step.
- No H200 profile yet: it is to come from forward passes measured on an H200, and the task
  that added prefill attention had no GPU to measure on. (AIConfigurator's H200 table gives
  0.938 ms per layer for the same 8k attention, `h200_sxm/attention/vllm/0.24.0/`.)

Read by `sim.engine` (step times, context limit) and `sim.fleet` (metric buckets).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Final

LAYERS: Final = 32
HIDDEN: Final = 4096
ATTENTION_FLOPS_PER_PAIR: Final = 4 * LAYERS * HIDDEN  # QKᵀ and PV, every layer and head


def _ms_per_pair(layer_ms_at_8k: float) -> float:
    """Calibrate the time of one causal query-key pair (all layers) on a measured 8192-token
    prefill's attention time per layer."""
    return LAYERS * layer_ms_at_8k / (8192 * 8192 / 2)


@dataclass(frozen=True)
class CostProfile:
    """Step time model of one engine replica on one GPU type, and its model's context limit."""

    name: str
    token_points: tuple[tuple[float, float], ...]  # (tokens in step, linear-ops ms); may be empty
    attention_ms_per_kv_token: float
    kv_capacity_tokens: int
    prefill_ms_per_token: float = 0.0  # source-demo only: added per prefill token
    decode_step_ms: float = 0.0  # source-demo only: added when a step carries a decode
    frontend_ms: float = 0.0  # tokenization and API overhead added to every request's TTFT
    max_model_len: int = 32768  # vLLM's --max-model-len: the context limit
    attention_ms_per_token_pair: float = 0.0  # prefill attention per causal query-key pair

    @cached_property
    def _axes(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        return (
            tuple(float(x) for x, _ in self.token_points),
            tuple(float(y) for _, y in self.token_points),
        )

    def linear_ms(self, tokens: float) -> float:
        """Linear-ops time for `tokens` tokens: interpolated, extrapolated by the last slope."""
        points = self.token_points
        if not points or tokens <= 0:
            return 0.0
        if tokens <= points[-1][0]:
            # numpy.interp's arithmetic, without its per-call array overhead (once per step)
            xs, ys = self._axes
            j = bisect.bisect_right(xs, tokens) - 1
            if j < 0:
                return ys[0]
            if j >= len(xs) - 1:
                return ys[-1]
            slope = (ys[j + 1] - ys[j]) / (xs[j + 1] - xs[j])
            return slope * (tokens - xs[j]) + ys[j]
        (x0, y0), (x1, y1) = points[-2], points[-1]
        return y1 + (y1 - y0) / (x1 - x0) * (tokens - x1)

    def step_ms(
        self,
        prefill_tokens: int,
        decode_seqs: int,
        kv_tokens_read: int,
        prefill_pairs: float = 0.0,
    ) -> float:
        """Duration of one step with these prefill tokens, decoding sequences, KV reads and
        prefill attention pairs (Σ over chunks of t·(k + t/2): see `prefill_pairs`)."""
        time = self.linear_ms(prefill_tokens + decode_seqs)
        time += self.attention_ms_per_kv_token * kv_tokens_read
        time += self.attention_ms_per_token_pair * prefill_pairs
        time += self.prefill_ms_per_token * prefill_tokens
        if decode_seqs:
            time += self.decode_step_ms
        return time


def prefill_pairs(tokens: int, context: int) -> float:
    """Causal query-key pairs of a prefill chunk of `tokens` new tokens after `context`
    tokens already in the KV cache: each new token attends to the context and to the new
    tokens before it (t·k + t²/2, the count FlashAttention's FLOP formula uses)."""
    return tokens * (context + tokens / 2)


_LLAMA3_8B_H100: Final = CostProfile(
    name="llama3-8b-h100",
    token_points=((1, 5.6), (128, 6.4), (512, 12.0), (2048, 40.0), (4096, 84.0)),
    attention_ms_per_kv_token=128 * 1024 / 3.35e12 * 1e3,
    kv_capacity_tokens=420_000,
    frontend_ms=5.0,
    max_model_len=8192,
    attention_ms_per_token_pair=_ms_per_pair(0.912),
)
_LLAMA3_8B_A100: Final = CostProfile(
    name="llama3-8b-a100",
    token_points=((1, 9.7), (128, 13.2), (512, 34.6), (2048, 146.0), (4096, 274.0)),
    attention_ms_per_kv_token=128 * 1024 / 2.04e12 * 1e3,
    kv_capacity_tokens=420_000,
    frontend_ms=5.0,
    max_model_len=8192,
    attention_ms_per_token_pair=_ms_per_pair(3.120),
)

PROFILES: Final[dict[str, CostProfile]] = {
    "source-demo": CostProfile(
        name="source-demo",
        token_points=(),
        attention_ms_per_kv_token=0.0,
        kv_capacity_tokens=400_000,
        prefill_ms_per_token=0.1,
        decode_step_ms=20.0,
    ),
    "llama3-8b-h100": _LLAMA3_8B_H100,
    "llama3-8b-a100": _LLAMA3_8B_A100,
    "llama3.1-8b-h100": replace(_LLAMA3_8B_H100, name="llama3.1-8b-h100", max_model_len=131072),
    "llama3.1-8b-a100": replace(_LLAMA3_8B_A100, name="llama3.1-8b-a100", max_model_len=131072),
}
