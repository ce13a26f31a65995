"""Local server processes with their logs in files, free loopback ports, and polling.

A `Service` starts one binary (argv list, never a shell string) with stdout and stderr in a
log file, stops it (SIGTERM, then SIGKILL after a grace period, whole process group), and
gives the tail of its log for a failing test to print. `poll` waits for a condition with a
deadline and reports the last thing it saw when the deadline passes.

Used by `e2e.cluster.local`, `e2e.cluster.prometheus` and the e2e fixtures.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Timeout(AssertionError):
    """A polled condition did not hold before its deadline."""


class Fatal(RuntimeError):
    """Raised by a polled condition when waiting longer cannot help (a process died)."""


def poll(
    condition: Callable[[], T],
    *,
    timeout: float,
    what: str,
    interval: float = 0.25,
    describe: Callable[[], str] | None = None,
) -> T:
    """Call `condition` until it returns a truthy value or `timeout` seconds pass.

    Exceptions from `condition` count as "not yet" (the last one is reported on timeout),
    except `Fatal`, which ends the wait at once.
    """
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            result = condition()
            if result:
                return result
            last = result
        except Fatal:
            raise
        except Exception as error:
            last = error
        if time.monotonic() >= deadline:
            detail = describe() if describe is not None else f"last result: {last!r}"
            raise Timeout(f"timed out after {timeout:.0f} s waiting for {what}; {detail}")
        time.sleep(interval)


def tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return f"(no log at {path})"
    return "\n".join(text.splitlines()[-lines:])


@dataclass
class Service:
    """One server process of the substrate."""

    name: str
    argv: Sequence[str]
    log: Path
    env: Mapping[str, str] | None = None
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def start(self) -> Service:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                list(self.argv),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **self.env} if self.env is not None else None,
                start_new_session=True,  # its own process group: stopped with its children
            )
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None, f"{self.name} was not started"
        return self.process.pid

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, grace: float = 10.0, sig: int = signal.SIGTERM) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            stop_group(self.process.pid, grace, sig, reap=self.process.poll)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=grace + 5)
        self.process = None

    def kill(self) -> None:
        """SIGKILL, no grace: a crash."""
        self.stop(grace=0.0, sig=signal.SIGKILL)

    def tail(self, lines: int = 30) -> str:
        return tail(self.log, lines)


def stop_group(
    pid: int,
    grace: float = 10.0,
    sig: int = signal.SIGTERM,
    reap: Callable[[], object] = lambda: None,
) -> None:
    """Signal a process group, then SIGKILL it if it is still there after `grace` seconds.

    `reap` collects the group's leader when it is the caller's child (`Popen.poll`): a child
    that exited stays in its group as a zombie until its parent waits for it, and every stop
    then took the whole grace period (Prometheus: 10 s, though it exits in milliseconds)."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        reap()
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
