"""End-to-end SLA scenarios: the chart installed with `helm install`, the operator running from
its image with the chart's ServiceAccount, environment and securityContext, a real Prometheus
scraping simulated engines that follow the target Deployment's pods (and the operator's own
metrics), and load changed while it runs. Each scenario asserts
outcomes by polling with deadlines; `DeploymentHistory` records every change of the target so
that each one announced by an Event is checked to have happened exactly once.

Scenario 11: two InferenceSLAs share a GPUPool whose limit is the KWOK nodes' 8 GPUs; the
high-priority one's load rises and it takes GPUs from the low-priority one (Events and
conditions on both, never below the low one's min, never over the pool), and gives them back
once its load fell and its stabilization window passed.

Scenario 12 reads the operator's log for tracebacks and refusals after all of the above.
Scenario 9's uninstall takes the operator's RBAC away while the old process still runs, so
that process then logs refusals: scenario 9 keeps a copy of the log as it was before its
uninstall, and scenario 12 reads that copy when scenario 9 has run first (in any order).

Scenario 10 loads the chart's alerts into the e2e Prometheus, fires SlascalerMetricsUnavailable
and sees SlascalerSLANotMet pending, and runs every query of the chart's dashboard against that
Prometheus (which scrapes the operator's pod); it runs before scenario 9, which uninstalls.

Scenario 6 (invalid InferenceSLAs refused with messages naming the field) is
`test_operator.py::test_explain_and_refusals_name_the_field`; Recommend mode per object is
`test_operator.py::test_recommend_mode_changes_nothing` (here the chart's dry run is checked).
"""

from __future__ import annotations

import contextlib
import itertools
import re
import shutil
import threading
import time
from collections.abc import Iterator
from typing import Any

import kubernetes.watch
import pytest
from e2e.chart import HelmRelease, OperatorKubelet
from e2e.cluster.local import NODE_LABEL
from e2e.cluster.processes import poll
from e2e.cluster.prometheus import PrometheusServer
from e2e.dashboard import (
    dashboard_of,
    panel_queries,
    render,
    rules_of,
    substitute,
    variable_queries,
)
from e2e.engines import EngineFleet, Load, percentile
from e2e.history import DeploymentHistory
from e2e.image import OperatorImage
from e2e.kube import Kube, gpu_deployment, is_ready, node_gpus
from e2e.pod import ContainerProcess
from e2e.slas import (
    GROUP,
    POOL_PLURAL,
    VERSION,
    PoolWatch,
    SLAWatch,
    gpu_pool,
    inference_sla,
    install_pool_crd,
)
from e2e.tests.conftest import LogRegistry, Substrate
from kubernetes.client.exceptions import ApiException

from slascaler.policy.reasons import PACING_HOLDS
from slascaler_sim.profiles import PROFILES, CostProfile

RELEASE_NAMESPACE = "slascaler-system"
FAST = {"scaleUpCooldown": "10s", "scaleDownStabilization": "45s", "knobCooldown": "20s"}
A100, H100 = PROFILES["llama3-8b-a100"], PROFILES["llama3-8b-h100"]


@pytest.fixture(scope="module")
def release(
    substrate: Substrate,
    prometheus: PrometheusServer,
    operator_image: OperatorImage,
    tmp_path_factory: pytest.TempPathFactory,
    logs: LogRegistry,
) -> Iterator[tuple[HelmRelease, OperatorKubelet]]:
    workdir = tmp_path_factory.mktemp("chart")
    helm = HelmRelease(substrate.admin, "slascaler", RELEASE_NAMESPACE, workdir)
    values = {
        "prometheusUrl": prometheus.url,
        "reconcileInterval": "2s",
        "prometheusRetries": 0,
        "prometheusTimeout": "2s",
    }
    helm.install(values)
    kubelet = OperatorKubelet(helm, workdir, operator_image, prometheus).start()
    logs.register("operator (chart)", kubelet.tail)
    kubelet.wait_running()
    yield helm, kubelet
    kubelet.close()
    logs.unregister("operator (chart)")
    with contextlib.suppress(AssertionError):  # already uninstalled by the last scenario
        helm.uninstall()


def span(low: int, high: int) -> dict[str, int]:
    return {"min": low, "max": high}


def objectives(ttft_ms: float, itl_ms: float) -> dict[str, dict[str, float]]:
    return {
        "ttft": {"percentile": 95, "thresholdMs": ttft_ms},
        "itl": {"percentile": 95, "thresholdMs": itl_ms},
    }


