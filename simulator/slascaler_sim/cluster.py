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

import copy
import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from slascaler.engine_args import CommandLine, EngineArgsError, read_flag
from slascaler.engines import ENGINES
from slascaler.kube.api import GROUP, KIND, POOL_KIND, VERSION, DeploymentPatch, Json
from slascaler.kube.errors import Conflict, KubeError, NotFound
from slascaler.spec import Engine
from slascaler_sim.engine import Phase
from slascaler_sim.fleet import EngineSettings, Fleet

INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)


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
    generation: int = 1
    gpus: int | None = None  # nvidia.com/gpu one pod asks for; None: none in the template
    annotations: dict[str, str] = field(default_factory=dict)
    resource_version: int = 0
    fingerprint: str = ""

    def settings(self) -> EngineSettings:
        """The engine flags in the command line (the engine's defaults where absent)."""
        flavour = ENGINES[self.engine]
        try:
            seqs = read_flag(self.command_line, flavour.max_batch_flag)
            tokens = read_flag(self.command_line, flavour.chunk_flag)
        except EngineArgsError:
            seqs = tokens = None
        return EngineSettings(
            max_num_seqs=seqs or flavour.default_max_batch,
            max_num_batched_tokens=tokens or flavour.default_chunk,
        )


def _merge(target: dict[str, Any], patch: Mapping[str, Any]) -> None:
    """RFC 7386 JSON merge patch, in place."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value) if isinstance(value, dict | list) else value


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


class SimCluster:
    """The objects of an in-memory cluster and the `KubeAPI` calls on them."""

    def __init__(
        self,
        status_schema: Mapping[str, Any] | None = None,
        pool_status_schema: Mapping[str, Any] | None = None,
    ) -> None:
        self.deployments: dict[tuple[str, str], SimDeployment] = {}
        self.inference_slas: dict[tuple[str, str], Json] = {}
        self.gpu_pools: dict[str, Json] | None = {}  # None: the GPUPool CRD is not installed
        self.nodes: list[Json] = []
        self.resource_quotas: dict[tuple[str, str], Json] = {}
        self.pool_status_schema = pool_status_schema
        self.hpas: dict[str, list[Json]] = {}
        self.scaled_objects: dict[str, list[Json]] | None = None  # None: KEDA not installed
        self.events: list[Json] = []
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
        gpus: int | None = None,
    ) -> SimDeployment:
        """A Deployment run by `fleet`; its engine flags are set from `args` on the fleet;
        with `gpus`, each pod asks for that many nvidia.com/gpu."""
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
            gpus=gpus,
        )
        fleet.reconfigure(deployment.settings())
        self.deployments[(namespace, name)] = deployment
        return deployment

    def add_inference_sla(
        self,
        namespace: str,
        name: str,
        spec: Mapping[str, Any],
        labels: Mapping[str, str] | None = None,
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
                "labels": dict(labels or {}),
            },
            "spec": copy.deepcopy(dict(spec)),
        }
        self.inference_slas[(namespace, name)] = sla
        return copy.deepcopy(sla)

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
            "spec": copy.deepcopy(dict(spec)),
        }
        self.gpu_pools[name] = pool
        return copy.deepcopy(pool)

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
        self.nodes.append(node)
        return copy.deepcopy(node)

    def add_resource_quota(self, namespace: str, name: str, hard: Mapping[str, str]) -> Json:
        quota: Json = {
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"hard": dict(hard)},
        }
        self.resource_quotas[(namespace, name)] = quota
        return copy.deepcopy(quota)

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

    def _render(self, d: SimDeployment) -> Json:
        fleet = d.fleet
        outdated = {id(r) for r in fleet.outdated_replicas()}
        live = [r for r in fleet.replicas if r.phase in (Phase.STARTING, Phase.READY)]
        ready = sum(1 for r in live if r.phase is Phase.READY)
        pending = fleet.unschedulable
        updated = sum(1 for r in live if id(r) not in outdated) + pending
        container: Json = {"name": d.container, "image": "vllm/vllm-openai:latest"}
        if d.command_line.command:
            container["command"] = list(d.command_line.command)
        if d.command_line.args:
            container["args"] = list(d.command_line.args)
        if d.gpus is not None:
            container["resources"] = {"limits": {"nvidia.com/gpu": str(d.gpus)}}
        spec: Json = {
            "replicas": fleet.desired,
            "selector": {"matchLabels": dict(d.labels)},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": d.max_surge, "maxUnavailable": d.max_unavailable},
            },
            "template": {
                "metadata": {"labels": dict(d.labels)},
                "spec": {"containers": [container]},
            },
        }
        status: Json = {
            "observedGeneration": d.generation,
            "replicas": len(live) + pending,
            "updatedReplicas": updated,
            "readyReplicas": ready,
            "availableReplicas": ready,
            "unavailableReplicas": max(0, fleet.desired - ready),
        }
        fingerprint = json.dumps([spec, status, d.annotations, d.generation], sort_keys=True)
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
                "annotations": dict(d.annotations),
                "labels": dict(d.labels),
            },
            "spec": spec,
            "status": status,
        }

    def _pods(self, d: SimDeployment) -> list[Json]:
        pods: list[Json] = []
        for replica in d.fleet.replicas:
            if replica.phase is Phase.STOPPED:
                continue
            ready = replica.phase is Phase.READY
            pods.append(
                {
                    "metadata": {
                        "name": f"{d.name}-{replica.name}",
                        "namespace": d.namespace,
                        "labels": dict(d.labels),
                        **(
                            {"deletionTimestamp": "1970-01-01T00:00:00Z"}
                            if replica.phase is Phase.DRAINING
                            else {}
                        ),
                    },
                    "status": {
                        "phase": "Running",
                        "conditions": [
                            {"type": "PodScheduled", "status": "True"},
                            {"type": "Ready", "status": "True" if ready else "False"},
                        ],
                    },
                }
            )
        for index in range(d.fleet.unschedulable):
            pods.append(
                {
                    "metadata": {
                        "name": f"{d.name}-pending-{index}",
                        "namespace": d.namespace,
                        "labels": dict(d.labels),
                    },
                    "status": {
                        "phase": "Pending",
                        "conditions": [
                            {
                                "type": "PodScheduled",
                                "status": "False",
                                "reason": "Unschedulable",
                                "message": "0/1 nodes are available: 1 Insufficient "
                                "nvidia.com/gpu.",
                            }
                        ],
                    },
                }
            )
        return pods

    # -- writes outside the operator (a person, a GitOps tool, a baseline autoscaler) ---

    def annotate(self, namespace: str, name: str, key: str, value: str) -> None:
        """An unrelated write: changes the resourceVersion and nothing the operator reads."""
        self.deployment(namespace, name).annotations[key] = value

    def set_command_line(self, namespace: str, name: str, line: CommandLine) -> None:
        d = self.deployment(namespace, name)
        if line != d.command_line:
            d.command_line = line
            d.generation += 1
            d.fleet.reconfigure(d.settings())

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
        if patch.container is not None:
            if patch.container.name != d.container:
                raise KubeError(422, f"container {patch.container.name!r} not in the template")
            command = patch.container.command
            args = patch.container.args
            self.set_command_line(
                namespace,
                name,
                CommandLine(
                    d.command_line.command if command is None else command,
                    d.command_line.args if args is None else args,
                ),
            )
        if patch.replicas is not None:
            if patch.replicas < 0:
                raise KubeError(422, "spec.replicas: Invalid value: must be >= 0")
            d.fleet.scale(patch.replicas)
        return self._render(d)

    def list_pods(self, namespace: str, label_selector: str) -> list[Json]:
        self._call("list_pods", namespace)
        return [
            pod
            for (ns, _), d in self.deployments.items()
            if ns == namespace and _selects(label_selector, d.labels)
            for pod in self._pods(d)
        ]

    def list_horizontal_pod_autoscalers(self, namespace: str) -> list[Json]:
        self._call("list_horizontal_pod_autoscalers", namespace)
        return copy.deepcopy(self.hpas.get(namespace, []))

    def list_scaled_objects(self, namespace: str) -> list[Json]:
        self._call("list_scaled_objects", namespace)
        if self.scaled_objects is None:
            raise NotFound("the server could not find the requested resource")
        return copy.deepcopy(self.scaled_objects.get(namespace, []))

    def get_inference_sla(self, namespace: str, name: str) -> Json:
        self._call("get_inference_sla", namespace, name)
        try:
            return copy.deepcopy(self.inference_slas[(namespace, name)])
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
        merged = copy.deepcopy(sla.get("status") or {})
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
        self.events.append(copy.deepcopy(event))

    # -- PoolAPI ----------------------------------------------------------------------

    def list_gpu_pools(self) -> list[Json]:
        self._call("list_gpu_pools", "")
        if self.gpu_pools is None:
            raise NotFound("the server could not find the requested resource (gpupools)")
        return [copy.deepcopy(p) for p in self.gpu_pools.values()]

    def patch_gpu_pool_status(self, name: str, status: Mapping[str, Any]) -> None:
        self._call("patch_gpu_pool_status", "", name)
        pool = (self.gpu_pools or {}).get(name)
        if pool is None:
            raise NotFound(f'gpupools.{GROUP} "{name}" not found')
        merged = copy.deepcopy(pool.get("status") or {})
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
            copy.deepcopy(sla)
            for (ns, _), sla in sorted(self.inference_slas.items())
            if namespace is None or ns == namespace
        ]

    def list_nodes(self, label_selector: str) -> list[Json]:
        self._call("list_nodes", "")
        return [
            copy.deepcopy(n)
            for n in self.nodes
            if _selects(label_selector, n["metadata"].get("labels") or {})
        ]

    def get_resource_quota(self, namespace: str, name: str) -> Json:
        self._call("get_resource_quota", namespace, name)
        try:
            return copy.deepcopy(self.resource_quotas[(namespace, name)])
        except KeyError:
            raise NotFound(f'resourcequotas "{name}" not found') from None
