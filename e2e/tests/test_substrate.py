"""The substrate is real: scheduling on GPU nodes, GPU exhaustion, rolling updates, CRD
validation with CEL, RBAC enforcement, and Prometheus scraping a live endpoint."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from e2e.cluster.processes import poll
from e2e.cluster.prometheus import PrometheusServer, Target
from e2e.kube import (
    GPU,
    Kube,
    custom_resource_definition,
    gpu_deployment,
    is_ready,
    is_unschedulable,
    node_gpus,
)
from kubernetes import client
from kubernetes.client.rest import ApiException


def test_gpu_pods_run_ready_on_fake_gpu_nodes(kube: Kube, namespace: str) -> None:
    kube.apply(gpu_deployment("llama", 3), namespace=namespace)

    def ready_pods() -> list[client.V1Pod]:
        pods = kube.pods(namespace, "app=llama")
        return pods if len(pods) == 3 and all(is_ready(p) for p in pods) else []

    pods = poll(ready_pods, timeout=60, what="3 Ready pods")
    nodes = {n.metadata.name: n for n in kube.core.list_node().items}
    for pod in pods:
        node = nodes[pod.spec.node_name]
        assert int(node.status.allocatable[GPU]) >= 1
        assert pod.status.pod_ip, "KWOK gives each pod an IP"

    # The Deployment controller counts pod readiness after the kubelet reports it, so its
    # status may lag the pods by a sync: wait for it rather than read it once.
    def deployment_ready() -> bool:
        status = kube.apps.read_namespaced_deployment("llama", namespace).status
        return status.ready_replicas == 3 and status.available_replicas == 3

    poll(deployment_ready, timeout=30, what="the Deployment to count 3 ready replicas")


def test_pods_beyond_the_free_gpus_stay_pending_unschedulable(kube: Kube, namespace: str) -> None:
    total, used = node_gpus(kube)
    free = total - used
    assert free >= 1, f"no free GPU to start from ({used} of {total} in use)"
    kube.apply(gpu_deployment("big", free + 2), namespace=namespace)

    def settled() -> tuple[list[client.V1Pod], list[client.V1Pod]] | None:
        pods = kube.pods(namespace, "app=big")
        ready = [p for p in pods if is_ready(p)]
        stuck = [p for p in pods if is_unschedulable(p)]
        return (ready, stuck) if len(ready) == free and len(stuck) == 2 else None

    _, stuck = poll(settled, timeout=60, what=f"{free} Ready and 2 Unschedulable pods")
    for pod in stuck:
        message = next(c.message for c in pod.status.conditions if c.type == "PodScheduled")
        assert "Insufficient nvidia.com/gpu" in message


def test_changing_an_arg_rolls_the_deployment(kube: Kube, namespace: str) -> None:
    kube.apply(gpu_deployment("roll", 2, args=["--max-num-seqs", "64"]), namespace=namespace)
    first = poll(
        lambda: (
            {p.metadata.name for p in kube.pods(namespace, "app=roll") if is_ready(p)}
            if len([p for p in kube.pods(namespace, "app=roll") if is_ready(p)]) == 2
            else None
        ),
        timeout=60,
        what="2 Ready pods",
    )
    kube.apply(gpu_deployment("roll", 2, args=["--max-num-seqs", "32"]), namespace=namespace)

    def rolled() -> list[client.V1Pod]:
        pods = kube.pods(namespace, "app=roll")
        new = [p for p in pods if p.spec.containers[0].args == ["--max-num-seqs", "32"]]
        done = len(pods) == 2 and len(new) == 2 and all(is_ready(p) for p in new)
        return new if done else []

    new = poll(rolled, timeout=90, what="the rollout to --max-num-seqs 32")
    assert not first & {p.metadata.name for p in new}, "every old pod was replaced"
    replica_sets = kube.apps.list_namespaced_replica_set(namespace, label_selector="app=roll")
    assert len(replica_sets.items) == 2  # the old one kept at 0 for rollback


CRD = custom_resource_definition(
    "smoke.slascaler.io", "Range", "ranges", "v1",
    {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {"low": {"type": "integer"}, "high": {"type": "integer"}},
                "x-kubernetes-validations": [
                    {"rule": "self.low <= self.high", "message": "low must not exceed high"}
                ],
            }
        },
    },
)  # fmt: skip


@pytest.fixture
def range_crd(kube: Kube) -> Iterator[None]:
    kube.apply(CRD)
    poll(
        lambda: kube.kubectl("get", "ranges", "-A", check=False).returncode == 0,
        timeout=30,
        what="the Range CRD to be served",
    )
    yield
    kube.kubectl("delete", "crd", CRD["metadata"]["name"], "--wait=false")


def test_crd_cel_rule_refuses_a_bad_object(kube: Kube, namespace: str, range_crd: None) -> None:
    good = {"apiVersion": "smoke.slascaler.io/v1", "kind": "Range",
            "metadata": {"name": "ok"}, "spec": {"low": 1, "high": 2}}  # fmt: skip
    kube.apply(good, namespace=namespace)
    bad = {**good, "metadata": {"name": "bad"}, "spec": {"low": 3, "high": 2}}
    with pytest.raises(ApiException) as refused:
        kube.custom.create_namespaced_custom_object(
            "smoke.slascaler.io", "v1", namespace, "ranges", bad
        )
    assert refused.value.status == 422
    assert "low must not exceed high" in refused.value.body
    typed = {**good, "metadata": {"name": "typed"}, "spec": {"low": "one", "high": 2}}
    with pytest.raises(ApiException) as wrong_type:
        kube.custom.create_namespaced_custom_object(
            "smoke.slascaler.io", "v1", namespace, "ranges", typed
        )
    assert "spec.low" in wrong_type.value.body


def test_rbac_is_enforced_for_a_service_account(kube: Kube, namespace: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    kube.core.create_namespaced_service_account(namespace, {"metadata": {"name": "reader"}})
    kube.rbac.create_namespaced_role(
        namespace,
        {
            "metadata": {"name": "pod-reader"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}],
        },
    )
    kube.rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "reader-reads-pods"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "pod-reader",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
        },
    )
    token = kube.kubectl("create", "token", "reader", "-n", namespace).stdout.strip()
    reader = kube.as_token(token, tmp_path / "reader.kubeconfig")
    assert reader.core.list_namespaced_pod(namespace).items == []
    with pytest.raises(ApiException) as forbidden:
        reader.core.list_namespaced_secret(namespace)
    assert forbidden.value.status == 403
    with pytest.raises(ApiException) as elsewhere:
        reader.core.list_namespaced_pod("default")
    assert elsewhere.value.status == 403
    with pytest.raises(ApiException) as writes:
        reader.core.delete_collection_namespaced_pod(namespace)
    assert writes.value.status == 403


class _Gauge(BaseHTTPRequestHandler):
    value = 42.5

    def do_GET(self) -> None:
        body = f'# TYPE smoke_value gauge\nsmoke_value{{source="test"}} {self.value}\n'.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return


def test_prometheus_scrapes_a_local_endpoint(prometheus: PrometheusServer) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Gauge)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        address = f"127.0.0.1:{server.server_address[1]}"
        prometheus.set_targets("static", [Target(address, {"namespace": "smoke", "pod": "p-1"})])
        result = poll(
            lambda: prometheus.query('smoke_value{namespace="smoke",pod="p-1"}'),
            timeout=30,
            what="smoke_value in Prometheus",
        )
        assert float(result[0]["value"][1]) == 42.5
        assert result[0]["metric"]["source"] == "test"
    finally:
        prometheus.set_targets("static", [])
        server.shutdown()
        server.server_close()
