"""The source material's two TTFT scenarios as seeded per-request sample generators.

Low load: queue ~ Exp(mean 5 ms); high load: queue ~ Exp(mean 200 ms); in both tokenization
~ N(10, 2), prefill ~ N(100, 20), first decode ~ N(20, 5) (DESIGN §1). Used to make the
bundled sample files, by `slascaler samples`, and by the tests.
"""

from __future__ import annotations

from typing import Final

import numpy as np

from slascaler.model.samples import TTFTBreakdown

QUEUE_MEAN_MS: Final[dict[str, float]] = {"low-load": 5.0, "high-load": 200.0}


def source_scenario(name: str, count: int, seed: int) -> list[TTFTBreakdown]:
    """`count` samples of the named scenario (`low-load` or `high-load`), reproducibly."""
    if name not in QUEUE_MEAN_MS:
        raise ValueError(f"unknown scenario {name!r}; choose one of {', '.join(QUEUE_MEAN_MS)}")
    rng = np.random.default_rng(seed)
    queue = rng.exponential(QUEUE_MEAN_MS[name], count)
    tokenization = rng.normal(10.0, 2.0, count)
    prefill = rng.normal(100.0, 20.0, count)
    first_decode = rng.normal(20.0, 5.0, count)
    return [
        TTFTBreakdown(float(q), float(t), float(p), float(d))
        for q, t, p, d in zip(queue, tokenization, prefill, first_decode, strict=True)
    ]
