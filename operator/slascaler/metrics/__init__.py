"""Where observations come from: the `MetricSource` interface and its Prometheus implementation.

`source` defines the narrow interfaces the reconcile loop uses (one target, or a batch),
`promql` builds every query (the only place label values enter PromQL, all escaped), `client`
sends them with a deadline and checks the answers, `series` reads per-pod answers into one
target's Observation (refusing what is not a histogram), and `prometheus` ties these into a
`MetricSource` with batches. What each engine release exports is `slascaler.engine_metrics`.
The simulator's virtual-time fleet builds the same `Observation` directly.
"""
