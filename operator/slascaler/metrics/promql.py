"""Every PromQL query slascaler sends, built in one place with every label value escaped.

A query selects the target Deployment's pods in the InferenceSLA's own namespace: the
namespace comes from the object's metadata (never from its spec), and the pod matcher is the
names of the ReplicaSets the Deployment owns, `<replicaset>-<suffix>` (`owned_pods_pattern`,
what Kubernetes says its pods are; exact pod names where the API server cuts that prefix),
or without them the Deployment's pod-name pattern
`<name>-<template hash>-<suffix>` (as Kubernetes cuts it for long names); names are escaped
both as a regular expression (RE2) and as a PromQL string.
Whatever a user writes in an InferenceSLA ends up inside a string literal, so it can neither
widen the selector to another namespace nor add PromQL of its own.

The label names (`namespace`, `pod` by default) are the operator's settings, checked against
Prometheus's label-name grammar when the settings are read.

Pure (no I/O). Called by `metrics.prometheus`; the tests check the escaping against a real
Prometheus.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from slascaler.engines import EngineFlavour

LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
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
# The API server cuts a generateName base to 58 characters before adding 5 random ones.
_GENERATED_BASE_MAX = 58
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
    if len(base) >= _GENERATED_BASE_MAX:
        head = escape_regex(base[:_GENERATED_BASE_MAX])
        return f"^{head}{_GENERATED}{{{_SUFFIX_LENGTH}}}$"
    room = _GENERATED_BASE_MAX - len(base)  # characters left for "<hash>-"
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


@dataclass(frozen=True)
class OwnedPods:
    """The pods Kubernetes says a Deployment has: the ReplicaSets it owns, and the pods they
    own now (by name), read by `kube.fleet`."""

    replica_sets: tuple[str, ...]
    pods: tuple[tuple[str, str], ...] = ()  # (pod, its ReplicaSet)

    def cut(self) -> tuple[str, ...]:
        """ReplicaSets whose pod names the API server cuts before the suffix: their pods'
        names cannot be told from those of another ReplicaSet with the same first 58
        characters, so only their current pods, by exact name, are theirs."""
        return tuple(rs for rs in self.replica_sets if len(rs) + 1 > _GENERATED_BASE_MAX)


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


def duration(seconds: float) -> str:
    """A PromQL duration for a window (whole milliseconds, at least 1 ms)."""
    return f"{max(1, round(seconds * 1000))}ms"


@dataclass(frozen=True)
class PodSelector:
    """The series of one Deployment's pods in one namespace."""

    namespace: str
    deployment: str
    namespace_label: str = "namespace"
    pod_label: str = "pod"
    # The pods the Deployment owns (by ReplicaSet); None: the Deployment's name pattern.
    owned: OwnedPods | None = None

    def __post_init__(self) -> None:
        for label in (self.namespace_label, self.pod_label):
            if not LABEL_NAME.match(label):
                raise ValueError(f"{label!r} is not a Prometheus label name")

    def matchers(self, extra: str = "") -> str:
        pods = (
            deployment_pod_pattern(self.deployment)
            if self.owned is None
            else owned_pods_pattern(self.owned)
        )
        parts = [
            f'{self.namespace_label}="{escape_string(self.namespace)}"',
            f'{self.pod_label}=~"{escape_string(pods)}"',
        ]
        if extra:
            parts.append(extra)
        return "{" + ",".join(parts) + "}"


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


@dataclass(frozen=True)
class GaugeQueries:
    """Queries of the engine's waiting/running gauges and of the pods reporting them."""

    waiting_average: str
    running_average: str
    waiting_now: str
    reporting_pods: str
    newest_sample: str


def gauge_queries(flavour: EngineFlavour, selector: PodSelector, window_s: float) -> GaugeQueries:
    match, window = selector.matchers(), duration(window_s)
    return GaugeQueries(
        waiting_average=f"sum(avg_over_time({flavour.waiting}{match}[{window}]))",
        running_average=f"sum(avg_over_time({flavour.running}{match}[{window}]))",
        waiting_now=f"sum({flavour.waiting}{match})",
        # Pods serving over the window, on average: each pod's samples over the samples of the
        # longest-lived one, so a pod that just started counts for the part it served.
        reporting_pods=(
            f"sum(count_over_time({flavour.running}{match}[{window}]))"
            f" / max(count_over_time({flavour.running}{match}[{window}]))"
        ),
        newest_sample=f"max(timestamp({flavour.running}{match}))",
    )
