"""Shared-prefix groups for synthetic loads: block hashes so that the requests of one group
share their leading blocks (a system prompt, a few-shot template, a document) and nothing
else.

Traces that carry prefix information give it as one hash per block of prompt tokens
(Mooncake's JSONL traces, FAST'25: `hash_ids`, one per 512 tokens); the Azure traces and the
synthetic loads built on their lengths have none. `assign_shared_prefixes` makes them:

- there are `groups` shared prefixes (system prompts, templates, documents); prefix g is
  `prefix_tokens` long (whole blocks), drawn log-uniformly in that range once per group;
- a request can belong to a group whose whole prefix takes at most `max_prompt_share` of
  its prompt (the rest is the user's own text); among those, it picks group g with weight
  1 / (g + 1)^`zipf` (a few popular prefixes, a long tail; `zipf` 0 is uniform), with
  probability `grouped_share`; a request no group fits, or not drawn, shares nothing;
- every request gets ⌈prompt / block_tokens⌉ hashes, as Mooncake's traces do (the last block
  may be partial; only full blocks are ever cached). Group g's i-th block hashes to
  (g + 1)·2³² + i, so a shared block always has the same parent (chained, as vLLM's hashes
  are); a request's own blocks get negative hashes no other request has.

A group's requests share its whole prefix, as requests with one system prompt do; so the
prefix cache holds one run per group rather than one per prefix length.

`ideal_hit_share` reports the share of prompt tokens an infinite cache would serve, which is
what to compare with public figures: in public conversation traces a third to two thirds of
prompt tokens are shared prefixes (DESIGN §4). The defaults give 0.41 on the bundled
conversation trace's lengths and 0.31 on the code trace's (seed 1); raise `max_prompt_share`,
`grouped_share` or the prefix lengths for more. Everything is seeded.

Called by `benchmark.simulator_speed`, by workloads that want shared prefixes, and the tests.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from slascaler_sim.engine import DEFAULT_BLOCK_TOKENS, Request

Requests = TypeVar("Requests", bound=Sequence[Request])

_GROUP_SHIFT = 32


@dataclass(frozen=True)
class SharedPrefixes:
    """How requests share prefixes (see the module's docstring)."""

    groups: int = 32
    grouped_share: float = 0.9
    prefix_tokens: tuple[int, int] = (256, 4096)
    max_prompt_share: float = 0.9
    zipf: float = 1.0
    block_tokens: int = DEFAULT_BLOCK_TOKENS

    def __post_init__(self) -> None:
        low, high = self.prefix_tokens
        if self.groups < 1 or self.block_tokens < 1 or not 1 <= low <= high:
            raise ValueError(f"invalid shared-prefix parameters: {self}")
        if not (0 <= self.grouped_share <= 1 and 0 <= self.max_prompt_share <= 1):
            raise ValueError(f"shares must lie in [0, 1]: {self}")


def assign_shared_prefixes(
    requests: Requests, params: SharedPrefixes = SharedPrefixes(), seed: int = 0
) -> Requests:
    """Set `block_hashes` and `hash_block_tokens` of `requests` (in place); returns them."""
    rng = np.random.default_rng(seed)
    size = params.block_tokens
    low, high = params.prefix_tokens
    drawn = np.exp(rng.uniform(math.log(low), math.log(high), params.groups))
    group_blocks = np.maximum(1, (drawn // size).astype(np.int64))
    popularity = 1.0 / np.arange(1, params.groups + 1, dtype=np.float64) ** params.zipf
    prompts = np.asarray([r.prompt for r in requests], dtype=np.float64)
    # A group fits a request whose prompt its prefix leaves room in: the prefix is at most
    # `max_prompt_share` of the prompt. Among the groups that fit, pick by popularity.
    fits = group_blocks[None, :] * size <= params.max_prompt_share * prompts[:, None]
    cumulative = np.cumsum(popularity[None, :] * fits, axis=1)
    draw = rng.uniform(0, 1, len(requests)) * cumulative[:, -1]
    picks = (cumulative < draw[:, None]).sum(axis=1)
    grouped = (rng.uniform(0, 1, len(requests)) < params.grouped_share) & fits.any(axis=1)
    own = -1  # next private hash (counts down)
    for request, in_group, group in zip(requests, grouped.tolist(), picks.tolist(), strict=True):
        blocks = -(-request.prompt // size)
        shared = int(group_blocks[group]) if in_group else 0
        base = (group + 1) << _GROUP_SHIFT
        request.block_hashes = (
            *range(base, base + shared),
            *range(own, own - (blocks - shared), -1),
        )
        request.hash_block_tokens = size
        own -= blocks - shared
    return requests


def ideal_hit_share(requests: Sequence[Request]) -> float:
    """Share of prompt tokens found in an infinite prefix cache: per request, in arrival
    order, the full leading blocks that an earlier request already had."""
    seen: set[int] = set()
    hit = total = 0
    for request in requests:
        total += request.prompt
        size = request.hash_block_tokens
        full = request.block_hashes[: request.prompt // size]
        run = 0
        for block in full:
            if block not in seen:
                break
            run += 1
        hit += run * size
        seen.update(full)
    return hit / total if total else 0.0
