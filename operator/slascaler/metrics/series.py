"""Prometheus's per-pod answers, read into one target's histograms and gauges — or refused.

`family_query` and `gauges_query` (`metrics.promql`) answer per (namespace, pod, scrape
target) with a `slascaler_part` label. Here those answers are indexed (`FamilyAnswer`,
`GaugeAnswer`) and, for one target's pods, summed into what an `Observation` holds:

- a pod scraped under two addresses (two `instance`/`job` pairs: two PodMonitors, a
  ServiceMonitor beside a PodMonitor) is counted once, from the scrape target that saw the
  most (and the status notes it);
- each pod is read under the newest series name it exports (`engine_metrics`: an older
  release's name is read where the newer one is absent);
- a pod's histogram that is not one is refused, naming the pod and the fault: an `le` that
  is not a number, no `+Inf` bucket, a negative count or `_sum`, counts that decrease with
  `le`, counts beyond any engine's (1e12 in a window), a `_count` that is not the `+Inf`
  bucket's, buckets without `_sum`/`_count`. The family is then missing for the target, so
  the policy holds and says why, as it does for a series that is not there at all;
- pods that export different buckets (one with `--custom-histogram-buckets`, a rollout
  between releases) are summed over the bounds they share, said in a note;
- NaN and ±Inf are kept as they are, so the Observation says the histogram is not finite.

Summing in the client, pod by pod, gives what `sum by (le)` over the same pods gives in
Prometheus (the e2e suite checks a batch against single-target queries to 1e-9).

Pure (no I/O). Called by `metrics.prometheus`.
"""

from __future__ import annotations

import functools
import itertools
import math
import re
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from slascaler.engine_metrics import EngineMetrics, GaugeFamily, HistogramFamily, Series
from slascaler.metrics.promql import PART_LABEL
from slascaler.model.histogram import Histogram
from slascaler.model.observation import Observation
from slascaler.spec import Engine

MAX_PLAUSIBLE_COUNT = 1e12  # observations in one window: far beyond any engine
_DECREASE_TOLERANCE = 1e-6  # relative: increase() of counters scraped together stays monotone
_COUNT_TOLERANCE = 0.01  # relative, plus one observation: `_count` vs the +Inf bucket

Scrape = tuple[str, str]  # (instance, job)


@dataclass(frozen=True, slots=True)
class Sample:
    """One element of an instant vector: its labels and value (NaN and ±Inf kept)."""

    labels: Mapping[str, str]
    value: float


class Malformed(ValueError):
    """An answer that the queries sent could not have produced (a broken proxy, a bug)."""


def _part(sample: Sample, pieces: int) -> list[str]:
    part = sample.labels.get(PART_LABEL)
    split = part.split(":") if part else []
    if len(split) != pieces:
        raise Malformed(f"a sample without a valid {PART_LABEL} label: {dict(sample.labels)}")
    return split


@dataclass
class _Raw:
    """One pod's series of one name, as one scrape target exported them."""

    buckets: dict[str, float] = field(default_factory=dict)  # le as written → count
    sum: float | None = None
    count: float | None = None


class FamilyAnswer:
    """One histogram family's answer: namespace → pod → scrape target → series index."""

    def __init__(self, samples: Iterable[Sample], namespace_label: str, pod_label: str) -> None:
        self.pods: dict[str, dict[str, dict[Scrape, dict[int, _Raw]]]] = {}
        for sample in samples:
            index, kind = _part(sample, 2)
            labels = sample.labels
            scrape = (labels.get("instance", ""), labels.get("job", ""))
            namespace = labels.get(namespace_label, "")
            pod = labels.get(pod_label, "")
            try:
                variant = int(index)
            except ValueError:
                raise Malformed(f"a sample with {PART_LABEL}={labels[PART_LABEL]!r}") from None
            raw = (
                self.pods.setdefault(namespace, {})
                .setdefault(pod, {})
                .setdefault(scrape, {})
                .setdefault(variant, _Raw())
            )
            if kind == "bucket":
                le = labels.get("le")
                if le is None:
                    raise Malformed(f"a bucket sample without an le label: {dict(labels)}")
                raw.buckets[le] = raw.buckets.get(le, 0.0) + sample.value
            elif kind == "sum":
                raw.sum = sample.value
            elif kind == "count":
                raw.count = sample.value
            else:
                raise Malformed(f"a sample with {PART_LABEL}={labels[PART_LABEL]!r}")

    def pod_names(self, namespace: str) -> Collection[str]:
        return self.pods.get(namespace, {}).keys()


