"""The local e2e substrate: build the binaries, bring a control plane and Prometheus up and down.

`binaries` builds or finds the pinned binaries, `pki` makes certificates, `processes` runs
servers with logs and polls conditions, `local` is the control plane with fake GPU nodes,
`prometheus` a Prometheus with file-based targets; `python -m e2e.cluster` drives them by hand.
"""
