"""The autoscalers slascaler is measured against, each as its published algorithm.

- `HPAController`: Kubernetes HPA v2 (pkg/controller/podautoscaler): desired =
  ceil(current × metric / target), no change while |metric/target − 1| ≤ 0.1 (tolerance);
  default behaviour: scale-up at most max(+4 pods, +100%) per 15 s period, scale-down at most
  100% per 15 s after a 300 s stabilization window that keeps the highest recommendation.
  `metric="queue"`: `vllm:num_requests_waiting` averaged per pod, target 5 (vLLM
  production-stack's KEDA recipe and GKE's "scale on queue size" guidance).
  `metric="ttft"`: KEDA's Prometheus scaler on p95 TTFT (metricType Value), target = the SLA.
- `StaticController`: a fixed replica count (peak provisioning).
- Oracle: `sim.oracle` (needs the whole trace in advance).

Each controller is called every `period_s` by `sim.run` with the fleet; it may scale it.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from slascaler_sim.fleet import Fleet

HPA_TOLERANCE = 0.1
HPA_PERIOD_S = 15.0
HPA_SCALE_DOWN_WINDOW_S = 300.0
HPA_SCALE_UP_PODS = 4
HPA_SCALE_UP_PERCENT = 100.0
QUEUE_TARGET_PER_POD = 5.0


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
    _recommendations: deque[tuple[float, int]] = field(default_factory=deque)

    def __post_init__(self) -> None:
        if not self.name:
            self.name = "HPA on queue" if self.metric == "queue" else "KEDA on TTFT"

    def _metric(self, fleet: Fleet) -> float:
        observation = fleet.observation(self.period_s if self.metric == "queue" else self.window_s)
        if self.metric == "queue":
            return observation.waiting / max(1, fleet.ready_replicas)
        if observation.ttft is None or observation.ttft.total == 0:
            return math.nan
        return observation.ttft.quantile(0.95)

    def desired(self, current: int, value: float) -> int:
        """The replica calculator: ceil(current × value / target) outside the tolerance."""
        if not math.isfinite(value):
            return current
        ratio = value / self.target
        if abs(ratio - 1.0) <= HPA_TOLERANCE:
            return current
        return max(0, math.ceil(current * ratio)) if current > 0 else max(1, math.ceil(ratio))

    def control(self, fleet: Fleet, now: float) -> None:
        current = fleet.desired
        proposal = self.desired(current, self._metric(fleet))
        proposal = max(self.min_replicas, min(self.max_replicas, proposal))
        self._recommendations.append((now, proposal))
        while self._recommendations and self._recommendations[0][0] < now - HPA_SCALE_DOWN_WINDOW_S:
            self._recommendations.popleft()
        if proposal > current:
            limit = max(
                current + HPA_SCALE_UP_PODS, math.ceil(current * (1 + HPA_SCALE_UP_PERCENT / 100))
            )
            target = min(proposal, limit)
        else:
            # Scale-down stabilization: the highest recommendation of the last 300 s.
            target = min(current, max(r for _, r in self._recommendations))
        if target != current:
            fleet.scale(target)


@dataclass
class StaticController:
    replicas: int
    period_s: float = HPA_PERIOD_S
    name: str = "Static (peak)"

    def control(self, fleet: Fleet, now: float) -> None:
        if fleet.desired != self.replicas:
            fleet.scale(self.replicas)
