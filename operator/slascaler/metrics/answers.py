"""Prometheus's per-pod answers, indexed by namespace, pod and scrape target — or refused.

`family_query`, `gauges_query` and `counters_query` (`metrics.promql`) answer per
(namespace, pod, scrape target), each sample naming what it is in a `slascaler_part` label.
Here one query's samples are indexed (`FamilyAnswer`, `GaugeAnswer`, `CounterAnswer`); a
sample without a valid part, or a bucket without `le`, is an answer the queries could not
have produced (`Malformed`: the caller holds and names it). Values are kept as they came,
NaN and ±Inf included: what they mean is decided by `metrics.targets`.

Pure (no I/O). Built by `metrics.prometheus` (and `metrics.client` builds the `Sample`s);
read by `metrics.targets` and `metrics.series`.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from slascaler.metrics.promql import PART_LABEL

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


def _scrape(labels: Mapping[str, str]) -> Scrape:
    return (labels.get("instance", ""), labels.get("job", ""))


@dataclass
class RawHistogram:
    """One pod's series of one name, as one scrape target exported them."""

    buckets: dict[str, float] = field(default_factory=dict)  # le as written → count
    sum: float | None = None
    count: float | None = None


class FamilyAnswer:
    """One histogram family's answer: namespace → pod → scrape target → series index."""

    def __init__(self, samples: Iterable[Sample], namespace_label: str, pod_label: str) -> None:
        self.pods: dict[str, dict[str, dict[Scrape, dict[int, RawHistogram]]]] = {}
        for sample in samples:
            index, kind = _part(sample, 2)
            labels = sample.labels
            namespace = labels.get(namespace_label, "")
            pod = labels.get(pod_label, "")
            try:
                variant = int(index)
            except ValueError:
                raise Malformed(f"a sample with {PART_LABEL}={labels[PART_LABEL]!r}") from None
            raw = (
                self.pods.setdefault(namespace, {})
                .setdefault(pod, {})
                .setdefault(_scrape(labels), {})
                .setdefault(variant, RawHistogram())
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


class PartAnswer:
    """An answer of named values per pod: namespace → pod → scrape target → part → value.
    Every part has `pieces` colon-separated pieces (`waiting:0:avg`, `prompt_tokens:0:increase`)."""

    pieces = 3

    def __init__(self, samples: Iterable[Sample], namespace_label: str, pod_label: str) -> None:
        self.pods: dict[str, dict[str, dict[Scrape, dict[str, float]]]] = {}
        for sample in samples:
            _part(sample, self.pieces)  # checks its form
            labels = sample.labels
            values = (
                self.pods.setdefault(labels.get(namespace_label, ""), {})
                .setdefault(labels.get(pod_label, ""), {})
                .setdefault(_scrape(labels), {})
            )
            values[labels[PART_LABEL]] = sample.value

    def pod_names(self, namespace: str) -> Collection[str]:
        return self.pods.get(namespace, {}).keys()


class GaugeAnswer(PartAnswer):
    """The gauges' answer (`gauges_query`)."""


class CounterAnswer(PartAnswer):
    """The token counters' and recent requests' answer (`counters_query`)."""


@dataclass(frozen=True)
class TargetAnswers:
    """What one batch's queries answered for the targets of one engine and window."""

    families: Mapping[str, FamilyAnswer]
    gauges: GaugeAnswer
    counters: CounterAnswer | None = None  # None: not asked (a caller of the histograms only)
