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
| slascaler_condition | gauge (1 for the current status) | namespace, name, type, status |
| slascaler_engine_flag | gauge | namespace, name, knob (maxBatchSize, chunkSize) |
| slascaler_action_failures_total | counter | namespace, name, reason (ActionFailed, |
|  |  | DecisionRejected) |
| slascaler_target_info | gauge (1) | namespace, name, deployment, engine |
| slascaler_evaluations_due | gauge (due, not started yet) | — |
| slascaler_evaluations_running | gauge | — |
| slascaler_evaluation_oldest_due_seconds | gauge (how long the oldest due one waits) | — |
| slascaler_evaluation_lateness_seconds | histogram (start − due time) | — |
| slascaler_evaluations_deadline_exceeded_total | counter (ran past their deadline) | — |
| slascaler_evaluation_batch_size | histogram (InferenceSLAs per batch of queries) | — |
| slascaler_prometheus_queries_total | counter | outcome (ok, error, timeout) |
| slascaler_prometheus_query_duration_seconds | histogram | — |

`slascaler_condition`, `slascaler_engine_flag` and `slascaler_action_failures_total` say what
the status the reconcile wrote says (its conditions, the engine flags the Deployment carries, a
failed action), so that alerts and the chart's dashboard can read them; `slascaler_target_info`
lets the dashboard find the target's pods. Counters start at 0 (`slascaler_errors_total` for
every stage, `slascaler_actions_total` and `slascaler_action_failures_total` for each
InferenceSLA at its first evaluation), so that the first error or action is an increase that
an alert can see.

Created by `slascaler run`; written by `reconcile`, the evaluation cycle (`cycle`: the queue
of due evaluations and their lateness) and the Prometheus client (queries); served on the
metrics port.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from slascaler import __version__
from slascaler.model.regime import Regime
from slascaler.policy import Decision
from slascaler.spec import SLASpec

SLA_LABELS = ("namespace", "name")
ERROR_STAGES = ("metrics", "kubernetes", "status")
CONDITION_STATUSES = ("True", "False", "Unknown")
FAILED_ACTIONS = frozenset({"ActionFailed", "DecisionRejected"})


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
        for stage in ERROR_STAGES:
            self.errors.labels(stage)
        self.condition = Gauge(
            "slascaler_condition",
            "1 for the current status of each condition of an InferenceSLA, 0 for the others.",
            [*SLA_LABELS, "type", "status"], registry=r,
        )  # fmt: skip
        self.engine_flag = Gauge(
            "slascaler_engine_flag", "Engine flags the target Deployment carries, by knob.",
            [*SLA_LABELS, "knob"], registry=r,
        )  # fmt: skip
        self.action_failures = Counter(
            "slascaler_action_failures_total",
            "Actions decided but not made (refused by the Kubernetes API, or rejected).",
            [*SLA_LABELS, "reason"], registry=r,
        )  # fmt: skip
        self.target_info = Gauge(
            "slascaler_target_info", "The Deployment and engine an InferenceSLA holds (1).",
            [*SLA_LABELS, "deployment", "engine"], registry=r,
        )  # fmt: skip

    def query_done(self, seconds: float, outcome: str) -> None:
        """A Prometheus query ended (the client's observer)."""
        self.queries.labels(outcome).inc()
        self.query_duration.observe(seconds)

    def serve(self, port: int, address: str) -> None:
        start_http_server(port, addr=address, registry=self.registry)

    def evaluated(
        self,
        namespace: str,
        name: str,
        spec: SLASpec,
        decision: Decision,
        current: int,
        status: Mapping[str, Any] | None = None,
    ) -> None:
        """One evaluation; `status` (as written) gives conditions, flags and a failed action."""
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
        self.target_info.labels(*labels, spec.target.name, str(spec.engine)).set(1)
        # Counters start at 0, so that the first action or failure is an increase, not a
        # new series that increase() and rate() cannot see.
        for knob, bounds in (("maxBatchSize", spec.max_batch_size), ("chunkSize", spec.chunk_size)):
            if bounds is not None:
                self.actions.labels(*labels, knob)
        self.actions.labels(*labels, "replicas")
        for reason in sorted(FAILED_ACTIONS):
            self.action_failures.labels(*labels, reason)
        if status is not None:
            self._status(labels, status)

    def _status(self, labels: tuple[str, str], status: Mapping[str, Any]) -> None:
        for condition in status.get("conditions") or ():
            kind, now = condition.get("type"), condition.get("status")
            if isinstance(kind, str) and now in CONDITION_STATUSES:
                for value in CONDITION_STATUSES:
                    self.condition.labels(*labels, kind, value).set(1 if value == now else 0)
        flags = status.get("engineFlags") or {}
        for knob in ("maxBatchSize", "chunkSize"):
            if isinstance(flags.get(knob), int):
                self.engine_flag.labels(*labels, knob).set(flags[knob])
        outcome = (status.get("recommendation") or {}).get("reasonCode")
        if outcome in FAILED_ACTIONS:
            self.action_failures.labels(*labels, outcome).inc()

    def forget(self, namespace: str, name: str) -> None:
        """Drop the series of a deleted InferenceSLA."""
        for metric in (
            self.reconciles, self.decisions, self.actions, self.regime, self.ttft,
            self.ttft_objective, self.itl, self.itl_objective, self.replicas,
            self.condition, self.engine_flag, self.action_failures, self.target_info,
        ):  # fmt: skip
            for labels in list(metric._metrics):
                if labels[:2] == (namespace, name):
                    metric.remove(*labels)
