"""Arbitration of a shared GPU budget (`policy.pool`) and its step in the policy.

Cases by hand: priority first, spare headroom before lower priorities, minimums by priority
when they exceed the limit, gains between equal priorities, no give-back while the taker's
own stabilization keeps a taken replica, members that do not follow grants, growth only into
free GPUs. Then properties over random pools: grants never exceed the budget, never go below
a member's min, and a higher-priority member is never short while a lower-priority one holds
more than its min and the GPUs it could give would make a replica; and over random windows:
the policy never runs more than the pool allows it, nor less than its min.
"""

from __future__ import annotations

import math
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st
from test_invariants import PROPERTY_SETTINGS, fleets, memories, observations, specs

from slascaler.model.latency import ReplicaWorth
from slascaler.model.observation import Observation
from slascaler.policy import FleetState, PolicyMemory, PolicyState, Reason, decide
from slascaler.policy.decision import Status
from slascaler.policy.pool import Member, PoolGrant, Preemption, arbitrate
from slascaler.spec import SLASpec

NOW = 50_000.0


def member(key: str, priority: int = 0, replicas: int = 1, wanted: int | None = None,
           **kw: object) -> Member:  # fmt: skip
    defaults: dict[str, object] = {"gpus_per_replica": 1, "min_replicas": 1, "max_replicas": 16}
    defaults.update(kw)
    return Member(key, priority, replicas=replicas, wanted=wanted, **defaults)  # type: ignore[arg-type]


def test_worth_predicts_ttft_by_replica_count_and_the_gain_of_one_more() -> None:
    worth = ReplicaWorth(work=9000, capacity=3000, floor_ms=100, slope_ms=120, objective_ms=500)
    assert worth.ttft_ms(3) == math.inf  # 9000 tokens/s on 3 × 3000: saturated
    four = worth.ttft_ms(4)  # u = 0.75: 100 + 120 · 3 / 2
    assert four == 100 + 120 * 3 / 2
    fewer, current, more = worth.around(4)
    assert math.isinf(fewer) and current == four and more < four
    assert worth.gain(4) == math.inf  # the fourth replica makes the fleet stable at all
    assert worth.gain(5) == (four - worth.ttft_ms(5)) / 500 > worth.gain(6) > 0


def test_a_higher_priority_takes_from_a_lower_one_and_grows_as_it_frees_gpus() -> None:
    high = member("a/high", 10, replicas=2, wanted=6)
    low = member("b/low", 0, replicas=6, wanted=6)
    first = arbitrate("pool", 8, [high, low])
    assert first.grants["a/high"].granted == 6 and first.grants["b/low"].granted == 2
    # No GPU is free until the low one's pods go: the high one waits, the low one shrinks now.
    assert first.grants["a/high"].allowed == 2 and first.grants["b/low"].allowed == 2
    assert "b/low release their GPUs" in first.grants["a/high"].message
    low_grant = first.grants["b/low"]
    assert low_grant.preemption is Preemption.BY_HIGHER_PRIORITY
    assert low_grant.preempted_by == ("a/high",)
    [move] = first.moves
    assert (move.giver, move.taker, move.gpus, move.preempted) == ("b/low", "a/high", 4, True)
    assert "priority 10 > 0" in move.why
    assert first.protected_up_to["a/high"] == 6
    # Next cycle: the low one runs 2; the freed GPUs go to the high one, and nothing moves.
    second = arbitrate(
        "pool", 8,
        [replace(high, issued=2, protected_up_to=6), replace(low, replicas=2, issued=2)],
        {k: g.granted for k, g in first.grants.items()},
    )  # fmt: skip
    assert second.grants["a/high"].allowed == 6 and second.moves == ()


def test_a_short_member_takes_spare_headroom_before_a_lower_priority_need() -> None:
    high = member("a/high", 10, replicas=2, wanted=5)
    spare = member("b/spare", 10, replicas=4, wanted=2, held=4)  # stabilization keeps 4
    low = member("c/low", 0, replicas=2, wanted=2)
    outcome = arbitrate("pool", 8, [high, spare, low])
    assert {k: g.granted for k, g in outcome.grants.items()} == {
        "a/high": 5, "b/spare": 2, "c/low": 1,
    }  # fmt: skip
    assert outcome.grants["b/spare"].preemption is Preemption.SPARE_HEADROOM
    assert outcome.grants["c/low"].preemption is Preemption.BY_HIGHER_PRIORITY
    # Without anyone short, spare headroom stays where it is.
    calm = arbitrate("pool", 8, [replace(high, wanted=2), spare, low])
    assert calm.grants["b/spare"].granted == 4 and calm.grants["b/spare"].preemption is None


