"""A replica's automatic prefix cache: cached blocks by hash, their references, LRU eviction.

What vLLM v1 does (read in vLLM 0.11.0 and 0.33.0: `vllm/v1/core/kv_cache_manager.py`,
`block_pool.py`, `kv_cache_utils.py`, `single_type_kv_cache_manager.py`):
- a prompt is cut into blocks of `block_size` tokens (16 by default); each *full* block gets a
  hash chained to its parent's, so equal hashes mean equal prefixes;
- when the scheduler first admits a request it looks up the longest run of leading blocks
  that are cached (`find_longest_cache_hit`), capped at `num_tokens - 1` tokens: the last
  prompt token must be computed for its logits, so a prompt made only of cached full blocks
  recomputes its whole last block (`get_computed_blocks`);
- a hit block gains a reference; a block without references stays cached in the free-block
  queue and is evicted from its head (least recently freed first) when a new block is
  needed; a request frees its blocks in reverse order, so its tail blocks are evicted first;
- a block a request computed is cached as soon as it is full.

This model keeps the same state: `refs` holds every cached block's reference count (in use or
not) and `free` those without references, in eviction order. The replica counts a block's
tokens as used while it has references (once, however many requests share it) and as free
otherwise, as vLLM's `kv_cache_usage_perc` does; it calls `evict_to` whenever its free space
shrinks, so the unreferenced blocks always fit in the free space. Simplifications, stated:
one block size per cache; only prompt blocks are hashed (vLLM hashes generated blocks too,
which multi-turn reuse needs); a block computed while an equal one is cached stays private to
its request and is not cached (vLLM keeps both copies under the hash).

Used by `sim.engine` (one cache per replica); the prefix-affinity router reads it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


class PrefixCache:
    """Cached KV blocks of one replica, by block hash."""

    __slots__ = ("block_tokens", "evictions", "free", "refs")

    def __init__(self, block_tokens: int) -> None:
        if block_tokens < 1:
            raise ValueError(f"block_tokens must be ≥ 1, got {block_tokens}")
        self.block_tokens = block_tokens
        self.refs: dict[int, int] = {}  # every cached block → running requests that use it
        self.free: OrderedDict[int, None] = OrderedDict()  # unreferenced, next victim first
        self.evictions = 0

    @property
    def cached_blocks(self) -> int:
        return len(self.refs)

    @property
    def free_tokens(self) -> int:
        """Tokens of cached blocks that no request uses (free space that still holds KV)."""
        return len(self.free) * self.block_tokens

    def match(self, hashes: Sequence[int], limit: int) -> tuple[int, int]:
        """(leading blocks of `hashes` cached, tokens of those not in use now), at most
        `limit` blocks; changes nothing."""
        refs = self.refs
        blocks = unreferenced = 0
        for index in range(min(limit, len(hashes))):
            count = refs.get(hashes[index])
            if count is None:
                break
            blocks += 1
            if count == 0:
                unreferenced += 1
        return blocks, unreferenced * self.block_tokens

    def acquire(self, hashes: Sequence[int]) -> int:
        """Reference cached blocks (a hit); returns the tokens that go from free to used."""
        refs, free = self.refs, self.free
        taken = 0
        for block in hashes:
            count = refs[block]
            if count == 0:
                del free[block]
                taken += 1
            refs[block] = count + 1
        return taken * self.block_tokens

    def insert(self, block: int) -> bool:
        """Cache a block just computed, referenced by the request that computed it; False
        (and nothing cached) when an equal block is already cached."""
        if block in self.refs:
            return False
        self.refs[block] = 1
        return True

    def release(self, hashes: Sequence[int]) -> int:
        """Drop one reference from each block, last block first (so that, as in vLLM, a
        request's tail blocks are evicted before its head); returns the tokens freed."""
        refs, free = self.refs, self.free
        freed = 0
        for block in reversed(hashes):
            count = refs[block] - 1
            refs[block] = count
            if count == 0:
                free[block] = None
                freed += 1
        return freed * self.block_tokens

    def evict_to(self, free_space_tokens: int) -> None:
        """Evict unreferenced blocks, least recently freed first, until they fit in
        `free_space_tokens`."""
        excess = len(self.free) - max(0, free_space_tokens) // self.block_tokens
        for _ in range(excess):
            block, _ = self.free.popitem(last=False)
            del self.refs[block]
        if excess > 0:
            self.evictions += excess
