"""Kubernetes API faults: an API server that never answers, and errors where Kopf calls in.

- Every call of the real client (`kube.clients.Clients`) carries a request timeout: against
  a server that accepts connections and never answers, a call gives up within it as
  `Unreachable` (never blocks a worker for ever).
- One InferenceSLA's evaluation that meets such a server gives up with a condition
  (Ready=False, KubernetesError, naming the timeout), the status written, and the next one
  recovers.
- `Operator.evaluate` (the Kopf handler's body) survives an unreachable or refusing API
  server on its first read: a warning in the log, no exception for Kopf to print.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from test_reconcile import SLA, raises

from edge import NAME, NAMESPACE, SLA_NAME, Edge
from slascaler.kube.api import Json
from slascaler.kube.clients import Clients
from slascaler.kube.errors import KubeError, Unreachable
from slascaler.wiring import Operator

TIMEOUT_S = 0.5


@pytest.fixture
def frozen_server() -> Iterator[str]:
    """An address that accepts TCP connections and never answers (a SIGSTOPped server)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=2)
        for connection in accepted:
            connection.close()
        listener.close()


def frozen_clients(url: str) -> Clients:
    configuration = client.Configuration()
    configuration.host = url
    configuration.retries = False
    return Clients(client.ApiClient(configuration), timeout_s=TIMEOUT_S)


@pytest.mark.parametrize(
    "call",
    [
        lambda c: c.get_deployment(NAMESPACE, NAME),
        lambda c: c.list_replica_sets(NAMESPACE, "app=llama"),
        lambda c: c.list_inference_slas(NAMESPACE),
        lambda c: c.get_node("gpu-node-0"),
        lambda c: c.patch_inference_sla_status(NAMESPACE, SLA_NAME, {"regime": "Idle"}),
    ],
    ids=["get", "list", "list-custom", "node", "status"],
)
def test_every_call_gives_up_at_its_timeout(frozen_server: str, call: Any) -> None:
    clients = frozen_clients(frozen_server)
    started = time.monotonic()
    with pytest.raises(Unreachable, match=r"timed out|Timeout"):
        call(clients)
    assert time.monotonic() - started < TIMEOUT_S * 6


class FrozenReads:
    """The in-memory cluster, except that reading the target goes to a frozen server."""

    def __init__(self, edge: Edge, frozen: Clients) -> None:
        self.edge, self.frozen, self.frozen_reads = edge, frozen, True

    def __getattr__(self, name: str) -> Any:
        return getattr(self.edge.cluster, name)

    def get_deployment(self, namespace: str, name: str) -> Json:
        if self.frozen_reads:
            return self.frozen.get_deployment(namespace, name)
        return self.edge.cluster.get_deployment(namespace, name)


def test_an_evaluation_that_meets_a_frozen_server_gives_up_with_a_condition(
    frozen_server: str,
) -> None:
    edge = Edge(SLA)
    api = FrozenReads(edge, frozen_clients(frozen_server))
    edge.reconciler.api = api  # type: ignore[assignment]
    started = time.monotonic()
    assert edge.reconcile().decision is None
    assert time.monotonic() - started < TIMEOUT_S * 6
    ready = edge.condition("Ready")
    assert (ready["status"], ready["reason"]) == ("False", "KubernetesError")
    assert "reading the target failed" in ready["message"] and "timed out" in ready["message"]

    api.frozen_reads = False  # the API server answers again
    edge.now += 15
    assert edge.reconcile().decision is not None
    assert edge.condition("Ready")["status"] == "True"


@pytest.mark.parametrize(
    "error",
    [Unreachable("reading InferenceSLA: ReadTimeoutError: timed out"), KubeError(500, "etcd")],
    ids=["unreachable", "refused"],
)
def test_the_handler_survives_an_api_error_on_its_first_read(
    error: KubeError, caplog: pytest.LogCaptureFixture
) -> None:
    edge = Edge(SLA)
    operator = Operator(edge.reconciler, edge.cluster)
    uid = edge.sla()["metadata"]["uid"]
    edge.cluster.fail("get_inference_sla", raises(error))
    with caplog.at_level(logging.WARNING, logger="slascaler"):
        operator.evaluate(NAMESPACE, SLA_NAME, uid)  # no exception reaches Kopf
    assert any("not evaluated" in r.getMessage() and r.exc_info is None for r in caplog.records)
    assert "status" not in edge.sla(), "nothing was evaluated"
    operator.evaluate(NAMESPACE, SLA_NAME, uid)  # the next interval
    assert edge.condition("Ready")["status"] == "True"
