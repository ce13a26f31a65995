"""A rule's proposal through the steps, in order, into the decision being assembled.

`apply_steps` runs the proposed replicas through `policy.steps` (bounds → GPU capacity →
rate limit → starting pods → scale-up cooldown → stabilization → a shared GPU pool's grant),
records each hold and annotation, raises the max batch size at the capacity limit, then
gates the proposed knob values (rollout, cooldown, capacity to roll with). `apply_budget`
applies a pool's grant alone (also when there is no window to decide on) and sets the
Preempted condition; outside any pool it changes nothing. Pure. Called by `policy.decide`.
"""

from __future__ import annotations

from slascaler.model.regime import Regime
from slascaler.policy import steps
from slascaler.policy.decision import Status
from slascaler.policy.draft import Draft
from slascaler.policy.reasons import Reason
from slascaler.policy.rules import Context, Proposal
from slascaler.policy.sizing import Sizing
from slascaler.policy.state import PolicyMemory


def apply_steps(
    out: Draft, ctx: Context, proposal: Proposal, sizing: Sizing | None, memory: PolicyMemory
) -> None:
    """Run the steps on the proposal and record the outcome in `out`."""
    spec, fleet = out.spec, out.state.fleet
    wanted = proposal.replicas
    out.wanted = proposal.wanted
    target, limit = steps.bounds(ctx, wanted)
    # At the capacity limit: the fleet already runs all the replicas it may (the maximum, or
    # what the GPUs hold) and the load wants more: only a knob can add capacity now.
    capped = limit is not None and ctx.replicas >= spec.replicas.max
    if limit is not None:
        out.hold(limit)
    memory = steps.remember_gpu_limit(ctx, memory)
    target, limit = steps.gpu_capacity(ctx, target)
    capped = capped or limit is not None
    if limit is not None:
        out.hold(limit)
    recommended = target
    for step in (steps.rate_limit,):
        target, limit = step(ctx, target)
        if limit is not None:
            out.texts.append(limit.text)
    beyond = sizing.without_backlog if sizing is not None else None
    target, limit = steps.starting_pods(ctx, target, beyond)
    if limit is not None:
        out.hold(limit)
    target, limit = steps.scale_up_cooldown(ctx, target)
    if limit is not None:
        out.hold(limit)
    memory = memory.recommending(out.now, recommended, spec.behavior.scale_down_stabilization_s)
    target, limit = steps.stabilization(ctx, target, memory)
    if limit is not None:
        if limit.reason is Reason.SCALE_DOWN:
            out.texts.append(limit.text)
        else:
            out.hold(limit)
    need = spec.replicas.clamp(proposal.wanted) if proposal.wanted is not None else None
    # What its own rules keep: the highest count recommended over the stabilization window
    # (a shared GPU pool protects what this SLA took while it is that high).
    recent = max((r.replicas for r in memory.recommendations), default=target)
    out.held = spec.replicas.clamp(max(target, recent, need if need is not None else target))
    before = target
    target = apply_budget(out, target, need)
    # A pool's grant caps it too: the grant took replicas away, or the load needs more than the
    # grant allows and the fleet already runs all of it. (A scale-up that is only paced — rate
    # limit, cooldown, pods starting — is not capped: the replicas are coming.)
    ceiling = ctx.replica_ceiling()
    capped = (
        capped
        or target < before
        or (ctx.grant is not None and need is not None and need > ceiling <= ctx.replicas)
    )
    if target != out.replicas:
        out.replicas = target
        out.reasons["replicas"] = proposal.replicas_reason if proposal.replicas_reason in (
            Reason.SCALE_UP, Reason.SCALE_DOWN
        ) else (Reason.SCALE_UP if target > fleet.spec_replicas else Reason.SCALE_DOWN)  # fmt: skip
    knobs = dict(proposal.knobs)
    if capped and ctx.regime is Regime.QUEUE_BOUND:
        batch, limit = steps.batch_at_capacity(ctx)
        if limit is not None:
            out.hold(limit)
        elif batch is not None:
            knobs["maxBatchSize"] = (batch, Reason.RAISE_BATCH_AT_CAPACITY)
            out.texts.append(
                f"maxBatchSize {ctx.knobs.get('maxBatchSize')}→{batch}: replicas are capped "
                f"and the batch limit binds ({ctx.running_per_pod():.0f} running per replica)"
            )
    short = (
        sizing is not None
        and sizing.replicas is not None
        and sizing.feasible
        and sizing.replicas > fleet.provisioned
        and not capped
    )
    gate = steps.knob_gate(ctx, knobs, out.replicas, short)
    if gate.limit is not None:
        out.hold(gate.limit)
    for name, (value, reason) in gate.knobs.items():
        out.knobs[name] = value
        out.reasons[name] = reason
    if gate.replicas_reason is not None and gate.replicas != out.replicas:
        out.replicas = gate.replicas
        out.reasons["replicas"] = gate.replicas_reason
        out.texts.append(gate.note)
    out.memory = memory


def apply_budget(out: Draft, target: int, need: int | None) -> int:
    """Apply a shared GPU pool's grant (`steps.budget`) and set the Preempted condition.

    Outside any pool it does nothing, so an SLA in no pool decides exactly as before.
    """
    grant = out.state.grant
    if grant is None:
        return target
    if grant.preemption is not None:
        takers = ", ".join(grant.preempted_by)
        message = f"pool {grant.pool} gave replicas of this SLA to {takers}: {grant.message}"
        out.set("Preempted", Status.TRUE, str(grant.preemption), message)
    else:
        out.set("Preempted", Status.FALSE, "NotPreempted", f"pool {grant.pool}")
    current = out.state.fleet.spec_replicas
    capped, limit = steps.budget(out.spec, current, target, need, grant)
    if limit is None:
        return capped
    if limit.reason is Reason.PREEMPTED:
        out.texts.append(limit.text)
        if limit.condition is not None:
            kind, reason = limit.condition
            out.set(kind, Status.TRUE, reason, limit.text)
        if capped != out.replicas:
            out.replicas = capped
            out.reasons["replicas"] = Reason.PREEMPTED
    else:
        out.hold(limit)
    return capped
