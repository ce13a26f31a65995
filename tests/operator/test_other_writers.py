"""Two writers, one Deployment: what slascaler does when it is not alone.

On the in-memory cluster (ReplicaSets, managedFields and creation times as the API server
keeps them): two InferenceSLAs on one Deployment have one owner, the oldest; someone else
resetting spec.replicas is detected from managedFields, reported (condition and a Warning
Event with the fix) and backed off for a period that doubles while the fight goes on; no
engine flag is written while someone else's rollout is in progress; a Deployment scaled to
0 is left at 0.
"""

from __future__ import annotations

import pytest
from test_reconcile import BOUNDED, SLA, queue_bound

from edge import NAME, NAMESPACE, Edge
from slascaler.engine_args import CommandLine

OLDER = "llama-older"


def test_the_oldest_inference_sla_owns_the_deployment_and_the_other_does_nothing() -> None:
    edge = Edge({**SLA, "replicas": {"min": 1, "max": 2}}, replicas=4)
    edge.cluster.add_inference_sla(
        NAMESPACE, OLDER, {"targetRef": {"name": NAME}, **SLA}, created_at=edge.now - 3600
    )
    for _ in range(3):  # disjoint bounds (1–2 here, 1–16 there): nothing flips
        evaluation = edge.reconcile()
        assert evaluation.acted == () and edge.fleet.desired == 4
        edge.now += 15
    assert edge.patches() == 0
    conflict = edge.condition("Conflict")
    assert (conflict["status"], conflict["reason"]) == ("True", "OtherInferenceSLA")
    assert f"InferenceSLA/{OLDER} also targets {NAME} and is older" in conflict["message"]
    [event] = edge.events()  # a steady conflict is one Warning Event
    assert (event["type"], event["reason"]) == ("Warning", "OtherInferenceSLA")

    # The owner itself acts, and says nothing of a conflict.
    older = edge.reconciler.reconcile(edge.cluster.get_inference_sla(NAMESPACE, OLDER))
    assert older.decision is not None and older.decision.condition("Conflict").status == "False"  # type: ignore[union-attr]


def test_equal_creation_times_are_ordered_by_name() -> None:
    edge = Edge(SLA)
    created = edge.sla()["metadata"]["creationTimestamp"]
    edge.cluster.add_inference_sla(NAMESPACE, "a-first", {"targetRef": {"name": NAME}, **SLA})
    assert (
        edge.cluster.get_inference_sla(NAMESPACE, "a-first")["metadata"]["creationTimestamp"]
        == created
    )
    edge.source.observation = queue_bound()
    assert edge.reconcile().acted == ()
    assert "InferenceSLA/a-first also targets" in edge.condition("Conflict")["message"]


def test_an_inference_sla_being_deleted_owns_nothing() -> None:
    edge = Edge(SLA)
    edge.cluster.add_inference_sla(
        NAMESPACE, OLDER, {"targetRef": {"name": NAME}, **SLA}, created_at=edge.now - 60
    )
    edge.cluster.inference_slas[(NAMESPACE, OLDER)]["metadata"]["deletionTimestamp"] = "x"
    edge.source.observation = queue_bound()
    assert edge.reconcile().acted
    assert edge.condition("Conflict")["status"] == "False"


def scaled_up(edge: Edge) -> int:
    """Scale the Deployment up through the operator; the new count."""
    edge.source.observation = queue_bound()
    assert edge.reconcile().acted
    return edge.fleet.desired


@pytest.mark.parametrize("via_scale", [False, True], ids=["update", "scale-subresource"])
def test_someone_resetting_replicas_is_reported_and_backed_off_not_fought(
    via_scale: bool,
) -> None:
    edge = Edge(SLA)
    ours = scaled_up(edge)
    edge.now += 60
    edge.cluster.scale_by(NAMESPACE, NAME, 2, manager="argocd-controller", via_scale=via_scale)
    edge.now += 5
    assert edge.reconcile().acted == (), "not scaled back"
    assert edge.fleet.desired == 2
    conflict = edge.condition("Conflict")
    assert (conflict["status"], conflict["reason"]) == ("True", "ReplicasOverwritten")
    assert "argocd-controller set spec.replicas of llama after slascaler did" in conflict["message"]
    assert "drop `replicas` from what argocd-controller applies" in conflict["message"]
    assert edge.status["recommendation"]["reasonCode"] == "HoldReplicasOverwritten"
    assert "would set replicas 2→" in edge.status["recommendation"]["reason"]
    [warning] = edge.events("ReplicasOverwritten")
    assert warning["type"] == "Warning" and "drop `replicas`" in warning["message"]

    for _ in range(10):  # for the 5 min back-off: no write, no second Event
        edge.now += 25
        edge.reconcile()
    assert edge.fleet.desired == 2 and len(edge.events("ReplicasOverwritten")) == 1
    assert edge.patches() == 1, "only the first scale-up was written"

    edge.now += 60  # the back-off is over: slascaler scales again (and owns replicas again)
    assert edge.reconcile().acted and edge.fleet.desired > 2
    assert edge.condition("Conflict")["status"] == "False"
    assert ours > 2


