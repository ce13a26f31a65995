"""The engine knobs, described once: spec field, fleet field, engine flag.

`KNOBS` lists each knob slascaler tunes with where its bounds are declared
(`spec.knobs.<name>`), where the live value is read (`FleetState`), and which command-line
flag carries it for each engine (`engines.EngineFlavour`). Everything that handles knobs
(bounds, the policy's rules, re-validation, the status, actuation) goes through it.

Pure data and accessors; read by the policy, the status and the reconcile loop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from slascaler.engines import EngineFlavour
from slascaler.spec import Bounds, SLASpec

KnobName = Literal["replicas", "maxBatchSize", "chunkSize"]
EngineKnob = Literal["maxBatchSize", "chunkSize"]


@dataclass(frozen=True)
class KnobDef:
    name: EngineKnob
    bounds: Callable[[SLASpec], Bounds | None]
    flag: Callable[[EngineFlavour], str]
    meaning: str


MAX_BATCH = KnobDef(
    "maxBatchSize",
    lambda spec: spec.max_batch_size,
    lambda flavour: flavour.max_batch_flag,
    "requests a replica runs at once",
)
CHUNK = KnobDef(
    "chunkSize",
    lambda spec: spec.chunk_size,
    lambda flavour: flavour.chunk_flag,
    "tokens one engine step carries (the chunked-prefill budget)",
)
KNOBS: tuple[KnobDef, ...] = (MAX_BATCH, CHUNK)


def knob(name: str) -> KnobDef:
    return next(k for k in KNOBS if k.name == name)
