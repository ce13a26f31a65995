"""The Kopf wiring, called directly: its handlers over the in-memory cluster.

`register` is run on a fresh Kopf registry and its handlers are called as Kopf would call
them (no Kopf event loop, no API server): the timer and the event handler submit the
InferenceSLA to the evaluation cycle (a recording stand-in here, which the test then runs
as the real cycle does: `Operator.evaluate`), a deletion forgets the object, and the
startup handler configures Kopf and starts the cycle. `Operator.evaluate` is run against a
SimCluster-backed `Reconciler`: it reads the object fresh, skips what was deleted,
replaced or already evaluated, and refreshes the GPU pools before deciding. `run` hands
Kopf the settings (peering, namespaces, the liveness endpoint), `kopf.run` recorded.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kopf
import pytest
from kubernetes import client
from test_reconcile import SLA, queue_bound, raises

from edge import NAMESPACE, SLA_NAME, Edge
from slascaler.cycle import Due
from slascaler.kube.clients import Clients
from slascaler.kube.errors import NotFound
from slascaler.pools import PoolCoordinator
from slascaler.settings import Settings
from slascaler.spec import SLASpec
from slascaler.wiring import Operator, register, run

SETTINGS = Settings.from_env(
    {"SLASCALER_PROMETHEUS_URL": "http://prometheus:9090/", "SLASCALER_SELECTOR": "team=a"}
)


@dataclass
class RecordingCycle:
    """Stands in for `cycle.Cycle`: records what the handlers submit and forget."""

    submitted: list[Due] = field(default_factory=list)
    forgotten: list[str] = field(default_factory=list)
    started: int = 0
    stopped: int = 0

    def submit(self, due: Due) -> None:
        self.submitted.append(due)

    def forget(self, uid: str) -> None:
        self.forgotten.append(uid)

    def start(self) -> None:
        self.started += 1

    def stop(self) -> None:
        self.stopped += 1


@dataclass
class Wired:
    edge: Edge
    operator: Operator
    cycle: RecordingCycle
    registry: kopf.OperatorRegistry

    def handler(self, kind: str, id: str) -> Any:
        registries = {
            "spawning": self.registry._spawning,
            "watching": self.registry._watching,
            "activities": self.registry._activities,
        }
        return next(h for h in registries[kind].get_all_handlers() if h.id.endswith(id))

    @property
    def uid(self) -> str:
        return str(self.edge.sla()["metadata"]["uid"])

    def run_submitted(self) -> None:
        """What the cycle does with each submitted InferenceSLA."""
        for due in self.cycle.submitted:
            self.operator.evaluate(due.namespace, due.name, due.uid, due.spec_changed)


@pytest.fixture
def wired() -> Iterator[Wired]:
    edge = Edge(SLA)
    edge.source.observation = queue_bound()
    operator = Operator(edge.reconciler, edge.cluster)
    cycle = RecordingCycle()
    registry = kopf.OperatorRegistry()
    register(registry, SETTINGS, operator, cycle)  # type: ignore[arg-type]
    yield Wired(edge, operator, cycle, registry)


def sla_series(edge: Edge) -> list[Any]:
    return [
        sample
        for metric in edge.telemetry.registry.collect()
        for sample in metric.samples
        if sample.labels.get("namespace") == NAMESPACE and sample.labels.get("name") == SLA_NAME
    ]


def test_the_timer_submits_the_sla_with_its_spec_and_the_cycle_evaluates_it(
    wired: Wired,
) -> None:
    timer = wired.handler("spawning", "evaluate")
    assert timer.interval == SETTINGS.reconcile_interval_s and timer.sharp
    sla = wired.edge.sla()
    asyncio.run(timer.fn(namespace=NAMESPACE, name=SLA_NAME, uid=wired.uid, spec=sla["spec"]))
    [due] = wired.cycle.submitted
    assert (due.namespace, due.name, due.uid, due.spec_changed) == (
        NAMESPACE, SLA_NAME, wired.uid, False,
    )  # fmt: skip
    assert isinstance(due.spec, SLASpec)
    assert due.spec.target.name == sla["spec"]["targetRef"]["name"]
    assert not due.stopped()
    wired.run_submitted()
    assert wired.edge.condition("Ready")["status"] == "True"
    assert wired.edge.status["lastAction"]["reasonCode"] == "ScaleUp"


def test_the_timer_submits_an_unreadable_spec_without_one(wired: Wired) -> None:
    timer = wired.handler("spawning", "evaluate")
    asyncio.run(timer.fn(namespace=NAMESPACE, name=SLA_NAME, uid=wired.uid, spec={"x": 1}))
    [due] = wired.cycle.submitted
    assert due.spec is None, "the evaluation itself says why (SpecInvalid)"


def test_the_timer_says_when_kopf_stopped_it(wired: Wired) -> None:
    timer = wired.handler("spawning", "evaluate")
    asyncio.run(
        timer.fn(namespace=NAMESPACE, name=SLA_NAME, uid=wired.uid, spec={}, stopped=True)
    )
    [due] = wired.cycle.submitted
    assert due.stopped()


def test_the_timer_makes_kopf_put_its_finalizer_on_every_inference_sla(wired: Wired) -> None:
    """What wiring's docstring says: a timer needs Kopf's finalizer (stopped before deletion)."""
    timer = wired.handler("spawning", "evaluate")
    assert timer.requires_finalizer


def test_both_handlers_are_narrowed_to_the_shard_by_the_selector(wired: Wired) -> None:
    for handler in (wired.handler("spawning", "evaluate"), wired.handler("watching", "changed")):
        assert set(handler.labels) == {"team"}
        assert handler.labels["team"]("a") and not handler.labels["team"]("b")


def test_a_spec_change_is_submitted_at_once_and_evaluated_once(wired: Wired) -> None:
    changed = wired.handler("watching", "changed")
    body = wired.edge.sla()
    event = {"type": "MODIFIED", "object": body}
    asyncio.run(changed.fn(event=event, namespace=NAMESPACE, name=SLA_NAME, uid=wired.uid))
    [due] = wired.cycle.submitted
    assert due.spec_changed and isinstance(due.spec, SLASpec)
    wired.run_submitted()
    evaluated = wired.edge.status["lastEvaluated"]
    assert wired.edge.status["observedGeneration"] == body["metadata"]["generation"]

    # The status write comes back as an event of its own: the generation is seen, no resubmit.
    event = {"type": "MODIFIED", "object": wired.edge.sla()}
    asyncio.run(changed.fn(event=event, namespace=NAMESPACE, name=SLA_NAME, uid=wired.uid))
    assert len(wired.cycle.submitted) == 1
    # A second run for the same generation (the timer and the event raced) does nothing.
    wired.edge.now += 1
    wired.run_submitted()
    assert wired.edge.status["lastEvaluated"] == evaluated


def test_a_deletion_forgets_the_sla_in_the_cycle_and_its_telemetry(wired: Wired) -> None:
    wired.operator.evaluate(NAMESPACE, SLA_NAME, wired.uid)
    assert sla_series(wired.edge), "the evaluation exported series for the SLA"
    uid = wired.uid
    changed = wired.handler("watching", "changed")
    event = {"type": "DELETED", "object": wired.edge.sla()}
    asyncio.run(changed.fn(event=event, namespace=NAMESPACE, name=SLA_NAME, uid=uid))
    assert wired.cycle.forgotten == [uid]
    assert wired.cycle.submitted == []
    assert sla_series(wired.edge) == []


def test_an_event_without_a_namespace_is_ignored(wired: Wired) -> None:
    changed = wired.handler("watching", "changed")
    event = {"type": "DELETED", "object": {}}
    asyncio.run(changed.fn(event=event, namespace=None, name=SLA_NAME, uid=wired.uid))
    timer = wired.handler("spawning", "evaluate")
    asyncio.run(timer.fn(namespace=None, name=SLA_NAME, uid=wired.uid, spec={}))
    assert wired.cycle.submitted == [] and wired.cycle.forgotten == []


def test_startup_configures_kopf_and_starts_the_cycle_and_cleanup_stops_it(
    wired: Wired,
) -> None:
    configure = wired.handler("activities", "configure")
    settings = kopf.OperatorSettings()
    configure.fn(settings=settings)
    assert settings.posting.enabled is False, "the reconcile posts its own Events"
    assert isinstance(settings.persistence.progress_storage, kopf.AnnotationsProgressStorage)
    assert settings.persistence.progress_storage.prefix == "slascaler.io"
    assert settings.persistence.diffbase_storage.prefix == "slascaler.io"
    assert settings.execution.max_workers == 8
    assert wired.cycle.started == 1
    wired.handler("activities", "stop").fn()
    assert wired.cycle.stopped == 1


def test_an_sla_deleted_before_its_turn_is_skipped(wired: Wired) -> None:
    uid = wired.uid
    wired.edge.cluster.fail("get_inference_sla", raises(NotFound("gone")))
    wired.operator.evaluate(NAMESPACE, SLA_NAME, uid)
    assert "status" not in wired.edge.sla()
    assert wired.edge.patches() == 0


def test_an_sla_being_deleted_or_recreated_under_the_same_name_is_not_evaluated(
    wired: Wired,
) -> None:
    uid = wired.uid
    wired.operator.evaluate(NAMESPACE, SLA_NAME, "another-uid")  # recreated since submitted
    assert "status" not in wired.edge.sla()
    wired.edge.cluster.inference_slas[(NAMESPACE, SLA_NAME)]["metadata"][
        "deletionTimestamp"
    ] = "2026-01-01T00:00:00Z"
    wired.operator.evaluate(NAMESPACE, SLA_NAME, uid)
    assert "status" not in wired.edge.sla()
    assert wired.edge.patches() == 0


def test_the_pools_are_refreshed_before_an_evaluation_when_due() -> None:
    edge = Edge(SLA)
    pools = PoolCoordinator(edge.cluster, clock=lambda: edge.now, interval_s=15)
    operator = Operator(edge.reconciler, edge.cluster, pools)
    uid = str(edge.sla()["metadata"]["uid"])

    def pool_lists() -> int:
        return sum(1 for call in edge.cluster.calls if call[0] == "list_gpu_pools")

    operator.evaluate(NAMESPACE, SLA_NAME, uid)
    assert pool_lists() == 1
    edge.now += 5  # within the interval: the last arbitration still holds
    operator.evaluate(NAMESPACE, SLA_NAME, uid)
    assert pool_lists() == 1
    edge.now += 15
    operator.evaluate(NAMESPACE, SLA_NAME, uid)
    assert pool_lists() == 2


@pytest.fixture
def kopf_run(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """`wiring.run` up to Kopf: the client made without a kubeconfig, `kopf.run` recorded
    instead of started, the process-wide logging levels put back afterwards."""
    seen: dict[str, Any] = {}

    def from_config(*args: Any, pool_size: int | None = None, **kwargs: Any) -> Clients:
        seen["pool_size"] = pool_size
        return Clients(client.ApiClient(client.Configuration()))

    monkeypatch.setattr(Clients, "from_config", from_config)
    monkeypatch.setattr(kopf, "configure", lambda **kwargs: seen.update(configure=kwargs))
    monkeypatch.setattr(kopf, "run", lambda **kwargs: seen.update(run=kwargs))
    levels = {name: logging.getLogger(name).level for name in ("", "kopf.objects")}
    try:
        yield seen
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


def test_run_hands_kopf_peering_namespaces_and_the_liveness_endpoint(
    kopf_run: dict[str, Any], tmp_path: Path
) -> None:
    token = tmp_path / "token"
    token.write_text("secret\n", encoding="utf-8")
    settings = Settings.from_env({
        "SLASCALER_PROMETHEUS_URL": "http://prometheus:9090/",
        "SLASCALER_PROMETHEUS_BEARER_TOKEN_FILE": str(token),
        "SLASCALER_PEERING": "slascaler",
        "SLASCALER_WATCH_NAMESPACES": "team-a,team-b",
        "SLASCALER_HEALTH_PORT": "8081",
        "SLASCALER_METRICS_PORT": "0",
    })  # fmt: skip
    run(settings)
    kwargs = kopf_run["run"]
    assert kwargs["standalone"] is False and kwargs["peering_name"] == "slascaler"
    assert kwargs["clusterwide"] is False and tuple(kwargs["namespaces"]) == ("team-a", "team-b")
    assert kwargs["liveness_endpoint"] == f"http://{settings.bind_address}:8081/healthz"
    assert kwargs["priority"] == settings.priority
    assert kopf_run["pool_size"] == settings.max_concurrent_evaluations + 8
    assert kopf_run["configure"] == {"verbose": False}
    assert logging.getLogger("kopf.objects").level == logging.WARNING
    registry = kwargs["registry"]
    [timer] = registry._spawning.get_all_handlers()
    assert timer.id == "evaluate" and timer.interval == settings.reconcile_interval_s


def test_run_without_peering_or_namespaces_is_standalone_and_cluster_wide(
    kopf_run: dict[str, Any],
) -> None:
    settings = Settings.from_env({
        "SLASCALER_PROMETHEUS_URL": "http://prometheus:9090/",
        "SLASCALER_HEALTH_PORT": "0",
        "SLASCALER_METRICS_PORT": "0",
        "SLASCALER_LOG_LEVEL": "DEBUG",
        "SLASCALER_GPU_POOLS": "false",
    })  # fmt: skip
    run(settings)
    kwargs = kopf_run["run"]
    assert kwargs["standalone"] is True and kwargs["clusterwide"] is True
    assert kwargs["liveness_endpoint"] is None
    assert kopf_run["configure"] == {"verbose": True}
