"""`kube.pods` over the in-memory cluster: selectors, revisions, and the GPU from node labels.

A Deployment's `matchExpressions` become the label-selector string the API server reads; the
ReplicaSets are ordered by their revision (a revision that is not a number counts as 0);
the GPU is read from the labels of the pods' nodes, and what stops it being known (a node
gone, nodes the operator may not read, a node without NVIDIA's labels, pods on different
GPUs, no pod scheduled yet) is said in words instead.
"""

from __future__ import annotations

from typing import Any

from test_reconcile import SLA, raises

from edge import NAME, NAMESPACE, Edge
from slascaler.engines import GPU
from slascaler.kube.errors import Forbidden
from slascaler.kube.pods import label_selector, owned_replica_sets, pods_gpu
from slascaler_sim.cluster import A100_80GB

H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.memory": "81559",
        "nvidia.com/gpu.compute.major": "9", "nvidia.com/gpu.compute.minor": "0"}  # fmt: skip


def test_match_expressions_become_the_selector_the_api_server_reads() -> None:
    selector = {
        "matchLabels": {"app": "llama", "tier": "serving"},
        "matchExpressions": [
            {"key": "zone", "operator": "In", "values": ["a", "b"]},
            {"key": "canary", "operator": "NotIn", "values": ["true"]},
            {"key": "gpu", "operator": "Exists"},
            {"key": "legacy", "operator": "DoesNotExist"},
        ],
    }
    assert label_selector(selector) == (
        "app=llama,tier=serving,zone in (a,b),canary notin (true),gpu,!legacy"
    )


def pods(edge: Edge) -> list[Any]:
    return edge.cluster.list_pods(NAMESPACE, f"app={NAME}")


def test_the_gpu_is_read_from_the_nodes_labels() -> None:
    edge = Edge(SLA, node_labels=H100)
    assert pods_gpu(edge.cluster, pods(edge)) == GPU("NVIDIA-H100-80GB-HBM3", 81559, (9, 0))
    edge = Edge(SLA, node_labels={**A100_80GB, "nvidia.com/gpu.memory": "80GB"})
    assert pods_gpu(edge.cluster, pods(edge)) == GPU("NVIDIA-A100-SXM4-80GB", None, None)


def test_a_node_without_nvidias_labels_leaves_the_gpu_unknown_and_says_so() -> None:
    edge = Edge(SLA, node_labels={"kubernetes.io/arch": "amd64"})
    said = pods_gpu(edge.cluster, pods(edge))
    assert isinstance(said, str)
    assert said.startswith("node gpu-node-0 has no nvidia.com/gpu.product label")


def test_nodes_the_operator_may_not_read_leave_the_gpu_unknown_and_say_the_fix() -> None:
    edge = Edge(SLA)
    edge.cluster.fail("get_node", raises(Forbidden('nodes "gpu-node-0" is forbidden')))
    said = pods_gpu(edge.cluster, pods(edge))
    assert said == (
        "the operator may not read nodes (grant get on nodes, as the chart does), so the GPU "
        "is not known"
    )


def test_a_node_gone_is_skipped_and_pods_on_different_gpus_are_named() -> None:
    edge = Edge(SLA)
    on_a100 = pods(edge)
    other = edge.cluster.add_deployment(NAMESPACE, "other", edge.fleet, node_labels=H100)
    on_h100 = edge.cluster.list_pods(NAMESPACE, f"app={other.name}")
    said = pods_gpu(edge.cluster, [*on_a100, *on_h100])
    assert isinstance(said, str) and said.startswith("the pods run on different GPUs (")
    assert "gpu-node-0" in said and "gpu-node-1" in said

    del edge.cluster.nodes["gpu-node-1"]  # drained and deleted since the pods were listed
    assert pods_gpu(edge.cluster, [*on_a100, *on_h100]) == GPU("NVIDIA-A100-SXM4-80GB", 81920)
    assert pods_gpu(edge.cluster, on_h100) == "the pods run on different GPUs (none found)"


def test_unscheduled_pods_leave_the_gpu_unknown() -> None:
    edge = Edge(SLA)
    unscheduled = [{**p, "spec": {**p["spec"], "nodeName": None}} for p in pods(edge)]
    assert pods_gpu(edge.cluster, unscheduled) == (
        "no pod of the Deployment is on a node yet, so its GPU is not known"
    )


def test_replica_sets_come_newest_revision_first_a_garbled_revision_last() -> None:
    edge = Edge(SLA)
    deployment = edge.live()
    [current] = owned_replica_sets(edge.cluster, NAMESPACE, deployment)
    original = edge.cluster.list_replica_sets

    def with_older(namespace: str, selector: str) -> list[Any]:
        listed = original(namespace, selector)
        older = {**listed[0], "metadata": {**listed[0]["metadata"], "name": "llama-old",
                 "annotations": {"deployment.kubernetes.io/revision": "not-a-number"}}}  # fmt: skip
        return [older, *listed]

    edge.cluster.list_replica_sets = with_older  # type: ignore[method-assign]
    owned = owned_replica_sets(edge.cluster, NAMESPACE, deployment)
    names = [rs["metadata"]["name"] for rs in owned]
    assert names == [current["metadata"]["name"], "llama-old"]
