"""NVIDIA Dynamo's planner in its load-based (SLA) mode, for an aggregated deployment.

Follows ai-dynamo/dynamo `components/src/dynamo/planner/` (read at these file versions):
`core/load_scaling.py` (0c6da1ec762c: `_advance_load_agg`, `_agg_prefill_scaling`,
`_agg_decode_scaling`, `_scale_decision`), `core/perf_model/agg.py` (518a70279da9:
`AggRegressionModel`), `core/perf_model/base.py` (439d645817d6: `_BaseRegressionModel`,
`_MovingAverage`), `core/state_machine.py` (0272cbdd7e81: tick order, `_scaling_in_progress`)
and `config/defaults.py` (1ca601557ebf: `SLAPlannerDefaults`).

What it reads: every `load_adjustment_interval` (5 s) each worker's latest forward-pass record
(`ForwardPassMetrics`: wall time, scheduled prefill tokens and decode KV tokens, queued
prefill tokens), published by Dynamo's workers on its event plane (no Prometheus metric of
vLLM carries it; the simulator fills `Observation.forward_passes` from each ready engine's
last iteration and its waiting queue), the worker's `max_num_batched_tokens` and
`max_kv_tokens` (worker registration), and the expected (DGD spec) and ready worker counts.

The model: a linear regression wall_time ≈ a + b·prefill_tokens + c·decode_kv_tokens over
at most 64 retained records (retired from the fullest of a 4×4 grid of buckets over the two
inputs), fitted once there are 5 and rejected when a coefficient is negative; moving
averages (64 records, leading zeros skipped) of the prefill tokens per prefilling request
("avg ISL"), the KV tokens per decoding request and the prefill tokens per iteration.
- TTFT estimate of a worker: (queued prefill tokens + avg ISL) × (1 − prefix hit rate) run
  through chunks of the token budget, each chunk's predicted wall time at the worker's
  current decode KV, summed (the "queued prefill tokens through chunks" predictor);
- ITL estimate: the predicted wall time at the average prefill tokens and the worker's
  scheduled + queued decode KV + one average decode length.
Decision per tick (±1 replica): up by one when every worker's TTFT estimate exceeds the TTFT
SLA (or every ITL estimate the ITL SLA); down by one when, for every worker, its queue and
KV scaled by N/(N−1) keep the queue-induced TTFT within 80% (`load_scaling_down_sensitivity`)
of the SLA minus its own compute, the combined KV under the cache size, and the ITL within
80% of its SLA; no decision while a scaling is in progress (expected ≠ ready workers) or
the regression lacks data. Aggregated mode combines the two: a prefill or decode scale-up
wins; a scale-down needs both (or decode alone when the prefill side has no estimate).

Parameters: the planner's defaults (interval 5 s, 64 records, 16 buckets, sensitivity 80,
5 observations, min_endpoint 1); TTFT and ITL targets are the scenario's objectives (the
planner compares its estimates, not a percentile, against them); `max_gpu_budget` (default
8) is the scenario's replica maximum, one GPU per engine. The prefix-cache hit rate comes
from Dynamo's KV router; the simulated router has none, so it is 0. Throughput-based
scaling (profiling data, load predictors) is off: load-based scaling is the mode that needs
no profiling and that aggregated deployments support.

Called every `period_s` by the run loop with the fleet.
"""

from __future__ import annotations

import math
from collections import defaultdict, deque
from dataclasses import dataclass, field

import numpy as np

from slascaler.model.observation import ForwardPass
from slascaler_sim.baselines.interface import FleetView

DYNAMO_INTERVAL_S = 5.0
DYNAMO_MAX_SAMPLES = 64
DYNAMO_BUCKETS = 16
DYNAMO_MIN_OBSERVATIONS = 5
DYNAMO_SENSITIVITY = 0.80
DYNAMO_MIN_ENDPOINT = 1


class MovingAverage:
    """Fixed-window average that ignores zeros until the first non-zero value."""

    def __init__(self, size: int) -> None:
        self._values: deque[float] = deque(maxlen=size)
        self._seen_nonzero = False

    def add(self, value: float) -> None:
        if value == 0.0 and not self._seen_nonzero:
            return
        self._seen_nonzero = self._seen_nonzero or value != 0.0
        self._values.append(value)

    @property
    def value(self) -> float:
        return sum(self._values) / len(self._values) if self._values else 0.0


