"""What goes wrong around an action, on the in-memory cluster, and what the status says.

Faults are injected with `SimCluster.fail` at the call where they hurt: the write-ahead of
the status refused (nothing is written to the Deployment: an action the status does not
announce could be repeated), the re-read before acting failing or finding the Deployment
changed, an Event that cannot be posted. And what stops an evaluation before deciding: a
spec the operator cannot use, a container that is not there, a memory it cannot read. A
decision that breaks a bound of the spec is refused by `acting` and never written.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

import pytest
from test_reconcile import BOUNDED, SLA, flags, queue_bound, raises

from edge import NAME, NAMESPACE, SLA_NAME, Edge
from slascaler.acting import act, validate_decision
from slascaler.kube.errors import KubeError, NamespaceTerminating, NotFound
from slascaler.kube.fleet import read_fleet
from slascaler.policy import Change, Decision, PolicyMemory, PolicyState, Reason, decide
from slascaler.spec import parse_spec


def on_call(number: int, fault: Callable[[], None]) -> list[Callable[[], None]]:
    """`fault` at the `number`-th next call of a method (the calls before it go through)."""
    return [lambda: None] * (number - 1) + [fault]


def inject(edge: Edge, method: str, faults: list[Callable[[], None]]) -> None:
    for fault in faults:
        edge.cluster.fail(method, fault)


def test_a_refused_write_ahead_of_the_status_writes_nothing_to_the_deployment() -> None:
    edge = Edge(BOUNDED, replicas=20)
    edge.cluster.fail("patch_inference_sla_status", raises(KubeError(500, "etcd is down")))
    evaluation = edge.reconcile()
    assert evaluation.acted == ()
    assert edge.patches() == 0 and edge.fleet.desired == 20 and "64" in flags(edge)
    ready = edge.condition("Ready")
    assert (ready["status"], ready["reason"]) == ("False", "ActionFailed")
    assert "the status could not be written first" in ready["message"]
    assert "pendingAction" not in edge.status and "lastAction" not in edge.status
    assert edge.telemetry.errors.labels("status")._value.get() == 1
    assert [e["type"] for e in edge.events("ActionFailed")] == ["Warning"]


def test_an_sla_deleted_while_it_is_evaluated_writes_nothing_and_is_no_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    edge = Edge(BOUNDED, replicas=20)
    gone = NotFound(f'inferenceslas.slascaler.io "{SLA_NAME}" not found')
    edge.cluster.fail("patch_inference_sla_status", raises(gone))
    with caplog.at_level(logging.INFO):
        evaluation = edge.reconcile()
    assert evaluation.acted == () and edge.patches() == 0
    assert edge.telemetry.errors.labels("status")._value.get() == 0
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert any("deleted meanwhile" in r.getMessage() for r in caplog.records)
    assert edge.events() == [], "no ActionFailed Event for an InferenceSLA that is gone"
    assert "recommendation" not in edge.status, "the evaluation stops at the write-ahead"


def test_an_sla_deleted_before_a_failed_evaluation_gets_no_warning_event(
    caplog: pytest.LogCaptureFixture,
) -> None:
    edge = Edge(BOUNDED, replicas=20)
    edge.cluster.fail("get_deployment", raises(KubeError(500, "etcd is down")))
    gone = NotFound(f'inferenceslas.slascaler.io "{SLA_NAME}" not found')
    edge.cluster.fail("patch_inference_sla_status", raises(gone))
    with caplog.at_level(logging.INFO):
        evaluation = edge.reconcile()
    assert evaluation.decision is None and edge.events() == []
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_failed_re_read_before_acting_holds_until_the_next_window() -> None:
    edge = Edge(BOUNDED, replicas=20)
    inject(edge, "get_deployment", on_call(2, raises(KubeError(500, "etcd is down"))))
    evaluation = edge.reconcile()
    assert evaluation.acted == () and edge.patches() == 0
    recommendation = edge.status["recommendation"]
    assert recommendation["reasonCode"] == "HoldTargetChanged"
    assert recommendation["reason"].startswith("re-reading the target: ")
    assert "etcd is down" in recommendation["reason"]
    assert edge.condition("Ready")["status"] == "True", "a hold, not a failure"
    assert "pendingAction" not in edge.status, "nothing was announced"

    edge.now += 15
    assert {str(c) for c in edge.reconcile().acted} == {"replicas 20→16", "maxBatchSize 64→100"}


def test_a_deployment_changed_while_deciding_is_decided_on_again() -> None:
    edge = Edge(BOUNDED, replicas=20)

    def someone_scales() -> None:  # between the decision's read and the re-read
        edge.fleet.scale(18)

    inject(edge, "get_deployment", on_call(2, someone_scales))
    evaluation = edge.reconcile()
    assert evaluation.acted == () and edge.patches() == 0
    assert edge.status["recommendation"]["reasonCode"] == "HoldTargetChanged"
    assert "changed while deciding" in edge.status["recommendation"]["reason"]
    assert [e["reason"] for e in edge.events()] == ["HoldTargetChanged"]


def test_an_event_that_cannot_be_posted_costs_the_event_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    edge = Edge(BOUNDED, replicas=20)
    edge.cluster.fail("create_event", raises(KubeError(403, "events is forbidden")))
    with caplog.at_level(logging.ERROR, logger="slascaler.reconcile"):
        evaluation = edge.reconcile()
    assert {str(c) for c in evaluation.acted} == {"replicas 20→16", "maxBatchSize 64→100"}
    assert edge.status["lastAction"]["reasonCode"] == "BoundsEnforced"
    assert edge.events() == []
    assert edge.telemetry.errors.labels("kubernetes")._value.get() == 1
    assert any("not posted" in r.getMessage() for r in caplog.records)


def test_an_event_refused_because_the_namespace_is_being_deleted_is_no_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The InferenceSLA goes with its namespace; an evaluation between the namespace's
    deletion and the SLA's is not a fault (the e2e log check caught it as one)."""
    edge = Edge(BOUNDED, replicas=20)
    refusal = NamespaceTerminating(
        f"events is forbidden: unable to create new content in namespace {NAMESPACE} because "
        "it is being terminated"
    )
    edge.cluster.fail("create_event", raises(refusal))
    with caplog.at_level(logging.INFO):
        evaluation = edge.reconcile()
    assert {str(c) for c in evaluation.acted} == {"replicas 20→16", "maxBatchSize 64→100"}
    assert edge.telemetry.errors.labels("kubernetes")._value.get() == 0
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("is being deleted" in r.getMessage() for r in caplog.records)