class GaugeAnswer:
    """The gauges' answer: namespace → pod → scrape target → part → value."""

    def __init__(self, samples: Iterable[Sample], namespace_label: str, pod_label: str) -> None:
        self.pods: dict[str, dict[str, dict[Scrape, dict[str, float]]]] = {}
        for sample in samples:
            _part(sample, 3)  # checks its form
            labels = sample.labels
            scrape = (labels.get("instance", ""), labels.get("job", ""))
            values = (
                self.pods.setdefault(labels.get(namespace_label, ""), {})
                .setdefault(labels.get(pod_label, ""), {})
                .setdefault(scrape, {})
            )
            values[labels[PART_LABEL]] = sample.value

    def pod_names(self, namespace: str) -> Collection[str]:
        return self.pods.get(namespace, {}).keys()


@dataclass(frozen=True)
class FamilyReading:
    """One histogram family summed over a target's pods."""

    histogram: Histogram | None
    pods: frozenset[str] = frozenset()  # the target's pods that export the family
    problems: tuple[str, ...] = ()  # pods whose series are not a histogram
    notes: tuple[str, ...] = ()
    series: Series | None = None  # the name read (of the most pods)


@dataclass(frozen=True)
class GaugeReading:
    """The waiting/running gauges summed over a target's pods."""

    waiting: float = math.nan  # window averages
    running: float = math.nan
    waiting_now: float = math.nan
    reporting_pods: float = 0.0  # pods serving over the window, on average
    newest: float | None = None  # the newest sample's time (epoch seconds)
    pods: frozenset[str] = frozenset()
    problems: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    waiting_series: Series | None = None


def _one_scrape(
    pod: str, scrapes: Mapping[Scrape, object], weight: Mapping[Scrape, float]
) -> tuple[Scrape, str | None]:
    """The scrape target a pod is read from, and a note when there are several."""
    chosen = max(sorted(scrapes), key=lambda s: weight.get(s, 0.0))
    if len(scrapes) == 1:
        return chosen, None
    addresses = ", ".join(f"{i or '?'} (job {j or '?'})" for i, j in sorted(scrapes))
    return chosen, (
        f"pod {pod} is scraped under {len(scrapes)} addresses ({addresses}): counted once"
    )


