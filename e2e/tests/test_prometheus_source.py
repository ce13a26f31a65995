"""The Prometheus MetricSource against a real Prometheus scraping simulated vLLM engines.

- Quantiles computed from the source's histograms equal Prometheus's own
  `histogram_quantile` over the same series and window.
- The regime flips from PrefillBound to QueueBound as the simulated load rises.
- Only the target Deployment's pods are read: not a neighbouring workload's in the same
  namespace, and the pod pattern matches the names real controllers give long Deployments.
- No label value written in an InferenceSLA reads another namespace's series or injects
  PromQL: every attempt gets this namespace's series or none, never a query error.
- Missing series hold with a problem naming the metric.
- A batch of InferenceSLAs (one query per metric family, split per target in the client)
  gives each the observation its own queries give, to 1e-9.
- A pod scraped under two addresses is counted once.
- A fleet younger than the window reads its rates over the seconds it served, not the window.
- Each engine release's series (vLLM 0.33 and 0.10, SGLang 0.5.23 and 0.5.2, TGI), with its
  own names, labels and buckets, are read, and what the release lacks is said; so are its
  token counters (prompt and generated tokens per second) and the recent window's requests
  and waiting growth, equal to Prometheus's own `increase` of the same series.
"""

from __future__ import annotations

import io
import itertools
import math
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace

import pytest
from e2e.cluster.processes import poll
from e2e.cluster.prometheus import PrometheusServer, Target
from e2e.engine_formats import ENGINE, RELEASES, EngineFormatFleet, layout
from e2e.engines import Load, _Arrivals
from e2e.kube import Kube, gpu_deployment

from slascaler.cli import main
from slascaler.metrics.prometheus import PrometheusSettings, PrometheusSource
from slascaler.metrics.prometheus import Target as SLATarget
from slascaler.metrics.promql import PodSelector, deployment_pod_pattern, histogram_queries
from slascaler.model.observation import Observation
from slascaler.model.regime import Regime, analyze_observation
from slascaler.spec import Engine, SLASpec, TargetRef, parse_spec
from slascaler_sim.exposition import RealtimeFleet
from slascaler_sim.fleet import EngineSettings, Fleet
from slascaler_sim.profiles import PROFILES

WINDOW_S = 30


def sla(name: str = "llama", threshold_ms: float = 300, itl: bool = True) -> SLASpec:
    objectives: dict[str, object] = {"ttft": {"percentile": 95, "thresholdMs": threshold_ms}}
    if itl:
        objectives["itl"] = {"percentile": 95, "thresholdMs": 200}
    return parse_spec(
        {"targetRef": {"name": name}, "objectives": objectives, "window": f"{WINDOW_S}s"}
    )


class ServedFleet:
    """A simulated fleet in real time, its replicas scraped as pods of one Deployment."""

    def __init__(
        self,
        prometheus: PrometheusServer,
        namespace: str,
        pods: Sequence[str],
        settings: EngineSettings,
        load: Load,
        key: str,
    ) -> None:
        self.fleet = Fleet(PROFILES["llama3-8b-a100"], len(pods), settings)
        self.server = RealtimeFleet(self.fleet)
        self.prometheus, self.key = prometheus, key
        self.ids = itertools.count()
        self.set_load(load)
        self.server.__enter__()
        engines = [r.name for r in self.fleet.replicas]
        prometheus.set_targets(
            "engines",
            [
                Target(
                    f"127.0.0.1:{self.server.port}",
                    {"__metrics_path__": f"/metrics/{engine}", "namespace": namespace, "pod": pod},
                )
                for engine, pod in zip(engines, pods, strict=True)
            ],
            key,
        )

    def set_load(self, load: Load) -> None:
        with self.server.lock:
            now = self.server.clock() - self.server._origin
            self.fleet.run_until(now)
            self.fleet.feed(_Arrivals(load, self.fleet.now, next(self.ids) + 1, self.ids))

    def close(self) -> None:
        self.prometheus.set_targets("engines", [], self.key)
        self.server.__exit__()


@pytest.fixture
def source(prometheus: PrometheusServer) -> PrometheusSource:
    return PrometheusSource(PrometheusSettings(url=prometheus.url, timeout_s=5, retries=1))


