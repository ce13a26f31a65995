"""The scale benchmark: one operator against N InferenceSLAs on the local control plane.

For each N (100, 300, 1000 by default) it brings the cluster to N InferenceSLAs, each with its
own one-replica vLLM Deployment on fake GPU nodes (KWOK), and a real Prometheus holding their
engines' series: an exposition endpoint per namespace serves, for every pod, vLLM 0.33's
series (histograms with vLLM's buckets, counters, gauges: about 250 series a pod, growing
at ~2 requests/s), scraped every 15 s. It then starts a fresh `slascaler run`, waits until
every InferenceSLA has been evaluated, and measures over a window of steady state:

- the operator's CPU (utime + stime from /proc, as a share of one core) and peak RSS (VmHWM);
- Prometheus queries per second (Prometheus's own `prometheus_http_requests_total` for
  `/api/v1/query`, which only the operator asks during the window);
- reconcile duration p50/p95 (the operator's `slascaler_reconcile_duration_seconds`, over
  the window, interpolated as `histogram_quantile` does);
- the age of `status.lastEvaluated` over all InferenceSLAs, sampled every 5 s: p95 and max
  (the status has whole seconds, so ages are ±1 s).

It prints one table row per N and the targets of issue 14 (1,000 SLAs at 15 s: < 0.5 core,
< 300 MiB, every lastEvaluated younger than 2 intervals, queries/s ≤ N/15 × 3 or constant
in N). Bounded: every wait has a deadline, and the cluster, Prometheus, the exposition and the
operator are stopped at the end, whatever happened.

Run with `make scale-bench` (`python -m e2e.scale_bench --sizes 100,300,1000`).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import random
import re
import shutil
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml
from kubernetes.client.exceptions import ApiException

from e2e.cluster.binaries import ensure_binaries
from e2e.cluster.local import ClusterConfig, LocalCluster
from e2e.cluster.processes import Service, free_port, poll
from e2e.kube import Kube, gpu_deployment
from e2e.operator import OperatorProcess
from e2e.slas import GROUP, PLURAL, VERSION, inference_sla, install_crd
from slascaler.model.histogram import histogram_quantile
from slascaler_sim.exposition import HELP, _number
from slascaler_sim.recorder import MetricRecorder

PER_NAMESPACE = 50
RATE = 2.0  # requests per second per pod


# -- the engines' series ----------------------------------------------------------------------


def _unit_recorder(seed: int) -> MetricRecorder:
    """One pod's metrics for 1000 requests: the shape its series grow with."""
    rng = random.Random(seed)
    recorder = MetricRecorder()
    for _ in range(1000):
        queue = rng.expovariate(1 / 0.01)
        prefill = rng.uniform(0.04, 0.25)
        recorder.observe("vllm:request_queue_time_seconds", queue)
        recorder.observe("vllm:request_prefill_time_seconds", prefill)
        recorder.observe("vllm:time_to_first_token_seconds", queue + prefill + 0.01)
        recorder.observe("vllm:inter_token_latency_seconds", rng.uniform(0.015, 0.04), 100)
        recorder.observe("vllm:request_decode_time_seconds", rng.uniform(1, 4))
        recorder.observe("vllm:e2e_request_latency_seconds", rng.uniform(1.2, 4.5))
        prompt = float(rng.randint(200, 3000))
        recorder.observe("vllm:request_prompt_tokens", prompt)
        recorder.observe("vllm:request_prefill_kv_computed_tokens", prompt)
        recorder.observe("vllm:request_generation_tokens", float(rng.randint(50, 200)))
    for name in recorder.counters:
        recorder.counters[name] = 1000.0 * (100 if "tokens" in name else 1)
    return recorder


@dataclass
class _PodSeries:
    """A pod's exposition as (line prefix, value per 1000 requests), precomputed."""

    lines: list[tuple[str, float]]
    gauges: list[str]


