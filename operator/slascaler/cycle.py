"""The evaluation cycle: InferenceSLAs that fall due share one batch of Prometheus queries and
are evaluated concurrently, each within a deadline.

Kopf's timer of each InferenceSLA (and a spec change) only *submits* it as due (`submit`); a
coordinator thread gathers what falls due within `batch_window_s`, asks Prometheus for all
of it at once (`PrometheusSource.fetch`: one query per metric family and (engine, window),
over the batch's namespaces, started at once) and hands each evaluation to a bounded pool
(`max_concurrency` threads) with a `CycleSource` — a `MetricSource` that gives that
InferenceSLA its part of the batch's answers. So Prometheus sees a constant number of
queries per batch however many InferenceSLAs there are, and Kopf's own worker threads are
never held by an evaluation.

Bounds:
- every evaluation has a deadline (`deadline_s` from its start): the batch's answers are
  waited for until then and no longer, and a fallback query (an InferenceSLA whose engine or
  window changed since it fell due) is bounded by it too. A slow or failing Prometheus
  answer costs the evaluations of that batch their deadline, nothing more; evaluations
  that overrun are counted (`slascaler_evaluations_deadline_exceeded_total`);
- one InferenceSLA is never evaluated twice at once: while it runs, it stays due (one entry,
  however often its timer fires) and starts when the running one ends;
- a batch is taken only as large as the free workers (oldest due first), and asked for when
  it can start: an operator that falls behind keeps its backlog as due entries (visible in
  `slascaler_evaluation_oldest_due_seconds`), not as queued evaluations holding old answers;
- an InferenceSLA whose timer Kopf stopped (the operator pausing for a peer, or exiting) is
  dropped from the queue.
The queue is visible in the operator's metrics: due and running evaluations, how long the
oldest due one has waited, each one's lateness (start − due time), and batch sizes.

`Reconciler.reconcile(sla)` stays usable on its own with any `MetricSource` (the simulator
and the tests call it directly); the cycle only adds the batch in front of it.

Started and stopped by the Kopf wiring (`wiring`), which submits to it.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from slascaler.metrics.prometheus import PrometheusSource, Snapshot, Target
from slascaler.metrics.promql import pods_pattern
from slascaler.metrics.source import MetricSource
from slascaler.model.observation import Observation
from slascaler.owned_pods import OwnedPods
from slascaler.spec import SLASpec
from slascaler.telemetry import Telemetry

log = logging.getLogger("slascaler.cycle")

# Evaluate one InferenceSLA: (namespace, name, uid, spec_changed, metric source).
Evaluate = Callable[[str, str, str, bool, MetricSource], None]


def _never() -> bool:
    return False


@dataclass
class Due:
    """An InferenceSLA due for evaluation."""

    namespace: str
    name: str
    uid: str
    spec: SLASpec | None  # as last seen, to batch its queries; None: not readable
    due_at: float  # wall clock
    spec_changed: bool = False
    stopped: Callable[[], bool] = field(default=_never)  # Kopf stopped its timer


class CycleSource:
    """One evaluation's `MetricSource`: its part of the batch's answers, by its deadline."""

    def __init__(
        self,
        snapshot: Snapshot,
        fallback: PrometheusSource,
        deadline: float,
        max_age_s: float,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.snapshot = snapshot
        self.fallback = fallback
        self.deadline = deadline
        self.max_age_s = max_age_s
        self.monotonic = monotonic

    def observe(
        self, namespace: str, spec: SLASpec, now: float, pods: OwnedPods | None = None
    ) -> Observation:
        # The batch asked for the targets' name patterns; the pods Kubernetes says this
        # Deployment has are among them, and only those are summed.
        target = Target(namespace, spec, pods_pattern(pods))
        snapshot = self.snapshot
        if snapshot.covers(target):
            # Even when the evaluation starts late: the window ends at the batch's instant,
            # and the policy judges its age (asking again would add load when behind).
            return snapshot.observe(target, self.deadline)
        # Not in the batch (its engine or window changed since it fell due): its own
        # queries, within what is left of the deadline.
        return self.fallback.observe_target(target, now, self.deadline)


class Cycle:
    """Batches due InferenceSLAs into shared queries and runs their evaluations."""

    def __init__(
        self,
        evaluate: Evaluate,
        source: PrometheusSource,
        telemetry: Telemetry,
        *,
        max_concurrency: int = 64,
        deadline_s: float = 10.0,
        batch_window_s: float = 1.0,
        max_age_s: float = 15.0,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.evaluate = evaluate
        self.source = source
        self.telemetry = telemetry
        self.max_concurrency = max_concurrency
        self.deadline_s = deadline_s
        self.batch_window_s = batch_window_s
        self.max_age_s = max_age_s
        self.clock, self.monotonic = clock, monotonic
        self._cond = threading.Condition()
        self._pending: dict[str, Due] = {}  # uid → due, not dispatched
        self._queued: dict[str, Due] = {}  # dispatched, not started
        self._running: set[str] = set()
        self._stopping = False
        self._last_batch = -math.inf  # when the last batch was taken (wall clock)
        self._workers = ThreadPoolExecutor(max_concurrency, thread_name_prefix="evaluate")
        self._thread = threading.Thread(target=self._loop, name="cycle", daemon=True)

    # -- what the wiring calls --------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        with self._cond:
            self._stopping = True
            self._pending.clear()
            self._cond.notify_all()
        self._thread.join(timeout)
        self._workers.shutdown(wait=False, cancel_futures=True)

    def submit(self, due: Due) -> None:
        """`due` is due: evaluated in the next batch (once, however often it is submitted)."""
        with self._cond:
            if self._stopping:
                return
            earlier = self._pending.get(due.uid)
            if earlier is not None:
                due.due_at = min(due.due_at, earlier.due_at)
                due.spec_changed = due.spec_changed or earlier.spec_changed
            self._pending[due.uid] = due
            self._cond.notify_all()

    def forget(self, uid: str) -> None:
        """A deleted InferenceSLA: no longer due."""
        with self._cond:
            self._pending.pop(uid, None)

    def idle(self) -> bool:
        """Nothing due, queued or running (for tests and a clean stop)."""
        with self._cond:
            return not (self._pending or self._queued or self._running)

    # -- the coordinator --------------------------------------------------------------------

    def _ready(self) -> list[Due]:
        """Wait for a batch: what is due and not running, once the oldest has waited
        `batch_window_s` (so that InferenceSLAs falling due close together share queries)
        and a worker is free — no more than the free workers, oldest first, so that every
        batch is asked for when it can start (fresh answers, none held while waiting) — and
        at most one batch per window."""
        with self._cond:
            while not self._stopping:
                self._publish()
                free = self.max_concurrency - len(self._running) - len(self._queued)
                waiting = [d for d in self._pending.values() if d.uid not in self._running]
                if not waiting or free <= 0:
                    self._cond.wait(timeout=1.0)
                    continue
                # At most one batch per window: workers freed one by one would otherwise
                # each start a batch of one (and six queries for it).
                oldest = min(d.due_at for d in waiting)
                ready_at = max(oldest, self._last_batch) + self.batch_window_s
                left = ready_at - self.clock()
                if left > 0:
                    self._cond.wait(timeout=min(left, 1.0))
                    continue
                waiting.sort(key=lambda d: d.due_at)
                taken = waiting[:free]
                for due in taken:
                    del self._pending[due.uid]
                self._last_batch = self.clock()
                return [d for d in taken if not d.stopped()]
            return []

    def _publish(self) -> None:
        """The queue, in the operator's metrics (the caller holds the lock)."""
        waiting = [*self._pending.values(), *self._queued.values()]
        self.telemetry.due.set(len(waiting))
        self.telemetry.running.set(len(self._running))
        oldest = min((d.due_at for d in waiting), default=None)
        self.telemetry.oldest_due.set(max(0.0, self.clock() - oldest) if oldest else 0.0)

    def _loop(self) -> None:
        while True:
            batch = self._ready()
            if not batch:
                if self._stopping:
                    return
                continue
            try:
                self._dispatch(batch)
            except Exception:  # never let the coordinator die: log, and keep serving
                log.exception("dispatching a batch of %d evaluations failed", len(batch))

    def _dispatch(self, batch: list[Due]) -> None:
        now, started = self.clock(), self.monotonic()
        targets = [Target(d.namespace, d.spec) for d in batch if d.spec is not None]
        # Sends the queries and returns: each evaluation waits for its own group's answers.
        snapshot = self.source.fetch(targets, now, started + self.deadline_s)
        self.telemetry.batch_size.observe(len(batch))
        with self._cond:
            for due in batch:
                self._queued[due.uid] = due
        for due in batch:
            self._workers.submit(self._run, due, snapshot)

    def _run(self, due: Due, snapshot: Snapshot) -> None:
        with self._cond:
            self._queued.pop(due.uid, None)
            if due.stopped() or self._stopping:
                return
            self._running.add(due.uid)
        started = self.monotonic()
        self.telemetry.lateness.observe(max(0.0, self.clock() - due.due_at))
        source = CycleSource(
            snapshot, self.source, started + self.deadline_s, self.max_age_s, self.monotonic
        )
        try:
            self.evaluate(due.namespace, due.name, due.uid, due.spec_changed, source)
        except Exception:  # an evaluation's bug must not stop the others
            log.exception("%s/%s: evaluation failed", due.namespace, due.name)
        finally:
            if self.monotonic() - started > self.deadline_s:
                self.telemetry.deadline_exceeded.inc()
            with self._cond:
                self._running.discard(due.uid)
                self._cond.notify_all()