@dataclass
class AggRegression:
    """wall_time ≈ a + b·prefill_tokens + c·decode_kv_tokens, online, bucket-retired."""

    max_samples: int = DYNAMO_MAX_SAMPLES
    min_observations: int = DYNAMO_MIN_OBSERVATIONS
    bucket_count: int = DYNAMO_BUCKETS
    _buckets: dict[tuple[int, int], deque[tuple[float, float, float]]] = field(
        default_factory=lambda: defaultdict(deque)
    )
    _total: int = 0
    _lo: list[float] = field(default_factory=lambda: [math.inf, math.inf])
    _hi: list[float] = field(default_factory=lambda: [-math.inf, -math.inf])
    _coef: tuple[float, float, float] | None = None  # intercept, prefill, decode KV
    _fitted: bool = False
    avg_isl: MovingAverage = field(default_factory=lambda: MovingAverage(DYNAMO_MAX_SAMPLES))
    avg_decode_length: MovingAverage = field(
        default_factory=lambda: MovingAverage(DYNAMO_MAX_SAMPLES)
    )
    avg_prefill_tokens: MovingAverage = field(
        default_factory=lambda: MovingAverage(DYNAMO_MAX_SAMPLES)
    )

    @property
    def observations(self) -> int:
        return self._total

    def has_sufficient_data(self) -> bool:
        return self._total >= self.min_observations

    def _key(self, x: tuple[float, float]) -> tuple[int, int]:
        per_axis = math.isqrt(self.bucket_count)
        key: list[int] = []
        for i, v in enumerate(x):
            lo, hi = self._lo[i], self._hi[i]
            index = 0 if hi <= lo else int((v - lo) / (hi - lo) * per_axis)
            key.append(max(0, min(index, per_axis - 1)))
        return key[0], key[1]

    def add(self, record: ForwardPass) -> None:
        if record.scheduled_prefill_requests > 0:
            self.avg_isl.add(record.scheduled_prefill_tokens / record.scheduled_prefill_requests)
        if record.scheduled_decode_requests > 0:
            self.avg_decode_length.add(
                record.scheduled_decode_kv_tokens / record.scheduled_decode_requests
            )
        self.avg_prefill_tokens.add(float(record.scheduled_prefill_tokens))
        if record.wall_time_s == 0.0:
            return
        x = (float(record.scheduled_prefill_tokens), float(record.scheduled_decode_kv_tokens))
        changed = False
        for i, v in enumerate(x):
            if v < self._lo[i]:
                self._lo[i], changed = v, True
            if v > self._hi[i]:
                self._hi[i], changed = v, True
        if changed and self._total > 0:
            everything = [s for bucket in self._buckets.values() for s in bucket]
            self._buckets.clear()
            for sample in everything:
                self._buckets[self._key((sample[0], sample[1]))].append(sample)
        self._buckets[self._key(x)].append((x[0], x[1], record.wall_time_s))
        self._total += 1
        if self._total > self.max_samples:
            fattest = max(self._buckets, key=lambda k: len(self._buckets[k]))
            self._buckets[fattest].popleft()
            self._total -= 1
            if not self._buckets[fattest]:
                del self._buckets[fattest]
        self._fitted = False

    def _fit(self) -> bool:
        samples = np.asarray([s for bucket in self._buckets.values() for s in bucket])
        if len(samples) < self.min_observations:
            return False
        x, y = samples[:, :2], samples[:, 2]
        # Ordinary least squares with an intercept (scikit-learn's LinearRegression).
        x_mean, y_mean = x.mean(axis=0), y.mean()
        coef = np.linalg.lstsq(x - x_mean, y - y_mean, rcond=None)[0]
        if np.any(coef < 0):
            return False  # "more load, less time": the planner rejects the fit and waits
        self._coef = (float(y_mean - x_mean @ coef), float(coef[0]), float(coef[1]))
        self._fitted = True
        return True

    def ready(self) -> bool:
        return self._fitted or self._fit()

    def predict(self, prefill_tokens: float, decode_kv_tokens: float) -> float:
        assert self._coef is not None
        a, b, c = self._coef
        return max(1e-6, a + b * prefill_tokens + c * decode_kv_tokens)

    def estimate_ttft(
        self, queued_prefill_tokens: float, max_num_batched_tokens: int, decode_kv: float
    ) -> float | None:
        """Seconds: the queue plus one average prompt, chunk by chunk, at this decode KV."""
        if not self.ready() or max_num_batched_tokens <= 0:
            return None
        total = queued_prefill_tokens + self.avg_isl.value  # × (1 − prefix hit rate 0)
        if total <= 0:
            return 0.0
        full, rest = divmod(total, max_num_batched_tokens)
        time = full * self.predict(max_num_batched_tokens, decode_kv)
        return time + (self.predict(rest, decode_kv) if rest > 0 else 0.0)

    def estimate_itl(self, scheduled_decode_kv: float, queued_decode_kv: float) -> float | None:
        if not self.ready():
            return None
        total_kv = scheduled_decode_kv + queued_decode_kv + self.avg_decode_length.value
        return self.predict(self.avg_prefill_tokens.value, total_kv)


