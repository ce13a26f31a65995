"""Replica sizing by a queueing model: how many replicas keep the TTFT tail under its objective.

Model: the fleet behind a least-outstanding-requests router is treated as one GI/G/c queue,
c = ready replicas, each replica serving at an effective rate μ requests/s at its current
batch settings. Waiting time uses

- the **Erlang C** formula (M/M/c) for the probability of waiting, C(c, a) with a = λ/μ;
- the **Allen–Cunneen** approximation for general arrivals and service,
  W_q ≈ C(c, a) / (cμ − λ) · (c_a² + c_s²) / 2, a standard closed form for GI/G/c that is
  monotone in c (so the smallest sufficient c is found by a scan) and exact for M/M/c;
- an exponential tail for the wait of those who wait: P(W > t) = C · exp(−t · C / W_q),
  exact for M/M/c.

Why this model: it is cheap, has no free parameter once μ is known, and captures the
non-linearity that proportional rules (HPA) miss: the wait explodes as utilisation nears 1.
μ is not known a priori (it depends on prompt/output lengths and the engine's knobs), so it
is **calibrated** at every window by inverting W_q(μ) = observed mean queue time at the
current c; the model's bias at the current point then cancels and what it predicts is the
*change* with c. When there is no queueing to calibrate on, the last estimate is kept.

The TTFT tail with c replicas is P(W + S > T) for the service part S (prefill + overhead,
from its histogram), which must be ≤ 1 − percentile/100.

Called by the policy.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from slascaler.model.histogram import Histogram

_BISECTION_STEPS = 200


def erlang_c(servers: int, offered_load: float) -> float:
    """Probability that an arrival waits in M/M/c (servers = c, offered_load = λ/μ).

    1 when the system is unstable (a ≥ c). Computed through the Erlang B recursion, which
    is numerically stable for thousands of servers.
    """
    if servers <= 0:
        return 1.0
    if offered_load <= 0:
        return 0.0
    if offered_load >= servers:
        return 1.0
    erlang_b = 1.0
    for k in range(1, servers + 1):
        erlang_b = offered_load * erlang_b / (k + offered_load * erlang_b)
    rho = offered_load / servers
    return erlang_b / (1.0 - rho * (1.0 - erlang_b))


@dataclass(frozen=True)
class QueueModel:
    """A GI/G/c queue: arrivals λ (1/s), per-server rate μ (1/s), variabilities c_a², c_s²."""

    arrival_rate: float
    service_rate: float
    arrival_scv: float = 1.0
    service_scv: float = 1.0

    def stable(self, servers: int) -> bool:
        return self.arrival_rate < servers * self.service_rate

    def wait_probability(self, servers: int) -> float:
        return erlang_c(servers, self.arrival_rate / self.service_rate)

    def mean_wait_ms(self, servers: int) -> float:
        """Allen–Cunneen mean queue time; +Inf when unstable."""
        if self.arrival_rate <= 0:
            return 0.0
        if not self.stable(servers):
            return math.inf
        mmc = self.wait_probability(servers) / (servers * self.service_rate - self.arrival_rate)
        return 1000.0 * mmc * (self.arrival_scv + self.service_scv) / 2.0

    def wait_exceeds(self, servers: int, t_ms: float) -> float:
        """P(queue time > t_ms) = C · exp(−t (cμ − λ) · 2 / (c_a² + c_s²))."""
        if t_ms < 0:
            return 1.0
        if self.arrival_rate <= 0:
            return 0.0
        if not self.stable(servers):
            return 1.0
        c = self.wait_probability(servers)
        if c <= 0 or t_ms == 0:
            return c
        variability = (self.arrival_scv + self.service_scv) / 2.0
        drain = (servers * self.service_rate - self.arrival_rate) / variability
        return c * math.exp(-t_ms / 1000.0 * drain)

    def ttft_exceeds(
        self, servers: int, objective_ms: float, service: Sequence[tuple[float, float]]
    ) -> float:
        """P(queue time + S > objective) for S given as (value_ms, probability) points."""
        return sum(p * self.wait_exceeds(servers, objective_ms - s) for s, p in service)


def calibrate_service_rate(
    arrival_rate: float,
    servers: int,
    observed_mean_wait_ms: float,
    arrival_scv: float = 1.0,
    service_scv: float = 1.0,
) -> float | None:
    """The per-server rate μ at which the model's mean wait equals the observed one.

    None when there is nothing to calibrate on (no arrivals, no servers, or no measurable
    wait, since every fast-enough μ then fits). Bisection on log μ over (λ/c, 10⁶ λ/c].
    """
    if arrival_rate <= 0 or servers <= 0 or not observed_mean_wait_ms > 0.01:
        return None
    low = arrival_rate / servers * (1.0 + 1e-9)
    high = arrival_rate / servers * 1e6

    def wait(mu: float) -> float:
        return QueueModel(arrival_rate, mu, arrival_scv, service_scv).mean_wait_ms(servers)

    if wait(high) >= observed_mean_wait_ms:
        return high
    for _ in range(_BISECTION_STEPS):
        mid = math.sqrt(low * high)
        if wait(mid) > observed_mean_wait_ms:
            low = mid
        else:
            high = mid
        if high / low < 1 + 1e-9:
            break
    return high


@dataclass(frozen=True)
class Sizing:
    """Replicas needed and the predicted TTFT tail probability with them."""

    replicas: int | None  # None: no count up to the limit is enough
    predicted_exceedance: float  # P(TTFT > objective) at `replicas` (or at the limit)
    floor_exceedance: float  # P(S > objective): what no number of replicas removes


def replicas_needed(
    model: QueueModel,
    objective_ms: float,
    allowed_exceedance: float,
    service: Sequence[tuple[float, float]],
    limit: int,
) -> Sizing:
    """The fewest servers c ≤ limit with P(TTFT > objective) ≤ allowed_exceedance."""
    floor = sum(p for s, p in service if s > objective_ms)
    lowest = max(1, math.floor(model.arrival_rate / model.service_rate) + 1)

    def exceedance(c: int) -> float:
        return model.ttft_exceeds(c, objective_ms, service)

    if lowest > limit or exceedance(limit) > allowed_exceedance:
        at_limit = exceedance(limit) if limit >= 1 else 1.0
        return Sizing(replicas=None, predicted_exceedance=at_limit, floor_exceedance=floor)
    # The exceedance falls as c grows, so the smallest sufficient c is found by bisection.
    low, high = lowest, limit
    while low < high:
        middle = (low + high) // 2
        if exceedance(middle) <= allowed_exceedance:
            high = middle
        else:
            low = middle + 1
    return Sizing(replicas=low, predicted_exceedance=exceedance(low), floor_exceedance=floor)


def service_distribution(
    prefill: Histogram, overhead_ms: float, cells_per_bucket: int = 8
) -> list[tuple[float, float]]:
    """The service part S = prefill + overhead as (value_ms, probability) points.

    Each prefill bucket up to the highest one with observations is cut into equal cells,
    each represented by its midpoint (in-bucket uniformity, as histogram_quantile assumes).
    The points are then scaled so that their mean is the exact mean (`_sum/_count`): vLLM's
    prefill buckets start at 300 ms, and uniformity alone would put a 100 ms prefill at
    150 ms on average and its tail near 300 ms.
    """
    if prefill.total <= 0:
        return [(overhead_ms, 1.0)]
    finite = [b for b in prefill.upper_bounds[:-1]]
    counts = prefill.cumulative_counts[:-1]
    top = next((i for i, c in enumerate(counts) if c >= prefill.total), len(finite) - 1)
    bounds = np.asarray([0.0, *finite[: top + 1]])
    edges = np.unique(
        np.concatenate(
            [np.linspace(lo, hi, cells_per_bucket + 1) for lo, hi in itertools.pairwise(bounds)]
        )
    )
    masses = prefill.cell_masses(edges)
    mids = (edges[:-1] + edges[1:]) / 2.0
    interpolated_mean = float(np.sum(mids * masses))
    if interpolated_mean > 0 and prefill.mean > 0:
        mids = mids * (prefill.mean / interpolated_mean)
    return [(float(m) + overhead_ms, float(p)) for m, p in zip(mids, masses, strict=True) if p > 0]
