"""The fleet simulator: vLLM-like engine replicas behind a router, in virtual or real time.

`profiles` gives step costs and context limits, `engine` one replica's vLLM v1 scheduler,
`kvcache` its automatic prefix cache, `recorder` its vLLM-named metrics, `routing` the
routers, `fleet` the replicas, router and lifecycle, `workload` the request streams and
`prefixes` shared-prefix groups for synthetic ones. Used by the demo, the benchmarks and the
e2e tests; never by the operator's runtime.
"""
