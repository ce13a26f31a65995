"""What a baseline autoscaler may read and do: the `FleetView` protocol.

A baseline reads only what its real counterpart reads in a cluster: the engines' metrics over
a window (`observation`, the same `Observation` the Prometheus source builds, plus the
KV-cache gauge and Dynamo's forward-pass records), the Deployment's desired, ready and
starting replica counts and the engine flags; it acts only through `scale`. `sim.fleet.Fleet`
satisfies the protocol, and so does whatever object the run loop hands the baselines (it
keeps these attribute names). Read by every module of `slascaler_sim.baselines`.
"""

from __future__ import annotations

from typing import Protocol

from slascaler.model.observation import Observation
from slascaler_sim.fleet import EngineSettings


class FleetView(Protocol):
    """The Deployment and its engines, as an autoscaler sees them."""

    @property
    def desired(self) -> int:
        """spec.replicas."""
        ...

    @property
    def ready_replicas(self) -> int: ...

    @property
    def starting_replicas(self) -> int:
        """Pods that exist but are not ready yet (loading the model)."""
        ...

    @property
    def settings(self) -> EngineSettings:
        """The engine flags in the pod template (max batch size, chunk size)."""
        ...

    def observation(self, window_s: float) -> Observation: ...

    def scale(self, replicas: int) -> None: ...
