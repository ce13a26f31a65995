"""The Prometheus `MetricSource`: InferenceSLA targets' windows of engine metrics, over HTTP.

For each target's pods it rebuilds the increase over the window of the TTFT, queue-time,
prefill-time, inter-token-latency and prompt-length histograms, the window averages of the
waiting and running gauges, the pods serving, the time of the newest sample (which
becomes `observed_at`, so that a Prometheus that stopped scraping reads as stale), the
prompt and generated tokens per second, and a short recent window's requests per second and
growth of the waiting requests (`metrics.work`).

Two ways in, one way of reading:

- `fetch(targets, now, deadline)` asks for a whole batch of targets at once — one query per
  histogram family, one for the gauges and one for the token counters, per (engine, window),
  over the namespaces of the batch, run concurrently — and returns a `Snapshot` that gives
  each target its Observation (`Snapshot.observe`), summing the pods that match the
  target's pod pattern (`metrics.series`, `metrics.targets`). The operator's evaluation
  cycle uses it (`cycle`); `observe_many` is the same for a list of targets.
- `observe(namespace, spec, now, pods)` is a batch of one, its queries narrowed to the
  target's pods in Prometheus (the `MetricSource` interface: `slascaler analyze`, the
  per-SLA path).

A target's pods are those Kubernetes says the Deployment has (`owned_pods.OwnedPods`: the pods
of the ReplicaSets it owns), where the caller read them, else its pod-name pattern; a batch
asks for the union of the targets' name patterns and each target keeps its own pods.

Both read answers the same way, so a batch gives what single queries give (the e2e suite
checks the two to 1e-9). Where the chart's recording rules exist (found in `/api/v1/rules`,
looked up every few minutes), the histogram increases are read from them (the token
counters, one query of a few series, are always read raw).

What can go wrong is explicit, and never an exception for the caller: an unreachable, slow
or failing server, or an answer that is not what the API documents (`metrics.client`), gives
`source_error` naming the URL and the problem; a series that is absent or is not a histogram
(`metrics.targets`) leaves the field None and `problems` says which and why; NaN and ±Inf are
kept (the Observation reports the histogram as not finite); a token counter no pod exports
leaves its rate NaN, said in `notes`. Engines that lack a series get it approximated from
the others, said in `derived`.

Called by the evaluation cycle and `slascaler analyze --prometheus`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from slascaler.engine_metrics import ENGINE_METRICS, EngineMetrics
from slascaler.metrics.answers import (
    CounterAnswer,
    FamilyAnswer,
    GaugeAnswer,
    Malformed,
    Sample,
    TargetAnswers,
)
from slascaler.metrics.client import (
    ClientSettings,
    PrometheusClient,
    QueryFailed,
    QueryObserver,
)
from slascaler.metrics.promql import (
    PodSelector,
    Scope,
    counters_query,
    family_query,
    gauges_query,
    pods_pattern,
)
from slascaler.metrics.series import Request, observation_for
from slascaler.model.observation import Observation, recent_window_s
from slascaler.owned_pods import OwnedPods
from slascaler.spec import Engine, SLASpec

log = logging.getLogger("slascaler.metrics")


@dataclass(frozen=True)
class PrometheusSettings:
    url: str
    timeout_s: float = 5.0
    retries: int = 2
    backoff_s: float = 0.5
    namespace_label: str = "namespace"
    pod_label: str = "pod"
    bearer_token: str | None = None
    verify_tls: bool = True
    # One observation's deadline when the caller gives none (`observe`).
    deadline_s: float = 15.0
    # Read the chart's recording rules where Prometheus has them; how often to look.
    recording_rules: bool = True
    rules_refresh_s: float = 300.0
    # Queries in flight at most (threads are made as needed): enough that the queries of a
    # stalled (engine, window) group never hold back another group's.
    parallel_queries: int = 64


@dataclass(frozen=True)
class Target:
    """One InferenceSLA's target: its namespace, spec, and (from Kubernetes) its pods."""

    namespace: str
    spec: SLASpec
    pod_pattern: str | None = None  # anchored RE2 of its pods' names; None: the name pattern


GroupKey = tuple[Engine, float]  # (engine, window in seconds): what one query set reads


