"""The decision being assembled: what each stage of `decide` changed, held or concluded.

`Draft` gathers the replicas and knob values, the reason of each change, the holds (each a
`steps.Limit`, with the condition it sets) and the conditions; `finish` turns it into the
`Decision`: its changes ordered so the decision is named by its largest one (the user's
bounds, then replicas, then knobs, a surge after the knob it serves), the memory if the
changes are applied or held, and the conditions not set defaulted. A back-off on replica
writes (`replicas_frozen`) turns a replica change into a hold here. Pure. Used by
`policy.decide` and `policy.apply_steps`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from slascaler.model.latency import ReplicaWorth
from slascaler.model.regime import Regime, RegimeAnalysis
from slascaler.policy import steps
from slascaler.policy.decision import Change, Condition, Decision, Status
from slascaler.policy.knobs import KNOBS
from slascaler.policy.reasons import Reason
from slascaler.policy.state import PolicyMemory, PolicyState
from slascaler.spec import SLASpec

# Which change names the decision: the user's bounds first, then replicas, then knobs; a
# replica change made for a knob's rollout comes after that knob.
_PRIORITY = {
    Reason.BOUNDS_ENFORCED: 0,
    Reason.SCALE_UP: 1,
    Reason.SCALE_DOWN: 1,
    Reason.RAISE_CHUNK_FOR_PREFILL: 2,
    Reason.LOWER_BATCH_FOR_ITL: 2,
    Reason.LOWER_CHUNK_FOR_ITL: 2,
    Reason.RAISE_BATCH_AT_CAPACITY: 2,
    Reason.SURGE_FOR_ROLLOUT: 3,
    Reason.DROP_PENDING_PODS: 3,
    Reason.PREEMPTED: 1,
}


@dataclass
class Draft:
    """The decision being assembled by one call of `decide`: `finish` makes it a Decision."""

    spec: SLASpec
    state: PolicyState
    now: float
    memory: PolicyMemory
    replicas: int
    knobs: dict[str, int | None]
    reasons: dict[str, Reason] = field(default_factory=dict)  # per changed knob / replicas
    texts: list[str] = field(default_factory=list)
    holds: list[steps.Limit] = field(default_factory=list)
    conditions: dict[str, Condition] = field(default_factory=dict)
    regime: Regime = Regime.UNKNOWN
    analysis: RegimeAnalysis | None = None
    wanted: int | None = None
    sustainable: float | None = None
    replicas_frozen: str | None = None  # why replicas may not be written now (back-off)
    held: int | None = None
    worth: ReplicaWorth | None = None
    for_collisions: int | None = None  # replicas that keep long prompts apart

    def hold(self, limit: steps.Limit) -> None:
        self.holds.append(limit)
        self.texts.append(limit.text)
        if limit.condition is not None:
            kind, reason = limit.condition
            self.set(kind, Status.TRUE, reason, limit.text)

    def set(self, kind: str, status: Status, reason: str, message: str) -> None:
        self.conditions[kind] = Condition(kind, status, reason, message)

    def finish(self) -> Decision:
        fleet = self.state.fleet
        if self.replicas_frozen is not None and self.replicas != fleet.spec_replicas:
            wanted, self.replicas = self.replicas, fleet.spec_replicas
            self.reasons.pop("replicas", None)
            text = f"would set replicas {fleet.spec_replicas}→{wanted}, but {self.replicas_frozen}"
            self.holds.insert(0, steps.Limit(Reason.HOLD_REPLICAS_OVERWRITTEN, text))
            self.texts.insert(0, text)
        changes: list[Change] = []
        if self.replicas != fleet.spec_replicas:
            reason = self.reasons.get("replicas") or (
                Reason.SCALE_UP if self.replicas > fleet.spec_replicas else Reason.SCALE_DOWN
            )
            changes.append(Change("replicas", fleet.spec_replicas, self.replicas, reason))
        for knob in KNOBS:
            new = self.knobs.get(knob.name)
            if new is not None and new != fleet.knob(knob.name):
                reason = self.reasons.get(knob.name, Reason.BOUNDS_ENFORCED)
                changes.append(Change(knob.name, fleet.knob(knob.name), new, reason))
        changes.sort(key=lambda c: _PRIORITY.get(c.reason, 2))
        if changes:
            code = changes[0].reason
        else:
            code = next((h.reason for h in self.holds if h.reason not in _ANNOTATIONS),
                        Reason.NO_CHANGE)  # fmt: skip
        applied = self.memory
        if self.replicas > fleet.spec_replicas:
            applied = replace(applied, last_scale_up_at=self.now)
        elif self.replicas < fleet.spec_replicas:
            applied = replace(applied, last_scale_down_at=self.now)
        if any(c.knob != "replicas" for c in changes):
            applied = replace(applied, last_knob_change_at=self.now)
        for kind in ("Conflict", "MetricsAvailable", "CapacityLimited"):
            self.conditions.setdefault(kind, Condition(kind, Status.FALSE, "AsExpected", ""))
        self.conditions.setdefault(
            "SLAMet", Condition("SLAMet", Status.UNKNOWN, "NoData", "no window to judge the SLA by")
        )
        self.set("Ready", Status.TRUE, "Reconciled", "the policy evaluated this window")
        return Decision(
            regime=self.regime,
            replicas=self.replicas,
            max_batch_size=self.knobs.get("maxBatchSize"),
            chunk_size=self.knobs.get("chunkSize"),
            reason_code=code,
            reason="; ".join(t for t in self.texts if t) or "no change needed",
            conditions=tuple(self.conditions.values()),
            changes=tuple(changes),
            memory_if_applied=applied,
            memory_if_held=self.memory,
            analysis=self.analysis,
            wanted_replicas=self.wanted,
            sustainable_rate=self.sustainable,
            held_replicas=self.held,
            worth=self.worth,
            replicas_for_collisions=self.for_collisions,
        )


# Limits that describe a change rather than hold one back (rate limit, stabilized step).
_ANNOTATIONS = frozenset({Reason.SCALE_UP, Reason.SCALE_DOWN})
