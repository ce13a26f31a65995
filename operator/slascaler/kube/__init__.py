"""The operator's Kubernetes edge: `clients` implements the `api` interface over the client
library, `fleet` reads the target Deployment into a `FleetState` (with `pods`: ReplicaSets,
pods and GPUs by ownership, and `writers`: who else writes the Deployment), and `actuation`
is the only code that writes to the API (scale, engine flags, events, status). Nothing else
in slascaler imports `kubernetes`.
"""
