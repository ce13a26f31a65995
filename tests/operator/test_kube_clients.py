"""The real Kubernetes client (`kube.clients.Clients`) against a scripted API server.

A loopback HTTP server answers as the API server would (JSON objects and lists, `Status`
errors) and records each request. Every `KubeAPI` / `PoolAPI` call asks for the right
resource with the right verb; the Deployment patch is one strategic-merge patch carrying the
resourceVersion it was decided on, and the status patches are merge patches of the status
subresource, each under slascaler's field manager; the API server's errors become
`kube.errors` exceptions naming the call and the server's message; `from_config` reads a
kubeconfig and keeps the asked number of connections.
"""

from __future__ import annotations

import json
import socket
import threading
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.config import kube_config

from slascaler.kube.api import ContainerPatch, DeploymentPatch
from slascaler.kube.clients import Clients
from slascaler.kube.errors import (
    Conflict,
    Forbidden,
    KubeError,
    NamespaceTerminating,
    NotFound,
    Unreachable,
)

NS = "team-a"
API = "/apis/slascaler.io/v1alpha1"


@dataclass
class Request:
    method: str
    path: str
    query: Mapping[str, list[str]]
    content_type: str | None
    body: Any


@dataclass
class FakeAPIServer:
    """Answers every request with `answer(method, path)` (status, body) and records it."""

    url: str = ""
    requests: list[Request] = field(default_factory=list)
    answer: Callable[[str, str], tuple[int, Any]] = lambda method, path: (200, {"items": []})


@pytest.fixture
def server() -> Iterator[FakeAPIServer]:
    fake = FakeAPIServer()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _serve(self) -> None:
            parsed = urllib.parse.urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            fake.requests.append(
                Request(
                    self.command,
                    parsed.path,
                    urllib.parse.parse_qs(parsed.query),
                    self.headers.get("Content-Type"),
                    json.loads(raw) if raw else None,
                )
            )
            status, body = fake.answer(self.command, parsed.path)
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PATCH = _serve

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    fake.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        yield fake
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


def clients_for(url: str) -> Clients:
    configuration = client.Configuration()
    configuration.host = url
    configuration.retries = False
    return Clients(client.ApiClient(configuration), timeout_s=5)


def status_error(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "status": "Failure", "code": code, "reason": reason,
            "message": message}  # fmt: skip


LISTS: list[tuple[str, Callable[[Clients], Any], str, Mapping[str, list[str]]]] = [
    ("pods", lambda c: c.list_pods(NS, "app=llama"), f"/api/v1/namespaces/{NS}/pods",
     {"labelSelector": ["app=llama"]}),
    ("replicasets", lambda c: c.list_replica_sets(NS, "app=llama"),
     f"/apis/apps/v1/namespaces/{NS}/replicasets", {"labelSelector": ["app=llama"]}),
    ("hpas", lambda c: c.list_horizontal_pod_autoscalers(NS),
     f"/apis/autoscaling/v2/namespaces/{NS}/horizontalpodautoscalers", {}),
    ("scaledobjects", lambda c: c.list_scaled_objects(NS),
     f"/apis/keda.sh/v1alpha1/namespaces/{NS}/scaledobjects", {}),
    ("gpupools", lambda c: c.list_gpu_pools(), f"{API}/gpupools", {}),
    ("slas-everywhere", lambda c: c.list_inference_slas(None), f"{API}/inferenceslas", {}),
    ("slas-in-namespace", lambda c: c.list_inference_slas(NS),
     f"{API}/namespaces/{NS}/inferenceslas", {}),
    ("nodes", lambda c: c.list_nodes("pool=a100"), "/api/v1/nodes",
     {"labelSelector": ["pool=a100"]}),
]  # fmt: skip


@pytest.mark.parametrize(
    ("call", "path", "query"), [x[1:] for x in LISTS], ids=[x[0] for x in LISTS]
)
def test_every_list_asks_for_its_resource_and_returns_the_items(
    server: FakeAPIServer, call: Callable[[Clients], Any], path: str,
    query: Mapping[str, list[str]],
) -> None:  # fmt: skip
    items = [{"metadata": {"name": "one"}}, {"metadata": {"name": "two"}}]
    server.answer = lambda method, asked: (200, {"items": items} if asked == path else {})
    assert call(clients_for(server.url)) == items
    [request] = server.requests
    assert (request.method, request.path) == ("GET", path)
    for key, value in query.items():
        assert request.query[key] == value


