"""Engine command lines as users write them, through the reconcile path on the in-memory cluster.

Each case checks what the operator reads, the EngineFlags condition (naming the value and the
fix), that nothing is written where the value cannot be set, and that the status is still
written (the cluster validates it against the CRD's schema, int32 fields included).
"""

from __future__ import annotations

from typing import Any

import pytest
from test_reconcile import SLA, raises

from edge import NAME, NAMESPACE, Edge
from slascaler.kube.errors import Forbidden
from slascaler.kube.fleet import read_fleet
from slascaler.spec import Engine, parse_spec

BATCH = {**SLA, "knobs": {"maxBatchSize": {"min": 100, "max": 200}}}  # 64 is below: raise it
CHUNK = {**SLA, "knobs": {"chunkSize": {"min": 512, "max": 8192}}}
SIDECAR = {"name": "proxy", "image": "envoyproxy/envoy:v1.30", "args": ["--config-path", "/e"]}


def assert_refused(edge: Edge, reason: str, *words: str) -> dict[str, Any]:
    condition = edge.condition("EngineFlags")
    assert (condition["status"], condition["reason"]) == ("False", reason), condition
    for word in words:
        assert word in condition["message"], (word, condition["message"])
    assert edge.telemetry.errors.labels("status")._value.get() == 0, "the status was written"
    return condition


def test_readable_flags_say_where_they_come_from() -> None:
    edge = Edge(BATCH)
    edge.reconcile()
    condition = edge.condition("EngineFlags")
    assert (condition["status"], condition["reason"]) == ("True", "Readable")
    assert condition["message"] == (
        "container engine: maxBatchSize --max-num-seqs 64, chunkSize --max-num-batched-tokens 2048"
    )


@pytest.mark.parametrize(
    ("command", "args"),
    [
        (("sh", "-c"), ("exec vllm serve llama --port 8000",)),  # the flag absent: no append
        (("/bin/bash", "-lc"), ("vllm serve llama --max-num-seqs 64",)),
    ],
)
def test_a_shell_script_is_refused_and_nothing_is_appended(
    command: tuple[str, ...], args: tuple[str, ...]
) -> None:
    edge = Edge(BATCH, command=command, args=args)
    edge.reconcile()
    assert_refused(edge, "ShellScript", "--max-num-seqs", "run the engine directly")
    assert tuple(edge.container()["args"]) == args and edge.patches() == 0
    assert "maxBatchSize" not in edge.status.get("engineFlags", {})


@pytest.mark.parametrize(
    ("flag", "reason", "words"),
    [
        (("--max-num-seqs=abc",), "InvalidValue", ("--max-num-seqs=abc is not a whole number",)),
        (("--max-num-seqs",), "MissingValue", ("--max-num-seqs has no value",)),
        (("--max-num-seqs", "--port", "8000"), "MissingValue", ("followed by --port",)),
        (("--max-num-seqs", "4294967296"), "OutOfRange", ("4294967296 is beyond 2147483647",)),
        (("--max-num-seqs", "-5"), "InvalidValue", ("-5 is not a positive number",)),
    ],
)
@pytest.mark.parametrize("declared", [True, False], ids=["knob", "no-knob"])
def test_an_unusable_value_is_named_with_the_fix_and_the_status_is_written(
    flag: tuple[str, ...], reason: str, words: tuple[str, ...], declared: bool
) -> None:
    args = ("--model", "llama", "--max-num-batched-tokens", "2048", *flag)
    edge = Edge(BATCH if declared else SLA, replicas=20, args=args)  # 20 > max 16: a scale
    evaluation = edge.reconcile()
    assert_refused(edge, reason, *words)
    assert tuple(edge.container()["args"]) == args, "the command line is not written"
    assert [str(c) for c in evaluation.acted] == ["replicas 20→16"], "replicas still managed"
    assert edge.status["engineFlags"] == {"chunkSize": 2048}
    assert edge.status["replicas"] == 16


def test_the_engine_container_is_found_by_its_command_not_its_position() -> None:
    edge = Edge(BATCH, sidecars=(SIDECAR,), command=("vllm", "serve"))
    evaluation = edge.reconcile()
    assert [str(c) for c in evaluation.acted] == ["maxBatchSize 64→100"]
    sidecar, engine = edge.live()["spec"]["template"]["spec"]["containers"]
    assert sidecar == SIDECAR
    assert engine["args"][engine["args"].index("--max-num-seqs") + 1] == "100"


