"""The GPUPool resource as typed data: its spec parsed, its selectors matched, its status built.

A `GPUPool` (cluster-scoped: GPUs are a cluster's resource, and priorities between teams
are a cluster administrator's choice, as PriorityClasses are) puts the InferenceSLAs its
`selector` matches (in the namespaces it lists, or in all) on one GPU budget, given as a
number of GPUs, or as the allocatable GPUs of the nodes its `nodeSelector` matches, or as a
ResourceQuota's hard limit on requested GPUs.

- `parse_pool` turns a GPUPool object into a `PoolSpec`, raising `PoolSpecError` naming the
  field for anything the CRD's schema should already have refused (the second line of
  defence, as `spec.parse_spec` is for InferenceSLAs).
- `LabelSelector` matches labels as Kubernetes does (matchLabels and matchExpressions).
- `gpus_per_replica` reads the GPUs one pod of a Deployment asks for; `whole_quantity`
  reads a GPU count written as a Kubernetes quantity.
- `previous_shares` reads the last arbitration back from the pool's status (its memory), and
  `pool_status` writes the status the CRD describes (what `kubectl get gpupools` shows).

Pure (no I/O; times are given already formatted). Called by the pool coordinator
(`slascaler.pools`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from slascaler.policy.decision import Condition
from slascaler.policy.pool import Arbitration
from slascaler.status import merge_conditions

DEFAULT_RESOURCE = "nvidia.com/gpu"
_WHOLE = re.compile(r"^\d+$")
OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


class PoolSpecError(ValueError):
    """A GPUPool field is wrong: `field_path` names it, the message says what to write."""

    def __init__(self, field_path: str, message: str) -> None:
        super().__init__(f"spec.{field_path}: {message}")
        self.field_path = field_path


@dataclass(frozen=True)
class LabelSelector:
    """A Kubernetes label selector: every matchLabels pair and every expression must hold."""

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[tuple[str, str, tuple[str, ...]], ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if any(labels.get(k) != v for k, v in self.match_labels):
            return False
        for key, operator, values in self.match_expressions:
            present = key in labels
            if operator == "In" and not (present and labels[key] in values):
                return False
            if operator == "NotIn" and present and labels[key] in values:
                return False
            if operator == "Exists" and not present:
                return False
            if operator == "DoesNotExist" and present:
                return False
        return True

    def to_json(self) -> dict[str, Any]:
        """As a Kubernetes LabelSelector object (for `kube.fleet.label_selector`)."""
        out: dict[str, Any] = {}
        if self.match_labels:
            out["matchLabels"] = dict(self.match_labels)
        if self.match_expressions:
            out["matchExpressions"] = [
                {"key": k, "operator": o, **({"values": list(v)} if v else {})}
                for k, o, v in self.match_expressions
            ]
        return out


class LimitKind(StrEnum):
    FIXED = "Fixed"
    NODES = "Nodes"
    RESOURCE_QUOTA = "ResourceQuota"


@dataclass(frozen=True)
class PoolLimit:
    kind: LimitKind
    gpus: int | None = None  # FIXED
    node_selector: LabelSelector | None = None  # NODES
    quota: tuple[str, str] | None = None  # RESOURCE_QUOTA: (namespace, name)


@dataclass(frozen=True)
class PoolSpec:
    name: str
    selector: LabelSelector
    limit: PoolLimit
    namespaces: tuple[str, ...] = ()  # empty: every namespace
    resource: str = DEFAULT_RESOURCE

    def selects(self, namespace: str, labels: Mapping[str, str]) -> bool:
        """Whether an InferenceSLA in `namespace` with `labels` is a member."""
        in_namespace = not self.namespaces or namespace in self.namespaces
        return in_namespace and self.selector.matches(labels)


def _mapping(raw: object, field_path: str) -> Mapping[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise PoolSpecError(field_path, f"must be an object, got {type(raw).__name__}")
    return raw


def parse_selector(raw: object, field_path: str) -> LabelSelector:
    data = _mapping(raw, field_path)
    labels = _mapping(data.get("matchLabels"), f"{field_path}.matchLabels")
    pairs = []
    for key, value in sorted(labels.items()):
        if not isinstance(value, str):
            raise PoolSpecError(f"{field_path}.matchLabels.{key}", "must be a string")
        pairs.append((str(key), value))
    expressions = []
    raw_expressions = data.get("matchExpressions") or []
    if not isinstance(raw_expressions, list):
        raise PoolSpecError(f"{field_path}.matchExpressions", "must be a list")
    for index, item in enumerate(raw_expressions):
        where = f"{field_path}.matchExpressions[{index}]"
        entry = _mapping(item, where)
        label, operator = entry.get("key"), entry.get("operator")
        values = entry.get("values") or []
        if not isinstance(label, str) or not label:
            raise PoolSpecError(f"{where}.key", "name a label key")
        if operator not in OPERATORS:
            raise PoolSpecError(f"{where}.operator", f"must be one of {', '.join(OPERATORS)}")
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise PoolSpecError(f"{where}.values", "must be a list of strings")
        if operator in ("In", "NotIn") and not values:
            raise PoolSpecError(f"{where}.values", f"{operator} needs at least one value")
        if operator in ("Exists", "DoesNotExist") and values:
            raise PoolSpecError(f"{where}.values", f"{operator} takes no values")
        expressions.append((label, str(operator), tuple(values)))
    return LabelSelector(tuple(pairs), tuple(expressions))


def parse_pool(obj: Mapping[str, Any]) -> PoolSpec:
    """A GPUPool object's spec, validated, with the CRD's defaults."""
    name = str((obj.get("metadata") or {}).get("name", ""))
    spec = _mapping(obj.get("spec"), "")
    if "selector" not in spec:
        raise PoolSpecError("selector", "select the InferenceSLAs that share this pool")
    selector = parse_selector(spec["selector"], "selector")
    namespaces = spec.get("namespaces") or []
    if not isinstance(namespaces, list) or not all(isinstance(n, str) for n in namespaces):
        raise PoolSpecError("namespaces", "must be a list of namespace names")
    resource = spec.get("resourceName", DEFAULT_RESOURCE)
    if not isinstance(resource, str) or not resource:
        raise PoolSpecError("resourceName", "name the extended resource, e.g. nvidia.com/gpu")
    limit_raw = _mapping(spec.get("limit"), "limit")
    given = [k for k in ("gpus", "nodeSelector", "resourceQuota") if k in limit_raw]
    if len(given) != 1:
        raise PoolSpecError("limit", "set exactly one of gpus, nodeSelector, resourceQuota")
    if given[0] == "gpus":
        gpus = limit_raw["gpus"]
        if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0:
            raise PoolSpecError("limit.gpus", f"must be a whole number ≥ 0, got {gpus!r}")
        limit = PoolLimit(LimitKind.FIXED, gpus=gpus)
    elif given[0] == "nodeSelector":
        nodes = parse_selector(limit_raw["nodeSelector"], "limit.nodeSelector")
        limit = PoolLimit(LimitKind.NODES, node_selector=nodes)
    else:
        quota = _mapping(limit_raw["resourceQuota"], "limit.resourceQuota")
        namespace, quota_name = quota.get("namespace"), quota.get("name")
        if not isinstance(namespace, str) or not namespace:
            raise PoolSpecError("limit.resourceQuota.namespace", "name the quota's namespace")
        if not isinstance(quota_name, str) or not quota_name:
            raise PoolSpecError("limit.resourceQuota.name", "name the ResourceQuota")
        limit = PoolLimit(LimitKind.RESOURCE_QUOTA, quota=(namespace, quota_name))
    return PoolSpec(name, selector, limit, tuple(namespaces), resource)


def whole_quantity(raw: object) -> int | None:
    """A count written as a Kubernetes quantity ("4", 4); None when it is not whole."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        return raw if raw >= 0 else None
    if isinstance(raw, str) and _WHOLE.match(raw.strip()):
        return int(raw.strip())
    return None


