"""Small Kubernetes helpers for the e2e tests: clients, manifests, pod states, kubectl.

Manifests are plain dicts; `Kube` extends the operator's own `Clients` of one identity
(admin, or a ServiceAccount's token) with what the tests need: `kubectl` as that identity,
GPU Deployments, pods of a Deployment and their states. Used by `e2e/tests` and the playground.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config

from e2e.cluster.processes import poll
from slascaler.kube.clients import Clients

GPU = "nvidia.com/gpu"


@dataclass(frozen=True)
class Kube(Clients):
    """The operator's API clients for one identity, plus kubectl and helpers with the same
    kubeconfig."""

    kubeconfig: Path
    bin_dir: Path

    @classmethod
    def connect(cls, kubeconfig: Path, bin_dir: Path) -> Kube:
        api = config.new_client_from_config(config_file=str(kubeconfig))
        return cls(api, kubeconfig, bin_dir)

    @property
    def rbac(self) -> client.RbacAuthorizationV1Api:
        return client.RbacAuthorizationV1Api(self.api)

    def kubectl(
        self, *args: str, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl as this identity; with check, a failure raises with its stderr."""
        result = subprocess.run(
            [str(self.bin_dir / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr}")
        return result

    def as_token(self, token: str, path: Path) -> Kube:
        """The same cluster as another identity: a kubeconfig with a bearer token."""
        return Kube.connect(token_kubeconfig(self.kubeconfig, token, path), self.bin_dir)

    def apply(self, *documents: Mapping[str, Any], namespace: str | None = None) -> None:
        text = yaml.safe_dump_all([dict(d) for d in documents])
        extra = ["-n", namespace] if namespace else []
        self.kubectl("apply", *extra, "-f", "-", stdin=text)

    def get_json(self, *args: str) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(self.kubectl("get", *args, "-o", "json").stdout)
        return result

    def pods(self, namespace: str, selector: str) -> list[client.V1Pod]:
        items: list[client.V1Pod] = self.core.list_namespaced_pod(
            namespace, label_selector=selector
        ).items
        return items


def token_kubeconfig(base: Path, token: str, path: Path) -> Path:
    """A kubeconfig for `base`'s current cluster that authenticates with `token`."""
    loaded = yaml.safe_load(base.read_text(encoding="utf-8"))
    context = next(c for c in loaded["contexts"] if c["name"] == loaded["current-context"])
    cluster = next(c for c in loaded["clusters"] if c["name"] == context["context"]["cluster"])
    config_out = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster],
        "users": [{"name": "token", "user": {"token": token}}],
        "contexts": [{"name": "token", "context": {"cluster": cluster["name"], "user": "token"}}],
        "current-context": "token",
    }
    path.write_text(yaml.safe_dump(config_out), encoding="utf-8")
    path.chmod(0o600)
    return path


def is_ready(pod: client.V1Pod) -> bool:
    if pod.metadata.deletion_timestamp is not None or pod.status.phase != "Running":
        return False
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def is_unschedulable(pod: client.V1Pod) -> bool:
    return pod.status.phase == "Pending" and any(
        c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
        for c in pod.status.conditions or []
    )


def gpu_deployment(
    name: str,
    replicas: int,
    args: Sequence[str] = (),
    gpus: int = 1,
    image: str = "vllm/vllm-openai:v0.11.0",
    labels: Mapping[str, str] | None = None,
    max_unavailable: int | str = "25%",
) -> dict[str, Any]:
    """A Deployment like a vLLM server's: one engine container asking for GPUs."""
    selector = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": dict(labels or selector)},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": selector},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": max_unavailable, "maxSurge": "25%"},
            },
            "template": {
                "metadata": {"labels": selector},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "engine",
                            "image": image,
                            "args": list(args),
                            "env": [{"name": "HF_HOME", "value": "/models"}],
                            "resources": {"limits": {GPU: str(gpus)}},
                        }
                    ],
                },
            },
        },
    }


def custom_resource_definition(
    group: str, kind: str, plural: str, version: str, schema: Mapping[str, Any]
) -> dict[str, Any]:
    """A namespaced CRD with one served and stored version of the given OpenAPI schema."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
            "versions": [
                {"name": version, "served": True, "storage": True,
                 "schema": {"openAPIV3Schema": dict(schema)}},
            ],
        },
    }  # fmt: skip


def node_gpus(kube: Kube) -> tuple[int, int]:
    """(allocatable nvidia.com/gpu over nodes, GPUs requested by pods bound to nodes), once no
    namespace or pod is terminating (an earlier test's namespace may still be going away)."""

    def settled() -> bool:
        namespaces = kube.core.list_namespace().items
        pods = kube.core.list_pod_for_all_namespaces().items
        return not any(n.status.phase == "Terminating" for n in namespaces) and not any(
            p.metadata.deletion_timestamp for p in pods
        )

    poll(settled, timeout=90, what="no namespace or pod terminating")
    total = sum(
        int((n.status.allocatable or {}).get(GPU, "0")) for n in kube.core.list_node().items
    )
    used = 0
    for pod in kube.core.list_pod_for_all_namespaces().items:
        if not pod.spec.node_name or pod.status.phase in ("Succeeded", "Failed"):
            continue
        for container in pod.spec.containers:
            limits = (container.resources.limits or {}) if container.resources else {}
            used += int(limits.get(GPU, "0"))
    return total, used