@pytest.fixture
def team_a(prometheus: PrometheusServer) -> Iterator[ServedFleet]:
    served = ServedFleet(
        prometheus, "team-a", ["llama-6d4cf56db6-x7k2p", "llama-6d4cf56db6-q9zt4"],
        EngineSettings(16, 512), Load(rate=1.0, prompt=4000, output=50), "team-a",
    )  # fmt: skip
    yield served
    served.close()


@pytest.fixture
def team_b(prometheus: PrometheusServer) -> Iterator[ServedFleet]:
    served = ServedFleet(
        prometheus, "team-b", ["llama-7f9b8c6d5-bcdfg"],
        EngineSettings(64, 2048), Load(rate=3.0, prompt=200, output=20), "team-b",
    )  # fmt: skip
    yield served
    served.close()


def settled_instant() -> float:
    """An instant whose samples are all in, for two reads that must see the same data: a
    scrape's samples carry its start time but land when it ends (up to its timeout, 1 s in
    this suite, later), so at `now` a scrape still running can add one between the reads (a
    CI run saw the median TTFT move 0.36794 → 0.36807 s between the source's read and
    Prometheus's). Five scrape intervals back."""
    return time.time() - 5.0


def wait_for_window(
    source: PrometheusSource, namespace: str, spec: SLASpec, requests: float, what: str
) -> Observation:
    """Poll the source until a window has every input and at least `requests` requests."""

    def enough() -> Observation | None:
        observation = source.observe(namespace, spec, settled_instant())
        ok = (
            not observation.missing_inputs(need_itl=True)
            and observation.ttft is not None
            and observation.ttft.total >= requests
            and observation.reporting_pods >= 1
        )
        return observation if ok else None

    return poll(enough, timeout=90, what=what)


def test_quantiles_equal_prometheus_histogram_quantile(
    prometheus: PrometheusServer, source: PrometheusSource, team_a: ServedFleet
) -> None:
    spec = sla()
    wait_for_window(source, "team-a", spec, requests=20, what="a window of requests in Prometheus")
    at = settled_instant()
    observation = source.observe("team-a", spec, at)
    selector = PodSelector("team-a", "llama")
    for metric, histogram in (
        ("vllm:time_to_first_token_seconds", observation.ttft),
        ("vllm:request_queue_time_seconds", observation.queue),
        ("vllm:request_prefill_time_seconds", observation.prefill),
        ("vllm:inter_token_latency_seconds", observation.itl),
    ):
        assert histogram is not None
        buckets = histogram_queries(metric, selector, WINDOW_S).buckets
        for q in (0.5, 0.95, 0.99):
            theirs = prometheus.query(f"histogram_quantile({q}, {buckets})", at=at)
            ours = histogram.quantile(q) / 1000.0
            assert float(theirs[0]["value"][1]) == pytest.approx(ours, rel=1e-9), (metric, q)
    assert observation.reporting_pods == 2
    assert observation.request_rate == pytest.approx(1.0, rel=0.6)


def test_regime_flips_from_prefill_bound_to_queue_bound(
    source: PrometheusSource, team_a: ServedFleet
) -> None:
    spec = sla(threshold_ms=300, itl=False)

    def regime() -> Regime:
        observation = source.observe("team-a", spec, time.time())
        if observation.missing_inputs(need_itl=False):
            return Regime.UNKNOWN
        return analyze_observation(observation, 95, 300).regime

    poll(lambda: regime() is Regime.PREFILL_BOUND, timeout=90, what="PrefillBound at 1 req/s")
    team_a.set_load(Load(rate=12.0, prompt=4000, output=50))
    poll(lambda: regime() is Regime.QUEUE_BOUND, timeout=90, what="QueueBound at 12 req/s")


