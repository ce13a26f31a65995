"""`python -m e2e.cluster up|down|status`: the local control plane by hand.

`up` builds the binaries if needed, starts the cluster in the background (its processes
outlive this command) and prints the KUBECONFIG to use; `down` stops every process it started
and removes its directory; `status` says whether it is up. The state (pids, paths) is kept in
`$TMPDIR/slascaler-cluster-<name>/state.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from e2e.cluster.binaries import ensure_binaries
from e2e.cluster.local import ClusterConfig, LocalCluster
from e2e.cluster.processes import stop_group


def _directory(name: str) -> Path:
    return Path(tempfile.gettempdir()) / f"slascaler-cluster-{name}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def up(args: argparse.Namespace) -> int:
    directory = _directory(args.name)
    if (directory / "state.json").exists():
        print(f"already up: export KUBECONFIG={directory / 'admin.kubeconfig'}")
        return 0
    started = time.monotonic()
    cluster = LocalCluster(
        ensure_binaries(),
        directory,
        ClusterConfig(nodes=args.nodes, gpus_per_node=args.gpus, ready_delay_s=args.ready_delay),
    )
    try:
        cluster.up()
    except BaseException:
        cluster.down()
        raise
    state = {
        "pids": {name: service.pid for name, service in cluster.services.items()},
        "kubeconfig": str(cluster.kubeconfig),
        "server": cluster.server,
        "bin": str(cluster.bin_dir),
    }
    (directory / "state.json").write_text(json.dumps(state, indent=2), encoding="utf-8")
    print(f"cluster up in {time.monotonic() - started:.1f} s ({cluster.server})", file=sys.stderr)
    print(f"export KUBECONFIG={cluster.kubeconfig}")
    print(f"export PATH={cluster.bin_dir}:$PATH  # kubectl, helm")
    return 0


def down(args: argparse.Namespace) -> int:
    directory = _directory(args.name)
    state_file = directory / "state.json"
    if state_file.exists():
        pids = json.loads(state_file.read_text(encoding="utf-8"))["pids"]
        for pid in reversed(list(pids.values())):
            stop_group(int(pid))
    shutil.rmtree(directory, ignore_errors=True)
    print(f"cluster {args.name} down")
    return 0


def status(args: argparse.Namespace) -> int:
    state_file = _directory(args.name) / "state.json"
    if not state_file.exists():
        print(f"cluster {args.name} is down")
        return 1
    state = json.loads(state_file.read_text(encoding="utf-8"))
    dead = [name for name, pid in state["pids"].items() if not _alive(int(pid))]
    if dead:
        print(f"cluster {args.name} is broken: {', '.join(dead)} not running")
        return 1
    print(
        f"cluster {args.name} is up at {state['server']}: export KUBECONFIG={state['kubeconfig']}"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.cluster", description=__doc__)
    parser.add_argument("--name", default="default", help="several clusters can run side by side")
    commands = parser.add_subparsers(dest="command", required=True)
    start = commands.add_parser("up", help="start the control plane and print its KUBECONFIG")
    start.add_argument("--nodes", type=int, default=2, help="fake GPU nodes (2)")
    start.add_argument("--gpus", type=int, default=4, help="nvidia.com/gpu per node (4)")
    start.add_argument(
        "--ready-delay", type=float, default=3.0, help="seconds from Running to Ready (3)"
    )
    start.set_defaults(run=up)
    commands.add_parser("down", help="stop it and remove its files").set_defaults(run=down)
    commands.add_parser("status", help="is it up?").set_defaults(run=status)
    args = parser.parse_args(argv)
    code: int = args.run(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
