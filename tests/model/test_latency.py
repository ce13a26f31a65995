"""The latency model: the processor-sharing stretch, √c pooling, the fit and its inverse."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from slascaler.model.latency import (
    MAX_UTILISATION,
    ItlEvidence,
    LoadPoint,
    contention,
    fit_latency,
    itl_evidence,
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


def test_the_mix_of_the_windows_does_not_pass_for_contention() -> None:
    """Busier windows are also windows of longer requests (conversation trace: the two
    correlate 0.67 over a run), whose own prefill raises the tail at any replica count. The
    fit separates the floor's rise with the tokens per request from the contention's."""
    floor, slope, per_token = 380.0, 100.0, 0.25
    windows = [(3000.0, 800.0), (4000.0, 900.0), (5000.0, 1100.0), (6000.0, 1000.0),
               (7000.0, 1300.0), (8000.0, 1200.0), (9000.0, 1500.0)]  # fmt: skip
    mean_mix = sum(t for _, t in windows) / len(windows)

    def ttft(work: float, mix: float) -> float:
        return floor + per_token * (mix - mean_mix) + slope * contention(work, 12000.0, 4)

    with_mix = [LoadPoint(1000.0, w, ttft(w, t), math.nan, 4, t) for w, t in windows]
    model = fit_latency(with_mix, 12000.0, 1000.0, 900.0, 0.0, 0.0)
    assert model is not None
    assert model.ttft.slope == pytest.approx(slope, rel=1e-6)
    assert model.ttft.floor == pytest.approx(floor, rel=1e-6)
    # The windows' mix unknown (a memory of an older operator): the slope takes it all.
    without = [LoadPoint(p.at, p.work, p.ttft_ms, p.itl_ms, p.replicas) for p in with_mix]
    blind = fit_latency(without, 12000.0, 1000.0, 900.0, 0.0, 0.0)
    assert blind is not None and blind.ttft.slope > 1.3 * slope
    # Sized at a window's own mix: longer requests, a higher floor, more replicas for it.
    heavier = model.at_mix(mean_mix + 200.0)
    assert heavier.ttft.floor == pytest.approx(floor + per_token * 200.0, rel=1e-6)
    assert heavier.ttft_at(6000.0, 4) == pytest.approx(ttft(6000.0, mean_mix + 200.0))
    assert blind.at_mix(mean_mix + 200.0) == blind  # no mix term fitted: nothing to move
    light, heavy = (replicas_for(40000.0, m, 475.0, None, 64) for m in (model, heavier))
    assert light is not None and heavy is not None and heavy > light


def test_a_mix_that_lowers_the_ttft_is_not_believed() -> None:
    # Longer requests cannot make the tail faster: such a fit is noise, the plain one stands.
    windows = [(3000.0, 1500.0), (5000.0, 1200.0), (7000.0, 1000.0), (9000.0, 800.0)]
    falling = [
        LoadPoint(1000.0, w, 380.0 + 100.0 * contention(w, 12000.0, 4) - 0.2 * t, math.nan, 4, t)
        for w, t in windows
    ]
    plain = [LoadPoint(p.at, p.work, p.ttft_ms, p.itl_ms, p.replicas) for p in falling]
    model = fit_latency(falling, 12000.0, 1000.0, 900.0, 0.0, 0.0)
    assert model == fit_latency(plain, 12000.0, 1000.0, 900.0, 0.0, 0.0)


def test_a_rise_with_the_mix_within_the_scatter_is_not_believed() -> None:
    """The e2e load step: windows at 4 req/s over 1-4 replicas, TTFT 100 ± 5 ms, mixes within
    ±2% of 1.1k tokens, and two windows whose requests waited for batch slots (2.9 s) that
    happened to bring a few tokens more. Fitted with the mix, m was 17.5 ms per token and the
    floor moved from 37 to 720 ms between a window's mix and the next."""
    rng = np.random.default_rng(7)
    counts = [1] * 8 + [2] * 8 + [3] * 8 + [4] * 6 + [3] * 4 + [2] * 3
    windows = [
        LoadPoint(1000.0 + 5 * i, 4400.0 / n, 100.0 + rng.normal(0.0, 5.0), math.nan, n,
                  1100.0 + rng.uniform(-20.0, 20.0))
        for i, n in enumerate(counts)
    ]  # fmt: skip
    waited = [LoadPoint(1100.0 + 5 * i, 3925.0, 2900.0 + 50 * i, math.nan, 4, 1112.0 + 3 * i)
              for i in range(2)]  # fmt: skip
    model = fit_latency(windows + waited, 15100.0, 1300.0, 900.0, 0.3, 0.2)
    assert model is not None
    assert model.at_mix(1127.0).ttft.floor == model.at_mix(1088.0).ttft.floor


