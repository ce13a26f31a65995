"""The operator image as the chart runs it: what it carries, and how its container behaves.

The image is built (or found) by `operator/image/build.sh` (`make image`); its root filesystem
is extracted once (`e2e.image`). The image config says `slascaler run` as user 65532, as the
chart's securityContext expects; the image carries the operator and its dependencies, not the
simulator, its traces, the test tools or the build host's pip configuration. Run as the chart's
pod would run it (`e2e.pod.ContainerProcess`: in-cluster credentials from the projected
ServiceAccount token, the pod's user), the operator evaluates an InferenceSLA and writes
nothing outside /tmp: its root is an overlay left writable here, and the overlay's upper
layer (every write) stays empty. The scenarios run the same container with the root
read-only (`test_scenarios.py`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e.cluster.processes import poll
from e2e.cluster.prometheus import PrometheusServer
from e2e.image import OperatorImage
from e2e.kube import Kube
from e2e.pod import ApiEndpoint, ContainerProcess, ServiceAccountFiles
from e2e.slas import SLAWatch, inference_sla, install_crd
from e2e.tests.conftest import LogRegistry, Substrate


def test_image_runs_slascaler_as_the_charts_non_root_user(operator_image: OperatorImage) -> None:
    assert operator_image.entrypoint == ["slascaler", "run"]
    assert operator_image.user == (65532, 65532)
    # A passwd entry for it: Kopf's peer identity asks for the user's name.
    passwd = (operator_image.rootfs / "etc" / "passwd").read_text(encoding="utf-8")
    assert "slascaler:x:65532:65532:" in passwd
    assert operator_image.env["PATH"].startswith("/opt/slascaler/bin:")
    assert (operator_image.rootfs / "opt" / "slascaler" / "bin" / "slascaler").is_file()


def test_image_carries_the_operator_only(operator_image: OperatorImage) -> None:
    root = operator_image.rootfs
    (site,) = (root / "opt" / "slascaler" / "lib").glob("python3*/site-packages")
    assert (site / "slascaler" / "reconcile.py").is_file()
    installed = {p.name.split("-")[0].lower() for p in site.glob("*.dist-info")}
    assert {"slascaler", "kopf", "kubernetes", "numpy"} <= installed
    for absent in ("slascaler_sim", "matplotlib", "pytest", "hypothesis", "mypy", "pip"):
        assert absent not in installed and not (site / absent).exists(), absent
    everywhere = [p.relative_to(root) for p in root.rglob("*") if not p.is_symlink()]
    assert not [p for p in everywhere if "slascaler_sim" in p.parts], "the simulator is absent"
    assert not [p for p in everywhere if p.suffix == ".csv" and "trace" in str(p).lower()]
    # Nothing of the build host: its pip configuration, CA bundle and local wheel directories
    # were mounts for the build only, and leave no file or mount point in the image.
    assert not (root / "etc" / "pip.conf").exists()
    assert [p.name for p in (root / "opt").iterdir()] == ["slascaler"]
    assert not (root / "etc" / "resolv.conf").exists() and not (root / "etc" / "hostname").exists()


@pytest.fixture
def probe_account(kube: Kube, namespace: str) -> Iterator[ServiceAccountFiles]:
    """A ServiceAccount bound to cluster-admin, and its token: what the container may do is
    not this test's subject (the scenarios run it with the chart's RBAC)."""
    kube.kubectl("create", "serviceaccount", "probe", "-n", namespace)
    binding = f"probe-{namespace}"
    kube.kubectl(
        "create", "clusterrolebinding", binding, "--clusterrole=cluster-admin",
        f"--serviceaccount={namespace}:probe",
    )  # fmt: skip
    token = kube.kubectl("create", "token", "probe", "-n", namespace).stdout.strip()
    yield ServiceAccountFiles(token, ApiEndpoint.of(kube.kubeconfig).ca, namespace)
    kube.kubectl("delete", "clusterrolebinding", binding, check=False)


def test_container_uses_in_cluster_credentials_and_writes_only_to_tmp(
    substrate: Substrate,
    kube: Kube,
    namespace: str,
    prometheus: PrometheusServer,
    operator_image: OperatorImage,
    probe_account: ServiceAccountFiles,
    tmp_path: Path,
    logs: LogRegistry,
) -> None:
    install_crd(kube)
    container = ContainerProcess(
        operator_image,
        tmp_path / "pod",
        ApiEndpoint.of(kube.kubeconfig),
        probe_account,
        {
            "SLASCALER_PROMETHEUS_URL": prometheus.url,
            "SLASCALER_RECONCILE_INTERVAL": "2s",
            "SLASCALER_PROMETHEUS_RETRIES": "0",
        },
        tmp_path / "operator.log",
        read_only_root=False,  # so that any write would land in the overlay's upper layer
        hostname="probe",
    )
    logs.register("operator (image)", container.tail)
    try:
        container.start()
        kube.apply(inference_sla("probe-sla", "absent"), namespace=namespace)
        sla = SLAWatch(kube, namespace, "probe-sla")
        sla.wait_condition("Ready", "False", "TargetNotFound", timeout=30)
        first = sla.status()["lastEvaluated"]
        poll(
            lambda: sla.status().get("lastEvaluated") != first,
            timeout=30,
            what="a second evaluation",
        )

        status = dict(
            line.split(":\t", 1) for line in container.proc("status").splitlines() if ":\t" in line
        )
        assert status["Uid"].split()[:2] == ["65532", "65532"]
        assert status["Gid"].split()[:2] == ["65532", "65532"]
        assert status["NoNewPrivs"].strip() == "1" and int(status["CapEff"], 16) == 0
        argv = container.proc("cmdline").split("\0")
        assert argv[1:3] == ["/opt/slascaler/bin/slascaler", "run"], argv
        environ = dict(e.split("=", 1) for e in container.proc("environ").split("\0") if e)
        assert "KUBECONFIG" not in environ and "VIRTUAL_ENV" not in environ
        assert environ["KUBERNETES_SERVICE_HOST"] == ApiEndpoint.of(kube.kubeconfig).host
        assert container.mount_options("/run/secrets/kubernetes.io/serviceaccount") >= {"ro"}
        assert "slascaler_build_info" in container.metrics()
        kube.kubectl("delete", "inferencesla", "probe-sla", "-n", namespace, "--timeout=30s")
    finally:
        container.stop()
    assert container.written_outside_tmp() == [], "the container wrote outside /tmp"
