"""`pip install .` installs the operator only: neither the simulator nor the traces.

The simulator (`slascaler_sim`, its baselines and benchmark) and the bundled traces are a
distribution of their own (`simulator/pyproject.toml`); the root project's wheel, which is
what `pip install .` and the operator's image install, must carry none of them. The wheel is
built from a copy of what the root project packages (so the working tree gets no build
output), with pip, as a user would (about 20 s).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_root_wheel_holds_the_operator_and_neither_the_simulator_nor_the_traces(
    tmp_path: Path,
) -> None:
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    shutil.copytree(
        ROOT / "operator",
        source / "operator",
        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"),
    )
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", str(source),
         "-w", str(tmp_path / "dist")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-4000:]
    [wheel] = (tmp_path / "dist").glob("slascaler-*.whl")
    names = zipfile.ZipFile(wheel).namelist()

    assert "slascaler/reconcile.py" in names and "slascaler/py.typed" in names
    assert "slascaler/metrics/__init__.py" in names, "subpackages are packaged"
    assert [n for n in names if n.startswith("slascaler_sim")] == []
    assert [n for n in names if "trace" in n.lower() or n.endswith(".csv")] == []
    metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
    requires = [
        line
        for line in zipfile.ZipFile(wheel).read(metadata).decode().splitlines()
        if line.startswith("Requires-Dist:") and "extra ==" not in line
    ]
    assert requires, "the operator's own dependencies are declared"
    assert not [r for r in requires if "slascaler-sim" in r or "matplotlib" in r]