def _check(
    series: Series, pod: str, raw: _Raw, scale: float
) -> tuple[Histogram | None, str | None]:
    """One pod's histogram, or why it is not one."""
    where = f"{series} of pod {pod}"
    if not raw.buckets:
        return None, f"{where} has `_sum`/`_count` but no buckets: not a histogram"
    points: list[tuple[float, float]] = []
    for le, value in raw.buckets.items():
        try:
            bound = float(le)
        except ValueError:
            return None, f"{where} has a bucket le={le!r}, which is not a number: not a histogram"
        if math.isnan(bound):
            return None, f"{where} has a bucket le={le!r}: not a histogram"
        points.append((bound, value))
    points.sort()
    merged: list[list[float]] = []
    for bound, value in points:  # "1" and "1.0" are one bucket, as in histogram_quantile
        if merged and merged[-1][0] == bound:
            merged[-1][1] += value
        else:
            merged.append([bound, value])
    bounds = tuple(b for b, _ in merged)
    counts = tuple(c for _, c in merged)
    if not math.isinf(bounds[-1]) or bounds[-1] < 0:
        return None, f'{where} has no le="+Inf" bucket: not a histogram'
    total = raw.sum if raw.sum is not None else math.nan
    count = raw.count if raw.count is not None else math.nan
    if raw.sum is None or raw.count is None:
        parts = (("_sum", raw.sum), ("_count", raw.count))
        missing = " and ".join(name for name, value in parts if value is None)
        return None, f"{where} has buckets but no {missing} series: not a histogram"
    histogram = Histogram(
        upper_bounds=tuple(b * scale if math.isfinite(b) else b for b in bounds),
        cumulative_counts=counts,
        sum=total * scale,
        count=count,
    )
    values = (*counts, total, count)
    if not all(math.isfinite(v) for v in values):
        return histogram, None  # kept: the Observation reports it as not finite
    if min(counts) < 0 or count < 0:
        return None, f"{where} has negative bucket counts ({min(counts):g}): not a histogram"
    if total < 0:
        return None, f"{where} has a negative _sum ({total:g}): not a histogram"
    if max(counts[-1], count) > MAX_PLAUSIBLE_COUNT:
        return None, (
            f"{where} counts {max(counts[-1], count):.3g} observations in one window, more "
            "than any engine serves: not a histogram"
        )
    for (low_bound, low), (high_bound, high) in itertools.pairwise(merged):
        if high < low - _DECREASE_TOLERANCE * max(1.0, abs(low)):
            return None, (
                f"{where} has counts that decrease with le (le={low_bound:g}: {low:g}, "
                f"le={high_bound:g}: {high:g}): not a histogram"
            )
    inf = counts[-1]
    if abs(count - inf) > _COUNT_TOLERANCE * max(count, inf) + 1.0:
        return None, (
            f'{where} has _count {count:g} but {inf:g} in its le="+Inf" bucket: not a histogram'
        )
    return histogram, None


def _sum_pods(histograms: list[Histogram]) -> tuple[Histogram, str | None]:
    """Pods' histograms summed (as `sum by (le)`), over the bounds every pod has."""
    shared = set(histograms[0].upper_bounds)
    for histogram in histograms[1:]:
        shared &= set(histogram.upper_bounds)
    bounds = tuple(sorted(shared))
    note = None
    if any(h.upper_bounds != bounds for h in histograms):
        note = f"pods export different buckets: summed over the {len(bounds)} bounds they share"
    counts = [0.0] * len(bounds)
    total = observations = 0.0
    for histogram in histograms:
        index = dict(zip(histogram.upper_bounds, histogram.cumulative_counts, strict=True))
        for i, bound in enumerate(bounds):
            counts[i] += index[bound]
        total += histogram.sum
        observations += histogram.count
    return Histogram(bounds, tuple(counts), total, observations), note


def read_family(
    answer: FamilyAnswer, family: HistogramFamily, namespace: str, pods: Collection[str]
) -> FamilyReading:
    """The family's increase summed over `pods` of `namespace` (None: no pod exports it)."""
    found = answer.pods.get(namespace, {})
    histograms: list[Histogram] = []
    problems: list[str] = []
    notes: list[str] = []
    exporting: set[str] = set()
    used: dict[int, int] = defaultdict(int)
    for pod in sorted(p for p in pods if p in found):
        scrapes = found[pod]
        weight = {
            scrape: max((r.count or 0.0) for r in variants.values())
            for scrape, variants in scrapes.items()
        }
        scrape, note = _one_scrape(pod, scrapes, weight)
        if note:
            notes.append(note)
        variants = scrapes[scrape]
        index = min(variants)
        exporting.add(pod)
        used[index] += 1
        histogram, problem = _check(family.series[index], pod, variants[index], family.scale)
        if problem is not None:
            problems.append(problem)
        elif histogram is not None:
            histograms.append(histogram)
    if not exporting:
        return FamilyReading(None)
    series = family.series[max(used, key=lambda i: (used[i], -i))]
    for index in sorted(used):
        if index > 0:
            older = family.series[index]
            notes.append(
                f"{used[index]} pod(s) read under {older.name} ({older.releases}), the name "
                f"before {family.current.name}"
            )
    if problems or not histograms:
        return FamilyReading(None, frozenset(exporting), tuple(problems), tuple(notes), series)
    summed, note = _sum_pods(histograms)
    if note:
        notes.append(f"{series.name}: {note}")
    return FamilyReading(summed, frozenset(exporting), (), tuple(notes), series)


