"""The operator image for the e2e suite: built (or found) by `operator/image/build.sh`, its root
filesystem extracted once from the OCI archive, and its configuration (entrypoint, user, env).

`ensure_image()` runs the build script (warm: well under a second) and extracts the archive's
layers in order into `rootfs/` beside it (whiteouts applied, owners and modes kept), once per
archive: a second call finds the extracted tree. `OperatorImage.config` is the image's OCI
config (Entrypoint, Cmd, User, Env), which the stand-in kubelet (`e2e.pod`) runs as a container
runtime would.

Used by the e2e fixtures (`e2e/tests/conftest.py`) and `e2e/tests/test_image.py`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "operator" / "image" / "build.sh"


@dataclass(frozen=True)
class OperatorImage:
    archive: Path
    rootfs: Path
    config: dict[str, Any]  # the OCI image config's "config" object

    @property
    def entrypoint(self) -> list[str]:
        return [*(self.config.get("Entrypoint") or []), *(self.config.get("Cmd") or [])]

    @property
    def user(self) -> tuple[int, int]:
        user, _, group = str(self.config.get("User") or "0").partition(":")
        return int(user), int(group or user)

    @property
    def env(self) -> dict[str, str]:
        pairs = (entry.partition("=") for entry in self.config.get("Env") or [])
        return {name: value for name, _, value in pairs}


def ensure_image() -> OperatorImage:
    """The operator image, built if needed, with its root filesystem extracted."""
    result = subprocess.run(["bash", str(BUILD)], check=False, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(
            f"operator/image/build.sh failed (exit {result.returncode}):\n{result.stderr[-4000:]}"
        )
    archive = Path(result.stdout.strip().splitlines()[-1])
    return extract(archive)


def _read(layout: tarfile.TarFile, name: str) -> bytes:
    member = layout.extractfile(name)
    assert member is not None, name
    return member.read()


def _blob_name(digest: str) -> str:
    return f"blobs/{digest.replace(':', '/')}"


def extract(archive: Path) -> OperatorImage:
    """Extract `archive`'s single image into `rootfs/` beside it, unless already done."""
    rootfs = archive.parent / "rootfs"
    config_file = archive.parent / "config.json"
    if not (rootfs.is_dir() and config_file.is_file()):
        staging = archive.parent / "rootfs.staging"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        with tarfile.open(archive) as layout:
            (entry,) = json.loads(_read(layout, "index.json"))["manifests"]
            manifest = json.loads(_read(layout, _blob_name(entry["digest"])))
            config = json.loads(_read(layout, _blob_name(manifest["config"]["digest"])))
            for layer in manifest["layers"]:
                member = layout.extractfile(_blob_name(layer["digest"]))
                assert member is not None, layer
                with tarfile.open(fileobj=member, mode="r|*") as tar:
                    _apply_layer(tar, staging)
        shutil.rmtree(rootfs, ignore_errors=True)
        os.replace(staging, rootfs)
        config_file.write_text(json.dumps(config["config"]), encoding="utf-8")
    return OperatorImage(archive, rootfs, json.loads(config_file.read_text(encoding="utf-8")))


def _apply_layer(tar: tarfile.TarFile, root: Path) -> None:
    """One layer onto `root`: OCI whiteouts remove what lower layers put there."""
    for member in tar:
        path = Path(member.name.lstrip("./"))
        parent, name = root / path.parent, path.name
        if name == ".wh..wh..opq":  # opaque directory: nothing of the lower layers stays
            for child in parent.iterdir() if parent.is_dir() else ():
                _remove(child)
            continue
        if name.startswith(".wh."):
            _remove(parent / name.removeprefix(".wh."))
            continue
        target = root / path
        if target.is_symlink() or (target.exists() and not target.is_dir()):
            target.unlink()
        elif target.is_dir() and not member.isdir():
            shutil.rmtree(target)
        tar.extract(member, root, set_attrs=True, filter="fully_trusted")


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)
