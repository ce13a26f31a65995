"""A fleet of simulated replicas behind a router, with the lifecycle a Deployment gives them.

- Router (`sim.routing`): least outstanding requests (default), prefix affinity (the replica
  caching the longest prefix of the request, within a load bound) or round robin, over READY
  replicas only; with none ready, requests wait at the router (their client-side TTFT
  includes that wait). Requests a replica refuses (over the context limit) are kept in
  `refused`; `failed_requests` counts them.
- Scaling: new replicas load the model for `startup_s` before they are ready; removed ones
  drain (finish their requests, take no new ones). Starting replicas are removed first.
- GPUs: a fleet may have a limit of its own (`gpu_limit`, in replicas) or draw from GPUs it
  shares with other fleets (`SharedGPUs`: the nodes of a cluster serving several models);
  a replica asks for `gpus_per_replica`. Replicas asked for beyond the free GPUs stay
  Pending (unschedulable) and start when GPUs are freed: a fleet's own at once, shared ones
  at the run loop's next tick (`SharedGPUs.refill`), oldest Pending fleet first, as the
  scheduler retries its queue.
- Knob changes are a rolling update honouring the Deployment's maxSurge and maxUnavailable
  (Kubernetes' defaults 25% and 25%, rounded up and down as the Deployment controller does,
  and maxUnavailable 1 when both resolve to 0): new replicas start with the new flags, old
  ones drain while enough stay available.
- `observation(window_s)` returns the same `Observation` the Prometheus source builds:
  increases over the window of every histogram summed over replicas, window-average gauges;
  for the baselines also the ready replicas' KV-cache usage now and their latest forward
  pass (what Dynamo's workers publish).

Event loop: time advances to the earliest of the next arrival and the replicas' own events
(step ends, becoming ready). Used by the benchmarks (virtual time) and the real-time server.
"""

from __future__ import annotations

import itertools
import math
import operator
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from slascaler.model.histogram import Histogram
from slascaler.model.observation import RECENT_WINDOW_S, Observation
from slascaler.policy.state import (
    DEFAULT_MAX_SURGE,
    DEFAULT_MAX_UNAVAILABLE,
    resolve_max_surge,
    resolve_max_unavailable,
)
from slascaler_sim.engine import Phase, Replica, Request
from slascaler_sim.profiles import CostProfile
from slascaler_sim.recorder import Layout, MetricRecorder
from slascaler_sim.routing import least_outstanding, prefix_affinity

ROUTERS = ("least-outstanding", "prefix-affinity", "round-robin")
_NEXT_EVENT = operator.attrgetter("next_event")  # the event loop's key: a C getter, not a call


@dataclass(frozen=True)
class EngineSettings:
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192


