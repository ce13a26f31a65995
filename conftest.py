"""pytest options for the whole tree: e2e tests are opt-in.

`pytest` runs the unit, property and simulator tests only; `pytest --e2e` also runs the tests
under `e2e/tests/`, which start (or reuse, with `--kubeconfig`) a control plane and
Prometheus. Every test under `e2e/` is marked `e2e` automatically, except those marked
`helm` (the chart rendered without a cluster): they need only the helm binary, so plain
`pytest` runs them when it is built (`make substrate`) and skips them, saying so, when not
(their `helm_binaries` fixture, e2e/tests/conftest.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

E2E_DIR = Path(__file__).parent / "e2e"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("slascaler e2e")
    group.addoption(
        "--e2e", action="store_true", help="run the e2e tests (builds the substrate if needed)"
    )
    group.addoption(
        "--kubeconfig",
        default=None,
        help="run the e2e tests against this existing cluster (e.g. kind) instead of a local one",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(reason="e2e test: run with --e2e")
    for item in items:
        if E2E_DIR in Path(str(item.fspath)).parents:
            if item.get_closest_marker("helm") is not None:
                continue  # needs no cluster: its fixture finds helm or skips
            item.add_marker(pytest.mark.e2e)
            if not config.getoption("--e2e"):
                item.add_marker(skip)
