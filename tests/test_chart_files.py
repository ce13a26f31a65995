"""The chart's copy of what the operator reads: `files/recorded-series.json` (the series its
PrometheusRule records) is the operator's own table, so the two cannot drift."""

from __future__ import annotations

import json
from pathlib import Path

from slascaler.engine_metrics import ENGINE_METRICS
from slascaler.metrics.promql import recorded_catalog

CATALOG = Path(__file__).parents[1] / "charts" / "slascaler" / "files" / "recorded-series.json"


def test_the_chart_records_the_series_the_operator_reads() -> None:
    families = tuple(f for m in ENGINE_METRICS.values() for f in m.histograms.values())
    written = json.loads(CATALOG.read_text(encoding="utf-8"))
    assert written == recorded_catalog(families), (
        "regenerate charts/slascaler/files/recorded-series.json from recorded_catalog()"
    )
