"""An in-memory Kubernetes behind the operator's `KubeAPI`, its Deployments run by simulated fleets.

The benchmark, the demo and the unit tests of the operator's edge run the operator's own
`Reconciler` against this cluster, so validation, the write-ahead status, Events and
actuation are exercised exactly as on a real API server. What it keeps of the API server's
semantics, because the operator depends on them:

- every object has a `resourceVersion` that changes on every change of the object, its
  status included (as the Deployment controller's status updates do), and a conditional
  write at an older version is refused with `Conflict`; a template change bumps
  `metadata.generation`;
- a Deployment's spec is read and written as JSON; its pods, ready and updated counts come
  from the simulated fleet behind it (`sim.fleet`): starting pods, Ready pods, Pending pods
  with the scheduler's `Unschedulable` reason when the GPUs run out, and a rolling update
  honouring the strategy's maxSurge/maxUnavailable when the engine flags change;
- the Deployment owns one ReplicaSet per pod template its pods run (named
  `<deployment>-<template hash>`, labelled `pod-template-hash`, with the revision
  annotation), each owning its pods (`<replicaset>-<5 characters>`, ownerReferences with
  `controller: true`, `spec.nodeName` once scheduled), as the Deployment controller does; a
  change of the template by someone else (`roll_image`) starts a rollout that may be stuck;
- `metadata.managedFields` say which field manager owns `spec.replicas` and the engine
  container's `args`, `command`, `env` and `image`, with the time of its last change: on a
  write, the manager that changes a field takes it over (the API server's update semantics);
  the operator writes as `slascaler`, a person or a GitOps tool through `scale_by`,
  `set_command_line` and `roll_image`; `creationTimestamp` on every object, from `clock`;
- nodes carry the labels NVIDIA's GPU feature discovery sets (`nvidia.com/gpu.product`,
  `nvidia.com/gpu.memory`); the engine reads its flags where the real one does (args, TGI's
  env) and takes the real engine's defaults on that GPU when a flag is absent;
- the status subresource takes JSON merge patches and, given the CRD's status schema,
  prunes unknown fields and refuses values outside their type or `format` (422), as the API
  server does for a structural schema;
- Events are created by name (`Conflict` when the name exists);
- for shared GPU pools (`PoolAPI`): GPUPools (cluster-scoped, their status validated against
  the GPUPool CRD's schema when given), InferenceSLAs listed with their labels, nodes with
  allocatable GPUs, ResourceQuotas; a Deployment's pod template asks for its GPUs
  (`nvidia.com/gpu`) when it was added with `gpus`;
- faults can be injected per call (`fail`), to test what the operator does when a write is
  refused, times out, or the process dies between two writes.

Used by `sim.run` (benchmark and demo) and by the tests of the reconcile path.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from slascaler.engine_args import CommandLine, EngineArgsError
from slascaler.engine_container import EngineContainer, read_setting
from slascaler.engines import ENGINES, GPU, EngineDefault, engine_default
from slascaler.kube.api import (
    FIELD_MANAGER,
    GROUP,
    KIND,
    POOL_KIND,
    VERSION,
    DeploymentPatch,
    Json,
    kube_time,
)
from slascaler.kube.errors import Conflict, KubeError, NotFound
from slascaler.spec import Engine
from slascaler_sim.engine import Phase, Replica
from slascaler_sim.fleet import EngineSettings, Fleet

INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
CREATOR = "kubectl-client-side-apply"  # the field manager of `kubectl apply` (client-side)
# Kubernetes' alphabet for generated names (no vowels, no 0/1/3).
SAFE = "bcdfghjklmnpqrstvwxz2456789"
A100_80GB = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.memory": "81920"}
# What the simulated engine runs with when a flag is absent and the real default is not
# known (TGI sizes from the model; SGLang's max running requests from its KV pool).
FALLBACK = EngineSettings(256, 2048)


class Crash(BaseException):
    """An injected death of the operator's process in the middle of a call.

    A BaseException, so that no `except Exception` in the operator can swallow it: the
    reconcile stops there, as a killed process would.
    """


@dataclass
class SimDeployment:
    """One Deployment: its stored JSON (metadata and spec) and the fleet that runs it."""

    namespace: str
    name: str
    fleet: Fleet
    engine: Engine
    container: str
    command_line: CommandLine
    labels: Mapping[str, str]
    max_surge: int | str
    max_unavailable: int | str
    uid: str
    node: str
    gpu: GPU | None
    created_at: float = 0.0
    generation: int = 1
    gpus: int | None = None  # nvidia.com/gpu one pod asks for; None: none in the template
    annotations: dict[str, str] = field(default_factory=dict)
    resource_version: int = 0
    fingerprint: str = ""
    image: str = "vllm/vllm-openai:latest"
    pod_image: str = "vllm/vllm-openai:latest"  # the image its pods run (≠ image: a rollout)
    env: tuple[tuple[str, str | None], ...] = ()
    sidecars: tuple[Json, ...] = ()  # other containers, rendered before the engine's
    # field manager → (time of its last change, None through the scale subresource; fields)
    managers: dict[str, tuple[float | None, frozenset[str]]] = field(default_factory=dict)
    templates: dict[tuple[int, int, str], Json] = field(default_factory=dict)
    revisions: dict[tuple[int, int, str], int] = field(default_factory=dict)

    def engine_container(self) -> EngineContainer:
        return EngineContainer(self.container, self.image, self.command_line, self.env)

    def settings(self) -> EngineSettings:
        """The engine flags where the engine reads them (its defaults on the GPU where absent)."""
        flavour = ENGINES[self.engine]
        values: list[int] = []
        for knob, flag, fallback in (
            ("maxBatchSize", flavour.max_batch_flag, FALLBACK.max_num_seqs),
            ("chunkSize", flavour.chunk_flag, FALLBACK.max_num_batched_tokens),
        ):
            try:
                value = read_setting(flavour, self.engine_container(), flag).value
            except EngineArgsError:
                value = None
            if value is None:
                default = engine_default(self.engine, knob, self.gpu)
                value = default.value if isinstance(default, EngineDefault) else fallback
            values.append(value)
        return EngineSettings(max_num_seqs=values[0], max_num_batched_tokens=values[1])

    def write(self, manager: str, fields: set[str], now: float | None) -> None:
        """A write by `manager` that changed `fields`: it takes them over (update semantics).
        `now` None: through the scale subresource, whose entries the API server leaves
        without a time."""
        if not fields:
            return
        for other, (at, owned) in list(self.managers.items()):
            if other != manager and owned & fields:
                left = owned - fields
                if left:
                    self.managers[other] = (at, left)
                else:
                    del self.managers[other]
        _, owned = self.managers.get(manager, (now, frozenset()))
        self.managers[manager] = (now, owned | fields)


_Json = TypeVar("_Json")


def _copied(value: _Json) -> _Json:
    """A deep copy of an API object (dicts, lists, tuples and scalars). `copy.deepcopy` does
    the same with a memo of shared references that API objects never have, and was a tenth
    of a benchmark run's time: every call of the in-memory API copies what it returns."""
    if isinstance(value, dict):
        return cast(_Json, {key: _copied(item) for key, item in value.items()})
    if isinstance(value, list):
        return cast(_Json, [_copied(item) for item in value])
    if isinstance(value, tuple):
        return cast(_Json, tuple(_copied(item) for item in value))
    return value


