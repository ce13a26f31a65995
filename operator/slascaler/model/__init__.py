"""The load-regime model: pure maths over observations, no I/O and no clock.

`histogram` reads Prometheus histograms, `samples` per-request breakdowns, `attribution`
estimates bottleneck shares, `regime` classifies a window, and `latency`, `batching` and
`chunking` are the capacity models the policy sizes its actions with.
"""
