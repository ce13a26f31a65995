"""The Kubernetes HPA algorithm, and the two recipes that run it: HPA on queue, KEDA on TTFT.

Follows kubernetes/kubernetes `pkg/controller/podautoscaler` as on its master branch
(autoscaling/v2; the rate limits' period start counts both scale-up and scale-down events,
as `calculateScaleUpLimitWithScalingRules` does since that fix; read in the index's copies of
`horizontal.go` and `replica_calculator.go`):
- `replica_calculator.go`: outside the 10% tolerance (`--horizontal-pod-autoscaler-tolerance`),
  an External AverageValue metric asks for ceil(usage / target), judged on usage / (target ×
  status.replicas), and a Value metric for ceil(usage / target × ready pods);
- `horizontal.go` (`normalizeDesiredReplicasWithBehaviors`): the recommendation is first
  stabilised (the lowest recommendation of the scale-up window, the highest of the scale-down
  window, both counting the new one, bound the move from the current count), then rate
  limited by the behaviour's policies: each policy allows, from the replica count at the
  start of its period (current minus what was added plus what was removed in the last
  `periodSeconds`), +`value` pods or +`value`% (rounded up) on the way up, −`value` pods or
  −`value`% (rounded down) on the way down; `selectPolicy: Max` takes the policy allowing
  the biggest change; then [minReplicas, maxReplicas];
- the default behaviour (`pkg/apis/autoscaling/v2/defaults.go`): up: no stabilisation,
  max(+100%, +4 pods) per 15 s; down: 300 s stabilisation, −100% per 15 s.

`Normalizer` is that normalisation with its memory (recommendations, scale events); the
llm-d recipe (`baselines.llmd`) reuses it with its own behaviour block. The recipes:
- `HPAController("queue", 5)`: `vllm:num_requests_waiting` summed over pods, AverageValue
  target 5 per pod (vLLM production-stack's KEDA recipe, 15 s polling; GKE's "scale on queue
  size" guidance);
- `HPAController("ttft", SLA)`: KEDA's Prometheus scaler on p95 TTFT over the rate window,
  `metricType: Value`, threshold = the SLA.

Called every `period_s` (15 s, the HPA sync period) by the run loop with the fleet.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Literal

from slascaler_sim.baselines.interface import FleetView

HPA_TOLERANCE = 0.1
HPA_PERIOD_S = 15.0
QUEUE_TARGET_PER_POD = 5.0


@dataclass(frozen=True)
class ScalingPolicy:
    kind: Literal["Pods", "Percent"]
    value: int
    period_s: float


@dataclass(frozen=True)
class ScalingRules:
    """One direction of an HPA `behavior` block."""

    stabilization_s: float
    policies: tuple[ScalingPolicy, ...]
    select: Literal["Max", "Min", "Disabled"] = "Max"

    @property
    def longest_period_s(self) -> float:
        return max((p.period_s for p in self.policies), default=0.0)


@dataclass(frozen=True)
class Behavior:
    scale_up: ScalingRules
    scale_down: ScalingRules


DEFAULT_BEHAVIOR = Behavior(
    scale_up=ScalingRules(
        0.0, (ScalingPolicy("Percent", 100, 15.0), ScalingPolicy("Pods", 4, 15.0))
    ),
    scale_down=ScalingRules(300.0, (ScalingPolicy("Percent", 100, 15.0),)),
)


def usage_ratio_replicas(current: int, ratio: float, ready: int | None = None) -> int:
    """`current` (spec.replicas) inside the tolerance; outside it, ceil(ratio × ready pods)
    (`ready` defaults to `current`); from zero replicas, ceil(ratio)."""
    if not math.isfinite(ratio):
        return current
    if current == 0:
        return max(0, math.ceil(ratio))
    if abs(ratio - 1.0) <= HPA_TOLERANCE:
        return current
    return max(0, math.ceil(ratio * (current if ready is None else ready)))


def average_value_replicas(status_replicas: int, usage: float, target_per_pod: float) -> int:
    """An External metric with an AverageValue target: the tolerance is judged on
    usage / (target × status.replicas); outside it, ceil(usage / target)."""
    if not math.isfinite(usage) or status_replicas <= 0:
        return status_replicas
    if abs(usage / (target_per_pod * status_replicas) - 1.0) <= HPA_TOLERANCE:
        return status_replicas
    return max(0, math.ceil(usage / target_per_pod))


@dataclass
class Normalizer:
    """The HPA controller's normalisation of one target's desired count, with its memory."""

    min_replicas: int
    max_replicas: int
    behavior: Behavior = DEFAULT_BEHAVIOR
    _recommendations: deque[tuple[float, int]] = field(default_factory=deque)
    _up_events: deque[tuple[float, int]] = field(default_factory=deque)
    _down_events: deque[tuple[float, int]] = field(default_factory=deque)

    def reconcile(self, current: int, desired: int, now: float) -> int:
        """What the HPA writes to spec.replicas: outside [min, max] the bound (no metrics
        consulted), else the stabilised, rate-limited recommendation."""
        if current > self.max_replicas:
            return self.max_replicas
        if current < self.min_replicas:
            return self.min_replicas
        stabilized = self._stabilize(current, desired, now)
        return self._rate_limit(current, stabilized, now)

    def record_scale(self, before: int, after: int, now: float) -> None:
        """Remember a change written to the target (the rate limits count them)."""
        if after > before:
            self._up_events.append((now, after - before))
        elif after < before:
            self._down_events.append((now, before - after))
        horizon = max(
            self.behavior.scale_up.longest_period_s, self.behavior.scale_down.longest_period_s
        )
        for events in (self._up_events, self._down_events):
            while events and events[0][0] <= now - horizon:
                events.popleft()

    def _stabilize(self, current: int, desired: int, now: float) -> int:
        up_cutoff = now - self.behavior.scale_up.stabilization_s
        down_cutoff = now - self.behavior.scale_down.stabilization_s
        up, down = desired, desired
        for at, recommendation in self._recommendations:
            if at > up_cutoff:
                up = min(up, recommendation)
            if at > down_cutoff:
                down = max(down, recommendation)
        self._recommendations.append((now, desired))
        oldest = min(up_cutoff, down_cutoff)
        while self._recommendations and self._recommendations[0][0] <= oldest:
            self._recommendations.popleft()
        # Move from the current count only as far as every recommendation in the windows agrees.
        return min(max(current, up), down)

    @staticmethod
    def _changed(events: deque[tuple[float, int]], period_s: float, now: float) -> int:
        return sum(change for at, change in events if at > now - period_s)

    def _period_start(self, current: int, policy: ScalingPolicy, now: float) -> int:
        return (
            current
            - self._changed(self._up_events, policy.period_s, now)
            + self._changed(self._down_events, policy.period_s, now)
        )

    def _rate_limit(self, current: int, desired: int, now: float) -> int:
        if desired > current:
            rules = self.behavior.scale_up
            if rules.select == "Disabled":
                return current
            proposals = []
            for policy in rules.policies:
                start = self._period_start(current, policy, now)
                if policy.kind == "Pods":
                    proposals.append(start + policy.value)
                else:
                    proposals.append(math.ceil(start * (1 + policy.value / 100)))
            limit = max(proposals) if rules.select == "Max" else min(proposals)
            return min(desired, max(current, limit), self.max_replicas)
        if desired < current:
            rules = self.behavior.scale_down
            if rules.select == "Disabled":
                return current
            proposals = []
            for policy in rules.policies:
                start = self._period_start(current, policy, now)
                if policy.kind == "Pods":
                    proposals.append(start - policy.value)
                else:
                    proposals.append(math.floor(start * (1 - policy.value / 100)))
            limit = min(proposals) if rules.select == "Max" else max(proposals)
            return max(desired, min(current, limit), self.min_replicas)
        return desired


def status_replicas(fleet: FleetView) -> int:
    """Deployment status.replicas: pods that exist and are not terminating (ready, starting
    or still Pending), the count `kube_deployment_status_replicas` exports."""
    return max(fleet.desired, fleet.ready_replicas + fleet.starting_replicas)


@dataclass
class HPAController:
    """The HPA algorithm on one metric, with the default scaling behaviour."""

    metric: str  # "queue" or "ttft"
    target: float
    min_replicas: int
    max_replicas: int
    window_s: float = 60.0  # the rate window of the TTFT query
    period_s: float = HPA_PERIOD_S
    name: str = ""
    _hpa: Normalizer | None = None

    def __post_init__(self) -> None:
        if not self.name:
            self.name = "HPA on queue" if self.metric == "queue" else "KEDA on TTFT"
        self._hpa = Normalizer(self.min_replicas, self.max_replicas)

    def desired(self, current: int, value: float, ready: int | None = None) -> int:
        """The replica calculator for a per-pod value or a Value metric: ceil(value / target
        × ready pods) outside the tolerance (ready pods default to `current`)."""
        return usage_ratio_replicas(current, value / self.target, ready)

    def _proposal(self, fleet: FleetView) -> int:
        if self.metric == "queue":
            observation = fleet.observation(self.period_s)
            # AverageValue: usage summed over pods against target × status.replicas.
            return average_value_replicas(status_replicas(fleet), observation.waiting, self.target)
        observation = fleet.observation(self.window_s)
        # No request in the window: the query is empty and KEDA reports 0
        # (`ignoreNullValues` defaults to true), so an idle fleet shrinks to the minimum.
        ttft = observation.ttft
        p95 = ttft.quantile(0.95) if ttft is not None and ttft.total > 0 else 0.0
        # Value target: usage / target × the ready pods.
        return self.desired(fleet.desired, p95, fleet.ready_replicas)

    def control(self, fleet: FleetView, now: float) -> None:
        assert self._hpa is not None
        current = fleet.desired
        target = self._hpa.reconcile(current, self._proposal(fleet), now)
        if target != current:
            fleet.scale(target)
            self._hpa.record_scale(current, target, now)