def _pod_series(namespace: str, pod: str, unit: MetricRecorder) -> _PodSeries:
    labels = f'namespace="{namespace}",pod="{pod}",model_name="llama",engine="0"'
    lines: list[tuple[str, float]] = []
    for name, histogram in unit.histograms.items():
        cumulative = 0.0
        for bound, count in zip((*histogram.bounds, math.inf), histogram.counts, strict=True):
            cumulative += count
            lines.append((f'{name}_bucket{{{labels},le="{_number(bound)}"}} ', cumulative))
        lines.append((f"{name}_sum{{{labels}}} ", histogram.total))
        lines.append((f"{name}_count{{{labels}}} ", histogram.observations))
    for name, value in unit.counters.items():
        lines.append((f"{name}{{{labels}}} ", value))
    gauges = [
        f"vllm:num_requests_running{{{labels}}} 8",
        f"vllm:num_requests_waiting{{{labels}}} 0",
        f'vllm:num_requests_waiting_by_reason{{{labels},reason="capacity"}} 0',
        f'vllm:num_requests_waiting_by_reason{{{labels},reason="deferred"}} 0',
        f"vllm:kv_cache_usage_perc{{{labels}}} 0.4",
    ]
    return _PodSeries(lines, gauges)


class Exposition:
    """`/metrics/<namespace>`: every pod of the namespace, growing at RATE requests/s."""

    def __init__(self) -> None:
        self.units = [_unit_recorder(seed) for seed in range(8)]
        self.pods: dict[str, dict[str, tuple[_PodSeries, float]]] = {}
        self.lock = threading.Lock()
        self.started = time.time()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = owner.render(self.path.removeprefix("/metrics/")).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def set_pods(self, namespace: str, pods: Sequence[str]) -> None:
        with self.lock:
            known = self.pods.setdefault(namespace, {})
            for pod in pods:
                if pod not in known:
                    unit = self.units[hash(pod) % len(self.units)]
                    known[pod] = (_pod_series(namespace, pod, unit), time.time())

    def render(self, namespace: str) -> str:
        now = time.time()
        with self.lock:
            pods = list(self.pods.get(namespace, {}).values())
        out: list[str] = []
        for name in ("vllm:time_to_first_token_seconds", "vllm:num_requests_running"):
            out.append(f"# HELP {name} {HELP[name]}")
        for series, since in pods:
            scale = RATE * (now - since) / 1000.0
            out.extend(f"{prefix}{_number(round(value * scale))}" for prefix, value in series.lines)
            out.extend(series.gauges)
        return "\n".join(out) + "\n"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# -- Prometheus ---------------------------------------------------------------------------------


