"""Shared GPU pools on the in-memory cluster: the coordinator and the operator's own Reconciler.

Two vLLM Deployments share a GPUPool of 8 GPUs (one per pod): a high-priority SLA whose load
rises takes GPUs from a low-priority one (Events and conditions on both, the low one never
below its min, the pool never over its limit at any step), and the low one gets them back once
the high one's load fell and its stabilization window passed. Then: Recommend mode reports
what would move and moves nothing; a pool whose limit comes from nodes or a ResourceQuota; a
limit below the minimums; an InferenceSLA two pools select; an InferenceSLA outside any pool
decides as it always did; the GPUPool's status and the InferenceSLAs' statuses pass their
CRDs' schemas. Every check reads what was written to the cluster.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from builders import observation_from_samples
from edge import status_schema
from slascaler.kube.api import Json
from slascaler.kube.errors import NotFound
from slascaler.model.observation import Observation
from slascaler.model.samples import TTFTBreakdown
from slascaler.owned_pods import OwnedPods
from slascaler.pool_spec import PoolSpecError, gpus_per_replica, parse_pool
from slascaler.pools import PoolCoordinator
from slascaler.reconcile import Reconciler
from slascaler.spec import Engine, SLASpec
from slascaler.telemetry import Telemetry
from slascaler_sim.cluster import SimCluster
from slascaler_sim.fleet import EngineSettings, Fleet
from slascaler_sim.profiles import PROFILES
from slascaler_sim.run import engine_args

POOL_CRD = Path(__file__).parents[2] / "manifests" / "crds" / "slascaler.io_gpupools.yaml"
SETTINGS = EngineSettings(64, 2048)
FAST = {"scaleUpCooldown": "10s", "scaleDownStabilization": "60s", "knobCooldown": "1m"}


def pool_status_schema() -> Mapping[str, Any]:
    crd = yaml.safe_load(POOL_CRD.read_text(encoding="utf-8"))
    schema: Mapping[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema["properties"]["status"]


def busy(pods: int, queue_ms: float = 2000.0) -> Observation:
    """A queue-bound window: TTFT p95 far over 500 ms (without a latency model yet, the
    policy steps in proportion: to replicas.max here)."""
    rng = np.random.default_rng(pods)
    samples = [TTFTBreakdown(float(q), 10.0, 100.0, 20.0) for q in rng.exponential(queue_ms, 600)]
    return observation_from_samples(samples, pods=pods, running=pods * 62.0, waiting=50.0,
                                    itl_ms=[20.0] * 50)  # fmt: skip


def idle() -> Observation:
    return observation_from_samples([], pods=1, running=0.0)


@dataclass
class PerTarget:
    """A MetricSource answering per target Deployment with the observation a test set."""

    observations: dict[str, Observation] = field(default_factory=dict)

    def observe(
        self, namespace: str, spec: SLASpec, now: float, pods: OwnedPods | None = None
    ) -> Observation:
        seen = self.observations.get(spec.target.name)
        if seen is None:
            return Observation(now, spec.window_s, None, None, None, source_error="no data")
        return replace(seen, observed_at=now)


class Pool:
    """An in-memory cluster with GPU Deployments, InferenceSLAs, a GPUPool, the coordinator."""

    def __init__(self, limit: Mapping[str, Any] | None = None, dry_run: bool = False) -> None:
        self.now = 100_000.0
        self.cluster = SimCluster(status_schema(), pool_status_schema())
        self.source = PerTarget()
        self.coordinator = PoolCoordinator(self.cluster, clock=lambda: self.now, interval_s=15,
                                           dry_run=dry_run)  # fmt: skip
        self.reconciler = Reconciler(
            self.cluster, self.source, Telemetry(), clock=lambda: self.now, dry_run=dry_run,
            pools=self.coordinator,
        )  # fmt: skip
        self.fleets: dict[str, Fleet] = {}
        self.history: list[dict[str, int]] = []
        self.limit_gpus = int((limit or {}).get("gpus", 0))
        self.pooled_limit = limit is not None and "gpus" in limit
        if limit is not None:
            self.cluster.add_gpu_pool(
                "a100", {"selector": {"matchLabels": {"pool": "a100"}}, "limit": dict(limit)}
            )

    def model(self, name: str, pods: int, pooled: bool = True, namespace: str = "team",
              **spec: Any) -> None:  # fmt: skip
        fleet = Fleet(PROFILES["llama3-8b-a100"], pods, SETTINGS)
        self.fleets[name] = fleet
        self.cluster.add_deployment(namespace, name, fleet, args=engine_args(Engine.VLLM,
                                    SETTINGS), gpus=1)  # fmt: skip
        body = {
            "targetRef": {"name": name},
            "objectives": {"ttft": {"percentile": 95, "thresholdMs": 500}},
            "behavior": FAST,
            **spec,
        }
        labels = {"pool": "a100"} if pooled else {}
        self.cluster.add_inference_sla(namespace, name, body, labels)

    def cycle(self, seconds: float = 15.0) -> None:
        """One interval: the pool arbitrated, then every InferenceSLA evaluated."""
        self.now += seconds
        for fleet in self.fleets.values():
            fleet.run_until(fleet.now + seconds)
        self.coordinator.refresh()
        for (namespace, name), _ in sorted(self.cluster.inference_slas.items()):
            self.reconciler.reconcile(self.cluster.get_inference_sla(namespace, name))
        used = sum(f.desired for f in self.fleets.values())
        self.history.append({n: f.desired for n, f in self.fleets.items()})
        if self.pooled_limit:
            assert used <= self.limit_gpus, f"{used} replicas of one GPU: over the pool's limit"

    def status(self, name: str, namespace: str = "team") -> Json:
        return self.cluster.inference_slas[(namespace, name)].get("status") or {}

    def condition(self, name: str, kind: str) -> Json:
        return next(c for c in self.status(name)["conditions"] if c["type"] == kind)

    def events(self, name: str, reason: str | None = None) -> list[Json]:
        return [
            e for e in self.cluster.events
            if e["involvedObject"]["name"] == name and reason in (None, e["reason"])
        ]  # fmt: skip

    def pool(self) -> Json:
        assert self.cluster.gpu_pools is not None
        return self.cluster.gpu_pools["a100"].get("status") or {}

    def pool_condition(self, kind: str) -> Json:
        return next(c for c in self.pool()["conditions"] if c["type"] == kind)


def two_models(**low: Any) -> Pool:
    pool = Pool({"gpus": 8})
    pool.model("chat", 2, priority=10, replicas={"min": 1, "max": 6})
    pool.model("batch", 6, priority=0, replicas={"min": 2, "max": 6}, **low)
    return pool


def test_the_high_priority_sla_takes_gpus_and_gives_them_back_after_its_window() -> None:
    pool = two_models()
    pool.source.observations.update(chat=busy(2), batch=busy(6))
    pool.cycle()  # bids made; nothing arbitrated with them yet
    assert pool.fleets["chat"].desired == 2, "no GPU free: chat waits"
    assert pool.condition("chat", "CapacityLimited")["reason"] == "BudgetExhausted"

    pool.cycle()  # the arbitration: chat (priority 10) takes 4 GPUs from batch
    assert pool.fleets["batch"].desired == 2, "batch gave its replicas at once, down to its min"
    [taken] = pool.events("chat", "GrantedByPool")
    [given] = pool.events("batch", "PreemptedByPool")
    assert given["type"] == "Warning" and "4 GPUs of this SLA go to team/chat" in given["message"]
    assert "priority 10 > 0" in taken["message"] and "from team/batch" in taken["message"]
    preempted = pool.condition("batch", "Preempted")
    assert (preempted["status"], preempted["reason"]) == ("True", "ByHigherPriority")
    assert pool.condition("batch", "CapacityLimited")["reason"] == "BudgetExhausted"
    assert pool.status("batch")["lastAction"]["reasonCode"] == "Preempted"
    assert pool.status("batch")["pool"] == {
        "name": "a100", "granted": 2, "allowed": 2, "applied": True,
        "preemptedBy": ["team/chat"], "message": pool.status("batch")["pool"]["message"],
    }  # fmt: skip
    assert pool.condition("chat", "Preempted")["status"] == "False"
    assert pool.fleets["chat"].desired == 2, "the GPUs are not free before batch's pods go"

    pool.cycle()  # batch runs 2: the freed GPUs go to chat
    assert pool.fleets["chat"].desired == 6
    status = pool.pool()  # as the arbitration found it, before chat grew
    assert (status["gpus"], status["limit"], status["limitSource"]) == ("4/8", 8, "spec.limit.gpus")
    assert status["slas"] == "0/2"  # both missed their SLA in their last window
    members = {m["name"]: m for m in status["members"]}
    assert members["chat"]["granted"] == 6 and members["chat"]["protectedUpTo"] == 6
    assert members["batch"]["granted"] == 2 and members["batch"]["following"] is True
    assert pool.pool_condition("Exhausted")["status"] == "True"

    # chat's load falls: it keeps what it took for its 60 s stabilization window ...
    pool.source.observations["chat"] = idle()
    for _ in range(3):
        pool.cycle()
        assert pool.fleets["chat"].desired == 6 and pool.fleets["batch"].desired == 2
    # ... then releases them (half at a time), and batch gets them back.
    for _ in range(8):
        pool.cycle()
    assert pool.fleets["chat"].desired == 1 and pool.fleets["batch"].desired == 6
    assert pool.events("chat", "ReturnedToPool") and pool.events("batch", "GrantedByPool")
    assert pool.condition("batch", "Preempted")["status"] == "False"
    assert min(h["batch"] for h in pool.history) == 2, "never below its min"


def test_recommend_mode_reports_what_would_move_and_moves_nothing() -> None:
    pool = two_models(mode="Recommend")
    pool.source.observations.update(chat=busy(2), batch=busy(6))
    for _ in range(3):
        pool.cycle()
    assert pool.fleets["batch"].desired == 6 and pool.fleets["chat"].desired == 2
    batch = pool.status("batch")
    assert batch["pool"]["applied"] is False and batch["pool"]["granted"] == 2
    assert batch["recommendation"]["replicas"] == 2
    assert pool.condition("batch", "Preempted")["reason"] == "ByHigherPriority"
    [event] = pool.events("batch", "RecommendPreempted")
    assert "would change replicas 6→2 (mode Recommend)" in event["message"]
    assert not pool.events("batch", "PreemptedByPool")
    chat = pool.condition("chat", "CapacityLimited")
    assert chat["reason"] == "BudgetExhausted" and "team/batch" in chat["message"]
    assert {m["name"]: m["following"] for m in pool.pool()["members"]} == {
        "chat": True, "batch": False,
    }  # fmt: skip


def test_a_limit_from_nodes_or_a_quota_and_what_happens_when_it_cannot_be_read() -> None:
    pool = Pool({"nodeSelector": {"matchLabels": {"gpu": "a100"}}})
    pool.cluster.add_node("n1", 4, {"gpu": "a100"})
    pool.cluster.add_node("n2", 4, {"gpu": "a100"}, ready=False)
    pool.cluster.add_node("n3", 4, {"gpu": "h100"})
    pool.model("chat", 2)
    pool.cycle()
    assert (pool.pool()["limit"], pool.pool()["gpus"]) == (4, "2/4")
    assert pool.pool()["limitSource"] == (
        "1 nodes matching spec.limit.nodeSelector (1 more not Ready or cordoned)"
    )
    assert pool.cluster.gpu_pools is not None
    pool.cluster.gpu_pools["a100"]["spec"]["limit"] = {
        "resourceQuota": {"namespace": "team", "name": "gpus"}
    }
    pool.cycle()
    ready = pool.pool_condition("Ready")
    assert (ready["status"], ready["reason"]) == ("False", "LimitUnavailable")
    assert 'resourcequotas "gpus" not found' in ready["message"]
    assert pool.status("chat")["pool"]["message"].startswith("held at its count")
    pool.cluster.add_resource_quota("team", "gpus", {"requests.nvidia.com/gpu": "3"})
    pool.cycle()
    assert pool.pool()["limit"] == 3 and pool.pool_condition("Ready")["status"] == "True"


def test_minimums_over_the_limit_are_said_and_granted_by_priority() -> None:
    pool = Pool({"gpus": 3})
    pool.pooled_limit = False  # the minimums alone are over it
    pool.model("chat", 2, priority=10, replicas={"min": 2, "max": 4})
    pool.model("batch", 2, priority=0, replicas={"min": 2, "max": 4})
    pool.cycle()
    fit = pool.pool_condition("MinimumsFit")
    assert (fit["status"], fit["reason"]) == ("False", "MinimumsExceedLimit")
    assert "need 4 GPUs, the limit is 3" in fit["message"] and "team/batch" in fit["message"]
    assert pool.fleets["batch"].desired == 2, "never below its min"


def test_an_sla_two_pools_select_is_held_and_named() -> None:
    pool = Pool({"gpus": 8})
    pool.cluster.add_gpu_pool("other", {"selector": {}, "limit": {"gpus": 100}})
    pool.model("chat", 2, priority=10, replicas={"min": 1, "max": 6})
    pool.source.observations["chat"] = busy(2)
    for _ in range(2):
        pool.cycle()
    assert pool.fleets["chat"].desired == 2
    conflict = pool.pool_condition("MemberConflict")
    assert conflict["status"] == "True" and "team/chat (also in other)" in conflict["message"]
    assert "selected by the GPUPools a100, other" in pool.status("chat")["pool"]["message"]


def test_an_sla_outside_any_pool_decides_as_it_always_did() -> None:
    pooled, alone = Pool({"gpus": 8}), Pool()
    for world in (pooled, alone):
        world.model("solo", 3, pooled=False, replicas={"min": 1, "max": 8})
        world.source.observations["solo"] = busy(3)
    alone.reconciler.pools = None
    for _ in range(3):
        pooled.cycle()
        alone.cycle()
    a, b = pooled.status("solo"), alone.status("solo")
    assert "pool" not in a and "Preempted" not in {c["type"] for c in a["conditions"]}
    assert {k: v for k, v in a.items() if k != "conditions"} == {
        k: v for k, v in b.items() if k != "conditions"
    }
    assert pooled.fleets["solo"].desired == alone.fleets["solo"].desired > 3


def test_the_gpupool_spec_and_the_pod_templates_gpus() -> None:
    spec = parse_pool({
        "metadata": {"name": "p"},
        "spec": {
            "selector": {"matchExpressions": [{"key": "tier", "operator": "In",
                                               "values": ["gold", "silver"]}]},
            "namespaces": ["team-a"],
            "limit": {"gpus": 4},
        },
    })  # fmt: skip
    assert spec.selects("team-a", {"tier": "gold"})
    assert not spec.selects("team-b", {"tier": "gold"})
    assert not spec.selects("team-a", {"tier": "bronze"})
    with pytest.raises(PoolSpecError, match="set exactly one of gpus, nodeSelector"):
        parse_pool({"spec": {"selector": {}, "limit": {"gpus": 1, "nodeSelector": {}}}})
    template = {"spec": {"template": {"spec": {
        "containers": [{"resources": {"limits": {"nvidia.com/gpu": "2"}}},
                       {"resources": {"requests": {"nvidia.com/gpu": 1}}}],
        "initContainers": [{"resources": {"limits": {"nvidia.com/gpu": "4"}}}],
    }}}}  # fmt: skip
    assert gpus_per_replica(template) == 4  # the init container's 4 > 2 + 1
    assert gpus_per_replica({"spec": {}}) == 0


def test_without_the_gpupool_crd_or_outside_the_watched_namespaces_nothing_is_pooled() -> None:
    pool = Pool({"gpus": 2})
    pool.pooled_limit = False
    pool.model("chat", 2, replicas={"min": 1, "max": 6})
    pool.model("other", 2, namespace="elsewhere", replicas={"min": 1, "max": 6})
    pool.source.observations.update(chat=busy(2), other=busy(2))
    pool.coordinator.namespaces = ("team",)
    pool.cycle()
    assert [m["name"] for m in pool.pool()["members"]] == ["chat"]
    assert "pool" not in pool.status("other", "elsewhere"), "not in a watched namespace"
    assert pool.fleets["other"].desired > 2
    pool.cluster.gpu_pools = None  # the CRD is not installed (an upgrade without it)
    pool.cycle()
    assert "pool" not in pool.status("chat") and pool.fleets["chat"].desired > 2


def test_a_pool_deleted_while_it_is_arbitrated_is_no_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pool = two_models()
    pool.source.observations.update(chat=busy(2), batch=idle())
    gone = NotFound('gpupools.slascaler.io "a100" not found')

    def deleted() -> None:
        raise gone

    pool.cluster.fail("patch_gpu_pool_status", deleted)
    errors: list[str] = []
    pool.coordinator.on_error = errors.append
    with caplog.at_level(logging.INFO):
        pool.cycle()
    assert errors == [] and not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert any("deleted meanwhile" in r.getMessage() for r in caplog.records)
    assert "pool" in pool.status("chat"), "the members' grants still come from the arbitration"


def in_shard(name: str) -> Any:
    return lambda labels: labels.get("shard") == name


def test_a_release_sharded_by_label_arbitrates_only_the_pools_of_its_shard() -> None:
    pool = two_models()
    pool.source.observations.update(chat=busy(2), batch=idle())
    for name in ("chat", "batch"):
        pool.cluster.inference_slas[("team", name)]["metadata"]["labels"]["shard"] = "a"
    pool.coordinator.in_shard = in_shard("b")
    pool.coordinator.refresh()
    assert pool.pool() == {}, "no member in shard b: shard a's release writes this status"
    assert pool.coordinator.arbitrations == {}

    pool.coordinator.in_shard = in_shard("a")
    pool.cycle()
    assert {m["name"] for m in pool.pool()["members"]} == {"chat", "batch"}
    assert pool.pool_condition("Ready")["reason"] == "Arbitrated"


def test_a_pool_whose_members_are_split_across_shards_holds_them_and_says_so() -> None:
    pool = two_models()
    pool.source.observations.update(chat=busy(2), batch=idle())
    pool.cluster.inference_slas[("team", "chat")]["metadata"]["labels"]["shard"] = "a"
    pool.cluster.inference_slas[("team", "batch")]["metadata"]["labels"]["shard"] = "b"
    pool.coordinator.in_shard = in_shard("a")
    for _ in range(4):
        pool.cycle()
    ready = pool.pool_condition("Ready")
    assert (ready["status"], ready["reason"]) == ("False", "SplitAcrossShards")
    assert "team/batch" in ready["message"] and "SLASCALER_SELECTOR" in ready["message"]
    assert [m["name"] for m in pool.pool()["members"]] == ["chat"]
    assert pool.fleets["chat"].desired == 2, "held at its count: each shard would grant it all"
    assert "held at its count" in pool.status("chat")["pool"]["message"]


def test_a_new_member_is_arbitrated_at_once_then_held_if_still_unseen() -> None:
    pool = Pool({"gpus": 8})
    pool.model("chat", 2, replicas={"min": 1, "max": 6})
    pool.cycle()
    refreshes = len([c for c in pool.cluster.calls if c[0] == "list_gpu_pools"])
    pool.model("late", 2, priority=5, replicas={"min": 1, "max": 6})
    late = pool.cluster.get_inference_sla("team", "late")
    grant = pool.coordinator.grant_for(late)  # created since the last arbitration
    assert grant is not None and grant.granted == 2
    assert len([c for c in pool.cluster.calls if c[0] == "list_gpu_pools"]) == refreshes + 1


def test_a_new_member_whose_pool_is_deleted_before_its_arbitration_is_not_pooled() -> None:
    """The forced refresh for a member it has not seen finds its GPUPool gone: the member
    decides as one outside any pool (the evaluation used to end in StopIteration)."""
    pool = Pool({"gpus": 8})
    pool.model("chat", 2, replicas={"min": 1, "max": 6})
    pool.cycle()
    pool.model("late", 2, priority=5, replicas={"min": 1, "max": 6})
    late = pool.cluster.get_inference_sla("team", "late")
    late["status"] = {"replicas": 2}  # evaluated once already, by a release before this one
    assert pool.cluster.gpu_pools is not None
    del pool.cluster.gpu_pools["a100"]
    assert pool.coordinator.grant_for(late) is None