def _merge(target: dict[str, Any], patch: Mapping[str, Any]) -> None:
    """RFC 7386 JSON merge patch, in place."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = _copied(value) if isinstance(value, dict | list) else value


def _generated(seed: str, length: int) -> str:
    """`length` characters of Kubernetes' name alphabet, derived from `seed`."""
    digest = hashlib.sha256(seed.encode()).digest()
    return "".join(SAFE[b % len(SAFE)] for b in digest[:length])


def _managed_fields(d: SimDeployment) -> list[Json]:
    """The Deployment's managedFields, in the API server's FieldsV1 shape."""
    key = "k:" + json.dumps({"name": d.container}, separators=(",", ":"))
    entries = []
    for manager, (at, owned) in sorted(d.managers.items()):
        fields: Json = {}
        if "replicas" in owned:
            fields.setdefault("f:spec", {})["f:replicas"] = {}
        names = ("args", "command", "env", "image")
        engine: Json = {f"f:{name}": {} for name in names if name in owned}
        if engine:
            spec = fields.setdefault("f:spec", {})
            spec["f:template"] = {"f:spec": {"f:containers": {key: {".": {}, **engine}}}}
        entries.append(
            {
                "manager": manager,
                "operation": "Update",
                "apiVersion": "apps/v1",
                "fieldsType": "FieldsV1",
                "fieldsV1": fields,
                **({"time": kube_time(at)} if at is not None else {"subresource": "scale"}),
            }
        )
    return entries


