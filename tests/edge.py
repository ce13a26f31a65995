"""A test bed for the operator's edge: the real `Reconciler` over the in-memory cluster.

`Edge` holds an in-memory cluster (`slascaler_sim.cluster`, validating and pruning the
status against the CRD's schema as the API server does), one vLLM Deployment run by a
simulated fleet, an InferenceSLA targeting it, a metric source that returns whatever
observation the test sets, and a clock the test moves. Used by the reconcile and wiring tests.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from slascaler.kube.api import Json
from slascaler.model.observation import Observation
from slascaler.owned_pods import OwnedPods
from slascaler.reconcile import Evaluation, Reconciler
from slascaler.spec import Engine, SLASpec
from slascaler.telemetry import Telemetry
from slascaler_sim.cluster import SimCluster, SimDeployment
from slascaler_sim.fleet import EngineSettings, Fleet
from slascaler_sim.profiles import PROFILES
from slascaler_sim.run import engine_args

CRD = Path(__file__).parents[1] / "manifests" / "crds" / "slascaler.io_inferenceslas.yaml"
NAMESPACE, NAME, SLA_NAME = "team-a", "llama", "llama-chat"
SETTINGS = EngineSettings(64, 2048)


def status_schema() -> Mapping[str, Any]:
    crd = yaml.safe_load(CRD.read_text(encoding="utf-8"))
    schema: Mapping[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema["properties"]["status"]


@dataclass
class FixedSource:
    """A MetricSource that answers with the observation a test set (at the asked time)."""

    observation: Observation | None = None
    asked: list[tuple[str, str]] = field(default_factory=list)
    pods: OwnedPods | None = None  # the pods the last observation was asked for

    def observe(
        self, namespace: str, spec: SLASpec, now: float, pods: OwnedPods | None = None
    ) -> Observation:
        self.asked.append((namespace, spec.target.name))
        self.pods = pods
        if self.observation is None:
            return Observation(now, spec.window_s, None, None, None, source_error="no data set")
        return replace(self.observation, observed_at=now)


class Edge:
    """One Deployment, one InferenceSLA, the operator's Reconciler, a clock."""

    def __init__(
        self,
        spec: Mapping[str, Any],
        replicas: int = 4,
        settings: EngineSettings = SETTINGS,
        gpu_limit: int | None = None,
        now: float = 10_000.0,
        dry_run: bool = False,
        engine: Engine = Engine.VLLM,
        **deployment: Any,
    ) -> None:
        """`deployment`: more of `SimCluster.add_deployment`'s arguments (args, command, env,
        sidecars, node_labels, image); args default to the engine's flags for `settings`."""
        self.now = now
        self.cluster = SimCluster(status_schema=status_schema(), clock=lambda: self.now)
        self.fleet = Fleet(PROFILES["llama3-8b-a100"], replicas, settings, gpu_limit=gpu_limit)
        deployment.setdefault("args", engine_args(engine, settings))
        self.deployment: SimDeployment = self.cluster.add_deployment(
            NAMESPACE, NAME, self.fleet, engine=engine, **deployment
        )
        self.cluster.add_inference_sla(
            NAMESPACE, SLA_NAME, {"targetRef": {"name": NAME}, "engine": str(engine), **spec}
        )
        self.source = FixedSource()
        self.telemetry = Telemetry()
        self.reconciler = Reconciler(
            self.cluster, self.source, self.telemetry, clock=lambda: self.now, dry_run=dry_run
        )

    def reconcile(self) -> Evaluation:
        return self.reconciler.reconcile(self.sla())

    def sla(self) -> Json:
        return self.cluster.get_inference_sla(NAMESPACE, SLA_NAME)

    @property
    def status(self) -> Json:
        status: Json = self.sla().get("status") or {}
        return status

    def live(self) -> Json:
        return self.cluster.get_deployment(NAMESPACE, NAME)

    def events(self, reason: str | None = None) -> list[Json]:
        return [e for e in self.cluster.events if reason is None or e["reason"] == reason]

    def condition(self, kind: str) -> Json:
        return next(c for c in self.status["conditions"] if c["type"] == kind)

    def container(self) -> Json:
        """The engine's container of the live Deployment (the last one: sidecars come first)."""
        container: Json = self.live()["spec"]["template"]["spec"]["containers"][-1]
        return container

    def patches(self) -> int:
        return sum(1 for c in self.cluster.calls if c[0] == "patch_deployment")
