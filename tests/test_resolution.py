"""The ObjectiveResolvable condition: an objective below the lowest bucket, or inside a bucket
too wide to tell, is said with the bucket and the engine flag that adds one there."""

from __future__ import annotations

from builders import observation_from_samples, spec
from edge import Edge
from slascaler.engine_metrics import SGLANG_TTFT_BUCKETS_S
from slascaler.model.histogram import Histogram
from slascaler.model.samples import TTFTBreakdown
from slascaler.resolution import objective_resolvable

SAMPLES = [TTFTBreakdown(5.0, 10.0, 100.0, 20.0)] * 30


def condition_for(threshold_ms: float, engine: str = "vllm", itl_ms: float | None = None):  # type: ignore[no-untyped-def]
    objectives: dict[str, object] = {"ttft": {"percentile": 95, "thresholdMs": threshold_ms}}
    if itl_ms is not None:
        objectives["itl"] = {"percentile": 95, "thresholdMs": itl_ms}
    observation = observation_from_samples(SAMPLES, itl_ms=[20.0] * 30)
    if engine == "sglang":
        ttft = Histogram.from_values([s.total_ms for s in SAMPLES],
                                     [b * 1000 for b in SGLANG_TTFT_BUCKETS_S])  # fmt: skip
        observation = observation.__class__(**{**observation.__dict__, "ttft": ttft})
    return objective_resolvable(spec(engine=engine, objectives=objectives), observation)


def test_an_objective_on_a_bucket_bound_is_resolved() -> None:
    condition = condition_for(500)
    assert (condition.status, condition.reason) == ("True", "BucketsResolve")


def test_an_objective_between_wide_buckets_names_the_bucket_and_the_flag() -> None:
    condition = condition_for(2000)  # vLLM's TTFT buckets jump from 1 s to 2.5 s
    assert (condition.status, condition.reason) == ("False", "WideBucket")
    assert "p95 TTFT objective of 2000 ms falls inside the bucket 1000–2500 ms" in condition.message
    assert "add a bucket at 2 s: --custom-histogram-buckets '{\"time_to_first_token\": [" in (
        condition.message
    )
    assert ", 1, 2, 2.5, " in condition.message


def test_an_objective_below_sglangs_lowest_bucket() -> None:
    condition = condition_for(50, engine="sglang")
    assert (condition.status, condition.reason) == ("False", "BelowLowestBucket")
    assert "below the lowest bucket (le 0.1 s)" in condition.message
    assert "--bucket-time-to-first-token 0.05 0.1 0.2" in condition.message


def test_an_itl_objective_is_checked_too() -> None:
    condition = condition_for(500, itl_ms=5)  # vLLM's ITL buckets start at 10 ms
    assert condition.reason == "BelowLowestBucket" and "ITL objective of 5 ms" in condition.message


def test_a_narrow_bucket_resolves() -> None:
    assert condition_for(90).status == "True"  # 80–100 ms: a fifth of the objective wide


def test_the_condition_reaches_the_written_status() -> None:
    """Through the operator's reconcile on the in-memory cluster (the status pruned by the
    CRD's schema, as the API server does): the condition is there, with its reason and fix."""
    edge = Edge({"objectives": {"ttft": {"percentile": 95, "thresholdMs": 2000}},
                 "replicas": {"min": 1, "max": 16}})  # fmt: skip
    edge.source.observation = observation_from_samples(SAMPLES, pods=4, itl_ms=[20.0] * 30)
    edge.reconcile()
    condition = edge.condition("ObjectiveResolvable")
    assert (condition["status"], condition["reason"]) == ("False", "WideBucket")
    assert "--custom-histogram-buckets" in condition["message"]