class _Group:
    """One (engine, window)'s queries in flight, and their answers once all are in."""

    def __init__(self, metrics: EngineMetrics, labels: tuple[str, str]) -> None:
        self.metrics = metrics
        self.labels = labels
        self.namespaces: frozenset[str] = frozenset()
        self.futures: dict[str, Future[list[Sample]]] = {}
        self._lock = threading.Lock()
        self._answers: TargetAnswers | None = None
        self._error: str | None = None
        self._done = False

    def result(self, timeout: float) -> tuple[TargetAnswers | None, str | None]:
        """(answers, None), or (None, why not), waiting at most `timeout` seconds."""
        with self._lock:
            if self._done:
                return self._answers, self._error
        _, late = wait(list(self.futures.values()), timeout=max(0.0, timeout))
        if late:
            return None, "no answer within this evaluation's deadline"
        with self._lock:
            if not self._done:
                self._answers, self._error = self._read()
                self._done = True
                self.futures = {}  # the raw samples are read: let them go
            return self._answers, self._error

    def _read(self) -> tuple[TargetAnswers | None, str | None]:
        results: dict[str, list[Sample]] = {}
        for name, future in self.futures.items():
            try:
                results[name] = future.result()
            except QueryFailed as error:
                what = f"the {name}" if name in ("gauges", "counters") else f"the {name} histograms"
                return None, f"asking for {what}: {error}"
        try:
            return (
                TargetAnswers(
                    families={
                        name: FamilyAnswer(results[name], *self.labels)
                        for name in self.metrics.histograms
                    },
                    gauges=GaugeAnswer(results["gauges"], *self.labels),
                    counters=CounterAnswer(results["counters"], *self.labels),
                ),
                None,
            )
        except Malformed as error:
            return None, f"an answer the queries sent could not produce: {error}"


@dataclass
class Snapshot:
    """A batch's queries, sent at one instant; each target's Observation on demand, waiting
    only for its own (engine, window)'s answers."""

    at: float
    url: str
    labels: tuple[str, str]
    groups: dict[GroupKey, _Group] = field(default_factory=dict)
    queries: int = 0
    monotonic: Callable[[], float] = time.monotonic

    def covers(self, target: Target) -> bool:
        group = self.groups.get(_key(target.spec))
        return group is not None and target.namespace in group.namespaces

    def observe(self, target: Target, deadline: float | None = None) -> Observation:
        """The target's Observation (it must be covered), waiting for the answers until
        `deadline` (monotonic; None: as long as they take)."""
        spec = target.spec
        group = self.groups[_key(spec)]
        timeout = 3600.0 if deadline is None else deadline - self.monotonic()
        answers, error = group.result(timeout)
        if answers is None:
            return _failed(
                self.at, spec.window_s, f"Prometheus at {self.url} did not answer: {error}"
            )
        selector = _selector(target, self.labels)
        request = Request(
            namespace=target.namespace,
            deployment=spec.target.name,
            pod_pattern=selector.pods,
            window_s=spec.window_s,
            need_itl=spec.itl is not None,
        )
        return observation_for(group.metrics, answers, request, self.at, self.labels)


def _key(spec: SLASpec) -> GroupKey:
    return (spec.engine, spec.window_s)


def _selector(target: Target, labels: tuple[str, str]) -> PodSelector:
    return PodSelector(
        target.namespace,
        target.spec.target.name,
        namespace_label=labels[0],
        pod_label=labels[1],
        pod_pattern=target.pod_pattern,
    )


def union(patterns: Iterable[str]) -> str:
    """One RE2 pattern matching what any of the (anchored) patterns matches."""
    ordered = sorted(patterns)
    if len(ordered) == 1:
        return ordered[0]
    return "(?:" + "|".join(f"(?:{p})" for p in ordered) + ")"


def _failed(now: float, window_s: float, error: str) -> Observation:
    return Observation(
        observed_at=now, window_s=window_s, ttft=None, queue=None, prefill=None, source_error=error
    )