def read_gauges(
    answer: GaugeAnswer,
    waiting: GaugeFamily,
    running: GaugeFamily,
    namespace: str,
    pods: Collection[str],
) -> GaugeReading:
    """The waiting and running gauges summed over `pods`, and the pods serving."""
    found = answer.pods.get(namespace, {})
    totals = {"waiting": 0.0, "running": 0.0, "waiting_now": 0.0}
    samples: list[float] = []
    newest: float | None = None
    notes: list[str] = []
    problems: list[str] = []
    exporting: set[str] = set()
    waiting_used: dict[int, int] = defaultdict(int)
    seen = {"waiting": False, "running": False}
    for pod in sorted(p for p in pods if p in found):
        scrapes = found[pod]
        weight = {s: v.get("running:0:samples", 0.0) for s, v in scrapes.items()}
        scrape, note = _one_scrape(pod, scrapes, weight)
        if note:
            notes.append(note)
        values = scrapes[scrape]
        exporting.add(pod)
        for gauge, key in ((waiting, "waiting"), (running, "running")):
            present = [i for i in range(len(gauge.series)) if f"{gauge.key}:{i}:avg" in values]
            if not present:
                continue
            index = min(present)
            seen[key] = True
            if key == "waiting":
                waiting_used[index] += 1
            average = values[f"{gauge.key}:{index}:avg"]
            now = values.get(f"{gauge.key}:{index}:now", 0.0)  # none now: stopped
            if average < 0 or now < 0:
                problems.append(
                    f"{gauge.series[index]} of pod {pod} is negative ({min(average, now):g}): "
                    "not a count of requests"
                )
            totals[key] += average
            if key == "waiting":
                totals["waiting_now"] += now
        if "running:0:samples" in values:
            samples.append(values["running:0:samples"])
        stamp = values.get("running:0:newest")
        if stamp is not None and math.isfinite(stamp):
            newest = stamp if newest is None else max(newest, stamp)
    most = max(samples, default=0.0)
    reporting = sum(samples) / most if most > 0 and math.isfinite(most) else 0.0
    series = None
    if waiting_used:
        series = waiting.series[max(waiting_used, key=lambda i: (waiting_used[i], -i))]
    return GaugeReading(
        waiting=totals["waiting"] if seen["waiting"] else math.nan,
        running=totals["running"] if seen["running"] else math.nan,
        waiting_now=totals["waiting_now"] if seen["waiting"] else math.nan,
        reporting_pods=reporting,
        newest=newest,
        pods=frozenset(exporting),
        problems=tuple(problems),
        notes=tuple(notes),
        waiting_series=series,
    )


@dataclass(frozen=True)
class TargetAnswers:
    """What one batch's queries answered for the targets of one engine and window."""

    families: Mapping[str, FamilyAnswer]
    gauges: GaugeAnswer


def target_pods(answers: TargetAnswers, namespace: str, pattern: str) -> frozenset[str]:
    """The pods of `namespace` in any answer whose names match the target's pattern."""
    names: set[str] = set(answers.gauges.pod_names(namespace))
    for answer in answers.families.values():
        names.update(answer.pod_names(namespace))
    matcher = _compiled(pattern)
    return frozenset(name for name in names if matcher.fullmatch(name))


@functools.lru_cache(maxsize=4096)
def _compiled(pattern: str) -> re.Pattern[str]:
    """The pod pattern (RE2, anchored by the caller) as Python compiles the same syntax."""
    return re.compile(pattern)


@dataclass(frozen=True)
class Request:
    """What one target's Observation is asked for."""

    namespace: str
    deployment: str
    pod_pattern: str  # anchored RE2 of its pods' names
    window_s: float
    need_itl: bool