def _selects(selector: str, labels: Mapping[str, str]) -> bool:
    """Equality-based label selector ("a=b,c=d"), as the operator builds them."""
    for term in filter(None, selector.split(",")):
        key, _, value = term.partition("=")
        if labels.get(key) != value:
            return False
    return True


class SchemaError(ValueError):
    """A value the CRD's structural schema refuses."""


def prune_and_validate(value: Any, schema: Mapping[str, Any], path: str) -> Any:
    """`value` with the fields the schema does not know removed; SchemaError on a bad type."""
    if value is None:
        return None
    kind = schema.get("type")
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return value
    if kind == "object":
        if not isinstance(value, Mapping):
            raise SchemaError(f"{path}: Invalid value: must be an object")
        properties = schema.get("properties")
        extra = schema.get("additionalProperties")
        out = {}
        for key, item in value.items():
            if properties is not None and key in properties:
                out[key] = prune_and_validate(item, properties[key], f"{path}.{key}")
            elif isinstance(extra, Mapping):
                out[key] = prune_and_validate(item, extra, f"{path}.{key}")
        return out
    if kind == "array":
        if not isinstance(value, list):
            raise SchemaError(f"{path}: Invalid value: must be an array")
        items = schema.get("items") or {}
        return [prune_and_validate(v, items, f"{path}[{i}]") for i, v in enumerate(value)]
    if kind == "integer":
        if isinstance(value, bool) or not isinstance(value, int):
            raise SchemaError(f"{path}: Invalid value: {value!r}: must be an integer")
        low, high = INT32 if schema.get("format") == "int32" else INT64
        if not low <= value <= high:
            raise SchemaError(f"{path}: Invalid value: {value}: out of {schema.get('format')}")
    elif kind == "number":
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise SchemaError(f"{path}: Invalid value: {value!r}: must be a number")
    elif kind == "string" and not isinstance(value, str):
        raise SchemaError(f"{path}: Invalid value: {value!r}: must be a string")
    elif kind == "boolean" and not isinstance(value, bool):
        raise SchemaError(f"{path}: Invalid value: {value!r}: must be a boolean")
    if "enum" in schema and value not in schema["enum"]:
        raise SchemaError(f"{path}: Unsupported value: {value!r}")
    return value


Fault = Callable[[], None]


def _owner(kind: str, name: str, uid: str) -> Json:
    api_version = "apps/v1"
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid, "controller": True}


def _gpu(labels: Mapping[str, str]) -> GPU | None:
    product = labels.get("nvidia.com/gpu.product")
    if not product:
        return None
    memory = labels.get("nvidia.com/gpu.memory")
    return GPU(product, int(memory) if memory and memory.isdigit() else None)