def deploy(kube: Kube, namespace: str, name: str, replicas: int, **spec: Any) -> None:
    """Apply a GPU Deployment and wait for all its pods to be Ready."""
    kube.apply(gpu_deployment(name, replicas, **spec), namespace=namespace)
    poll(
        lambda: ready_count(kube, namespace, name) == replicas,
        timeout=60,
        what=f"{replicas} ready pods of {name}",
    )


def ready_count(kube: Kube, namespace: str, app: str) -> int:
    return sum(1 for p in kube.pods(namespace, f"app={app}") if is_ready(p))


def args_of_pods(kube: Kube, namespace: str, app: str) -> list[list[str]]:
    return [list(p.spec.containers[0].args or []) for p in kube.pods(namespace, f"app={app}")]


def flag(args: list[str], name: str) -> int:
    return int(args[args.index(name) + 1])


def announced(sla: SLAWatch, pattern: str) -> list[str]:
    return [e["message"] for e in sla.events() if re.search(pattern, e["message"] or "")]


@contextlib.contextmanager
def under_sla(
    kube: Kube,
    namespace: str,
    prometheus: PrometheusServer,
    name: str,
    profile: CostProfile,
    load: Load,
    **sla_spec: Any,
) -> Iterator[tuple[EngineFleet, DeploymentHistory, SLAWatch]]:
    """Engines serving `load` on the Deployment `name`'s pods, its history recorded, and the
    InferenceSLA `<name>-sla` on it with `sla_spec`."""
    with (
        EngineFleet(kube, prometheus, namespace, name, profile, load) as engines,
        DeploymentHistory(kube, namespace, name) as history,
    ):
        kube.apply(inference_sla(f"{name}-sla", name, **sla_spec), namespace=namespace)
        yield engines, history, SLAWatch(kube, namespace, f"{name}-sla")


@contextlib.contextmanager
def killed_on_change(
    kube: Kube, namespace: str, name: str, kubelet: OperatorKubelet
) -> Iterator[threading.Event]:
    """SIGKILL the operator as soon as a watch sees the Deployment's engine args change
    (milliseconds after the write: before or after the action's Event, whichever it meets)."""
    deployment = kube.apps.read_namespaced_deployment(name, namespace)
    args = deployment.spec.template.spec.containers[0].args
    killed, stop = threading.Event(), threading.Event()

    def watch() -> None:
        watcher = kubernetes.watch.Watch()
        for event in watcher.stream(
            kube.apps.list_namespaced_deployment, namespace,
            field_selector=f"metadata.name={name}",
            resource_version=deployment.metadata.resource_version, timeout_seconds=150,
        ):  # fmt: skip
            if event["object"].spec.template.spec.containers[0].args != args:
                kubelet.kill()
                killed.set()
            if killed.is_set() or stop.is_set():
                watcher.stop()

    thread = threading.Thread(target=watch, daemon=True, name="kill-on-change")
    thread.start()
    try:
        yield killed
    finally:
        stop.set()


def observe(seconds: float, what: str) -> None:
    """Let `seconds` pass while the DeploymentHistory records: the assertions after it are
    about what did not happen in that time."""
    until = time.monotonic() + seconds
    poll(lambda: time.monotonic() >= until, timeout=seconds + 10, interval=1, what=what)


