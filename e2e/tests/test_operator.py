"""The operator against the real API server (and a real Prometheus): the InferenceSLA's life,
actuation that lands and rolls the Deployment, Events, status, conflicts and dry runs.

The operator runs as a process beside the cluster with the admin's credentials here (the
scenarios in test_scenarios.py run it with the Helm chart's ServiceAccount instead).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from e2e.cluster.processes import poll
from e2e.cluster.prometheus import PrometheusServer
from e2e.engines import EngineFleet, Load
from e2e.kube import Kube, custom_resource_definition, gpu_deployment, is_ready
from e2e.operator import OperatorProcess
from e2e.slas import GROUP, PLURAL, VERSION, SLAWatch, inference_sla, install_crd
from e2e.tests.conftest import LogRegistry, Substrate
from kubernetes.client.exceptions import ApiException
from prometheus_client.parser import text_string_to_metric_families

from slascaler_sim.profiles import PROFILES

ORDER = "min must be less than or equal to max"
FAST = {"scaleUpCooldown": "10s", "scaleDownStabilization": "60s", "knobCooldown": "20s"}


@pytest.fixture(scope="module")
def operator(
    substrate: Substrate,
    prometheus: PrometheusServer,
    tmp_path_factory: pytest.TempPathFactory,
    logs: LogRegistry,
) -> Iterator[OperatorProcess]:
    install_crd(substrate.admin)
    process = OperatorProcess(
        substrate.kubeconfig,
        {
            "SLASCALER_PROMETHEUS_URL": prometheus.url,
            "SLASCALER_RECONCILE_INTERVAL": "2s",
            "SLASCALER_PROMETHEUS_RETRIES": "0",
        },
        tmp_path_factory.mktemp("operator") / "operator.log",
    )
    logs.register("operator", process.tail)
    process.start()
    yield process
    process.stop()
    logs.unregister("operator")


def ready_pods(kube: Kube, namespace: str, app: str) -> list[str]:
    return [p.metadata.name for p in kube.pods(namespace, f"app={app}") if is_ready(p)]


def test_explain_and_refusals_name_the_field(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    explained = kube.kubectl("explain", "inferencesla.spec.objectives.ttft.percentile").stdout
    assert "strictly between 0 and 100" in explained
    bad = {
        "min > max": ({"replicas": {"min": 5, "max": 2}}, "spec.replicas.min", ORDER),
        "unknown engine": ({"engine": "triton"}, "spec.engine", 'supported values: "vllm"'),
        "percentile 150": (
            {"objectives": {"ttft": {"percentile": 150, "thresholdMs": 500}}},
            "spec.objectives.ttft.percentile",
            "should be less than 100",
        ),
        "negative window": ({"window": "-1m"}, "spec.window", "should match"),
        "short window": ({"window": "5s"}, "spec.window", "between 10s and 1h"),
        "chunk bounds": (
            {"knobs": {"chunkSize": {"min": 4096, "max": 512}}}, "spec.knobs.chunkSize.min", ORDER
        ),
    }  # fmt: skip
    for label, (spec, field, message) in bad.items():
        body = inference_sla("bad", "llama", **spec)
        with pytest.raises(ApiException) as refused:
            kube.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
        assert refused.value.status == 422, label
        said = json.loads(refused.value.body)["message"]
        assert f"{field}: " in said and message in said, (label, said)


def test_create_update_delete(kube: Kube, namespace: str, operator: OperatorProcess) -> None:
    kube.apply(gpu_deployment("llama", 1), namespace=namespace)
    kube.apply(inference_sla("llama-sla", "llama", window="20s"), namespace=namespace)
    sla = SLAWatch(kube, namespace, "llama-sla")
    sla.wait_condition("Ready", "True")
    # No engine exports metrics yet: hold, and say why.
    condition = sla.wait_condition("MetricsAvailable", "False", "MissingSeries")
    assert "no vllm:time_to_first_token_seconds, " in condition["message"]
    assert "series from pods of llama in namespace" in condition["message"]
    status = sla.status()
    assert status["observedGeneration"] == 1 and status["regime"] == "Unknown"
    assert status["replicas"] == 1
    table = kube.kubectl("get", "inferenceslas", "-n", namespace).stdout
    assert table.split("\n")[0].split() == [
        "NAME",
        "TARGET",
        "MODE",
        "REGIME",
        "TTFT",
        "REPLICAS",
        "SLA",
        "AGE",
    ]
    assert "llama-sla   llama    Auto" in table
    sla.wait_event("HoldMetricsMissing")

    kube.kubectl(
        "patch",
        "inferencesla",
        "llama-sla",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"spec":{"mode":"Recommend"}}',
    )
    poll(
        lambda: sla.status().get("observedGeneration") == 2,
        timeout=20,
        what="generation 2 evaluated",
    )

    kube.kubectl("delete", "inferencesla", "llama-sla", "-n", namespace, "--timeout=20s")
    assert "llama-sla" not in kube.kubectl("get", "inferenceslas", "-n", namespace).stdout
    deployment = kube.apps.read_namespaced_deployment("llama", namespace)
    assert deployment.metadata.annotations is None or not any(
        k.startswith("slascaler.io") for k in deployment.metadata.annotations
    )


def test_missing_target_is_reported_until_it_appears(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    kube.apply(inference_sla("ghost-sla", "ghost", window="20s"), namespace=namespace)
    sla = SLAWatch(kube, namespace, "ghost-sla")
    condition = sla.wait_condition("Ready", "False", "TargetNotFound")
    assert "Deployment ghost not found" in condition["message"]
    event = sla.wait_event("TargetNotFound")
    assert event["type"] == "Warning" and event["source"] == "slascaler"
    kube.apply(gpu_deployment("ghost", 1), namespace=namespace)
    sla.wait_condition("Ready", "True")


def test_bounds_are_enforced_by_scale_and_an_arg_patch_that_rolls(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    args = ["meta-llama/Llama-3.1-8B-Instruct", "--max-num-seqs", "512", "--port", "8000"]
    kube.apply(gpu_deployment("llama", 4, args=args), namespace=namespace)
    poll(lambda: len(ready_pods(kube, namespace, "llama")) == 4, timeout=60, what="4 ready pods")
    before = set(ready_pods(kube, namespace, "llama"))
    kube.apply(
        inference_sla(
            "llama-sla", "llama", window="20s", replicas={"min": 1, "max": 3},
            knobs={"maxBatchSize": {"min": 8, "max": 64}},
        ),
        namespace=namespace,
    )  # fmt: skip
    sla = SLAWatch(kube, namespace, "llama-sla")

    def rolled() -> bool:
        deployment = kube.apps.read_namespaced_deployment("llama", namespace)
        container = deployment.spec.template.spec.containers[0]
        pods = kube.pods(namespace, "app=llama")
        new = [p for p in pods if is_ready(p) and p.spec.containers[0].args[2] == "64"]
        return (
            deployment.spec.replicas == 3
            and container.args == [*args[:2], "64", *args[3:]]
            and container.env[0].name == "HF_HOME"
            and len(new) == 3 and len(pods) == 3
        )  # fmt: skip

    poll(rolled, timeout=90, what="3 replicas, all rolled to --max-num-seqs 64")
    assert not before & set(ready_pods(kube, namespace, "llama")), "every pod was replaced"
    event = sla.wait_event("BoundsEnforced")
    assert "replicas 4→3" in event["message"] and "maxBatchSize 512→64" in event["message"]
    action = sla.status()["lastAction"]
    assert action["reasonCode"] == "BoundsEnforced" and "replicas 4→3" in action["change"]
    assert sla.status()["engineFlags"] == {"maxBatchSize": 64}


def test_recommend_mode_changes_nothing(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    kube.apply(gpu_deployment("llama", 4, args=["--max-num-seqs", "512"]), namespace=namespace)
    kube.apply(
        inference_sla(
            "llama-sla", "llama", window="20s", mode="Recommend", replicas={"min": 1, "max": 2},
            knobs={"maxBatchSize": {"min": 8, "max": 64}},
        ),
        namespace=namespace,
    )  # fmt: skip
    sla = SLAWatch(kube, namespace, "llama-sla")
    event = sla.wait_event("RecommendBoundsEnforced")
    assert "would change replicas 4→2, maxBatchSize 512→64 (mode Recommend)" in event["message"]
    recommendation = sla.status()["recommendation"]
    assert (recommendation["replicas"], recommendation["maxBatchSize"]) == (2, 64)
    generation = kube.apps.read_namespaced_deployment("llama", namespace).metadata.generation
    # Two more evaluations (lastEvaluated has a one-second resolution, the interval is 2 s).
    evaluations = [sla.status()["lastEvaluated"]]
    poll(
        lambda: evaluations.append(sla.status()["lastEvaluated"]) or len(set(evaluations)) >= 3,
        timeout=15,
        what="two more evaluations",
    )
    deployment = kube.apps.read_namespaced_deployment("llama", namespace)
    assert deployment.spec.replicas == 4 and deployment.metadata.generation == generation
    assert deployment.spec.template.spec.containers[0].args == ["--max-num-seqs", "512"]
    assert "lastAction" not in sla.status() or sla.status()["lastAction"] is None


def sla_in_conflict(kube: Kube, namespace: str, other: str, replicas: int) -> SLAWatch:
    """An InferenceSLA (replicas 1–2) on `llama`, which `other` also scales: Conflict=True
    naming it, and the Deployment left at its `replicas`."""
    kube.apply(
        inference_sla("llama-sla", "llama", window="20s", replicas={"min": 1, "max": 2}),
        namespace=namespace,
    )
    sla = SLAWatch(kube, namespace, "llama-sla")
    condition = sla.wait_condition("Conflict", "True", "OtherAutoscaler")
    assert f"{other} also targets llama" in condition["message"]
    assert kube.apps.read_namespaced_deployment("llama", namespace).spec.replicas == replicas
    return sla


def test_another_autoscaler_means_hands_off(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    kube.apply(gpu_deployment("llama", 4), namespace=namespace)
    kube.autoscaling.create_namespaced_horizontal_pod_autoscaler(
        namespace,
        {
            "metadata": {"name": "llama-hpa"},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llama"},
                "minReplicas": 1, "maxReplicas": 8,
                "metrics": [{"type": "Resource", "resource": {
                    "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80},
                }}],
            },
        },
    )  # fmt: skip
    sla = sla_in_conflict(kube, namespace, "HorizontalPodAutoscaler/llama-hpa", replicas=4)
    kube.autoscaling.delete_namespaced_horizontal_pod_autoscaler("llama-hpa", namespace)
    sla.wait_condition("Conflict", "False")
    poll(
        lambda: kube.apps.read_namespaced_deployment("llama", namespace).spec.replicas == 2,
        timeout=30,
        what="the bound applied once the HPA is gone",
    )


def test_queue_bound_load_scales_out(
    kube: Kube, namespace: str, operator: OperatorProcess, prometheus: PrometheusServer
) -> None:
    kube.apply(gpu_deployment("llama", 1, args=["--max-num-seqs", "16"]), namespace=namespace)
    poll(lambda: len(ready_pods(kube, namespace, "llama")) == 1, timeout=60, what="1 ready pod")
    with EngineFleet(
        kube,
        prometheus,
        namespace,
        "llama",
        PROFILES["llama3-8b-a100"],
        Load(rate=10.0, prompt=1000, output=100),
    ) as engines:
        kube.apply(
            inference_sla(
                "llama-sla", "llama", window="20s", replicas={"min": 1, "max": 4}, behavior=FAST
            ),
            namespace=namespace,
        )
        sla = SLAWatch(kube, namespace, "llama-sla")
        poll(
            lambda: sla.status().get("regime") == "QueueBound",
            timeout=90,
            what="QueueBound",
            describe=lambda: str(sla.status()),
        )
        event = sla.wait_event("ScaleUp", timeout=60)
        assert event["message"].startswith("replicas 1→")
        poll(lambda: engines.ready_replicas() >= 2, timeout=60, what="the new engines serving")
        samples = {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(operator.metrics())
            for sample in family.samples
        }
        sla_labels = (("name", "llama-sla"), ("namespace", namespace))
        actions = samples[("slascaler_actions_total", (("knob", "replicas"), *sla_labels))]
        assert actions >= 1
        regimes = {
            dict(labels)["regime"]: value
            for (metric, labels), value in samples.items()
            if metric == "slascaler_regime" and set(sla_labels) <= set(labels)
        }
        assert "QueueBound" in regimes, regimes
        assert sorted(regimes.values()) == [0.0] * (len(regimes) - 1) + [1.0], regimes


# KEDA's group, kind and version; only the fields slascaler reads matter, so the schema is open.
KEDA_CRD = custom_resource_definition(
    "keda.sh", "ScaledObject", "scaledobjects", "v1alpha1",
    {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
)  # fmt: skip


def test_a_keda_scaled_object_means_hands_off(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    """KEDA's own CRD shape (only the fields slascaler reads matter): its ScaledObject on the
    same Deployment is a conflict too."""
    kube.apply(KEDA_CRD)
    kube.kubectl("wait", "--for=condition=Established", "crd/scaledobjects.keda.sh")
    kube.apply(gpu_deployment("llama", 3), namespace=namespace)
    scaled = {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": "llama-keda"},
        "spec": {"scaleTargetRef": {"name": "llama"}, "minReplicaCount": 1, "maxReplicaCount": 8},
    }
    kube.apply(scaled, namespace=namespace)
    sla_in_conflict(kube, namespace, "ScaledObject/llama-keda", replicas=3)