def test_the_engine_container_is_found_by_its_image_when_the_command_is_the_images() -> None:
    edge = Edge(BATCH, sidecars=(SIDECAR,), image="vllm/vllm-openai:v0.33.0")
    assert [str(c) for c in edge.reconcile().acted] == ["maxBatchSize 64→100"]


def test_several_containers_none_recognisable_is_refused_with_the_reason() -> None:
    edge = Edge(BATCH, replicas=20, sidecars=(SIDECAR,), image="registry.local/llm:1")
    evaluation = edge.reconcile()
    assert_refused(
        edge, "EngineContainerUnknown", "several containers (proxy, engine)",
        "spec.targetRef.container",
    )  # fmt: skip
    assert [str(c) for c in evaluation.acted] == ["replicas 20→16"]
    assert edge.container()["args"][edge.container()["args"].index("--max-num-seqs") + 1] == "64"


def test_a_named_container_is_used_even_among_several() -> None:
    edge = Edge(
        {**BATCH, "targetRef": {"name": NAME, "container": "engine"}},
        sidecars=(SIDECAR,),
        image="registry.local/llm:1",
    )
    assert [str(c) for c in edge.reconcile().acted] == ["maxBatchSize 64→100"]


def test_a_value_that_may_live_in_vllms_config_file_is_not_tuned() -> None:
    args = ("--model", "llama", "--config", "/etc/vllm/serve.yaml")
    edge = Edge(BATCH, args=args)
    edge.reconcile()
    assert_refused(
        edge, "InConfigFile", "--max-num-seqs is not on the command line",
        "--config /etc/vllm/serve.yaml", "put --max-num-seqs in args",
    )  # fmt: skip
    assert edge.patches() == 0


def test_a_flag_on_the_command_line_wins_over_the_config_file() -> None:
    args = ("--config", "/etc/vllm/serve.yaml", "--max-num-seqs", "64")
    edge = Edge(BATCH, args=args)
    assert [str(c) for c in edge.reconcile().acted] == ["maxBatchSize 64→100"]


TGI = {**SLA, "engine": "tgi", "knobs": {"maxBatchSize": {"min": 100, "max": 200}}}


def test_tgi_reads_its_environment_and_is_tuned_there() -> None:
    args = ("--model-id", "llama", "--max-batch-prefill-tokens", "4096")
    edge = Edge(TGI, engine=Engine.TGI, args=args, env=(("MAX_BATCH_SIZE", "32"),))
    evaluation = edge.reconcile()
    assert [str(c) for c in evaluation.acted] == ["maxBatchSize 32→100"]
    container = edge.container()
    assert tuple(container["args"]) == args, "args untouched: the value lives in env"
    assert container["env"] == [{"name": "MAX_BATCH_SIZE", "value": "100"}]
    assert edge.condition("EngineFlags")["status"] == "True"
    assert edge.deployment.settings().max_num_seqs == 100, "the engine reads it there too"


def test_tgi_prefill_tokens_in_its_environment_are_read_and_tuned_there() -> None:
    """The chunk knob's TGI spelling lives in MAX_BATCH_PREFILL_TOKENS: read there (the
    bounds force a change), written back there, the batch flag on the command line kept."""
    chunk = {**SLA, "engine": "tgi", "knobs": {"chunkSize": {"min": 8192, "max": 16384}}}
    args = ("--model-id", "llama", "--max-batch-size", "64")
    edge = Edge(chunk, engine=Engine.TGI, args=args,
                env=(("MAX_BATCH_PREFILL_TOKENS", "4096"),))  # fmt: skip
    evaluation = edge.reconcile()
    assert [str(c) for c in evaluation.acted] == ["chunkSize 4096→8192"]
    container = edge.container()
    assert tuple(container["args"]) == args, "args untouched: the value lives in env"
    assert container["env"] == [{"name": "MAX_BATCH_PREFILL_TOKENS", "value": "8192"}]
    assert edge.deployment.settings().max_num_batched_tokens == 8192


def test_tgi_env_from_a_config_map_is_refused() -> None:
    args = ("--model-id", "llama", "--max-batch-prefill-tokens", "4096")
    edge = Edge(TGI, engine=Engine.TGI, args=args, env=(("MAX_BATCH_SIZE", None),))
    edge.reconcile()
    assert_refused(edge, "ValueFromReference", "MAX_BATCH_SIZE", "valueFrom")
    assert edge.patches() == 0


