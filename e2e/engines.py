"""Simulated GPU engines that follow a Deployment's pods, for a real Prometheus to scrape.

KWOK pods run no containers, so something must stand in for the vLLM processes. An
`EngineFleet` watches one Deployment's pods through the API server and keeps one simulated
vLLM replica (`slascaler_sim`) per Ready pod, started with the engine flags read from that
pod's own container args (so a rolling update that changes `--max-num-seqs` really changes
the engines, pod by pod). A pod that stops being Ready, or goes away, drains its replica.

The replicas serve their metrics in real time at `/metrics/<pod>` with vLLM's names, labels
and buckets; the fleet registers each Ready pod as a Prometheus target with the `namespace`
and `pod` labels a Kubernetes service discovery would attach. Requests arrive as a Poisson
stream whose rate and lengths a test changes while it runs (`set_load`), and are routed to
the least loaded Ready replica.

Used by the e2e tests; bounded: every thread stops with `close()`.
"""

from __future__ import annotations

import itertools
import math
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from e2e.cluster.prometheus import PrometheusServer, Target
from e2e.kube import Kube, is_ready
from slascaler.engine_args import CommandLine, EngineArgsError, read_flag
from slascaler_sim.engine import Phase, Request
from slascaler_sim.exposition import RealtimeFleet
from slascaler_sim.fleet import EngineSettings, Fleet
from slascaler_sim.profiles import PROFILES, CostProfile

DEFAULTS = EngineSettings(max_num_seqs=256, max_num_batched_tokens=2048)


class ExternalFleet(Fleet):
    """Replicas that come and go as someone else says: Kubernetes pods, in the e2e suite.

    `add` starts a replica that is ready at once (Kubernetes already waited for readiness)
    with that pod's engine flags; `remove` drains one. The fleet itself never starts, stops or
    rolls replicas; routing, the engines and the metrics are the same as `Fleet`'s.
    """

    def __init__(self, profile: CostProfile, start: float = 0.0) -> None:
        super().__init__(profile, replicas=0, start=start)

    def add(self, name: str, settings: EngineSettings) -> None:
        self._start_replica(ready_now=True, name=name, settings=settings)
        self._on_ready()

    def remove(self, name: str) -> None:
        for replica in self.replicas:
            if replica.name == name and replica.phase is not Phase.STOPPED:
                replica.drain(self.now)
        self._retire_stopped()

    def live_names(self) -> set[str]:
        return {r.name for r in self._live()}

    def _roll(self) -> None:
        return  # Kubernetes rolls the pods; replicas follow them

    def _fill(self) -> None:
        return


@dataclass(frozen=True)
class Load:
    """Poisson arrivals: `rate` per second, each with a prompt and an output length.

    Lengths vary ±`spread` (uniform) around the given means, so histograms are not spikes.
    """

    rate: float
    prompt: int = 1000
    output: int = 100
    spread: float = 0.2


class _Arrivals:
    """An endless Poisson stream from `start` on, for one Load (pulled lazily by the fleet)."""

    def __init__(self, load: Load, start: float, seed: int, ids: Iterator[int]) -> None:
        self.load, self.now, self.ids = load, start, ids
        self.rng = np.random.default_rng(seed)

    def __iter__(self) -> _Arrivals:
        return self

    def __next__(self) -> Request:
        if self.load.rate <= 0:
            raise StopIteration
        self.now += float(self.rng.exponential(1.0 / self.load.rate))
        low, high = 1 - self.load.spread, 1 + self.load.spread
        prompt = max(1, round(self.load.prompt * self.rng.uniform(low, high)))
        output = max(1, round(self.load.output * self.rng.uniform(low, high)))
        return Request(next(self.ids), self.now, prompt, output)


def pod_settings(container_args: CommandLine) -> EngineSettings:
    """The engine flags a pod was started with (vLLM's defaults where absent)."""
    try:
        seqs = read_flag(container_args, "--max-num-seqs")
        tokens = read_flag(container_args, "--max-num-batched-tokens")
    except EngineArgsError:
        seqs = tokens = None
    return EngineSettings(
        max_num_seqs=seqs or DEFAULTS.max_num_seqs,
        max_num_batched_tokens=tokens or DEFAULTS.max_num_batched_tokens,
    )


class EngineFleet:
    """The simulated engines behind one Deployment's Ready pods."""

    def __init__(
        self,
        kube: Kube,
        prometheus: PrometheusServer,
        namespace: str,
        deployment: str,
        profile: CostProfile = PROFILES["llama3-8b-a100"],
        load: Load = Load(rate=0.0),
        seed: int = 1,
        poll_s: float = 0.5,
    ) -> None:
        self.kube, self.prometheus = kube, prometheus
        self.namespace, self.deployment = namespace, deployment
        self.fleet = ExternalFleet(profile)
        self.server = RealtimeFleet(self.fleet)
        self.seed = itertools.count(seed)
        self.ids = itertools.count()
        self.poll_s = poll_s
        self._stop = threading.Event()
        self._watcher = threading.Thread(target=self._watch, daemon=True, name="engine-pods")
        self.errors: list[str] = []
        self.load = load

    job = "engines"

    @property
    def key(self) -> str:
        return f"{self.namespace}--{self.deployment}"

    def __enter__(self) -> EngineFleet:
        # Replicas first, then requests: none should wait at the router for a pod that is
        # already Ready but not yet seen.
        self._sync()
        self.set_load(self.load)
        self.server.__enter__()
        self._watcher.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._stop.set()
        if self._watcher.is_alive():
            self._watcher.join(timeout=5)
        self.prometheus.set_targets(self.job, [], self.key)
        self.server.__exit__()

    def set_load(self, load: Load) -> None:
        """Change the arrivals from now on."""
        with self.server.lock:
            self.fleet.run_until(self.server.clock() - self.server._origin)
            self.fleet.feed(_Arrivals(load, self.fleet.now, next(self.seed), self.ids))
            self.load = load

    def ready_replicas(self) -> int:
        with self.server.lock:
            return self.fleet.ready_replicas

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self._sync()
            except Exception as error:
                self.errors.append(f"{type(error).__name__}: {error}")

    def _sync(self) -> None:
        pods = self.kube.pods(self.namespace, f"app={self.deployment}")
        ready = {p.metadata.name: p for p in pods if is_ready(p)}
        with self.server.lock:
            self.fleet.run_until(self.server.clock() - self.server._origin)
            live = self.fleet.live_names()
            for name in live - ready.keys():
                self.fleet.remove(name)
            for name in ready.keys() - live:
                container = ready[name].spec.containers[0]
                line = CommandLine(tuple(container.command or ()), tuple(container.args or ()))
                self.fleet.add(name, pod_settings(line))
        address = f"127.0.0.1:{self.server.port}"
        self.prometheus.set_targets(
            self.job,
            [
                Target(
                    address,
                    {
                        "__metrics_path__": f"/metrics/{name}",
                        "namespace": self.namespace,
                        "pod": name,
                    },
                )
                for name in sorted(ready)
            ],
            self.key,
        )

    def client_ttft_ms(self, since: float) -> list[float]:
        """Client-side TTFT of requests that arrived after `since` (fleet seconds) and got one."""
        with self.server.lock:
            done = [*self.fleet.finished]
            for replica in self.fleet.replicas:
                done.extend(replica.running)
            return [
                (r.first_token_at - r.arrival) * 1000
                for r in done
                if r.arrival >= since and r.first_token_at is not None
            ]

    def now(self) -> float:
        with self.server.lock:
            return self.fleet.now


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else math.nan
