"""The one interface the reconcile loop reads metrics through.

A `MetricSource` turns (namespace, spec, now) into an `Observation` of the target's pods
over the spec's window. `pods`, when given, are what Kubernetes says the Deployment's pods
are (`kube.fleet`: the ReplicaSets it owns and their pods, `owned_pods.OwnedPods`); without it a
source falls back to the Deployment's pod-name pattern. It never raises for what the
outside world does: an unreachable server, an empty result or a NaN come back inside the
Observation (`source_error`, `problems`, `None` fields) so that the policy holds and says why.

Implemented by `metrics.prometheus.PrometheusSource`; used by `reconcile` and by
`slascaler analyze --prometheus`.
"""

from __future__ import annotations

from typing import Protocol

from slascaler.model.observation import Observation
from slascaler.owned_pods import OwnedPods
from slascaler.spec import SLASpec


class MetricSource(Protocol):
    def observe(
        self, namespace: str, spec: SLASpec, now: float, pods: OwnedPods | None = None
    ) -> Observation:
        """The target's engine metrics over `spec.window_s` ending at `now` (epoch seconds),
        from the `pods` Kubernetes says the Deployment has, when given."""
        ...
