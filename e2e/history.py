"""A record of every change to a Deployment's replicas and engine args, for the e2e tests.

`DeploymentHistory` reads the Deployment every 0.25 s in a thread and appends a `Change` when
`spec.replicas` or the first container's args differ from the last seen. The scenarios use it
to check that each change slascaler announced happened exactly once, and that nothing else
changed (no duplicate action after a restart, none during a quiet period or a hold).
"""

from __future__ import annotations

import datetime
import itertools
import threading
import time
from dataclasses import dataclass

from e2e.kube import Kube


@dataclass(frozen=True)
class Change:
    at: float  # time.monotonic()
    replicas: int
    args: tuple[str, ...]
    wall: datetime.datetime  # the same instant in UTC, to read beside the cluster's Events


class DeploymentHistory:
    def __init__(self, kube: Kube, namespace: str, name: str, interval: float = 0.25) -> None:
        self.kube, self.namespace, self.name, self.interval = kube, namespace, name, interval
        self.changes: list[Change] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name=f"history-{name}")
        self._lock = threading.Lock()

    def __enter__(self) -> DeploymentHistory:
        self._read()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _read(self) -> None:
        deployment = self.kube.apps.read_namespaced_deployment(self.name, self.namespace)
        args = tuple(deployment.spec.template.spec.containers[0].args or ())
        now = Change(
            time.monotonic(), deployment.spec.replicas, args, datetime.datetime.now(datetime.UTC)
        )
        with self._lock:
            last = self.changes[-1] if self.changes else None
            if last is None or (last.replicas, last.args) != (now.replicas, now.args):
                self.changes.append(now)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self._read()
            except Exception:
                continue

    def snapshot(self) -> list[Change]:
        with self._lock:
            return list(self.changes)

    def replica_steps(self) -> list[tuple[int, int]]:
        """(from, to) of every replica change, in order."""
        changes = self.snapshot()
        return [
            (a.replicas, b.replicas)
            for a, b in itertools.pairwise(changes)
            if a.replicas != b.replicas
        ]

    def story(self) -> str:
        """Every replica change, one line each with its UTC time, for a failure message."""
        changes = self.snapshot()
        return "\n".join(
            f"{b.wall:%H:%M:%S} replicas {a.replicas}→{b.replicas}"
            for a, b in itertools.pairwise(changes)
            if a.replicas != b.replicas
        )

    def args_changes(self) -> int:
        changes = self.snapshot()
        return sum(1 for a, b in itertools.pairwise(changes) if a.args != b.args)

    def last_change_at(self) -> float:
        return self.snapshot()[-1].at
