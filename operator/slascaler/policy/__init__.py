"""The decision policy: pure functions from (spec, observation, state, now) to a Decision.

`state` holds what the policy knows of the Deployment and remembers between windows,
`decision` the data it returns, `tunables` the thresholds kept as code, and `decide` the
ordered rules. Nothing here performs I/O or reads a clock.
"""

from slascaler.policy.decide import decide
from slascaler.policy.decision import Change, Condition, Decision
from slascaler.policy.state import FleetState, PolicyMemory, PolicyState
from slascaler.policy.tunables import Tunables

__all__ = [
    "Change",
    "Condition",
    "Decision",
    "FleetState",
    "PolicyMemory",
    "PolicyState",
    "Tunables",
    "decide",
]
