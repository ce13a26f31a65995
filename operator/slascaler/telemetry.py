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
| slascaler_evaluations_due | gauge (due, not started yet) | — |
| slascaler_evaluations_running | gauge | — |
| slascaler_evaluation_oldest_due_seconds | gauge (how long the oldest due one waits) | — |
| slascaler_evaluation_lateness_seconds | histogram (start − due time) | — |
| slascaler_evaluations_deadline_exceeded_total | counter (ran past their deadline) | — |
| slascaler_evaluation_batch_size | histogram (InferenceSLAs per batch of queries) | — |
| slascaler_prometheus_queries_total | counter | outcome (ok, error, timeout) |
| slascaler_prometheus_query_duration_seconds | histogram | — |

Created by `slascaler run`; written by `reconcile`, the evaluation cycle (`cycle`: the queue
of due evaluations and their lateness) and the Prometheus client (queries); served on the
metrics port.
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
            buckets=(
                0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25,
                0.5, 1, 2.5, 5, 10, 30,
            ),
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
        self.due = Gauge(
            "slascaler_evaluations_due", "Evaluations due and not started yet.", registry=r
        )
        self.running = Gauge(
            "slascaler_evaluations_running", "Evaluations running now.", registry=r
        )
        self.oldest_due = Gauge(
            "slascaler_evaluation_oldest_due_seconds",
            "How long the oldest evaluation due and not started has waited.",
            registry=r,
        )
        self.lateness = Histogram(
            "slascaler_evaluation_lateness_seconds",
            "Time from an evaluation falling due to its start.",
            buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 15, 30, 60, 120),
            registry=r,
        )
        self.deadline_exceeded = Counter(
            "slascaler_evaluations_deadline_exceeded_total",
            "Evaluations that ran past their deadline.",
            registry=r,
        )
        self.batch_size = Histogram(
            "slascaler_evaluation_batch_size",
            "InferenceSLAs evaluated from one batch of Prometheus queries.",
            buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000),
            registry=r,
        )
        self.queries = Counter(
            "slascaler_prometheus_queries_total", "Prometheus queries, by outcome.",
            ["outcome"], registry=r,
        )  # fmt: skip
        self.query_duration = Histogram(
            "slascaler_prometheus_query_duration_seconds",
            "Time of one Prometheus query, retries included.",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=r,
        )
        Gauge("slascaler_build_info", "slascaler's version.", ["version"], registry=r).labels(
            __version__
        ).set(1)

    def query_done(self, seconds: float, outcome: str) -> None:
        """A Prometheus query ended (the client's observer)."""
        self.queries.labels(outcome).inc()
        self.query_duration.observe(seconds)

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
