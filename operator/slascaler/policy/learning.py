"""What one window teaches the policy: the load in tokens, and the memory updated with it.

- `window_load` turns an observation into work (tokens/s computed prompt + generated),
  the tokens one request brings, the arrivals now (served + growth of the waiting
  requests over the short window, where requests queued in the window or where it shows a
  burst: more than the whole window by more than its noise, or a queue that grows) and the
  backlog.
- `learn` returns the memory with this window recorded: a `LoadPoint` when the fleet was
  steady over the window (a count that did not change, no backlog hiding the arrivals, at
  the current knob values — the points of other knob values are dropped, they describe
  another engine; with the window's tokens per request) and its batch slots did not bind
  (`slots_bind`), the replica's saturated throughput (from the step cost, falling more
  slowly than it rises, as contention makes it read low; and from the served work when a
  backlog shows the replicas saturated), the load history for the trend, how far the last
  forecast was off, and how long the last scale-up took to be ready.

Pure; called by `policy.decide`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from slascaler.model.latency import LoadPoint, step_capacity
from slascaler.model.observation import Observation
from slascaler.model.regime import RegimeAnalysis
from slascaler.policy.state import FleetState, PolicyMemory
from slascaler.policy.tunables import Tunables
from slascaler.spec import SLASpec

SATURATED_WAITING_PER_POD = 2.0
QUEUED_PER_POD = 1.0  # waiting requests per pod, on average over a window, that make a backlog
SHORT_WINDOW_SIGMAS = 2.0  # a short window's excess over the whole one that is a burst
ASSUMED_CHUNK = 2048  # vLLM's token budget on smaller GPUs, the lowest of its defaults


@dataclass(frozen=True)
class WindowLoad:
    """One window's load, all pods together."""

    pods: int  # pods that served it
    requests_per_s: float  # requests served (first tokens) per second
    tokens_per_request: float  # computed prompt + generated tokens a request brings
    arrivals_per_s: float  # requests arriving per second now (short window in a burst)
    backlog: float  # requests waiting now

    @property
    def work(self) -> float:
        """Tokens/s of work served over the window."""
        return self.requests_per_s * self.tokens_per_request

    @property
    def arriving_work(self) -> float:
        return self.arrivals_per_s * self.tokens_per_request

    @property
    def backlog_work(self) -> float:
        return self.backlog * self.tokens_per_request

    @property
    def work_per_pod(self) -> float:
        return self.work / max(1, self.pods)


def _finite(*values: float) -> bool:
    return all(math.isfinite(v) for v in values)


def tokens_per_request(observation: Observation) -> float | None:
    """Computed prompt + generated tokens per request served; from the token counters, else
    the prompt-length histogram (the output then unknown: counted as one token)."""
    rate = observation.request_rate
    if not rate > 0:
        return None
    prompt, generated = observation.prompt_token_rate, observation.generation_token_rate
    if _finite(prompt, generated) and prompt + generated > 0:
        return (prompt + generated) / rate
    prompts = observation.prompt_tokens
    if prompts is not None and prompts.count > 0 and math.isfinite(prompts.mean):
        return prompts.mean + 1.0
    return None


def window_load(observation: Observation, use_short_window: bool) -> WindowLoad | None:
    per_request = tokens_per_request(observation)
    if per_request is None:
        return None
    pods = max(1, observation.reporting_pods)
    arrivals = observation.request_rate
    recent, growth = observation.recent_request_rate, observation.recent_waiting_growth
    if use_short_window and _finite(recent, growth) and observation.recent_window_s > 0:
        # Requests arrive into the queue or start: arrivals = first tokens + the queue's
        # growth. While a backlog drains, both served rates carry the drain on top of the
        # arrivals (counted again as the backlog to drain): the conservation alone says. So
        # too wherever requests queued in the whole window: its first tokens are what the
        # replicas served, not what arrived (the step scenario, 30 s after its backlog had
        # drained: 27.9 requests/s served over the window, 23.0 arriving).
        recent_arrivals = max(0.0, recent + growth)
        queued = observation.waiting / pods >= QUEUED_PER_POD  # NaN: no
        if growth < 0 or queued:
            arrivals = recent_arrivals
        elif _burst_seen(arrivals, recent_arrivals, recent, growth, observation, pods):
            arrivals = max(arrivals, recent_arrivals)
    backlog = max((v for v in (observation.waiting_now, 0.0) if math.isfinite(v)), default=0.0)
    return WindowLoad(pods, observation.request_rate, per_request, arrivals, backlog)


