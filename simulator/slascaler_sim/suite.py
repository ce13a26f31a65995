"""The benchmark's scenarios: a workload, a GPU profile, engine flags, an SLA and limits each.

The default suite (`default_scenarios`) covers the regimes slascaler must handle, each an
hour or more of simulated time by default (`minutes` shortens them; shaped loads keep their
shape, traces are cut):

| scenario | what it tests |
|---|---|
| conversation trace ×4 | the Azure conversation trace, 4 rotated copies (≈ 22 req/s) |
| code trace ×8 | the Azure code trace, 8 copies: long prompts under load, partly infeasible |
| step load ×4 | a Poisson load that quadruples a third of the way in |
| diurnal day (4 h) | two compressed day cycles (±80 % around the mean) |
| burst | a 3-minute burst at 6× the base rate in the middle |
| prefill-bound low load | very long prompts, TTFT 250 ms: chunk size helps, replicas cannot |
| capacity-limited | more load than the GPUs can hold |
| long context | heavy-tailed prompts up to 96k tokens (128k context), TTFT objective 3 s |
| traces superposed (3 h) | three hours of the bundled traces mixed in changing proportions |
| shared prefixes | 4× the conversation rate, 32 shared system prompts, prefix-affinity routing |
| Mooncake conversation | Kimi's trace: 12k-token prompts, 37% of blocks repeated, TTFT 5 s |

`trace_scenario` makes a scenario of a user's trace with the SLA, profile and limits given
on the command line. A scenario's `tags` say which targets of the control-quality issue
apply to it. Used by `sim.benchmark` and the demo.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from slascaler.spec import SLASpec, parse_spec
from slascaler_sim.engine import Request
from slascaler_sim.fleet import EngineSettings
from slascaler_sim.prefixes import SharedPrefixes, assign_shared_prefixes
from slascaler_sim.profiles import PROFILES, CostProfile
from slascaler_sim.workload import (
    Trace,
    TraceRow,
    diurnal_rate,
    load_trace,
    modulated_poisson,
    read_trace,
    replay,
    step_rate,
)

DEFAULT_SETTINGS = EngineSettings(max_num_seqs=256, max_num_batched_tokens=2048)
DEFAULT_KNOBS: dict[str, dict[str, int]] = {
    "maxBatchSize": {"min": 16, "max": 512},
    "chunkSize": {"min": 512, "max": 8192},
}
Workload = Callable[[int], list[Request]]  # seed → requests, sorted by arrival


@dataclass(frozen=True)
class Scenario:
    name: str
    workload: Workload
    duration_s: float
    profile: CostProfile = PROFILES["llama3-8b-a100"]
    settings: EngineSettings = DEFAULT_SETTINGS
    threshold_ms: float = 500.0
    itl_ms: float | None = 100.0
    percentile: float = 95.0
    max_replicas: int = 32
    initial_replicas: int = 2
    startup_s: float = 60.0
    gpu_limit: int | None = None
    router: str = "least-outstanding"
    knobs: dict[str, dict[str, int]] = field(default_factory=lambda: dict(DEFAULT_KNOBS))
    seeded: bool = True  # False: the workload is the same whatever the seed
    tags: frozenset[str] = frozenset()

    def sla_spec(self) -> dict[str, Any]:
        """The InferenceSLA's spec for this scenario, as a user would write it."""
        objectives: dict[str, Any] = {
            "ttft": {"percentile": self.percentile, "thresholdMs": self.threshold_ms}
        }
        if self.itl_ms is not None:
            objectives["itl"] = {"percentile": self.percentile, "thresholdMs": self.itl_ms}
        return {
            "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llm"},
            "objectives": objectives,
            "replicas": {"min": 1, "max": self.max_replicas},
            "window": "1m",
            "knobs": self.knobs,
            "behavior": {"scaleDownStabilization": "3m", "knobCooldown": "5m"},
        }

    def spec(self) -> SLASpec:
        return parse_spec(self.sla_spec())


def trace_scenario(
    trace: Trace | Sequence[TraceRow],
    name: str,
    copies: int = 1,
    minutes: float | None = None,
    speedup: float = 1.0,
    **overrides: Any,
) -> Scenario:
    """A scenario replaying a trace (cut at `minutes`, default its whole span)."""
    rows = trace.rows if isinstance(trace, Trace) else list(trace)
    span_s = (rows[-1].at - rows[0].at) / speedup if rows else 0.0
    duration = span_s if minutes is None else min(span_s, minutes * 60)
    block_tokens = trace.hash_block_tokens if isinstance(trace, Trace) else 512

    def workload(seed: int) -> list[Request]:
        requests = replay(rows, speedup, copies, seed, block_tokens)
        return [r for r in requests if r.arrival <= duration]

    return Scenario(name, workload, max(duration, 1.0), seeded=copies > 1, **overrides)


def heavy_tailed_prompts(
    count: int, median: int, sigma: float, limit: int, output: int, seed: int
) -> list[TraceRow]:
    """Prompt lengths from a log-normal (median, σ) cut at `limit`, outputs around `output`."""
    rng = np.random.default_rng(seed)
    prompts = np.minimum(rng.lognormal(math.log(median), sigma, count), limit).astype(int)
    outputs = np.maximum(1, rng.poisson(output, count))
    return [TraceRow(0.0, int(max(1, p)), int(o)) for p, o in zip(prompts, outputs, strict=True)]


