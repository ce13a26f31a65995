"""The chart's Grafana dashboard and alerts as data: render them with helm, list their PromQL,
name the metrics each query reads, and the metrics that really exist.

- `render(helm, *values)`: the chart's objects (`helm template`).
- `panel_queries(dashboard)`: (panel title, PromQL) for every query of every panel;
  `variable_queries(dashboard)`: the template variables' `label_values(selector, label)`.
- `metric_names(promql)`: the metric names a PromQL expression reads (strings, label
  matchers, ranges and grouping clauses removed; functions and keywords are not metrics).
- `operator_metric_names()`: every sample name the operator's registry exports (`Telemetry`);
  `engine_metric_names()`: every sample name of the simulated vLLM engines' exposition (the
  simulator serves vLLM's exact names, `slascaler_sim.exposition`).
- `substitute(promql, variables)`: Grafana's `$variables` and `$__rate_interval` replaced, so
  that a query runs against Prometheus itself.

Used by `e2e/tests/test_chart.py` (no cluster) and `e2e/tests/test_scenarios.py` (every query
against the e2e Prometheus).
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from e2e.chart import CHART

KEYWORDS = frozenset(
    {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "inf", "nan"}
)
GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
LABEL_VALUES = re.compile(r"^label_values\((.*),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$", re.S)


def render(helm: Path, *values: str) -> list[dict[str, Any]]:
    result = subprocess.run(
        [str(helm), "template", "rel", str(CHART), "--namespace", "ops", *values],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    if result.returncode != 0:
        raise AssertionError(f"helm template failed:\n{result.stderr}")
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def dashboard_of(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (config_map,) = [d for d in docs if d["kind"] == "ConfigMap"]
    dashboard: dict[str, Any] = json.loads(config_map["data"]["slascaler.json"])
    return dashboard


def rules_of(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
    groups: list[dict[str, Any]] = rule["spec"]["groups"]
    return groups


def panel_queries(dashboard: Mapping[str, Any]) -> list[tuple[str, str]]:
    return [
        (panel["title"], target["expr"])
        for panel in dashboard["panels"]
        if panel["type"] != "row"
        for target in panel["targets"]
    ]


def variable_queries(dashboard: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """Each query variable: (selector, label) of its `label_values(selector, label)`."""
    found = {}
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            match = LABEL_VALUES.match(variable["query"]["query"])
            assert match, variable
            found[variable["name"]] = (match.group(1), match.group(2))
    return found


def metric_names(promql: str) -> set[str]:
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', promql)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = GROUPING.sub(" ", text)
    names = set()
    for match in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", text):
        before = text[match.start() - 1] if match.start() else " "
        after = text[match.end() :].lstrip()
        if before.isdigit() or before == "." or after.startswith("("):
            continue  # a number's exponent, a function or an aggregation
        if match.group() not in KEYWORDS:
            names.add(match.group())
    return names


def operator_metric_names() -> set[str]:
    from slascaler.telemetry import Telemetry

    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}
    names = set()
    for family in Telemetry().registry.collect():
        for suffix in suffixes.get(family.type, ("",)):
            names.add(family.name + suffix)
    return names


def engine_metric_names() -> set[str]:
    from slascaler_sim.exposition import render as exposition
    from slascaler_sim.recorder import MetricRecorder

    text = exposition([(MetricRecorder(), {"namespace": "ns", "pod": "pod"})])
    return {
        re.split(r"[{ ]", line, maxsplit=1)[0]
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


def substitute(promql: str, variables: Mapping[str, str], rate_interval: str = "30s") -> str:
    text = promql.replace("$__rate_interval", rate_interval)
    for name, value in sorted(variables.items(), key=lambda item: -len(item[0])):
        text = text.replace(f"${name}", value)
    assert "$" not in text, text
    return text