def test_spare_headroom_is_never_lent_to_a_lower_priority() -> None:
    # chat's stabilization keeps a third replica; batch (lower) needs more than the pool has.
    chat = member("a/chat", 30, replicas=3, wanted=2, held=3)
    batch = member("b/batch", 10, replicas=5, wanted=9)
    outcome = arbitrate("pool", 8, [chat, batch])
    assert outcome.grants["a/chat"].granted == 3 and outcome.grants["b/batch"].granted == 5
    assert outcome.moves == ()
    # A member of its own priority does take it (and a higher one would).
    peer = replace(batch, priority=30)
    shared = arbitrate("pool", 8, [chat, peer])
    assert shared.grants["a/chat"].granted == 2 and shared.grants["b/batch"].granted == 6


def test_minimums_over_the_limit_are_granted_by_priority_and_named() -> None:
    members = [
        member("a/high", 10, replicas=2, min_replicas=2, wanted=5),
        member("b/mid", 5, replicas=2, min_replicas=2),
        member("c/low", 0, replicas=3, min_replicas=3),
    ]
    outcome = arbitrate("pool", 5, members)
    assert {k: g.granted for k, g in outcome.grants.items()} == {
        "a/high": 2, "b/mid": 2, "c/low": 3,
    }  # fmt: skip
    assert outcome.minimums_unfunded == ("c/low",)
    assert outcome.minimum_gpus == 7 > outcome.limit


def test_equal_priorities_share_by_predicted_gain() -> None:
    saturated = ReplicaWorth(work=11000, capacity=3000, floor_ms=100, slope_ms=120,
                             objective_ms=500)  # fmt: skip
    light = ReplicaWorth(work=1000, capacity=3000, floor_ms=100, slope_ms=120, objective_ms=500)
    busy = member("a/busy", replicas=2, wanted=6, worth=saturated)
    quiet = member("b/quiet", replicas=2, wanted=6, worth=light)
    outcome = arbitrate("pool", 7, [busy, quiet])
    # busy needs 4 replicas before its TTFT is bounded at all; then gains decide.
    assert outcome.grants["a/busy"].granted >= 5
    assert outcome.grants["b/quiet"].granted <= 2
    assert outcome.grants["b/quiet"].preemption is Preemption.BY_GREATER_GAIN


def test_a_taken_replica_stays_while_the_takers_stabilization_keeps_it() -> None:
    # a took up to 6 from b (same priority); its load fell (wants 2), its stabilization keeps 6.
    a = member("a/a", 5, replicas=6, wanted=2, held=6)
    b = member("b/b", 5, replicas=2, wanted=6)
    unprotected = arbitrate("pool", 8, [a, b])
    assert unprotected.grants["a/a"].granted == 2  # spare: b's need comes first
    protected = arbitrate("pool", 8, [replace(a, protected_up_to=6), b])
    assert protected.grants["a/a"].granted == 6 and protected.grants["b/b"].granted == 2
    # After its window its own rules release them: b gets them back.
    released = arbitrate("pool", 8, [replace(a, held=2, protected_up_to=6), b],
                         {"a/a": 6, "b/b": 2})  # fmt: skip
    assert released.grants["b/b"].granted == 6
    [move] = released.moves
    assert (move.giver, move.taker, move.preempted) == ("a/a", "b/b", False)
    assert (released.protected_up_to["a/a"] or 0) <= 2  # no longer above its need


def test_equal_priorities_do_not_trade_a_taken_replica_back_on_noise() -> None:
    def worth(work: float) -> ReplicaWorth:
        return ReplicaWorth(work=work, capacity=3000, floor_ms=100, slope_ms=120,
                            objective_ms=500)  # fmt: skip

    # b runs the 7th replica; a's load makes it worth more to a, which takes it.
    a = member("a/a", replicas=3, wanted=4, worth=worth(6500))
    b = member("b/b", replicas=4, wanted=4, worth=worth(6000))
    first = arbitrate("pool", 7, [a, b])  # 3 each make both stable; the 7th goes to a
    assert first.grants["a/a"].granted == 4 and first.grants["b/b"].granted == 3
    assert [(m.giver, m.taker, m.preempted) for m in first.moves] == [("b/b", "a/a", True)]
    assert first.protected_up_to["a/a"] == 4
    # The loads swap a little: by gain alone the 7th replica would now go back to b ...
    a = replace(a, replicas=4, worth=worth(6000))
    b = replace(b, replicas=3, worth=worth(6500))
    previous = {k: g.granted for k, g in first.grants.items()}
    assert arbitrate("pool", 7, [a, b], previous).grants["b/b"].granted == 4
    # ... but what a took stays with it while it keeps wanting it: nothing moves.
    after = arbitrate("pool", 7, [replace(a, protected_up_to=4), b], previous)
    assert after.grants["a/a"].granted == 4 and after.moves == ()