def test_1_load_step_scales_out_then_back_in(
    kube: Kube, namespace: str, prometheus: PrometheusServer, release: object
) -> None:
    deploy(kube, namespace, "llama", 1, args=["--max-num-seqs", "16"])
    with under_sla(
        kube, namespace, prometheus, "llama", A100, Load(4.0, 1000, 100),
        window="20s", replicas=span(1, 6), behavior=FAST,
    ) as (engines, history, sla):  # fmt: skip
        poll(lambda: sla.status().get("regime") == "Healthy", timeout=90, what="Healthy at 4 req/s")
        assert history.replica_steps() == [], "no change while healthy"

        engines.set_load(Load(16.0, 1000, 100))  # ×4
        stepped = time.monotonic()
        poll(lambda: sla.status().get("regime") == "QueueBound", timeout=60, what="QueueBound")
        poll(lambda: engines.ready_replicas() >= 3, timeout=90, what="≥ 3 engines serving")

        def met_again() -> bool:
            recent = engines.client_ttft_ms(since=engines.now() - 15)
            return len(recent) > 100 and percentile(recent, 95) <= 500

        poll(met_again, timeout=150, what="client TTFT p95 ≤ 500 ms over 15 s")
        recovered_s = time.monotonic() - stepped
        assert recovered_s < 150
        poll(lambda: sla.status().get("regime") == "Healthy", timeout=60, what="Healthy again")
        peak = max(c.replicas for c in history.snapshot())
        assert 3 <= peak <= 6

        engines.set_load(Load(4.0, 1000, 100))
        poll(lambda: history.replica_steps()[-1][1] < history.replica_steps()[-1][0], timeout=150,
             what="a scale-in")  # fmt: skip
        peak = max(c.replicas for c in history.snapshot())
        pairs = list(itertools.pairwise(history.snapshot()))
        first_down = next(b.at for a, b in pairs if b.replicas < a.replicas)
        last_up = max(b.at for a, b in pairs if b.replicas > a.replicas and b.at < first_down)
        # (Less 1 s: the history samples the Deployment every 0.25 s, after a read.)
        assert first_down - last_up >= 44, "scale-in only after the 45 s stabilization window"

        # Then it settles: a quiet period of 30 s with no change at all.
        poll(
            lambda: time.monotonic() - history.last_change_at() >= 30,
            timeout=180,
            interval=1,
            what="30 s without a change",
        )
        settled = history.snapshot()[-1]
        said = f"steps:\n{history.story()}\nEvents:\n{sla.story()}"
        assert settled.replicas < peak, said
        for before, after in history.replica_steps():
            assert announced(sla, rf"replicas {before}→{after}\b"), (before, after, sla.events())
        # The cooldowns and starting pods between the scale-ups are in the status, not Events.
        reasons = {event["reason"] for event in sla.events()}
        assert not reasons & PACING_HOLDS, reasons
        print(f"\nscenario 1: recovered in {recovered_s:.0f} s, peak {peak} replicas\n{said}")


def test_2_prefill_bound_raises_chunk_size_and_a_restart_repeats_nothing(
    kube: Kube,
    namespace: str,
    prometheus: PrometheusServer,
    release: tuple[HelmRelease, OperatorKubelet],
) -> None:
    _, kubelet = release
    deploy(kube, namespace, "coder", 1, args=["--max-num-batched-tokens", "256"])
    with under_sla(
        kube, namespace, prometheus, "coder", H100, Load(1.5, 3000, 50),
        window="30s", replicas=span(1, 4),
        objectives={"ttft": {"percentile": 95, "thresholdMs": 200}},
        knobs={"chunkSize": {"min": 256, "max": 8192}},
        behavior={**FAST, "knobCooldown": "300s"},  # no second change within the test
    ) as (_, history, sla):  # fmt: skip
        with killed_on_change(kube, namespace, "coder", kubelet) as killed:
            poll(killed.is_set, timeout=120, what="the flag written, and the operator killed")
        # SIGKILLed within milliseconds of the write: the Event was posted before, or is by
        # the restarted operator, which finds the action announced in the status.
        event = sla.wait_event("RaiseChunkForPrefill", timeout=60)
        assert event["message"].startswith("chunkSize 256→")

        def rolled() -> bool:
            pods = args_of_pods(kube, namespace, "coder")
            return (
                len(pods) == 1
                and flag(pods[0], "--max-num-batched-tokens") > 256
                and ready_count(kube, namespace, "coder") == 1
            )

        poll(rolled, timeout=60, what="the pod rolled to a larger chunk")
        kubelet.wait_running()
        restarted = sla.status().get("lastEvaluated")
        poll(
            lambda: sla.status().get("lastEvaluated") != restarted,
            timeout=30,
            what="the restarted operator evaluating",
        )
        observe(20, what="20 s after the restart")
        assert history.args_changes() == 1, "the restarted operator did not repeat the change"
        assert history.replica_steps() == [], "prefill-bound: replicas never change"
        assert len([e for e in sla.events() if e["reason"] == "RaiseChunkForPrefill"]) == 1
        assert sla.status()["lastAction"]["reasonCode"] == "RaiseChunkForPrefill"
        assert not sla.status().get("pendingAction")