def test_a_spec_the_operator_cannot_use_is_said_and_nothing_is_read() -> None:
    edge = Edge({**SLA, "replicas": {"min": 8, "max": 2}})
    calls = len(edge.cluster.calls)
    assert edge.reconcile().decision is None
    ready = edge.condition("Ready")
    assert (ready["status"], ready["reason"]) == ("False", "SpecInvalid")
    assert {c["status"] for c in edge.status["conditions"] if c["type"] != "Ready"} == {"Unknown"}
    assert edge.status["regime"] == "Unknown"
    read = {c[0] for c in edge.cluster.calls[calls:]}
    assert "get_deployment" not in read, "the target is not read for an unusable spec"
    assert edge.telemetry.reconciles.labels(NAMESPACE, SLA_NAME, "invalid_spec")._value.get() == 1


def test_a_container_that_is_not_there_is_said() -> None:
    edge = Edge({**SLA, "targetRef": {"name": NAME, "container": "no-such-container"}})
    assert edge.reconcile().decision is None
    ready = edge.condition("Ready")
    assert (ready["status"], ready["reason"]) == ("False", "ContainerNotFound")
    assert "no-such-container" in ready["message"]
    [event] = edge.events()
    assert (event["type"], event["reason"]) == ("Warning", "ContainerNotFound")


def test_a_memory_that_cannot_be_read_is_replaced_and_noted() -> None:
    edge = Edge(SLA)
    edge.source.observation = queue_bound()
    edge.cluster.inference_slas[(NAMESPACE, SLA_NAME)]["status"] = {"memory": {"format": 999}}
    evaluation = edge.reconcile()
    assert evaluation.decision is not None
    assert any(n.startswith("status.memory was not usable") for n in edge.status["notes"])
    assert edge.status["memory"]["format"] == 2


def decision_for(edge: Edge) -> Decision:
    sla = edge.sla()
    spec = parse_spec(sla["spec"])
    view = read_fleet(edge.cluster, NAMESPACE, spec, sla, None)
    return decide(spec, None, PolicyState(view.state, PolicyMemory()), edge.now)


def test_a_decision_outside_the_spec_is_refused_and_never_written() -> None:
    edge = Edge(BOUNDED, replicas=20)
    sla = edge.sla()
    spec = parse_spec(sla["spec"])
    view = read_fleet(edge.cluster, NAMESPACE, spec, sla, None)
    decision = decision_for(edge)
    assert validate_decision(decision, spec) is None
    broken = replace(
        decision, replicas=40, changes=(Change("replicas", 20, 40, Reason.SCALE_UP),)
    )
    assert validate_decision(broken, spec) == "replicas 40 outside [1, 16]"
    announced: list[object] = []
    acted = act(
        edge.cluster, edge.telemetry, lambda patch: announced.append(patch) is None,
        sla, spec, view, broken, edge.now, None, None,
    )  # fmt: skip
    assert acted.acted == () and acted.hold is not None
    code, reason, failed = acted.hold
    assert (code, failed) == (Reason.DECISION_REJECTED, True)
    assert reason == "decision rejected: replicas 40 outside [1, 16]"
    assert announced == [] and edge.patches() == 0


def test_a_knob_change_outside_its_bounds_is_refused() -> None:
    edge = Edge(BOUNDED, replicas=20)
    spec = parse_spec(edge.sla()["spec"])
    decision = decision_for(edge)
    too_big = replace(
        decision,
        max_batch_size=300,
        changes=(Change("maxBatchSize", 64, 300, Reason.RAISE_BATCH_AT_CAPACITY),),
    )
    assert validate_decision(too_big, spec) == "maxBatchSize 300 outside spec.knobs.maxBatchSize"
    unbounded = replace(
        decision,
        chunk_size=4096,
        changes=(Change("chunkSize", 2048, 4096, Reason.BOUNDS_ENFORCED),),
    )
    assert validate_decision(unbounded, spec) == "chunkSize 4096 outside spec.knobs.chunkSize"
