"""The reconcile path on the in-memory cluster: what is written is what the status says.

Each test runs the operator's `Reconciler` against `SimCluster` (which checks the status
against the CRD's schema as the API server does) and a fixed observation, injects what can
go wrong between the decision and the Deployment (a refused write, no answer, a process
killed between two writes, someone else writing), and compares the Deployment with the
status, `lastAction`, the Events and the memory.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from builders import colliding_prompts, observation_from_samples
from edge import NAME, NAMESPACE, Edge
from slascaler.engine_args import CommandLine
from slascaler.kube.errors import KubeError, Unreachable
from slascaler.model.observation import Observation
from slascaler.scenarios import source_scenario
from slascaler_sim.cluster import Crash
from slascaler_sim.fleet import EngineSettings

SLA = {
    "objectives": {"ttft": {"percentile": 95, "thresholdMs": 500}},
    "replicas": {"min": 1, "max": 16},
}
BOUNDED = {  # the Deployment below runs 20 replicas at --max-num-seqs 64: both outside
    **SLA,
    "knobs": {"maxBatchSize": {"min": 100, "max": 200}},
}


def queue_bound(pods: int = 4) -> Observation:
    samples = source_scenario("high-load", 3000, seed=1)
    return observation_from_samples(samples, pods=pods, running=pods * 62.0, itl_ms=[20.0] * 50)


def raises(error: BaseException) -> Callable[[], None]:
    def fault() -> None:
        raise error

    return fault


def flags(edge: Edge) -> tuple[str, ...]:
    container = edge.live()["spec"]["template"]["spec"]["containers"][0]
    return tuple(container.get("args", ()))


def assert_status_matches_deployment(edge: Edge) -> None:
    live = edge.live()
    assert edge.status["replicas"] == live["spec"]["replicas"]
    args = flags(edge)
    batch = edge.status.get("engineFlags", {}).get("maxBatchSize")
    if batch is not None:
        assert args[args.index("--max-num-seqs") + 1] == str(batch)
    assert edge.telemetry.errors.labels("status")._value.get() == 0, "a status write failed"


def test_a_queue_bound_window_scales_and_the_status_says_so() -> None:
    edge = Edge(SLA)
    edge.source.observation = queue_bound()
    evaluation = edge.reconcile()
    assert [str(c) for c in evaluation.acted] == [f"replicas 4→{edge.fleet.desired}"]
    assert edge.fleet.desired > 4
    assert_status_matches_deployment(edge)
    assert edge.status["lastAction"]["change"] == f"replicas 4→{edge.fleet.desired}"
    assert edge.status["lastAction"]["reasonCode"] == "ScaleUp"
    assert "pendingAction" not in edge.status
    assert edge.status["memory"]["lastScaleUpAt"] == edge.now
    [event] = edge.events()
    assert event["reason"] == "ScaleUp" and event["type"] == "Normal"
    assert event["message"].startswith(f"replicas 4→{edge.fleet.desired}: ")


def test_replicas_and_flags_change_in_one_write() -> None:
    edge = Edge(BOUNDED, replicas=20)
    evaluation = edge.reconcile()
    assert {str(c) for c in evaluation.acted} == {"replicas 20→16", "maxBatchSize 64→100"}
    assert [c for c in edge.cluster.calls if c[0] == "patch_deployment"] == [
        ("patch_deployment", NAMESPACE, NAME)
    ]
    assert edge.fleet.desired == 16 and "100" in flags(edge)
    assert_status_matches_deployment(edge)
    assert edge.status["engineFlags"] == {"maxBatchSize": 100, "chunkSize": 2048}


def test_a_refused_write_changes_nothing_and_the_status_says_so() -> None:
    edge = Edge(BOUNDED, replicas=20)
    edge.cluster.fail("patch_deployment", raises(KubeError(422, "admission webhook denied it")))
    evaluation = edge.reconcile()
    assert evaluation.acted == ()
    assert edge.fleet.desired == 20 and "64" in flags(edge)
    assert_status_matches_deployment(edge)
    assert edge.status["replicas"] == 20 and edge.status["engineFlags"]["maxBatchSize"] == 64
    assert "lastAction" not in edge.status and "pendingAction" not in edge.status
    ready = edge.condition("Ready")
    assert (ready["status"], ready["reason"]) == ("False", "ActionFailed")
    assert "admission webhook denied it" in ready["message"]
    assert edge.status["memory"]["lastScaleDownAt"] is None
    assert [e["type"] for e in edge.events("ActionFailed")] == ["Warning"]


def test_killed_after_announcing_the_action_it_is_never_counted_as_made() -> None:
    edge = Edge(BOUNDED, replicas=20)
    edge.cluster.fail("patch_deployment", raises(Crash()))
    with pytest.raises(Crash):
        edge.reconcile()
    assert edge.fleet.desired == 20, "the Deployment was never written"
    assert edge.status["pendingAction"]["change"] == "replicas 20→16, maxBatchSize 64→100"
    assert edge.events() == []

    edge.now += 15
    evaluation = edge.reconcile()  # the restarted operator
    assert any("was never written" in note for note in edge.status["notes"])
    assert {str(c) for c in evaluation.acted} == {"replicas 20→16", "maxBatchSize 64→100"}
    assert "pendingAction" not in edge.status
    assert_status_matches_deployment(edge)
    assert len(edge.events("BoundsEnforced")) == 1


def test_killed_after_writing_the_deployment_the_action_and_its_event_are_recorded() -> None:
    edge = Edge(BOUNDED, replicas=20)
    edge.cluster.fail("create_event", raises(Crash()))
    with pytest.raises(Crash):
        edge.reconcile()
    assert edge.fleet.desired == 16, "the write landed"
    assert "lastAction" not in edge.status and edge.events() == []
    pending_at = edge.status["pendingAction"]["time"]

    for _ in range(2):  # the restarted operator, then one more evaluation
        edge.now += 15
        evaluation = edge.reconcile()
        assert evaluation.acted == ()
    assert edge.status["lastAction"]["time"] == pending_at
    assert edge.status["lastAction"]["change"] == "replicas 20→16, maxBatchSize 64→100"
    assert "pendingAction" not in edge.status
    assert_status_matches_deployment(edge)
    [event] = edge.events("BoundsEnforced")
    assert event["message"].startswith("replicas 20→16, maxBatchSize 64→100: ")
    assert edge.status["memory"]["lastScaleDownAt"] == pytest.approx(edge.now - 30)


def test_a_write_that_got_no_answer_is_settled_by_the_next_evaluation() -> None:
    edge = Edge(SLA)
    edge.source.observation = queue_bound()
    original = edge.cluster.patch_deployment

    def lands_then_times_out(*args: object) -> object:
        original(*args)  # type: ignore[arg-type]
        raise Unreachable("read timed out")

    edge.cluster.patch_deployment = lands_then_times_out  # type: ignore[method-assign]
    assert edge.reconcile().acted == ()
    scaled_to = edge.fleet.desired
    assert scaled_to > 4
    ready = edge.condition("Ready")
    assert ready["reason"] == "ActionFailed" and "next evaluation" in ready["message"]
    assert edge.status["pendingAction"]["target"] == {"replicas": scaled_to}
    assert edge.status["replicas"] == 4, "not known to be written yet"

    edge.cluster.patch_deployment = original  # type: ignore[method-assign]
    edge.now += 15
    edge.reconcile()
    assert edge.fleet.desired == scaled_to, "nothing repeated: the pods are still starting"
    assert edge.status["lastAction"]["change"] == f"replicas 4→{scaled_to}"
    assert edge.status["replicas"] == scaled_to
    assert len(edge.events("ScaleUp")) == 1


def test_unrelated_writes_do_not_starve_a_needed_scale() -> None:
    edge = Edge(SLA)
    edge.source.observation = queue_bound()
    counter = iter(range(100))
    for _ in range(3):  # a controller annotating the Deployment right before each write
        edge.cluster.fail(
            "patch_deployment",
            lambda: edge.cluster.annotate(NAMESPACE, NAME, "gitops/synced", str(next(counter))),
        )
    evaluation = edge.reconcile()
    assert evaluation.acted and edge.fleet.desired > 4
    assert edge.live()["metadata"]["annotations"]["gitops/synced"] == "2"
    assert_status_matches_deployment(edge)


def test_writes_faster_than_a_full_read_do_not_starve_a_needed_scale() -> None:
    """Someone annotates the Deployment during every read of its ReplicaSets (as a busy
    controller does while the operator re-reads) and before each of the first 8 writes:
    each conflict is retried on one read of the Deployment, and the scale lands."""
    edge = Edge(SLA)
    edge.source.observation = queue_bound()
    counter = iter(range(1000))

    def annotate() -> None:
        edge.cluster.annotate(NAMESPACE, NAME, "gitops/synced", str(next(counter)))

    edge.cluster.fail("list_replica_sets", annotate, times=1000)
    edge.cluster.fail("patch_deployment", annotate, times=8)
    evaluation = edge.reconcile()
    assert evaluation.acted, edge.status["recommendation"]
    assert edge.patches() == 9, "8 conflicts, then the write"
    assert_status_matches_deployment(edge)


def test_a_write_to_what_was_decided_on_is_not_overwritten() -> None:
    edge = Edge(SLA)
    edge.source.observation = queue_bound()
    edge.cluster.fail("patch_deployment", lambda: edge.fleet.scale(5))  # someone else scales
    evaluation = edge.reconcile()
    assert evaluation.acted == ()
    assert edge.fleet.desired == 5
    assert edge.status["recommendation"]["reasonCode"] == "HoldTargetChanged"
    assert "lastAction" not in edge.status and "pendingAction" not in edge.status


def test_recommend_mode_writes_the_status_and_never_the_deployment() -> None:
    edge = Edge({**SLA, "mode": "Recommend"})
    edge.source.observation = queue_bound()
    edge.reconcile()
    assert edge.fleet.desired == 4
    assert not [c for c in edge.cluster.calls if c[0] == "patch_deployment"]
    [event] = edge.events()
    assert event["reason"] == "RecommendScaleUp" and "mode Recommend" in event["message"]
    assert edge.status["recommendation"]["replicas"] > 4


def test_notes_reach_the_status_through_the_schema() -> None:
    edge = Edge({**SLA, "knobs": {"chunkSize": {"min": 512, "max": 8192}}})
    edge.cluster.set_command_line(NAMESPACE, NAME, CommandLine((), ("--model", "llama")))
    edge.reconcile()
    assert edge.status["notes"] == [
        "--max-num-batched-tokens is not set: assuming 2048, vLLM 0.33's default on "
        "NVIDIA-A100-SXM4-80GB (81920 MiB)"
    ]


def test_a_missing_target_is_said_and_nothing_else_happens() -> None:
    edge = Edge(SLA)
    del edge.cluster.deployments[(NAMESPACE, NAME)]
    assert edge.reconcile().decision is None
    ready = edge.condition("Ready")
    assert (ready["status"], ready["reason"]) == ("False", "TargetNotFound")
    [event] = edge.events()
    assert event["type"] == "Warning" and event["reason"] == "TargetNotFound"
    edge.now += 15
    edge.reconcile()
    assert len(edge.events()) == 1, "a steady problem is one Event"


def test_an_api_error_reading_the_target_is_a_condition_not_a_crash() -> None:
    edge = Edge(SLA)
    edge.cluster.fail("list_pods", raises(KubeError(403, "pods is forbidden")))
    assert edge.reconcile().decision is None
    ready = edge.condition("Ready")
    assert ready["reason"] == "KubernetesError" and "pods is forbidden" in ready["message"]


def test_the_collision_count_reaches_the_status_through_the_schema() -> None:
    """Eighteen 6000–7000-token prompts a minute on one replica, two of which shared its steps
    and missed 250 ms: the count that keeps them apart is in the status the API keeps."""
    edge = Edge(
        {"objectives": {"ttft": {"percentile": 95, "thresholdMs": 250}},
         "replicas": {"min": 1, "max": 8}, "knobs": {"chunkSize": {"min": 256, "max": 8192}}},
        replicas=1, settings=EngineSettings(64, 8192),
    )  # fmt: skip
    edge.source.observation = colliding_prompts(at=edge.now)
    edge.reconcile()
    assert edge.status["recommendation"]["replicasForCollisions"] == 2
    assert edge.status["recommendation"]["replicas"] == 2
