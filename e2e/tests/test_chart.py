"""The Helm chart without a cluster: `helm lint` is clean, and `helm template` with the CI values
files renders what matters (RBAC rules, the hardened securityContext, values wired into the
operator's environment, the optional objects, peering when replicated), the Grafana dashboard
(every panel's query reads metrics the operator or the engines really export) and the alerts
(each with its runbook entry). That every dashboard query returns data and that an alert fires
is in test_scenarios.py, against the e2e Prometheus.

Marked `helm`: plain `pytest` runs these when the helm binary is built (`make substrate`)
and skips them, saying so, when it is not."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e.chart import CHART
from e2e.dashboard import (
    dashboard_of,
    engine_metric_names,
    metric_names,
    operator_metric_names,
    panel_queries,
    rules_of,
    variable_queries,
)

from slascaler.engine_metrics import ENGINE_METRICS
from slascaler.metrics.promql import recording_rules
from slascaler.settings import Settings

pytestmark = pytest.mark.helm  # no cluster: runs under plain pytest when helm is built

VALUES = sorted((CHART / "ci").glob("*.yaml"))


def helm(helm_binaries: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(helm_binaries / "helm"), *args], capture_output=True, text=True, timeout=60
    )


def render(helm_binaries: Path, *extra: str) -> list[dict[str, Any]]:
    result = helm(helm_binaries, "template", "rel", str(CHART), "--namespace", "ops", *extra)
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


@pytest.mark.parametrize("values", VALUES, ids=[v.stem for v in VALUES])
def test_lint_is_clean(helm_binaries: Path, values: Path) -> None:
    result = helm(helm_binaries, "lint", str(CHART), "--strict", "-f", str(values))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[WARNING]" not in result.stdout and "[ERROR]" not in result.stdout


def test_defaults_render_cluster_wide_least_privilege(helm_binaries: Path) -> None:
    docs = render(helm_binaries, "-f", str(CHART / "ci" / "default-values.yaml"))
    (role,) = by_kind(docs, "ClusterRole")
    rules: dict[tuple[tuple[str, ...], tuple[str, ...]], set[str]] = {}
    for rule in role["rules"]:  # one resource may be granted by two rules (nodes: pools too)
        key = (tuple(rule["apiGroups"]), tuple(rule["resources"]))
        rules.setdefault(key, set()).update(rule["verbs"])
    assert rules[(("slascaler.io",), ("inferenceslas",))] == {"get", "list", "watch", "patch"}
    assert rules[(("slascaler.io",), ("inferenceslas/status",))] == {"get", "patch"}
    assert rules[(("apps",), ("deployments",))] == {"get", "patch"}
    assert rules[(("apps",), ("deployments/scale",))] == {"get", "patch"}
    assert rules[(("",), ("pods",))] == {"list"}
    assert rules[(("apps",), ("replicasets",))] == {"list"}
    # get: a node's GPU labels (engine defaults); list: GPU pools' node selectors.
    assert rules[(("",), ("nodes",))] == {"get", "list"}
    assert rules[(("apiextensions.k8s.io",), ("customresourcedefinitions",))] == {
        "get", "list", "watch"
    }  # fmt: skip
    assert rules[(("autoscaling",), ("horizontalpodautoscalers",))] == {"list"}
    # Shared GPU pools: GPUPools listed, their status written, nodes (above) and quotas read.
    assert rules[(("slascaler.io",), ("gpupools",))] == {"list"}
    assert rules[(("slascaler.io",), ("gpupools/status",))] == {"patch"}
    assert rules[(("",), ("resourcequotas",))] == {"get"}
    assert all("*" not in verbs and "delete" not in verbs for verbs in rules.values())
    assert not any((k[0][0], k[1]) == ("", ("secrets",)) for k in rules)
    (binding,) = by_kind(docs, "ClusterRoleBinding")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "rel-slascaler", "namespace": "ops"}
    ]
    assert by_kind(docs, "Role") == [] and by_kind(docs, "ClusterKopfPeering") == []
    assert by_kind(docs, "ServiceMonitor") == [] and by_kind(docs, "PodDisruptionBudget") == []
    assert by_kind(docs, "ConfigMap") == [] and by_kind(docs, "PrometheusRule") == []


def test_pod_is_hardened_and_env_carries_the_values(helm_binaries: Path) -> None:
    docs = render(helm_binaries, "-f", str(CHART / "ci" / "ha-namespaced-values.yaml"))
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


def test_namespaced_install_uses_roles_and_peering_per_namespace(helm_binaries: Path) -> None:
    docs = render(helm_binaries, "-f", str(CHART / "ci" / "ha-namespaced-values.yaml"))
    # Cluster-scoped objects: nodes (GPU labels), CRDs and namespaces (Kopf) are only read;
    # GPU pools' rules (GPUPools and nodes are cluster-scoped) come in a ClusterRole of their own.
    roles = {r["metadata"]["name"]: r for r in by_kind(docs, "ClusterRole")}
    assert set(roles) == {"rel-slascaler-cluster-read", "rel-slascaler-gpupools"}
    cluster_read = roles["rel-slascaler-cluster-read"]
    assert {verb for rule in cluster_read["rules"] for verb in rule["verbs"]} <= {
        "get", "list", "watch"
    }  # fmt: skip
    assert {r for rule in cluster_read["rules"] for r in rule["resources"]} == {
        "nodes", "customresourcedefinitions", "namespaces"
    }  # fmt: skip
    pools = roles["rel-slascaler-gpupools"]
    assert {(tuple(r["resources"]), tuple(r["verbs"])) for r in pools["rules"]} == {
        (("gpupools",), ("list",)),
        (("gpupools/status",), ("patch",)),
        (("nodes",), ("list",)),
    }
    assert {b["roleRef"]["name"] for b in by_kind(docs, "ClusterRoleBinding")} == set(roles)
    for namespaced in by_kind(docs, "Role"):
        assert {"resources": ["resourcequotas"], "apiGroups": [""], "verbs": ["get"]} in (
            namespaced["rules"]
        )
    without = render(
        helm_binaries, "-f", str(CHART / "ci" / "ha-namespaced-values.yaml"),
        "--set", "gpuPoolsEnabled=false",
    )  # fmt: skip
    assert [r["metadata"]["name"] for r in by_kind(without, "ClusterRole")] == [
        "rel-slascaler-cluster-read"
    ]
    (env,) = [
        e["value"]
        for e in by_kind(without, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0][
            "env"
        ]
        if e["name"] == "SLASCALER_GPU_POOLS"
    ]
    assert env == "false"
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
    # The operator's `namespace` label is an InferenceSLA's, not the scraped pod's.
    assert monitor["spec"]["endpoints"][0]["honorLabels"] is True
    assert by_kind(docs, "PodDisruptionBudget")[0]["spec"]["minAvailable"] == 1


def test_every_object_has_the_standard_labels(helm_binaries: Path) -> None:
    for values in VALUES:
        for doc in render(helm_binaries, "-f", str(values)):
            labels = doc["metadata"]["labels"]
            assert labels["app.kubernetes.io/name"] == "slascaler", doc["kind"]
            assert labels["app.kubernetes.io/instance"] == "rel"
            assert labels["app.kubernetes.io/managed-by"] == "Helm"


def test_bad_values_are_refused_by_the_schema(helm_binaries: Path) -> None:
    result = helm(helm_binaries, "template", "rel", str(CHART), "--set", "reconcileInterval=often")
    assert result.returncode != 0 and "reconcileInterval" in result.stderr
    result = helm(helm_binaries, "template", "rel", str(CHART), "--set", "replicaCount=0")
    assert result.returncode != 0 and "replicaCount" in result.stderr


def test_crds_come_from_the_single_source(helm_binaries: Path) -> None:
    link = CHART / "crds"
    assert link.is_symlink() and link.resolve() == (CHART.parents[1] / "manifests" / "crds")
    result = helm(helm_binaries, "show", "crds", str(CHART))
    assert "name: inferenceslas.slascaler.io" in result.stdout


def test_dashboard_is_a_configmap_for_grafanas_sidecar(helm_binaries: Path) -> None:
    docs = render(helm_binaries, "-f", str(CHART / "ci" / "ha-namespaced-values.yaml"))
    (config_map,) = by_kind(docs, "ConfigMap")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["namespace"] == "monitoring"
    dashboard = dashboard_of(docs)
    assert dashboard["uid"] == "slascaler"
    assert set(variable_queries(dashboard)) == {"namespace", "name", "deployment"}
    titles = {title for title, _ in panel_queries(dashboard)}
    for wanted in (
        "TTFT against its objective", "Inter-token latency against its objective", "Regime",
        "Replicas: current and recommended", "Decisions by reason (actions and holds)",
        "Changes made and failed actions", "Engine flags", "Reconcile duration",
        "Errors by stage", "Prometheus query latency",
    ):  # fmt: skip
        assert wanted in titles, wanted
    # Engine panels select the target's pods with the chart's labels, as the operator does.
    engine = [q for _, q in panel_queries(dashboard) if "vllm:" in q]
    assert engine and all(
        'kubernetes_namespace="$namespace"' in q and "kubernetes_pod_name=~" in q for q in engine
    )
    assert "__" not in json_text(config_map).replace("$__rate_interval", "")


def json_text(config_map: dict[str, Any]) -> str:
    return str(config_map["data"]["slascaler.json"])


def test_every_dashboard_query_reads_metrics_that_are_exported(helm_binaries: Path) -> None:
    dashboard = dashboard_of(render(helm_binaries, "--set", "dashboardEnabled=true"))
    exported = operator_metric_names() | engine_metric_names()
    variables = variable_queries(dashboard).items()
    queries = panel_queries(dashboard) + [(f"${name}", sel) for name, (sel, _) in variables]
    read = set()
    for title, promql in queries:
        names = metric_names(promql)
        assert names, (title, promql)
        assert names <= exported, (title, names - exported)
        read |= names
    # The parser is not vacuous: it finds the operator's and the engines' names.
    assert {"slascaler_ttft_seconds", "slascaler_engine_flag", "vllm:num_requests_waiting"} <= read
    assert metric_names('sum by (le) (rate(x_bucket{a="b(c)"}[5m])) > 1e3 unless on (n) y') == {
        "x_bucket",
        "y",
    }


def test_alerts_read_exported_metrics_and_link_their_runbook_entry(helm_binaries: Path) -> None:
    docs = render(helm_binaries, "--set", "alertsEnabled=true", "--set", "alertsLabels.team=ml")
    (rule,) = by_kind(docs, "PrometheusRule")
    rules = [r for group in rules_of(docs) for r in group["rules"]]
    assert {r["alert"] for r in rules} == {
        "SlascalerSLANotMet", "SlascalerCapacityLimited", "SlascalerMetricsUnavailable",
        "SlascalerNotReconciling", "SlascalerOperatorDown", "SlascalerActionsFailing",
    }  # fmt: skip
    runbook = (CHART.parents[1] / "docs" / "runbook.md").read_text(encoding="utf-8")
    anchors = {
        re.sub(r"[^a-z0-9-]", "", h.lower().replace(" ", "-"))
        for h in re.findall(r"^## (.+)$", runbook, re.M)
    }
    exported = operator_metric_names() | {"up"}
    for alert in rules:
        assert metric_names(alert["expr"]) <= exported, alert["alert"]
        url = alert["annotations"]["runbook_url"]
        assert url == f"docs/runbook.md#{alert['alert'].lower()}", url
        assert url.split("#")[1] in anchors, (alert["alert"], anchors)
        assert alert["labels"]["team"] == "ml" and alert["labels"]["severity"]
        assert "{{ $labels" in alert["annotations"]["summary"] or "absent" in alert["expr"]
    by_name = {r["alert"]: r for r in rules}
    assert 'job="rel-slascaler-metrics"' in by_name["SlascalerOperatorDown"]["expr"]
    assert by_name["SlascalerMetricsUnavailable"]["for"] == "10m"
    assert "unless" in by_name["SlascalerSLANotMet"]["expr"]
    assert rule["metadata"]["namespace"] == "ops"


def test_bad_alert_and_dashboard_values_are_refused(helm_binaries: Path) -> None:
    for bad in ("alertsSlaNotMetFor=soon", "alertsActionFailuresThreshold=0",
                "dashboardNamespace=Not_A_Name"):  # fmt: skip
        result = helm(helm_binaries, "template", "rel", str(CHART), "--set", bad)
        assert result.returncode != 0 and bad.split("=")[0] in result.stderr, bad


def test_a_shard_release_carries_its_selector_and_cycle_settings(helm_binaries: Path) -> None:
    """Sharding by label: each release serves the InferenceSLAs its selector matches, with
    its own peering (the release's name), and the operator accepts what the chart writes."""
    docs = render(
        helm_binaries, "--set", "selector=shard in (a\\,b)", "--set", "replicaCount=2",
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


def test_recording_rules_are_the_operators_own(helm_binaries: Path) -> None:
    """The PrometheusRule (off by default) records exactly the series the operator reads,
    with the expressions `metrics.promql.recording_rules` gives, per window."""
    assert not by_kind(render(helm_binaries), "PrometheusRule")
    docs = render(
        helm_binaries, "--set", "recordingRulesEnabled=true",
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


def test_the_defaults_are_accepted_with_a_short_interval(helm_binaries: Path) -> None:
    """The chart's defaults leave the cycle's deadline and batch window to the operator, which
    shortens them for a short interval (a fixed 10s deadline refused a 2s interval)."""
    docs = render(helm_binaries, "--set", "reconcileInterval=2s")
    (deployment,) = by_kind(docs, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"] if e.get("value") is not None}
    settings = Settings.from_env(env)
    assert (settings.evaluation_timeout_s, settings.batch_window_s) == (2.0, 0.5)
