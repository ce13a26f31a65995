"""Long prompts that share a replica's steps, and how many replicas keep that rare.

With chunked prefill, two prompts prefilling on one replica share each step's token budget:
each takes about twice as long while they overlap. Behind a least-outstanding router a new
request lands on a replica that is prefilling only when every replica is: with the fleet's
prompt work keeping `prefill_load` replicas' worth of full steps busy, each of c replicas is
prefilling a share ρ = prefill_load / c of the time, and a request collides with probability
≈ ρ^c. Such a collision costs the objective a request only where the request's own prefill,
alone, already takes more than half the TTFT objective (`exposed`); a request whose prefill
alone misses the objective (`intrinsic`) misses it at any count.

The latency model (`model.latency`) sees none of this: at a utilisation of a few per cent
its contention term z(u)/√c is near zero, while one collision in a window of 18 requests is
enough to fail its p95 (the simulator's prefill-bound scenario, seed 3, chunk size 8192: one
replica misses 9 of 59 windows, two replicas miss none).

A window of n requests meets the percentile q while at most a = n − ⌈q·n⌉ of them exceed
the objective. The requests over it are counted as a Poisson number with mean
n·(intrinsic + exposed·ρ^c), and the fleet needs the fewest replicas c for which more than a
are over with probability at most `risk`. Where even c → ∞ leaves that probability above
`risk` the prompts' own prefill is the cause (a chunk size, not replicas, can help):
`replicas` is then None.

The step cost behind "alone" comes from the window's own means (`model.chunking`), which a
collision inflates: the estimate errs towards more exposed requests, the cautious side.

Pure; called by `policy.sizing`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from slascaler.model.chunking import StepCost, estimate_step_cost, prefill_time_ms
from slascaler.model.histogram import Histogram
from slascaler.model.observation import Observation

_LONGEST_PROMPT = 1 << 24  # tokens: the search for a prefill time's prompt stops here


@dataclass(frozen=True)
class PromptCollisions:
    """One window's exposure to prompts colliding, and the replicas that keep it rare."""

    requests: float  # requests in a window of the objective
    tolerated: int  # requests over the objective that the percentile tolerates
    intrinsic: float  # share of requests whose prefill alone misses the objective
    exposed: float  # share whose prefill alone takes over half of it (and meets it)
    prefill_load: float  # replicas' worth of full prefill steps the prompts keep busy
    replicas: int | None  # fewest replicas within `risk`; None: replicas cannot help

    def window_risk(self, replicas: int) -> float:
        """Probability that a window at `replicas` has more requests over the objective than
        the percentile tolerates."""
        busy = min(1.0, self.prefill_load / max(1, replicas))
        mean = self.requests * (self.intrinsic + self.exposed * busy**replicas)
        return _poisson_tail(mean, self.tolerated)


def _poisson_tail(mean: float, tolerated: int) -> float:
    """P(N > tolerated) for N ~ Poisson(mean)."""
    if mean <= 0:
        return 0.0
    term = math.exp(-mean)
    below = term
    for k in range(1, tolerated + 1):
        term *= mean / k
        below += term
    return max(0.0, 1.0 - below)


def _prompt_taking(
    budget_ms: float, chunk_size: int, decode_tokens: float, cost: StepCost
) -> float:
    """The longest prompt (tokens) whose prefill alone takes at most `budget_ms`."""
    if prefill_time_ms(1.0, chunk_size, decode_tokens, cost) > budget_ms:
        return 0.0
    low, high = 1.0, float(_LONGEST_PROMPT)
    if prefill_time_ms(high, chunk_size, decode_tokens, cost) <= budget_ms:
        return high
    while high - low > 1.0:
        middle = (low + high) / 2
        if prefill_time_ms(middle, chunk_size, decode_tokens, cost) <= budget_ms:
            low = middle
        else:
            high = middle
    return low