def _superposed_hours(
    conversation: Sequence[TraceRow], code: Sequence[TraceRow], hours: Sequence[tuple[int, int]]
) -> Workload:
    """Hour k replays `hours[k]` = (conversation copies, code copies), rotated per seed."""

    def workload(seed: int) -> list[Request]:
        arrivals: list[tuple[float, int, int]] = []
        for hour, (conv, cod) in enumerate(hours):
            for rows, copies, salt in ((conversation, conv, 0), (code, cod, 1)):
                if copies == 0:
                    continue
                for r in replay(rows, copies=copies, seed=seed * 100 + hour * 10 + salt):
                    if r.arrival < 3600:
                        arrivals.append((hour * 3600 + r.arrival, r.prompt, r.output))
        arrivals.sort()
        return [Request(i, at, p, o) for i, (at, p, o) in enumerate(arrivals)]

    return workload


def default_scenarios(minutes: float | None = None) -> list[Scenario]:
    """The suite; with `minutes`, every scenario lasts at most that long."""
    conversation, code = load_trace("conversation"), load_trace("code")
    base = len(conversation) / conversation[-1].at  # mean requests/s of the trace

    def length(default_minutes: float) -> float:
        return 60.0 * (default_minutes if minutes is None else min(minutes, default_minutes))

    def poisson(
        rate: Callable[[float], float], peak: float, rows: Sequence[TraceRow], duration: float
    ) -> Workload:
        return lambda seed: modulated_poisson(rate, peak, duration, rows, seed)

    hour, day = length(60), length(240)
    very_long_prompts = [r for r in code if r.prompt >= 6000]
    long_context = heavy_tailed_prompts(5000, 6000, 1.1, 96_000, 250, seed=7)
    three_hours = length(180)
    superposed = _superposed_hours(conversation, code, [(3, 1), (5, 2), (2, 4)])
    h100 = PROFILES["llama3-8b-h100"]
    return [
        trace_scenario(conversation, "conversation trace ×4", 4, hour / 60, tags=frozenset()),
        trace_scenario(
            code, "code trace ×8", 8, hour / 60, tags=frozenset({"partially-infeasible"})
        ),
        Scenario(
            "step load ×4",
            poisson(step_rate(base, 4 * base, hour / 3), 4 * base, conversation, hour),
            hour,
        ),
        Scenario(
            "diurnal day (4 h)",
            poisson(diurnal_rate(2.5 * base, 0.8, day / 2), 4.5 * base, conversation, day),
            day,
        ),
        Scenario(
            "burst",
            poisson(
                step_rate(base, 6 * base, hour / 2, hour / 2 + 180), 6 * base, conversation, hour
            ),
            hour,
        ),
        Scenario(
            "prefill-bound low load",
            poisson(lambda t: 0.3, 0.3, very_long_prompts, hour),
            hour,
            profile=h100,
            settings=EngineSettings(256, 256),
            # On a bucket bound of vLLM's TTFT histogram (…, 0.1, 0.25, 0.5 s): an objective
            # inside the 0.1–0.25 s bucket cannot be resolved from the engine's metrics.
            threshold_ms=250.0,
            itl_ms=200.0,
            max_replicas=8,
            knobs={"maxBatchSize": {"min": 16, "max": 512}, "chunkSize": {"min": 256, "max": 8192}},
            tags=frozenset({"prefill-bound"}),
        ),
        Scenario(
            "capacity-limited",
            poisson(lambda t: 3 * base, 3 * base, conversation, hour),
            hour,
            max_replicas=6,
            gpu_limit=6,
            tags=frozenset({"capacity"}),
        ),
        Scenario(
            "long context",
            poisson(lambda t: 0.6, 0.6, long_context, hour),
            hour,
            profile=PROFILES["llama3.1-8b-h100"],  # Llama-3-8B's 8k context refuses these
            threshold_ms=3000.0,
            itl_ms=100.0,
            max_replicas=16,
            knobs={
                "maxBatchSize": {"min": 16, "max": 512},
                "chunkSize": {"min": 512, "max": 16384},
            },
            tags=frozenset({"long-context", "prefill-bound"}),
        ),
        Scenario("traces superposed (3 h)", superposed, three_hours),
        Scenario(
            "shared prefixes",
            lambda seed: assign_shared_prefixes(
                modulated_poisson(lambda t: 4 * base, 4 * base, hour, conversation, seed),
                SharedPrefixes(),
                seed,
            ),
            hour,
            router="prefix-affinity",
            tags=frozenset({"shared-prefix"}),
        ),
        # Added after the policy's mechanisms were shaped on the scenarios above: the model
        # trust region (`Tunables.model_trust`) came from this trace's first minutes.
        trace_scenario(
            read_trace("mooncake"),
            "Mooncake conversation",
            minutes=hour / 60,
            profile=PROFILES["llama3.1-8b-h100"],  # prompts past 100k tokens
            threshold_ms=5000.0,
            itl_ms=100.0,
        ),
    ]
