"""PromQL building: label values escaped as strings and as regular expressions; the pod
pattern matches the pods Kubernetes names for a Deployment and no other workload's."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slascaler.engine_metrics import SGLANG, TGI, VLLM
from slascaler.metrics.promql import (
    PodSelector,
    Scope,
    counters_query,
    deployment_pod_pattern,
    duration,
    escape_regex,
    escape_string,
    family_query,
    gauges_query,
    histogram_queries,
    owned_pods_pattern,
    pods_pattern,
    recorded_name,
    recording_rules,
)
from slascaler.owned_pods import OwnedPods


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
        '{namespace="team-a",pod=~"^llama\\\\.chat-'
        '[bcdfghjklmnpqrstvwxz2456789]{1,10}-[bcdfghjklmnpqrstvwxz2456789]{5}$"}'
    )
    queries = histogram_queries("vllm:time_to_first_token_seconds", selector, 120)
    assert queries.buckets.startswith(
        "sum by (le) (increase(vllm:time_to_first_token_seconds_bucket{"
    )
    assert queries.buckets.endswith("[120000ms]))")
    gauges = gauges_query(VLLM, selector.scope(), 30, 30)
    assert "max by (namespace, pod, instance, job) (count_over_time(vllm:num_requests_running{" in (
        gauges
    )
    assert 'vllm:num_requests_waiting_by_reason{namespace="team-a",pod=~"^llama' in gauges
    assert ',reason="capacity"}' in gauges


def test_the_counters_query_reads_every_token_series_and_the_recent_requests() -> None:
    """One query per (engine, window): each token counter's increase over the window by
    pod and scrape target, every name it has had, and the requests of the recent window."""
    query = counters_query(VLLM, Scope(("a",)), 120, 30)
    group = "sum by (namespace, pod, instance, job)"
    for index, name in enumerate(
        ("vllm:prompt_tokens_cached_total", "vllm:prefix_cache_hits_total",
         "vllm:gpu_prefix_cache_hits_total")
    ):  # fmt: skip
        expected = f'label_replace({group} (increase({name}{{namespace="a"}}[120000ms])), '
        assert expected + f'"slascaler_part", "cached_tokens:{index}:increase", "", "")' in query
    for key, name in (("prompt_tokens", "vllm:prompt_tokens_total"),
                      ("generated_tokens", "vllm:generation_tokens_total")):  # fmt: skip
        assert f'{group} (increase({name}{{namespace="a"}}[120000ms])), ' in query
        assert f'"{key}:0:increase"' in query
    recent = 'increase(vllm:time_to_first_token_seconds_count{namespace="a"}[30000ms])'
    assert f'label_replace({group} ({recent}), "slascaler_part", "requests:0:recent"' in query
    assert query.count(" or ") == 5


def test_tgi_counts_tokens_with_its_histograms_sums_and_requests_with_its_queue() -> None:
    query = counters_query(TGI, Scope(("a",)), 60, 30)
    assert 'increase(tgi_request_input_length_sum{namespace="a"}[60000ms])' in query
    assert 'increase(tgi_request_generated_tokens_sum{namespace="a"}[60000ms])' in query
    assert 'increase(tgi_request_queue_duration_count{namespace="a"}[30000ms])' in query
    assert "cached_tokens" not in query


def test_the_gauges_query_reads_the_waiting_requests_the_recent_window_ago() -> None:
    query = gauges_query(SGLANG, Scope(("a",)), 120, 30)
    assert (
        'label_replace(sum by (namespace, pod, instance, job) '
        '(sglang:num_queue_reqs{namespace="a"} offset 30000ms), "slascaler_part", '
        '"waiting:0:then", "", "")'
    ) in query


def test_an_explicit_pod_pattern_replaces_the_name_pattern() -> None:
    """The Kubernetes side may know the pods by ownership: its pattern is used as given."""
    selector = PodSelector("team-a", "llama", pod_pattern="^(?:llama-6d4cf56db6-[a-z0-9]{5})$")
    assert selector.pods == "^(?:llama-6d4cf56db6-[a-z0-9]{5})$"
    assert 'pod=~"^(?:llama-6d4cf56db6-[a-z0-9]{5})$"' in selector.matchers()


def test_a_batch_scope_reads_its_namespaces_and_keeps_pods_apart() -> None:
    """One query for several namespaces: each escaped as a regex alternative, results per
    pod and scrape target, every series name of the family, parts told apart."""
    scope = Scope(("team-b", "team.a", 'x"y'))
    query = family_query(VLLM.histograms["itl"], scope, 120)
    assert 'namespace=~"team-b|team\\\\.a|x\\"y"' in query
    for name in ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"):
        for part in ("bucket", "sum", "count"):
            assert f"increase({name}_{part}{{namespace=~" in query
    assert query.count("sum by (namespace, pod, instance, job, le)") == 2
    assert 'label_replace(' in query and '"slascaler_part", "1:count"' in query
    assert "pod=~" not in query


def test_a_family_with_a_label_filter_keeps_it() -> None:
    query = family_query(SGLANG.histograms["prefill"], Scope(("a",)), 60)
    assert 'sglang:per_stage_req_latency_seconds_bucket{namespace="a",stage="prefill_forward"}' in (
        query
    )


def test_recorded_increases_replace_increase_where_present() -> None:
    family = VLLM.histograms["ttft"]
    series = family.current
    rules = recording_rules((family,), 120)
    names = {rule["record"] for rule in rules}
    assert names == {recorded_name(series, p, 120) for p in ("bucket", "sum", "count")}
    assert recorded_name(series, "bucket", 120) == (
        "slascaler:vllm_time_to_first_token_seconds_bucket:increase120s"
    )
    bucket_rule = next(r for r in rules if r["record"].endswith("_bucket:increase120s"))
    assert bucket_rule["expr"] == (
        "sum by (namespace, pod, instance, job, le) "
        "(increase(vllm:time_to_first_token_seconds_bucket[120000ms]))"
    )
    query = family_query(family, Scope(("a",)), 120, frozenset(names))
    assert "increase(" not in query
    assert 'slascaler:vllm_time_to_first_token_seconds_count:increase120s{namespace="a"}' in query
    # Another window has no rule: computed from the raw series.
    assert "increase(vllm:time_to_first_token_seconds_bucket" in family_query(
        family, Scope(("a",)), 60, frozenset(names)
    )


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


KUBERNETES_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
generated = st.text(alphabet=KUBERNETES_ALPHABET, min_size=1, max_size=10)
dns_name = st.from_regex(r"[a-z0-9]([a-z0-9.-]{0,80}[a-z0-9])?", fullmatch=True)


def kubernetes_pod_name(deployment: str, template_hash: str, suffix: str) -> str:
    """How the Deployment controller and the API server name a Deployment's pod (v1.37)."""
    replica_set = deployment[: 253 - 1 - len(template_hash)] + "-" + template_hash
    return (replica_set + "-")[:58] + suffix


