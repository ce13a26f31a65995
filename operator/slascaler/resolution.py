"""Can the engine's histogram buckets tell whether an objective is met? The condition that says.

`histogram_quantile` interpolates linearly inside the bucket a quantile falls in. Whether
"p95 ≤ 300 ms" holds is exact only when 300 ms is a bucket bound; inside a bucket the answer
is a guess whose error is up to the bucket's width. Two cases make the guess worthless:

- the objective is below the lowest finite bucket (SGLang's TTFT buckets start at 0.1 s: an
  objective of 50 ms falls inside 0–100 ms, so every p95 under 100 ms reads the same);
- the objective falls inside a bucket wider than half of it (vLLM's TTFT buckets jump from
  1 s to 2.5 s: a 2 s objective cannot be told from 1.2 s or 2.4 s).

`objective_resolvable` returns the `ObjectiveResolvable` condition: True when every
objective's bucket resolves it, else False naming the objective, the bucket around it and the
engine flag that adds a bucket there (with the bounds to write). Informational: the policy
still decides on the interpolated quantile, as Prometheus would.

Pure (no I/O). Called by `reconcile`.
"""

from __future__ import annotations

import math

from slascaler.engine_metrics import ENGINE_METRICS
from slascaler.model.histogram import Histogram
from slascaler.model.observation import Observation
from slascaler.policy.decision import Condition, Status
from slascaler.spec import Objective, SLASpec

CONDITION = "ObjectiveResolvable"
WIDE_BUCKET = 0.5  # a bucket wider than this share of the objective cannot resolve it
_ON_BOUND = 1e-9  # relative: an objective this close to a bound is that bound


def _seconds(value_ms: float) -> str:
    return f"{value_ms / 1000:g}"


def unresolved(
    histogram: Histogram, objective: Objective, what: str, flag: str | None
) -> tuple[str, str] | None:
    """(reason, message) when the histogram's buckets cannot resolve the objective."""
    threshold = objective.threshold_ms
    finite = [b for b in histogram.upper_bounds if math.isfinite(b)]
    if not finite:
        return None
    if any(abs(b - threshold) <= _ON_BOUND * threshold for b in finite):
        return None
    lower = max((b for b in finite if b < threshold), default=0.0)
    upper = min((b for b in finite if b > threshold), default=math.inf)
    bounds = sorted({*finite, threshold})
    suggestion = (
        f"add a bucket at {_seconds(threshold)} s: {configure(flag, bounds)}"
        if flag
        else "this engine's buckets cannot be configured"
    )
    label = f"p{objective.percentile:g} {what} objective of {threshold:g} ms"
    if threshold < finite[0] and finite[0] > 0:
        message = (
            f"the {label} is below the lowest bucket (le {_seconds(finite[0])} s): every "
            f"{what} under {finite[0]:g} ms reads the same, so whether the objective is met "
            f"cannot be told; {suggestion}"
        )
        return "BelowLowestBucket", message
    if math.isinf(upper) or upper - lower > WIDE_BUCKET * threshold:
        top = "+Inf" if math.isinf(upper) else f"{upper:g}"
        message = (
            f"the {label} falls inside the bucket {lower:g}–{top} ms: the quantile is "
            f"interpolated across it, so whether the objective is met cannot be resolved; "
            f"{suggestion}"
        )
        return "WideBucket", message
    return None


def configure(flag: str, bounds_ms: list[float]) -> str:
    """The engine flag with these bounds (given in ms) written in seconds."""
    values = [_seconds(b) for b in bounds_ms]
    return flag.replace("<json list>", "[" + ", ".join(values) + "]").replace(
        "<values>", " ".join(values)
    )


def objective_resolvable(spec: SLASpec, observation: Observation) -> Condition:
    """The ObjectiveResolvable condition for this window's TTFT and ITL histograms."""
    metrics = ENGINE_METRICS[spec.engine]
    checks: list[tuple[Histogram | None, Objective, str, str | None]] = []
    ttft_family, itl_family = metrics.histogram("ttft"), metrics.histogram("itl")
    ttft_flag = ttft_family.bucket_flag if ttft_family else None
    checks.append((observation.ttft, spec.ttft, "TTFT", ttft_flag))
    if spec.itl is not None:
        itl_flag = itl_family.bucket_flag if itl_family else None
        checks.append((observation.itl, spec.itl, "ITL", itl_flag))
    found = [
        problem
        for histogram, objective, what, flag in checks
        if histogram is not None and (problem := unresolved(histogram, objective, what, flag))
    ]
    if found:
        return Condition(CONDITION, Status.FALSE, found[0][0], "; ".join(m for _, m in found))
    if any(histogram is None for histogram, *_ in checks):
        return Condition(CONDITION, Status.UNKNOWN, "NoHistogram", "no histogram to judge by")
    return Condition(CONDITION, Status.TRUE, "BucketsResolve", "")