def test_a_rise_with_the_mix_that_stands_out_of_the_scatter_is_believed() -> None:
    # The superposed trace: hours of long code prompts among conversation ones; 20 ms of
    # scatter on each window does not hide 0.25 ms per token over a 1k-token spread.
    rng = np.random.default_rng(3)
    mixes = rng.uniform(800.0, 1800.0, 30)
    works = rng.uniform(2000.0, 9000.0, 30)
    windows = [
        LoadPoint(1000.0, w, 300.0 + 0.25 * (t - 1300.0) + 100.0 * contention(w, 12000.0, 4)
                  + rng.normal(0.0, 20.0), math.nan, 4, t)
        for w, t in zip(works, mixes, strict=True)
    ]  # fmt: skip
    model = fit_latency(windows, 12000.0, 1000.0, 900.0, 0.3, 0.2)
    assert model is not None
    assert model.ttft.per_token == pytest.approx(0.25, rel=0.2)
    assert model.at_mix(1800.0).ttft.floor > model.at_mix(800.0).ttft.floor + 200.0


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


def itl_step(work: float) -> float:
    """A replica's ITL p95: the decode-only step (23 ms) until more than 5% of its tokens come
    from steps carrying a prefill chunk (here past 2 500 tokens/s), then the chunk step."""
    return 23.0 if work < 2500.0 else 178.0


def test_windows_that_met_the_itl_target_hold_against_a_line_through_the_jump() -> None:
    works = [500.0, 1300.0, 1800.0, 2900.0, 3400.0, 3600.0]
    seen = [LoadPoint(1000.0 - i, w, 700.0, itl_step(w), 4) for i, w in enumerate(works)]
    assert itl_evidence(seen, 55.0) == ItlEvidence(1800.0, 23.0)
    model = fit_latency(seen, 22000.0, 1000.0, 900.0, 0.5, 4.0)
    assert model is not None and model.itl is not None
    line_only = replicas_for(18000.0, model, 1840.0, 55.0, 64)
    assert line_only is not None and 18000.0 / line_only < 1800.0  # the line's limit is lower
    with_evidence = replicas_for(
        18000.0, replace(model, itl_met=ItlEvidence(1800.0, 23.0)), 1840.0, 55.0, 64
    )
    assert with_evidence == 10  # 18 000 / 1 800: what the windows showed
    assert line_only > with_evidence


def test_itl_evidence_stops_below_the_least_work_that_missed() -> None:
    """A window that missed below one that met (noise, a long prompt) caps the evidence."""
    seen = [
        LoadPoint(1000.0, 1000.0, 700.0, 20.0, 4),
        LoadPoint(990.0, 2000.0, 700.0, 90.0, 4),
        LoadPoint(980.0, 3000.0, 700.0, 25.0, 4),
        LoadPoint(970.0, 500.0, 700.0, math.nan, 4),
    ]
    assert itl_evidence(seen, 55.0) == ItlEvidence(1000.0, 20.0)
    assert itl_evidence(seen[1:2], 55.0).work == 0.0  # none met


@given(
    st.lists(
        st.tuples(st.floats(1.0, 1e5), st.floats(1.0, 500.0)), min_size=1, max_size=20
    ),
    st.floats(5.0, 300.0),
)
def test_itl_evidence_never_reaches_a_load_that_missed(
    windows: list[tuple[float, float]], target: float
) -> None:
    seen = [LoadPoint(0.0, work, 500.0, itl, 1) for work, itl in windows]
    proven = itl_evidence(seen, target)
    assert all(proven.work < work for work, itl in windows if itl > target)
    assert proven.work == 0.0 or (proven.work, proven.itl_ms) in windows
    assert proven.work == 0.0 or proven.itl_ms <= target
