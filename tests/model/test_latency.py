"""The latency model: the processor-sharing stretch, √c pooling, the fit and its inverse."""

from __future__ import annotations

import math

import pytest

from slascaler.model.latency import (
    MAX_UTILISATION,
    LoadPoint,
    contention,
    fit_latency,
    replicas_for,
)


def test_contention_is_the_ps_stretch_pooled_over_replicas() -> None:
    # u = 0.5 → z = 1; four replicas → 1 / √4.
    assert contention(6000.0, 12000.0, 1) == pytest.approx(1.0)
    assert contention(6000.0, 12000.0, 4) == pytest.approx(0.5)
    assert contention(0.0, 12000.0, 3) == 0.0
    # Capped short of saturation: the stretch stays finite.
    top = MAX_UTILISATION / (1 - MAX_UTILISATION)
    assert contention(1e9, 12000.0, 1) == pytest.approx(top)


def points(floor: float, slope: float) -> list[LoadPoint]:
    loads = [(3000.0, 2), (6000.0, 2), (6000.0, 4), (9000.0, 8), (4000.0, 1)]
    return [
        LoadPoint(
            1000.0, w, floor + slope * contention(w, 12000.0, c), 20.0 + 30.0 * w / 12000.0, c
        )
        for w, c in loads
    ]


def test_windows_at_several_loads_recover_the_curve() -> None:
    model = fit_latency(points(380.0, 100.0), 12000.0, 1000.0, 900.0, 0.3, 0.2)
    assert model is not None
    # The prior pulls the slope towards 0.3 × the mean TTFT (≈ 140 ms) with a fifth of a
    # window's weight: five exact windows spread over loads outweigh it.
    assert model.ttft.slope == pytest.approx(100.0, rel=0.15)
    assert model.ttft.floor == pytest.approx(380.0, rel=0.05)
    assert model.itl is not None and model.itl.slope == pytest.approx(30.0, rel=1e-6)
    assert model.ttft.spread > 0


def test_windows_at_one_load_give_a_cautious_model() -> None:
    one = [LoadPoint(1000.0, 6000.0, 480.0, math.nan, 4)] * 4
    model = fit_latency(one, 12000.0, 1000.0, 900.0, 0.3, 0.2)
    assert model is not None and model.itl is None
    # All at one x: the slope is the prior (0.3 × 480 = 144 ms) and the floor explains the rest.
    assert model.ttft.slope == pytest.approx(144.0)
    assert model.ttft_at(6000.0, 4) == pytest.approx(480.0)


def test_replicas_for_is_the_fewest_that_meet_the_targets() -> None:
    model = fit_latency(points(380.0, 100.0), 12000.0, 1000.0, 900.0, 0.0, 0.0)
    assert model is not None
    # 56 000 tokens/s: 6 replicas → u = 0.78, z = 3.5, 100·3.5/√6 = 143 → 523 ms;
    # 7 replicas → u = 0.667, z = 2.0, 100·2/√7 = 76 → 456 ms ≤ 475 ms.
    assert replicas_for(56000.0, model, 475.0, None, 64) == 7
    assert replicas_for(56000.0, model, 300.0, None, 64) is None  # under the idle floor
    assert replicas_for(0.0, model, 475.0, None, 64) == 1
    # ITL 20 + 30·u ≤ 35 ms → u ≤ 0.5 → 56 000 / 6 000 → 10 replicas.
    assert replicas_for(56000.0, model, 475.0, 35.0, 64) == 10