class SimCluster:
    """The objects of an in-memory cluster and the `KubeAPI` calls on them."""

    def __init__(
        self,
        status_schema: Mapping[str, Any] | None = None,
        pool_status_schema: Mapping[str, Any] | None = None,
        clock: Callable[[], float] = lambda: 0.0,
    ) -> None:
        self.clock = clock
        self.nodes: dict[str, Json] = {}  # by name
        self.deployments: dict[tuple[str, str], SimDeployment] = {}
        self.inference_slas: dict[tuple[str, str], Json] = {}
        self.gpu_pools: dict[str, Json] | None = {}  # None: the GPUPool CRD is not installed
        self.resource_quotas: dict[tuple[str, str], Json] = {}
        self.pool_status_schema = pool_status_schema
        self.hpas: dict[str, list[Json]] = {}
        self.scaled_objects: dict[str, list[Json]] | None = None  # None: KEDA not installed
        self.events: list[Json] = []
        self.other_pods: dict[
            str, list[Json]
        ] = {}  # pods of other workloads (a Job's), by namespace
        self.status_schema = status_schema
        self.calls: list[tuple[str, str, str]] = []  # (method, namespace, name), for tests
        self._faults: dict[str, list[Fault]] = {}
        self._version = 0
        self._uids = 0

    # -- building the cluster ---------------------------------------------------------

    def _next_version(self) -> int:
        self._version += 1
        return self._version

    def _uid(self, kind: str, namespace: str, name: str) -> str:
        self._uids += 1
        return hashlib.sha256(f"{kind}/{namespace}/{name}/{self._uids}".encode()).hexdigest()[:32]

    def add_deployment(
        self,
        namespace: str,
        name: str,
        fleet: Fleet,
        engine: Engine = Engine.VLLM,
        args: tuple[str, ...] = (),
        command: tuple[str, ...] = (),
        container: str = "engine",
        env: tuple[tuple[str, str | None], ...] = (),
        sidecars: tuple[Json, ...] = (),
        node_labels: Mapping[str, str] = A100_80GB,
        image: str = "vllm/vllm-openai:latest",
        gpus: int | None = None,
    ) -> SimDeployment:
        """A Deployment run by `fleet`, its pods on a node labelled `node_labels`; its engine
        flags (from `args` and `env`, else the engine's defaults on that GPU) set the fleet's;
        with `gpus`, each pod asks for that many nvidia.com/gpu."""
        node = self._node_labelled(node_labels)
        deployment = SimDeployment(
            namespace=namespace,
            name=name,
            fleet=fleet,
            engine=engine,
            container=container,
            command_line=CommandLine(command, args),
            labels={"app": name},
            max_surge=fleet.max_surge,
            max_unavailable=fleet.max_unavailable,
            uid=self._uid("Deployment", namespace, name),
            node=node,
            gpu=_gpu(node_labels),
            created_at=self.clock(),
            image=image,
            pod_image=image,
            env=env,
            sidecars=sidecars,
            gpus=gpus,
        )
        deployment.write(
            CREATOR, {"replicas", "args", "command", "env", "image"}, deployment.created_at
        )
        # The fleet's pods were started by this Deployment: they run its flags from the start
        # (no rollout from settings no template ever had).
        settings = deployment.settings()
        fleet.settings = settings
        for replica in fleet.replicas:
            replica.max_num_seqs = settings.max_num_seqs
            replica.max_num_batched_tokens = settings.max_num_batched_tokens
        self.deployments[(namespace, name)] = deployment
        self._remember_template(deployment)
        return deployment

    def _node_labelled(self, labels: Mapping[str, str]) -> str:
        """The node a Deployment's pods run on: one per distinct set of labels; its name."""
        for name, node in self.nodes.items():
            if node["metadata"]["labels"] == {**labels, "kubernetes.io/hostname": name}:
                return name
        name = f"gpu-node-{len(self.nodes)}"
        self.nodes[name] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {**labels, "kubernetes.io/hostname": name}},
        }
        return name

    def add_inference_sla(
        self,
        namespace: str,
        name: str,
        spec: Mapping[str, Any],
        labels: Mapping[str, str] | None = None,
        created_at: float | None = None,
    ) -> Json:
        sla: Json = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": KIND,
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": self._uid(KIND, namespace, name),
                "generation": 1,
                "resourceVersion": str(self._next_version()),
                "creationTimestamp": kube_time(self.clock() if created_at is None else created_at),
                "labels": dict(labels or {}),
            },
            "spec": _copied(dict(spec)),
        }
        self.inference_slas[(namespace, name)] = sla
        return _copied(sla)

    def add_gpu_pool(self, name: str, spec: Mapping[str, Any]) -> Json:
        """A GPUPool (cluster-scoped), as `kubectl apply` would create it."""
        if self.gpu_pools is None:
            raise RuntimeError("the GPUPool CRD is not installed in this cluster")
        pool: Json = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": POOL_KIND,
            "metadata": {
                "name": name,
                "uid": self._uid(POOL_KIND, "", name),
                "generation": 1,
                "resourceVersion": str(self._next_version()),
            },
            "spec": _copied(dict(spec)),
        }
        self.gpu_pools[name] = pool
        return _copied(pool)

    def add_node(self, name: str, gpus: int, labels: Mapping[str, str] | None = None,
                 ready: bool = True, unschedulable: bool = False) -> Json:  # fmt: skip
        node: Json = {
            "metadata": {"name": name, "labels": dict(labels or {})},
            "spec": {"unschedulable": True} if unschedulable else {},
            "status": {
                "allocatable": {"nvidia.com/gpu": str(gpus)},
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            },
        }
        self.nodes[name] = node
        return _copied(node)

    def add_resource_quota(self, namespace: str, name: str, hard: Mapping[str, str]) -> Json:
        quota: Json = {
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"hard": dict(hard)},
        }
        self.resource_quotas[(namespace, name)] = quota
        return _copied(quota)

    def fail(self, method: str, fault: Fault, times: int = 1) -> None:
        """Run `fault` (which raises) at the next `times` calls of `method`."""
        self._faults.setdefault(method, []).extend([fault] * times)

    def _call(self, method: str, namespace: str, name: str = "") -> None:
        self.calls.append((method, namespace, name))
        pending = self._faults.get(method)
        if pending:
            pending.pop(0)()

    def deployment(self, namespace: str, name: str) -> SimDeployment:
        try:
            return self.deployments[(namespace, name)]
        except KeyError:
            raise NotFound(f'deployments.apps "{name}" not found') from None

    # -- rendering -------------------------------------------------------------------

    def _template(self, d: SimDeployment) -> Json:
        container: Json = {"name": d.container, "image": d.image}
        if d.command_line.command:
            container["command"] = list(d.command_line.command)
        if d.command_line.args:
            container["args"] = list(d.command_line.args)
        if d.gpus is not None:
            container["resources"] = {"limits": {"nvidia.com/gpu": str(d.gpus)}}
        if d.env:
            container["env"] = [
                {"name": n, "value": v}
                if v is not None
                else {"name": n, "valueFrom": {"configMapKeyRef": {"name": "engine", "key": n}}}
                for n, v in d.env
            ]
        return {
            "metadata": {"labels": dict(d.labels)},
            "spec": {"containers": [*_copied(list(d.sidecars)), container]},
        }

    @staticmethod
    def _key_of(d: SimDeployment, replica: Replica | None = None) -> tuple[int, int, str]:
        """Which template a pod runs: its engine flags and image (the current one: None)."""
        if replica is None:
            settings = d.fleet.settings
            return settings.max_num_seqs, settings.max_num_batched_tokens, d.image
        return replica.max_num_seqs, replica.max_num_batched_tokens, d.pod_image

    def _remember_template(self, d: SimDeployment) -> tuple[int, int, str]:
        key = self._key_of(d)
        if key not in d.templates:
            d.templates[key] = self._template(d)
            d.revisions[key] = max(d.revisions.values(), default=0) + 1
        return key

    def _live(self, d: SimDeployment) -> list[Replica]:
        return [r for r in d.fleet.replicas if r.phase in (Phase.STARTING, Phase.READY)]

    def _render(self, d: SimDeployment) -> Json:
        fleet = d.fleet
        current = self._remember_template(d)
        live = self._live(d)
        ready = sum(1 for r in live if r.phase is Phase.READY)
        pending = fleet.unschedulable
        updated = sum(1 for r in live if self._key_of(d, r) == current) + (
            pending if d.image == d.pod_image else 0
        )
        spec: Json = {
            "replicas": fleet.desired,
            "selector": {"matchLabels": dict(d.labels)},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": d.max_surge, "maxUnavailable": d.max_unavailable},
            },
            "template": _copied(d.templates[current]),
        }
        status: Json = {
            "observedGeneration": d.generation,
            "replicas": len(live) + pending,
            "updatedReplicas": updated,
            "readyReplicas": ready,
            "availableReplicas": ready,
            "unavailableReplicas": max(0, fleet.desired - ready),
        }
        managed = _managed_fields(d)
        fingerprint = json.dumps(
            [spec, status, d.annotations, d.generation, managed], sort_keys=True
        )
        if fingerprint != d.fingerprint:  # the object changed: a new resourceVersion
            d.fingerprint, d.resource_version = fingerprint, self._next_version()
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": d.name,
                "namespace": d.namespace,
                "uid": d.uid,
                "generation": d.generation,
                "resourceVersion": str(d.resource_version),
                "creationTimestamp": kube_time(d.created_at),
                "annotations": dict(d.annotations),
                "labels": dict(d.labels),
                "managedFields": managed,
            },
            "spec": spec,
            "status": status,
        }

    def _replica_set_name(self, d: SimDeployment, key: tuple[int, int, str]) -> str:
        template = json.dumps(d.templates[key], sort_keys=True)
        return f"{d.name}-{_generated(template, 10)}"

    def _replica_sets(self, d: SimDeployment) -> list[Json]:
        """One ReplicaSet per template its pods run, and the current one, as the controller."""
        current = self._remember_template(d)
        live = self._live(d)
        counts: dict[tuple[int, int, str], int] = {current: 0}
        for replica in live:
            key = self._key_of(d, replica)
            counts[key] = counts.get(key, 0) + 1
        if d.image == d.pod_image:
            counts[current] += d.fleet.unschedulable
        out = []
        for key, count in counts.items():
            name = self._replica_set_name(d, key)
            template = _copied(d.templates[key])
            template["metadata"]["labels"]["pod-template-hash"] = name.rsplit("-", 1)[1]
            out.append(
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "metadata": {
                        "name": name,
                        "namespace": d.namespace,
                        "uid": self._stable_uid("ReplicaSet", d.namespace, name),
                        "labels": dict(template["metadata"]["labels"]),
                        "annotations": {"deployment.kubernetes.io/revision": str(d.revisions[key])},
                        "ownerReferences": [_owner("Deployment", d.name, d.uid)],
                    },
                    "spec": {
                        "replicas": count,
                        "selector": {"matchLabels": dict(template["metadata"]["labels"])},
                        "template": template,
                    },
                    "status": {"replicas": count},
                }
            )
        return out

    def _stable_uid(self, kind: str, namespace: str, name: str) -> str:
        return hashlib.sha256(f"{kind}/{namespace}/{name}".encode()).hexdigest()[:32]

    def _pods(self, d: SimDeployment) -> list[Json]:
        self._remember_template(d)
        pods: list[Json] = []

        def pod(key: tuple[int, int, str], seed: str) -> Json:
            owner = self._replica_set_name(d, key)
            labels = {**d.labels, "pod-template-hash": owner.rsplit("-", 1)[1]}
            return {
                "metadata": {
                    "name": f"{owner}-{_generated(seed, 5)}",
                    "namespace": d.namespace,
                    "labels": labels,
                    "ownerReferences": [
                        _owner(
                            "ReplicaSet", owner, self._stable_uid("ReplicaSet", d.namespace, owner)
                        )
                    ],
                },
                "spec": {},
            }

        for replica in d.fleet.replicas:
            if replica.phase is Phase.STOPPED:
                continue
            ready = replica.phase is Phase.READY
            item = pod(self._key_of(d, replica), f"{d.uid}/{replica.name}")
            item["spec"]["nodeName"] = d.node
            if replica.phase is Phase.DRAINING:
                item["metadata"]["deletionTimestamp"] = "1970-01-01T00:00:00Z"
            item["status"] = {
                "phase": "Running",
                "conditions": [
                    {"type": "PodScheduled", "status": "True"},
                    {"type": "Ready", "status": "True" if ready else "False"},
                ],
            }
            pods.append(item)
        for index in range(d.fleet.unschedulable):
            item = pod(self._key_of(d), f"{d.uid}/pending/{index}")
            item["status"] = {
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.",
                    }
                ],
            }
            pods.append(item)
        return pods

    # -- writes outside the operator (a person, a GitOps tool, a baseline autoscaler) ---

    def annotate(self, namespace: str, name: str, key: str, value: str) -> None:
        """An unrelated write: changes the resourceVersion and nothing the operator reads."""
        self.deployment(namespace, name).annotations[key] = value

    def set_command_line(
        self, namespace: str, name: str, line: CommandLine, manager: str = "kubectl-edit"
    ) -> None:
        d = self.deployment(namespace, name)
        if line != d.command_line:
            changed = {
                f for f, a, b in (("command", line.command, d.command_line.command),
                                  ("args", line.args, d.command_line.args)) if a != b
            }  # fmt: skip
            self._remember_template(d)  # its pods keep running it
            d.command_line = line
            d.generation += 1
            d.write(manager, changed, self.clock())
            d.fleet.reconfigure(d.settings())

    def set_env(
        self, namespace: str, name: str, env: Mapping[str, str], manager: str = "kubectl-edit"
    ) -> None:
        """Set literal values of the engine container's variables (the others unchanged)."""
        d = self.deployment(namespace, name)
        merged = dict(d.env)
        merged.update(env)
        new = tuple(merged.items())
        if new != d.env:
            self._remember_template(d)  # its pods keep running it
            d.env = new
            d.generation += 1
            d.write(manager, {"env"}, self.clock())
            d.fleet.reconfigure(d.settings())

    def scale_by(
        self, namespace: str, name: str, replicas: int, manager: str, via_scale: bool = False
    ) -> None:
        """Someone sets spec.replicas: a GitOps tool's update, or `kubectl scale` and the HPA
        (`via_scale`: the scale subresource, whose managedFields entry has no time)."""
        d = self.deployment(namespace, name)
        if replicas != d.fleet.desired:
            d.generation += 1
            d.write(manager, {"replicas"}, None if via_scale else self.clock())
            d.fleet.scale(replicas)

    def roll_image(
        self, namespace: str, name: str, image: str, manager: str = "kubectl-edit"
    ) -> None:
        """Someone else changes the engine's image: a rollout the fleet never makes progress
        on (a stuck rollout: its new pods never become ready), until `finish_rollout`."""
        d = self.deployment(namespace, name)
        if image != d.image:
            self._remember_template(d)  # its pods keep running it
            d.image = image
            d.generation += 1
            d.write(manager, {"image"}, self.clock())

    def finish_rollout(self, namespace: str, name: str) -> None:
        """The pods now run the template's image (the stuck rollout went through)."""
        d = self.deployment(namespace, name)
        d.pod_image = d.image

    # -- KubeAPI ----------------------------------------------------------------------

    def get_deployment(self, namespace: str, name: str) -> Json:
        self._call("get_deployment", namespace, name)
        return self._render(self.deployment(namespace, name))

    def patch_deployment(self, namespace: str, name: str, patch: DeploymentPatch) -> Json:
        self._call("patch_deployment", namespace, name)
        d = self.deployment(namespace, name)
        current = self._render(d)["metadata"]["resourceVersion"]
        if patch.resource_version != current:
            raise Conflict(
                f'Operation cannot be fulfilled on deployments.apps "{name}": the object has '
                "been modified; please apply your changes to the latest version and try again"
            )
        if patch.replicas is not None and patch.replicas < 0:
            raise KubeError(422, "spec.replicas: Invalid value: must be >= 0")
        if patch.container is not None:
            if patch.container.name not in (d.container, *(c["name"] for c in d.sidecars)):
                raise KubeError(422, f"container {patch.container.name!r} not in the template")
            if patch.container.name != d.container:  # a sidecar: the engine never sees it
                raise NotImplementedError("the simulated cluster edits the engine's container only")
            command = patch.container.command
            args = patch.container.args
            self.set_command_line(
                namespace,
                name,
                CommandLine(
                    d.command_line.command if command is None else command,
                    d.command_line.args if args is None else args,
                ),
                manager=FIELD_MANAGER,
            )
            if patch.container.env:
                self.set_env(namespace, name, dict(patch.container.env), manager=FIELD_MANAGER)
        if patch.replicas is not None:
            self.scale_by(namespace, name, patch.replicas, FIELD_MANAGER)
        return self._render(d)

    def list_pods(self, namespace: str, label_selector: str) -> list[Json]:
        self._call("list_pods", namespace)
        return [
            pod
            for (ns, _), d in self.deployments.items()
            if ns == namespace
            for pod in self._pods(d)
            if _selects(label_selector, pod["metadata"]["labels"])
        ] + [
            _copied(pod)
            for pod in self.other_pods.get(namespace, [])
            if _selects(label_selector, pod["metadata"].get("labels") or {})
        ]

    def list_replica_sets(self, namespace: str, label_selector: str) -> list[Json]:
        self._call("list_replica_sets", namespace)
        return [
            rs
            for (ns, _), d in self.deployments.items()
            if ns == namespace
            for rs in self._replica_sets(d)
            if _selects(label_selector, rs["metadata"]["labels"])
        ]

    def get_node(self, name: str) -> Json:
        self._call("get_node", "", name)
        try:
            return _copied(self.nodes[name])
        except KeyError:
            raise NotFound(f'nodes "{name}" not found') from None

    def list_horizontal_pod_autoscalers(self, namespace: str) -> list[Json]:
        self._call("list_horizontal_pod_autoscalers", namespace)
        return _copied(self.hpas.get(namespace, []))

    def list_scaled_objects(self, namespace: str) -> list[Json]:
        self._call("list_scaled_objects", namespace)
        if self.scaled_objects is None:
            raise NotFound("the server could not find the requested resource")
        return _copied(self.scaled_objects.get(namespace, []))

    def get_inference_sla(self, namespace: str, name: str) -> Json:
        self._call("get_inference_sla", namespace, name)
        try:
            return _copied(self.inference_slas[(namespace, name)])
        except KeyError:
            raise NotFound(f'inferenceslas.{GROUP} "{name}" not found') from None

    def patch_inference_sla_status(
        self, namespace: str, name: str, status: Mapping[str, Any]
    ) -> None:
        self._call("patch_inference_sla_status", namespace, name)
        try:
            sla = self.inference_slas[(namespace, name)]
        except KeyError:
            raise NotFound(f'inferenceslas.{GROUP} "{name}" not found') from None
        merged = _copied(sla.get("status") or {})
        _merge(merged, status)
        if self.status_schema is not None:
            try:
                merged = prune_and_validate(merged, self.status_schema, "status")
            except SchemaError as error:
                raise KubeError(422, f'InferenceSLA "{name}" is invalid: {error}') from None
        sla["status"] = merged
        sla["metadata"]["resourceVersion"] = str(self._next_version())

    def create_event(self, namespace: str, event: Json) -> None:
        self._call("create_event", namespace, event["metadata"]["name"])
        name = event["metadata"]["name"]
        if any(
            e["metadata"]["name"] == name and e["metadata"]["namespace"] == namespace
            for e in self.events
        ):
            raise Conflict(f'events "{name}" already exists')
        self.events.append(_copied(event))

    # -- PoolAPI ----------------------------------------------------------------------

    def list_gpu_pools(self) -> list[Json]:
        self._call("list_gpu_pools", "")
        if self.gpu_pools is None:
            raise NotFound("the server could not find the requested resource (gpupools)")
        return [_copied(p) for p in self.gpu_pools.values()]

    def patch_gpu_pool_status(self, name: str, status: Mapping[str, Any]) -> None:
        self._call("patch_gpu_pool_status", "", name)
        pool = (self.gpu_pools or {}).get(name)
        if pool is None:
            raise NotFound(f'gpupools.{GROUP} "{name}" not found')
        merged = _copied(pool.get("status") or {})
        _merge(merged, status)
        if self.pool_status_schema is not None:
            try:
                merged = prune_and_validate(merged, self.pool_status_schema, "status")
            except SchemaError as error:
                raise KubeError(422, f'GPUPool "{name}" is invalid: {error}') from None
        pool["status"] = merged
        pool["metadata"]["resourceVersion"] = str(self._next_version())

    def list_inference_slas(self, namespace: str | None) -> list[Json]:
        self._call("list_inference_slas", namespace or "")
        return [
            _copied(sla)
            for (ns, _), sla in sorted(self.inference_slas.items())
            if namespace is None or ns == namespace
        ]

    def list_nodes(self, label_selector: str) -> list[Json]:
        self._call("list_nodes", "")
        return [
            _copied(n)
            for n in self.nodes.values()
            if _selects(label_selector, n["metadata"].get("labels") or {})
        ]

    def get_resource_quota(self, namespace: str, name: str) -> Json:
        self._call("get_resource_quota", namespace, name)
        try:
            return _copied(self.resource_quotas[(namespace, name)])
        except KeyError:
            raise NotFound(f'resourcequotas "{name}" not found') from None