READS: list[tuple[str, Callable[[Clients], Any], str]] = [
    ("deployment", lambda c: c.get_deployment(NS, "llama"),
     f"/apis/apps/v1/namespaces/{NS}/deployments/llama"),
    ("node", lambda c: c.get_node("gpu-0"), "/api/v1/nodes/gpu-0"),
    ("sla", lambda c: c.get_inference_sla(NS, "chat"), f"{API}/namespaces/{NS}/inferenceslas/chat"),
    ("quota", lambda c: c.get_resource_quota(NS, "gpus"),
     f"/api/v1/namespaces/{NS}/resourcequotas/gpus"),
]  # fmt: skip


@pytest.mark.parametrize(("call", "path"), [x[1:] for x in READS], ids=[x[0] for x in READS])
def test_every_read_asks_for_its_object_and_returns_it_as_json(
    server: FakeAPIServer, call: Callable[[Clients], Any], path: str
) -> None:
    obj = {"metadata": {"name": "x", "resourceVersion": "7"}, "spec": {"replicas": 3}}
    server.answer = lambda method, asked: (200, obj) if asked == path else (404, {})
    assert call(clients_for(server.url)) == obj
    assert [(r.method, r.path) for r in server.requests] == [("GET", path)]


def test_the_deployment_patch_is_one_strategic_merge_patch_at_the_version_decided_on(
    server: FakeAPIServer,
) -> None:
    written = {"metadata": {"name": "llama", "resourceVersion": "43"}, "spec": {"replicas": 6}}
    server.answer = lambda method, path: (200, written)
    patch = DeploymentPatch(
        resource_version="42",
        replicas=6,
        container=ContainerPatch(
            "engine", command=("vllm", "serve"), args=("--max-num-seqs", "128"),
            env=(("VLLM_MAX_NUM_BATCHED_TOKENS", "4096"),),
        ),
    )  # fmt: skip
    assert clients_for(server.url).patch_deployment(NS, "llama", patch) == written
    [request] = server.requests
    assert (request.method, request.path) == (
        "PATCH", f"/apis/apps/v1/namespaces/{NS}/deployments/llama",
    )  # fmt: skip
    assert request.content_type == "application/strategic-merge-patch+json"
    assert request.query["fieldManager"] == ["slascaler"]
    assert request.body == {
        "metadata": {"resourceVersion": "42"},
        "spec": {
            "replicas": 6,
            "template": {"spec": {"containers": [{
                "name": "engine",
                "command": ["vllm", "serve"],
                "args": ["--max-num-seqs", "128"],
                "env": [{"name": "VLLM_MAX_NUM_BATCHED_TOKENS", "value": "4096"}],
            }]}},
        },
    }  # fmt: skip


def test_a_replicas_only_patch_leaves_the_template_alone(server: FakeAPIServer) -> None:
    server.answer = lambda method, path: (200, {})
    clients_for(server.url).patch_deployment(NS, "llama", DeploymentPatch("42", replicas=2))
    [request] = server.requests
    assert request.body == {"metadata": {"resourceVersion": "42"}, "spec": {"replicas": 2}}


@pytest.mark.parametrize(
    ("call", "path"),
    [
        (lambda c: c.patch_inference_sla_status(NS, "chat", {"regime": "Idle"}),
         f"{API}/namespaces/{NS}/inferenceslas/chat/status"),
        (lambda c: c.patch_gpu_pool_status("a100", {"regime": "Idle"}),
         f"{API}/gpupools/a100/status"),
    ],
    ids=["inferencesla", "gpupool"],
)  # fmt: skip
def test_a_status_is_a_merge_patch_of_the_status_subresource(
    server: FakeAPIServer, call: Callable[[Clients], Any], path: str
) -> None:
    server.answer = lambda method, asked: (200, {})
    call(clients_for(server.url))
    [request] = server.requests
    assert (request.method, request.path) == ("PATCH", path)
    assert request.content_type == "application/merge-patch+json"
    assert request.query["fieldManager"] == ["slascaler"]
    assert request.body == {"status": {"regime": "Idle"}}


EVENT = {
    "metadata": {"name": "chat.1"}, "reason": "ScaleUp", "type": "Normal",
    "involvedObject": {"kind": "InferenceSLA", "namespace": NS, "name": "chat"},
}  # fmt: skip


