"""The operator's settings, from environment variables read once at start-up.

Every variable is documented in `VARIABLES` (docs/operations.md lists them, a unit test
checks that it lists every one, and the chart's values are written from the same names).
`Settings.from_env` parses and checks them all and raises `SettingsError` naming the
variable and what to write instead; the result is passed explicitly to whatever needs it
(no global configuration).

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
    "SLASCALER_SELECTOR": (
        "label selector on InferenceSLAs this operator serves (a shard), e.g. shard=a or "
        "tier in (gold,silver); empty for all (default)"
    ),
    "SLASCALER_RECONCILE_INTERVAL": "how often each InferenceSLA is evaluated (default 15s)",
    "SLASCALER_DRY_RUN": "true to treat every InferenceSLA as mode Recommend (default false)",
    "SLASCALER_GPU_POOLS": "false to ignore GPUPools: no shared GPU budgets (default true)",
    "SLASCALER_MAX_CONCURRENT_EVALUATIONS": "evaluations run at once (default 64)",
    "SLASCALER_EVALUATION_TIMEOUT": (
        "deadline of one evaluation's Prometheus queries, a duration (default 10s or the "
        "reconcile interval if shorter; at most the interval)"
    ),
    "SLASCALER_BATCH_WINDOW": (
        "how long InferenceSLAs falling due are gathered into one batch of queries, a "
        "duration (default 1s, or a quarter of a shorter interval)"
    ),
    "SLASCALER_RECORDING_RULES": (
        "true to read the chart's recording rules where Prometheus has them (default true)"
    ),
    "SLASCALER_PEERING": "Kopf peering name for HA (one active instance); empty: standalone",
    "SLASCALER_PRIORITY": "peering priority, the highest is active (default: random per process)",
    "SLASCALER_HEALTH_PORT": "port of the liveness endpoint /healthz (default 8080; 0: off)",
    "SLASCALER_METRICS_PORT": "port of the operator's own /metrics (default 8000; 0: off)",
    "SLASCALER_BIND_ADDRESS": "address the two endpoints listen on (default 0.0.0.0)",
    "SLASCALER_LOG_LEVEL": "DEBUG, INFO, WARNING or ERROR (default INFO)",
}

_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# A label key: an optional DNS-subdomain prefix and a name (Kubernetes' qualified name).
_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_TRUE = {"true", "1", "yes"}
_FALSE = {"false", "0", "no", ""}


@dataclass(frozen=True)
class LabelRequirement:
    """One requirement of a label selector: `key` `operator` `values` (Kubernetes' meaning:
    `!=` and `notin` also match objects without the label)."""

    key: str
    operator: str  # =, !=, in, notin, exists, !exists
    values: tuple[str, ...] = ()

    def matches(self, value: str | None) -> bool:
        if self.operator == "exists":
            return value is not None
        if self.operator == "!exists":
            return value is None
        if self.operator in ("=", "in"):
            return value is not None and value in self.values
        return value is None or value not in self.values  # !=, notin


def selector_matches(selector: tuple[LabelRequirement, ...], labels: Mapping[str, str]) -> bool:
    """Whether an object's labels meet every requirement (an empty selector: everything)."""
    return all(r.matches(labels.get(r.key)) for r in selector)


