"""Thresholds of the policy, kept as code with the reason for each value.

Called by `policy.decide`; the simulator's benchmarks may pass other values to study them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tunables:
    # Fewer requests than this in a window give no meaningful p95: hold.
    min_requests: int = 20
    # An observation older than this (seconds) is stale: hold.
    max_observation_age_s: float = 90.0
    # "Well under" an objective: below this fraction of it (scale-in, knob headroom).
    headroom: float = 0.8
    # Replicas are sized for this fraction of the TTFT objective, so model error does not
    # land the fleet exactly on the edge.
    sizing_margin: float = 0.9
    # Scale-up rate limit per action, as HPA's default policy: max(+100%, +4 pods).
    scale_up_max_factor: float = 2.0
    scale_up_min_pods: int = 4
    # Scale-down removes at most this fraction of replicas per action (at least one).
    scale_down_max_fraction: float = 0.5
    # With fewer waiting requests per ready replica than this there is no queue to speak of.
    no_queue_waiting_per_pod: float = 0.5
    # The batch limit binds when running requests per replica reach this fraction of it.
    batch_saturation: float = 0.9
    # Knob steps when no fitted model is available yet.
    batch_step_down: float = 0.75
    batch_step_up: float = 1.5
    chunk_step_up: float = 2.0
    # A fitted latency-vs-batch line is trusted only with this R² or better.
    min_fit_r_squared: float = 0.5
    # Points kept for the latency-vs-batch fit.
    batch_points_kept: int = 32
    # Cells per prefill bucket in the service-time distribution of the queueing model.
    service_cells_per_bucket: int = 8
    # After pods went unschedulable, scale-ups stop at the count the GPUs held, this long.
    gpu_limit_memory_s: float = 300.0
    # Mean queue times under this many engine steps (mean ITL) are the wait for the running
    # step to end, not for a slot: no calibration of the service rate on them.
    step_alignment_steps: float = 2.0
    # Someone else overwrote spec.replicas: no replica write for this long, doubled each time
    # the fight resumes within twice the last period, up to the maximum (not fought).
    replicas_backoff_s: float = 300.0
    replicas_backoff_max_s: float = 3600.0