def test_pods_of_other_workloads_in_the_namespace_are_not_read(
    prometheus: PrometheusServer, source: PrometheusSource, team_a: ServedFleet
) -> None:
    """A StatefulSet `llama-db` (pod `llama-db-0`) and a Deployment `llama-chat` beside the
    Deployment `llama`: Prometheus scrapes all three, the source reads only `llama`'s pods."""
    neighbours = ServedFleet(
        prometheus, "team-a", ["llama-db-0", "llama-chat-6d4cf56db6-x7k2p"],
        EngineSettings(16, 512), Load(rate=1.0, prompt=200, output=20), "team-a-neighbours",
    )  # fmt: skip
    try:
        # Pods, not series: the previous test's engines (same pod names, another scrape
        # address) may still have a series or two until Prometheus marks them stale.
        scraped = 'count(count by (pod) (vllm:num_requests_running{namespace="team-a"}))'
        poll(
            lambda: (reply := prometheus.query(scraped)) and reply[0]["value"][1] == "4",
            timeout=60,
            what="the 4 pods of team-a scraped",
        )
        matchers = PodSelector("team-a", "llama").matchers()
        selected = f"count(count by (pod) (vllm:num_requests_running{matchers}))"
        assert prometheus.query(selected)[0]["value"][1] == "2"
        observation = wait_for_window(
            source, "team-a", sla(), requests=1, what="llama's series in Prometheus"
        )
        assert observation.reporting_pods == pytest.approx(2, abs=0.05)
    finally:
        neighbours.close()


def test_pod_pattern_matches_the_names_real_controllers_give(kube: Kube, namespace: str) -> None:
    """Names long enough for the API server to cut the template hash (52 characters) or all
    of it (62): the pattern matches the pods the Deployment and ReplicaSet controllers made."""
    names = ["llama-3-1-8b-instruct-chat-completions-eu-west-1-gpu", "llama-" + "x" * 56]
    assert [len(name) for name in names] == [52, 62]
    for name in names:
        kube.apply(gpu_deployment(name, 2), namespace=namespace)
    for name in names:
        pods = poll(
            lambda name=name: (found := kube.pods(namespace, f"app={name}")) and len(found) == 2
            and found,
            timeout=60,
            what=f"2 pods of {name}",
        )  # fmt: skip
        for pod in pods:
            assert len(pod.metadata.name) == 63
            assert re.fullmatch(deployment_pod_pattern(name), pod.metadata.name), pod.metadata.name
            for other in names:
                if other != name:
                    assert not re.fullmatch(deployment_pod_pattern(other), pod.metadata.name)


INJECTIONS = [
    'llama"} or vllm:num_requests_running{namespace="team-b',
    "llama|.*",
    ".*",
    "llama-7f9b8c6d5-bcdfg|llama",
    'llama",namespace=~".+',
    "llama\\",
    "llama\n",
]


@pytest.mark.parametrize("name", INJECTIONS, ids=range(len(INJECTIONS)))
def test_no_spec_value_reads_another_namespace(
    source: PrometheusSource, team_a: ServedFleet, team_b: ServedFleet, name: str
) -> None:
    wait_for_window(source, "team-b", sla(), requests=1, what="team-b's series in Prometheus")
    spec = replace(sla(), target=TargetRef(name=name))
    observation = source.observe("team-a", spec, time.time())
    assert observation.source_error is None, "the query must stay valid PromQL"
    assert observation.ttft is None and observation.reporting_pods == 0
    assert any("no vllm:time_to_first_token_seconds, " in p for p in observation.problems)


@pytest.mark.parametrize("namespace", ['team-b"} or {__name__=~".+', "team-.*", "team-b|team-a"])
def test_no_namespace_value_escapes_its_string(
    source: PrometheusSource, team_b: ServedFleet, namespace: str
) -> None:
    wait_for_window(source, "team-b", sla(), requests=1, what="team-b's series in Prometheus")
    observation = source.observe(namespace, sla(), time.time())
    assert observation.source_error is None
    assert observation.ttft is None and observation.reporting_pods == 0


def test_a_deployment_without_series_holds_with_the_reason(source: PrometheusSource) -> None:
    observation = source.observe("nowhere", sla("ghost"), time.time())
    assert observation.source_error is None
    problems = " ".join(observation.problems)
    assert (
        "no vllm:time_to_first_token_seconds, vllm:request_queue_time_seconds, "
        "vllm:request_prefill_time_seconds, vllm:inter_token_latency_seconds, "
        "vllm:num_requests_running series from pods of ghost in namespace nowhere"
    ) in problems