_SET_REQUIREMENT = re.compile(r"^\s*(\S+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def parse_selector(text: str) -> tuple[LabelRequirement, ...]:
    """A label selector in kubectl's syntax (`a=b,c!=d,e in (f,g),h,!i`); ValueError naming
    the part it cannot read."""
    parts: list[str] = []
    depth, current = 0, ""
    for char in text:  # commas inside "(...)" belong to a set
        depth += char == "("
        depth -= char == ")"
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    requirements = []
    for part in (p.strip() for p in parts):
        if not part:
            continue
        found = _SET_REQUIREMENT.match(part)
        if found:
            key, operator = found.group(1), found.group(2)
            values = tuple(v.strip() for v in found.group(3).split(",") if v.strip())
        elif "!=" in part:
            key, _, value = (x.strip() for x in part.partition("!="))
            operator, values = "!=", (value,)
        elif "=" in part:
            key, _, value = (x.strip() for x in part.partition("==" if "==" in part else "="))
            operator, values = "=", (value,)
        elif part.startswith("!"):
            key, operator, values = part[1:].strip(), "!exists", ()
        else:
            key, operator, values = part, "exists", ()
        if not _LABEL_KEY.match(key):
            raise ValueError(f"{key!r} is not a label key (in {part!r})")
        for value in values:
            if not _LABEL_VALUE.match(value):
                raise ValueError(f"{value!r} is not a label value (in {part!r})")
        if operator in ("in", "notin") and not values:
            raise ValueError(f"{part!r} lists no values")
        requirements.append(LabelRequirement(key, operator, values))
    return tuple(requirements)


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
    selector: tuple[LabelRequirement, ...] = ()
    reconcile_interval_s: float = 15.0
    dry_run: bool = False
    gpu_pools: bool = True
    max_concurrent_evaluations: int = 64
    evaluation_timeout_s: float = 10.0
    batch_window_s: float = 1.0
    recording_rules: bool = True
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

        def boolean_default(name: str, default: bool) -> bool:
            return boolean(name) if text(name) else default

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
        try:
            selector = parse_selector(text("SLASCALER_SELECTOR"))
        except ValueError as error:
            raise SettingsError(
                "SLASCALER_SELECTOR", f"{error}; write e.g. shard=a or tier in (gold,silver)"
            ) from None
        timeout = duration("SLASCALER_EVALUATION_TIMEOUT", f"{min(10.0, interval):g}s")
        if not 0.1 <= timeout <= interval:
            raise SettingsError(
                "SLASCALER_EVALUATION_TIMEOUT",
                f"{timeout:g}s is outside [0.1s, the reconcile interval {interval:g}s]",
            )
        window = duration("SLASCALER_BATCH_WINDOW", f"{min(1.0, interval / 4):g}s")
        if not 0 <= window <= interval / 2:
            raise SettingsError(
                "SLASCALER_BATCH_WINDOW",
                f"{window:g}s is outside [0s, half the reconcile interval {interval / 2:g}s]",
            )
        return cls(
            prometheus_url=url.rstrip("/"),
            prometheus_timeout_s=duration("SLASCALER_PROMETHEUS_TIMEOUT", "5s"),
            prometheus_retries=integer("SLASCALER_PROMETHEUS_RETRIES", 2, 0, 10),
            prometheus_bearer_token_file=Path(token_file) if token_file else None,
            prometheus_insecure_skip_verify=boolean("SLASCALER_PROMETHEUS_INSECURE_SKIP_VERIFY"),
            namespace_label=label("SLASCALER_NAMESPACE_LABEL", "namespace"),
            pod_label=label("SLASCALER_POD_LABEL", "pod"),
            watch_namespaces=namespaces,
            selector=selector,
            reconcile_interval_s=interval,
            dry_run=boolean("SLASCALER_DRY_RUN"),
            gpu_pools=boolean_default("SLASCALER_GPU_POOLS", True),
            max_concurrent_evaluations=integer("SLASCALER_MAX_CONCURRENT_EVALUATIONS", 64, 1, 512),
            evaluation_timeout_s=timeout,
            batch_window_s=window,
            recording_rules=boolean_default("SLASCALER_RECORDING_RULES", True),
            peering=text("SLASCALER_PEERING") or None,
            priority=integer("SLASCALER_PRIORITY", default_priority, -(2**31), 2**31 - 1),
            health_port=integer("SLASCALER_HEALTH_PORT", 8080, 0, 65535),
            metrics_port=integer("SLASCALER_METRICS_PORT", 8000, 0, 65535),
            bind_address=text("SLASCALER_BIND_ADDRESS", "0.0.0.0") or "0.0.0.0",
            log_level=level,
        )
