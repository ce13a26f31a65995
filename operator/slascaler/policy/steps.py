"""The ordered steps that limit what a rule asks for, each with the reason it limited.

As the HPA normalises a recommendation, each step takes the replica count (or the knob
changes) so far and returns it, possibly limited, with a `Limit` naming why:

1. `bounds` — into `spec.replicas` (AtMaxReplicas when the load wants more);
2. `gpu_capacity` — no more pods while some are Pending for lack of GPUs, nor above the
   count the GPUs held a moment ago (remembered `gpu_limit_memory_s`);
3. `rate_limit` — at most max(×2, +4) per scale-up, as the HPA's default;
4. `starting_pods` — while pods start, a new scale-up only for load beyond what ready and
   starting pods will serve (the starting ones are credited; without that mechanism, none);
5. `scale_up_cooldown` — `spec.behavior.scaleUpCooldown` between scale-ups;
6. `stabilization` — scale down only to the highest count recommended over
   `scaleDownStabilization`, once that much history exists and that long after a scale-up,
   with no pod starting, at most half the replicas at a time;
7. `budget` — within a shared GPU pool, at most the replicas the pool allows this SLA now
   (`policy.pool`); applied after stabilization, so a share the pool gave to another member
   is given up at once (preempted), and never below `spec.replicas.min`;
8. `knob_gate` — engine flags change (a rolling restart) only outside a rollout, with no pod
   starting, after the knob cooldown, and not while the fleet is still short of replicas; the
   rollout keeps its capacity: Pending pods are dropped first at GPU capacity (they would
   block it), and otherwise pods are added for the rollout (a surge of the Deployment's
   maxUnavailable) so that the pods it takes down are replaced beforehand (within the pool's
   grant).

Pure; called by `policy.decide`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from slascaler.model.batching import largest_batch_within
from slascaler.policy.pool import PoolGrant
from slascaler.policy.reasons import Reason
from slascaler.policy.rules import Context, trusted_batch_fit
from slascaler.policy.state import PolicyMemory
from slascaler.spec import SLASpec


@dataclass(frozen=True)
class Limit:
    """A step held a change back: why, and the condition it sets (type, reason) if any."""

    reason: Reason
    text: str
    condition: tuple[str, str] | None = None  # e.g. ("CapacityLimited", "AtMaxReplicas")


def bounds(ctx: Context, wanted: int) -> tuple[int, Limit | None]:
    spec = ctx.spec
    if wanted > spec.replicas.max:
        return spec.replicas.max, Limit(
            Reason.CAPACITY_LIMITED,
            f"needs {wanted} replicas, spec.replicas.max is {spec.replicas.max}",
            ("CapacityLimited", "AtMaxReplicas"),
        )
    return spec.replicas.clamp(wanted), None


def gpu_capacity(ctx: Context, wanted: int) -> tuple[int, Limit | None]:
    fleet, memory, current = ctx.fleet, ctx.memory, ctx.replicas
    if fleet.unschedulable_pods > 0 and wanted > fleet.provisioned:
        # The load needs more than the GPUs hold (asked-for pods among them or not).
        return min(wanted, current), Limit(
            Reason.CAPACITY_LIMITED,
            f"{fleet.unschedulable_pods} pods cannot be scheduled (no GPU left): not adding "
            "replicas",
            ("CapacityLimited", "Unschedulable"),
        )
    if wanted <= current:
        return wanted, None
    if (
        memory.gpu_limit is not None
        and memory.gpu_limit_at is not None
        and ctx.now - memory.gpu_limit_at < ctx.tunables.gpu_limit_memory_s
        and wanted > memory.gpu_limit
    ):
        # The GPUs held this many replicas a moment ago: asking for more would only make
        # Pending pods again. Retried once the memory expires (GPUs may have been freed).
        since = ctx.now - memory.gpu_limit_at
        retry = ctx.tunables.gpu_limit_memory_s - since
        return max(current, memory.gpu_limit), Limit(
            Reason.CAPACITY_LIMITED,
            f"the GPUs held {memory.gpu_limit} replicas {since:.0f} s ago: not asking for "
            f"more for {retry:.0f} s",
            ("CapacityLimited", "GPUsExhausted"),
        )
    return wanted, None


def remember_gpu_limit(ctx: Context, memory: PolicyMemory) -> PolicyMemory:
    """With pods Pending for lack of GPUs, remember how many replicas the GPUs hold."""
    from dataclasses import replace

    fleet = ctx.fleet
    if fleet.unschedulable_pods <= 0:
        return memory
    held = max(1, fleet.spec_replicas - fleet.unschedulable_pods)
    return replace(memory, gpu_limit=held, gpu_limit_at=ctx.now)


def rate_limit(ctx: Context, wanted: int) -> tuple[int, Limit | None]:
    current, tunables = ctx.replicas, ctx.tunables
    limit = max(math.ceil(current * tunables.scale_up_max_factor),
                current + tunables.scale_up_min_pods)  # fmt: skip
    if wanted > limit:
        return limit, Limit(
            Reason.SCALE_UP, f"rate-limited to {limit} (×{tunables.scale_up_max_factor:g} or "
            f"+{tunables.scale_up_min_pods} per step)"
        )  # fmt: skip
    return wanted, None


def starting_pods(
    ctx: Context, wanted: int, beyond_backlog: int | None
) -> tuple[int, Limit | None]:
    """While pods start, scale up only for load the provisioned pods will not serve."""
    fleet, current = ctx.fleet, ctx.replicas
    if wanted <= current or fleet.starting_pods == 0:
        return wanted, None
    hold = Limit(
        Reason.HOLD_PODS_STARTING,
        f"{fleet.starting_pods} pods of the last scale-up are still starting",
    )
    if not ctx.tunables.use_warm_credit:
        return current, hold
    # The starting pods are counted (they are in `current`); the backlog they will drain is
    # not sized for again.
    need = beyond_backlog if beyond_backlog is not None else wanted
    if need <= current:
        return current, hold
    return min(wanted, need), None


def scale_up_cooldown(ctx: Context, wanted: int) -> tuple[int, Limit | None]:
    last, cooldown = ctx.memory.last_scale_up_at, ctx.spec.behavior.scale_up_cooldown_s
    if wanted > ctx.replicas and last is not None and ctx.now - last < cooldown:
        return ctx.replicas, Limit(
            Reason.HOLD_SCALE_UP_COOLDOWN,
            f"scale-up cooldown: {cooldown - (ctx.now - last):.0f} s left",
        )
    return wanted, None


def stabilization(ctx: Context, wanted: int, memory: PolicyMemory) -> tuple[int, Limit | None]:
    """Scale down only to the highest count recommended over the stabilization window."""
    current, spec, tunables = ctx.replicas, ctx.spec, ctx.tunables
    if wanted >= current:
        return wanted, None
    window = spec.behavior.scale_down_stabilization_s
    stabilized = max((r.replicas for r in memory.recommendations), default=current)
    if stabilized >= current:
        return current, None  # a recent window wanted as many: nothing to say
    observed_for = ctx.now - (memory.first_seen_at if memory.first_seen_at is not None
                              else ctx.now)  # fmt: skip
    last_up = memory.last_scale_up_at
    since_up = math.inf if last_up is None else ctx.now - last_up
    if observed_for < window or since_up < window:
        return current, Limit(
            Reason.HOLD_STABILIZING,
            f"could run {max(wanted, stabilized)} replicas, but scale-down waits for "
            f"{window:.0f} s of stable recommendations ({min(observed_for, since_up):.0f} s "
            "so far)",
        )
    if ctx.fleet.starting_pods > 0 or ctx.fleet.rollout_in_progress:
        return current, Limit(Reason.HOLD_PODS_STARTING,
                              "pods are still starting: scale-down deferred")  # fmt: skip
    floor = current - max(1, math.floor(current * tunables.scale_down_max_fraction))
    target = spec.replicas.clamp(max(stabilized, floor))
    if target > stabilized:
        return target, Limit(
            Reason.SCALE_DOWN,
            f"{stabilized} is the highest count recommended over the last {window:.0f} s; "
            f"at most {current - floor} fewer per step",
        )
    return target, Limit(
        Reason.SCALE_DOWN,
        f"{stabilized} is the highest count recommended over the last {window:.0f} s",
    )


def budget(
    spec: SLASpec, current: int, wanted: int, need: int | None, grant: PoolGrant | None
) -> tuple[int, Limit | None]:
    """A shared GPU pool's grant: at most `grant.allowed` replicas, never below replicas.min.

    `wanted` is the count so far (after stabilization), `need` what the load calls for. A
    cap below the current count is a preemption (the change's reason); a cap below the need
    is a hold with CapacityLimited/BudgetExhausted, saying who has the GPUs.
    """
    if grant is None:
        return wanted, None
    cap = spec.replicas.clamp(grant.allowed)
    short = need is not None and spec.replicas.clamp(need) > cap
    condition = ("CapacityLimited", "BudgetExhausted") if short else None
    why = f"pool {grant.pool} grants {grant.granted} replicas" + (
        f" ({grant.message})" if grant.message else ""
    )
    if not grant.acting:
        why += " [not applied: it reports only]"
    if cap < current and wanted > cap:
        return cap, Limit(Reason.PREEMPTED, f"replicas {current}→{cap}: {why}", condition)
    if wanted > cap:
        return cap, Limit(Reason.BUDGET_EXHAUSTED, why, condition)
    if short:  # the load wants more than the grant, though other steps hold it lower now
        return wanted, Limit(Reason.BUDGET_EXHAUSTED, why, condition)
    return wanted, None


def batch_at_capacity(ctx: Context) -> tuple[int | None, Limit | None]:
    """At the replica limit: a larger max batch size, if the batch limit is what binds."""
    bounds, current = ctx.spec.max_batch_size, ctx.knobs.get("maxBatchSize")
    if bounds is None or current is None:
        return None, None
    per_pod = ctx.running_per_pod()
    if per_pod < current * ctx.tunables.batch_saturation:
        return None, Limit(
            Reason.BATCH_NOT_BINDING,
            f"{per_pod:.0f} requests run per replica, under the batch limit {current}: raising "
            "it would not drain the queue",
        )
    if current >= bounds.max:
        return None, Limit(Reason.BATCH_AT_MAX,
                           f"maxBatchSize already at its maximum {bounds.max}")  # fmt: skip
    if not ctx.itl_headroom():
        return None, Limit(Reason.HOLD_NO_ITL_HEADROOM,
                           f"ITL {ctx.analysis.itl_ms:.0f} ms has no headroom to raise "
                           "maxBatchSize")  # fmt: skip
    target = math.ceil(current * ctx.tunables.batch_step_up)
    fit = trusted_batch_fit(ctx)
    if fit is not None and ctx.spec.itl is not None:
        limit = largest_batch_within(fit, ctx.spec.itl.threshold_ms * ctx.tunables.headroom)
        if limit is not None:
            target = min(target, limit)
    return bounds.clamp(max(target, current + 1)), None


@dataclass(frozen=True)
class KnobOutcome:
    knobs: Mapping[str, tuple[int, Reason]]  # knob changes allowed
    replicas: int  # the replica count, with a surge or the Pending pods dropped
    replicas_reason: Reason | None  # SURGE_FOR_ROLLOUT / DROP_PENDING_PODS when changed
    limit: Limit | None
    note: str = ""


def knob_gate(
    ctx: Context, knobs: Mapping[str, tuple[int, Reason]], replicas: int, short: bool
) -> KnobOutcome:
    """Whether the knob changes may roll the Deployment now, and the replicas the rollout
    needs (`short`: the load wants replicas that are not there yet)."""
    changes = {n: v for n, v in knobs.items() if v[0] != ctx.knobs.get(n)}
    if not changes:
        return KnobOutcome({}, replicas, None, None)
    fleet, memory, behavior = ctx.fleet, ctx.memory, ctx.spec.behavior
    names = ", ".join(changes)
    if fleet.rollout_in_progress:
        return KnobOutcome({}, replicas, None,
                           Limit(Reason.HOLD_ROLLOUT,
                                 f"a rollout is in progress: {names} change deferred"))  # fmt: skip
    if fleet.starting_pods > 0:
        # Pods of a scale-up are still loading: a rollout now would restart them, and they
        # may yet turn out unschedulable (then the Pending pods are dropped for it).
        return KnobOutcome({}, replicas, None,
                           Limit(Reason.HOLD_PODS_STARTING,
                                 f"{fleet.starting_pods} pods are still starting: {names} "
                                 "change deferred"))  # fmt: skip
    last = memory.last_knob_change_at
    if last is not None and ctx.now - last < behavior.knob_cooldown_s:
        remaining = behavior.knob_cooldown_s - (ctx.now - last)
        return KnobOutcome({}, replicas, None,
                           Limit(Reason.HOLD_KNOB_COOLDOWN,
                                 f"knob cooldown: {names} may change again in "
                                 f"{remaining:.0f} s"))  # fmt: skip
    if fleet.unschedulable_pods > 0:
        # The rolling update needs a GPU: with none free, only a pod the rollout may take
        # down makes room, and Pending pods would keep the rollout from ever counting as
        # available. So: drop the Pending pods (they serve nothing), and change the flags
        # only if the Deployment lets the rollout take a pod down.
        if fleet.max_unavailable < 1:
            return KnobOutcome({}, replicas, None, Limit(
                Reason.HOLD_NO_ROLLOUT_ROOM,
                f"changing {names} rolls the Deployment, and with no GPU free the rollout can "
                "only proceed by taking a pod down: set the Deployment's "
                "spec.strategy.rollingUpdate.maxUnavailable to 1 or more",
            ))  # fmt: skip
        kept = max(ctx.spec.replicas.min, fleet.spec_replicas - fleet.unschedulable_pods)
        if kept < replicas:
            return KnobOutcome(changes, kept, Reason.DROP_PENDING_PODS, None,
                               f"replicas {replicas}→{kept}: {fleet.unschedulable_pods} Pending "
                               "pods serve nothing and would block the rollout")  # fmt: skip
        return KnobOutcome(changes, replicas, None, None)
    if short:
        return KnobOutcome({}, replicas, None, Limit(
            Reason.HOLD_SHORT_OF_CAPACITY,
            f"{names} change deferred: replicas the load needs are not all there yet, and a "
            "rollout would take capacity away",
        ))  # fmt: skip
    surge = fleet.max_unavailable
    room = ctx.replica_ceiling() - replicas
    if (
        memory.gpu_limit is not None
        and memory.gpu_limit_at is not None
        and ctx.now - memory.gpu_limit_at < ctx.tunables.gpu_limit_memory_s
    ):
        room = min(room, memory.gpu_limit - replicas)  # no GPU for surge pods either
    if ctx.tunables.use_surge_for_rollouts and surge > 0 and room > 0:
        added = min(surge, room)
        return KnobOutcome(changes, replicas + added, Reason.SURGE_FOR_ROLLOUT, None,
                           f"replicas {replicas}→{replicas + added} for the rollout, which "
                           f"may take {surge} pods down: the added pods keep its "
                           "capacity, and scale-in removes them later")  # fmt: skip
    return KnobOutcome(changes, replicas, None, None)
