"""A target's pods picked out of a batch's answers and summed into what it holds.

A batch's answers (`metrics.answers`) hold every pod of the batch's namespaces that matched
any target's pattern; here one target's pods are picked (`target_pods`) and summed:

- a pod scraped under two addresses (two `instance`/`job` pairs: two PodMonitors, a
  ServiceMonitor beside a PodMonitor) is counted once, from the scrape target that saw the
  most (and the status notes it);
- each pod is read under the newest series name it exports (`engine_metrics`: an older
  release's name is read where the newer one is absent), said in a note;
- a pod's histogram that is not one (`metrics.histogram_check`) makes the family missing for
  the target, so the policy holds and says why, as it does for a series that is not there;
- a gauge or token counter that is negative is not a count: a problem for the gauges (which
  the policy needs), a note and NaN for the counters (which it can do without);
- a fleet younger than the window (its oldest sample inside it) served only since its first
  sample: `GaugeReading.served_s` is the span its increases cover, over which they are rates.
  Prometheus's `increase()` extrapolates a series back at most half a scrape interval before
  its first sample, and divides nothing: over the whole window, a fleet 10 s old at 4
  requests/s read as 0.5 (the e2e suite's real Prometheus, 30 s window), where the simulator
  (which reports the elapsed seconds) read 4.

Summing in the client, pod by pod, gives what `sum` over the same pods gives in Prometheus
(the e2e suite checks a batch against single-target queries to 1e-9).

Pure (no I/O). Called by `metrics.series`.
"""

from __future__ import annotations

import functools
import math
import re
from collections import defaultdict
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from slascaler.engine_metrics import CounterFamily, GaugeFamily, HistogramFamily, Series
from slascaler.metrics.answers import (
    CounterAnswer,
    FamilyAnswer,
    GaugeAnswer,
    Scrape,
    TargetAnswers,
)
from slascaler.metrics.histogram_check import check_histogram, sum_pods
from slascaler.model.histogram import Histogram


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
    waiting_then: float = math.nan  # the recent window ago (a pod without a sample then: 0)
    reporting_pods: float = 0.0  # pods serving over the window, on average
    newest: float | None = None  # the newest sample's time (epoch seconds)
    pods: frozenset[str] = frozenset()
    problems: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    waiting_series: Series | None = None
    # The oldest sample's time in the window (earlier than the window: older than it), and
    # the scrape interval its pod's samples show (NaN: fewer than two).
    oldest: float | None = None
    scrape_interval_s: float = math.nan

    def served_s(self, window_s: float, now: float, late_s: float) -> float:
        """The seconds of the window the fleet's increases cover: the window, or for a fleet
        younger than it the time since its oldest sample (read up to `late_s` late) and the
        half scrape interval `increase()` extrapolates before it."""
        if self.oldest is None or not math.isfinite(self.oldest):
            return window_s
        age = now - self.oldest
        if age <= 0 or age >= window_s - late_s:
            return window_s
        half_interval = self.scrape_interval_s / 2 if math.isfinite(self.scrape_interval_s) else 0
        return min(window_s, age + half_interval)


@dataclass(frozen=True)
class CounterReading:
    """The token counters' increases and the recent requests, summed over a target's pods;
    a key absent from `increases`: no pod exports any of its series."""

    increases: Mapping[str, float] = field(default_factory=dict)
    series: Mapping[str, Series] = field(default_factory=dict)  # the name read (most pods)
    recent_requests: float = math.nan
    notes: tuple[str, ...] = ()


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


def _most_used(series: tuple[Series, ...], used: Mapping[int, int]) -> Series:
    return series[max(used, key=lambda i: (used[i], -i))]