def test_a_resumed_fight_doubles_the_back_off() -> None:
    edge = Edge(SLA)
    scaled_up(edge)
    backoffs = []
    for _ in range(3):
        edge.now += 10
        edge.cluster.scale_by(NAMESPACE, NAME, 2, manager="kubectl")
        edge.now += 5
        edge.reconcile()
        backoffs.append(edge.status["memory"]["replicasBackoffS"])
        edge.now = edge.status["memory"]["replicasBackoffUntil"] + 1
        assert edge.reconcile().acted, "scaled again once the back-off is over"
    assert backoffs == [300.0, 600.0, 1200.0]


def test_the_creator_owning_replicas_is_not_an_overwrite() -> None:
    """Before slascaler ever wrote replicas, `kubectl apply`'s manager owns them: no conflict."""
    edge = Edge(SLA)
    edge.source.observation = queue_bound()
    assert edge.reconcile().acted
    assert edge.condition("Conflict")["status"] == "False"
    assert edge.events("ReplicasOverwritten") == []


def test_no_engine_flag_is_written_during_a_foreign_rollout() -> None:
    edge = Edge(BOUNDED, replicas=8)  # --max-num-seqs 64, below maxBatchSize.min 100
    edge.cluster.roll_image(NAMESPACE, NAME, "vllm/vllm-openai:v0.99-broken")  # stuck rollout
    edge.reconcile()
    assert "--max-num-seqs" in edge.container()["args"]
    args = edge.container()["args"]
    assert args[args.index("--max-num-seqs") + 1] == "64", "no template patch on their rollout"
    assert edge.status["recommendation"]["reasonCode"] == "HoldForeignRollout"
    assert (
        "a rollout slascaler did not start is in progress"
        in edge.status["recommendation"]["reason"]
    )

    edge.cluster.finish_rollout(NAMESPACE, NAME)  # their rollout went through
    edge.now += 15
    evaluation = edge.reconcile()
    assert [str(c) for c in evaluation.acted] == ["maxBatchSize 64→100"]


def test_flags_changed_by_hand_are_someone_elses_rollout() -> None:
    edge = Edge(BOUNDED, replicas=8)
    args = list(edge.container()["args"])
    args[args.index("--max-num-seqs") + 1] = "80"
    edge.cluster.set_command_line(NAMESPACE, NAME, CommandLine((), tuple(args)))  # kubectl edit
    edge.reconcile()
    assert edge.status["recommendation"]["reasonCode"] == "HoldForeignRollout"
    assert "80" in edge.container()["args"]


def test_slascalers_own_rollout_is_not_foreign() -> None:
    """A rollout that changes only the flags slascaler owns (managedFields) is its own: a new
    bound is still enforced during it (the controller rolls over to the newest template)."""
    edge = Edge({**SLA, "knobs": {"maxBatchSize": {"min": 100, "max": 200}}}, replicas=4)
    assert [str(c) for c in edge.reconcile().acted] == ["maxBatchSize 64→100"]
    assert len(edge.cluster.list_replica_sets(NAMESPACE, "app=llama")) == 2, "still rolling"
    sla = edge.cluster.inference_slas[(NAMESPACE, "llama-chat")]
    sla["spec"]["knobs"]["maxBatchSize"]["min"] = 120
    edge.now += 15
    assert [str(c) for c in edge.reconcile().acted] == ["maxBatchSize 100→120"]


def test_a_deployment_at_zero_replicas_is_left_at_zero() -> None:
    """As the HPA treats it: 0 replicas means scaling is disabled (not a scale from zero)."""
    edge = Edge({**SLA, "replicas": {"min": 2, "max": 8}}, replicas=0)
    edge.source.observation = queue_bound()
    evaluation = edge.reconcile()
    assert evaluation.acted == () and edge.fleet.desired == 0 and edge.patches() == 0
    recommendation = edge.status["recommendation"]
    assert recommendation["reasonCode"] == "HoldScaledToZero"
    assert "scale it to 1 or more" in recommendation["reason"]
    [event] = edge.events("HoldScaledToZero")
    assert event["type"] == "Normal"

    edge.cluster.scale_by(NAMESPACE, NAME, 1, manager="kubectl")  # the user scales it back up
    edge.now += 15
    assert edge.reconcile().acted  # below min 2: bounds enforced again
    assert edge.fleet.desired >= 2
