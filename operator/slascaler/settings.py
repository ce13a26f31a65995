"""The operator's settings, from environment variables read once at start-up.

Every variable is documented in `VARIABLES` (the README and the chart's values are written
from the same names). `Settings.from_env` parses and checks them all and raises
`SettingsError` naming the variable and what to write instead; the result is passed
explicitly to whatever needs it (no global configuration).

Called by `slascaler run` (cli) and the tests.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from slascaler.metrics.promql import LABEL_NAME
from slascaler.spec import SpecError, parse_duration

VARIABLES: Mapping[str, str] = {
    "SLASCALER_PROMETHEUS_URL": "Prometheus base URL (required), e.g. http://prometheus:9090",
    "SLASCALER_PROMETHEUS_TIMEOUT": "per-query timeout, a duration (default 5s)",
    "SLASCALER_PROMETHEUS_RETRIES": "retries of a failed query, with backoff (default 2)",
    "SLASCALER_PROMETHEUS_BEARER_TOKEN_FILE": "file with a bearer token for Prometheus (optional)",
    "SLASCALER_PROMETHEUS_INSECURE_SKIP_VERIFY": "true to skip TLS verification (default false)",
    "SLASCALER_NAMESPACE_LABEL": "Prometheus label holding the pod's namespace (default namespace)",
    "SLASCALER_POD_LABEL": "Prometheus label holding the pod's name (default pod)",
    "SLASCALER_WATCH_NAMESPACES": "comma-separated namespaces to serve; empty for all (default)",
    "SLASCALER_RECONCILE_INTERVAL": "how often each InferenceSLA is evaluated (default 15s)",
    "SLASCALER_DRY_RUN": "true to treat every InferenceSLA as mode Recommend (default false)",
    "SLASCALER_GPU_POOLS": "false to ignore GPUPools: no shared GPU budgets (default true)",
    "SLASCALER_PEERING": "Kopf peering name for HA (one active instance); empty: standalone",
    "SLASCALER_PRIORITY": "peering priority, the highest is active (default: random per process)",
    "SLASCALER_HEALTH_PORT": "port of the liveness endpoint /healthz (default 8080; 0: off)",
    "SLASCALER_METRICS_PORT": "port of the operator's own /metrics (default 8000; 0: off)",
    "SLASCALER_BIND_ADDRESS": "address the two endpoints listen on (default 0.0.0.0)",
    "SLASCALER_LOG_LEVEL": "DEBUG, INFO, WARNING or ERROR (default INFO)",
}

_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_TRUE = {"true", "1", "yes"}
_FALSE = {"false", "0", "no", ""}


def draw_priority() -> int:
    return 1 + secrets.randbelow(2**30)


class SettingsError(ValueError):
    """An environment variable has a value the operator cannot use."""

    def __init__(self, variable: str, message: str) -> None:
        super().__init__(f"{variable}: {message}")
        self.variable = variable


@dataclass(frozen=True)
class Settings:
    prometheus_url: str
    prometheus_timeout_s: float = 5.0
    prometheus_retries: int = 2
    prometheus_bearer_token_file: Path | None = None
    prometheus_insecure_skip_verify: bool = False
    namespace_label: str = "namespace"
    pod_label: str = "pod"
    watch_namespaces: tuple[str, ...] = ()
    reconcile_interval_s: float = 15.0
    dry_run: bool = False
    gpu_pools: bool = True
    peering: str | None = None
    priority: int = 0
    health_port: int = 8080
    metrics_port: int = 8000
    bind_address: str = "0.0.0.0"
    log_level: str = "INFO"

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        def text(name: str, default: str = "") -> str:
            return env.get(name, default).strip()

        url = text("SLASCALER_PROMETHEUS_URL")
        if not re.match(r"^https?://[^\s/]+", url):
            raise SettingsError(
                "SLASCALER_PROMETHEUS_URL",
                f"{url!r} is not an http(s) URL; set it to your Prometheus, e.g. "
                "http://prometheus-operated.monitoring.svc:9090",
            )

        def duration(name: str, default: str) -> float:
            try:
                return parse_duration(text(name, default) or default, name)
            except SpecError:
                raise SettingsError(
                    name, f"{text(name)!r} is not a duration; write e.g. 15s or 1m"
                ) from None

        def integer(name: str, default: int, low: int, high: int) -> int:
            raw = text(name, str(default)) or str(default)
            try:
                value = int(raw)
            except ValueError:
                raise SettingsError(name, f"{raw!r} is not a whole number") from None
            if not low <= value <= high:
                raise SettingsError(name, f"{value} is outside [{low}, {high}]")
            return value

        def boolean(name: str, default: str = "") -> bool:
            raw = text(name, default).lower()
            if raw in _TRUE:
                return True
            if raw in _FALSE:
                return False
            raise SettingsError(name, f"{raw!r} is not true or false")

        def label(name: str, default: str) -> str:
            value = text(name, default) or default
            if not LABEL_NAME.match(value):
                raise SettingsError(name, f"{value!r} is not a Prometheus label name")
            return value

        namespaces = tuple(
            n.strip() for n in text("SLASCALER_WATCH_NAMESPACES").split(",") if n.strip()
        )
        for namespace in namespaces:
            if not _NAMESPACE.match(namespace):
                raise SettingsError(
                    "SLASCALER_WATCH_NAMESPACES", f"{namespace!r} is not a namespace name"
                )
        token_file = text("SLASCALER_PROMETHEUS_BEARER_TOKEN_FILE")
        if token_file and not Path(token_file).is_file():
            raise SettingsError(
                "SLASCALER_PROMETHEUS_BEARER_TOKEN_FILE", f"{token_file} is not a readable file"
            )
        level = (text("SLASCALER_LOG_LEVEL", "INFO") or "INFO").upper()
        if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
            raise SettingsError(
                "SLASCALER_LOG_LEVEL", f"{level!r} is not DEBUG, INFO, WARNING or ERROR"
            )
        interval = duration("SLASCALER_RECONCILE_INTERVAL", "15s")
        # Kopf freezes every instance that shares the highest priority, so replicas of one
        # Deployment (same environment) draw distinct ones unless told otherwise.
        default_priority = draw_priority() if "SLASCALER_PRIORITY" not in env else 0
        if interval < 1:
            raise SettingsError("SLASCALER_RECONCILE_INTERVAL", "must be at least 1s")
        return cls(
            prometheus_url=url.rstrip("/"),
            prometheus_timeout_s=duration("SLASCALER_PROMETHEUS_TIMEOUT", "5s"),
            prometheus_retries=integer("SLASCALER_PROMETHEUS_RETRIES", 2, 0, 10),
            prometheus_bearer_token_file=Path(token_file) if token_file else None,
            prometheus_insecure_skip_verify=boolean("SLASCALER_PROMETHEUS_INSECURE_SKIP_VERIFY"),
            namespace_label=label("SLASCALER_NAMESPACE_LABEL", "namespace"),
            pod_label=label("SLASCALER_POD_LABEL", "pod"),
            watch_namespaces=namespaces,
            reconcile_interval_s=interval,
            dry_run=boolean("SLASCALER_DRY_RUN"),
            gpu_pools=boolean("SLASCALER_GPU_POOLS", "true"),
            peering=text("SLASCALER_PEERING") or None,
            priority=integer("SLASCALER_PRIORITY", default_priority, -(2**31), 2**31 - 1),
            health_port=integer("SLASCALER_HEALTH_PORT", 8080, 0, 65535),
            metrics_port=integer("SLASCALER_METRICS_PORT", 8000, 0, 65535),
            bind_address=text("SLASCALER_BIND_ADDRESS", "0.0.0.0") or "0.0.0.0",
            log_level=level,
        )