def _burst_seen(
    arrivals: float,
    recent_arrivals: float,
    recent: float,
    growth: float,
    observation: Observation,
    pods: int,
) -> bool:
    """The short window shows more arrivals than the whole one by more than its own noise
    (two standard deviations of a Poisson count of its requests), or the queue grew by a
    request per pod in it. Otherwise the whole window stands: it counts twice the requests,
    and the larger of two estimates of one rate sized a steady load above itself (the
    shared-prefixes scenario, seed 2, went from 3 replicas to 4 and back three times in its
    second half hour, where 3 met every window; once with this test)."""
    counted = recent * observation.recent_window_s
    noise = SHORT_WINDOW_SIGMAS / math.sqrt(counted) if counted > 0 else math.inf
    grew = growth * observation.recent_window_s >= pods
    return grew or recent_arrivals > arrivals * (1 + noise)


def _steady(
    fleet: FleetState,
    memory: PolicyMemory,
    observation: Observation,
    load: WindowLoad,
    now: float,
    tunables: Tunables,
    ttft_ms: float,
) -> bool:
    """The window saw one replica count, serving what arrived (no backlog hiding it): every
    request whose first token falls in the window arrived after the last change and after
    the fleet last looked unsettled (a request that queued before a scale-up and finished
    after it would tie the new count to the old count's queue; a window that began before
    the new pods were ready would tie it to the old count's latency)."""
    last_change = max(
        (t for t in (memory.last_scale_up_at, memory.last_scale_down_at,
                     memory.last_knob_change_at, memory.unsettled_at) if t is not None),
        default=-math.inf,
    )  # fmt: skip
    return (
        serving_steadily(fleet, observation, load, tunables)
        and now - last_change >= observation.window_s + ttft_ms / 1000
    )


def serving_steadily(
    fleet: FleetState, observation: Observation, load: WindowLoad, tunables: Tunables
) -> bool:
    """The fleet is settled, every ready pod served the window, and no backlog hid the
    arrivals, over the window or at its end."""
    waiting = observation.waiting if math.isfinite(observation.waiting) else math.inf
    return (
        _settled(fleet)
        and observation.reporting_pods == fleet.ready_replicas
        and load.backlog / load.pods < tunables.steady_waiting_per_pod
        and waiting / load.pods < tunables.steady_waiting_per_pod
    )


def slots_bind(observation: Observation, max_batch: int | None, tunables: Tunables) -> bool:
    """The requests running over the window, with `slot_scatter` standard deviations of
    their Poisson scatter, overflow the pods' batch slots (`max_batch` each): requests wait
    for a slot. The latency model reads a window's TTFT as contention for tokens, and such a
    wait is none: a replica at a quarter of its token throughput waited seconds in the e2e
    load step (max batch 16, 59 requests running on 4 replicas), and those windows made
    every later one's TTFT of 100 ms look like luck. The slot sizing covers them instead
    (`sizing._slot_replicas`)."""
    running = observation.running
    if max_batch is None or max_batch <= 0 or not (math.isfinite(running) and running > 0):
        return False
    spread = running + tunables.slot_scatter * math.sqrt(running)
    return spread > max(1, observation.reporting_pods) * max_batch


def _settled(fleet: FleetState) -> bool:
    """Every pod asked for is ready, none starting, stuck or being replaced."""
    return (
        fleet.starting_pods == 0
        and fleet.unschedulable_pods == 0
        and not fleet.rollout_in_progress
        and fleet.ready_replicas == fleet.spec_replicas
    )


def _saturated(observation: Observation, load: WindowLoad) -> bool:
    """Requests pile up although every replica is at work: they serve at capacity (seen as
    a backlog that grows, or, without the short window, one that stayed over the window)."""
    growth, waiting = observation.recent_waiting_growth, observation.waiting
    if load.backlog / load.pods < SATURATED_WAITING_PER_POD:
        return False
    if math.isfinite(growth):
        return growth > 0
    return math.isfinite(waiting) and waiting / load.pods >= SATURATED_WAITING_PER_POD