@dataclass
class DynamoLoadPlanner:
    """Dynamo's planner, `mode: agg`, `optimization_target: sla`, load-based scaling only."""

    ttft_ms: float
    itl_ms: float
    max_gpu_budget: int
    max_kv_tokens: int
    min_endpoint: int = DYNAMO_MIN_ENDPOINT
    sensitivity: float = DYNAMO_SENSITIVITY
    period_s: float = DYNAMO_INTERVAL_S
    name: str = "Dynamo planner"
    regression: AggRegression = field(default_factory=AggRegression)
    reason: str = ""

    def _decision(
        self, estimates_ms: list[float], sla_ms: float, workers: int, down: bool
    ) -> int | None:
        """`_scale_decision`: +1 when every worker is over the SLA, −1 when allowed."""
        if not estimates_ms:
            return None
        if all(t > sla_ms for t in estimates_ms):
            return workers + 1
        if workers > 1 and down:
            return max(workers - 1, self.min_endpoint)
        return None

    def prefill_side(
        self, records: tuple[ForwardPass, ...], workers: int, budget: int
    ) -> int | None:
        """`_agg_prefill_scaling`: TTFT estimates and the consolidation-aware scale-down."""
        model = self.regression
        consolidation = workers / (workers - 1) if workers > 1 else 1.0
        estimates: list[float] = []
        down, refused = workers > 1, False
        for record in records:
            queued, decode_kv = record.queued_prefill_tokens, record.scheduled_decode_kv_tokens
            estimate = model.estimate_ttft(queued, budget, decode_kv)
            if estimate is not None:
                estimates.append(estimate * 1000)
            if down:
                post_kv = int(decode_kv * consolidation)
                own = model.estimate_ttft(0, budget, post_kv)
                post = model.estimate_ttft(int(queued * consolidation), budget, post_kv)
                if own is None or post is None:
                    down = False
                else:
                    queue_budget_ms = (self.ttft_ms - own * 1000) * self.sensitivity
                    if queue_budget_ms <= 0 or post * 1000 - own * 1000 >= queue_budget_ms:
                        down, refused = False, True
        decision = self._decision(estimates, self.ttft_ms, workers, down)
        return workers if decision is None and refused else decision

    def decode_side(self, records: tuple[ForwardPass, ...], workers: int) -> int | None:
        """`_agg_decode_scaling`: ITL estimates, cache feasibility and ITL after a removal."""
        model = self.regression
        consolidation = workers / (workers - 1) if workers > 1 else 1.0
        estimates: list[float] = []
        down, refused = workers > 1, False
        for record in records:
            scheduled, queued_kv = record.scheduled_decode_kv_tokens, record.queued_decode_kv_tokens
            estimate = model.estimate_itl(scheduled, queued_kv)
            if estimate is not None:
                estimates.append(estimate * 1000)
            if down:
                combined = int(
                    (scheduled + queued_kv + record.queued_prefill_tokens) * consolidation
                )
                if combined >= self.max_kv_tokens:
                    down, refused = False, True
                    continue
                post = model.estimate_itl(combined, 0)
                if post is None:
                    down = False
                elif post * 1000 >= self.itl_ms * self.sensitivity:
                    down, refused = False, True
        decision = self._decision(estimates, self.itl_ms, workers, down)
        return workers if decision is None and refused else decision

    def decide(self, records: tuple[ForwardPass, ...], workers: int, budget: int) -> int:
        """`_advance_load_agg` after its guards: the combined desired worker count."""
        p = self.prefill_side(records, workers, budget)
        d = self.decode_side(records, workers)
        desired = workers  # no change, unless:
        if p is not None and p > workers:
            desired = p  # the prefill side wants one more
        elif d is not None and d > workers:
            desired = d  # the decode side wants one more
        elif d is not None and d < workers and (p is None or p < workers):
            # Down only when both sides agree (decode alone when prefill has no estimate).
            desired = d if p is None else max(p, d)
        desired = max(desired, self.min_endpoint)
        if desired > self.max_gpu_budget:  # `_budget_clamp`, one GPU per engine
            desired = max(self.min_endpoint, self.max_gpu_budget)
        return desired

    def control(self, fleet: FleetView, now: float) -> None:
        records = fleet.observation(self.period_s).forward_passes
        for record in records:  # the state machine observes before it decides
            self.regression.add(record)
        workers = fleet.ready_replicas
        if fleet.desired != workers:
            self.reason = "scaling_in_progress"
            return
        if not records or len(records) != workers:
            self.reason = "no_fpm_data" if not records else "worker_count_mismatch"
            return
        if not self.regression.has_sufficient_data():
            self.reason = "insufficient_data"
            return
        desired = self.decide(records, workers, fleet.settings.max_num_batched_tokens)
        self.reason = (
            "scale_up" if desired > workers else "scale_down" if desired < workers else "no_change"
        )
        if desired != fleet.desired:
            fleet.scale(desired)
