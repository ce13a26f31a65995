"""The target Deployment's ReplicaSets and pods, as Kubernetes says they are, and their GPUs.

A Deployment's pods are those of the ReplicaSets it owns (the ReplicaSet's ownerReference
with `controller: true` names the Deployment's uid), and a ReplicaSet's pods are those it
owns in turn: never pods that merely share a label or a name prefix (a Job `llama-dl`'s pods
are not Deployment `llama`'s, nor are the pods of a Deployment whose name shares its first
57 characters). The owned ReplicaSets and their pods (`OwnedPods`) are what the metric
source turns into its pod matcher.

The GPU the engine runs on is read from the labels NVIDIA's GPU feature discovery puts on the
nodes of those pods (`nvidia.com/gpu.product`, `nvidia.com/gpu.memory`, in MiB, and
`nvidia.com/gpu.compute.major/minor`): the engines' defaults depend on it.

Called by `kube.fleet`; raises only `kube.errors` exceptions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from slascaler.engines import GPU
from slascaler.kube.api import Json, KubeAPI
from slascaler.kube.errors import Forbidden, NotFound
from slascaler.owned_pods import OwnedPods

PRODUCT, MEMORY = "nvidia.com/gpu.product", "nvidia.com/gpu.memory"
COMPUTE_MAJOR, COMPUTE_MINOR = "nvidia.com/gpu.compute.major", "nvidia.com/gpu.compute.minor"


def label_selector(selector: Mapping[str, Any]) -> str:
    """A Deployment's spec.selector as a label-selector string."""
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values")
        if operator == "In":
            parts.append(f"{key} in ({','.join(values)})")
        elif operator == "NotIn":
            parts.append(f"{key} notin ({','.join(values)})")
        elif operator == "Exists":
            parts.append(key)
        elif operator == "DoesNotExist":
            parts.append(f"!{key}")
    return ",".join(parts)


def controller_uid(item: Mapping[str, Any]) -> str | None:
    """The uid of the object's controlling owner, if any."""
    for reference in item.get("metadata", {}).get("ownerReferences") or []:
        if reference.get("controller"):
            uid = reference.get("uid")
            return str(uid) if uid is not None else None
    return None


def owned_replica_sets(api: KubeAPI, namespace: str, deployment: Json) -> list[Json]:
    """The ReplicaSets the Deployment controls, newest revision first."""
    selector = label_selector(deployment["spec"]["selector"])
    uid = deployment["metadata"].get("uid")
    owned = [rs for rs in api.list_replica_sets(namespace, selector) if controller_uid(rs) == uid]
    return sorted(owned, key=_revision, reverse=True)


def _revision(replica_set: Json) -> int:
    annotations = replica_set["metadata"].get("annotations") or {}
    try:
        return int(annotations.get("deployment.kubernetes.io/revision", "0"))
    except ValueError:
        return 0


def owned_pods(
    api: KubeAPI, namespace: str, deployment: Json, replica_sets: Sequence[Json]
) -> list[Json]:
    """The pods of the Deployment's ReplicaSets (by ownerReference, not by label alone)."""
    selector = label_selector(deployment["spec"]["selector"])
    uids = {rs["metadata"].get("uid") for rs in replica_sets}
    return [pod for pod in api.list_pods(namespace, selector) if controller_uid(pod) in uids]


def owned(replica_sets: Sequence[Json], pods: Sequence[Json]) -> OwnedPods:
    """The owned ReplicaSets' names and their pods now (which the metric source matches)."""
    names = {rs["metadata"].get("uid"): str(rs["metadata"]["name"]) for rs in replica_sets}
    return OwnedPods(
        tuple(sorted(names.values())),
        tuple(
            sorted(
                (str(pod["metadata"]["name"]), names[uid])
                for pod in pods
                if (uid := controller_uid(pod)) in names
            )
        ),
    )


def unschedulable(pods: Sequence[Json]) -> int:
    """Pods Pending with the scheduler's `Unschedulable` reason (e.g. no GPU left)."""
    count = 0
    for pod in pods:
        status = pod.get("status") or {}
        if pod["metadata"].get("deletionTimestamp") or status.get("phase") != "Pending":
            continue
        for condition in status.get("conditions") or []:
            if (
                condition.get("type") == "PodScheduled"
                and condition.get("status") == "False"
                and condition.get("reason") == "Unschedulable"
            ):
                count += 1
    return count


def _gpu_from_labels(labels: Mapping[str, str]) -> GPU | None:
    product = labels.get(PRODUCT)
    if not product:
        return None
    try:
        memory: int | None = int(labels[MEMORY]) if MEMORY in labels else None
    except ValueError:
        memory = None
    try:
        compute = (int(labels[COMPUTE_MAJOR]), int(labels[COMPUTE_MINOR]))
    except (KeyError, ValueError):
        compute = None
    return GPU(product, memory, compute)


def pods_gpu(api: KubeAPI, pods: Sequence[Json]) -> GPU | str:
    """The GPU the pods run on, from their nodes' labels; or why it is not known."""
    nodes = sorted(
        {str(p["spec"]["nodeName"]) for p in pods if (p.get("spec") or {}).get("nodeName")}
    )
    if not nodes:
        return "no pod of the Deployment is on a node yet, so its GPU is not known"
    gpus: dict[GPU, list[str]] = {}
    for node in nodes:
        try:
            labels = api.get_node(node)["metadata"].get("labels") or {}
        except NotFound:
            continue
        except Forbidden:
            return (
                "the operator may not read nodes (grant get on nodes, as the chart does), so "
                "the GPU is not known"
            )
        gpu = _gpu_from_labels(labels)
        if gpu is None:
            return (
                f"node {node} has no {PRODUCT} label (NVIDIA's GPU feature discovery sets it), "
                "so the GPU is not known"
            )
        gpus.setdefault(gpu, []).append(node)
    if len(gpus) != 1:
        kinds = "; ".join(f"{gpu} on {', '.join(names)}" for gpu, names in gpus.items())
        return f"the pods run on different GPUs ({kinds or 'none found'})"
    return next(iter(gpus))
