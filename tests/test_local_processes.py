"""The e2e substrate's process handling (`e2e.cluster.processes`), which needs no cluster."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

from e2e.cluster.processes import Service, poll


def test_a_stop_returns_once_the_service_exited_not_after_its_grace(tmp_path: Path) -> None:
    """A child that exited stays in its process group as a zombie until its parent waits for
    it: the stop polled the group alone, and waited out the whole grace period for every
    service (Prometheus: 10 s at each stop, though it exits in milliseconds)."""
    sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
    service = Service("sleeper", sleeper, tmp_path / "sleeper.log").start()
    stopped = threading.Event()

    def stop() -> None:
        service.stop(grace=600.0)  # SIGTERM ends the sleeper at once
        stopped.set()

    threading.Thread(target=stop, daemon=True).start()
    poll(stopped.is_set, timeout=30, what="the stop to return after the service exited")
    assert not service.running()
