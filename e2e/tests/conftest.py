"""Fixtures of the e2e suite: the cluster, Prometheus, a namespace per test, log tails on failure.

- `substrate` (session): the binaries (built or reused), and a local control plane — or the
  cluster named by `--kubeconfig` or `SLASCALER_E2E_KUBECONFIG` (e.g. kind with KWOK GPU
  nodes, see e2e/kind/README.md; never the ambient KUBECONFIG, so that no test touches a
  cluster by accident).
- `helm_binaries` (session): the binaries' directory, for the tests marked `helm` (the chart
  without a cluster): built under `--e2e` like `substrate`'s; under plain `pytest` only found
  (`find_built`), the test skipped with the reason when helm is not built.
- `prometheus` (session): a real Prometheus whose targets a test sets (file discovery).
- `operator_image` (session): the operator image built (or found) by `operator/image/build.sh`,
  its root filesystem extracted, for the chart's stand-in kubelet.
- `namespace` (per test): a fresh namespace labelled `slascaler.io/e2e=true`, deleted after.
- A failing test gets the tails of every substrate log (and of logs its fixtures registered
  with `logs.register`) in its report.
"""

from __future__ import annotations

import os
import secrets
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from e2e.cluster.binaries import ensure_binaries, find_built
from e2e.cluster.local import LocalCluster
from e2e.cluster.processes import poll
from e2e.cluster.prometheus import PrometheusServer
from e2e.image import OperatorImage, ensure_image
from e2e.kube import Kube


class LogRegistry:
    """Log sources whose tails a failing test prints."""

    def __init__(self) -> None:
        self.sources: dict[str, Callable[[], str]] = {}

    def register(self, name: str, tail: Callable[[], str]) -> None:
        self.sources[name] = tail

    def unregister(self, name: str) -> None:
        self.sources.pop(name, None)

    def dump(self) -> str:
        parts = []
        for name, tail in list(self.sources.items()):
            try:
                parts.append(f"--- {name} ---\n{tail()}")
            except Exception as error:
                parts.append(f"--- {name} --- (unreadable: {error})")
        return "\n".join(parts)


LOGS = LogRegistry()
START_SECONDS = pytest.StashKey[float]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.failed and call.when in ("setup", "call") and LOGS.sources:
        report.sections.append(("substrate logs (tails)", LOGS.dump()))


@pytest.fixture(scope="session")
def logs() -> LogRegistry:
    return LOGS


@dataclass
class Substrate:
    bin_dir: Path
    kubeconfig: Path
    admin: Kube
    cluster: LocalCluster | None  # None when running against an existing cluster
    start_seconds: float
    workdir: Path


@pytest.fixture(scope="session")
def binaries() -> Path:
    return ensure_binaries()


@pytest.fixture(scope="session")
def helm_binaries(request: pytest.FixtureRequest) -> Path:
    """The directory holding helm: built if need be under --e2e; else found, or skip."""
    if request.config.getoption("--e2e"):
        return ensure_binaries()
    helm = find_built("helm")
    if helm is None:
        pytest.skip(
            "helm is not built for e2e/cluster/versions.env: `make substrate` builds it "
            "(or run with --e2e)"
        )
    return helm.parent


@pytest.fixture(scope="session")
def operator_image() -> OperatorImage:
    return ensure_image()


@pytest.fixture(scope="session")
def substrate(request: pytest.FixtureRequest, binaries: Path) -> Iterator[Substrate]:
    bin_dir = binaries
    workdir = Path(tempfile.mkdtemp(prefix="slascaler-e2e-"))
    existing = request.config.getoption("--kubeconfig") or os.environ.get(
        "SLASCALER_E2E_KUBECONFIG"
    )
    cluster = None
    started = time.monotonic()
    if existing:
        kubeconfig = Path(existing).resolve()
    else:
        cluster = LocalCluster(bin_dir, workdir / "cluster")
        for name in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"):
            LOGS.register(
                name,
                lambda name=name: (
                    cluster.services[name].tail(8) if name in cluster.services else ""
                ),
            )
        try:
            cluster.up()
        except BaseException:
            cluster.down()
            raise
        kubeconfig = cluster.kubeconfig
    elapsed = time.monotonic() - started
    request.config.stash[START_SECONDS] = elapsed
    try:
        yield Substrate(
            bin_dir, kubeconfig, Kube.connect(kubeconfig, bin_dir), cluster, elapsed, workdir
        )
    finally:
        if cluster is not None:
            cluster.down()
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    seconds = terminalreporter.config.stash.get(START_SECONDS, None)
    if seconds is not None:
        terminalreporter.write_line(f"e2e substrate: control plane up in {seconds:.1f} s")


@pytest.fixture(scope="session")
def kube(substrate: Substrate) -> Kube:
    return substrate.admin


@pytest.fixture(scope="session")
def prometheus(
    binaries: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PrometheusServer]:
    server = PrometheusServer(binaries / "prometheus", tmp_path_factory.mktemp("prometheus"))
    LOGS.register("prometheus", lambda: server.service.tail(10) if server.service else "")
    server.start()
    try:
        yield server
    finally:
        server.remove()


@pytest.fixture
def namespace(kube: Kube, request: pytest.FixtureRequest) -> Iterator[str]:
    base = request.node.name.split("[")[0].removeprefix("test_").replace("_", "-")[:40]
    name = f"{base}-{secrets.token_hex(3)}".strip("-")
    kube.core.create_namespace({"metadata": {"name": name, "labels": {"slascaler.io/e2e": "true"}}})
    poll(
        lambda: kube.core.read_namespaced_service_account("default", name),
        timeout=30,
        what=f"the default ServiceAccount in {name}",
    )
    try:
        yield name
    finally:
        if not os.environ.get("SLASCALER_E2E_KEEP"):
            release_slas(kube, name)
            kube.core.delete_namespace(name)


def release_slas(kube: Kube, namespace: str) -> None:
    """Delete the namespace's InferenceSLAs while an operator may still remove Kopf's
    finalizer; strip it if none does within 15 s (the operator of a module may be gone), so
    that the namespace does not hang in Terminating for the tests after."""
    listed = kube.kubectl("get", "inferenceslas", "-n", namespace, "-o", "name", check=False)
    names = listed.stdout.split() if listed.returncode == 0 else []
    if not names:
        return
    kube.kubectl("delete", *names, "-n", namespace, "--wait=false")
    try:
        poll(
            lambda: (
                not kube.kubectl(
                    "get", *names, "-n", namespace, "-o", "name", check=False
                ).stdout.strip()
            ),
            timeout=15,
            what="InferenceSLAs deleted",
        )
    except AssertionError:
        patch = '{"metadata":{"finalizers":null}}'
        for item in names:
            kube.kubectl("patch", item, "-n", namespace, "--type=merge", "-p", patch, check=False)
