"""A real Kubernetes control plane on 127.0.0.1, without Docker: etcd, kube-apiserver,
kube-controller-manager, kube-scheduler, and KWOK for fake GPU nodes.

- The API server authenticates client certificates and service-account tokens (signed with
  the cluster's own key), authorizes with RBAC, and serves on a free loopback port.
- The controller manager runs the default controllers (Deployments, ReplicaSets, garbage
  collection, service accounts and their tokens, node lifecycle), each with its own
  service-account credentials.
- The scheduler places pods on nodes that KWOK manages; each node has `nvidia.com/gpu`
  capacity, so GPU exhaustion leaves pods Pending with the scheduler's Unschedulable reason.
- KWOK's stages make a scheduled pod Running at once and Ready after `ready_delay_s` (the
  stand-in for model loading), and delete pods when Kubernetes asks.

Every log goes to a file under the cluster's directory; `down` stops every process and removes
the directory. Used by the e2e fixtures and by `python -m e2e.cluster`.
"""

from __future__ import annotations

import json
import shutil
import ssl
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from e2e.cluster.pki import Pki, make_pki
from e2e.cluster.processes import Fatal, Service, free_port, poll

HERE = Path(__file__).resolve().parent
SERVICE_CIDR = "10.96.0.0/16"
POD_CIDR = "10.244.0.0/16"
NODE_LABEL = "slascaler.io/fake-gpu-node"


@dataclass(frozen=True)
class ClusterConfig:
    nodes: int = 2
    gpus_per_node: int = 4
    ready_delay_s: float = 3.0
    pods_per_node: int = 110
    # The controllers' and scheduler's client rate limit (their default is 20/s, 50/s): the
    # scale benchmark creates a thousand Deployments at once.
    api_qps: int | None = None


