"""The evaluation cycle: InferenceSLAs falling due together share one batch of queries, run
concurrently up to a limit, each within a deadline; a slow group of queries delays only its
own evaluations; one InferenceSLA never runs twice at once; the queue shows in the metrics."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from builders import spec as make_spec
from fake_prometheus import (
    Behaviour,
    FakePrometheus,
    Pod,
    Reply,
    engine_answer,
    fake_prometheus,
    vllm_pod,
)
from slascaler.cycle import Cycle, Due
from slascaler.metrics.prometheus import PrometheusSettings, PrometheusSource, Target
from slascaler.metrics.source import MetricSource
from slascaler.model.observation import Observation
from slascaler.telemetry import Telemetry


def poll(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.01)


class Recorder:
    """An `evaluate` that observes through the source it is handed, and can be held."""

    def __init__(self, hold: threading.Event | None = None) -> None:
        self.lock = threading.Lock()
        self.observations: dict[str, Observation] = {}
        self.finished_at: dict[str, float] = {}
        self.calls: list[str] = []
        self.running: set[str] = set()
        self.most_at_once = 0
        self.twice_at_once = False
        self.hold = hold

    def __call__(
        self, namespace: str, name: str, uid: str, spec_changed: bool, source: MetricSource
    ) -> None:
        with self.lock:
            self.twice_at_once |= uid in self.running
            self.running.add(uid)
            self.calls.append(uid)
            self.most_at_once = max(self.most_at_once, len(self.running))
        try:
            if self.hold is not None:
                assert self.hold.wait(10)
            spec = make_spec(targetRef={"name": name}, engine=ENGINE.get(uid, "vllm"))
            observation = source.observe(namespace, spec, time.time())
        finally:
            with self.lock:
                self.running.discard(uid)
        with self.lock:
            self.observations[uid] = observation
            self.finished_at[uid] = time.monotonic()


ENGINE: dict[str, str] = {}


@dataclass
class Bed:
    cycle: Cycle
    telemetry: Telemetry
    source: PrometheusSource
    prometheus: FakePrometheus


def serving(pods: list[Pod]) -> Behaviour:
    return lambda query, _: Reply(200, engine_answer(query, pods))


@contextmanager
def running_cycle(evaluate: Recorder, behaviour: Behaviour, **options: float) -> Iterator[Bed]:
    """A fake Prometheus answering with `behaviour`, and a cycle reading from it."""
    with fake_prometheus(behaviour) as prometheus, _cycle(evaluate, prometheus, **options) as bed:
        yield bed


@contextmanager
def _cycle(evaluate: Recorder, prometheus: FakePrometheus, **options: float) -> Iterator[Bed]:
    telemetry = Telemetry()
    settings = PrometheusSettings(prometheus.url, retries=0, recording_rules=False)
    source = PrometheusSource(settings)
    cycle = Cycle(
        evaluate,
        source,
        telemetry,
        max_concurrency=int(options.get("max_concurrency", 8)),
        deadline_s=options.get("deadline_s", 5.0),
        batch_window_s=options.get("batch_window_s", 0.2),
    )
    cycle.start()
    try:
        yield Bed(cycle, telemetry, source, prometheus)
    finally:
        cycle.stop()


def due(namespace: str, name: str, uid: str | None = None, engine: str = "vllm") -> Due:
    spec = make_spec(targetRef={"name": name}, engine=engine)
    uid = uid or f"{namespace}/{name}"
    ENGINE[uid] = engine
    return Due(namespace, name, uid, spec, time.time())


def deployments() -> list[tuple[str, str]]:
    return [(f"team-{n}", f"model-{i}") for n in range(3) for i in range(10)]


def test_inference_slas_due_together_share_one_batch_of_queries() -> None:
    pods = [
        vllm_pod(f"{name}-6d4cf56db6-x7k2p", 10 + i, namespace=namespace)
        for i, (namespace, name) in enumerate(deployments())
    ]
    recorder = Recorder()
    with running_cycle(recorder, serving(pods), max_concurrency=32) as bed:
        for namespace, name in deployments():
            bed.cycle.submit(due(namespace, name))
        poll(lambda: len(recorder.observations) == 30, 10, "30 evaluations")
        batched = len(bed.prometheus.queries)
        for i, (namespace, name) in enumerate(deployments()):
            ours = recorder.observations[f"{namespace}/{name}"]
            spec = make_spec(targetRef={"name": name})
            alone = bed.source.observe_target(Target(namespace, spec), ours.observed_at)
            assert ours.ttft is not None and ours.ttft.total == 10 + i
            for field in ("ttft", "queue", "prefill", "itl", "waiting", "running",
                          "prompt_token_rate", "generation_token_rate", "recent_request_rate",
                          "recent_waiting_growth"):  # fmt: skip
                assert getattr(ours, field) == getattr(alone, field), field
    assert batched == 7, "one query per histogram family, the gauges, the counters, for all 30"
    sizes = {s.name: s.value for s in bed.telemetry.batch_size.collect()[0].samples}
    assert sizes["slascaler_evaluation_batch_size_sum"] == 30


def test_evaluations_run_concurrently_up_to_the_limit() -> None:
    hold = threading.Event()
    recorder = Recorder(hold)
    with running_cycle(recorder, serving([vllm_pod()]), max_concurrency=3) as bed:
        for i in range(10):
            bed.cycle.submit(due("ns", "llama", uid=f"uid-{i}"))
        poll(lambda: len(recorder.running) == 3, 5, "3 evaluations running")
        poll(lambda: bed.telemetry.running._value.get() == 3, 5, "3 shown as running")
        poll(lambda: bed.telemetry.due._value.get() == 7, 5, "7 evaluations shown as due")
        time.sleep(0.2)  # give a fourth the chance to start, were the limit not kept
        assert len(recorder.running) == 3
        hold.set()
        poll(lambda: len(recorder.observations) == 10, 10, "all 10 evaluated")
    assert recorder.most_at_once == 3
    batches = {s.name: s.value for s in bed.telemetry.batch_size.collect()[0].samples}
    assert batches["slascaler_evaluation_batch_size_count"] >= 4, (
        "batches no larger than the free workers (10 due, 3 workers)"
    )


def test_a_slow_group_of_queries_delays_only_its_own_evaluations() -> None:
    """SGLang's queries stall; the vLLM InferenceSLAs of the same batch are evaluated at once,
    the SGLang ones give up at their deadline with the reason."""
    pods = [vllm_pod()]

    def behaviour(query: str, count: int) -> Reply:
        if "sglang:" in query:
            return Reply(200, engine_answer(query, []), delay_s=8.0)
        return Reply(200, engine_answer(query, pods))

    recorder = Recorder()
    with running_cycle(recorder, behaviour, deadline_s=3.0) as bed:
        started = time.monotonic()
        bed.cycle.submit(due("ns", "llama", uid="slow", engine="sglang"))
        bed.cycle.submit(due("ns", "llama", uid="fast"))
        poll(lambda: len(recorder.observations) == 2, 10, "both evaluated")
    fast, slow = recorder.observations["fast"], recorder.observations["slow"]
    assert fast.source_error is None and fast.ttft is not None
    assert recorder.finished_at["fast"] - started < 2.5, "not held by the slow group"
    assert slow.source_error is not None and "deadline" in slow.source_error
    assert 2.9 < recorder.finished_at["slow"] - started < 7.0, "its deadline, not the stall"


def test_one_inference_sla_is_never_evaluated_twice_at_once() -> None:
    hold = threading.Event()
    recorder = Recorder(hold)
    with running_cycle(recorder, serving([vllm_pod()])) as bed:
        bed.cycle.submit(due("ns", "llama", uid="one"))
        poll(lambda: "one" in recorder.running, 5, "the first evaluation running")
        for _ in range(5):  # its timer fires again (and again) while it runs
            bed.cycle.submit(due("ns", "llama", uid="one"))
        time.sleep(0.4)
        assert recorder.calls == ["one"]
        hold.set()
        poll(lambda: len(recorder.calls) == 2 and bed.cycle.idle(), 5, "one more evaluation")
    assert not recorder.twice_at_once and recorder.calls == ["one", "one"]


def test_the_queue_and_its_lateness_show_in_the_metrics() -> None:
    hold = threading.Event()
    recorder = Recorder(hold)
    with running_cycle(recorder, serving([vllm_pod()]), max_concurrency=1) as bed:
        telemetry = bed.telemetry
        for i in range(3):
            bed.cycle.submit(due("ns", "llama", uid=f"uid-{i}"))
        poll(lambda: telemetry.due._value.get() == 2, 5, "2 due behind the running one")
        poll(lambda: telemetry.oldest_due._value.get() >= 0.3, 5, "the oldest waiting")
        hold.set()
        poll(lambda: len(recorder.observations) == 3, 5, "all evaluated")
    lateness = {s.name: s.value for s in telemetry.lateness.collect()[0].samples}
    assert lateness["slascaler_evaluation_lateness_seconds_count"] == 3
    assert lateness["slascaler_evaluation_lateness_seconds_sum"] >= 0.6, "two waited ≥ 0.3 s"


def test_an_inference_sla_whose_timer_stopped_is_dropped() -> None:
    recorder = Recorder()
    with running_cycle(recorder, serving([])) as bed:
        stopped = due("ns", "llama", uid="paused")
        stopped.stopped = lambda: True
        bed.cycle.submit(stopped)
        bed.cycle.submit(due("ns", "other", uid="live"))
        poll(lambda: "live" in recorder.observations, 5, "the live one evaluated")
        poll(bed.cycle.idle, 5, "the cycle idle")
    assert "paused" not in recorder.calls