def test_members_that_do_not_follow_grants_count_as_they_run_and_are_told_what_they_would_get() -> (
    None
):
    high = member("a/high", 10, replicas=2, wanted=6)
    low = member("b/low", 0, replicas=6, wanted=6, acting=False, why_not_acting="mode Recommend")
    outcome = arbitrate("pool", 8, [high, low])
    assert outcome.grants["a/high"].granted == 2  # what the low one runs counts first
    would = outcome.grants["b/low"]
    assert not would.acting and would.granted == would.allowed == 2
    assert would.preemption is Preemption.BY_HIGHER_PRIORITY
    assert would.message.startswith("mode Recommend: the pool would grant it 2 replicas")
    assert outcome.moves == ()


def test_a_member_without_gpus_is_outside_the_budget() -> None:
    cpu = member("a/cpu", 10, replicas=3, wanted=9, gpus_per_replica=0, max_replicas=12)
    gpu = member("b/gpu", 0, replicas=4, wanted=4)
    outcome = arbitrate("pool", 4, [cpu, gpu])
    assert outcome.grants["a/cpu"].allowed == 12 and outcome.grants["b/gpu"].granted == 4
    assert outcome.used == 4


def test_growth_counts_what_the_previous_arbitration_allowed_as_in_use() -> None:
    # b was allowed 4 last cycle and has not scaled yet: a may not take those GPUs meanwhile.
    a = member("a/a", 5, replicas=2, wanted=6)
    b = member("b/b", 0, replicas=2, wanted=2, issued=4)
    outcome = arbitrate("pool", 8, [a, b])
    assert outcome.grants["a/a"].granted == 6 and outcome.grants["a/a"].allowed == 4


def test_growth_waits_for_the_givers_terminating_pods() -> None:
    # b scaled 5→1 but 3 of its pods are still terminating: their GPUs are not free yet.
    a = member("a/a", 5, replicas=2, wanted=6)
    b = member("b/b", 0, replicas=1, wanted=1, holding=4)
    outcome = arbitrate("pool", 8, [a, b])
    assert outcome.grants["a/a"].granted == 6 and outcome.grants["a/a"].allowed == 4


# -- properties ------------------------------------------------------------------------------


@st.composite
def pools(draw: st.DrawFn) -> tuple[int, list[Member]]:
    members = []
    for index in range(draw(st.integers(1, 5))):
        low = draw(st.integers(1, 3))
        high = draw(st.integers(low, 8))
        wanted = draw(st.one_of(st.none(), st.integers(0, 12)))
        held = None if wanted is None else wanted + draw(st.integers(0, 4))
        worth = None
        if draw(st.booleans()):
            worth = ReplicaWorth(
                draw(st.floats(0, 30000)), draw(st.floats(500, 5000)), draw(st.floats(10, 400)),
                draw(st.floats(0, 500)), draw(st.sampled_from([200.0, 500.0, 2000.0])),
            )  # fmt: skip
        members.append(
            Member(
                key=f"ns/m{index}",
                priority=draw(st.integers(0, 3)),
                gpus_per_replica=draw(st.integers(1, 4)),
                min_replicas=low,
                max_replicas=high,
                replicas=draw(st.integers(0, high + 2)),
                wanted=wanted,
                held=held,
                worth=worth,
                acting=draw(st.integers(0, 5)) > 0,
                issued=draw(st.one_of(st.none(), st.integers(0, high))),
                holding=draw(st.one_of(st.none(), st.integers(0, high + 2))),
                protected_up_to=draw(st.one_of(st.none(), st.integers(1, high))),
            )
        )
    return draw(st.integers(0, 40)), members


