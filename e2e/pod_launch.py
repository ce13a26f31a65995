"""Inside fresh mount and PID namespaces, set up one container's filesystem and exec its process.

Run as root by `e2e.pod.ContainerProcess` as `unshare --mount --pid --fork ... python
e2e/pod_launch.py SPEC.json`, where it is PID 1 of the new PID namespace. It does what a
container runtime does for the chart's operator container, with the host's `mount`:

- root: an overlay of the image's extracted root filesystem (never changed: writes would land
  in the pod's `upper/` directory, which `e2e/tests/test_image.py` inspects), remounted
  read-only when the spec says so (`readOnlyRootFilesystem: true`);
- /proc for the new PID namespace; /dev a tmpfs with null, zero, full, random, urandom;
- /run a tmpfs (so /var/run/secrets/kubernetes.io/serviceaccount exists without writing to the
  image) with the ServiceAccount's token, ca.crt and namespace bound read-only;
- /tmp the pod's emptyDir (a host directory);

then chroot, supplementary groups [gid], gid and uid as the pod's securityContext says,
no_new_privs, and exec of the entrypoint (found on the image's PATH) with exactly the
container's environment. Nothing of the host's environment reaches the process.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

SERVICE_ACCOUNT = "run/secrets/kubernetes.io/serviceaccount"  # /var/run links to /run
DEVICES = ("null", "zero", "full", "random", "urandom")
PR_SET_NO_NEW_PRIVS = 38


def mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True)


def main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    pod, rootfs = Path(spec["podDir"]), spec["rootfs"]
    new = pod / "root"
    for sub in ("root", "upper", "work"):
        (pod / sub).mkdir(exist_ok=True)
    mount("--make-rprivate", "/")
    overlay = f"lowerdir={rootfs},upperdir={pod / 'upper'},workdir={pod / 'work'}"
    mount("-t", "overlay", "overlay", "-o", overlay, str(new))
    mount("-t", "proc", "-o", "nosuid,nodev,noexec", "proc", str(new / "proc"))
    mount("-t", "tmpfs", "-o", "nosuid,mode=755", "tmpfs", str(new / "dev"))
    for device in DEVICES:
        (new / "dev" / device).touch()
        mount("--bind", f"/dev/{device}", str(new / "dev" / device))
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):  # fmt: skip
        (new / "dev" / name).symlink_to(target)
    mount("-t", "tmpfs", "-o", "nosuid,nodev,mode=755", "tmpfs", str(new / "run"))
    secrets = new / SERVICE_ACCOUNT
    secrets.mkdir(parents=True)
    mount("--bind", "-o", "ro", spec["serviceAccount"], str(secrets))
    mount("-o", "remount,bind,ro", str(secrets))
    mount("--bind", spec["tmp"], str(new / "tmp"))
    if spec["readOnlyRootFilesystem"]:
        mount("-o", "remount,bind,ro", str(new))

    env = dict(spec["env"])
    os.chroot(new)
    os.chdir(spec.get("workingDir") or "/")
    uid, gid = spec["uid"], spec["gid"]
    os.setgroups([gid])
    os.setgid(gid)
    os.setuid(uid)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    argv = spec["argv"]
    program = argv[0] if "/" in argv[0] else shutil.which(argv[0], path=env.get("PATH", ""))
    if program is None:
        sys.exit(f"pod_launch: {argv[0]} not found on the image's PATH {env.get('PATH')!r}")
    os.execve(program, argv, env)


if __name__ == "__main__":
    main(sys.argv[1])