def test_analyze_command_reads_a_live_deployment(
    prometheus: PrometheusServer, source: PrometheusSource, team_a: ServedFleet
) -> None:
    wait_for_window(source, "team-a", sla(), requests=20, what="a window of requests in Prometheus")
    # Prometheus keeps the series of an earlier test's team-a fleet (same namespace and pod
    # names, driven to 12 req/s) until they leave the 30 s window: wait for this fleet's own.
    spec = sla(threshold_ms=300, itl=False)  # a 30 s window, as analyze's --window

    def prefill_bound() -> bool:
        observation = source.observe("team-a", spec, time.time())
        return not observation.missing_inputs(need_itl=False) and (
            analyze_observation(observation, 95, 300).regime is Regime.PREFILL_BOUND
        )

    poll(prefill_bound, timeout=120, what="the last 30 s PrefillBound at 1 req/s")
    out = io.StringIO()
    argv = ["analyze", "--prometheus", prometheus.url, "--namespace", "team-a",
            "--deployment", "llama", "--window", "30s", "--objective-ms", "300"]  # fmt: skip
    assert main(argv, out) == 0
    text = out.getvalue()
    assert text.startswith(f"TTFT analysis of team-a/llama over the last 30s ({prometheus.url})")
    assert "Regime: PrefillBound" in text and "--max-num-batched-tokens" in text
    out = io.StringIO()
    assert main([*argv[:4], "nowhere", *argv[5:], "--format", "json"], out) == 3


def assert_same(ours: Observation, theirs: Observation) -> None:
    for field in ("ttft", "queue", "prefill", "itl", "prompt_tokens"):
        a, b = getattr(ours, field), getattr(theirs, field)
        assert (a is None) == (b is None), field
        if a is None:
            continue
        assert a.upper_bounds == b.upper_bounds, field
        mine, yours = (*a.cumulative_counts, a.sum, a.count), (*b.cumulative_counts, b.sum, b.count)
        for x, y in zip(mine, yours, strict=True):
            assert x == pytest.approx(y, rel=1e-9, abs=1e-9), field
    for field in ("waiting", "running", "waiting_now", "request_rate", "prompt_token_rate",
                  "generation_token_rate", "recent_window_s", "recent_request_rate",
                  "recent_waiting_growth"):  # fmt: skip
        expected = pytest.approx(getattr(theirs, field), rel=1e-9, nan_ok=True)
        assert getattr(ours, field) == expected, field
    assert ours.reporting_pods == theirs.reporting_pods


def test_a_fleet_younger_than_the_window_reads_its_rates_over_the_span_it_served(
    prometheus: PrometheusServer, source: PrometheusSource
) -> None:
    """A fleet whose first samples lie inside the window: `increase()` over the window covers
    only the seconds since then, and the source divides by those (`window_s` says how many),
    not by the window (which read a fleet 10 s old at a seventh of its rate)."""
    spec = sla(itl=False)
    young = ServedFleet(
        prometheus, "team-young", ["llama-6d4cf56db6-b2v7z", "llama-6d4cf56db6-k8m4n"],
        EngineSettings(64, 2048), Load(rate=4.0, prompt=300, output=20), "team-young",
    )  # fmt: skip
    try:

        def young_window() -> tuple[float, Observation] | None:
            at = settled_instant()
            observation = source.observe("team-young", spec, at)
            if observation.missing_inputs(need_itl=False):
                return None
            return (at, observation) if 8 <= observation.window_s <= WINDOW_S * 0.7 else None

        at, observation = poll(young_window, timeout=60, what="a window of a fleet 8-21 s old")
        series = prometheus.query(
            f'vllm:time_to_first_token_seconds_count{{namespace="team-young"}}[{WINDOW_S}s]', at=at
        )
        first = min(float(s["values"][0][0]) for s in series)
        last = max(float(s["values"][-1][0]) for s in series)
        served = sum(float(s["values"][-1][1]) - float(s["values"][0][1]) for s in series)
        # The span: since the oldest sample, read at most a subquery step (1 s) late, and the
        # half scrape interval (0.5 s) `increase()` extrapolates before it.
        assert observation.window_s == pytest.approx(at - first, abs=1.5)
        assert observation.request_rate == pytest.approx(served / (last - first), rel=0.1)
        assert observation.recent_window_s == observation.window_s
    finally:
        young.close()


