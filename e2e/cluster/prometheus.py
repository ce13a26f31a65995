"""A real Prometheus server on 127.0.0.1 whose scrape targets the tests set.

Targets come from file-based service discovery: `set_targets(job, targets, key)` rewrites one
of the job's JSON files (atomically), and Prometheus picks it up within its refresh interval. Each
target carries its own labels, e.g. `namespace` and `pod` as a Kubernetes service discovery
would attach them, and `__metrics_path__` to scrape one simulated pod's endpoint. Scrapes run
every `scrape_interval_s` so that short e2e windows still hold many samples.

The operator's own metrics (job `operator`) are scraped with `honor_labels`, as the chart's
ServiceMonitor does: their `namespace` label names an InferenceSLA's namespace, not the
operator pod's. `set_rules(name, groups)` loads alerting/recording rule groups (the chart's
PrometheusRule spec) into the server and waits until it evaluates them; `alerts()` is what
/api/v1/alerts answers.

`stop()` and `start()` keep the same port and data, so a test can take Prometheus away and
bring it back. Used by the e2e fixtures.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from e2e.cluster.processes import Fatal, Service, free_port, poll

JOBS = ("engines", "operator", "static")


@dataclass(frozen=True)
class Target:
    address: str  # host:port
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass
class PrometheusServer:
    binary: Path
    directory: Path
    scrape_interval_s: float = 1.0
    port: int = 0
    service: Service | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _targets_file(self, job: str, key: str = "") -> Path:
        return self.directory / "targets" / (f"{job}--{key}.json" if key else f"{job}.json")

    def _write_config(self) -> Path:
        interval = f"{round(self.scrape_interval_s * 1000)}ms"
        config = {
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "rule_files": [str(self.directory / "rules" / "*.yaml")],
            "scrape_configs": [
                {
                    "job_name": job,
                    "honor_labels": job == "operator",
                    "scrape_interval": interval,
                    "scrape_timeout": interval,
                    "file_sd_configs": [
                        {
                            "files": [str(self.directory / "targets" / f"{job}*.json")],
                            "refresh_interval": "1s",
                        }
                    ],
                }
                for job in JOBS
            ],
        }
        path = self.directory / "prometheus.yml"
        path.write_text(yaml.safe_dump(config), encoding="utf-8")
        return path

    def start(self) -> PrometheusServer:
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / "targets").mkdir(exist_ok=True)
        (self.directory / "rules").mkdir(exist_ok=True)
        for job in JOBS:
            if not self._targets_file(job).exists():
                self.set_targets(job, [])
        if not self.port:
            self.port = free_port()
        self.service = Service(
            "prometheus",
            [
                str(self.binary),
                f"--config.file={self._write_config()}",
                f"--storage.tsdb.path={self.directory / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=2h",
                "--log.level=warn",
            ],
            self.directory / "prometheus.log",
        ).start()
        poll(self.ready, timeout=30, what="Prometheus /-/ready", describe=self.service.tail)
        return self

    def stop(self) -> None:
        if self.service is not None:
            self.service.stop()

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)

    def ready(self) -> bool:
        assert self.service is not None
        if not self.service.running():
            raise Fatal(f"prometheus exited:\n{self.service.tail()}")
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as reply:
                return bool(reply.status == 200)
        except OSError:
            return False

    def set_targets(self, job: str, targets: Sequence[Target], key: str = "") -> None:
        """The targets of `job` (of its `key` part: several writers can share one job)."""
        groups = [{"targets": [t.address], "labels": dict(t.labels)} for t in targets]
        path = self._targets_file(job, key)
        staging = path.with_suffix(".tmp")
        staging.write_text(json.dumps(groups), encoding="utf-8")
        os.replace(staging, path)

    def set_rules(
        self, name: str, groups: Sequence[Mapping[str, Any]], timeout: float = 30
    ) -> None:
        """Load rule `groups` as the file `name` (none: remove it), reload, and wait until
        Prometheus lists exactly those groups of the file (a bad rule fails the reload, and
        so this wait, with the server's log)."""
        path = self.directory / "rules" / f"{name}.yaml"
        if groups:
            path.write_text(yaml.safe_dump({"groups": list(groups)}), encoding="utf-8")
        else:
            path.unlink(missing_ok=True)
        assert self.service is not None and self.service.process is not None
        self.service.process.send_signal(signal.SIGHUP)
        wanted = sorted(g["name"] for g in groups)

        def loaded() -> bool:
            listed = self._get("/api/v1/rules")["groups"]
            return sorted(g["name"] for g in listed if g["file"] == str(path)) == wanted

        poll(loaded, timeout=timeout, what=f"rules {name} loaded", describe=self.service.tail)

    def rules(self) -> list[dict[str, Any]]:
        """The rule groups Prometheus evaluates (/api/v1/rules)."""
        groups: list[dict[str, Any]] = self._get("/api/v1/rules")["groups"]
        return groups

    def alerts(self) -> list[dict[str, Any]]:
        """Pending and firing alerts (/api/v1/alerts)."""
        alerts: list[dict[str, Any]] = self._get("/api/v1/alerts")["alerts"]
        return alerts

    def _get(self, path: str) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.url}{path}", timeout=10) as reply:
            body = json.load(reply)
        if body.get("status") != "success":
            raise RuntimeError(f"{path} failed: {body}")
        data: dict[str, Any] = body["data"]
        return data

    def query_range(
        self, promql: str, start: float, end: float, step: float
    ) -> list[dict[str, Any]]:
        """A range query's result matrix (raises on an error answer)."""
        params = {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step}"}
        path = f"/api/v1/query_range?{urllib.parse.urlencode(params)}"
        result: list[dict[str, Any]] = self._get(path)["result"]
        return result

    def query(self, promql: str, at: float | None = None) -> list[dict[str, Any]]:
        """An instant query's result vector (raises on an error answer)."""
        params = {"query": promql}
        if at is not None:
            params["time"] = f"{at:.3f}"
        url = f"{self.url}/api/v1/query?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as reply:
            body = json.load(reply)
        if body.get("status") != "success":
            raise RuntimeError(f"query {promql!r} failed: {body}")
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def active_targets(self) -> list[dict[str, Any]]:
        with urllib.request.urlopen(f"{self.url}/api/v1/targets?state=active", timeout=10) as r:
            targets: list[dict[str, Any]] = json.load(r)["data"]["activeTargets"]
        return targets