def test_3_itl_over_target_lowers_max_batch_size(
    kube: Kube, namespace: str, prometheus: PrometheusServer, release: object
) -> None:
    deploy(kube, namespace, "chat", 1, args=["--max-num-seqs", "64"])
    with under_sla(
        kube, namespace, prometheus, "chat", A100, Load(8.0, 1000, 100),
        window="20s", replicas=span(1, 4), objectives=objectives(ttft_ms=500, itl_ms=60),
        knobs={"maxBatchSize": {"min": 4, "max": 256}}, behavior=FAST,
    ) as (_, _, sla):  # fmt: skip
        event = sla.wait_event("LowerBatchForITL", timeout=90)
        lowered = int(re.search(r"maxBatchSize 64→(\d+)", event["message"]).group(1))  # type: ignore[union-attr]
        assert lowered < 64
        poll(
            lambda: (
                all(
                    flag(a, "--max-num-seqs") == lowered
                    for a in args_of_pods(kube, namespace, "chat")
                )
                and ready_count(kube, namespace, "chat") >= 1
            ),
            timeout=60,
            what=f"pods rolled to --max-num-seqs {lowered}",
        )


def test_4_gpus_exhausted_caps_replicas_and_raises_batch(
    kube: Kube, namespace: str, prometheus: PrometheusServer, release: object
) -> None:
    total, used = node_gpus(kube)
    per_pod = (total - used) // 2  # two pods fit, a third does not
    assert per_pod >= 1
    # Changing a flag at capacity needs a rollout that may take a pod down (no GPU is free).
    deploy(
        kube, namespace, "big", 1, args=["--max-num-seqs", "16"], gpus=per_pod, max_unavailable=1
    )
    with under_sla(
        kube, namespace, prometheus, "big", A100, Load(24.0, 1000, 100),
        window="20s", replicas=span(1, 8), objectives=objectives(ttft_ms=500, itl_ms=200),
        knobs={"maxBatchSize": {"min": 8, "max": 64}}, behavior=FAST,
    ) as (_, history, sla):  # fmt: skip
        condition = sla.wait_condition("CapacityLimited", "True", "Unschedulable", timeout=120)
        assert "cannot be scheduled (no GPU left)" in condition["message"]
        capped = max(c.replicas for c in history.snapshot())

        def raised() -> bool:
            pods = kube.pods(namespace, "app=big")
            return len(pods) == 2 and all(
                is_ready(p) and flag(p.spec.containers[0].args, "--max-num-seqs") > 16 for p in pods
            )

        poll(raised, timeout=120, what="the 2 schedulable pods rolled to a larger batch")
        assert (capped, 2) in history.replica_steps(), "Pending pods dropped for the rollout"
        settled = history.snapshot()[-1]
        observe(15, what="15 s more")
        assert history.snapshot()[-1].replicas == settled.replicas == 2, "no further scale-up"
        sla.wait_condition("CapacityLimited", "True", "GPUsExhausted", timeout=10)
        assert announced(sla, r"maxBatchSize 16→\d+")


def test_5_prometheus_stopped_holds_then_recovers(
    kube: Kube, namespace: str, prometheus: PrometheusServer, release: object
) -> None:
    deploy(kube, namespace, "llama", 2, args=["--max-num-seqs", "16"])
    with under_sla(
        kube, namespace, prometheus, "llama", A100, Load(4.0, 1000, 100),
        window="20s", replicas=span(2, 6), behavior=FAST,
    ) as (engines, history, sla):  # fmt: skip
        sla.wait_condition("MetricsAvailable", "True", timeout=90)
        prometheus.stop()
        try:
            engines.set_load(Load(30.0, 1000, 100))  # would need more replicas, if it could see
            condition = sla.wait_condition(
                "MetricsAvailable", "False", "SourceUnavailable", timeout=30
            )
            assert f"Prometheus at {prometheus.url} did not answer" in condition["message"]
            observe(15, what="15 s without metrics")
            assert history.replica_steps() == [], "no action without metrics"
            sla.wait_event("HoldMetricsUnavailable")
        finally:
            prometheus.start()
        sla.wait_condition("MetricsAvailable", "True", timeout=90)
        poll(
            lambda: history.replica_steps() != [],
            timeout=90,
            what="acting again once metrics are back",
        )


POOL_FAST = {"scaleUpCooldown": "5s", "scaleDownStabilization": "15s", "knobCooldown": "20s"}


def at_most(histories: dict[str, DeploymentHistory], gpus_per_pod: int) -> int:
    """The most GPUs the Deployments asked for at once over their recorded histories."""
    events = sorted(
        (change.at, name, change.replicas)
        for name, history in histories.items()
        for change in history.snapshot()
    )
    current: dict[str, int] = {}
    most = 0
    for _, name, replicas in events:
        current[name] = replicas
        most = max(most, sum(current.values()) * gpus_per_pod)
    return most


