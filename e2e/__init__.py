"""The end-to-end substrate and suite: a local Kubernetes control plane, Prometheus, simulated
GPU engines that follow real pods, and the tests that drive slascaler through them.

`e2e.cluster` brings the control plane up and down (also by hand: `python -m e2e.cluster up`);
`e2e/kind/` is the same suite's path for users with Docker; `e2e/tests/` holds the tests,
opt-in with `pytest --e2e`.
"""
