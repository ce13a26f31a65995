"""The fleet's routers: which ready replica gets a request.

- `least_outstanding`: the replica with the fewest requests waiting or running (the default,
  as a gateway's least-request balancing does).
- `prefix_affinity`: the replica whose prefix cache holds the longest leading run of the
  request's blocks, unless that replica has more than `max_extra_outstanding` requests more
  than the least loaded one, in which case (and where no replica holds any of the prefix)
  least-outstanding decides; among equal prefixes the less loaded replica wins. This follows
  AIBrix's `prefix-cache` routing strategy (its gateway plugin
  `pkg/plugins/gateway/algorithms/prefix_cache.go`): route by longest prefix match, but fall
  back to the least-request pod when the running-request counts of the pods differ by more
  than an absolute bound (`AIBRIX_PREFIX_CACHE_POD_RUNNING_REQUEST_IMBALANCE_ABS_COUNT`,
  8 by default). Two differences, stated: the bound here compares the chosen replica with the
  least loaded one (AIBrix compares the most and least loaded pods, whichever they are), and
  the match is read from the replicas' actual caches, as llm-d's precise prefix-cache scorer
  reads them from vLLM's KV-cache events, where AIBrix keeps its own index of where it sent
  each prefix (so AIBrix follows a prefix to a replica before its prefill has finished).

Called by `sim.fleet`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from slascaler_sim.engine import Replica, Request

PREFIX_AFFINITY_MAX_EXTRA_OUTSTANDING: Final = 8  # AIBrix's default imbalance bound


def least_outstanding(ready: Sequence[Replica]) -> Replica:
    """The first of the replicas with the fewest outstanding requests (a loop, not `min` on
    the property: it runs for every request, over up to `replicas.max` replicas)."""
    best = ready[0]
    fewest = len(best.waiting) + len(best.running)
    for replica in ready:
        outstanding = len(replica.waiting) + len(replica.running)
        if outstanding < fewest:
            best, fewest = replica, outstanding
    return best


def prefix_affinity(
    ready: Sequence[Replica],
    request: Request,
    max_extra_outstanding: int = PREFIX_AFFINITY_MAX_EXTRA_OUTSTANDING,
) -> Replica:
    least = least_outstanding(ready)
    if not request.block_hashes:
        return least
    best, best_tokens = least, 0
    for replica in ready:
        tokens = replica.cached_prefix_tokens(request)
        if tokens > best_tokens or (
            tokens == best_tokens and tokens and replica.outstanding < best.outstanding
        ):
            best, best_tokens = replica, tokens
    if best_tokens == 0 or best.outstanding - least.outstanding > max_extra_outstanding:
        return least
    return best
