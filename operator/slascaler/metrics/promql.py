"""Every PromQL query slascaler sends, built in one place with every label value escaped.

A query selects the target Deployment's pods in the InferenceSLA's own namespace: the
namespace comes from the object's metadata (never from its spec), and the pod matcher is the
names of the ReplicaSets the Deployment owns, `<replicaset>-<suffix>` (`owned_pods_pattern`,
what Kubernetes says its pods are; exact pod names where the API server cuts that prefix),
or without them the Deployment's pod-name pattern `<name>-<template hash>-<suffix>` (as
Kubernetes cuts it for long names); names are escaped both as a regular expression (RE2)
and as a PromQL string. Whatever a user writes in an InferenceSLA ends up inside a string
literal, so it can neither widen the selector to another namespace nor add PromQL of its own.

The queries the operator sends (`family_query`, `gauges_query`, `counters_query`) answer
*per pod and scrape target* (`sum by (namespace, pod, instance, job[, le])`), one query per
metric family and window: the caller sums pods into targets (`metrics.targets`), which lets
one query serve every InferenceSLA of an evaluation cycle (a `Scope` of several namespaces)
as exactly as one target's own, counts a pod scraped under two addresses once, and tells an
engine release's series from an older one's. The parts of one answer (buckets, `_sum`,
`_count`; each gauge statistic; each token counter) are told apart by a `slascaler_part`
label added with `label_replace`.
Where recording rules precompute the per-pod increases (`recording_rules`, the chart's
PrometheusRule), `family_query` reads the recorded series instead of `increase()`.

The label names (`namespace`, `pod` by default) are the operator's settings, checked against
Prometheus's label-name grammar when the settings are read.

Pure (no I/O). Called by `metrics.prometheus`; the tests check the escaping against a real
Prometheus.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from slascaler.engine_metrics import (
    CounterFamily,
    EngineMetrics,
    GaugeFamily,
    HistogramFamily,
    Series,
)
from slascaler.owned_pods import GENERATED_BASE_MAX, OwnedPods

LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
# Steps of the subquery that finds a series' oldest sample in the window (`gauges_query`),
# at most: its time is read at most window / steps late, and never finer than a second.
OLDEST_SAMPLE_STEPS = 60
# Characters RE2 treats as syntax; everything else matches itself.
_RE2_SPECIAL = frozenset("\\.+*?()|[]{}^$")


def escape_string(value: str) -> str:
    """The contents of a double-quoted PromQL string literal that equals `value`."""
    out: list[str] = []
    for char in value:
        if char == "\\":
            out.append("\\\\")
        elif char == '"':
            out.append('\\"')
        elif char == "\n":
            out.append("\\n")
        elif char == "\r":
            out.append("\\r")
        elif char == "\t":
            out.append("\\t")
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\x{ord(char):02x}")
        else:
            out.append(char)
    return "".join(out)


def escape_regex(value: str) -> str:
    """An RE2 pattern that matches `value` literally."""
    return "".join("\\" + c if c in _RE2_SPECIAL else c for c in value)


# Kubernetes names generated pods with this alphabet (no vowels, no 0/1/3), both for the pod
# template hash (k8s.io/apimachinery's rand.SafeEncodeString) and for the random suffix.
_GENERATED = "[bcdfghjklmnpqrstvwxz2456789]"
_SUFFIX_LENGTH = 5
_HASH_MAX_LENGTH = 10  # a uint32 hash in decimal digits


def deployment_pod_pattern(deployment: str) -> str:
    """An RE2 pattern (anchored) matching exactly the names of the Deployment's pods.

    A Deployment's pods are named `<deployment>-<template hash>-<suffix>`, except that the
    API server cuts the part before the suffix to 58 characters: for long Deployment names
    the hash, its dash, or even the end of the name are cut away. The pattern follows that
    cut, and the hash and suffix alphabet, so that another workload's pods (a StatefulSet
    `llama-db` has a pod `llama-db-0`) do not match `llama`'s pattern.
    """
    base = deployment + "-"
    if len(base) >= GENERATED_BASE_MAX:
        head = escape_regex(base[:GENERATED_BASE_MAX])
        return f"^{head}{_GENERATED}{{{_SUFFIX_LENGTH}}}$"
    room = GENERATED_BASE_MAX - len(base)  # characters left for "<hash>-"
    if room > _HASH_MAX_LENGTH:
        hashed = f"{_GENERATED}{{1,{_HASH_MAX_LENGTH}}}-"
    elif room == 1:
        hashed = _GENERATED  # one character of the hash, no dash
    else:
        # A hash that fits keeps its dash; a longer one is cut to exactly `room` characters.
        hashed = f"(?:{_GENERATED}{{1,{room - 1}}}-|{_GENERATED}{{{room}}})"
    return f"^{escape_regex(base)}{hashed}{_GENERATED}{{{_SUFFIX_LENGTH}}}$"


# Matches no name at all, not even the empty one (which a series without the label has).
NO_POD = "[^\\s\\S]"


def owned_pods_pattern(owned: OwnedPods) -> str:
    """An RE2 pattern (anchored) matching exactly the pods of the owned ReplicaSets.

    A ReplicaSet's pods are named `<replicaset>-<5 characters>`: that prefix, for each owned
    ReplicaSet, reads no other workload's pods (a Job `llama-dl`'s), whatever their names
    share. When the API server cuts `<replicaset>-` to 58 characters, the prefix could be
    another Deployment's too: those pods are matched by their exact names. No pod at all: a
    pattern that matches nothing.
    """
    cut = set(owned.cut())
    parts = sorted(
        f"{escape_regex(rs + '-')}{_GENERATED}{{{_SUFFIX_LENGTH}}}"
        for rs in owned.replica_sets
        if rs not in cut
    )
    parts += sorted(escape_regex(pod) for pod, rs in owned.pods if rs in cut)
    if not parts:
        return NO_POD
    return f"^(?:{'|'.join(parts)})$"


def pods_pattern(owned: OwnedPods | None) -> str | None:
    """The pattern of the pods Kubernetes says a Deployment has; None (the Deployment's
    name pattern) when the caller did not read them."""
    return None if owned is None else owned_pods_pattern(owned)


def duration(seconds: float) -> str:
    """A PromQL duration for a window (whole milliseconds, at least 1 ms)."""
    return f"{max(1, round(seconds * 1000))}ms"


@dataclass(frozen=True)
class PodSelector:
    """The series of one Deployment's pods in one namespace.

    `pod_pattern`, when given, is an anchored RE2 pattern of the pods' names that the caller
    got from Kubernetes (the pods the Deployment owns); without it the Deployment's
    pod-name pattern is used.
    """

    namespace: str
    deployment: str
    namespace_label: str = "namespace"
    pod_label: str = "pod"
    pod_pattern: str | None = None

    def __post_init__(self) -> None:
        for label in (self.namespace_label, self.pod_label):
            if not LABEL_NAME.match(label):
                raise ValueError(f"{label!r} is not a Prometheus label name")

    @property
    def pods(self) -> str:
        """The anchored RE2 pattern of the target's pod names."""
        if self.pod_pattern is not None:
            return self.pod_pattern
        return deployment_pod_pattern(self.deployment)

    def matchers(self, extra: str = "") -> str:
        return self.scope().matchers(extra)

    def scope(self) -> Scope:
        """A query scope of this target's pods alone."""
        return Scope(
            (self.namespace,), self.namespace_label, self.pod_label, pod_pattern=self.pods
        )


