"""The fleet simulator: vLLM-like engine replicas behind a router, in virtual or real time.

`profiles` gives step costs, `engine` one replica's vLLM v1 scheduler, `recorder` its
vLLM-named metrics, `fleet` the replicas, router and lifecycle, `workload` the request
streams. Used by the demo, the benchmarks and the e2e tests; never by the operator's runtime.
"""