def _older_names(current: Series, series: tuple[Series, ...], used: Mapping[int, int]) -> list[str]:
    return [
        f"{used[index]} pod(s) read under {series[index].name} ({series[index].releases}), "
        f"the name before {current.name}"
        for index in sorted(used)
        if index > 0
    ]


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
        histogram, problem = check_histogram(
            family.series[index], pod, variants[index], family.scale
        )
        if problem is not None:
            problems.append(problem)
        elif histogram is not None:
            histograms.append(histogram)
    if not exporting:
        return FamilyReading(None)
    series = _most_used(family.series, used)
    notes += _older_names(family.current, family.series, used)
    if problems or not histograms:
        return FamilyReading(None, frozenset(exporting), tuple(problems), tuple(notes), series)
    summed, note = sum_pods(histograms)
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
    totals = {"waiting": 0.0, "running": 0.0, "waiting_now": 0.0, "waiting_then": 0.0}
    samples: list[float] = []
    newest: float | None = None
    oldest: tuple[float, float] | None = None  # the oldest sample's time, its pod's interval
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
            then = values.get(f"{gauge.key}:{index}:then", 0.0)  # none then: not started
            if min(average, now, then) < 0:
                problems.append(
                    f"{gauge.series[index]} of pod {pod} is negative "
                    f"({min(average, now, then):g}): not a count of requests"
                )
            totals[key] += average
            if key == "waiting":
                totals["waiting_now"] += now
                totals["waiting_then"] += then
        if "running:0:samples" in values:
            samples.append(values["running:0:samples"])
        stamp = values.get("running:0:newest")
        if stamp is not None and math.isfinite(stamp):
            newest = stamp if newest is None else max(newest, stamp)
        first = values.get("running:0:oldest")
        if first is not None and math.isfinite(first) and (oldest is None or first < oldest[0]):
            oldest = (first, _scrape_interval(first, stamp, values.get("running:0:samples")))
    most = max(samples, default=0.0)
    reporting = sum(samples) / most if most > 0 and math.isfinite(most) else 0.0
    series = _most_used(waiting.series, waiting_used) if waiting_used else None
    return GaugeReading(
        waiting=totals["waiting"] if seen["waiting"] else math.nan,
        running=totals["running"] if seen["running"] else math.nan,
        waiting_now=totals["waiting_now"] if seen["waiting"] else math.nan,
        waiting_then=totals["waiting_then"] if seen["waiting"] else math.nan,
        reporting_pods=reporting,
        newest=newest,
        pods=frozenset(exporting),
        problems=tuple(problems),
        notes=tuple(notes),
        waiting_series=series,
        oldest=oldest[0] if oldest is not None else None,
        scrape_interval_s=oldest[1] if oldest is not None else math.nan,
    )


def _scrape_interval(oldest: float, newest: float | None, samples: float | None) -> float:
    """The mean time between a pod's samples from its first, last and count (NaN: unknown)."""
    if newest is None or samples is None or not samples >= 2 or not newest > oldest:
        return math.nan
    return (newest - oldest) / (samples - 1)


def read_counters(
    answer: CounterAnswer,
    families: Collection[CounterFamily],
    namespace: str,
    pods: Collection[str],
) -> CounterReading:
    """Each token family's increase and the recent requests, summed over `pods`."""
    found = answer.pods.get(namespace, {})
    totals: dict[str, float] = {}
    used: dict[str, dict[int, int]] = {f.key: defaultdict(int) for f in families}
    recent: float | None = None
    notes: list[str] = []
    counting = False  # some pod exports some token counter
    for pod in sorted(p for p in pods if p in found):
        scrapes = found[pod]
        weight = {s: max(v.values(), default=0.0) for s, v in scrapes.items()}
        scrape, note = _one_scrape(pod, scrapes, weight)
        if note:
            notes.append(note)
        values = scrapes[scrape]
        for family in families:
            present = [
                i for i in range(len(family.series)) if f"{family.key}:{i}:increase" in values
            ]
            if not present:
                continue
            counting = True
            index = min(present)
            used[family.key][index] += 1
            totals[family.key] = (
                totals.get(family.key, 0.0) + values[f"{family.key}:{index}:increase"]
            )
        if "requests:0:recent" in values:
            recent = (recent or 0.0) + values["requests:0:recent"]
    increases: dict[str, float] = {}
    series: dict[str, Series] = {}
    for family in families:
        if family.key in totals:
            increases[family.key] = totals[family.key]
            series[family.key] = _most_used(family.series, used[family.key])
            notes += _older_names(family.current, family.series, used[family.key])
        elif family.created_on_first_increment and counting:
            increases[family.key] = 0.0  # the engine creates it at its first increment
            series[family.key] = family.current
    for key, value in list(increases.items()):
        if value < 0:
            notes.append(f"{series[key]} decreased ({value:g}) in the window: not read")
            del increases[key]
    if recent is not None and recent < 0:
        notes.append(f"requests served decreased ({recent:g}) in the recent window: not read")
        recent = None
    return CounterReading(
        increases, series, recent if recent is not None else math.nan, tuple(notes)
    )


def target_pods(answers: TargetAnswers, namespace: str, pattern: str) -> frozenset[str]:
    """The pods of `namespace` in any answer whose names match the target's pattern."""
    names: set[str] = set(answers.gauges.pod_names(namespace))
    for answer in answers.families.values():
        names.update(answer.pod_names(namespace))
    if answers.counters is not None:
        names.update(answers.counters.pod_names(namespace))
    matcher = _compiled(pattern)
    return frozenset(name for name in names if matcher.fullmatch(name))


@functools.lru_cache(maxsize=4096)
def _compiled(pattern: str) -> re.Pattern[str]:
    """The pod pattern (RE2, anchored by the caller) as Python compiles the same syntax."""
    return re.compile(pattern)
