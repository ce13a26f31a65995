"""AIBrix's KPA: Knative's pod autoscaler with stable and panic windows, on a vLLM gauge.

Follows vllm-project/aibrix v0.4.1 (commit f0c65c2e0d41), the last release whose KPA is the
Knative algorithm: `pkg/controller/podautoscaler/scaler/kpa.go` (`KpaAutoscaler.Scale`,
`NewKpaScalingContext`), `…/common/context.go` (rate defaults), `…/metrics/client.go` and
`…/aggregation/window.go` (the windows), `…/podautoscaler_controller.go` (10 s resync,
[min, max] clamp); AIBrix in turn follows knative/serving `pkg/autoscaler/scaling/
autoscaler.go` (commit 98e5ef90aa70; defaults in `config/core/configmaps/autoscaler.yaml`).
The metric and target are AIBrix's documented KPA sample for vLLM
(`samples/autoscaling/kpa.yaml`, also `benchmarks/scenarios/autoscaling/…/kpa.yaml`):
`targetMetric: gpu_cache_usage_perc`, `targetValue: 0.5`, annotation
`kpa.autoscaling.aibrix.ai/scale-down-delay: 3m`.

Every 10 s (the controller's resync) the metric of every ready pod is scraped and the sum
recorded in two windows of 1 s buckets: stable (60 s) and panic (10 s; Knative's default is
10% of the stable window, AIBrix's code sets 10 s). With the window averages S and P, target
T per pod and R ready pods:
- desired stable / panic counts: ceil(S / T), ceil(P / T), each kept within
  [floor(R / 2), max(1, ceil(2·R))] (max scale-down and scale-up rates 2);
- panic starts (or is extended) when ceil(P / T) / max(1, R) ≥ 2 (panic threshold 200%) and
  ends once it has not been so for a whole stable window; in panic the larger of the two
  counts is used and the count never goes down (it keeps the highest since panic began);
- the autoscaler starts in panic when more than one pod is ready (Knative: no scale-down
  before metrics accumulate);
- a scale-down delay window keeps the highest count of the last 3 minutes;
- the controller clamps to [minReplicas, maxReplicas] and writes it if it changed.

vLLM v1 renamed the gauge `vllm:kv_cache_usage_perc` (0–1); the simulator reports each
engine's KV tokens in use over its capacity (`Observation.kv_cache_usage_now`, summed).
Releases from v0.5 rework the KPA (180 s / 60 s windows, panic on P/S > 2, no panic hold);
v0.4.1 is followed because it is the Knative algorithm DESIGN §6 names.

Called every `period_s` by the run loop with the fleet.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from slascaler_sim.baselines.interface import FleetView

KPA_PERIOD_S = 10.0
KPA_STABLE_WINDOW_S = 60.0
KPA_PANIC_WINDOW_S = 10.0
KPA_PANIC_THRESHOLD = 2.0
KPA_MAX_SCALE_UP_RATE = 2.0
KPA_MAX_SCALE_DOWN_RATE = 2.0
KPA_TARGET_KV_USAGE = 0.5
KPA_SCALE_DOWN_DELAY_S = 180.0


@dataclass
class TimeWindow:
    """AIBrix's `aggregation.TimeWindow`: values at 1 s buckets, the last `size` seconds."""

    size: int
    _entries: deque[tuple[int, float]] = field(default_factory=deque)

    def record(self, now: float, value: float) -> None:
        index = int(now)
        while self._entries and self._entries[0][0] <= index - self.size:
            self._entries.popleft()
        if len(self._entries) < self.size:
            self._entries.append((index, value))

    def average(self) -> float | None:
        return sum(v for _, v in self._entries) / len(self._entries) if self._entries else None

    def maximum(self) -> float | None:
        return max((v for _, v in self._entries), default=None)


@dataclass
class KPAController:
    min_replicas: int
    max_replicas: int
    target: float = KPA_TARGET_KV_USAGE
    period_s: float = KPA_PERIOD_S
    name: str = "AIBrix KPA"
    panic_threshold: float = KPA_PANIC_THRESHOLD
    stable_window_s: float = KPA_STABLE_WINDOW_S
    panic_window_s: float = KPA_PANIC_WINDOW_S
    scale_down_delay_s: float = KPA_SCALE_DOWN_DELAY_S
    panic_since: float | None = None  # Knative's panicTime (the last time over the threshold)
    max_panic_pods: int = 0
    _started: bool = False
    _stable: TimeWindow | None = None
    _panic: TimeWindow | None = None
    _delay: TimeWindow | None = None

    def __post_init__(self) -> None:
        self._stable = TimeWindow(math.ceil(self.stable_window_s))
        self._panic = TimeWindow(math.ceil(self.panic_window_s))
        self._delay = TimeWindow(math.ceil(self.scale_down_delay_s))

    @property
    def in_panic(self) -> bool:
        return self.panic_since is not None

    def record(self, now: float, total: float) -> None:
        """The metric summed over the ready pods, into both windows."""
        assert self._stable is not None and self._panic is not None
        self._stable.record(now, total)
        self._panic.record(now, total)

    def scale(self, ready: int, now: float) -> int | None:
        """`KpaAutoscaler.Scale`: the desired count, or None without data."""
        assert self._stable is not None and self._panic is not None and self._delay is not None
        stable, panic = self._stable.average(), self._panic.average()
        if stable is None or panic is None:
            return None
        max_up = max(1.0, math.ceil(KPA_MAX_SCALE_UP_RATE * ready))
        max_down = math.floor(ready / KPA_MAX_SCALE_DOWN_RATE)
        dspc = math.ceil(stable / self.target)
        dppc = math.ceil(panic / self.target)
        desired_stable = int(min(max(dspc, max_down), max_up))
        desired_panic = int(min(max(dppc, max_down), max_up))
        over = dppc / max(1, ready) >= self.panic_threshold
        if over:
            self.panic_since = now  # begin panicking, or extend the panic
        elif self.panic_since is not None and self.panic_since + self.stable_window_s < now:
            # Calm for a whole stable window since the last time over the threshold.
            self.panic_since, self.max_panic_pods = None, 0
        desired = desired_stable
        if self.in_panic:
            desired = max(desired, desired_panic)
            self.max_panic_pods = max(self.max_panic_pods, desired)  # never down in panic
            desired = self.max_panic_pods
        self._delay.record(now, float(desired))
        delayed = self._delay.maximum()
        return int(delayed) if delayed is not None else desired

    def control(self, fleet: FleetView, now: float) -> None:
        ready = fleet.ready_replicas
        if not self._started:
            self._started = True
            self.max_panic_pods = ready
            if ready > 1:  # Knative starts in panic so a restart does not scale down blindly
                self.panic_since = now
        if ready > 0:
            self.record(now, fleet.observation(self.period_s).kv_cache_usage_now)
        current = fleet.desired
        if current > self.max_replicas:
            target: int | None = self.max_replicas
        elif current < self.min_replicas:
            target = self.min_replicas
        else:
            desired = self.scale(ready, now)
            target = (
                None if desired is None else max(self.min_replicas, min(self.max_replicas, desired))
            )
        if target is not None and target != current:
            fleet.scale(target)
