"""PromQL building: label values escaped as strings and as regular expressions."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from slascaler.engines import ENGINES
from slascaler.metrics.promql import (
    PodSelector,
    duration,
    escape_regex,
    escape_string,
    gauge_queries,
    histogram_queries,
)
from slascaler.spec import Engine


def unescape_promql_string(text: str) -> str:
    """Decode a double-quoted PromQL string body (Go's strconv.Unquote rules we emit)."""
    out, i = [], 0
    simple = {"\\": "\\", '"': '"', "n": "\n", "r": "\r", "t": "\t"}
    while i < len(text):
        char = text[i]
        assert char != '"', "an unescaped quote would end the string"
        if char == "\\":
            code = text[i + 1]
            if code == "x":
                out.append(chr(int(text[i + 2 : i + 4], 16)))
                i += 4
                continue
            out.append(simple[code])
            i += 2
            continue
        out.append(char)
        i += 1
    return "".join(out)


@given(st.text())
def test_strings_round_trip_and_never_end_early(value: str) -> None:
    assert unescape_promql_string(escape_string(value)) == value


@given(st.text(alphabet=st.characters(codec="ascii")))
def test_regex_matches_exactly_the_value(value: str) -> None:
    pattern = escape_regex(value)
    assert re.fullmatch(pattern, value, flags=re.DOTALL)
    assert not re.fullmatch(pattern, value + "x", flags=re.DOTALL)


def test_selector_pins_namespace_and_pod_pattern() -> None:
    selector = PodSelector("team-a", "llama.chat")
    assert selector.matchers() == (
        '{namespace="team-a",pod=~"^llama\\\\.chat-[a-z0-9]+-[a-z0-9]+$"}'
    )
    queries = histogram_queries("vllm:time_to_first_token_seconds", selector, 120)
    assert queries.buckets.startswith(
        "sum by (le) (increase(vllm:time_to_first_token_seconds_bucket{"
    )
    assert queries.buckets.endswith("[120000ms]))")
    gauges = gauge_queries(ENGINES[Engine.VLLM], selector, 30)
    assert gauges.reporting_pods.startswith("sum(count_over_time(vllm:num_requests_running{")


def test_configured_label_names_are_checked() -> None:
    try:
        PodSelector("a", "b", namespace_label='x"}')
    except ValueError as error:
        assert "not a Prometheus label name" in str(error)
    else:
        raise AssertionError("a bad label name was accepted")


def test_durations_are_whole_milliseconds() -> None:
    assert duration(2.5) == "2500ms"
    assert duration(0) == "1ms"
