"""The substrate's binaries: built once from the Go module proxy by `build.sh`, then reused.

`ensure_binaries()` runs `e2e/cluster/build.sh`, which builds what is missing for the versions
pinned in `versions.env` into `~/.cache/slascaler/bin/<hash of versions.env>/` (or
`$SLASCALER_CACHE/bin/...`) and prints that directory; with everything built it returns in
well under a second. Used by the e2e fixtures and `python -m e2e.cluster`.

`find_built(name)` only looks: the binary built for the pinned versions, or None (never
builds). Used where a test needs one binary and should be skipped rather than wait for a
build (the chart tests under plain `pytest` need only `helm`).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
REQUIRED = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
    "kwok",
    "helm",
    "prometheus",
)


def ensure_binaries() -> Path:
    """The directory holding every substrate binary, building the missing ones first."""
    result = subprocess.run(
        ["bash", str(HERE / "build.sh")], check=False, capture_output=True, text=True
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"e2e/cluster/build.sh failed (exit {result.returncode}):\n{result.stderr[-4000:]}"
        )
    directory = Path(result.stdout.strip().splitlines()[-1])
    missing = [name for name in REQUIRED if not (directory / name).is_file()]
    if missing:
        raise RuntimeError(f"build.sh did not produce {', '.join(missing)} in {directory}")
    return directory


def built_directory() -> Path:
    """Where `build.sh` puts the binaries of the pinned versions, built or not: the cache
    (`$SLASCALER_CACHE`, else ~/.cache/slascaler) / bin / the POSIX cksum of versions.env."""
    cache = Path(os.environ.get("SLASCALER_CACHE") or Path.home() / ".cache" / "slascaler")
    with (HERE / "versions.env").open("rb") as versions:
        stamp = subprocess.run(
            ["cksum"], stdin=versions, check=True, capture_output=True, text=True
        ).stdout.split()[0]
    return cache / "bin" / stamp


def find_built(name: str) -> Path | None:
    """The substrate binary `name` built for the pinned versions; None when it is not built."""
    path = built_directory() / name
    return path if path.is_file() and os.access(path, os.X_OK) else None
