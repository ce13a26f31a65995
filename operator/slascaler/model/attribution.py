"""Which TTFT component is the largest, estimated from component histograms.

Prometheus gives a histogram per component (queue time, prefill time) but not their joint
distribution, so the share of requests in which each component is the largest is estimated
under independence. Each histogram is read as Prometheus reads it: uniform inside a bucket.
On the common partition of all bucket bounds every component's density is constant inside
every cell, so

    P(X is the largest) = Σ_cells m_X(cell) · ∫₀¹ Π_{Y≠X} (F_Y(cell start) + m_Y(cell)·t) dt

is a polynomial integral computed exactly (numpy), not sampled. Components known only by a
constant (the residual TTFT − queue − prefill, from the exact means) enter as point masses.

Called by `model.regime`.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from slascaler.model.histogram import FloatArray, Histogram


def _partition(histograms: Mapping[str, Histogram], constants: Mapping[str, float]) -> FloatArray:
    points: set[float] = {0.0}
    for h in histograms.values():
        points.update(b for b in h.upper_bounds[:-1] if b > 0)
    points.update(c for c in constants.values() if c > 0)
    return np.asarray(sorted(points), dtype=np.float64)


def largest_component_shares(
    histograms: Mapping[str, Histogram], constants: Mapping[str, float] | None = None
) -> dict[str, float]:
    """P(component is the largest) for each named component, under independence.

    Histograms with no observation are left out (they carry no information); constants must
    be finite and ≥ 0. Returns an empty mapping when nothing is left.
    """
    constants = dict(constants or {})
    live = {name: h for name, h in histograms.items() if h.total > 0 and h.is_finite}
    if not live and not constants:
        return {}
    edges = _partition(live, constants)
    if edges.size < 2:
        # Every component is exactly 0: split evenly, there is no bottleneck to speak of.
        names = [*live, *constants]
        return dict.fromkeys(names, 1.0 / len(names))
    starts = edges[:-1]
    masses = {name: h.cell_masses(edges) for name, h in live.items()}
    below = {name: np.concatenate(([0.0], np.cumsum(m)[:-1])) for name, m in masses.items()}
    # A constant c is "below" every cell that starts at or after c.
    steps = {name: (starts >= c).astype(np.float64) for name, c in constants.items()}

    shares: dict[str, float] = {}
    for name in live:
        coefficients = np.ones((starts.size, 1))
        for other in live:
            if other == name:
                continue
            a, b = below[other], masses[other]
            grown = np.zeros((starts.size, coefficients.shape[1] + 1))
            grown[:, :-1] += coefficients * a[:, None]
            grown[:, 1:] += coefficients * b[:, None]
            coefficients = grown
        integral = coefficients @ (1.0 / np.arange(1, coefficients.shape[1] + 1))
        for step in steps.values():
            integral = integral * step
        shares[name] = float(np.sum(masses[name] * integral))
    for name, c in constants.items():
        probability = 1.0
        for h in live.values():
            probability *= float(h.cdf(np.asarray([c]))[0])
        for other, c_other in constants.items():
            if other != name and c_other > c:
                probability = 0.0
        shares[name] = probability
    total = sum(shares.values())
    return {name: share / total for name, share in shares.items()} if total > 0 else shares
