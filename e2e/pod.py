"""The chart's operator container run from the operator image, as a kubelet would run it.

`ContainerProcess` is an `OperatorProcess` whose command is the image's entrypoint, started by
`e2e/pod_launch.py` in new mount and PID namespaces: the image's root filesystem (extracted
by `e2e.image`) as root, read-only when the container's securityContext says so, /tmp the
pod's emptyDir, the ServiceAccount token, CA and namespace where the in-cluster configuration
reads them (/var/run/secrets/kubernetes.io/serviceaccount), the pod's runAsUser/runAsGroup,
and exactly the container's environment: the image's Env, then the pod's, then what a kubelet
adds (KUBERNETES_SERVICE_HOST/PORT pointing at the API server, HOSTNAME). As for every
operator process of the suite, only the listen ports differ from the pod's: the network is the
host's, so it listens on free loopback ports.

Needs root (mounts, chroot). Used by the stand-in kubelet (`e2e.chart.OperatorKubelet`) and
`e2e/tests/test_image.py`.
"""

from __future__ import annotations

import base64
import json
import shutil
import sys
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from e2e.image import OperatorImage
from e2e.operator import OperatorProcess

LAUNCH = Path(__file__).resolve().parent / "pod_launch.py"


@dataclass(frozen=True)
class ServiceAccountFiles:
    """What a kubelet projects into a pod for its ServiceAccount."""

    token: str
    ca: bytes
    namespace: str

    def write(self, directory: Path) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        directory.chmod(0o755)
        for name, data in (
            ("token", self.token.encode()),
            ("ca.crt", self.ca),
            ("namespace", self.namespace.encode()),
        ):
            path = directory / name
            path.write_bytes(data)
            path.chmod(0o644)
        return directory


@dataclass(frozen=True)
class ApiEndpoint:
    host: str
    port: int
    ca: bytes

    @classmethod
    def of(cls, kubeconfig: Path) -> ApiEndpoint:
        """The current cluster of a kubeconfig: its server's host and port, and its CA."""
        loaded = yaml.safe_load(kubeconfig.read_text(encoding="utf-8"))
        context = next(c for c in loaded["contexts"] if c["name"] == loaded["current-context"])
        cluster = next(
            c["cluster"] for c in loaded["clusters"] if c["name"] == context["context"]["cluster"]
        )
        url = urllib.parse.urlsplit(cluster["server"])
        if "certificate-authority-data" in cluster:
            ca = base64.b64decode(cluster["certificate-authority-data"])
        else:
            ca = Path(cluster["certificate-authority"]).read_bytes()
        return cls(url.hostname or "127.0.0.1", url.port or 443, ca)


class ContainerProcess(OperatorProcess):
    """The operator container of one pod, from the image (restartable, like a container)."""

    def __init__(
        self,
        image: OperatorImage,
        pod_dir: Path,
        api: ApiEndpoint,
        service_account: ServiceAccountFiles,
        settings: Mapping[str, str],
        log: Path,
        user: tuple[int, int] | None = None,
        read_only_root: bool = True,
        hostname: str = "",
    ) -> None:
        super().__init__(None, settings, log)
        self.image, self.pod_dir, self.api = image, pod_dir, api
        self.user = user or image.user
        self.read_only_root = read_only_root
        self.hostname = hostname
        pod_dir.mkdir(parents=True, exist_ok=True)
        self.tmp = pod_dir / "tmp"  # the chart's emptyDir at /tmp, kept across restarts
        self.tmp.mkdir(exist_ok=True)
        self.tmp.chmod(0o777)
        self.secrets = service_account.write(pod_dir / "serviceaccount")

    def container_env(self) -> dict[str, str]:
        return {
            "HOME": "/",
            **self.image.env,
            **self.settings,
            "SLASCALER_BIND_ADDRESS": "127.0.0.1",
            "SLASCALER_HEALTH_PORT": str(self.health_port),
            "SLASCALER_METRICS_PORT": str(self.metrics_port),
            "KUBERNETES_SERVICE_HOST": self.api.host,
            "KUBERNETES_SERVICE_PORT": str(self.api.port),
            "HOSTNAME": self.hostname,
        }

    def env(self) -> dict[str, str]:
        return {}  # the launcher's own; the container gets container_env() and nothing else

    def command(self) -> list[str]:
        uid, gid = self.user
        spec = {
            "podDir": str(self.pod_dir),
            "rootfs": str(self.image.rootfs),
            "readOnlyRootFilesystem": self.read_only_root,
            "tmp": str(self.tmp),
            "serviceAccount": str(self.secrets),
            "uid": uid,
            "gid": gid,
            "env": self.container_env(),
            "argv": self.image.entrypoint,
        }
        path = self.pod_dir / "container.json"
        path.write_text(json.dumps(spec), encoding="utf-8")
        return [
            "unshare", "--mount", "--pid", "--fork", "--kill-child", "--propagation", "private",
            sys.executable, str(LAUNCH), str(path),
        ]  # fmt: skip

    def container_pid(self) -> int:
        """The host's pid of the container's process (PID 1 of its namespace)."""
        assert self.service is not None and self.service.process is not None
        unshare = self.service.process.pid
        children = Path(f"/proc/{unshare}/task/{unshare}/children").read_text().split()
        assert len(children) == 1, children
        return int(children[0])

    def proc(self, name: str) -> str:
        """/proc/<container pid>/<name>, as the host sees it."""
        return Path(f"/proc/{self.container_pid()}/{name}").read_text(errors="replace")

    def mount_options(self, mount_point: str) -> set[str]:
        """The mount options of a mount point in the container's view (the topmost mount)."""
        found: set[str] | None = None
        for line in self.proc("mountinfo").splitlines():
            fields = line.split()
            if fields[4] == mount_point:
                found = set(fields[5].split(","))
        assert found is not None, f"nothing mounted at {mount_point}"
        return found

    def written_outside_tmp(self) -> list[str]:
        """Paths the container created or changed in the image's root filesystem."""
        upper = self.pod_dir / "upper"
        return sorted(str(p.relative_to(upper)) for p in upper.rglob("*")) if upper.exists() else []

    def remove(self) -> None:
        """The pod is gone: stop the container and delete its directories."""
        self.stop()
        shutil.rmtree(self.pod_dir, ignore_errors=True)
