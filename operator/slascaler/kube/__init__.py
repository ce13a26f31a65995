"""The operator's Kubernetes edge: `clients` bundles the API clients, `fleet` reads the target
Deployment into a `FleetState`, and `actuation` is the only code that writes to the API
(scale, engine flags, events, status). Nothing else in slascaler imports `kubernetes`.
"""