class PrometheusSource:
    """Observations of InferenceSLA targets from one Prometheus server."""

    def __init__(
        self,
        settings: PrometheusSettings,
        observer: QueryObserver | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.client = PrometheusClient(
            ClientSettings(
                url=settings.url,
                timeout_s=settings.timeout_s,
                retries=settings.retries,
                backoff_s=settings.backoff_s,
                bearer_token=settings.bearer_token,
                verify_tls=settings.verify_tls,
            ),
            clock=clock,
            observer=observer,
        )
        self.labels = (settings.namespace_label, settings.pod_label)
        self._pool = ThreadPoolExecutor(
            max_workers=settings.parallel_queries, thread_name_prefix="prometheus"
        )
        self._rules_lock = threading.Lock()
        self._recorded: frozenset[str] = frozenset()
        self._rules_checked_at: float | None = None

    # -- the MetricSource interface -------------------------------------------------------

    def observe(
        self, namespace: str, spec: SLASpec, now: float, pods: OwnedPods | None = None
    ) -> Observation:
        """One target's window, its queries narrowed to its pods (`pods`, those Kubernetes
        says it has; None: the Deployment's pod-name pattern)."""
        return self.observe_target(Target(namespace, spec, pods_pattern(pods)), now)

    def observe_target(
        self, target: Target, now: float, deadline: float | None = None
    ) -> Observation:
        deadline = deadline if deadline is not None else self.clock() + self.settings.deadline_s
        snapshot = self.fetch([target], now, deadline)
        return snapshot.observe(target, deadline)

    # -- batches --------------------------------------------------------------------------

    def observe_many(
        self, targets: Sequence[Target], now: float, deadline: float | None = None
    ) -> list[Observation]:
        """Every target's window from one batch of queries."""
        deadline = deadline if deadline is not None else self.clock() + self.settings.deadline_s
        snapshot = self.fetch(targets, now, deadline)
        return [snapshot.observe(target, deadline) for target in targets]

    def fetch(self, targets: Iterable[Target], now: float, deadline: float) -> Snapshot:
        """Send one query per histogram family, one for the gauges and one for the token
        counters, for each (engine, window) among `targets`, over
        their namespaces and pods, all at once; the Snapshot waits for each group's answers
        only when a target of that group is observed."""
        snapshot = Snapshot(now, self.settings.url, self.labels, monotonic=self.clock)
        patterns: dict[GroupKey, set[str]] = {}
        for target in targets:
            key = _key(target.spec)
            group = snapshot.groups.setdefault(key, _Group(ENGINE_METRICS[key[0]], self.labels))
            group.namespaces = group.namespaces | {target.namespace}
            patterns.setdefault(key, set()).add(_selector(target, self.labels).pods)
        recorded = self._recorded_series()
        for key, group in snapshot.groups.items():
            # Only the pods of the targets asked for (their patterns' union), so that what a
            # batch reads grows with the InferenceSLAs falling due, not with the namespaces.
            scope = Scope(
                tuple(sorted(group.namespaces)), *self.labels, pod_pattern=union(patterns[key])
            )
            queries = {
                name: family_query(family, scope, key[1], recorded)
                for name, family in group.metrics.histograms.items()
            }
            recent = recent_window_s(key[1])
            queries["gauges"] = gauges_query(group.metrics, scope, key[1], recent)
            queries["counters"] = counters_query(group.metrics, scope, key[1], recent)
            for name, query in queries.items():
                group.futures[name] = self._pool.submit(self.client.query, query, now, deadline)
            snapshot.queries += len(queries)
        return snapshot

    # -- recording rules ------------------------------------------------------------------

    def _recorded_series(self) -> frozenset[str]:
        """The `slascaler:` series Prometheus records, as last looked up; looked up again
        in the background every few minutes (never on a batch's critical path)."""
        if not self.settings.recording_rules:
            return frozenset()
        now = self.clock()
        with self._rules_lock:
            checked = self._rules_checked_at
            due = checked is None or now - checked >= self.settings.rules_refresh_s
            if due:
                self._rules_checked_at = now
            recorded = self._recorded
        if due:
            self._pool.submit(self._look_up_rules, now + min(5.0, self.settings.timeout_s))
        return recorded

    def _look_up_rules(self, deadline: float) -> None:
        names: set[str] = set()
        try:
            data = self.client.get_json("/api/v1/rules?type=record", deadline)
            for group in (data or {}).get("groups") or []:
                for rule in group.get("rules") or []:
                    name = rule.get("name") if isinstance(rule, dict) else None
                    if isinstance(name, str) and name.startswith("slascaler:"):
                        names.add(name)
        except (QueryFailed, AttributeError, TypeError) as error:
            log.debug("recording rules not read (raw series are queried): %s", error)
            return
        with self._rules_lock:
            self._recorded = frozenset(names)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
