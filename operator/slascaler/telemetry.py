"""The operator's own Prometheus metrics, in a registry of its own (no global state).

Names follow Prometheus conventions (`slascaler_` prefix, base units, `_total` counters):

| metric | type | labels |
|---|---|---|
| slascaler_reconciles_total | counter | namespace, name, result (evaluated, invalid_spec, |
|  |  | target_missing, kubernetes_error) |
| slascaler_reconcile_duration_seconds | histogram | — |
| slascaler_decisions_total | counter | namespace, name, reason (the decision's reason code) |
| slascaler_actions_total | counter | namespace, name, knob (replicas, maxBatchSize, chunkSize) |
| slascaler_errors_total | counter | stage (metrics, kubernetes, status) |
| slascaler_regime | gauge (1 for the current regime) | namespace, name, regime |
| slascaler_ttft_seconds / slascaler_ttft_objective_seconds | gauge | namespace, name |
| slascaler_itl_seconds / slascaler_itl_objective_seconds | gauge | namespace, name |
| slascaler_replicas | gauge | namespace, name, kind (current, recommended) |
| slascaler_build_info | gauge | version |

Created by `slascaler run`; written by `reconcile`; served on the metrics port.
"""

from __future__ import annotations

import math

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from slascaler import __version__
from slascaler.model.regime import Regime
from slascaler.policy import Decision
from slascaler.spec import SLASpec

SLA_LABELS = ("namespace", "name")


class Telemetry:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.reconciles = Counter(
            "slascaler_reconciles_total", "Evaluations of an InferenceSLA, by result.",
            [*SLA_LABELS, "result"], registry=r,
        )  # fmt: skip
        self.duration = Histogram(
            "slascaler_reconcile_duration_seconds",
            "Time to evaluate one InferenceSLA (metrics, decision, actions, status).",
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=r,
        )
        self.decisions = Counter(
            "slascaler_decisions_total", "Decisions, by reason code.",
            [*SLA_LABELS, "reason"], registry=r,
        )  # fmt: skip
        self.actions = Counter(
            "slascaler_actions_total", "Changes made to target Deployments, by knob.",
            [*SLA_LABELS, "knob"], registry=r,
        )  # fmt: skip
        self.errors = Counter(
            "slascaler_errors_total", "Errors talking to Prometheus or Kubernetes, by stage.",
            ["stage"], registry=r,
        )  # fmt: skip
        self.regime = Gauge(
            "slascaler_regime", "1 for the regime of the last window, 0 for the others.",
            [*SLA_LABELS, "regime"], registry=r,
        )  # fmt: skip
        self.ttft = Gauge(
            "slascaler_ttft_seconds", "Observed TTFT at the objective's percentile.",
            SLA_LABELS, registry=r,
        )  # fmt: skip
        self.ttft_objective = Gauge(
            "slascaler_ttft_objective_seconds", "The TTFT objective.", SLA_LABELS, registry=r
        )
        self.itl = Gauge(
            "slascaler_itl_seconds", "Observed inter-token latency at its objective's percentile.",
            SLA_LABELS, registry=r,
        )  # fmt: skip
        self.itl_objective = Gauge(
            "slascaler_itl_objective_seconds", "The ITL objective.", SLA_LABELS, registry=r
        )
        self.replicas = Gauge(
            "slascaler_replicas", "Replicas of the target: current and recommended.",
            [*SLA_LABELS, "kind"], registry=r,
        )  # fmt: skip
        Gauge("slascaler_build_info", "slascaler's version.", ["version"], registry=r).labels(
            __version__
        ).set(1)

    def serve(self, port: int, address: str) -> None:
        start_http_server(port, addr=address, registry=self.registry)

    def evaluated(
        self, namespace: str, name: str, spec: SLASpec, decision: Decision, current: int
    ) -> None:
        labels = (namespace, name)
        self.reconciles.labels(*labels, "evaluated").inc()
        self.decisions.labels(*labels, decision.reason_code).inc()
        for regime in Regime:
            self.regime.labels(*labels, str(regime)).set(1 if regime is decision.regime else 0)
        analysis = decision.analysis
        ttft = analysis.ttft_ms if analysis is not None else math.nan
        itl = analysis.itl_ms if analysis is not None else math.nan
        self.ttft.labels(*labels).set(ttft / 1000)
        self.ttft_objective.labels(*labels).set(spec.ttft.threshold_ms / 1000)
        if spec.itl is not None:
            self.itl.labels(*labels).set(itl / 1000)
            self.itl_objective.labels(*labels).set(spec.itl.threshold_ms / 1000)
        self.replicas.labels(*labels, "current").set(current)
        self.replicas.labels(*labels, "recommended").set(decision.replicas)

    def forget(self, namespace: str, name: str) -> None:
        """Drop the series of a deleted InferenceSLA."""
        for metric in (
            self.reconciles, self.decisions, self.actions, self.regime, self.ttft,
            self.ttft_objective, self.itl, self.itl_objective, self.replicas,
        ):  # fmt: skip
            for labels in list(metric._metrics):
                if labels[:2] == (namespace, name):
                    metric.remove(*labels)
