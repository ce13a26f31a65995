"""The Helm chart on the e2e cluster: `helm install/upgrade/uninstall`, and a stand-in kubelet
for the operator's pod.

KWOK pods run no containers, so `OperatorKubelet` does what a kubelet would for the chart's
operator pod: for the Ready pod of the release's Deployment it runs the operator image's
entrypoint from the image's root filesystem (`e2e.pod.ContainerProcess`: read-only root,
/tmp as the chart's emptyDir, the pod's runAsUser and runAsGroup) with that pod's environment
(as rendered by the chart, so a `helm upgrade` that changes a value changes the process),
authenticated by a token bound to that pod and its ServiceAccount, mounted where the
in-cluster configuration reads it (so the chart's RBAC is exactly what the process may do;
the token dies with the pod). When the pod is replaced (an upgrade rolls it) the old process
stops and a new one starts; when the process dies (SIGKILL), it is restarted, as
restartPolicy Always would. Only the listen ports differ: a pod's IP does not exist here, so
the process listens on free loopback ports; the kubelet registers its metrics port as a
Prometheus target (job `operator`, with the pod's `namespace` and `pod` labels), as the
chart's ServiceMonitor would. Without an image (`image=None`) it runs `slascaler run` from
this virtualenv instead.

Used by `e2e/tests/test_scenarios.py`.
"""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from e2e.cluster.processes import poll
from e2e.cluster.prometheus import PrometheusServer, Target
from e2e.image import OperatorImage
from e2e.kube import Kube, is_ready
from e2e.operator import OperatorProcess
from e2e.pod import ApiEndpoint, ContainerProcess, ServiceAccountFiles

CHART = Path(__file__).resolve().parents[1] / "charts" / "slascaler"
LISTEN = ("SLASCALER_HEALTH_PORT", "SLASCALER_METRICS_PORT", "SLASCALER_BIND_ADDRESS")


class HelmRelease:
    def __init__(self, kube: Kube, name: str, namespace: str, workdir: Path) -> None:
        self.kube, self.name, self.namespace, self.workdir = kube, name, namespace, workdir

    def helm(self, *args: str) -> str:
        result = subprocess.run(
            [str(self.kube.bin_dir / "helm"), f"--kubeconfig={self.kube.kubeconfig}", *args],
            capture_output=True,
            text=True,
            timeout=180,
        )
        if result.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed:\n{result.stderr}")
        return result.stdout

    def _values_file(self, values: dict[str, Any]) -> Path:
        path = self.workdir / f"values-{time.monotonic_ns()}.yaml"
        path.write_text(yaml.safe_dump(values), encoding="utf-8")
        return path

    def _release(self, verb: str, values: dict[str, Any], *extra: str) -> str:
        return self.helm(
            verb, self.name, str(CHART), "--namespace", self.namespace, *extra,
            "-f", str(self._values_file(values)), "--wait", "--timeout=90s",
        )  # fmt: skip

    def install(self, values: dict[str, Any]) -> str:
        return self._release("install", values, "--create-namespace")

    def upgrade(self, values: dict[str, Any]) -> str:
        return self._release("upgrade", values)

    def uninstall(self) -> str:
        return self.helm("uninstall", self.name, "--namespace", self.namespace, "--wait")

    @property
    def selector(self) -> str:
        return f"app.kubernetes.io/name=slascaler,app.kubernetes.io/instance={self.name}"


