"""What slascaler knows of each inference engine: histogram buckets and flags.

One table per engine (vLLM v1, SGLang, TGI), from each engine's own source: the buckets the
simulator exports (vLLM's exactly), the command-line flags the actuation layer rewrites,
where else the engine reads them (TGI's environment variables, vLLM's and SGLang's `--config`
file), how its container is recognised among several (its launcher and image), and its
defaults when a flag is absent, which depend on the GPU (`engine_default`). No vLLM metric
exposes the max batch or chunk size, so these are read from (and written to) the
Deployment's engine container. The series slascaler reads, per engine and release, are in
`engine_metrics`.

Read by `engine_container`, the actuation layer and the simulator; pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
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
    """Flag names of one engine, where else it reads them, and how its container is known."""

    max_batch_flag: str
    chunk_flag: str
    name: str = ""  # as users know it, for messages
    # Environment variables the engine reads a flag from when it is not on the command line
    # (TGI's launcher declares every flag with clap's `env`): flag → variable.
    flag_env: dict[str, str] = field(default_factory=dict)
    # A flag naming a file of further flags (command line > file > defaults in both engines).
    config_flag: str | None = None
    # The engine's launcher, matched against the container's argv joined by spaces.
    launcher: re.Pattern[str] = re.compile(r"$^")
    # The engine's published images, matched against the container's image.
    image: re.Pattern[str] = re.compile(r"$^")
    launcher_text: str = ""  # the launcher as the message names it


ENGINES: Final[dict[Engine, EngineFlavour]] = {
    Engine.VLLM: EngineFlavour(
        max_batch_flag="--max-num-seqs",
        chunk_flag="--max-num-batched-tokens",
        name="vLLM",
        config_flag="--config",
        # `vllm serve` (vllm/entrypoints/cli), `python -m vllm.entrypoints.openai.api_server`.
        launcher=re.compile(r"(^|[\s/])vllm\s+serve(\s|$)|(^|\s)vllm\.entrypoints\."),
        image=re.compile(r"(^|/)vllm[-/]|vllm-openai"),
        launcher_text="vllm serve / python -m vllm.entrypoints.openai.api_server",
    ),
    Engine.SGLANG: EngineFlavour(
        max_batch_flag="--max-running-requests",
        chunk_flag="--chunked-prefill-size",
        name="SGLang",
        config_flag="--config",
        # `python -m sglang.launch_server`, `sglang serve` (sglang/cli/main.py).
        launcher=re.compile(r"(^|\s)sglang\.launch_server(\s|$)|(^|[\s/])sglang\s+serve(\s|$)"),
        image=re.compile(r"(^|/)sglang[:/@-]|lmsysorg/sglang"),
        launcher_text="python -m sglang.launch_server / sglang serve",
    ),
    Engine.TGI: EngineFlavour(
        max_batch_flag="--max-batch-size",
        chunk_flag="--max-batch-prefill-tokens",
        name="TGI",
        # launcher/src/main.rs: `#[clap(long, env)]` on both (command line wins over env).
        flag_env={
            "--max-batch-size": "MAX_BATCH_SIZE",
            "--max-batch-prefill-tokens": "MAX_BATCH_PREFILL_TOKENS",
        },
        launcher=re.compile(r"(^|[\s/])text-generation-launcher(\s|$)"),
        image=re.compile(r"text-generation-inference"),
        launcher_text="text-generation-launcher",
    ),
}


@dataclass(frozen=True)
class GPU:
    """The GPU the engine's pods run on, as NVIDIA's GPU feature discovery labels the node
    (`nvidia.com/gpu.product`, `nvidia.com/gpu.memory` in MiB, `nvidia.com/gpu.compute.*`)."""

    product: str
    memory_mib: int | None = None
    compute_capability: tuple[int, int] | None = None

    def __str__(self) -> str:
        memory = f" ({self.memory_mib} MiB)" if self.memory_mib is not None else ""
        return f"{self.product}{memory}"


@dataclass(frozen=True)
class EngineDefault:
    """The value an engine takes when its flag is absent, and the rule that gave it."""

    value: int
    rule: str


GIB_IN_MIB = 1024


def _vllm_defaults(gpu: GPU) -> tuple[int, int] | None:
    """(max_num_seqs, max_num_batched_tokens) of `vllm serve` on this GPU.

    vLLM 0.33.0, EngineArgs.get_batch_defaults for UsageContext.OPENAI_API_SERVER: total
    device memory ≥ 160 GiB → 1024 / 16384; ≥ 70 GiB, not an A100 and not a GB10 (compute
    capability 12.1) → 1024 / 8192; otherwise 256 / 2048. (`--performance-mode throughput`
    doubles both, and without chunked prefill the token budget is at least max_model_len:
    both are flags, so a command line with either has the default refused by the caller.)
    """
    if gpu.memory_mib is None:
        return None
    name = gpu.product.lower()
    gb10 = gpu.compute_capability == (12, 1) or "gb10" in name.replace("-", "")
    if gpu.memory_mib >= 160 * GIB_IN_MIB:
        return 1024, 16384
    if gpu.memory_mib >= 70 * GIB_IN_MIB and "a100" not in name and not gb10:
        return 1024, 8192
    return 256, 2048


def _sglang_chunk_default(gpu: GPU) -> int | None:
    """SGLang 0.5.23's chunked_prefill_size by GPU memory (srt/arg_groups/memory_hook.py):
    < 20 GiB 2048, < 60 GiB 4096, < 160 GiB 8192, else 16384 (before any per-model hook)."""
    if gpu.memory_mib is None:
        return None
    for below_gib, size in ((20, 2048), (60, 4096), (160, 8192)):
        if gpu.memory_mib < below_gib * GIB_IN_MIB:
            return size
    return 16384


# Flags whose presence changes the defaults above, so that none can be assumed.
DEFAULT_CHANGING_FLAGS: Final[dict[Engine, tuple[str, ...]]] = {
    Engine.VLLM: ("--performance-mode", "--no-enable-chunked-prefill", "--enable-chunked-prefill"),
    Engine.SGLANG: ("--enable-dp-attention", "--dp-size"),
    Engine.TGI: (),
}


def engine_default(engine: Engine, knob: str, gpu: GPU | None) -> EngineDefault | str:
    """The engine's default for a knob's flag on `gpu`, or why none can be assumed.

    vLLM's defaults depend on the GPU's memory and model; SGLang's chunk size on the GPU's
    memory, and its max running requests on the KV pool it sizes at start (unknowable here);
    TGI sizes both from the model and the hardware (max batch size has no limit by default).
    """
    flavour = ENGINES[engine]
    flag = flavour.max_batch_flag if knob == "maxBatchSize" else flavour.chunk_flag
    if engine is Engine.TGI:
        return (
            f"TGI sizes {flag} from the model and the hardware when it is not set "
            "(launcher/src/main.rs), so slascaler cannot know its value"
        )
    if engine is Engine.SGLANG and knob == "maxBatchSize":
        return (
            f"SGLang sizes {flag} from the KV-cache pool it allocates at start, so slascaler "
            "cannot know its value"
        )
    if gpu is None:
        return f"{flavour.name}'s default for {flag} depends on the GPU, which is not known"
    no_memory = (
        f"the node does not say the memory of its GPU ({gpu.product}; label "
        f"nvidia.com/gpu.memory), which {flavour.name}'s default depends on"
    )
    if engine is Engine.VLLM:
        pair = _vllm_defaults(gpu)
        if pair is None:
            return no_memory
        value = pair[0] if knob == "maxBatchSize" else pair[1]
        return EngineDefault(value, f"vLLM 0.33's default on {gpu}")
    chunk = _sglang_chunk_default(gpu)
    if chunk is None:
        return no_memory
    return EngineDefault(chunk, f"SGLang 0.5.23's default on {gpu}")