def test_tgi_without_the_flag_is_not_assumed_anything() -> None:
    edge = Edge(TGI, engine=Engine.TGI, args=("--model-id", "llama"))
    edge.reconcile()
    assert_refused(edge, "NoDefault", "TGI sizes --max-batch-size", "set --max-batch-size")
    assert edge.patches() == 0


H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.memory": "81559"}
B200 = {"nvidia.com/gpu.product": "NVIDIA-B200", "nvidia.com/gpu.memory": "183359"}
A100 = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.memory": "81920"}
L4 = {"nvidia.com/gpu.product": "NVIDIA-L4", "nvidia.com/gpu.memory": "23034"}


@pytest.mark.parametrize(
    ("labels", "batch", "chunk"),
    [(H100, 1024, 8192), (B200, 1024, 16384), (A100, 256, 2048), (L4, 256, 2048)],
    ids=["h100", "b200", "a100", "l4"],
)
def test_vllms_default_depends_on_the_gpu_of_the_pods_nodes(
    labels: dict[str, str], batch: int, chunk: int
) -> None:
    spec = {**SLA, "knobs": {"maxBatchSize": {"min": 1, "max": 4096},
                             "chunkSize": {"min": 1, "max": 65536}}}  # fmt: skip
    edge = Edge(spec, args=("--model", "llama"), node_labels=labels)
    edge.reconcile()
    assert edge.status["engineFlags"] == {"maxBatchSize": batch, "chunkSize": chunk}
    assert f"--max-num-seqs is not set: assuming {batch}, vLLM 0.33's default on " in " ".join(
        edge.status["notes"]
    )
    assert edge.deployment.settings().max_num_seqs == batch, "the simulated engine agrees"


def test_no_gpu_label_means_the_flag_must_be_set() -> None:
    edge = Edge(CHUNK, args=("--model", "llama"), node_labels={"kubernetes.io/os": "linux"})
    edge.reconcile()
    assert_refused(
        edge, "NoDefault", "no nvidia.com/gpu.product label",
        "set --max-num-batched-tokens in the engine's args",
    )  # fmt: skip


def test_nodes_the_operator_may_not_read_mean_the_flag_must_be_set() -> None:
    edge = Edge(CHUNK, args=("--model", "llama"))
    edge.cluster.fail("get_node", raises(Forbidden('nodes "gpu-node-0" is forbidden')))
    edge.reconcile()
    assert_refused(edge, "NoDefault", "may not read nodes")
    assert edge.condition("Ready")["status"] == "True", "only that knob is given up"


def test_a_flag_that_changes_vllms_defaults_is_not_assumed_away() -> None:
    edge = Edge(CHUNK, args=("--model", "llama", "--performance-mode", "throughput"))
    edge.reconcile()
    assert_refused(edge, "NoDefault", "--performance-mode changes vLLM's default")


def test_sglang_chunking_off_is_said_as_such() -> None:
    spec = {**CHUNK, "engine": "sglang"}
    args = ("--model-path", "llama", "--max-running-requests", "64", "--chunked-prefill-size", "-1")
    edge = Edge(spec, engine=Engine.SGLANG, args=args, replicas=2)
    edge.reconcile()
    assert_refused(edge, "ChunkingOff", "turns SGLang's chunked prefill off")
    assert edge.patches() == 0


def test_the_pods_of_other_workloads_are_not_counted() -> None:
    """A Job `llama-dl` whose pods carry the same `app` label: not the Deployment's pods."""
    edge = Edge(SLA)
    edge.cluster.other_pods[NAMESPACE] = [
        {
            "metadata": {
                "name": "llama-dl-x7k2p",
                "labels": {"app": "llama"},
                "ownerReferences": [
                    {"kind": "Job", "name": "llama-dl", "uid": "j", "controller": True}
                ],
            },
            "spec": {},
            "status": {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]},
        }
    ]  # fmt: skip
    view = read_fleet(edge.cluster, NAMESPACE, parse_spec(edge.sla()["spec"]))
    assert view.state.unschedulable_pods == 0, "the Job's Pending pod is not the Deployment's"
    [replica_set] = edge.cluster.list_replica_sets(NAMESPACE, "app=llama")
    assert view.pods.replica_sets == (replica_set["metadata"]["name"],)
    assert [rs for _, rs in view.pods.pods] == [replica_set["metadata"]["name"]] * 4
    edge.reconcile()
    assert edge.source.pods == view.pods, "the metric source gets them"
