"""What the policy knows of the target Deployment now, and what it remembers between windows.

`FleetState` is read from the live Deployment just before deciding (replicas, ready and
unschedulable pods, the engine's current flags, another autoscaler or an older InferenceSLA
targeting it, someone else resetting its replicas, a rollout slascaler did not start).
`PolicyMemory` is the policy's own record, carried from one decision to the next by the
caller (persisted in the InferenceSLA's status so a restarted operator resumes it).

Built by the wiring and the simulator's control loop; read by `policy.decide`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

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


@dataclass(frozen=True)
class Recommendation:
    """The replica count the policy wanted at one time (for scale-down stabilization)."""

    at: float
    replicas: int


@dataclass(frozen=True)
class PolicyMemory:
    """What the policy carries between windows. Times are on the caller's clock (seconds)."""

    last_scale_up_at: float | None = None
    last_scale_down_at: float | None = None
    last_knob_change_at: float | None = None
    recommendations: tuple[Recommendation, ...] = ()
    batch_points: tuple[tuple[float, float], ...] = ()  # (running per replica, ITL ms)
    service_rate: float | None = None  # calibrated requests/s one replica serves
    first_seen_at: float | None = None  # first decision with data (stabilization needs history)
    gpu_limit: int | None = None  # replicas the GPUs held when pods last went unschedulable
    gpu_limit_at: float | None = None
    # Back-off after someone else overwrote spec.replicas: no replica write until `until`;
    # `backoff_s` doubles each time the fight resumes; `seen_at` is when the overwrite it
    # answers was seen: only one after a later replica write of slascaler's starts another.
    replicas_backoff_until: float | None = None
    replicas_backoff_s: float | None = None
    replicas_overwrite_seen_at: float | None = None

    def remembering(
        self,
        now: float,
        recommendation: int | None,
        window_s: float,
        batch_point: tuple[float, float] | None,
        service_rate: float | None,
        keep_points: int,
    ) -> PolicyMemory:
        """This memory with one more window recorded; records older than the window dropped."""
        recommendations = tuple(r for r in self.recommendations if r.at > now - window_s)
        if recommendation is not None:
            # Only the latest time of each count matters to "the highest count recommended
            # within the window", so earlier entries of the same count are dropped: the
            # memory (kept in the status) stays as short as the counts are few.
            recommendations = (
                *(r for r in recommendations if r.replicas != recommendation),
                Recommendation(now, recommendation),
            )
        points = self.batch_points
        if batch_point is not None:
            points = (*points, batch_point)[-keep_points:]
        return replace(
            self,
            recommendations=recommendations,
            batch_points=points,
            service_rate=service_rate if service_rate is not None else self.service_rate,
            first_seen_at=self.first_seen_at if self.first_seen_at is not None else now,
        )


@dataclass(frozen=True)
class PolicyState:
    fleet: FleetState
    memory: PolicyMemory = field(default_factory=PolicyMemory)
