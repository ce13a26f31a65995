"""The slascaler operator as a process beside the cluster, for the e2e tests.

`OperatorProcess` runs `slascaler run` from this virtualenv with a kubeconfig (the admin's,
or a ServiceAccount token's) and `SLASCALER_*` settings, logs to a file, and can be stopped,
SIGKILLed and started again. Its liveness and metrics endpoints listen on free loopback ports.

Used by `e2e/tests/test_operator.py`; `e2e.pod.ContainerProcess` runs the same from the
operator image instead, for the chart's pod.
"""

from __future__ import annotations

import sys
import urllib.request
from collections.abc import Mapping
from pathlib import Path

from e2e.cluster.processes import Service, free_port, poll

SLASCALER = Path(sys.executable).parent / "slascaler"


class OperatorProcess:
    def __init__(self, kubeconfig: Path | None, settings: Mapping[str, str], log: Path) -> None:
        self.kubeconfig = kubeconfig
        self.settings = dict(settings)
        self.log = log
        self.health_port = free_port()
        self.metrics_port = free_port()
        self.service: Service | None = None
        self.starts = 0

    def env(self) -> dict[str, str]:
        return {
            **self.settings,
            "KUBECONFIG": str(self.kubeconfig or ""),
            "SLASCALER_BIND_ADDRESS": "127.0.0.1",
            "SLASCALER_HEALTH_PORT": str(self.health_port),
            "SLASCALER_METRICS_PORT": str(self.metrics_port),
            "KUBERNETES_SERVICE_HOST": "",  # never take in-cluster credentials by accident
        }

    def command(self) -> list[str]:
        return [str(SLASCALER), "run"]

    def start(self) -> OperatorProcess:
        self.starts += 1
        self.service = Service(
            f"slascaler-{self.starts}", self.command(), self.log, env=self.env()
        ).start()
        poll(self.healthy, timeout=30, what="the operator's /healthz", describe=self.tail)
        return self

    def service_running(self) -> bool:
        return self.service is not None and self.service.running()

    def healthy(self) -> bool:
        if not self.service_running():
            raise AssertionError(f"the operator exited:\n{self.tail()}")
        try:
            url = f"http://127.0.0.1:{self.health_port}/healthz"
            with urllib.request.urlopen(url, timeout=2) as reply:
                return bool(reply.status == 200)
        except OSError:
            return False

    def metrics(self) -> str:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as reply:
            text: str = reply.read().decode()
        return text

    def stop(self) -> None:
        if self.service is not None:
            self.service.stop(grace=10)
            self.service = None

    def kill(self) -> None:
        """SIGKILL: no chance to finish anything it was doing."""
        if self.service is not None:
            self.service.kill()
            self.service = None

    def tail(self, lines: int = 40) -> str:
        from e2e.cluster.processes import tail

        return tail(self.log, lines)
