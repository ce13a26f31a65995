"""The published autoscalers' decision rules on hand-made inputs: the HPA behaviour block,
llm-d's SLO-aware formula and signal, Dynamo's load-based planner, AIBrix's KPA."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest

from builders import ITL_MS, TTFT_MS
from slascaler.model.histogram import Histogram
from slascaler.model.observation import ForwardPass, Observation
from slascaler_sim.baselines import DynamoLoadPlanner, KPAController, LlmdSLOController
from slascaler_sim.baselines.dynamo import AggRegression
from slascaler_sim.baselines.hpa import Normalizer
from slascaler_sim.baselines.llmd import LLMD_BEHAVIOR, desired_replicas, raw_saturation
from slascaler_sim.fleet import EngineSettings


def _observation(
    ttft_ms: float | None = None,
    itl_ms: float | None = None,
    kv_usage: float = math.nan,
    passes: tuple[ForwardPass, ...] = (),
) -> Observation:
    return Observation(
        observed_at=0.0,
        window_s=60.0,
        ttft=Histogram.from_values([ttft_ms] * 100 if ttft_ms is not None else [], TTFT_MS),
        queue=None,
        prefill=None,
        itl=Histogram.from_values([itl_ms] * 1000 if itl_ms is not None else [], ITL_MS),
        kv_cache_usage_now=kv_usage,
        forward_passes=passes,
    )


@dataclass
class StubFleet:
    """What a baseline sees (`FleetView`), set by the test."""

    seen: Observation
    desired: int
    ready_replicas: int
    starting_replicas: int = 0
    settings: EngineSettings = field(default_factory=lambda: EngineSettings(256, 2048))
    scaled: list[int] = field(default_factory=list)

    def observation(self, window_s: float) -> Observation:
        return self.seen

    def scale(self, replicas: int) -> None:
        self.desired = replicas
        self.scaled.append(replicas)


# -- the HPA behaviour block (llm-d's) ---------------------------------------------------


def test_hpa_behaviour_rate_limits_from_the_start_of_the_period() -> None:
    hpa = Normalizer(1, 100, LLMD_BEHAVIOR)
    assert hpa.reconcile(2, 50, 0.0) == 6  # max(+100% → 4, +4 pods → 6)
    hpa.record_scale(2, 6, 0.0)
    # Within the 60 s period the +4 already made counts: the limit is still 6.
    assert hpa.reconcile(6, 50, 15.0) == 6
    assert hpa.reconcile(6, 50, 59.0) == 6
    assert hpa.reconcile(6, 50, 61.0) == 12  # a new period: max(6 × 2, 6 + 4)


def test_hpa_behaviour_scale_down_one_pod_per_120_s_after_180_s() -> None:
    hpa = Normalizer(1, 100, LLMD_BEHAVIOR)
    assert hpa.reconcile(8, 8, 0.0) == 8
    for t in (15.0, 90.0, 165.0):
        assert hpa.reconcile(8, 2, t) == 8  # the 180 s window still holds the 8
    assert hpa.reconcile(8, 2, 181.0) == 7  # −1 pod per 120 s
    hpa.record_scale(8, 7, 181.0)
    assert hpa.reconcile(7, 2, 250.0) == 7
    assert hpa.reconcile(7, 2, 302.0) == 6


def test_hpa_scale_up_stabilization_takes_the_lowest_recent_recommendation() -> None:
    hpa = Normalizer(1, 100, LLMD_BEHAVIOR)
    assert hpa.reconcile(4, 4, 0.0) == 4
    assert hpa.reconcile(4, 5, 15.0) == 4  # the 30 s window still has a 4
    assert hpa.reconcile(4, 5, 31.0) == 5


# -- llm-d's SLO-aware recipe -------------------------------------------------------------


@pytest.mark.parametrize(
    ("s", "n", "r", "expected"),
    [
        (0.40, 4, 4, 4),  # the band's edges hold
        (0.55, 4, 4, 4),
        (0.47, 6, 2, 6),  # inside the band, whatever is warming
        (1.10, 4, 4, 8),  # 4 + ceil(4 × (1.1 / 0.55 − 1))
        (1.10, 4, 2, 4),  # credit 2/4: 4 + ceil(4 × (0.55 / 0.55 − 1)) = 4
        (1.65, 4, 2, 6),  # credit 2/4: 4 + ceil(4 × 0.5)
        (0.20, 4, 4, 2),  # 4 − floor(4 × (1 − 0.2 / 0.4))
        (0.20, 4, 1, 2),  # scale-down is not credited
        (0.00, 5, 5, 0),
    ],
)
def test_llmd_formula(s: float, n: int, r: int, expected: int) -> None:
    assert desired_replicas(s, n, r) == expected


def test_llmd_signal_is_the_worse_slo_ratio_at_p90_and_0_without_traffic() -> None:
    observation = _observation(ttft_ms=900.0, itl_ms=80.0)
    assert observation.ttft is not None and observation.itl is not None
    ttft_ratio = observation.ttft.quantile(0.9) / 3000.0
    tpot_ratio = observation.itl.quantile(0.9) / 100.0
    assert raw_saturation(observation, 3000.0, 100.0) == pytest.approx(max(ttft_ratio, tpot_ratio))
    assert tpot_ratio > ttft_ratio  # here TPOT decides
    assert raw_saturation(_observation(), 3000.0, 100.0) == 0.0


def test_llmd_signal_is_clamped_then_averaged_over_45_s() -> None:
    llmd = LlmdSLOController(500.0, 100.0, 1, 16)
    assert llmd.saturation(_observation(ttft_ms=10_000.0), 0.0) == 2.0  # clamp C = 2
    assert llmd.saturation(_observation(), 15.0) == pytest.approx(1.0)
    assert llmd.saturation(_observation(), 30.0) == pytest.approx(2 / 3)
    assert llmd.saturation(_observation(), 45.0) == 0.0  # the first sample left the window


def test_llmd_holds_inside_the_hysteresis_band() -> None:
    llmd = LlmdSLOController(1000.0, 1000.0, 1, 16)
    # P90 TTFT of these samples over a 1000 ms SLO: inside [0.40, 0.55].
    fleet = StubFleet(_observation(ttft_ms=480.0), desired=4, ready_replicas=4)
    assert 0.40 <= raw_saturation(fleet.seen, 1000.0, 1000.0) <= 0.55
    for t in range(0, 600, 15):
        llmd.control(fleet, float(t))
    assert fleet.scaled == []


def test_llmd_scales_up_with_credit_for_warming_replicas() -> None:
    llmd = LlmdSLOController(500.0, 100.0, 1, 16)
    fleet = StubFleet(_observation(ttft_ms=10_000.0), desired=2, ready_replicas=2)
    llmd.control(fleet, 0.0)  # s = 2: asks 2 + ceil(2 × (2 / 0.55 − 1)) = 8; HPA allows 6
    assert fleet.desired == 6
    fleet.starting_replicas = 4
    for t in (15.0, 30.0, 45.0):
        llmd.control(fleet, t)  # 60 s period: no more than +4 pods
    assert fleet.desired == 6
    llmd.control(fleet, 75.0)  # ready 2 of 6 provisioned: credit 1/3, s·c/θ = 1.21 → 6 + 2
    assert fleet.desired == 8


# -- Dynamo's load-based planner ----------------------------------------------------------


A, B, C = 0.01, 1e-5, 1e-7  # wall time = A + B·prefill tokens + C·decode KV tokens (seconds)


def _trained(model: AggRegression | None = None) -> AggRegression:
    """A regression fed with forward passes of an exactly linear engine, 1000-token prompts."""
    model = model or AggRegression()
    for prefill in (1000, 2000, 3000):
        for kv in (0, 50_000, 100_000):
            model.add(
                ForwardPass(
                    wall_time_s=A + B * prefill + C * kv,
                    scheduled_prefill_tokens=prefill,
                    scheduled_prefill_requests=prefill // 1000,
                    scheduled_decode_kv_tokens=kv,
                    scheduled_decode_requests=10,
                    queued_prefill_tokens=0,
                )
            )
    return model


def _worker(queued: int, kv: int = 10_000) -> ForwardPass:
    return ForwardPass(0.03, 1000, 1, kv, 10, queued)


def test_dynamo_ttft_runs_the_queue_through_chunks_of_the_token_budget() -> None:
    model = _trained()
    assert model.ready()
    assert model.avg_isl.value == pytest.approx(1000.0)
    # (5000 queued + 1000 avg ISL) = chunks 2048 + 2048 + 1904, each at 10 000 KV tokens.
    expected = 3 * (A + C * 10_000) + B * 6000
    assert model.estimate_ttft(5000, 2048, 10_000) == pytest.approx(expected)


def test_dynamo_rejects_a_fit_where_more_load_takes_less_time() -> None:
    model = AggRegression()
    for prefill in (1000, 2000, 3000, 4000, 5000, 6000):
        model.add(ForwardPass(1.0 - prefill * 1e-4, prefill, 1, prefill, 1, 0))
    assert model.has_sufficient_data()
    assert not model.ready()
    assert model.estimate_ttft(1000, 2048, 0) is None


def test_dynamo_adds_one_replica_whatever_the_overload() -> None:
    planner = DynamoLoadPlanner(500.0, 100.0, 32, 420_000, regression=_trained())
    overloaded = (_worker(1_000_000), _worker(2_000_000), _worker(900_000))
    assert planner.decide(overloaded, 3, 2048) == 4


def test_dynamo_adds_none_while_one_worker_is_within_the_slo() -> None:
    planner = DynamoLoadPlanner(500.0, 100.0, 32, 420_000, regression=_trained())
    # One worker's estimate is under the SLA; the other's queue, consolidated onto one
    # worker, would take more than 80% of what the SLA leaves: no scale-down either.
    assert planner.decide((_worker(0), _worker(30_000)), 2, 2048) == 2


def test_dynamo_removes_one_replica_when_the_consolidated_queue_fits() -> None:
    planner = DynamoLoadPlanner(500.0, 100.0, 32, 420_000, regression=_trained())
    assert planner.decide((_worker(0), _worker(0), _worker(0)), 3, 2048) == 2


def test_dynamo_waits_while_a_scaling_is_in_progress() -> None:
    planner = DynamoLoadPlanner(500.0, 100.0, 32, 420_000, regression=_trained())
    overloaded = (_worker(1_000_000), _worker(1_000_000), _worker(1_000_000))
    fleet = StubFleet(_observation(passes=overloaded), desired=4, ready_replicas=3)
    planner.control(fleet, 0.0)
    assert fleet.scaled == [] and planner.reason == "scaling_in_progress"
    fleet.desired = 3
    planner.control(fleet, 5.0)
    assert fleet.scaled == [4]


def test_dynamo_stays_within_the_gpu_budget() -> None:
    planner = DynamoLoadPlanner(500.0, 100.0, 3, 420_000, regression=_trained())
    overloaded = (_worker(1_000_000), _worker(1_000_000), _worker(1_000_000))
    assert planner.decide(overloaded, 3, 2048) == 3


# -- AIBrix's KPA --------------------------------------------------------------------------


def _kpa_step(kpa: KPAController, fleet: StubFleet, at: float, kv_usage: float) -> int:
    fleet.seen = _observation(kv_usage=kv_usage)
    kpa.control(fleet, at)
    return fleet.desired


def test_kpa_panics_at_twice_the_target_and_never_scales_down_in_panic() -> None:
    kpa = KPAController(1, 100)  # target 0.5 KV-cache usage per pod
    fleet = StubFleet(_observation(), desired=1, ready_replicas=1)
    for t in range(0, 60, 10):
        assert _kpa_step(kpa, fleet, float(t), 0.2) == 1
    assert not kpa.in_panic
    # Panic window (10 s) average 1.6: ceil(1.6 / 0.5) = 4 pods ≥ 2 × 1 ready → panic;
    # the scale-up rate allows ceil(2 × 1 ready) = 2.
    assert _kpa_step(kpa, fleet, 60.0, 1.6) == 2
    assert kpa.in_panic
    fleet.ready_replicas = 2
    for t in range(70, 130, 10):  # the load is gone, but panic lasts a stable window
        assert _kpa_step(kpa, fleet, float(t), 0.1) == 2, t
        assert kpa.in_panic
    assert _kpa_step(kpa, fleet, 130.0, 0.1) == 2
    assert not kpa.in_panic  # more than 60 s since the threshold was last crossed
    for t in range(140, 300, 10):  # the 3-minute scale-down delay keeps the highest count
        assert _kpa_step(kpa, fleet, float(t), 0.1) == 2, t
    assert _kpa_step(kpa, fleet, 300.0, 0.1) == 1


def test_kpa_stable_mode_follows_the_60_s_average_within_the_rate_limits() -> None:
    kpa = KPAController(1, 100, scale_down_delay_s=0.0)
    fleet = StubFleet(_observation(), desired=4, ready_replicas=4)
    kpa._started, kpa.max_panic_pods = True, 4  # as if it had run before: not in panic
    # ceil(0.9 / 0.5) = 2 pods, within [floor(4 / 2), ceil(2 × 4)].
    assert _kpa_step(kpa, fleet, 0.0, 0.9) == 2
    fleet.ready_replicas = 2
    # Stable: ceil(mean(0.9, 1.4) / 0.5) = 3; panic: ceil(1.4 / 0.5) = 3 < 2 × 2 ready.
    assert _kpa_step(kpa, fleet, 10.0, 1.4) == 3
    assert not kpa.in_panic
    fleet.ready_replicas = 3
    # Far below target: down to 0 wanted, floor(3 / 2) = 1 allowed.
    for t in range(20, 90, 10):
        _kpa_step(kpa, fleet, float(t), 0.0)
    assert fleet.desired == 1


def test_kpa_starts_in_panic_with_more_than_one_ready_pod() -> None:
    kpa = KPAController(1, 100)
    fleet = StubFleet(_observation(), desired=3, ready_replicas=3)
    assert _kpa_step(kpa, fleet, 0.0, 0.0) == 3  # no metrics history: no scale-down
    assert kpa.in_panic
