"""What a GPUPool's arbitration says: its conditions and the Events of its moves.

`pool_conditions`: Ready (with the limit and where it was read), MinimumsFit, Exhausted
(members whose need is not granted) and MemberConflict (members two pools select).
`move_events`: for every move, the Event on the InferenceSLA that gives (PreemptedByPool or
ReturnedToPool) and on the one that takes (GrantedByPool). Pure; `pools.coordinator` writes
and posts them.
"""

from __future__ import annotations

from collections.abc import Sequence

from slascaler.kube.api import Json
from slascaler.policy.decision import Condition, Status
from slascaler.policy.pool import Arbitration, Member
from slascaler.pool_spec import PoolSpec
from slascaler.pools.members import member_key


def pool_conditions(
    pool: PoolSpec,
    outcome: Arbitration,
    members: Sequence[Member],
    shared: Sequence[str],
    source: str,
) -> list[Condition]:
    """The GPUPool's conditions after an arbitration: Ready, MinimumsFit, Exhausted,
    MemberConflict."""
    conditions = [
        Condition(
            "Ready",
            Status.TRUE,
            "Arbitrated",
            f"{len(members)} members, limit {outcome.limit} GPUs from {source}",
        ),
    ]
    if outcome.minimum_gpus > outcome.limit:
        beyond = ", ".join(outcome.minimums_unfunded) or "members that do not follow grants"
        conditions.append(
            Condition(
                "MinimumsFit",
                Status.FALSE,
                "MinimumsExceedLimit",
                f"the members' replicas.min (and what members that do not follow grants run) "
                f"need {outcome.minimum_gpus} GPUs, the limit is {outcome.limit}: the "
                f"minimums are granted by priority, and those of {beyond} run beyond it",
            )
        )
    else:
        conditions.append(
            Condition(
                "MinimumsFit",
                Status.TRUE,
                "WithinLimit",
                f"the minimums need {outcome.minimum_gpus} GPUs",
            )
        )
    short = [
        f"{key} {g.granted}/{g.wanted}"
        for key, g in sorted(outcome.grants.items())
        if g.acting and g.granted < g.wanted
    ]
    if short:
        conditions.append(
            Condition(
                "Exhausted",
                Status.TRUE,
                "BudgetExhausted",
                "granted/wanted replicas: " + ", ".join(short),
            )
        )
    else:
        conditions.append(
            Condition(
                "Exhausted", Status.FALSE, "NeedsGranted", "every member's need is granted"
            )
        )
    if shared:
        conditions.append(
            Condition(
                "MemberConflict",
                Status.TRUE,
                "SelectedByOtherPools",
                "held at their count: " + "; ".join(shared),
            )
        )
    else:
        conditions.append(Condition("MemberConflict", Status.FALSE, "NoConflict", ""))
    return conditions


def move_events(
    pool: PoolSpec, outcome: Arbitration, slas: Sequence[Json]
) -> list[tuple[Json, str, str, str]]:
    """(InferenceSLA, type, reason, message) of the Events of every move: on the giver, then
    on the taker (a move between members not in `slas` posts none)."""
    by_key = {member_key(s): s for s in slas}
    events: list[tuple[Json, str, str, str]] = []
    for move in outcome.moves:
        giver, taker = by_key.get(move.giver), by_key.get(move.taker)
        if giver is None or taker is None:
            continue
        gpus = f"{move.gpus} GPU{'s' if move.gpus != 1 else ''}"
        if move.preempted:
            given = (
                "Warning",
                "PreemptedByPool",
                f"pool {pool.name}: {gpus} of this SLA go to {move.taker}: {move.why}",
            )
        else:
            given = (
                "Normal",
                "ReturnedToPool",
                f"pool {pool.name}: {gpus} this SLA released go to {move.taker}: {move.why}",
            )
        taken = (
            "Normal",
            "GrantedByPool",
            f"pool {pool.name}: {gpus} from {move.giver}: {move.why}",
        )
        events.append((giver, *given))
        events.append((taker, *taken))
    return events
