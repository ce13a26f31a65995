"""The real-time simulator's /metrics: vLLM's names, labels and buckets, parseable text."""

from __future__ import annotations

import math
import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from slascaler.engines import VLLM_TTFT_BUCKETS_S
from slascaler_sim.engine import Request
from slascaler_sim.exposition import escape_label, render
from slascaler_sim.fleet import Fleet
from slascaler_sim.profiles import PROFILES
from slascaler_sim.recorder import MetricRecorder


def _wait_for(condition, deadline_s: float = 10.0):  # type: ignore[no-untyped-def]
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("condition not met before the deadline")


def test_render_is_valid_exposition_with_vllm_buckets() -> None:
    recorder = MetricRecorder()
    recorder.observe("vllm:time_to_first_token_seconds", 0.3)
    text = render([(recorder, {"model_name": 'we"ird\\name', "engine": "0", "pod": "a"})])
    families = {f.name: f for f in text_string_to_metric_families(text)}
    ttft = families["vllm:time_to_first_token_seconds"]
    assert ttft.type == "histogram"
    buckets = [s for s in ttft.samples if s.name.endswith("_bucket")]
    assert [float(s.labels["le"]) for s in buckets] == [*VLLM_TTFT_BUCKETS_S, math.inf]
    assert buckets[0].labels["model_name"] == 'we"ird\\name'
    assert [s.value for s in buckets if float(s.labels["le"]) in (0.25, 0.5)] == [0.0, 1.0]
    assert families["vllm:request_success"].type == "counter"
    assert escape_label('a"b\n') == 'a\\"b\\n'


def test_realtime_fleet_serves_metrics_that_move_with_the_clock() -> None:
    from slascaler_sim.exposition import RealtimeFleet

    fleet = Fleet(PROFILES["source-demo"], 2)
    fleet.feed([Request(i, 0.2 + 0.05 * i, 500, 5) for i in range(20)])
    with RealtimeFleet(fleet) as server:
        url = f"http://127.0.0.1:{server.port}/metrics"

        def served() -> float:
            text = urllib.request.urlopen(url, timeout=5).read().decode()
            total = 0.0
            for family in text_string_to_metric_families(text):
                if family.name == "vllm:request_success":
                    total = sum(s.value for s in family.samples)
            return total

        assert _wait_for(lambda: served() == 20)
        one = urllib.request.urlopen(url + "/engine-0", timeout=5).read().decode()
        successes = [
            s
            for family in text_string_to_metric_families(one)
            for s in family.samples
            if s.name == "vllm:request_success_total"
        ]
        assert len(successes) == 1 and set(successes[0].labels) == {"model_name", "engine"}