def test_an_event_is_posted_in_its_namespace(server: FakeAPIServer) -> None:
    server.answer = lambda method, path: (201, {})
    clients_for(server.url).create_event(NS, EVENT)
    [request] = server.requests
    assert (request.method, request.path) == ("POST", f"/api/v1/namespaces/{NS}/events")
    assert request.body == EVENT


@pytest.mark.parametrize(
    ("code", "reason", "error"),
    [(404, "NotFound", NotFound), (409, "Conflict", Conflict), (403, "Forbidden", Forbidden)],
)
def test_the_api_servers_errors_become_kube_errors_with_its_message(
    server: FakeAPIServer, code: int, reason: str, error: type[KubeError]
) -> None:
    message = f'deployments.apps "llama": {reason.lower()} for a reason'
    server.answer = lambda method, path: (code, status_error(code, reason, message))
    with pytest.raises(error) as raised:
        clients_for(server.url).get_deployment(NS, "llama")
    assert raised.value.status == code
    assert raised.value.message == f"reading Deployment {NS}/llama: {message}"


def test_a_create_in_a_namespace_being_deleted_is_told_from_an_rbac_refusal(
    server: FakeAPIServer,
) -> None:
    """The body k8s.io/apiserver's namespace lifecycle admission answers with (a Forbidden
    Status whose details carry the cause NamespaceTerminating)."""
    message = f"events is forbidden: unable to create new content in namespace {NS} because it is being terminated"  # noqa: E501
    status = status_error(403, "Forbidden", message) | {
        "details": {"kind": "events", "causes": [
            {"reason": "NamespaceTerminating", "field": "metadata.namespace",
             "message": f"namespace {NS} is being terminated"}]},
    }  # fmt: skip
    server.answer = lambda method, path: (403, status)
    with pytest.raises(NamespaceTerminating) as raised:
        clients_for(server.url).create_event(NS, EVENT)
    assert raised.value.message == f"posting an Event in {NS}: {message}"

    server.answer = lambda method, path: (403, status_error(403, "Forbidden", "RBAC says no"))
    with pytest.raises(Forbidden) as refused:
        clients_for(server.url).create_event(NS, EVENT)
    assert type(refused.value) is Forbidden


def test_any_other_error_keeps_its_status_and_without_a_message_says_the_http_reason(
    server: FakeAPIServer,
) -> None:
    server.answer = lambda method, path: (422, status_error(422, "Invalid", "spec.replicas: bad"))
    with pytest.raises(KubeError) as raised:
        clients_for(server.url).patch_deployment(NS, "llama", DeploymentPatch("1", replicas=1))
    assert type(raised.value) is KubeError and raised.value.status == 422
    assert raised.value.message == f"patching Deployment {NS}/llama: spec.replicas: bad"

    server.answer = lambda method, path: (500, "<html>the proxy broke</html>")
    with pytest.raises(KubeError) as raised:
        clients_for(server.url).list_pods(NS, "app=llama")
    assert raised.value.status == 500
    assert raised.value.message == f"listing pods in {NS}: Internal Server Error"


def test_a_server_that_refuses_connections_is_unreachable() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(Unreachable, match=r"^reading node gpu-0: "):
        clients_for(f"http://127.0.0.1:{port}").get_node("gpu-0")


def kubeconfig(path: Path, url: str) -> Path:
    path.write_text(
        json.dumps({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "test", "cluster": {"server": url}}],
            "users": [{"name": "test", "user": {"token": "secret-token"}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
            "current-context": "test",
        }),
        encoding="utf-8",
    )  # fmt: skip
    return path


def test_from_config_reads_the_kubeconfig_and_keeps_the_connections_asked_for(
    server: FakeAPIServer, tmp_path: Path
) -> None:
    server.answer = lambda method, path: (200, {"metadata": {"name": "gpu-0"}})
    config = kubeconfig(tmp_path / "config", server.url)
    clients = Clients.from_config(str(config), timeout_s=3, pool_size=12)
    assert clients.timeout_s == 3
    assert clients.api.configuration.host == server.url
    assert clients.api.configuration.connection_pool_maxsize == 12
    assert clients.get_node("gpu-0") == {"metadata": {"name": "gpu-0"}}


def test_outside_a_pod_from_config_falls_back_to_kubeconfig(
    server: FakeAPIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    # What $KUBECONFIG sets (the library reads the variable once, when it is imported).
    path = str(kubeconfig(tmp_path / "config", server.url))
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", path)
    clients = Clients.from_config()
    assert clients.api.configuration.host == server.url