def test_11_gpu_pool_lends_gpus_to_the_higher_priority_and_gets_them_back(
    kube: Kube, namespace: str, prometheus: PrometheusServer, release: object
) -> None:
    started = time.monotonic()
    total, used = node_gpus(kube)
    assert (total, used) == (8, 0), "the pool's limit is the nodes' 8 GPUs, all free"
    install_pool_crd(kube)
    explained = kube.kubectl("explain", "gpupool.spec.limit").stdout
    assert "exactly one of" in explained
    bad = gpu_pool("bad", {}, {"gpus": 4, "nodeSelector": {}})
    with pytest.raises(ApiException) as refused:
        kube.custom.create_cluster_custom_object(GROUP, VERSION, POOL_PLURAL, bad)
    assert "set exactly one of gpus, nodeSelector, resourceQuota" in str(refused.value.body)

    name = f"pool-{namespace.rsplit('-', 1)[-1]}"
    labels = {"slascaler.io/pool": name}
    nodes = {"nodeSelector": {"matchLabels": {NODE_LABEL: "true"}}}
    kube.apply(gpu_pool(name, {"matchLabels": labels}, nodes, [namespace]))
    pool = PoolWatch(kube, name)
    try:
        deploy(kube, namespace, "chat", 1, gpus=2)
        deploy(kube, namespace, "batch", 3, gpus=2)  # 8 GPUs in all: the pool is full
        spec: dict[str, Any] = {
            "window": "10s", "behavior": POOL_FAST,
            "objectives": {"ttft": {"percentile": 95, "thresholdMs": 500}},
        }  # fmt: skip
        with (
            EngineFleet(kube, prometheus, namespace, "chat", A100, Load(2.0, 1000, 50)) as chat,
            EngineFleet(kube, prometheus, namespace, "batch", A100, Load(30.0, 1000, 50)),
            DeploymentHistory(kube, namespace, "chat") as chat_history,
            DeploymentHistory(kube, namespace, "batch") as batch_history,
        ):
            kube.apply(
                inference_sla("chat-sla", "chat", labels, priority=10, replicas=span(1, 4), **spec),
                inference_sla("batch-sla", "batch", labels, priority=0, replicas=span(1, 3),
                              **spec),
                namespace=namespace,
            )  # fmt: skip
            high = SLAWatch(kube, namespace, "chat-sla")
            low = SLAWatch(kube, namespace, "batch-sla")
            poll(lambda: set(pool.members()) == {"chat-sla", "batch-sla"}, timeout=30,
                 what="both SLAs in the pool", describe=lambda: str(pool.status()))  # fmt: skip
            assert pool.status()["limit"] == 8
            assert pool.condition("Ready")["status"] == "True"

            # chat's load rises: it wants 4 replicas (8 GPUs); batch keeps its min (2 GPUs).
            chat.set_load(Load(30.0, 1000, 50))
            preempted = low.wait_condition("Preempted", "True", "ByHigherPriority", timeout=60)
            assert f"{namespace}/chat-sla" in preempted["message"]
            poll(lambda: ready_count(kube, namespace, "chat") == 3, timeout=45,
                 what="chat running the 3 replicas the pool grants it")  # fmt: skip
            assert kube.apps.read_namespaced_deployment("batch", namespace).spec.replicas == 1
            waiting = high.wait_condition("CapacityLimited", "True", "BudgetExhausted", timeout=20)
            assert "grants 3" in waiting["message"]
            assert "go to" in low.wait_event("PreemptedByPool")["message"]
            assert "from" in high.wait_event("GrantedByPool")["message"]
            assert any(e["reason"] == "Preempted" for e in low.events()), "the action's Event"
            taken_at = time.monotonic()
            listed = kube.kubectl("get", "gpupool", name).stdout
            assert "/8" in listed and "SLAS" in listed.splitlines()[0]
            wide = kube.kubectl("get", "inferenceslas", "-n", namespace, "-o", "wide").stdout
            assert "POOL" in wide.splitlines()[0] and name in wide
            print(f"\n$ kubectl get gpupool {name}\n{listed}$ kubectl get inferenceslas -o wide"
                  f"\n{wide}")  # fmt: skip

            # chat's load falls: it keeps what it took for its 15 s window, then gives it back.
            chat.set_load(Load(0.0))
            poll(
                lambda: kube.apps.read_namespaced_deployment("batch", namespace).spec.replicas
                == 3,
                timeout=90,
                what="batch back to 3 replicas",
                describe=lambda: f"pool: {pool.status()}",
            )
            assert time.monotonic() - taken_at >= 15, "not given back within the window"
            low.wait_condition("Preempted", "False", timeout=20)
            assert high.wait_event("ReturnedToPool")
            assert len([e for e in low.events() if e["reason"] == "GrantedByPool"]) >= 1
            assert min(c.replicas for c in batch_history.snapshot()) == 1, "never below min"
            most = at_most({"chat": chat_history, "batch": batch_history}, 2)
            assert most <= 8, f"{most} GPUs asked for at once"
    finally:
        kube.kubectl("delete", "gpupool", name, "--ignore-not-found", "--wait=false")
    print(f"\nscenario 11: {time.monotonic() - started:.0f} s")