def _container_gpus(container: Mapping[str, Any], resource: str) -> int:
    resources = container.get("resources") or {}
    for kind in ("limits", "requests"):  # extended resources: requests equal limits
        value = whole_quantity((resources.get(kind) or {}).get(resource))
        if value is not None:
            return value
    return 0


def gpus_per_replica(deployment: Mapping[str, Any], resource: str = DEFAULT_RESOURCE) -> int:
    """GPUs one pod of the Deployment asks for: the sum over its containers, or the largest
    init container's if larger (the pod's effective request, as the scheduler counts it)."""
    template = ((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}
    containers = sum(_container_gpus(c, resource) for c in template.get("containers") or [])
    inits = [_container_gpus(c, resource) for c in template.get("initContainers") or []]
    return max(containers, *inits) if inits else containers


@dataclass(frozen=True)
class PreviousShare:
    """A member's entry in the pool's status: what the previous arbitration gave it."""

    granted: int
    allowed: int
    protected_up_to: int | None


def previous_shares(status: object) -> dict[str, PreviousShare]:
    """The last arbitration's shares, by member key, from the pool's status."""
    out: dict[str, PreviousShare] = {}
    members = status.get("members") if isinstance(status, Mapping) else None
    if not isinstance(members, list):
        return out
    for item in members:
        if not isinstance(item, Mapping):
            continue
        granted, allowed = item.get("granted"), item.get("allowed")
        protected = item.get("protectedUpTo")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (granted, allowed)):
            continue
        if isinstance(protected, bool) or not isinstance(protected, int):
            protected = None
        assert isinstance(granted, int) and isinstance(allowed, int)
        key = f"{item.get('namespace')}/{item.get('name')}"
        out[key] = PreviousShare(granted, allowed, protected)
    return out


