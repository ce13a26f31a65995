"""Exact reference values for the source material's TTFT scenarios, computed numerically.

TTFT = Q + T + P + D with Q ~ Exp(mean m), T ~ N(10, 2), P ~ N(100, 20), D ~ N(20, 5), all
independent (DESIGN §1). The density of the total is the numerical convolution (FFT, 0.05 ms
grid) of the exponential density with the normal density of T + P + D; quantiles invert its
CDF. The bottleneck probabilities are P(X is the largest) = ∫ f_X(x) Π_{Y≠X} F_Y(x) dx on
the same grid. Used by the model tests as the ground truth for samples and histograms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

import numpy as np

GRID_STEP_MS = 0.05
GRID_LOW_MS, GRID_HIGH_MS = -100.0, 8000.0
NORMALS = {"tokenization": (10.0, 2.0), "prefill": (100.0, 20.0), "decode": (20.0, 5.0)}

_erf = np.vectorize(math.erf)


def _grid() -> np.ndarray:
    return np.arange(GRID_LOW_MS, GRID_HIGH_MS, GRID_STEP_MS)


def normal_pdf(x: np.ndarray, mean: float, sd: float) -> np.ndarray:
    return np.exp(-0.5 * ((x - mean) / sd) ** 2) / (sd * math.sqrt(2 * math.pi))


def normal_cdf(x: np.ndarray, mean: float, sd: float) -> np.ndarray:
    return 0.5 * (1.0 + _erf((x - mean) / (sd * math.sqrt(2.0))))


def exponential_pdf(x: np.ndarray, mean: float) -> np.ndarray:
    return np.where(x >= 0, np.exp(-np.clip(x, 0, None) / mean) / mean, 0.0)


def exponential_cdf(x: np.ndarray, mean: float) -> np.ndarray:
    return np.where(x >= 0, 1.0 - np.exp(-np.clip(x, 0, None) / mean), 0.0)


@dataclass(frozen=True)
class Exact:
    p50: float
    p95: float
    p99: float
    mean: float
    bottleneck: dict[str, float]


@cache
def exact_scenario(queue_mean_ms: float) -> Exact:
    x = _grid()
    service_mean = sum(m for m, _ in NORMALS.values())
    service_sd = math.sqrt(sum(s * s for _, s in NORMALS.values()))
    # Convolution: the exponential lives on [0, ∞), the normal around its mean; both on x.
    # Cell-averaged exponential density (exact mass per cell), shifted to start at index 0.
    offset = x - GRID_LOW_MS
    f_queue = np.diff(exponential_cdf(np.append(offset, offset[-1] + GRID_STEP_MS), queue_mean_ms))
    f_queue /= GRID_STEP_MS
    f_service = normal_pdf(x, service_mean, service_sd)
    size = 2 * x.size
    density = np.fft.irfft(np.fft.rfft(f_queue, size) * np.fft.rfft(f_service, size), size)
    density = density[: x.size] * GRID_STEP_MS
    # The CDF at the right edge of each cell, so that interpolation is not biased by half a cell.
    cdf = np.cumsum(density) * GRID_STEP_MS
    cdf /= cdf[-1]
    quantiles = [float(np.interp(q, cdf, x + GRID_STEP_MS)) for q in (0.50, 0.95, 0.99)]

    cdfs = {"queue": exponential_cdf(x, queue_mean_ms)}
    pdfs = {"queue": exponential_pdf(x, queue_mean_ms)}
    for name, (mean, sd) in NORMALS.items():
        cdfs[name] = normal_cdf(x, mean, sd)
        pdfs[name] = normal_pdf(x, mean, sd)
    bottleneck = {}
    for name in ("queue", "tokenization", "prefill", "decode"):
        integrand = pdfs[name].copy()
        for other in cdfs:
            if other != name:
                integrand = integrand * cdfs[other]
        bottleneck[name] = float(np.sum(integrand) * GRID_STEP_MS)
    return Exact(
        p50=quantiles[0],
        p95=quantiles[1],
        p99=quantiles[2],
        mean=queue_mean_ms + service_mean,
        bottleneck=bottleneck,
    )


def emg_cdf(x: float, queue_mean_ms: float) -> float:
    """Closed form of the same CDF (exponentially modified Gaussian), as a cross-check."""
    mu = sum(m for m, _ in NORMALS.values())
    sigma = math.sqrt(sum(s * s for _, s in NORMALS.values()))
    lam = 1.0 / queue_mean_ms
    phi = 0.5 * (1 + math.erf((x - mu) / (sigma * math.sqrt(2))))
    u = lam * (x - mu)
    v = lam * sigma
    tail = 0.5 * (1 + math.erf(((x - mu) / sigma - v) / math.sqrt(2)))
    return phi - math.exp(-u + v * v / 2) * tail