def firing(
    prometheus: PrometheusServer, alert: str, states: set[str], **labels: str
) -> list[dict[str, Any]]:
    return [
        a
        for a in prometheus.alerts()
        if a["labels"].get("alertname") == alert
        and a["state"] in states
        and all(a["labels"].get(k) == v for k, v in labels.items())
    ]


def test_10_alerts_fire_and_every_dashboard_query_returns_data(
    kube: Kube,
    namespace: str,
    prometheus: PrometheusServer,
    substrate: Substrate,
    release: tuple[HelmRelease, OperatorKubelet],
) -> None:
    _, kubelet = release
    container = kubelet.process
    assert isinstance(container, ContainerProcess), "the chart's pod runs from the image"
    assert "ro" in container.mount_options("/"), "readOnlyRootFilesystem"
    docs = render(
        substrate.bin_dir / "helm",
        *("--set", "dashboardEnabled=true", "--set", "alertsEnabled=true"),
        *("--set", "alertsMetricsUnavailableFor=5s", "--set", "alertsOperatorJob=operator"),
    )
    prometheus.set_rules("slascaler", rules_of(docs))
    try:
        poll(
            lambda: all(r["health"] == "ok" for g in prometheus.rules() for r in g["rules"]),
            timeout=30,
            what="every rule evaluated without error",
            describe=lambda: str(prometheus.rules()),
        )
        # A Deployment no engine serves: no series, MetricsAvailable=False, the alert fires.
        deploy(kube, namespace, "silent", 1)
        kube.apply(inference_sla("silent-sla", "silent"), namespace=namespace)
        # One whose TTFT objective (50 ms) is below a 1000-token prefill on an A100: SLAMet
        # False (InfeasibleForPrompts), no GPU shortage, so SlascalerSLANotMet is pending (its
        # `for` is 15 minutes); with an ITL objective and an engine flag, every panel has data.
        deploy(kube, namespace, "llama", 1, args=["--max-num-seqs", "16"])
        with under_sla(
            kube, namespace, prometheus, "llama", A100, Load(4.0, 1000, 100),
            window="20s", replicas=span(1, 3), objectives=objectives(ttft_ms=50, itl_ms=200),
            behavior=FAST,
        ) as (_, _, sla):  # fmt: skip
            poll(
                lambda: firing(prometheus, "SlascalerSLANotMet", {"pending", "firing"},
                               namespace=namespace, name="llama-sla"),
                timeout=90,
                what="SlascalerSLANotMet pending for the loaded SLA",
                describe=lambda: str(sla.status().get("conditions")),
            )  # fmt: skip
            (alert,) = poll(
                lambda: firing(prometheus, "SlascalerMetricsUnavailable", {"firing"},
                               namespace=namespace, name="silent-sla"),
                timeout=60,
                what="SlascalerMetricsUnavailable firing for the SLA without metrics",
                describe=lambda: str(prometheus.alerts()),
            )  # fmt: skip
            assert alert["annotations"]["runbook_url"].endswith("#slascalermetricsunavailable")
            # Not firing (a single evaluation past its 2 s deadline on a loaded machine makes
            # the alert pending for a few seconds; its `for: 5s` is what keeps that quiet).
            assert not firing(prometheus, "SlascalerMetricsUnavailable", {"firing"},
                              namespace=namespace, name="llama-sla")  # fmt: skip

            dashboard = dashboard_of(docs)
            values = {"namespace": namespace, "name": "llama-sla", "deployment": "llama"}
            for variable, (selector, label) in variable_queries(dashboard).items():
                series = prometheus.query(substitute(selector, values))
                assert values[variable] in {s["metric"].get(label) for s in series}, variable

            def without_data() -> list[str]:
                return [
                    f"{title}: {query}"
                    for title, query in panel_queries(dashboard)
                    if not prometheus.query(substitute(query, values))
                ]

            poll(lambda: not without_data(), timeout=60, what="data for every panel's query",
                 describe=lambda: "\n".join(without_data()))  # fmt: skip
    finally:
        prometheus.set_rules("slascaler", [])
    assert container.written_outside_tmp() == []


