"""`python -m e2e.playground`: the operator on the local control plane, watched live.

Brings up a local control plane (or uses `--kubeconfig`), a Prometheus, the CRD, a vLLM-like
Deployment whose simulated engines follow its pods, an InferenceSLA and the operator
(`slascaler run`), then steps the load 4 → 16 → 4 requests/s and prints `kubectl get
inferenceslas` every 10 s, `kubectl describe` at the peak, and the events at the end.
Everything stops and is removed when it ends (about 6 minutes) or on Ctrl-C. The README's
`kubectl get` output and the `kubectl describe` in docs/operations.md were captured with it.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from e2e.cluster.binaries import ensure_binaries
from e2e.cluster.local import LocalCluster
from e2e.cluster.processes import poll
from e2e.cluster.prometheus import PrometheusServer
from e2e.engines import EngineFleet, Load
from e2e.kube import Kube, gpu_deployment, is_ready
from e2e.operator import OperatorProcess
from e2e.slas import inference_sla, install_crd
from slascaler_sim.profiles import PROFILES

NAMESPACE = "team-a"
SPEC = {
    "targetRef": {"name": "llama-chat"},
    "objectives": {
        "ttft": {"percentile": 95, "thresholdMs": 500},
        "itl": {"percentile": 95, "thresholdMs": 100},
    },
    "window": "30s",
    "replicas": {"min": 1, "max": 6},
    "knobs": {"maxBatchSize": {"min": 8, "max": 64}},
    "behavior": {"scaleUpCooldown": "15s", "scaleDownStabilization": "60s", "knobCooldown": "1m"},
}
PHASES = ((4.0, 60), (16.0, 120), (4.0, 150))  # (requests/s, seconds)


def show(kube: Kube, *args: str) -> None:
    print(f"$ kubectl {' '.join(args)}")
    print(kube.kubectl(*args).stdout.rstrip(), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.playground", description=__doc__)
    parser.add_argument("--kubeconfig", help="an existing cluster with KWOK GPU nodes")
    args = parser.parse_args()
    bin_dir = ensure_binaries()
    workdir = Path(tempfile.mkdtemp(prefix="slascaler-playground-"))
    cluster = None
    if args.kubeconfig:
        kubeconfig = Path(args.kubeconfig)
    else:
        cluster = LocalCluster(bin_dir, workdir / "cluster").up()
        kubeconfig = cluster.kubeconfig
    kube = Kube.connect(kubeconfig, bin_dir)
    prometheus = PrometheusServer(bin_dir / "prometheus", workdir / "prometheus").start()
    operator = None
    try:
        install_crd(kube)
        kube.kubectl("create", "namespace", NAMESPACE)
        args_ = ["meta-llama/Llama-3.1-8B-Instruct", "--max-num-seqs", "16"]
        kube.apply(gpu_deployment("llama-chat", 1, args=args_), namespace=NAMESPACE)
        poll(
            lambda: any(is_ready(p) for p in kube.pods(NAMESPACE, "app=llama-chat")),
            timeout=60,
            what="the first pod",
        )
        operator = OperatorProcess(
            kubeconfig,
            {"SLASCALER_PROMETHEUS_URL": prometheus.url, "SLASCALER_RECONCILE_INTERVAL": "3s"},
            workdir / "operator.log",
        ).start()
        profile = PROFILES["llama3-8b-a100"]
        with EngineFleet(kube, prometheus, NAMESPACE, "llama-chat", profile) as engines:
            kube.apply(inference_sla("llama-chat", "llama-chat", **SPEC), namespace=NAMESPACE)
            started = time.monotonic()
            for rate, seconds in PHASES:
                engines.set_load(Load(rate, prompt=1000, output=100))
                print(f"\n=== {rate:g} requests/s for {seconds} s ===", flush=True)
                until = time.monotonic() + seconds
                while time.monotonic() < until:
                    time.sleep(10)
                    print(f"--- t = {time.monotonic() - started:.0f} s")
                    show(kube, "get", "inferenceslas", "-n", NAMESPACE)
                if rate > 4:
                    show(kube, "describe", "inferencesla", "llama-chat", "-n", NAMESPACE)
            show(kube, "get", "events", "-n", NAMESPACE, "--field-selector",
                 "involvedObject.kind=InferenceSLA", "--sort-by=.lastTimestamp")  # fmt: skip
    finally:
        if operator is not None:
            operator.stop()
        prometheus.remove()
        if cluster is not None:
            cluster.down()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
