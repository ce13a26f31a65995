"""The operator against the real API server (and a real Prometheus): the InferenceSLA's life,
actuation that lands and rolls the Deployment, Events, status, conflicts and dry runs.

The operator runs as a process beside the cluster with the admin's credentials here (the
scenarios in test_scenarios.py run it with the Helm chart's ServiceAccount instead).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest
from e2e.cluster.processes import poll
from e2e.cluster.prometheus import PrometheusServer
from e2e.engines import EngineFleet, Load
from e2e.history import DeploymentHistory
from e2e.kube import Kube, custom_resource_definition, gpu_deployment, is_ready, is_unschedulable
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


# -- two writers, one Deployment (issue 13) --------------------------------------------------


def replicas_of(kube: Kube, namespace: str, name: str = "llama") -> int:
    return int(kube.apps.read_namespaced_deployment(name, namespace).spec.replicas)


def test_two_inference_slas_on_one_deployment_have_one_owner(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    """The oldest owns the Deployment; the other says so and changes nothing, so that two
    specs with disjoint bounds never take turns writing its replica count."""
    kube.apply(gpu_deployment("llama", 4), namespace=namespace)
    with DeploymentHistory(kube, namespace, "llama") as history:
        kube.apply(
            inference_sla("llama-first", "llama", window="20s", replicas={"min": 1, "max": 3}),
            namespace=namespace,
        )
        first = SLAWatch(kube, namespace, "llama-first")
        first.wait_condition("Ready", "True")
        kube.apply(
            inference_sla("llama-second", "llama", window="20s", replicas={"min": 1, "max": 2}),
            namespace=namespace,
        )
        second = SLAWatch(kube, namespace, "llama-second")
        condition = second.wait_condition("Conflict", "True", "OtherInferenceSLA")
        assert "InferenceSLA/llama-first also targets llama and is older" in condition["message"]
        event = second.wait_event("OtherInferenceSLA")
        assert event["type"] == "Warning"
        poll(lambda: replicas_of(kube, namespace) == 3, timeout=30, what="the owner's bound")
        evaluations = [second.status()["lastEvaluated"]]
        poll(
            lambda: (
                evaluations.append(second.status()["lastEvaluated"]) or len(set(evaluations)) >= 4
            ),
            timeout=20,
            what="three more evaluations of the second InferenceSLA",
        )
        assert history.replica_steps() == [(4, 3)], "no flip between the two specs"
        assert first.condition("Conflict")["status"] == "False"


def test_someone_resetting_replicas_is_reported_and_not_fought(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    kube.apply(gpu_deployment("llama", 4), namespace=namespace)
    kube.apply(
        inference_sla("llama-sla", "llama", window="20s", replicas={"min": 1, "max": 2}),
        namespace=namespace,
    )
    sla = SLAWatch(kube, namespace, "llama-sla")
    sla.wait_event("BoundsEnforced")
    poll(lambda: replicas_of(kube, namespace) == 2, timeout=30, what="scaled to 2")
    with DeploymentHistory(kube, namespace, "llama") as history:
        kube.kubectl("scale", "deployment/llama", "--replicas=4", "-n", namespace)  # a person
        condition = sla.wait_condition("Conflict", "True", "ReplicasOverwritten", timeout=30)
        assert "set spec.replicas of llama after slascaler did" in condition["message"]
        assert "drop `replicas` from what" in condition["message"]
        event = sla.wait_event("ReplicasOverwritten")
        assert event["type"] == "Warning" and "drop `replicas`" in event["message"]
        evaluations = [sla.status()["lastEvaluated"]]
        poll(
            lambda: evaluations.append(sla.status()["lastEvaluated"]) or len(set(evaluations)) >= 5,
            timeout=30,
            what="four more evaluations",
        )
        assert history.replica_steps() == [(2, 4)], "scaled back: the fight was not backed off"
        assert sla.status()["recommendation"]["reasonCode"] == "HoldReplicasOverwritten"
        assert len([e for e in sla.events() if e["reason"] == "ReplicasOverwritten"]) == 1


def test_unrelated_writes_do_not_starve_a_needed_scale(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    """A controller annotating the Deployment ~15 times a second while a scale is needed."""
    kube.apply(gpu_deployment("llama", 4), namespace=namespace)
    poll(lambda: len(ready_pods(kube, namespace, "llama")) == 4, timeout=60, what="4 ready pods")
    stop = threading.Event()
    writes: list[float] = []

    def annotate() -> None:
        while not stop.is_set():
            body = {"metadata": {"annotations": {"example.com/synced": str(len(writes))}}}
            with contextlib.suppress(ApiException):
                kube.apps.patch_namespaced_deployment("llama", namespace, body)
                writes.append(time.monotonic())
            stop.wait(1 / 15)

    writer = threading.Thread(target=annotate, daemon=True)
    writer.start()
    try:
        poll(lambda: len(writes) > 5, timeout=10, what="the writer running")
        kube.apply(
            inference_sla("llama-sla", "llama", window="20s", replicas={"min": 1, "max": 2}),
            namespace=namespace,
        )
        poll(lambda: replicas_of(kube, namespace) == 2, timeout=60, what="the scale landing")
        landed = time.monotonic()
    finally:
        stop.set()
        writer.join(timeout=5)
    during = [t for t in writes if t <= landed]
    rate = (len(during) - 1) / (during[-1] - during[0])
    # The premise: writes kept coming (aimed at 15/s; each is a round trip, slower on a
    # loaded machine), so the operator's conditional patch raced them.
    assert rate > 5, f"the writer wrote {rate:.1f}/s meanwhile"
    sla = SLAWatch(kube, namespace, "llama-sla")
    # The status is written right after the scale, in the same evaluation.
    poll(
        lambda: (sla.status().get("lastAction") or {}).get("change") == "replicas 4→2",
        timeout=20, what="lastAction naming the scale",
    )  # fmt: skip
    holds = [e for e in sla.events() if e["reason"] == "HoldTargetChanged"]
    assert len(holds) <= 1, holds


def test_no_flag_change_during_someone_elses_stuck_rollout(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    args = ["--max-num-seqs", "512"]
    manifest = gpu_deployment("llama", 2, args=args, max_unavailable=0)
    kube.apply(manifest, namespace=namespace)
    poll(lambda: len(ready_pods(kube, namespace, "llama")) == 2, timeout=60, what="2 ready pods")
    stuck = {"spec": {"template": {"spec": {"nodeSelector": {"example.com/no-such": "node"}}}}}
    kube.apps.patch_namespaced_deployment("llama", namespace, stuck)  # new pods stay Pending
    poll(
        lambda: any(is_unschedulable(p) for p in kube.pods(namespace, "app=llama")),
        timeout=30,
        what="the rollout stuck on a Pending pod",
    )
    kube.apply(
        inference_sla(
            "llama-sla", "llama", window="20s", knobs={"maxBatchSize": {"min": 8, "max": 64}}
        ),
        namespace=namespace,
    )
    sla = SLAWatch(kube, namespace, "llama-sla")
    poll(
        lambda: sla.status().get("recommendation", {}).get("reasonCode") == "HoldForeignRollout",
        timeout=30,
        what="HoldForeignRollout",
        describe=lambda: str(sla.status()),
    )
    event = sla.wait_event("HoldForeignRollout")
    assert "a rollout slascaler did not start is in progress" in event["message"]
    template = kube.apps.read_namespaced_deployment("llama", namespace).spec.template
    assert template.spec.containers[0].args == args, "no template patch on their rollout"

    kube.kubectl("rollout", "undo", "deployment/llama", "-n", namespace)  # they give up on it
    poll(
        lambda: (
            kube.apps.read_namespaced_deployment("llama", namespace)
            .spec.template.spec.containers[0]
            .args
            == ["--max-num-seqs", "64"]
        ),
        timeout=60,
        what="the bound applied once their rollout is gone",
    )


def test_unusable_engine_command_lines_are_refused_and_the_status_is_written(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    """A shell script (nothing appended after it), an int32-overflowing value (the status is
    still written: its fields are int32) and an absent flag on a labelled A100 node (the
    default assumed is said in status.notes, which the CRD keeps)."""
    shell = gpu_deployment("shell", 1, args=["vllm serve llama --port 8000"])
    shell["spec"]["template"]["spec"]["containers"][0]["command"] = ["sh", "-c"]
    huge = gpu_deployment("huge", 1, args=["--max-num-seqs", "99999999999"])
    plain = gpu_deployment("plain", 1, args=["--max-num-seqs", "16"])
    kube.apply(shell, huge, plain, namespace=namespace)
    knobs = {
        "knobs": {"maxBatchSize": {"min": 8, "max": 64}, "chunkSize": {"min": 512, "max": 8192}}
    }
    for name in ("shell", "huge", "plain"):
        kube.apply(inference_sla(f"{name}-sla", name, window="20s", **knobs), namespace=namespace)

    condition = SLAWatch(kube, namespace, "shell-sla").wait_condition(
        "EngineFlags", "False", "ShellScript"
    )
    assert "run the engine directly" in condition["message"]
    huge_sla = SLAWatch(kube, namespace, "huge-sla")
    condition = huge_sla.wait_condition("EngineFlags", "False", "OutOfRange")
    assert "99999999999 is beyond 2147483647" in condition["message"]
    assert huge_sla.status()["observedGeneration"] == 1
    plain_sla = SLAWatch(kube, namespace, "plain-sla")
    poll(
        lambda: plain_sla.status().get("notes"),
        timeout=30,
        what="notes in the status",
        describe=lambda: str(plain_sla.status()),
    )
    assert (
        "--max-num-batched-tokens is not set: assuming 2048, vLLM 0.33's default on "
        "NVIDIA-A100-SXM4-80GB (81920 MiB)"
    ) in plain_sla.status()["notes"]
    assert plain_sla.status()["engineFlags"] == {"maxBatchSize": 16, "chunkSize": 2048}
    for name, args in (
        ("shell", ["vllm serve llama --port 8000"]),
        ("huge", ["--max-num-seqs", "99999999999"]),
    ):
        container = kube.apps.read_namespaced_deployment(name, namespace).spec.template.spec
        assert container.containers[0].args == args, name
    assert "Traceback" not in operator.tail(400)


def test_a_deployment_at_zero_replicas_stays_at_zero(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    kube.apply(gpu_deployment("llama", 0), namespace=namespace)
    kube.apply(
        inference_sla("llama-sla", "llama", window="20s", replicas={"min": 2, "max": 4}),
        namespace=namespace,
    )
    sla = SLAWatch(kube, namespace, "llama-sla")
    event = sla.wait_event("HoldScaledToZero")
    assert "scaling is disabled, as the HPA treats 0" in event["message"]
    assert replicas_of(kube, namespace) == 0
    kube.kubectl("scale", "deployment/llama", "--replicas=1", "-n", namespace)
    poll(lambda: replicas_of(kube, namespace) == 2, timeout=30, what="min applied once scaled up")


def test_a_frozen_api_server_costs_evaluations_not_the_operator(
    kube: Kube, namespace: str, operator: OperatorProcess, substrate: Substrate
) -> None:
    """kube-apiserver SIGSTOPped for 15 s: calls give up at their timeout (logged, no
    traceback), and evaluations resume once it answers."""
    if substrate.cluster is None:
        pytest.skip("needs the local control plane (its kube-apiserver process)")
    kube.apply(gpu_deployment("llama", 1), namespace=namespace)
    kube.apply(inference_sla("llama-sla", "llama", window="20s"), namespace=namespace)
    sla = SLAWatch(kube, namespace, "llama-sla")
    sla.wait_condition("Ready", "True")
    log_start = operator.log.stat().st_size
    apiserver = substrate.cluster.services["kube-apiserver"]
    frozen_at = time.monotonic()
    os.kill(apiserver.pid, signal.SIGSTOP)
    try:
        poll(
            lambda: time.monotonic() - frozen_at >= 15, timeout=20, interval=0.5, what="15 s frozen"
        )
    finally:
        os.kill(apiserver.pid, signal.SIGCONT)
    # The first requests to the resumed server may still fail: read through a poll.
    before = poll(lambda: sla.status().get("lastEvaluated"), timeout=20, what="a status read")
    poll(
        lambda: (
            sla.status().get("lastEvaluated") != before
            and sla.condition("Ready").get("status") == "True"
        ),
        timeout=60,
        what="evaluations resumed",
    )
    text = operator.log.read_text(encoding="utf-8", errors="replace")[log_start:]
    assert "timed out" in text or "Timeout" in text, text[-3000:]
    assert "Traceback" not in text, text[-6000:]


def test_the_operator_log_has_no_traceback(operator: OperatorProcess) -> None:
    """(Last in this module.) Nothing the tests above made the operator meet — refusals,
    conflicts, unusable command lines, a frozen API server — printed a traceback."""
    text = operator.log.read_text(encoding="utf-8", errors="replace")
    assert "slascaler starting" in text
    lines = [line for line in text.splitlines() if "Traceback" in line]
    assert not lines, text[text.index("Traceback") - 2000 :][:6000]