def test_a_batch_gives_each_target_what_its_own_queries_give(
    prometheus: PrometheusServer, source: PrometheusSource, team_a: ServedFleet, team_b: ServedFleet
) -> None:
    """Issue 14: a batched cycle's observations equal the per-SLA source's, on the same
    Prometheus at the same instant (and the batch sends one query per family, not per SLA)."""
    neighbours = ServedFleet(
        prometheus, "team-a", ["llama-chat-6d4cf56db6-x7k2p"],
        EngineSettings(16, 512), Load(rate=2.0, prompt=300, output=20), "team-a-chat",
    )  # fmt: skip
    try:
        wait_for_window(source, "team-a", sla(), requests=10, what="team-a's series")
        wait_for_window(source, "team-b", sla(), requests=10, what="team-b's series")
        wait_for_window(source, "team-a", sla("llama-chat"), requests=5, what="llama-chat's")
        targets = [SLATarget("team-a", sla()), SLATarget("team-b", sla()),
                   SLATarget("team-a", sla("llama-chat")), SLATarget("team-c", sla())]  # fmt: skip
        at = settled_instant()
        snapshot = source.fetch(targets, at, time.monotonic() + 10)
        assert snapshot.queries == 7, "one query per histogram family, the gauges, the counters"
        batch = [snapshot.observe(t, time.monotonic() + 10) for t in targets]
        single = [source.observe_target(t, at) for t in targets]
        for ours, theirs in zip(batch, single, strict=True):
            assert ours.source_error is None and theirs.source_error is None
            assert_same(ours, theirs)
        assert batch[0].ttft is not None and batch[2].ttft is not None
        assert batch[0].ttft.total != batch[2].ttft.total, "llama and llama-chat kept apart"
        assert batch[3].ttft is None and batch[3].reporting_pods == 0
    finally:
        neighbours.close()


def test_a_pod_scraped_under_two_addresses_counts_once(
    prometheus: PrometheusServer, source: PrometheusSource
) -> None:
    fleet = Fleet(PROFILES["llama3-8b-a100"], 1, EngineSettings(16, 512))
    server = RealtimeFleet(fleet)
    with server.lock:
        fleet.feed(_Arrivals(Load(rate=3.0, prompt=300, output=20), 0.0, 5, itertools.count()))
    server.__enter__()
    pod, engine = "llama-6d4cf56db6-d2d2d", fleet.replicas[0].name
    labels = {"__metrics_path__": f"/metrics/{engine}", "namespace": "twice", "pod": pod}
    try:
        prometheus.set_targets(
            "engines",
            [Target(f"{host}:{server.port}", labels) for host in ("127.0.0.1", "localhost")],
            "twice",
        )
        both = f'count(vllm:num_requests_running{{namespace="twice",pod="{pod}"}})'
        poll(lambda: (r := prometheus.query(both)) and r[0]["value"][1] == "2", timeout=60,
             what="the pod scraped under both addresses")  # fmt: skip
        wait_for_window(source, "twice", sla(), requests=20, what="its series")
        # The source and the queries below read the same instant: `observed_at` is the newest
        # sample's time, up to a scrape before the instant the source's queries were evaluated
        # at, and with ~20 requests in the window that shift alone moved a count by 20% (CI).
        at = settled_instant()
        observation = source.observe("twice", sla(), at)
        assert observation.reporting_pods == 1
        assert any(f"pod {pod} is scraped under 2 addresses" in n for n in observation.notes)
        # Counted once: about what either address's series says, never their sum. (The two
        # addresses are scraped at different instants, so their increases differ by the
        # extrapolation at the window's edges.)
        increases = [
            float(prometheus.query(
                f'sum(increase(vllm:time_to_first_token_seconds_count{{namespace="twice",'
                f'instance="{host}:{server.port}"}}[{WINDOW_S}s]))', at=at,
            )[0]["value"][1])
            for host in ("127.0.0.1", "localhost")
        ]  # fmt: skip
        assert observation.ttft is not None
        assert min(increases) * 0.8 <= observation.ttft.total <= max(increases) * 1.2, increases
        assert observation.ttft.total < 0.8 * sum(increases), increases
    finally:
        prometheus.set_targets("engines", [], "twice")
        server.__exit__()


