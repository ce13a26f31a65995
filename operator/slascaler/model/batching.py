"""The latency-vs-batch curve: fitted from what was observed, inverted for the largest batch.

Decode is memory-bound, so each engine step (and hence the inter-token latency) grows about
linearly with the number of sequences batched together: latency ≈ a + b · batch. The source
material's simplified example is a = 100 ms, b = 15 ms; under a 500 ms objective the largest
batch is floor((500 − 100) / 15) = 26. (The source's prose says "below approximately 32";
its own formula gives 580 ms at 32, so 26 is the figure its model supports.)

`fit_line` is ordinary least squares (numpy.linalg.lstsq) over observed (batch, latency)
points; `largest_batch_within` inverts the fit. Called by the policy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

MIN_DISTINCT_POINTS = 2


@dataclass(frozen=True)
class LinearFit:
    """y ≈ intercept + slope · x, with the number of points and R² of the fit."""

    intercept: float
    slope: float
    points: int
    r_squared: float

    def predict(self, x: float) -> float:
        return self.intercept + self.slope * x


def fit_line(points: Sequence[tuple[float, float]]) -> LinearFit | None:
    """Least-squares line through (x, y) points; None without two distinct finite x values."""
    finite = [(x, y) for x, y in points if math.isfinite(x) and math.isfinite(y)]
    xs = np.asarray([x for x, _ in finite], dtype=np.float64)
    ys = np.asarray([y for _, y in finite], dtype=np.float64)
    if np.unique(xs).size < MIN_DISTINCT_POINTS:
        return None
    design = np.column_stack([np.ones_like(xs), xs])
    (intercept, slope), *_ = np.linalg.lstsq(design, ys, rcond=None)
    residual = ys - (intercept + slope * xs)
    spread = float(np.sum((ys - ys.mean()) ** 2))
    r_squared = 1.0 - float(np.sum(residual**2)) / spread if spread > 0 else 1.0
    return LinearFit(float(intercept), float(slope), len(finite), r_squared)


def largest_batch_within(fit: LinearFit, latency_limit_ms: float) -> int | None:
    """The largest integer batch whose predicted latency is ≤ the limit.

    None when latency does not grow with batch (slope ≤ 0: the fit says nothing about a
    limit); 0 when even an empty batch is predicted over the limit.
    """
    if fit.slope <= 0:
        return None
    return max(0, math.floor((latency_limit_ms - fit.intercept) / fit.slope + 1e-9))