@given(dns_name, generated, st.text(alphabet=KUBERNETES_ALPHABET, min_size=5, max_size=5))
def test_pod_pattern_matches_every_pod_kubernetes_names(
    deployment: str, template_hash: str, suffix: str
) -> None:
    pod = kubernetes_pod_name(deployment, template_hash, suffix)
    assert re.fullmatch(deployment_pod_pattern(deployment), pod), (deployment, pod)


@pytest.mark.parametrize(
    "pod",
    [
        "llama-db-0",  # a StatefulSet's pod
        "llama-chat-6d4cf56db6-x7k2p",  # Deployment llama-chat's pod
        "llama-6d4cf56db6-x7k2",  # not a generated suffix
        "llama-6d4cf56db6-abcde",  # vowels are never generated
        "llama-x7k2p",  # a bare ReplicaSet's or Job's pod
        "team-llama-6d4cf56db6-x7k2p",
    ],
)
def test_pod_pattern_leaves_other_workloads_pods(pod: str) -> None:
    assert not re.fullmatch(deployment_pod_pattern("llama"), pod)


def test_pod_pattern_of_a_name_too_long_for_the_whole_hash() -> None:
    deployment = "a-very-long-deployment-name-for-a-large-language-mo"  # 51 characters
    assert kubernetes_pod_name(deployment, "6d4cf56db6", "x7k2p") == (
        "a-very-long-deployment-name-for-a-large-language-mo-6d4cf5x7k2p"
    )
    pattern = deployment_pod_pattern(deployment)
    assert re.fullmatch(pattern, "a-very-long-deployment-name-for-a-large-language-mo-6d4cf5x7k2p")
    assert re.fullmatch(pattern, "a-very-long-deployment-name-for-a-large-language-mo-6d4-x7k2p")
    assert not re.fullmatch(pattern, "a-very-long-deployment-name-for-a-large-language-mo-x7k2p")