@pytest.mark.parametrize("release", RELEASES)
def test_each_engine_release_is_read_through_a_real_prometheus(
    prometheus: PrometheusServer, source: PrometheusSource, release: str
) -> None:
    """Each release's own names, labels and buckets: the source reads them (older names
    included), approximates what the release lacks and says so, and reaches the regime the
    same load has in vLLM's format."""
    fleet = Fleet(PROFILES["llama3-8b-a100"], 2, EngineSettings(16, 2048), layout=layout(release))
    server = EngineFormatFleet(release, fleet)
    with server.lock:
        fleet.feed(_Arrivals(Load(rate=20.0, prompt=1000, output=100), 0.0, 3, itertools.count()))
    namespace = release.replace(".", "-")
    pods = ["llama-5c9d8b7f6-x7k2p", "llama-5c9d8b7f6-q9zt4"]
    server.__enter__()
    try:
        prometheus.set_targets(
            "engines",
            [
                Target(
                    f"127.0.0.1:{server.port}",
                    {"__metrics_path__": f"/metrics/{r.name}", "namespace": namespace, "pod": pod},
                )
                for r, pod in zip(fleet.replicas, pods, strict=True)
            ],
            release,
        )
        spec = replace(sla(itl=True), engine=Engine(ENGINE[release]))
        observation = wait_for_window(
            source, namespace, spec, requests=100, what=f"{release} series in Prometheus"
        )
        ours = analyze_observation(observation, 95, 300, 95, 200)
        assert ours.regime is Regime.QUEUE_BOUND
        assert ours.itl_ms > 0 and observation.reporting_pods == 2
        said = " ".join((*observation.derived, *observation.notes))
        assert observation.prompt_token_rate > 0 and observation.generation_token_rate > 0
        # The fleet started seconds ago: the recent window is at most the span it served.
        assert observation.recent_window_s == min(30.0, observation.window_s)
        assert observation.recent_request_rate > 0
        assert math.isfinite(observation.recent_waiting_growth)
        generated = {"tgi": "tgi_request_generated_tokens_sum",
                     "vllm": "vllm:generation_tokens_total",
                     "sglang": "sglang:generation_tokens_total"}[ENGINE[release]]  # fmt: skip
        at = settled_instant()  # one instant for the source's and Prometheus's own
        again = source.observe_target(SLATarget(namespace, spec), at)
        served = prometheus.query(
            f'sum(increase({generated}{{namespace="{namespace}"}}[{WINDOW_S}s]))', at=at
        )
        # Over the span the fleet served (the window, or less while the fleet is younger:
        # its own test above checks that span against the samples).
        expected = float(served[0]["value"][1]) / again.window_s
        assert again.window_s <= WINDOW_S
        assert again.generation_token_rate == pytest.approx(expected, rel=1e-6)
        if release == "vllm-0.33":
            assert not said, "the current names: nothing to say"
        if release == "vllm-0.10":
            assert "vllm:time_per_output_token_seconds (vLLM ≤ 0.11)" in said
            assert "waiting requests read from vllm:num_requests_waiting" in said
            assert "read under vllm:prefix_cache_hits_total" in said
        if release == "sglang-0.5.23":
            assert not observation.derived, "per-request prefill histogram read, not derived"
            assert observation.prompt_tokens is not None and observation.prompt_tokens.total > 0
            assert observation.ttft is not None and observation.ttft.upper_bounds[0] == 100.0
        if release == "sglang-0.5.2":
            assert "prefill ≈ TTFT − mean queue time" in said
        if release == "tgi":
            assert observation.prefill is not None and observation.queue is not None
            assert observation.prefill.total == pytest.approx(observation.queue.total)
            assert "counts batches, not requests" in said and "no TTFT histogram" in said
            assert "TGI exports no prefix-cache counter" in said
    finally:
        prometheus.set_targets("engines", [], release)
        server.__exit__()