class OperatorKubelet:
    """Runs the operator process for the release's Ready operator pod."""

    def __init__(
        self,
        release: HelmRelease,
        logs: Path,
        image: OperatorImage | None = None,
        prometheus: PrometheusServer | None = None,
    ) -> None:
        self.release, self.kube, self.logs = release, release.kube, logs
        self.image, self.prometheus = image, prometheus
        self.process: OperatorProcess | None = None
        self.pod: str | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="operator-kubelet")
        self.errors: list[str] = []

    @property
    def log(self) -> Path:
        """The operator's log, one file for every process the kubelet runs."""
        return self.logs / "operator.log"

    def start(self) -> OperatorKubelet:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        with self._lock:
            self._remove()

    def _remove(self) -> None:
        """The pod is gone: so is its container, and its scrape target."""
        if self.process is not None:
            if isinstance(self.process, ContainerProcess):
                self.process.remove()
            else:
                self.process.stop()
        self.process, self.pod = None, None
        if self.prometheus is not None:
            self.prometheus.set_targets("operator", [], key=self.release.name)

    def _loop(self) -> None:
        while not self._stop.wait(0.5):
            try:
                self._sync()
            except Exception as error:
                self.errors.append(f"{type(error).__name__}: {error}")

    def _sync(self) -> None:
        pods = [
            p for p in self.kube.pods(self.release.namespace, self.release.selector) if is_ready(p)
        ]
        with self._lock:
            current = next((p for p in pods if p.metadata.name == self.pod), None)
            if current is None and self.process is not None:
                self._remove()
            if self.process is None and pods:
                self._run(pods[0])
            elif self.process is not None and not self.process.service_running():
                self.process.start()  # restartPolicy: Always

    def _run(self, pod: Any) -> None:
        container = pod.spec.containers[0]
        env = {e.name: e.value or "" for e in container.env or [] if e.value_from is None}
        for name in LISTEN:
            env.pop(name, None)
        token = self.kube.kubectl(
            "create", "token", pod.spec.service_account_name,
            "-n", self.release.namespace, "--bound-object-kind=Pod",
            f"--bound-object-name={pod.metadata.name}", "--duration=2h",
        ).stdout.strip()  # fmt: skip
        name = pod.metadata.name
        process: OperatorProcess
        if self.image is not None:
            pod_security = pod.spec.security_context
            security = container.security_context
            uid = _first(security, pod_security, "run_as_user")
            gid = _first(security, pod_security, "run_as_group")
            api = ApiEndpoint.of(self.kube.kubeconfig)
            process = ContainerProcess(
                self.image,
                self.logs / "pods" / name,
                api,
                ServiceAccountFiles(token, api.ca, self.release.namespace),
                env,
                self.log,
                user=(uid, gid if gid is not None else uid) if uid is not None else None,
                read_only_root=bool(security and security.read_only_root_filesystem),
                hostname=name,
            )  # fmt: skip
        else:
            kubeconfig = self.kube.as_token(token, self.logs / f"{name}.kubeconfig")
            process = OperatorProcess(kubeconfig.kubeconfig, env, self.log)
        process.start()
        self.process, self.pod = process, name
        if self.prometheus is not None:
            target = Target(
                f"127.0.0.1:{process.metrics_port}",
                {"namespace": self.release.namespace, "pod": name},
            )
            self.prometheus.set_targets("operator", [target], key=self.release.name)

    def running_env(self) -> dict[str, str]:
        """The pod's environment the running process got (as rendered by the chart)."""
        with self._lock:
            return dict(self.process.settings) if self.process else {}

    def wait_running(self, pod_not: str | None = None, timeout: float = 60) -> OperatorProcess:
        def up() -> OperatorProcess | None:
            with self._lock:
                if self.process is None or self.pod == pod_not:
                    return None
                return self.process if self.process.service_running() else None

        return poll(up, timeout=timeout, what="the operator process for the release's pod")

    def kill(self) -> None:
        """SIGKILL the process; the loop restarts it within a second, as a kubelet would."""
        with self._lock:
            if self.process is not None:
                self.process.kill()

    def tail(self) -> str:
        errors = "".join(f"kubelet error: {e}\n" for e in self.errors[-5:])
        with self._lock:
            return errors + (self.process.tail() if self.process else "(no operator process)")


def _first(container: Any, pod: Any, field: str) -> int | None:
    """A securityContext field: the container's, else the pod's, else None (the image's)."""
    for context in (container, pod):
        value = getattr(context, field, None) if context is not None else None
        if value is not None:
            return int(value)
    return None