class SharedGPUs:
    """GPUs several fleets draw from: the nodes of a cluster that serves several models."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.fleets: list[Fleet] = []

    @property
    def in_use(self) -> int:
        return sum(f.gpus_in_use for f in self.fleets)

    def free(self) -> int:
        return self.total - self.in_use

    def refill(self) -> None:
        """Start Pending replicas on freed GPUs, the fleet Pending the longest first."""
        waiting = [f for f in self.fleets if f.unschedulable > 0]
        for fleet in sorted(
            waiting, key=lambda f: f.now if f.pending_since is None else f.pending_since
        ):
            fleet.fill()


class Fleet:
    """Replicas, router and clock. All times in seconds of virtual (or wall) time."""

    def __init__(
        self,
        profile: CostProfile,
        replicas: int,
        settings: EngineSettings = EngineSettings(),
        startup_s: float = 60.0,
        router: str = "least-outstanding",
        start: float = 0.0,
        ready_at_start: bool = True,
        gpu_limit: int | None = None,
        max_surge: int | str = DEFAULT_MAX_SURGE,
        max_unavailable: int | str = DEFAULT_MAX_UNAVAILABLE,
        gpus_per_replica: int = 1,
        shared: SharedGPUs | None = None,
        layout: Layout | None = None,
    ) -> None:
        if router not in ROUTERS:
            raise ValueError(f"unknown router {router!r}")
        self.profile = profile
        self.settings = settings
        self.startup_s = startup_s
        self.router = router
        self.now = start
        self.replicas: list[Replica] = []
        # Buckets of the engine release exported (`recorder.LAYOUTS`); every recorder shares it.
        self.layout: Layout = layout or {}
        # Metrics of stopped replicas, so totals never drop.
        self.retired = MetricRecorder(profile.max_model_len, self.layout)
        self.backlog: deque[Request] = deque()  # waiting at the router: no replica ready
        self.finished: list[Request] = []
        self.refused: list[Request] = []  # refused by a replica (HTTP 400), never served
        self._names = itertools.count()
        self._round_robin = 0
        self._arrivals: Iterator[Request] = iter(())
        self._next_arrival: Request | None = None
        # (time, cumulative metrics, ready replicas, waiting requests) at every control tick
        self._snapshots: deque[tuple[float, MetricRecorder, int, int]] = deque()
        self.rolling_restarts = 0
        self.desired = replicas
        self.gpu_limit = gpu_limit
        self.max_surge = max_surge
        self.max_unavailable = max_unavailable
        self.gpus_per_replica = gpus_per_replica
        self.shared = shared
        self.pending_since: float | None = None  # since when replicas wait for GPUs
        if shared is not None:
            shared.fleets.append(self)
        for _ in range(min(replicas, self._free_replicas())):
            self._start_replica(ready_now=ready_at_start)

    # -- inputs -----------------------------------------------------------------------

    def feed(self, arrivals: Iterable[Request]) -> None:
        """The requests to come, sorted by arrival time."""
        self._arrivals = iter(arrivals)
        self._next_arrival = next(self._arrivals, None)

    def scale(self, replicas: int) -> None:
        """Set the desired number of replicas (as `kubectl scale`)."""
        self.desired = replicas
        live = self._live()
        if replicas > len(live):
            self._fill()
            self._roll()
            return
        surplus = len(live) - replicas
        # Starting replicas go first (nothing to drain), then the least loaded ready ones.
        for replica in sorted(live, key=lambda r: (r.phase is Phase.READY, r.outstanding)):
            if surplus == 0:
                break
            replica.drain(self.now)
            surplus -= 1
        self._retire_stopped()
        self._roll()

    def reconfigure(self, settings: EngineSettings) -> None:
        """Change engine flags: a rolling update replaces every replica."""
        if settings == self.settings:
            return
        self.settings = settings
        self.rolling_restarts += 1
        self._roll()

    # -- queries ----------------------------------------------------------------------

    def _live(self) -> list[Replica]:
        """Replicas that count towards the desired number: starting or ready, not draining."""
        return [r for r in self.replicas if r.phase in (Phase.STARTING, Phase.READY)]

    @property
    def unschedulable(self) -> int:
        """Replicas asked for that no GPU is free for (Pending, Unschedulable)."""
        return max(0, self.desired - len(self._live()))

    def _free_replicas(self) -> int:
        """Replicas the free GPUs hold (a large number without any limit)."""
        free = 1 << 30
        if self.gpu_limit is not None:
            free = (self.gpu_limit - self.gpus_in_use) // self.gpus_per_replica
        if self.shared is not None:
            free = min(free, self.shared.free() // self.gpus_per_replica)
        return max(0, free)

    def _fill(self) -> None:
        """Start replicas up to the desired count, as far as free GPUs allow."""
        for _ in range(max(0, min(self.desired - len(self._live()), self._free_replicas()))):
            self._start_replica(ready_now=False)
        if self.unschedulable == 0:
            self.pending_since = None
        elif self.pending_since is None:
            self.pending_since = self.now

    def fill(self) -> None:
        """Start Pending replicas that free GPUs now hold (called by `SharedGPUs`)."""
        if not self.outdated_replicas():
            self._fill()

    @property
    def failed_requests(self) -> int:
        """Requests refused by the engines (prompt over the context limit)."""
        return len(self.refused)

    @property
    def ready_replicas(self) -> int:
        return sum(1 for r in self.replicas if r.phase is Phase.READY)

    @property
    def starting_replicas(self) -> int:
        return sum(1 for r in self.replicas if r.phase is Phase.STARTING)

    @property
    def gpus_in_use(self) -> int:
        """GPUs held by replicas that are starting, ready or draining."""
        return self.gpus_per_replica * sum(1 for r in self.replicas if r.phase is not Phase.STOPPED)

    def totals(self) -> MetricRecorder:
        total = self.retired.copy()
        for replica in self.replicas:
            replica.recorder.advance_gauges(self.now)
            total.add(replica.recorder)
        return total

    def snapshot(self) -> None:
        """Remember the cumulative metrics now (call at every control tick)."""
        self._snapshots.append((self.now, self.totals(), self.ready_replicas, self._waiting_now()))
        while len(self._snapshots) > 1 and self._snapshots[1][0] < self.now - 3600:
            self._snapshots.popleft()

    def _waiting_now(self) -> int:
        return sum(len(r.waiting) for r in self.replicas) + len(self.backlog)

    def _snapshot_before(self, seconds: float) -> tuple[float, MetricRecorder, int, int]:
        """The latest snapshot at least `seconds` old (else the oldest; else an empty one)."""
        empty = MetricRecorder(self.profile.max_model_len, self.layout)
        chosen = (self.now, empty, self.ready_replicas, 0)
        for snapshot in self._snapshots:
            if snapshot[0] <= self.now - seconds + 1e-9:
                chosen = snapshot
        if chosen[0] == self.now and self._snapshots:
            chosen = self._snapshots[0]
        return chosen

    def observation(self, window_s: float, recent_s: float = RECENT_WINDOW_S) -> Observation:
        """Increases over the last `window_s` seconds, as the Prometheus source reports them."""
        current = self.totals()
        start_time, earlier, _, _ = self._snapshot_before(window_s)
        # Replicas serving over the window, on average (as the Prometheus source counts them).
        ready = [s[2] for s in self._snapshots if s[0] > start_time] or [self.ready_replicas]
        elapsed = max(1e-9, self.now - start_time)

        def delta(name: str, scale: float = 1000.0) -> Histogram:
            return current.histograms[name].minus(earlier.histograms[name]).to_histogram(scale)

        def rate(name: str, since: MetricRecorder, seconds: float) -> float:
            return (current.counters[name] - since.counters[name]) / seconds

        ttft = delta("vllm:time_to_first_token_seconds")
        serving = [r for r in self.replicas if r.phase is Phase.READY]
        waiting_now = self._waiting_now()
        recent_start, recent, _, waiting_then = self._snapshot_before(recent_s)
        recent_elapsed = self.now - recent_start
        first_tokens = "vllm:time_to_first_token_seconds"
        return Observation(
            observed_at=self.now,
            window_s=elapsed,
            ttft=ttft,
            queue=delta("vllm:request_queue_time_seconds"),
            prefill=delta("vllm:request_prefill_time_seconds"),
            itl=delta("vllm:inter_token_latency_seconds"),
            prompt_tokens=delta("vllm:request_prompt_tokens", 1.0),
            request_rate=ttft.total / elapsed,
            waiting=(current.waiting_integral - earlier.waiting_integral) / elapsed
            + len(self.backlog),
            running=(current.running_integral - earlier.running_integral) / elapsed,
            reporting_pods=round(sum(ready) / len(ready)),
            waiting_now=waiting_now,
            kv_cache_usage_now=sum(r.kv_cache_usage for r in serving),
            forward_passes=tuple(r.forward_pass() for r in serving),
            prompt_token_rate=rate("vllm:prompt_tokens_total", earlier, elapsed)
            - rate("vllm:prompt_tokens_cached_total", earlier, elapsed),
            generation_token_rate=rate("vllm:generation_tokens_total", earlier, elapsed),
            recent_window_s=recent_elapsed,
            recent_request_rate=(
                current.histograms[first_tokens].observations
                - recent.histograms[first_tokens].observations
            )
            / recent_elapsed
            if recent_elapsed > 0
            else math.nan,
            recent_waiting_growth=(waiting_now - waiting_then) / recent_elapsed
            if recent_elapsed > 0
            else math.nan,
        )

    # -- the event loop ----------------------------------------------------------------

    def run_until(self, until: float) -> None:
        while True:
            arrival = self._next_arrival.arrival if self._next_arrival else math.inf
            replica = min(self.replicas, key=_NEXT_EVENT, default=None)
            own = replica.next_event if replica is not None else math.inf
            if min(arrival, own) > until:
                break
            if arrival <= own:
                assert self._next_arrival is not None
                self.now = arrival
                request = self._next_arrival
                self._next_arrival = next(self._arrivals, None)
                self._route(request)
            else:
                assert replica is not None
                self.now = own
                was_starting = replica.phase is Phase.STARTING
                replica.handle_event(own)
                if was_starting:
                    self._on_ready()
                self._collect(replica)
        self.now = until

    def _collect(self, replica: Replica) -> None:
        if replica.finished:
            self.finished.extend(replica.finished)
            replica.finished.clear()
        if replica.phase is Phase.STOPPED:
            self._retire_stopped()

    def _route(self, request: Request) -> None:
        ready = [r for r in self.replicas if r.phase is Phase.READY]
        if not ready:
            self.backlog.append(request)
            return
        if self.router == "round-robin":
            target = ready[self._round_robin % len(ready)]
            self._round_robin += 1
        elif self.router == "prefix-affinity":
            target = prefix_affinity(ready, request)
        else:
            target = least_outstanding(ready)
        target.submit(request, self.now)
        if target.refused:
            self.refused.extend(target.refused)
            target.refused.clear()

    def _on_ready(self) -> None:
        """A replica became ready: it takes the router's backlog, and a rollout may go on."""
        if any(r.phase is Phase.READY for r in self.replicas):
            while self.backlog:
                self._route(self.backlog.popleft())
        self._roll()

    # -- lifecycle --------------------------------------------------------------------

    def _start_replica(
        self, ready_now: bool, name: str | None = None, settings: EngineSettings | None = None
    ) -> Replica:
        settings = settings or self.settings
        replica = Replica(
            name=name or f"engine-{next(self._names)}",
            profile=self.profile,
            max_num_seqs=settings.max_num_seqs,
            max_num_batched_tokens=settings.max_num_batched_tokens,
            ready_at=self.now if ready_now else self.now + self.startup_s,
        )
        if self.layout:
            replica.recorder = MetricRecorder(self.profile.max_model_len, self.layout)
        replica.recorder.gauge_time = self.now
        if ready_now:
            replica.handle_event(self.now)
        self.replicas.append(replica)
        return replica

    def outdated_replicas(self) -> list[Replica]:
        """Live replicas still running with other engine flags than the fleet's."""
        wanted = (self.settings.max_num_seqs, self.settings.max_num_batched_tokens)
        return [r for r in self._live() if (r.max_num_seqs, r.max_num_batched_tokens) != wanted]

    def _roll(self) -> None:
        """One round of a rolling update: drain old replicas while enough stay available,
        start new ones within the surge."""
        outdated = self.outdated_replicas()
        if not outdated:
            return
        current = [r for r in self._live() if r not in outdated]
        surge = resolve_max_surge(self.max_surge, self.desired)
        unavailable = resolve_max_unavailable(self.max_unavailable, self.desired)
        if surge == 0 and unavailable == 0:
            unavailable = 1  # as the Deployment controller: a rollout must be able to proceed
        floor_available = self.desired - unavailable
        for replica in sorted(outdated, key=lambda r: r.phase is Phase.READY):
            ready = sum(1 for r in (*current, *outdated) if r.phase is Phase.READY)
            after = ready - (replica.phase is Phase.READY)
            # Keep availability: drain below the floor only a starting replica of a surplus.
            surplus = len(current) + len(outdated) > self.desired
            if after < floor_available and (replica.phase is Phase.READY or not surplus):
                break
            replica.drain(self.now)
            outdated.remove(replica)
        room = self.desired + surge - len(current) - len(outdated)
        if self.gpu_limit is not None or self.shared is not None:
            room = min(room, self._free_replicas())
        for _ in range(max(0, min(self.desired - len(current), room))):
            current.append(self._start_replica(ready_now=False))
        self._retire_stopped()

    @property
    def rollout_in_progress(self) -> bool:
        return bool(self.outdated_replicas())

    def _retire_stopped(self) -> None:
        for replica in [r for r in self.replicas if r.phase is Phase.STOPPED]:
            replica.recorder.advance_gauges(self.now)
            self.retired.add(replica.recorder)
            self.finished.extend(replica.finished)
            self.replicas.remove(replica)
        if self.shared is None and self.gpu_limit is not None and not self.outdated_replicas():
            self._fill()  # shared GPUs are refilled between ticks, across fleets (`SharedGPUs`)