class BenchPrometheus:
    """A Prometheus scraping one exposition target per namespace (their labels honoured)."""

    def __init__(self, binary: Path, directory: Path, interval_s: float) -> None:
        self.binary, self.directory, self.interval_s = binary, directory, interval_s
        self.port = free_port()
        self.service: Service | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, exposition_port: int) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.set_namespaces(exposition_port, [])
        interval = f"{round(self.interval_s)}s"
        config = {
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "scrape_configs": [
                {
                    "job_name": "engines",
                    "honor_labels": True,
                    "scrape_timeout": f"{min(10, round(self.interval_s))}s",
                    "file_sd_configs": [
                        {"files": [str(self.directory / "targets.json")], "refresh_interval": "2s"}
                    ],
                }
            ],
        }
        path = self.directory / "prometheus.yml"
        path.write_text(yaml.safe_dump(config), encoding="utf-8")
        self.service = Service(
            "prometheus",
            [str(self.binary), f"--config.file={path}",
             f"--storage.tsdb.path={self.directory / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            self.directory / "prometheus.log",
        ).start()  # fmt: skip
        poll(lambda: _get(f"{self.url}/-/ready") is not None, timeout=60, what="Prometheus ready")

    def set_namespaces(self, exposition_port: int, namespaces: Sequence[str]) -> None:
        groups = [
            {"targets": [f"127.0.0.1:{exposition_port}"],
             "labels": {"__metrics_path__": f"/metrics/{n}", "shard": n}}
            for n in namespaces
        ]  # fmt: skip
        staging = self.directory / "targets.tmp"
        staging.write_text(json.dumps(groups), encoding="utf-8")
        os.replace(staging, self.directory / "targets.json")

    def query(self, promql: str) -> list[dict[str, object]]:
        url = f"{self.url}/api/v1/query?query={urllib.request.quote(promql)}"
        body = _get(url)
        return json.loads(body)["data"]["result"] if body else []

    def queries_answered(self) -> float:
        """Prometheus's own count of /api/v1/query requests."""
        text = _get(f"{self.url}/metrics") or ""
        return sum(float(v) for v in _QUERIES.findall(text))

    def stop(self) -> None:
        if self.service is not None:
            self.service.stop()


_QUERIES = re.compile(
    r'^prometheus_http_requests_total\{[^}]*handler="/api/v1/query"[^}]*\} (\S+)$', re.M
)
_DURATION = re.compile(r'^slascaler_reconcile_duration_seconds_bucket\{le="([^"]+)"\} (\S+)$', re.M)


def _get(url: str, timeout: float = 10.0) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:
            return str(reply.read().decode())
    except OSError:
        return None


# -- the objects --------------------------------------------------------------------------------


def _namespace(index: int) -> str:
    return f"scale-{index // PER_NAMESPACE:03d}"


def _name(index: int) -> str:
    return f"model-{index:04d}"


def create_objects(kube: Kube, first: int, last: int) -> None:
    """Deployments and InferenceSLAs first..last-1 (namespaces as needed), 8 at a time."""
    for namespace in sorted({_namespace(i) for i in range(first, last)}):
        try:
            kube.core.create_namespace({"metadata": {"name": namespace}})
        except ApiException as error:
            if error.status != 409:
                raise

    def create(index: int) -> None:
        namespace, name = _namespace(index), _name(index)
        kube.apps.create_namespaced_deployment(namespace, gpu_deployment(name, 1))
        kube.custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL,
            inference_sla(name, name, window="1m", replicas={"min": 1, "max": 4}),
        )  # fmt: skip

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(create, range(first, last)))


def running_pods(kube: Kube, namespaces: Sequence[str]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for namespace in namespaces:
        items = kube.core.list_namespaced_pod(namespace).items
        found[namespace] = [p.metadata.name for p in items if p.status.phase == "Running"]
    return found


def evaluated_ages(kube: Kube, since: float) -> tuple[list[float], int]:
    """Now − lastEvaluated of every InferenceSLA, and how many have none since `since`."""
    items = kube.custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"]
    now, ages, missing = time.time(), [], 0
    for item in items:
        stamp = (item.get("status") or {}).get("lastEvaluated")
        when = _epoch(stamp) if stamp else None
        if when is None or when < since - 1:
            missing += 1
        else:
            ages.append(max(0.0, now - when))
    return ages, missing


def _epoch(stamp: str) -> float:
    return dt.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC).timestamp()


# -- measurements -------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text(encoding="utf-8").splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return math.nan


def duration_buckets(operator: OperatorProcess) -> dict[float, float]:
    return {float(le): float(v) for le, v in _DURATION.findall(operator.metrics())}