@PROPERTY_SETTINGS
@given(pools())
def test_grants_keep_the_budget_the_minimums_and_the_priorities(
    pool: tuple[int, list[Member]],
) -> None:
    limit, members = pool
    outcome = arbitrate("pool", limit, members)
    acting = [m for m in members if m.acting]
    fixed_gpus = sum(m.replicas * m.gpus_per_replica for m in members if not m.acting)
    grants = {m.key: outcome.grants[m.key] for m in acting}
    for m in acting:
        assert m.min_replicas <= grants[m.key].granted <= max(m.min_replicas, m.claim_limit)
        assert grants[m.key].allowed <= grants[m.key].granted
    spent = fixed_gpus + sum(grants[m.key].granted * m.gpus_per_replica for m in acting)
    minimums = fixed_gpus + sum(m.min_replicas * m.gpus_per_replica for m in acting)
    if minimums <= limit:
        assert spent <= limit, "grants exceed the budget"
    else:
        assert all(grants[m.key].granted == m.min_replicas for m in acting)
        return
    leftover = limit - spent
    for high in acting:
        if grants[high.key].granted >= high.need:
            continue
        beyond_min = sum(
            (grants[low.key].granted - low.min_replicas) * low.gpus_per_replica
            for low in acting
            if low.priority < high.priority
        )
        assert beyond_min + leftover < high.gpus_per_replica, (
            f"{high.key} (priority {high.priority}) is short while lower priorities hold "
            f"{beyond_min} GPUs beyond their minimums and {leftover} are free"
        )
    for short in acting:
        if grants[short.key].granted >= short.need:
            continue
        spare = sum(
            max(0, grants[o.key].granted - max(o.protected, o.min_replicas)) * o.gpus_per_replica
            for o in acting
            if o.key != short.key and o.priority <= short.priority
        )
        assert spare + leftover < short.gpus_per_replica, (
            f"{short.key} is short while {spare} GPUs of spare headroom are granted"
        )
    # Growth only into what is free now (counting what was allowed before as in use).
    def held(m: Member) -> int:  # what it may hold now: replicas, allowed before, pods
        return max(m.replicas, m.issued or 0, m.holding or 0)

    reserve = sum(held(m) * m.gpus_per_replica for m in acting)
    fixed_held = sum(max(m.replicas, m.holding or 0) * m.gpus_per_replica
                     for m in members if not m.acting)  # fmt: skip
    grown = sum(max(0, grants[m.key].allowed - held(m)) * m.gpus_per_replica for m in acting)
    assert grown <= max(0, limit - fixed_held - reserve)
    if reserve + fixed_held <= limit:  # whatever order they act in, the pool is never over
        allowed = sum(grants[m.key].allowed * m.gpus_per_replica for m in acting)
        assert allowed + fixed_held <= limit


@PROPERTY_SETTINGS
@given(specs(), observations(), fleets(), memories(), st.integers(0, 40), st.booleans())
def test_the_policy_never_runs_more_than_the_pool_allows_nor_less_than_its_min(
    spec: SLASpec,
    observation: Observation | None,
    fleet: FleetState,
    memory: PolicyMemory,
    allowed: int,
    preempted: bool,
) -> None:
    grant = PoolGrant(
        "pool", max(allowed, 1), allowed, spec.replicas.max,
        preempted_by=("ns/other",) if preempted else (),
        preemption=Preemption.BY_HIGHER_PRIORITY if preempted else None,
        message="the rest go to ns/other (priority 9)",
    )  # fmt: skip
    decision = decide(spec, observation, PolicyState(fleet, memory, grant), NOW)
    if fleet.other_autoscaler or fleet.spec_replicas == 0:  # left as it is (as without a pool)
        assert not decision.acts
        return
    backoff = decision.memory_if_held.replicas_backoff_until
    if backoff is not None and backoff > NOW:  # another manager writes replicas: not fought
        assert decision.replicas == fleet.spec_replicas
        return
    assert spec.replicas.min <= decision.replicas <= max(spec.replicas.min, allowed)
    reason = next((c.reason for c in decision.changes if c.knob == "replicas"), None)
    if decision.replicas < spec.replicas.clamp(fleet.spec_replicas) and allowed < min(
        fleet.spec_replicas, spec.replicas.max
    ):
        assert reason in (Reason.PREEMPTED, Reason.BOUNDS_ENFORCED, Reason.SCALE_DOWN,
                          Reason.DROP_PENDING_PODS)  # fmt: skip
    condition = decision.condition("Preempted")
    assert condition is not None
    assert condition.status is (Status.TRUE if preempted else Status.FALSE)
    # Outside any pool, the same window decides as it always did.
    alone = decide(spec, observation, PolicyState(fleet, memory), NOW)
    assert alone.condition("Preempted") is None


def test_a_preempted_sla_gives_its_replicas_up_at_once_even_without_metrics() -> None:
    spec = replace(specs_example(), behavior=specs_example().behavior)
    fleet = FleetState(spec_replicas=6, ready_replicas=6)
    grant = PoolGrant("gpus", 2, 2, 6, ("a/high",), Preemption.BY_HIGHER_PRIORITY,
                      "the rest go to a/high (priority 10)")  # fmt: skip
    decision = decide(spec, None, PolicyState(fleet, PolicyMemory(), grant), NOW)
    assert [str(c) for c in decision.changes] == ["replicas 6→2"]
    assert decision.reason_code is Reason.PREEMPTED
    assert "pool gpus grants 2 replicas" in decision.reason
    condition = decision.condition("Preempted")
    assert condition is not None and condition.reason == "ByHigherPriority"
    limited = decision.condition("CapacityLimited")
    assert limited is not None and limited.status is Status.FALSE  # no window: need unknown


def specs_example() -> SLASpec:
    from slascaler.spec import parse_spec

    return parse_spec({
        "targetRef": {"name": "llama"},
        "objectives": {"ttft": {"thresholdMs": 500}},
        "replicas": {"min": 1, "max": 8},
        "priority": 0,
    })  # fmt: skip