LOG_BEFORE_UNINSTALL = "operator.before-uninstall.log"


def test_12_the_operator_log_stays_clean(release: tuple[HelmRelease, OperatorKubelet]) -> None:
    """Everything the scenarios made the operator do (with the chart's ServiceAccount: its
    RBAC is what the process may do) left no traceback and no refusal in its log; Kopf reads
    CRDs (its resource scanning) with the chart's read-only grant. After scenario 9, the log
    as it was before 9's uninstall (see the module docstring)."""
    _, kubelet = release
    kept = kubelet.logs / LOG_BEFORE_UNINSTALL
    log = kept if kept.exists() else kubelet.log
    text = log.read_text(encoding="utf-8", errors="replace")
    # The log is not vacuous: the operator started and evaluated (one line per evaluation).
    assert "slascaler starting" in text and "slascaler.reconcile" in text
    for bad in ("traceback", "forbidden", "customresourcedefinitions"):
        lines = [line for line in text.splitlines() if bad in line.lower()]
        assert not lines, (bad, lines[:5])


def test_9_helm_upgrade_is_followed_and_uninstall_leaves_nothing(
    kube: Kube,
    namespace: str,
    prometheus: PrometheusServer,
    release: tuple[HelmRelease, OperatorKubelet],
) -> None:
    helm, kubelet = release
    before = kubelet.pod
    helm.upgrade(
        {
            "prometheusUrl": prometheus.url,
            "reconcileInterval": "2s",
            "prometheusRetries": 0,
            "dryRun": True,
        }
    )
    kubelet.wait_running(pod_not=before)
    assert kubelet.running_env()["SLASCALER_DRY_RUN"] == "true"
    kube.apply(gpu_deployment("llama", 3), namespace=namespace)
    kube.apply(
        inference_sla("llama-sla", "llama", window="20s", replicas={"min": 1, "max": 2}),
        namespace=namespace,
    )
    sla = SLAWatch(kube, namespace, "llama-sla")
    event = sla.wait_event("RecommendBoundsEnforced")
    assert "would change replicas 3→2 (dry run (SLASCALER_DRY_RUN))" in event["message"]
    assert kube.apps.read_namespaced_deployment("llama", namespace).spec.replicas == 3

    shutil.copyfile(kubelet.log, kubelet.logs / LOG_BEFORE_UNINSTALL)
    helm.uninstall()
    kubelet.close()
    selector = f"app.kubernetes.io/instance={helm.name}"
    for kind in (
        "deployments",
        "serviceaccounts",
        "services",
        "roles",
        "rolebindings",
        "poddisruptionbudgets",
    ):
        left = kube.get_json(kind, "-n", RELEASE_NAMESPACE, "-l", selector)["items"]
        assert left == [], (kind, left)
    for kind in ("clusterroles", "clusterrolebindings"):
        assert kube.get_json(kind, "-l", selector)["items"] == [], kind
    poll(lambda: not kube.pods(RELEASE_NAMESPACE, selector), timeout=30, what="operator pods gone")
    # CRDs stay (Helm never deletes crds/), and with them every InferenceSLA users declared,
    # each still holding Kopf's finalizer; the way docs/operations.md gives to release one works.
    kube.kubectl("get", "crd", "inferenceslas.slascaler.io")
    assert sla.get()["metadata"]["finalizers"] == ["kopf.zalando.org/KopfFinalizerMarker"]
    kube.kubectl(
        "patch", "inferencesla", "llama-sla", "-n", namespace, "--type=merge",
        "-p", '{"metadata":{"finalizers":null}}',
    )  # fmt: skip
    kube.kubectl("delete", "inferencesla", "llama-sla", "-n", namespace, "--timeout=20s")