def quantile(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


@dataclass
class Row:
    n: int
    cpu_cores: float
    rss_mib: float
    queries_per_s: float
    reconcile_p50_ms: float
    reconcile_p95_ms: float
    age_p95_s: float
    age_max_s: float
    never: int
    warmup_s: float
    evaluations_per_s: float


def measure(
    kube: Kube, operator: OperatorProcess, prometheus: BenchPrometheus, n: int,
    started: float, warmup_s: float, window_s: float,
) -> Row:  # fmt: skip
    pid = operator.service.pid if operator.service else 0
    cpu0, queries0 = cpu_seconds(pid), prometheus.queries_answered()
    buckets0 = duration_buckets(operator)
    t0 = time.monotonic()
    ages: list[float] = []
    never = 0
    while time.monotonic() - t0 < window_s:
        sampled, missing = evaluated_ages(kube, started)
        ages += sampled
        never = max(never, missing)
        time.sleep(max(0.0, 5.0 - (time.monotonic() - t0) % 5.0))
    elapsed = time.monotonic() - t0
    cpu1, queries1 = cpu_seconds(pid), prometheus.queries_answered()
    buckets1 = duration_buckets(operator)
    bounds = sorted(buckets1)
    counts = [buckets1[b] - buckets0.get(b, 0.0) for b in bounds]
    return Row(
        n=n,
        cpu_cores=(cpu1 - cpu0) / elapsed,
        rss_mib=peak_rss_mib(pid),
        queries_per_s=(queries1 - queries0) / elapsed,
        reconcile_p50_ms=histogram_quantile(0.5, bounds, counts) * 1000,
        reconcile_p95_ms=histogram_quantile(0.95, bounds, counts) * 1000,
        age_p95_s=quantile(ages, 0.95),
        age_max_s=max(ages, default=math.nan),
        never=never,
        warmup_s=warmup_s,
        evaluations_per_s=(counts[-1] if counts else 0.0) / elapsed,
    )


# -- the run --------------------------------------------------------------------------------------


@contextmanager
def substrate(bin_dir: Path, workdir: Path, largest: int) -> Iterator[Kube]:
    nodes = max(2, math.ceil(largest * 1.1 / 100))
    config = ClusterConfig(
        nodes=nodes, gpus_per_node=100, pods_per_node=120, ready_delay_s=1.0, api_qps=300
    )
    cluster = LocalCluster(bin_dir, workdir / "cluster", config)
    try:
        cluster.up()
        kube = Kube.connect(cluster.kubeconfig, bin_dir)
        install_crd(kube)
        yield kube
    finally:
        cluster.down()


def run(
    sizes: Sequence[int], interval_s: float, window_s: float, say: Callable[[str], None]
) -> list[Row]:
    bin_dir = ensure_binaries()
    workdir = Path(tempfile.mkdtemp(prefix="slascaler-scale-"))
    keep = bool(os.environ.get("SCALE_BENCH_KEEP"))  # keep the operators' logs for a look
    rows: list[Row] = []
    exposition = Exposition()
    prometheus = BenchPrometheus(bin_dir / "prometheus", workdir / "prometheus", interval_s)
    try:
        with substrate(bin_dir, workdir, max(sizes)) as kube:
            prometheus.start(exposition.port)
            created = 0
            for n in sizes:
                bench = Bench(kube, exposition, prometheus, interval_s, workdir, say)
                rows.append(bench.size(created, n, window_s))
                created = n
    finally:
        prometheus.stop()
        exposition.close()
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)
    return rows


@dataclass
class Bench:
    kube: Kube
    exposition: Exposition
    prometheus: BenchPrometheus
    interval_s: float
    workdir: Path
    say: Callable[[str], None]

    def size(self, created: int, n: int, window_s: float) -> Row:
        """Grow to `n` InferenceSLAs, start a fresh operator, measure it."""
        kube, interval = self.kube, self.interval_s
        self.say(f"N={n}: creating {n - created} Deployments and InferenceSLAs")
        create_objects(kube, created, n)
        namespaces = sorted({_namespace(i) for i in range(n)})

        def pods_running() -> bool:
            return sum(map(len, running_pods(kube, namespaces).values())) >= n

        poll(pods_running, timeout=120 + n * 0.6, what=f"{n} engine pods Running")
        for namespace, pods in running_pods(kube, namespaces).items():
            self.exposition.set_pods(namespace, pods)
        self.prometheus.set_namespaces(self.exposition.port, namespaces)

        def series_in() -> bool:
            found = self.prometheus.query("count(vllm:num_requests_running)")
            return bool(found) and float(found[0]["value"][1]) >= n  # type: ignore[index]

        poll(series_in, timeout=3 * interval + 60, what=f"{n} pods' series in Prometheus")
        time.sleep(2 * interval)  # a window's worth of increase to read
        operator = OperatorProcess(
            kube.kubeconfig, operator_env(self.prometheus.url, interval),
            self.workdir / f"operator-{n}.log",
        )  # fmt: skip
        started = time.time()
        operator.start()
        pid = operator.service.pid if operator.service else 0
        self.say(f"N={n}: operator started (pid {pid}, log {operator.log})")
        try:
            poll(
                lambda: evaluated_ages(kube, started)[1] == 0,
                timeout=6 * interval + n * 0.2,
                what=f"all {n} evaluated",
            )
            warmup = time.time() - started
            time.sleep(interval)  # past the first round's burst
            self.say(f"N={n}: all evaluated {warmup:.0f} s after start; measuring {window_s:.0f} s")
            row = measure(kube, operator, self.prometheus, n, started, warmup, window_s)
            self.say(table([row], interval, header=False))
            return row
        finally:
            operator.stop()


