"""The Helm chart without a cluster: `helm lint` is clean, and `helm template` with the CI values
files renders what matters (RBAC rules, the hardened securityContext, values wired into the
operator's environment, the optional objects, peering when replicated)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e.chart import CHART

from slascaler.engine_metrics import ENGINE_METRICS
from slascaler.metrics.promql import recording_rules
from slascaler.settings import Settings

VALUES = sorted((CHART / "ci").glob("*.yaml"))


def helm(binaries: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(binaries / "helm"), *args], capture_output=True, text=True, timeout=60
    )


def render(binaries: Path, *extra: str) -> list[dict[str, Any]]:
    result = helm(binaries, "template", "rel", str(CHART), "--namespace", "ops", *extra)
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


@pytest.mark.parametrize("values", VALUES, ids=[v.stem for v in VALUES])
def test_lint_is_clean(binaries: Path, values: Path) -> None:
    result = helm(binaries, "lint", str(CHART), "--strict", "-f", str(values))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[WARNING]" not in result.stdout and "[ERROR]" not in result.stdout


def test_defaults_render_cluster_wide_least_privilege(binaries: Path) -> None:
    docs = render(binaries, "-f", str(CHART / "ci" / "default-values.yaml"))
    (role,) = by_kind(docs, "ClusterRole")
    rules = {(tuple(r["apiGroups"]), tuple(r["resources"])): set(r["verbs"]) for r in role["rules"]}
    assert rules[(("slascaler.io",), ("inferenceslas",))] == {"get", "list", "watch", "patch"}
    assert rules[(("slascaler.io",), ("inferenceslas/status",))] == {"get", "patch"}
    assert rules[(("apps",), ("deployments",))] == {"get", "patch"}
    assert rules[(("apps",), ("deployments/scale",))] == {"get", "patch"}
    assert rules[(("",), ("pods",))] == {"list"}
    assert rules[(("autoscaling",), ("horizontalpodautoscalers",))] == {"list"}
    assert all("*" not in verbs and "delete" not in verbs for verbs in rules.values())
    assert not any((k[0][0], k[1]) == ("", ("secrets",)) for k in rules)
    (binding,) = by_kind(docs, "ClusterRoleBinding")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "rel-slascaler", "namespace": "ops"}
    ]
    assert by_kind(docs, "Role") == [] and by_kind(docs, "ClusterKopfPeering") == []
    assert by_kind(docs, "ServiceMonitor") == [] and by_kind(docs, "PodDisruptionBudget") == []


def test_pod_is_hardened_and_env_carries_the_values(binaries: Path) -> None:
    docs = render(binaries, "-f", str(CHART / "ci" / "ha-namespaced-values.yaml"))
    (deployment,) = by_kind(docs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["image"] == "slascaler/operator:0.1.0-rc1"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["SLASCALER_PROMETHEUS_URL"] == "https://thanos-query.monitoring.svc:10902"
    assert env["SLASCALER_WATCH_NAMESPACES"] == "team-a,team-b"
    assert env["SLASCALER_DRY_RUN"] == "true"
    assert env["SLASCALER_RECONCILE_INTERVAL"] == "30s"
    assert env["SLASCALER_NAMESPACE_LABEL"] == "kubernetes_namespace"
    assert env["SLASCALER_POD_LABEL"] == "kubernetes_pod_name"
    assert env["SLASCALER_PEERING"] == "rel-slascaler"
    assert (
        env["SLASCALER_PROMETHEUS_BEARER_TOKEN_FILE"]
        == "/var/run/secrets/slascaler/prometheus/token"
    )
    assert env["HTTPS_PROXY"] == "http://proxy:3128"
    assert deployment["spec"]["replicas"] == 2


def test_namespaced_install_uses_roles_and_peering_per_namespace(binaries: Path) -> None:
    docs = render(binaries, "-f", str(CHART / "ci" / "ha-namespaced-values.yaml"))
    assert by_kind(docs, "ClusterRole") == [] and by_kind(docs, "ClusterRoleBinding") == []
    assert sorted(r["metadata"]["namespace"] for r in by_kind(docs, "Role")) == ["team-a", "team-b"]
    assert sorted(b["metadata"]["namespace"] for b in by_kind(docs, "RoleBinding")) == [
        "team-a",
        "team-b",
    ]
    assert sorted(p["metadata"]["namespace"] for p in by_kind(docs, "KopfPeering")) == [
        "team-a",
        "team-b",
    ]
    (monitor,) = by_kind(docs, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert by_kind(docs, "PodDisruptionBudget")[0]["spec"]["minAvailable"] == 1


def test_every_object_has_the_standard_labels(binaries: Path) -> None:
    for values in VALUES:
        for doc in render(binaries, "-f", str(values)):
            labels = doc["metadata"]["labels"]
            assert labels["app.kubernetes.io/name"] == "slascaler", doc["kind"]
            assert labels["app.kubernetes.io/instance"] == "rel"
            assert labels["app.kubernetes.io/managed-by"] == "Helm"


def test_bad_values_are_refused_by_the_schema(binaries: Path) -> None:
    result = helm(binaries, "template", "rel", str(CHART), "--set", "reconcileInterval=often")
    assert result.returncode != 0 and "reconcileInterval" in result.stderr
    result = helm(binaries, "template", "rel", str(CHART), "--set", "replicaCount=0")
    assert result.returncode != 0 and "replicaCount" in result.stderr


def test_crds_come_from_the_single_source(binaries: Path) -> None:
    link = CHART / "crds"
    assert link.is_symlink() and link.resolve() == (CHART.parents[1] / "manifests" / "crds")
    result = helm(binaries, "show", "crds", str(CHART))
    assert "name: inferenceslas.slascaler.io" in result.stdout


def test_a_shard_release_carries_its_selector_and_cycle_settings(binaries: Path) -> None:
    """Sharding by label: each release serves the InferenceSLAs its selector matches, with
    its own peering (the release's name), and the operator accepts what the chart writes."""
    docs = render(
        binaries, "--set", "selector=shard in (a\\,b)", "--set", "replicaCount=2",
        "--set", "maxConcurrentEvaluations=32", "--set", "evaluationTimeout=5s",
        "--set", "batchWindow=500ms",
    )  # fmt: skip
    (deployment,) = by_kind(docs, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["SLASCALER_SELECTOR"] == "shard in (a,b)"
    assert env["SLASCALER_PEERING"] == "rel-slascaler"
    settings = Settings.from_env({k: v for k, v in env.items() if v is not None})
    assert settings.selector[0].values == ("a", "b")
    assert settings.max_concurrent_evaluations == 32
    assert (settings.evaluation_timeout_s, settings.batch_window_s) == (5.0, 0.5)


def test_recording_rules_are_the_operators_own(binaries: Path) -> None:
    """The PrometheusRule (off by default) records exactly the series the operator reads,
    with the expressions `metrics.promql.recording_rules` gives, per window."""
    assert not by_kind(render(binaries), "PrometheusRule")
    docs = render(
        binaries, "--set", "recordingRulesEnabled=true",
        "--set", "recordingRulesWindowSeconds={120,60}", "--set", "podLabel=kubernetes_pod",
    )  # fmt: skip
    (rule,) = by_kind(docs, "PrometheusRule")
    families = tuple(f for m in ENGINE_METRICS.values() for f in m.histograms.values())
    for group, window in zip(rule["spec"]["groups"], (120, 60), strict=True):
        assert group["name"] == f"slascaler-increase-{window}s"
        ours = recording_rules(families, window, pod_label="kubernetes_pod")
        assert sorted(group["rules"], key=lambda r: r["record"]) == sorted(
            ours, key=lambda r: r["record"]
        )


def test_the_defaults_are_accepted_with_a_short_interval(binaries: Path) -> None:
    """The chart's defaults leave the cycle's deadline and batch window to the operator, which
    shortens them for a short interval (a fixed 10s deadline refused a 2s interval)."""
    docs = render(binaries, "--set", "reconcileInterval=2s")
    (deployment,) = by_kind(docs, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"] if e.get("value") is not None}
    settings = Settings.from_env(env)
    assert (settings.evaluation_timeout_s, settings.batch_window_s) == (2.0, 0.5)
