"""The CRD files: every field explained (kubectl explain), and their defaults the ones the
operator's own parsers apply, so the two lines of defence agree."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from slascaler.spec import Behavior, parse_spec

CRD = Path(__file__).parents[1] / "manifests" / "crds" / "slascaler.io_inferenceslas.yaml"
POOL_CRD = CRD.with_name("slascaler.io_gpupools.yaml")


def schema(path: Path = CRD) -> dict[str, Any]:
    crd = yaml.safe_load(path.read_text(encoding="utf-8"))
    version = crd["spec"]["versions"][0]
    assert version["name"] == "v1alpha1" and version["subresources"] == {"status": {}}
    result: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return result


def walk(node: dict[str, Any], path: str) -> list[str]:
    undocumented = []
    for name, child in (node.get("properties") or {}).items():
        here = f"{path}.{name}"
        if name != "metadata" and not child.get("description"):
            undocumented.append(here)
        undocumented += walk(child, here)
    if "items" in node:
        undocumented += walk(node["items"], f"{path}[]")
    return undocumented


def test_every_field_is_described() -> None:
    assert walk(schema(), "") == []
    assert walk(schema(POOL_CRD), "") == []


def test_the_gpupool_is_cluster_scoped_and_its_defaults_are_the_parsers() -> None:
    from slascaler.pool_spec import DEFAULT_RESOURCE, parse_pool

    crd = yaml.safe_load(POOL_CRD.read_text(encoding="utf-8"))
    assert crd["spec"]["scope"] == "Cluster"
    columns = {c["name"]: c["jsonPath"] for c in crd["spec"]["versions"][0][
        "additionalPrinterColumns"]}  # fmt: skip
    assert columns["GPUs"] == ".status.gpus" and columns["SLAs"] == ".status.slas"
    spec = schema(POOL_CRD)["properties"]["spec"]["properties"]
    parsed = parse_pool({"spec": {"selector": {}, "limit": {"gpus": 1}}})
    assert spec["resourceName"]["default"] == parsed.resource == DEFAULT_RESOURCE
    rule = spec["limit"]["x-kubernetes-validations"][0]
    assert rule["message"] == "set exactly one of gpus, nodeSelector, resourceQuota"


def test_schema_defaults_are_the_parsers_defaults() -> None:
    spec = schema()["properties"]["spec"]["properties"]
    parsed = parse_spec({"targetRef": {"name": "x"}, "objectives": {"ttft": {"thresholdMs": 1}}})
    assert spec["engine"]["default"] == parsed.engine.value
    assert spec["mode"]["default"] == parsed.mode.value
    assert spec["window"]["default"] == "2m" and parsed.window_s == 120
    assert spec["priority"]["default"] == parsed.priority == 0
    replicas = spec["replicas"]["properties"]
    assert (replicas["min"]["default"], replicas["max"]["default"]) == (
        parsed.replicas.min,
        parsed.replicas.max,
    )
    ttft = spec["objectives"]["properties"]["ttft"]["properties"]
    assert ttft["percentile"]["default"] == parsed.ttft.percentile
    behavior = spec["behavior"]["properties"]
    seconds = {"30s": 30, "5m": 300, "10m": 600}
    defaults = Behavior()
    assert seconds[behavior["scaleUpCooldown"]["default"]] == defaults.scale_up_cooldown_s
    assert (
        seconds[behavior["scaleDownStabilization"]["default"]]
        == defaults.scale_down_stabilization_s
    )
    assert seconds[behavior["knobCooldown"]["default"]] == defaults.knob_cooldown_s