# -- pods by ownership: the ReplicaSets the Deployment owns, and their pods ----------------


def test_a_jobs_pods_are_not_a_deployments_with_the_owned_replica_sets() -> None:
    """`llama-dl-x7k2p` (a Job's pod) matched the name pattern of Deployment `llama`; with the
    ReplicaSets Kubernetes says `llama` owns, only their pods match."""
    assert re.fullmatch(deployment_pod_pattern("llama"), "llama-dl-x7k2p"), "the old weakness"
    pattern = owned_pods_pattern(OwnedPods(("llama-6d4cf56db6", "llama-7f9b8c6d5")))
    assert re.fullmatch(pattern, "llama-6d4cf56db6-x7k2p")
    assert re.fullmatch(pattern, "llama-7f9b8c6d5-q9zt4")
    for other in ("llama-dl-x7k2p", "llama-6d4cf56db6-x7k2", "llama-6d4cf56db6x-x7k2p",
                  "llama-chat-6d4cf56db6-x7k2p", "llama-db-0"):  # fmt: skip
        assert not re.fullmatch(pattern, other), other


def test_deployments_sharing_57_characters_each_read_only_their_own_pods() -> None:
    """`<stem>` (57 characters) and `<stem>-v2`: the API server cuts both Deployments' pod
    names to `<stem>-` before the suffix, so no name pattern can tell them apart; the pods
    each one owns, by exact name, can."""
    stem = "a-deployment-name-that-is-long-enough-to-be-cut-by-the-ap"
    assert len(stem) == 57
    ours, theirs = stem, f"{stem}-v2"
    ours_pod = kubernetes_pod_name(ours, "6d4cf56db6", "x7k2p")
    theirs_pod = kubernetes_pod_name(theirs, "5c9d8b7f6", "q9zt4")
    assert ours_pod == f"{stem}-x7k2p" and theirs_pod == f"{stem}-q9zt4"
    assert re.fullmatch(deployment_pod_pattern(ours), theirs_pod), "the name pattern cannot tell"
    rs = f"{ours}-6d4cf56db6"
    owned = OwnedPods((rs,), ((ours_pod, rs),))
    assert owned.cut() == (rs,)
    pattern = owned_pods_pattern(owned)
    assert re.fullmatch(pattern, ours_pod)
    assert not re.fullmatch(pattern, theirs_pod)


@given(dns_name, generated, st.text(alphabet=KUBERNETES_ALPHABET, min_size=5, max_size=5))
def test_owned_pattern_matches_every_pod_of_the_replica_set(
    deployment: str, template_hash: str, suffix: str
) -> None:
    replica_set = deployment[: 253 - 1 - len(template_hash)] + "-" + template_hash
    pod = kubernetes_pod_name(deployment, template_hash, suffix)
    owned = OwnedPods((replica_set,), ((pod, replica_set),))
    assert re.fullmatch(owned_pods_pattern(owned), pod), (replica_set, pod)


def test_no_pod_matches_nothing_not_even_a_series_without_the_label() -> None:
    pattern = owned_pods_pattern(OwnedPods(()))
    for name in ("", "llama-6d4cf56db6-x7k2p", "x"):
        assert not re.fullmatch(pattern, name)


def test_the_selector_uses_the_owned_pods_when_given() -> None:
    owned = pods_pattern(OwnedPods(("llama-6d4cf56db6",)))
    assert pods_pattern(None) is None
    selector = PodSelector("team-a", "llama", pod_pattern=owned)
    assert selector.matchers() == (
        '{namespace="team-a",pod=~"^(?:llama-6d4cf56db6-[bcdfghjklmnpqrstvwxz2456789]{5})$"}'
    )


@given(dns_name, generated, st.text(alphabet=KUBERNETES_ALPHABET, min_size=5, max_size=5))
def test_the_owned_pods_are_among_the_name_patterns_pods(
    deployment: str, template_hash: str, suffix: str
) -> None:
    """A batch asks Prometheus for its targets' name patterns and each target then keeps the
    pods Kubernetes says it owns: those must be among what the batch asked for."""
    pod = kubernetes_pod_name(deployment, template_hash, suffix)
    replica_set = deployment[: 253 - 1 - len(template_hash)] + "-" + template_hash
    owned = owned_pods_pattern(OwnedPods((replica_set,), ((pod, replica_set),)))
    assert re.fullmatch(owned, pod)
    assert re.fullmatch(deployment_pod_pattern(deployment), pod)