@dataclass
class LocalCluster:
    """One local control plane; `up()` starts it, `down()` leaves nothing behind."""

    bin_dir: Path
    directory: Path
    config: ClusterConfig = field(default_factory=ClusterConfig)
    services: dict[str, Service] = field(default_factory=dict)
    api_port: int = 0
    pki: Pki | None = None

    @property
    def kubeconfig(self) -> Path:
        return self.directory / "admin.kubeconfig"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    def _bin(self, name: str) -> str:
        return str(self.bin_dir / name)

    def _log(self, name: str) -> Path:
        return self.directory / "logs" / f"{name}.log"

    def _write_kubeconfig(self, path: Path, user: str) -> Path:
        assert self.pki is not None
        client = self.pki.clients[user]
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "slascaler-e2e",
                    "cluster": {"server": self.server, "certificate-authority": str(self.pki.ca)},
                }
            ],
            "users": [
                {
                    "name": user,
                    "user": {
                        "client-certificate": str(client.cert),
                        "client-key": str(client.key),
                    },
                }
            ],
            "contexts": [
                {"name": "slascaler-e2e", "context": {"cluster": "slascaler-e2e", "user": user}}
            ],
            "current-context": "slascaler-e2e",
        }
        path.write_text(yaml.safe_dump(config), encoding="utf-8")
        return path

    def _start(self, name: str, argv: list[str]) -> Service:
        service = Service(name, argv, self._log(name)).start()
        self.services[name] = service
        return service

    def _https_ok(self, path: str) -> bool:
        assert self.pki is not None
        admin = self.pki.clients["admin"]
        context = ssl.create_default_context(cafile=str(self.pki.ca))
        context.load_cert_chain(str(admin.cert), str(admin.key))
        with urllib.request.urlopen(f"{self.server}{path}", context=context, timeout=2) as reply:
            return bool(reply.status == 200)

    def _alive_and(self, check: Callable[[], bool]) -> Callable[[], bool]:
        """`check`, failing at once if a process of the cluster has died."""

        def checked() -> bool:
            self._check_alive()
            return check()

        return checked

    def _check_alive(self) -> None:
        for service in self.services.values():
            if not service.running():
                raise Fatal(
                    f"{service.name} exited; last lines of {service.log}:\n{service.tail()}"
                )

    def up(self) -> LocalCluster:
        self.directory.mkdir(parents=True, exist_ok=True)
        pki = self.pki = make_pki(self.directory / "pki")
        etcd_port, peer_port, self.api_port = free_port(), free_port(), free_port()
        self._start(
            "etcd",
            [
                self._bin("etcd"),
                "--name=e2e",
                f"--data-dir={self.directory / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{etcd_port}",
                f"--advertise-client-urls=http://127.0.0.1:{etcd_port}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-cluster=e2e=http://127.0.0.1:{peer_port}",
                "--listen-metrics-urls=",
                "--unsafe-no-fsync",  # a throwaway test store: durability costs time for nothing
                "--log-level=warn",
            ],
        )
        self._start(
            "kube-apiserver",
            [
                self._bin("kube-apiserver"),
                f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.api_port}",
                f"--tls-cert-file={pki.serving_cert}",
                f"--tls-private-key-file={pki.serving_key}",
                f"--client-ca-file={pki.ca}",
                # Published for the controllers' own authentication (no front proxy is used).
                f"--requestheader-client-ca-file={pki.ca}",
                "--requestheader-allowed-names=front-proxy-client",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={pki.service_account_public}",
                f"--service-account-signing-key-file={pki.service_account_key}",
                "--authorization-mode=Node,RBAC",
                "--anonymous-auth=false",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--allow-privileged=true",
                # The kubernetes Service's endpoint may not be a loopback address.
                "--endpoint-reconciler-type=none",
                "--profiling=false",
                "--v=1",
            ],
        )
        poll(
            self._alive_and(lambda: self._https_ok("/readyz")),
            timeout=90,
            what="kube-apiserver /readyz",
            describe=lambda: self.services["kube-apiserver"].tail(15),
        )
        self._write_kubeconfig(self.kubeconfig, "admin")
        cm_config = self._write_kubeconfig(
            self.directory / "controller-manager.kubeconfig", "controller-manager"
        )
        self._start(
            "kube-controller-manager",
            [
                self._bin("kube-controller-manager"),
                f"--kubeconfig={cm_config}",
                f"--authentication-kubeconfig={cm_config}",
                f"--authorization-kubeconfig={cm_config}",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                "--leader-elect=false",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={pki.service_account_key}",
                f"--root-ca-file={pki.ca}",
                f"--cluster-cidr={POD_CIDR}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--controllers=*,-node-ipam-controller",
                *self._rate_limit(),
                "--v=1",
            ],
        )
        scheduler_config = self._write_kubeconfig(
            self.directory / "scheduler.kubeconfig", "scheduler"
        )
        self._start(
            "kube-scheduler",
            [
                self._bin("kube-scheduler"),
                f"--kubeconfig={scheduler_config}",
                f"--authentication-kubeconfig={scheduler_config}",
                f"--authorization-kubeconfig={scheduler_config}",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                "--leader-elect=false",
                *self._rate_limit(),
                "--v=1",
            ],
        )
        stages = self.directory / "kwok-stages.yaml"
        stages.write_text(
            (HERE / "kwok-stages.yaml")
            .read_text(encoding="utf-8")
            .replace("__READY_DELAY_MS__", str(round(self.config.ready_delay_s * 1000))),
            encoding="utf-8",
        )
        self._start(
            "kwok",
            [
                self._bin("kwok"),
                f"--kubeconfig={self.kubeconfig}",
                f"--config={stages}",
                f"--manage-nodes-with-label-selector={NODE_LABEL}=true",
                "--cidr=10.244.0.1/16",
                "--node-ip=127.0.0.1",
                f"--server-address=127.0.0.1:{free_port()}",
                "--node-lease-duration-seconds=40",
            ],
        )
        self._create_nodes()
        self.wait_ready()
        return self

    def _rate_limit(self) -> list[str]:
        qps = self.config.api_qps
        return [] if qps is None else [f"--kube-api-qps={qps}", f"--kube-api-burst={2 * qps}"]

    def _kubectl_apply(self, documents: list[dict[str, object]]) -> None:
        import subprocess

        text = "\n---\n".join(json.dumps(d) for d in documents)
        subprocess.run(
            [self._bin("kubectl"), f"--kubeconfig={self.kubeconfig}", "apply", "-f", "-"],
            input=text.encode(),
            check=True,
            capture_output=True,
        )

    def _create_nodes(self) -> None:
        resources = {
            "cpu": "64",
            "memory": "512Gi",
            "pods": str(self.config.pods_per_node),
            "nvidia.com/gpu": str(self.config.gpus_per_node),
        }
        nodes: list[dict[str, object]] = []
        for index in range(self.config.nodes):
            name = f"gpu-node-{index}"
            nodes.append(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {
                        "name": name,
                        "labels": {
                            NODE_LABEL: "true",
                            "kubernetes.io/hostname": name,
                            "kubernetes.io/os": "linux",
                            "nvidia.com/gpu.present": "true",
                            # As NVIDIA's GPU feature discovery labels an A100 80GB node: the
                            # engines' defaults depend on them (vLLM: 256 / 2048 on an A100).
                            "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
                            "nvidia.com/gpu.memory": "81920",
                        },
                        "annotations": {"kwok.x-k8s.io/node": "fake"},
                    },
                    "status": {"capacity": resources, "allocatable": resources},
                }
            )
        self._kubectl_apply(nodes)

    def _kubectl_json(self, *args: str) -> dict[str, object]:
        import subprocess

        out = subprocess.run(
            [self._bin("kubectl"), f"--kubeconfig={self.kubeconfig}", *args, "-o", "json"],
            check=True,
            capture_output=True,
        ).stdout
        result: dict[str, object] = json.loads(out)
        return result

    def _nodes_ready(self) -> bool:
        items = self._kubectl_json("get", "nodes")["items"]
        assert isinstance(items, list)
        ready = [
            n
            for n in items
            if any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in n.get("status", {}).get("conditions", [])
            )
        ]
        return len(ready) == self.config.nodes

    def _default_service_account(self) -> bool:
        return bool(self._kubectl_json("get", "serviceaccount", "default", "-n", "default"))

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Nodes Ready (KWOK), and the controller manager making service accounts."""
        for what, check in (
            ("fake GPU nodes Ready", self._nodes_ready),
            ("the default ServiceAccount", self._default_service_account),
        ):
            poll(
                self._alive_and(check),
                timeout=timeout,
                what=what,
                describe=self.log_tails,
            )

    def log_tails(self, lines: int = 15) -> str:
        return "\n".join(
            f"--- {name} ({service.log}) ---\n{service.tail(lines)}"
            for name, service in self.services.items()
        )

    def down(self) -> None:
        for name in reversed(list(self.services)):
            # A throwaway cluster: no graceful drain of watches (the API server would wait
            # for up to a minute), nothing in etcd worth keeping.
            self.services[name].stop(grace=2.0)
        self.services.clear()
        shutil.rmtree(self.directory, ignore_errors=True)