def _share_longer(prompts: Histogram, tokens: float) -> float:
    """The share of prompts longer than `tokens`.

    vLLM's prompt buckets are coarse (1-2-5 steps, and none above the model's context
    length: for an 8k model every prompt over 5000 tokens is in the +Inf bucket), and long
    prompts often sit in one or two of them. Within the bucket that holds `tokens`, its
    prompts are taken as spread evenly with the mean `_sum` leaves them once every other
    bucket is counted at its midpoint; where another bucket is unbounded that mean is
    unknown, and the histogram's own linear interpolation stands.
    """
    bounds, total = prompts.upper_bounds, prompts.total
    if total <= 0:
        return 0.0
    cumulative = np.maximum.accumulate(np.asarray(prompts.cumulative_counts, dtype=np.float64))
    masses = np.diff(np.concatenate(([0.0], cumulative)))
    lows = (0.0, *bounds[:-1])
    j = next(i for i, high in enumerate(bounds) if tokens <= high)
    above = float(masses[j + 1 :].sum())
    low, high, mass = lows[j], bounds[j], float(masses[j])
    if mass <= 0:
        return above / total
    others = [
        (float(masses[i]), (lows[i] + bounds[i]) / 2)
        for i in range(len(bounds))
        if i != j and masses[i] > 0
    ]
    if not all(math.isfinite(middle) for _, middle in others):
        return float(1.0 - prompts.cdf(np.asarray([tokens], dtype=np.float64))[0])
    rest = sum(count * middle for count, middle in others)
    mean = min(max((prompts.sum - rest) / mass, low), high)
    if math.isinf(high) or mean <= (low + high) / 2:
        start, end = low, 2 * mean - low
    else:
        start, end = 2 * mean - high, high
    inside = 0.0 if end <= start else min(1.0, max(0.0, (end - tokens) / (end - start)))
    return (above + mass * inside) / total


def prompt_collisions(
    observation: Observation,
    mean_prefill_ms: float,
    overhead_ms: float,
    chunk_size: int,
    objective_ms: float,
    quantile: float,
    risk: float,
    limit: int,
    capacity: float | None = None,
) -> PromptCollisions | None:
    """The window's collisions (see the module docstring); None where the window lacks what
    it takes: prompt lengths, ITL, prompt token rate, or a consistent step cost."""
    prompts, itl = observation.prompt_tokens, observation.itl
    if prompts is None or prompts.total <= 0 or itl is None or itl.total <= 0:
        return None
    rate, prompt_rate = observation.request_rate, observation.prompt_token_rate
    if not (rate > 0 and prompt_rate >= 0 and observation.window_s > 0):
        return None
    decode_tokens = observation.running / max(1, observation.reporting_pods)
    cost = estimate_step_cost(mean_prefill_ms, prompts.mean, chunk_size, decode_tokens, itl.mean)
    if cost is None:
        return None
    if capacity is not None and capacity > 0:
        # Contention stretches the window's prefill and so its per-token cost: no step is
        # taken slower than the full-step throughput the replica has shown (`capacity`).
        per_token = (chunk_size / capacity * 1000.0 - cost.fixed_ms) / chunk_size
        if 0 < per_token < cost.per_token_ms:
            cost = StepCost(cost.fixed_ms, per_token)
    full_step_prompt_tokens = max(1.0, chunk_size - decode_tokens)
    prefill_throughput = full_step_prompt_tokens / cost.step_ms(chunk_size) * 1000.0
    budget = objective_ms - overhead_ms
    intrinsic = _share_longer(prompts, _prompt_taking(budget, chunk_size, decode_tokens, cost))
    over_half = _share_longer(prompts, _prompt_taking(budget / 2, chunk_size, decode_tokens, cost))
    requests = rate * observation.window_s
    counted = max(1, round(requests))
    tolerated = counted - math.ceil(quantile * counted - 1e-9)
    found = PromptCollisions(
        requests, tolerated, intrinsic, max(0.0, over_half - intrinsic),
        prompt_rate / prefill_throughput, None,
    )  # fmt: skip
    return replace(found, replicas=fewest_replicas(found, risk, limit))


def fewest_replicas(found: PromptCollisions, risk: float, limit: int) -> int | None:
    """The fewest replicas (≤ `limit`) whose windows fail from collisions with probability
    at most `risk`; None where the prompts' own prefill already fails more (replicas cannot
    help) or no count up to the limit is enough."""
    if _poisson_tail(found.requests * found.intrinsic, found.tolerated) > risk:
        return None
    return next((c for c in range(1, limit + 1) if found.window_risk(c) <= risk), None)