def _capacity(
    memory: PolicyMemory,
    observation: Observation,
    analysis: RegimeAnalysis,
    load: WindowLoad,
    chunk: int | None,
    tunables: Tunables,
) -> float | None:
    """The replica's token throughput with full steps, learned."""
    rate = tunables.capacity_learning_rate
    current = memory.capacity
    if _saturated(observation, load) and load.work_per_pod > 0:
        measured = load.work_per_pod
        return measured if current is None else current + rate * (measured - current)
    prior = None
    itl, prefill = observation.itl, observation.prefill
    # Without the flag, a budget at the low end of engines' defaults: the capacity errs low.
    chunk = chunk if chunk is not None else ASSUMED_CHUNK
    if itl is not None and itl.count > 0 and prefill is not None:
        computed_prompt = load.tokens_per_request
        if _finite(observation.generation_token_rate) and load.requests_per_s > 0:
            computed_prompt -= observation.generation_token_rate / load.requests_per_s
        prior = step_capacity(
            analysis.component_means_ms["prefill"],
            computed_prompt,
            chunk,
            observation.running / load.pods if math.isfinite(observation.running) else 0.0,
            itl.mean,
        )
    if prior is None:
        return current
    if current is not None and prior < current:
        # Contention inflates the window's prefill time and so the step cost: a busier window
        # reads a lower capacity that is not there. The estimate falls only slowly on such
        # evidence (a saturated window, above, measures the capacity itself).
        rate = tunables.capacity_fall_rate
    estimate = prior if current is None else current + rate * (prior - current)
    # The replicas served this much: their capacity is at least a little more.
    return max(estimate, load.work_per_pod * 1.05)


def learn(
    spec: SLASpec,
    fleet: FleetState,
    memory: PolicyMemory,
    observation: Observation,
    analysis: RegimeAnalysis,
    load: WindowLoad,
    now: float,
    tunables: Tunables,
) -> PolicyMemory:
    """The memory with this window recorded (see the module docstring)."""
    knobs = (fleet.max_batch_size, fleet.chunk_size)
    points = memory.load_points if memory.points_knobs == knobs else ()
    capacity = memory.capacity if memory.points_knobs == knobs else None
    base = replace(memory, load_points=points, capacity=capacity, points_knobs=knobs)
    if (
        math.isfinite(analysis.ttft_ms)
        and _steady(fleet, base, observation, load, now, tunables, analysis.ttft_ms)
        and not slots_bind(observation, fleet.max_batch_size, tunables)
    ):
        point = LoadPoint(
            now, load.work_per_pod, analysis.ttft_ms, analysis.itl_ms, load.pods,
            load.tokens_per_request,
        )  # fmt: skip
        points = tuple(p for p in (*points, point) if now - p.at <= tunables.load_points_max_age_s)[
            -tunables.load_points_kept :
        ]
    history = tuple(
        (t, w) for t, w in (*memory.load_history, (now, load.arriving_work))
        if now - t <= max(tunables.trend_window_s, tunables.burst_memory_s)
    )[-tunables.load_history_kept :]  # fmt: skip
    error = memory.forecast_error
    if memory.forecast is not None and now >= memory.forecast[0] and load.arriving_work > 0:
        miss = abs(load.arriving_work - memory.forecast[1]) / load.arriving_work
        error += tunables.forecast_error_learning_rate * (min(miss, 1.0) - error)
    forecast = memory.forecast if memory.forecast is None or now < memory.forecast[0] else None
    startup = memory.startup_s
    up = memory.last_scale_up_at
    if up is not None and fleet.starting_pods == 0 and fleet.spec_replicas == fleet.ready_replicas:
        took = now - up
        if took > 0 and (startup is None or took < startup * 3) and memory.startup_for != up:
            startup = took
            base = replace(base, startup_for=up)
    capacity = _capacity(base, observation, analysis, load, fleet.chunk_size, tunables)
    # Estimates made at other knob values went with their capacity (`base`).
    estimates = base.capacity_history if base.capacity is not None else ()
    if capacity is not None:
        estimates = tuple(
            (t, c) for t, c in (*estimates, (now, capacity))
            if now - t <= tunables.capacity_memory_s
        )  # fmt: skip
    return replace(
        base,
        unsettled_at=memory.unsettled_at if _settled(fleet) else now,
        load_points=points,
        capacity=capacity,
        capacity_history=estimates,
        load_history=history,
        forecast=forecast,
        forecast_error=error,
        startup_s=startup,
    )
