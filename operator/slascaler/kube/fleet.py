"""Read the target Deployment as the policy needs it: a `FleetState` and what it was read from.

- replicas from the Deployment's spec, ready replicas from its status;
- its ReplicaSets and pods by ownership (`kube.pods`): the unschedulable ones (Pending with
  the scheduler's `Unschedulable` reason, e.g. no GPU left) so that the policy stops adding
  replicas, and the ReplicaSets' names, which the metric source matches pod names with;
- a rollout is in progress while the controller has not caught up with the spec, or updated
  pods are fewer than wanted, or old pods remain (as `kubectl rollout status` judges it);
- the engine flags: the engine's container (`engine_container.find_engine_container`), each
  flag where the engine reads it (args, TGI's env, not vLLM's/SGLang's `--config` file),
  and, for a declared knob whose flag is absent, the engine's default on the GPU its pods'
  nodes carry (`engines.engine_default`); what cannot be read or tuned is a `FlagProblem`
  (the EngineFlags condition) with the value and the fix, and that knob is left alone;
- the other writers (`kube.writers`): another autoscaler or an older InferenceSLA on the
  same Deployment, someone else overwriting spec.replicas since slascaler's last write, a
  rollout slascaler did not start;
- how many pods a rolling update may take down (the strategy's maxUnavailable, resolved).

Raises `TargetMissing` when the Deployment does not exist, `ContainerMissing` when the named
engine container is not in it, and `kube.errors` exceptions when the API fails. Called by
`reconcile`, once to decide and once more just before acting (to re-validate the decision).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from slascaler.engine_args import EngineArgsError, has_flag
from slascaler.engine_container import (
    ContainerMissing,
    EngineContainer,
    Setting,
    find_engine_container,
    read_setting,
)
from slascaler.engines import DEFAULT_CHANGING_FLAGS, ENGINES, GPU, EngineDefault, engine_default
from slascaler.kube.api import Json, KubeAPI
from slascaler.kube.errors import NotFound
from slascaler.kube.pods import (
    owned,
    owned_pods,
    owned_replica_sets,
    pods_gpu,
    unschedulable,
)
from slascaler.kube.writers import (
    foreign_rollout,
    other_autoscaler,
    owning_inference_sla,
    replicas_overwritten,
    rollout_in_progress,
)
from slascaler.owned_pods import OwnedPods
from slascaler.policy import FleetState
from slascaler.policy.state import DEFAULT_MAX_UNAVAILABLE, resolve_max_unavailable
from slascaler.spec import Bounds, SLASpec

__all__ = [
    "ContainerMissing",
    "FlagProblem",
    "FleetView",
    "TargetMissing",
    "read_fleet",
    "rebased",
]

KNOBS = ("maxBatchSize", "chunkSize")


class TargetMissing(Exception):
    """The target Deployment does not exist."""


@dataclass(frozen=True)
class FlagProblem:
    """An engine flag slascaler cannot read or tune: `reason` (CamelCase) and the message.

    `blocking` problems make the EngineFlags condition False: a declared knob that cannot be
    tuned, or a flag whose value is unusable; the others are notes (a flag nobody asked to
    tune that cannot be read).
    """

    knob: str
    reason: str
    message: str
    blocking: bool


@dataclass(frozen=True)
class FleetView:
    """The FleetState and the live object it was read from."""

    state: FleetState
    deployment: Json
    container: EngineContainer | None
    settings: Mapping[str, Setting] = field(default_factory=dict)  # knob → readable setting
    problems: tuple[FlagProblem, ...] = ()
    notes: tuple[str, ...] = ()
    pods: OwnedPods = field(default_factory=lambda: OwnedPods(()))  # what Kubernetes says

    @property
    def resource_version(self) -> str:
        return str(self.deployment["metadata"]["resourceVersion"])

    def same_as(self, other: FleetView) -> bool:
        """True when nothing the decision depends on changed between the two reads.

        Writes that touch nothing decided on (annotations, labels, a status update) leave
        the decision valid, so a busy Deployment does not starve its scaling.
        """
        mine, theirs = self.state, other.state
        return (
            mine.spec_replicas == theirs.spec_replicas
            and mine.max_batch_size == theirs.max_batch_size
            and mine.chunk_size == theirs.chunk_size
            and mine.other_autoscaler == theirs.other_autoscaler
            and mine.rollout_in_progress == theirs.rollout_in_progress
            and mine.replicas_overwritten_by == theirs.replicas_overwritten_by
            and mine.foreign_rollout == theirs.foreign_rollout
            and self.container == other.container
            and self.settings == other.settings
        )


def rebased(view: FleetView, deployment: Json) -> FleetView | None:
    """`view` at the version of `deployment` (the same Deployment read again), when what it
    was read from is unchanged but metadata and status counts: the same spec, the same
    rollout state, the same owner of spec.replicas. None when anything else changed."""
    old = view.deployment
    if deployment["metadata"].get("uid") != old["metadata"].get("uid"):
        return None
    if deployment["spec"] != old["spec"]:
        return None
    if rollout_in_progress(deployment) != view.state.rollout_in_progress:
        return None
    if _replicas_owners(deployment) != _replicas_owners(old):
        return None
    return replace(view, deployment=deployment)


def _replicas_owners(deployment: Json) -> list[str]:
    return sorted(
        str(entry.get("manager"))
        for entry in deployment["metadata"].get("managedFields") or []
        if "f:replicas" in ((entry.get("fieldsV1") or {}).get("f:spec") or {})
    )


def max_unavailable(deployment: Json) -> int:
    """Pods a rolling update may take down, as the Deployment controller resolves it."""
    spec = deployment["spec"]
    replicas = int(spec.get("replicas", 1))
    strategy = spec.get("strategy") or {}
    if strategy.get("type") == "Recreate":
        return replicas
    rolling = strategy.get("rollingUpdate") or {}
    return resolve_max_unavailable(rolling.get("maxUnavailable", DEFAULT_MAX_UNAVAILABLE), replicas)


class _GPUOnce:
    """The pods' GPU, looked up at most once per read (only when a default is needed)."""

    def __init__(self, api: KubeAPI, pods: list[Json]) -> None:
        self.api, self.pods = api, pods
        self._found: GPU | str | None = None

    def get(self) -> GPU | str:
        if self._found is None:
            self._found = pods_gpu(self.api, self.pods)
        return self._found


