"""The simulator's `MetricSource`: what Prometheus would answer about a simulated Deployment.

For the InferenceSLA's target in the in-memory cluster (`sim.cluster`), the observation is
the fleet's increase over the spec's window of every engine histogram summed over its
replicas, the window averages of the waiting and running gauges and the pods reporting,
built by `Fleet.observation` from the same cumulative counters the real-time exposition
serves, so it has the semantics of `metrics.prometheus.PrometheusSource` (which runs the
same increases as PromQL). A target that does not exist has no series, as in Prometheus.
The fleet is the Deployment's own, so `pods` (what Kubernetes says its pods are) narrow nothing.

Used by `sim.run` with the operator's `Reconciler`.
"""

from __future__ import annotations

from dataclasses import replace

from slascaler.kube.errors import NotFound
from slascaler.model.observation import Observation
from slascaler.owned_pods import OwnedPods
from slascaler.spec import SLASpec
from slascaler_sim.cluster import SimCluster


class SimulatedSource:
    """Observations of the in-memory cluster's Deployments, in the simulation's time."""

    def __init__(self, cluster: SimCluster) -> None:
        self.cluster = cluster

    def observe(
        self, namespace: str, spec: SLASpec, now: float, pods: OwnedPods | None = None
    ) -> Observation:
        try:
            deployment = self.cluster.deployment(namespace, spec.target.name)
        except NotFound:
            return Observation(
                observed_at=now,
                window_s=spec.window_s,
                ttft=None,
                queue=None,
                prefill=None,
                problems=(f"no series from pods of {spec.target.name} in namespace {namespace}",),
            )
        return replace(deployment.fleet.observation(spec.window_s), observed_at=now)