@dataclass(frozen=True)
class Scope:
    """What one query reads: the series of some namespaces (one target's, or every target's
    of a batch), optionally only of the pods whose names match `pod_pattern`."""

    namespaces: tuple[str, ...]
    namespace_label: str = "namespace"
    pod_label: str = "pod"
    pod_pattern: str | None = None

    def __post_init__(self) -> None:
        if not self.namespaces:
            raise ValueError("a scope needs at least one namespace")
        for label in (self.namespace_label, self.pod_label):
            if not LABEL_NAME.match(label):
                raise ValueError(f"{label!r} is not a Prometheus label name")

    def matchers(self, extra: str = "") -> str:
        if len(self.namespaces) == 1:
            namespace = f'{self.namespace_label}="{escape_string(self.namespaces[0])}"'
        else:
            alternatives = "|".join(escape_regex(n) for n in sorted(set(self.namespaces)))
            namespace = f'{self.namespace_label}=~"{escape_string(alternatives)}"'
        parts = [namespace]
        if self.pod_pattern is not None:
            parts.append(f'{self.pod_label}=~"{escape_string(self.pod_pattern)}"')
        if extra:
            parts.append(extra)
        return "{" + ",".join(parts) + "}"

    def group(self, *extra: str) -> str:
        """The `by (...)` labels that keep pods and scrape targets apart."""
        return _group(self.namespace_label, self.pod_label, *extra)


