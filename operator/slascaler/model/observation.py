"""What a metric source saw of one Deployment over one evaluation window.

An `Observation` is the only input the model and the policy take from the outside world. Every
latency histogram is the increase over the window, summed over the target's pods, in
milliseconds; gauges are window averages summed over pods. A source that could not read
something leaves the field `None` and says why in `problems`, so that the policy can hold
and tell the user, instead of acting on a guess; a source that could not be reached at all
says so in `source_error`.

Built by the metric sources (Prometheus, simulator); read by `model.regime` and `policy`.
Two fields exist only for the simulator's baseline autoscalers, which read signals slascaler
does not use: the KV-cache usage gauge (AIBrix's KPA) and the engines' latest forward passes
(Dynamo's planner); the Prometheus source leaves them at their defaults.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Final

from slascaler.model.histogram import Histogram

RECENT_WINDOW_S: Final = 30.0  # the short window a burst is seen in (`recent_*`)


def recent_window_s(window_s: float) -> float:
    """The short window's length within an evaluation window of `window_s` seconds."""
    return min(RECENT_WINDOW_S, window_s)


@dataclass(frozen=True)
class ForwardPass:
    """One engine's latest scheduler iteration, as Dynamo's workers publish it per forward
    pass (`ForwardPassMetrics`: wall time, the scheduled batch and the waiting queue).
    vLLM's Prometheus metrics have no such record; Dynamo's planner receives it from its own
    workers on the event plane. Token counts are per engine; `wall_time_s` is 0 when idle."""

    wall_time_s: float
    scheduled_prefill_tokens: int  # prompt tokens computed in the iteration (chunks)
    scheduled_prefill_requests: int
    scheduled_decode_kv_tokens: int  # context length of the decodes in the iteration
    scheduled_decode_requests: int
    queued_prefill_tokens: int  # prompt tokens of the waiting (never scheduled) requests
    queued_decode_kv_tokens: int = 0  # context of preempted requests waiting again


@dataclass(frozen=True)
class Observation:
    """One window of one Deployment's engine metrics."""

    observed_at: float  # seconds, on the same clock as the policy's `now`
    window_s: float
    ttft: Histogram | None
    queue: Histogram | None
    prefill: Histogram | None
    itl: Histogram | None = None
    prompt_tokens: Histogram | None = None  # prompt length in tokens (not ms)
    request_rate: float = math.nan  # requests per second that got their first token
    waiting: float = math.nan  # requests waiting for a slot, summed over pods
    running: float = math.nan  # requests running, summed over pods
    reporting_pods: int = 0  # pods that exported engine metrics in the window
    waiting_now: float = math.nan  # requests waiting at the end of the window (instant gauge)
    # KV-cache usage fraction (0–1) at the end of the window, summed over reporting pods:
    # vLLM's `vllm:kv_cache_usage_perc` (`vllm:gpu_cache_usage_perc` before v1). Instant gauge.
    kv_cache_usage_now: float = math.nan
    # Each serving pod's latest forward pass (Dynamo's per-iteration worker stats).
    forward_passes: tuple[ForwardPass, ...] = field(default=())
    # Token work over the window, summed over pods (tokens/s): prompt tokens the engines
    # computed (after the prefix cache: vLLM's prompt_tokens_total − prompt_tokens_cached_total)
    # and tokens they generated (generation_tokens_total).
    prompt_token_rate: float = math.nan
    generation_token_rate: float = math.nan
    # The last `recent_window_s` seconds of the window, so that a burst is seen before a
    # whole window of TTFT shows it: first tokens per second, and the change of the
    # waiting requests per second (positive: a backlog is building).
    recent_window_s: float = 0.0
    recent_request_rate: float = math.nan
    recent_waiting_growth: float = math.nan
    problems: tuple[str, ...] = field(default=())
    # The source could not be asked at all (unreachable, timed out): the reason, for the user.
    source_error: str | None = None
    # Series the engine does not export, approximated from others (said in the status).
    derived: tuple[str, ...] = field(default=())
    # What the source noticed and the user should know, without it stopping a decision
    # (a pod scraped under two addresses, an older engine release's series names read).
    notes: tuple[str, ...] = field(default=())

    def missing_inputs(self, need_itl: bool) -> tuple[str, ...]:
        """Human-readable list of what the decision needs and this observation lacks."""
        missing = list(self.problems)
        if self.problems:
            return tuple(missing)  # the source said what is missing, and why
        required: dict[str, Histogram | None] = {
            "time-to-first-token histogram": self.ttft,
            "queue-time histogram": self.queue,
            "prefill-time histogram": self.prefill,
        }
        if need_itl:
            required["inter-token-latency histogram"] = self.itl
        for name, histogram in required.items():
            if histogram is None:
                missing.append(f"no {name}")
            elif not histogram.is_finite:
                missing.append(f"{name} has NaN or infinite values")
        for name, value in (("waiting requests", self.waiting), ("running requests", self.running)):
            if not math.isfinite(value):
                missing.append(f"no {name} gauge")
        return tuple(dict.fromkeys(missing))
