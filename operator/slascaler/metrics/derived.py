"""What an engine does not export per request, approximated from what it does.

SGLang before 0.5.10 has no per-request prefill histogram (prefill ≈ TTFT shifted back by the
mean queue time); TGI has neither a TTFT nor a per-request prefill histogram (both built
from the queue-time histogram and the prefill batches' durations). Each approximation comes
with the sentence the status shows in `derived`.

Pure (no I/O). Called by `metrics.series`.
"""

from __future__ import annotations

from slascaler.model.histogram import Histogram


def sglang_prefill(
    ttft: Histogram | None, queue: Histogram | None
) -> tuple[Histogram | None, list[str]]:
    """Prefill for SGLang releases without a per-request prefill histogram (before 0.5.10):
    TTFT shifted back by the mean queue time, keeping TTFT's shape."""
    if ttft is None or queue is None:
        return None, []
    shift = queue.mean if queue.count > 0 else 0.0
    return ttft.shifted(-shift), [
        f"prefill ≈ TTFT − mean queue time ({shift:.0f} ms): these SGLang pods export no "
        'sglang:per_stage_req_latency_seconds{stage="prefill_forward"} (SGLang ≥ 0.5.10)'
    ]


def tgi_prefill_and_ttft(
    queue: Histogram | None, batches: Histogram | None
) -> tuple[Histogram | None, Histogram | None, list[str]]:
    """TGI's prefill and TTFT, approximated: it exports neither per request.

    `tgi_batch_forward_duration{method="prefill"}` has one observation per prefill batch (the
    running batch it joins included), so its counts are batches, not requests: only its
    shape is used, with the requests' count (the queue histogram's) — as if every request
    were in a batch of the average length. TTFT ≈ queue time + that mean.
    """
    if queue is None or batches is None:
        return None, None, []
    batch_count = batches.total
    share = queue.total / batch_count if batch_count > 0 else 0.0
    prefill = Histogram(
        upper_bounds=batches.upper_bounds,
        cumulative_counts=tuple(c * share for c in batches.cumulative_counts),
        sum=batches.sum * share,
        count=queue.total if batch_count > 0 else 0.0,
    )
    shift = batches.mean if batches.count > 0 else 0.0
    return prefill, queue.shifted(shift), [
        f"prefill ≈ the durations of TGI's prefill batches (mean {shift:.0f} ms; "
        'tgi_batch_forward_duration{method="prefill"} counts batches, not requests, and includes '
        "the running batch): TGI exports no per-request prefill time",
        f"TTFT ≈ queue time + mean prefill batch ({shift:.0f} ms): TGI exports no TTFT histogram",
    ]
