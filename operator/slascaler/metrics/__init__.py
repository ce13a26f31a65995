"""Where observations come from: the `MetricSource` interface and its Prometheus implementation.

`source` defines the one narrow interface the reconcile loop uses, `promql` builds every query
(the only place label values enter PromQL, all escaped), and `prometheus` runs them against a
Prometheus server. The simulator's virtual-time fleet builds the same `Observation` directly.
"""
