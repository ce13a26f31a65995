"""A target's token work and short recent window, from its summed counters and gauges.

Matches the simulator's source (`slascaler_sim.fleet.Fleet.observation`): the prompt tokens
the engines computed per second over the window (prompt tokens less those the prefix cache
held), the tokens they generated per second, and over the last `recent_window_s` seconds the
requests served per second and the change of the waiting requests per second (waiting now
minus waiting then, over the recent window). A counter no pod exports leaves its field NaN
(the policy then counts the prompt histogram's mean) and a note says so; where an engine has
no prefix-cache counter (TGI, vLLM releases before the v1 engine's) the prompt tokens all
count as computed, said in `derived`.

Pure (no I/O). Called by `metrics.series`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from slascaler.engine_metrics import EngineMetrics
from slascaler.metrics.targets import CounterReading, GaugeReading


@dataclass(frozen=True)
class Work:
    """The Observation's token-work and recent-window fields, and what to say about them."""

    prompt_token_rate: float = math.nan
    generation_token_rate: float = math.nan
    recent_window_s: float = 0.0
    recent_request_rate: float = math.nan
    recent_waiting_growth: float = math.nan
    derived: tuple[str, ...] = field(default=())
    notes: tuple[str, ...] = field(default=())


def work(
    metrics: EngineMetrics,
    counters: CounterReading | None,
    gauges: GaugeReading,
    window_s: float,
    recent_s: float,
) -> Work:
    """The fields from a target's readings (`counters` None: the counters were not asked)."""
    if counters is None:
        return Work()
    derived: list[str] = []
    notes: list[str] = list(counters.notes)
    increases = counters.increases
    absent = [key for key in metrics.tokens if key not in increases]
    prompt = increases.get("prompt_tokens", math.nan)
    cached = increases.get("cached_tokens", math.nan)
    if "cached_tokens" not in metrics.tokens and math.isfinite(prompt):
        derived.append(
            f"prompt tokens computed ≈ {metrics.tokens['prompt_tokens'].current}: {metrics.name} "
            "exports no prefix-cache counter, so cached prompt tokens count as computed"
        )
        cached = 0.0
    elif math.isnan(cached) and math.isfinite(prompt):
        derived.append(
            f"prompt tokens computed ≈ every prompt token: these pods export no "
            f"{metrics.tokens['cached_tokens'].current}, so cached ones count as computed"
        )
        cached = 0.0
    if "cached_tokens" in absent and math.isfinite(prompt):
        absent.remove("cached_tokens")  # approximated above
    if absent and gauges.pods:
        names = ", ".join(str(metrics.tokens[key].current) for key in absent)
        notes.append(
            f"no {names} series from the pods: their token rates are unknown "
            "(the policy counts the prompt-length histogram's mean and one output token)"
        )
    growth = math.nan
    if math.isfinite(gauges.waiting_now) and math.isfinite(gauges.waiting_then):
        growth = (gauges.waiting_now - gauges.waiting_then) / recent_s
    return Work(
        prompt_token_rate=max(0.0, prompt - cached) / window_s
        if math.isfinite(prompt - cached)
        else math.nan,
        generation_token_rate=increases.get("generated_tokens", math.nan) / window_s,
        recent_window_s=recent_s,
        recent_request_rate=counters.recent_requests / recent_s,
        recent_waiting_growth=growth,
        derived=tuple(derived),
        notes=tuple(notes),
    )