@dataclass(frozen=True)
class MemberView:
    """What the pool's status says of one member besides its grant."""

    namespace: str
    name: str
    priority: int
    gpus_per_replica: int
    replicas: int
    sla_met: bool | None
    following: bool

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def pool_status(
    arbitration: Arbitration,
    members: Sequence[MemberView],
    limit_source: str,
    conditions: Sequence[Condition],
    previous: Mapping[str, Any],
    now: str,
    generation: int,
) -> dict[str, Any]:
    """The GPUPool's status after one arbitration."""
    entries = []
    for member in sorted(members, key=lambda m: (-m.priority, m.key)):
        grant = arbitration.grants.get(member.key)
        entry: dict[str, Any] = {
            "namespace": member.namespace,
            "name": member.name,
            "priority": member.priority,
            "gpusPerReplica": member.gpus_per_replica,
            "replicas": member.replicas,
            "following": member.following,
        }
        if grant is not None:
            entry.update(wanted=grant.wanted, granted=grant.granted, allowed=grant.allowed)
            if grant.message:
                entry["message"] = grant.message
        if member.sla_met is not None:
            entry["slaMet"] = member.sla_met
        protected = arbitration.protected_up_to.get(member.key)
        if protected is not None:
            entry["protectedUpTo"] = protected
        entries.append(entry)
    met = sum(1 for m in members if m.sla_met)
    return {
        "observedGeneration": generation,
        "lastArbitrated": now,
        "limit": arbitration.limit,
        "limitSource": limit_source,
        "used": arbitration.used,
        "granted": arbitration.granted_gpus,
        "gpus": f"{arbitration.used}/{arbitration.limit}",
        "slas": f"{met}/{len(members)}",
        "members": entries,
        "conditions": merge_conditions(previous.get("conditions"), conditions, now, generation),
    }
