"""The decision policy: pure functions from (spec, observation, state, now) to a Decision.

`decide` is the pipeline: `learning` turns a window into load and memory, `sizing` the load
into replicas, `rules` propose per regime, `steps` limit the proposal in order (each with a
`Reason`), and `decision` is the data returned. `state` holds what the policy knows of the
Deployment and remembers between windows, `knobs` describes the engine knobs once, and
`tunables` the thresholds kept as code. Nothing here performs I/O or reads a clock.
"""

from slascaler.policy.decide import decide
from slascaler.policy.decision import Change, Condition, Decision
from slascaler.policy.reasons import Reason
from slascaler.policy.state import FleetState, PolicyMemory, PolicyState
from slascaler.policy.tunables import Tunables

__all__ = [
    "Change",
    "Condition",
    "Decision",
    "FleetState",
    "PolicyMemory",
    "PolicyState",
    "Reason",
    "Tunables",
    "decide",
]