def operator_env(prometheus_url: str, interval_s: float) -> dict[str, str]:
    return {
        "SLASCALER_PROMETHEUS_URL": prometheus_url,
        "SLASCALER_RECONCILE_INTERVAL": f"{interval_s:g}s",
        "MALLOC_ARENA_MAX": "2",  # as the operator image sets it
    }


def table(rows: Sequence[Row], interval_s: float, header: bool = True) -> str:
    lines = []
    if header:
        lines += [
            "| N | CPU (cores) | peak RSS (MiB) | Prometheus queries/s | reconcile p50 / p95 (ms) "
            "| lastEvaluated age p95 / max (s) | evaluations/s | first round (s) |",
            "|---|---|---|---|---|---|---|---|",
        ]
    for r in rows:
        lines.append(
            f"| {r.n} | {r.cpu_cores:.2f} | {r.rss_mib:.0f} | {r.queries_per_s:.2f} "
            f"| {r.reconcile_p50_ms:.0f} / {r.reconcile_p95_ms:.0f} "
            f"| {r.age_p95_s:.0f} / {r.age_max_s:.0f}"
            + (f" ({r.never} never)" if r.never else "")
            + f" | {r.evaluations_per_s:.1f} (of {r.n / interval_s:.1f} due) | {r.warmup_s:.0f} |"
        )
    return "\n".join(lines)


def targets(rows: Sequence[Row], interval_s: float) -> str:
    """Issue 14's targets, judged on the largest N measured."""
    if not rows:
        return "no row measured"
    r = max(rows, key=lambda row: row.n)
    budget = r.n / interval_s * 3
    checks = [
        ("CPU < 0.5 core", r.cpu_cores < 0.5, f"{r.cpu_cores:.2f} cores"),
        ("peak RSS < 300 MiB", r.rss_mib < 300, f"{r.rss_mib:.0f} MiB"),
        ("every lastEvaluated younger than 2 intervals",
         r.age_max_s < 2 * interval_s and not r.never,
         f"max {r.age_max_s:.0f} s vs {2 * interval_s:.0f} s"),
        (f"queries/s ≤ N/{interval_s:g}×3 = {budget:.0f}", r.queries_per_s <= budget,
         f"{r.queries_per_s:.2f}/s"),
    ]  # fmt: skip
    lines = [f"Targets at N={r.n}, {interval_s:g} s interval:"]
    for what, met, value in checks:
        lines.append(f"- {what}: {'met' if met else 'MISSED'} ({value})")
    if len(rows) > 1:
        per_n = ", ".join(f"N={row.n}: {row.queries_per_s:.2f}" for row in rows)
        lines.append(f"- queries/s by N (constant in N when batched): {per_n}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    summary = (__doc__ or "").split("\n\n")[0]
    parser = argparse.ArgumentParser(prog="python -m e2e.scale_bench", description=summary)
    parser.add_argument("--sizes", default="100,300,1000", help="InferenceSLA counts, ascending")
    parser.add_argument("--interval", type=float, default=15.0, help="reconcile interval, s")
    parser.add_argument("--window", type=float, default=60.0, help="measuring window per N, s")
    args = parser.parse_args(argv)
    sizes = sorted(int(s) for s in args.sizes.split(","))

    def say(text: str) -> None:
        print(text, flush=True)

    started = time.monotonic()
    rows = run(sizes, args.interval, args.window, say)
    say(f"\nscale benchmark ({os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at "
        f"the end, {time.monotonic() - started:.0f} s in all):\n")  # fmt: skip
    say(table(rows, args.interval))
    say("")
    say(targets(rows, args.interval))
    return 0


if __name__ == "__main__":
    sys.exit(main())