def _group(namespace_label: str, pod_label: str, *extra: str) -> str:
    return ", ".join((namespace_label, pod_label, *SCRAPE_LABELS, *extra))


@dataclass(frozen=True)
class HistogramQueries:
    """The three queries that rebuild one histogram's increase over a window."""

    buckets: str
    sum: str
    count: str


def histogram_queries(
    metric: str, selector: PodSelector, window_s: float, extra: str = ""
) -> HistogramQueries:
    """Increase over the window, summed over the selected pods (by bucket for `_bucket`)."""
    match, window = selector.matchers(extra), duration(window_s)
    return HistogramQueries(
        buckets=f"sum by (le) (increase({metric}_bucket{match}[{window}]))",
        sum=f"sum(increase({metric}_sum{match}[{window}]))",
        count=f"sum(increase({metric}_count{match}[{window}]))",
    )


PART_LABEL = "slascaler_part"  # tells the parts of one answer apart
SCRAPE_LABELS = ("instance", "job")  # what Prometheus adds per scrape target


def _part(expression: str, part: str) -> str:
    return f'label_replace({expression}, "{PART_LABEL}", "{part}", "", "")'


def _matchers(scope: Scope, series: Series) -> str:
    return scope.matchers(series.matchers)


def series_slug(series: Series) -> str:
    """A metric-name-safe name of a series and its matchers (for recorded series)."""
    values = re.findall(r'"([^"]*)"', series.matchers)
    return re.sub(r"[^a-zA-Z0-9_]", "_", "_".join((series.name, *values)))


def recorded_name(series: Series, part: str, window_s: float) -> str:
    """The recording rule's name for a series' per-pod increase over a window."""
    return f"slascaler:{series_slug(series)}_{part}:increase{round(window_s)}s"


def _increase(series: Series, part: str, scope: Scope, window_s: float, recorded: bool) -> str:
    if recorded:
        return f"{recorded_name(series, part, window_s)}{scope.matchers()}"
    return f"increase({series.name}_{part}{_matchers(scope, series)}[{duration(window_s)}])"


def family_query(
    family: HistogramFamily,
    scope: Scope,
    window_s: float,
    recorded: frozenset[str] = frozenset(),
) -> str:
    """One histogram family's increase over the window, per pod and scrape target: every
    series name the family has had (parts `<i>:bucket` by `le`, `<i>:sum`, `<i>:count`).

    A series whose recorded increase exists (its name in `recorded`) is read from the
    recording rule instead of being computed.
    """
    parts = []
    for index, series in enumerate(family.series):
        for part, extra in (("bucket", ("le",)), ("sum", ()), ("count", ())):
            use = recorded_name(series, part, window_s) in recorded
            inner = _increase(series, part, scope, window_s, use)
            parts.append(_part(f"sum by ({scope.group(*extra)}) ({inner})", f"{index}:{part}"))
    return " or ".join(parts)


def recording_rules(
    families: tuple[HistogramFamily, ...],
    window_s: float,
    namespace_label: str = "namespace",
    pod_label: str = "pod",
) -> list[dict[str, str]]:
    """The recording rules (record, expr) that precompute `family_query`'s increases
    for one window, for every pod of every namespace (as the chart's PrometheusRule)."""
    rules = []
    for family in families:
        for series in family.series:
            for part, extra in (("bucket", ("le",)), ("sum", ()), ("count", ())):
                selector = f"{{{series.matchers}}}" if series.matchers else ""
                expr = (
                    f"sum by ({_group(namespace_label, pod_label, *extra)}) "
                    f"(increase({series.name}_{part}{selector}[{duration(window_s)}]))"
                )
                rules.append({"record": recorded_name(series, part, window_s), "expr": expr})
    return rules


