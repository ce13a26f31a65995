"""What the policy knows of the target Deployment now, and what it remembers between windows.

`FleetState` is read from the live Deployment just before deciding (replicas, ready and
unschedulable pods, the engine's current flags, another autoscaler or an older InferenceSLA
targeting it, someone else resetting its replicas, a rollout slascaler did not start).
`PolicyMemory` is the policy's own record, carried from one decision to the next by the
caller (persisted in the InferenceSLA's status so a restarted operator resumes it).

`PolicyState.grant` is this SLA's share of a shared GPU pool (`policy.pool`), None outside
any pool.

Built by the operator's fleet reader (`kube.fleet`) and the status (the memory is kept in the
InferenceSLA's status); read by `policy.decide`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from slascaler.model.latency import LoadPoint
from slascaler.policy.pool import PoolGrant

DEFAULT_MAX_UNAVAILABLE = "25%"  # a Deployment's rolling update when its spec says nothing
DEFAULT_MAX_SURGE = "25%"


def resolve_max_unavailable(value: int | str, replicas: int) -> int:
    """Pods a rolling update may take down: a count, or a percentage of the replicas rounded
    down, as the Deployment controller resolves `maxUnavailable`."""
    if isinstance(value, str) and value.endswith("%"):
        return math.floor(replicas * float(value[:-1]) / 100)
    return int(value)


def resolve_max_surge(value: int | str, replicas: int) -> int:
    """Pods a rolling update may add above the replicas: a count, or a percentage rounded up
    (the Deployment controller's rounding for `maxSurge`)."""
    if isinstance(value, str) and value.endswith("%"):
        return math.ceil(replicas * float(value[:-1]) / 100)
    return int(value)


@dataclass(frozen=True)
class FleetState:
    """The Deployment as it is: spec'd and ready replicas, engine flags, conflicts."""

    spec_replicas: int
    ready_replicas: int
    unschedulable_pods: int = 0  # pods Pending with the scheduler's Unschedulable reason
    max_batch_size: int | None = None  # the engine's current max batch flag, if known
    chunk_size: int | None = None  # the engine's current chunk (token budget) flag, if known
    rollout_in_progress: bool = False  # a rolling update has not finished
    # e.g. "HorizontalPodAutoscaler/llama", "ScaledObject/llama", or "InferenceSLA/older-one"
    # (the oldest InferenceSLA on a Deployment owns it; the others leave it alone)
    other_autoscaler: str | None = None
    max_unavailable: int = 1  # pods a rolling update may take down (the Deployment's strategy)
    # Someone else wrote spec.replicas after slascaler's last write: the field manager that
    # owns it now (from the Deployment's managedFields).
    replicas_overwritten_by: str | None = None
    # A rollout is in progress that slascaler did not start (it changes more of the pod
    # template than the engine flags slascaler writes): no template change may be stacked on it.
    foreign_rollout: bool = False

    @property
    def starting_pods(self) -> int:
        """Pods asked for that are neither ready nor stuck unschedulable."""
        return max(0, self.spec_replicas - self.ready_replicas - self.unschedulable_pods)

    @property
    def provisioned(self) -> int:
        """Pods that serve or will soon: ready and starting, not the unschedulable ones."""
        return self.spec_replicas - self.unschedulable_pods

    def knob(self, name: str) -> int | None:
        """The live value of an engine knob (`policy.knobs`), if known."""
        return {"maxBatchSize": self.max_batch_size, "chunkSize": self.chunk_size}[name]


@dataclass(frozen=True)
class Recommendation:
    """The replica count the policy wanted at one time (for scale-down stabilization)."""

    at: float
    replicas: int


@dataclass(frozen=True)
class PolicyMemory:
    """What the policy carries between windows. Times are on the caller's clock (seconds).

    - the times of the last changes (cooldowns, stabilization) and when it first had data;
    - recent recommendations (scale-down takes the highest of the stabilization window);
    - what it learned of the engine: windows at known loads (`load_points`, taken at the
      knob values `points_knobs`), the replica's token throughput when saturated
      (`capacity`) and its recent estimates (`capacity_history`: time, tokens/s), (running
      per replica, ITL) pairs for the batch-size fit;
    - the load's recent history (`load_history`: time, tokens/s) for the trend, and how far
      its forecasts have been off (`forecast_error`, relative);
    - how long pods took to become ready (`startup_s`), when the fleet was last seen
      changing (`unsettled_at`) and the replica count the GPUs held when pods last went
      unschedulable (`gpu_limit`).
    """

    last_scale_up_at: float | None = None
    last_scale_down_at: float | None = None
    last_knob_change_at: float | None = None
    recommendations: tuple[Recommendation, ...] = ()
    batch_points: tuple[tuple[float, float], ...] = ()  # (running per replica, ITL ms)
    first_seen_at: float | None = None  # first decision with data (stabilization needs history)
    gpu_limit: int | None = None  # replicas the GPUs held when pods last went unschedulable
    gpu_limit_at: float | None = None
    load_points: tuple[LoadPoint, ...] = ()
    points_knobs: tuple[int | None, int | None] = (None, None)
    capacity: float | None = None  # tokens/s one replica serves with full steps
    capacity_history: tuple[tuple[float, float], ...] = ()  # (time, capacity) of recent windows
    load_history: tuple[tuple[float, float], ...] = ()  # (time, tokens/s of work)
    forecast: tuple[float, float] | None = None  # (for time, tokens/s) predicted earlier
    forecast_error: float = 0.0
    startup_s: float | None = None
    startup_for: float | None = None  # the scale-up whose start-up `startup_s` measured
    # The last decision that saw pods starting, unschedulable or rolling: a window teaches
    # the latency model only once it lies wholly after this (`policy.learning`).
    unsettled_at: float | None = None
    # Back-off after someone else overwrote spec.replicas: no replica write until `until`;
    # `backoff_s` doubles each time the fight resumes; `seen_at` is when the overwrite it
    # answers was seen: only one after a later replica write of slascaler's starts another.
    replicas_backoff_until: float | None = None
    replicas_backoff_s: float | None = None
    replicas_overwrite_seen_at: float | None = None

    def recommending(self, now: float, replicas: int, window_s: float) -> PolicyMemory:
        """This memory with one more recommendation; those older than the window dropped.

        Only the latest time of each count matters to "the highest count recommended within
        the window", so earlier entries of the same count are dropped: the memory (kept in
        the status) stays as short as the counts are few.
        """
        kept = tuple(
            r for r in self.recommendations if r.at > now - window_s and r.replicas != replicas
        )
        return replace(
            self,
            recommendations=(*kept, Recommendation(now, replicas)),
            first_seen_at=self.first_seen_at if self.first_seen_at is not None else now,
        )


@dataclass(frozen=True)
class PolicyState:
    fleet: FleetState
    memory: PolicyMemory = field(default_factory=PolicyMemory)
    grant: PoolGrant | None = None  # the share of a shared GPU pool; None outside any pool
