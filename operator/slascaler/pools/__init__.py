"""Shared GPU pools at the edge: the coordinator that arbitrates every GPUPool once a cycle.

`coordinator.PoolCoordinator` lists the pools and their members, arbitrates each
(`policy.pool`, pure), writes the pools' status, posts the Events of the moves and keeps each
member's grant for the `Reconciler` (`grant_for`). It reads a pool's limit with `limits`, a
member with `members`, and says what an arbitration means with `report`. Called by
`wiring` and by the simulator.
"""

from slascaler.pools.coordinator import PoolCoordinator
from slascaler.pools.limits import LimitUnavailable
from slascaler.pools.members import STALE_BID_INTERVALS

__all__ = ["STALE_BID_INTERVALS", "LimitUnavailable", "PoolCoordinator"]