def recorded_catalog(families: tuple[HistogramFamily, ...]) -> list[dict[str, str]]:
    """Every series whose increases the chart's PrometheusRule records: its name, matchers
    and the slug of its recorded names (the chart's `files/recorded-series.json`)."""
    catalog: dict[str, dict[str, str]] = {}
    for family in families:
        for series in family.series:
            slug = series_slug(series)
            catalog[slug] = {"name": series.name, "matchers": series.matchers, "slug": slug}
    return [catalog[slug] for slug in sorted(catalog)]


def _gauge_parts(gauge: GaugeFamily, scope: Scope, window_s: float, recent_s: float) -> list[str]:
    window, recent, group = duration(window_s), duration(recent_s), scope.group()
    parts = []
    for index, series in enumerate(gauge.series):
        match, name = _matchers(scope, series), f"{gauge.key}:{index}"
        average = f"sum by ({group}) (avg_over_time({series.name}{match}[{window}]))"
        parts.append(_part(average, f"{name}:avg"))
        parts.append(_part(f"sum by ({group}) ({series.name}{match})", f"{name}:now"))
        then = f"sum by ({group}) ({series.name}{match} offset {recent})"
        parts.append(_part(then, f"{name}:then"))
    return parts


def oldest_sample_step_s(window_s: float) -> float:
    """The step of the subquery that reads a series' oldest sample in the window: the time
    it reads is at most this late."""
    return max(1.0, window_s / OLDEST_SAMPLE_STEPS)


def gauges_query(metrics: EngineMetrics, scope: Scope, window_s: float, recent_s: float) -> str:
    """The waiting and running gauges per pod and scrape target: window averages (parts
    `waiting:<i>:avg`, `running:<i>:avg`), values now (`…:now`) and `recent_s` ago (`…:then`,
    the last sample at or before then), and of the running gauge the samples each pod has in
    the window (`running:0:samples`, so that a pod that started mid-window counts for the
    part it served), its newest sample's time (`running:0:newest`, so that a Prometheus
    that stopped scraping reads as stale) and its oldest sample's time in the window
    (`running:0:oldest`, a time before the window where the series is older: a fleet
    younger than the window served only since then, and its increases are rates over that
    span, not over the window). The oldest sample is found by a subquery of the samples'
    own times, at most `OLDEST_SAMPLE_STEPS` steps over the window (each step sees the
    latest sample at or before it, so the time read is at most one step late)."""
    running = metrics.running.current
    match, window, group = _matchers(scope, running), duration(window_s), scope.group()
    parts = _gauge_parts(metrics.waiting, scope, window_s, recent_s)
    parts += _gauge_parts(metrics.running, scope, window_s, recent_s)
    parts.append(
        _part(f"max by ({group}) (count_over_time({running.name}{match}[{window}]))",
              "running:0:samples")
    )  # fmt: skip
    parts.append(_part(f"max by ({group}) (timestamp({running.name}{match}))", "running:0:newest"))
    step = duration(oldest_sample_step_s(window_s))
    oldest = f"min_over_time(timestamp({running.name}{match})[{window}:{step}])"
    parts.append(_part(f"min by ({group}) ({oldest})", "running:0:oldest"))
    return " or ".join(parts)


def _counter_part(series: Series, scope: Scope, seconds: float, part: str) -> str:
    increase = f"increase({series.name}{_matchers(scope, series)}[{duration(seconds)}])"
    return _part(f"sum by ({scope.group()}) ({increase})", part)


def counters_query(metrics: EngineMetrics, scope: Scope, window_s: float, recent_s: float) -> str:
    """The token counters' increases over the window per pod and scrape target, every name
    each has had (parts `<key>:<i>:increase`), and the requests served in the last
    `recent_s` seconds (`requests:0:recent`). `increase()` reads across a counter's reset (a
    restarted engine), so no increase is negative."""
    families: tuple[CounterFamily, ...] = tuple(metrics.tokens.values())
    parts = [
        _counter_part(series, scope, window_s, f"{family.key}:{index}:increase")
        for family in families
        for index, series in enumerate(family.series)
    ]
    parts.append(_counter_part(metrics.served_requests, scope, recent_s, "requests:0:recent"))
    return " or ".join(parts)