def observation_for(
    metrics: EngineMetrics,
    answers: TargetAnswers,
    request: Request,
    now: float,
    labels: tuple[str, str] = ("namespace", "pod"),
) -> Observation:
    """One target's Observation from a batch's answers: its pods summed, every fault said."""
    namespace = request.namespace
    where = f"pods of {request.deployment} in namespace {namespace}"
    pods = target_pods(answers, namespace, request.pod_pattern)
    readings = {
        key: read_family(answers.families[key], family, namespace, pods)
        if key in answers.families
        else FamilyReading(None)
        for key, family in metrics.histograms.items()
    }
    gauges = read_gauges(answers.gauges, metrics.waiting, metrics.running, namespace, pods)
    problems = [p for r in readings.values() for p in r.problems] + list(gauges.problems)
    notes = [n for r in readings.values() for n in r.notes] + list(gauges.notes)
    derived: list[str] = []

    required = [k for k in ("ttft", "queue", "prefill") if k in metrics.histograms]
    if request.need_itl:
        required.append("itl")
    if metrics.engine is Engine.SGLANG and not readings["prefill"].pods:
        required.remove("prefill")  # older releases: approximated below
    absent = [metrics.histograms[k].current for k in required if not readings[k].pods]
    if math.isnan(gauges.running):
        absent.append(metrics.running.current)
    if absent:
        problems.append(_absent_hint(metrics, absent, pods, readings, gauges, where, labels))

    histograms = {k: r.histogram for k, r in readings.items()}
    ttft, queue = histograms.get("ttft"), histograms.get("queue")
    prefill = histograms.get("prefill")
    if metrics.engine is Engine.TGI:
        prefill, ttft, notes_tgi = _tgi_derived(queue, prefill)
        derived += notes_tgi
    elif metrics.engine is Engine.SGLANG and not readings["prefill"].pods:
        prefill, notes_sglang = _sglang_prefill(ttft, queue)
        derived += notes_sglang
    if gauges.waiting_series is not None and gauges.waiting_series is not metrics.waiting.current:
        notes.append(
            f"waiting requests read from {gauges.waiting_series} "
            f"({gauges.waiting_series.releases}): it also counts requests waiting for other "
            f"reasons than capacity; {metrics.waiting.current} counts only those"
        )
    requests_seen = ttft.total if ttft is not None else math.nan
    newest = gauges.newest
    return Observation(
        observed_at=min(now, newest) if newest is not None else now,
        window_s=request.window_s,
        ttft=ttft,
        queue=queue,
        prefill=prefill,
        itl=histograms.get("itl"),
        prompt_tokens=histograms.get("prompt_tokens"),
        request_rate=requests_seen / request.window_s,
        waiting=gauges.waiting,
        running=gauges.running,
        reporting_pods=round(gauges.reporting_pods),
        waiting_now=gauges.waiting_now,
        problems=tuple(dict.fromkeys(problems)),
        derived=tuple(derived),
        notes=tuple(dict.fromkeys(notes)),
    )


def _absent_hint(
    metrics: EngineMetrics,
    absent: list[Series],
    pods: frozenset[str],
    readings: Mapping[str, FamilyReading],
    gauges: GaugeReading,
    where: str,
    labels: tuple[str, str],
) -> str:
    names = ", ".join(s.name for s in absent)
    if not pods:
        hint = (
            f"no {names} series from {where} (is Prometheus scraping them with the "
            f"'{labels[0]}' and '{labels[1]}' labels?)"
        )
        if metrics.enable:
            hint += f"; {metrics.name} exports metrics only when started with {metrics.enable}"
        return hint
    present = [r.series.name for r in readings.values() if r.series is not None and r.pods]
    if gauges.pods and not math.isnan(gauges.running):
        present.append(metrics.running.current.name)
    releases = "; ".join(f"{s.name}: {s.releases}" for s in absent if s.releases)
    return (
        f"no {names} series from {where}, though they export {', '.join(present) or 'others'}: "
        f"the labels are right; the engine creates a histogram only once it has observed a "
        f"value, or this release does not export it"
        + (f" ({releases})" if releases else "")
    )


def _sglang_prefill(
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


def _tgi_derived(
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