def _read_flags(
    spec: SLASpec, container: EngineContainer, gpu: _GPUOnce
) -> tuple[dict[str, Setting], dict[str, int | None], list[FlagProblem], list[str]]:
    flavour = ENGINES[spec.engine]
    settings: dict[str, Setting] = {}
    values: dict[str, int | None] = {}
    problems: list[FlagProblem] = []
    notes: list[str] = []
    wanted: dict[str, Bounds | None] = {
        "maxBatchSize": spec.max_batch_size,
        "chunkSize": spec.chunk_size,
    }
    for knob in KNOBS:
        flag = flavour.max_batch_flag if knob == "maxBatchSize" else flavour.chunk_flag
        declared = wanted[knob] is not None
        values[knob] = None
        try:
            setting = read_setting(flavour, container, flag)
        except EngineArgsError as error:
            unusable = error.reason in ("InvalidValue", "MissingValue", "OutOfRange")
            problems.append(FlagProblem(knob, error.reason, str(error), declared or unusable))
            continue
        if setting.value is not None:
            settings[knob], values[knob] = setting, setting.value
            continue
        if not declared:
            continue  # absent and not tuned: nothing is assumed
        changing = [f for f in DEFAULT_CHANGING_FLAGS[spec.engine] if has_flag(container.line, f)]
        if changing:
            why: EngineDefault | str = (
                f"{', '.join(changing)} changes {flavour.name}'s default for {flag}"
            )
        else:
            found = gpu.get()
            why = engine_default(spec.engine, knob, found if isinstance(found, GPU) else None)
            if not isinstance(why, EngineDefault) and isinstance(found, str):
                why = f"{why} ({found})"
        if isinstance(why, EngineDefault):
            notes.append(f"{flag} is not set: assuming {why.value}, {why.rule}")
            settings[knob], values[knob] = setting, why.value
            continue
        problems.append(
            FlagProblem(
                knob,
                "NoDefault",
                f"{flag} is not set and {why}: set {flag} in the engine's args for slascaler "
                f"to tune spec.knobs.{knob}",
                True,
            )
        )
    return settings, values, problems, notes


def read_fleet(
    api: KubeAPI,
    namespace: str,
    spec: SLASpec,
    sla: Json | None = None,
    replicas_written_at: float | None = None,
) -> FleetView:
    """The target as it is now.

    `sla` is the InferenceSLA itself (to find whether an older one owns the Deployment);
    `replicas_written_at` when slascaler last wrote spec.replicas (its memory), to tell an
    overwrite by someone else from the Deployment's creator.
    """
    try:
        deployment = api.get_deployment(namespace, spec.target.name)
    except NotFound:
        raise TargetMissing(
            f"Deployment {spec.target.name} not found in namespace {namespace}"
        ) from None
    replica_sets = owned_replica_sets(api, namespace, deployment)
    pods = owned_pods(api, namespace, deployment, replica_sets)
    flavour = ENGINES[spec.engine]
    containers = deployment["spec"]["template"]["spec"]["containers"]
    notes: list[str] = []
    problems: list[FlagProblem] = []
    settings: dict[str, Setting] = {}
    values: dict[str, int | None] = {knob: None for knob in KNOBS}
    container: EngineContainer | None
    try:
        container = find_engine_container(flavour, containers, spec.target.container)
    except EngineArgsError as error:
        container = None
        declared = spec.max_batch_size is not None or spec.chunk_size is not None
        problems.append(FlagProblem("", error.reason, str(error), declared))
    if container is not None:
        settings, values, found, flag_notes = _read_flags(spec, container, _GPUOnce(api, pods))
        problems += found
        notes += flag_notes
    notes += [f"engine flags: {p.message}" for p in problems if not p.blocking]
    selected = owned(replica_sets, pods)
    if selected.cut():
        notes.append(
            f"the API server cuts the names of {spec.target.name}'s pods to 58 characters before "
            "their suffix, so another workload's could share them: only the pods that exist now "
            "are read, by name (those gone during the window are not)"
        )

    other = other_autoscaler(api, namespace, spec.target.name)
    if other is None and sla is not None:
        other = owning_inference_sla(api, namespace, spec.target.name, sla)
    overwritten = replicas_overwritten(deployment, replicas_written_at)
    status = deployment.get("status") or {}
    state = FleetState(
        spec_replicas=int(deployment["spec"].get("replicas", 1)),
        ready_replicas=int(status.get("readyReplicas", 0)),
        unschedulable_pods=unschedulable(pods),
        max_batch_size=values["maxBatchSize"],
        chunk_size=values["chunkSize"],
        rollout_in_progress=rollout_in_progress(deployment),
        other_autoscaler=other,
        max_unavailable=max_unavailable(deployment),
        replicas_overwritten_by=overwritten,
        foreign_rollout=foreign_rollout(
            deployment, replica_sets, container.name if container else None
        ),
    )
    return FleetView(
        state,
        deployment,
        container,
        settings,
        tuple(problems),
        tuple(notes),
        selected,
    )
