"""A replica's automatic prefix cache: cached blocks by hash, who uses them, LRU eviction.

What vLLM v1 does (read in vLLM 0.11.0 and 0.33.0: `vllm/v1/core/kv_cache_manager.py`,
`block_pool.py`, `kv_cache_utils.py`, `single_type_kv_cache_manager.py`):
- a prompt is cut into blocks of `block_size` tokens (16 by default); each *full* block gets a
  hash chained to its parent's, so equal hashes mean equal prefixes;
- when the scheduler admits a request it looks up the longest run of leading blocks that are
  cached (`find_longest_cache_hit`), capped at `num_tokens - 1` tokens: the last prompt token
  must be computed for its logits, so a prompt made only of cached full blocks recomputes its
  whole last block (`get_computed_blocks`);
- a hit block gains a reference; a block without references stays cached in the free-block
  queue and is evicted from its head (least recently freed first) when a new block is
  needed; a request frees its blocks in reverse order, so its tail blocks are evicted first;
- a block a request computes is cached as soon as it is full.

This model keeps that state in *runs*: consecutive blocks of one chain that are cached,
used and freed together (a radix tree's edges, as SGLang's RadixAttention keeps them), so
that its work per request is per run, not per block (a replica sees ~10⁶ blocks per hour of
simulated traffic). Every request holds a leading run of its blocks (`held` blocks, whole
runs: a run is split where a hold ends); a run's `refs` counts the running requests that
hold it; a run nobody holds is free, in the LRU queue. The replica counts a run's tokens as
used while it is held (once, however many requests share it) and as free otherwise, as
vLLM's `kv_cache_usage_perc` does; it calls `evict_to` whenever its free space shrinks, so
free runs always fit in the free space. Eviction takes the least recently freed run, tail
blocks first; a run's descendants are freed no later than it is (whoever holds them holds
it), so eviction never strands a cached block behind an evicted parent.

Simplifications, stated: one block size per cache; hashes are chained (a hash fixes every
block before it), and a hash that breaks this ends a lookup; only prompt blocks are hashed
(vLLM hashes generated blocks too, which multi-turn reuse needs); a request that computed
blocks another request cached meanwhile uses the cached copies from then on and frees its
own (vLLM keeps both copies until the request ends).

Used by `sim.engine` (one cache per replica); the prefix-affinity router reads it.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict, deque
from collections.abc import Sequence
from itertools import repeat


class Run:
    """Consecutive cached blocks of one chain, held (or freed) together."""

    __slots__ = ("blocks", "refs", "slot")

    def __init__(self, blocks: tuple[int, ...], refs: int) -> None:
        self.blocks = blocks
        self.refs = refs  # running requests holding it
        self.slot: int | None = None  # its key in the LRU queue while free


class PrefixCache:
    """Cached KV blocks of one replica, by block hash."""

    __slots__ = ("_lru", "_slots", "block_tokens", "evictions", "free_blocks", "index")

    def __init__(self, block_tokens: int) -> None:
        if block_tokens < 1:
            raise ValueError(f"block_tokens must be ≥ 1, got {block_tokens}")
        self.block_tokens = block_tokens
        self.index: dict[int, Run] = {}  # every cached block → its run
        self.free_blocks = 0  # cached blocks nobody holds
        self.evictions = 0
        self._lru: OrderedDict[int, Run] = OrderedDict()  # free runs, next victim first
        self._slots = itertools.count()

    @property
    def cached_blocks(self) -> int:
        return len(self.index)

    @property
    def free_tokens(self) -> int:
        """Tokens of cached blocks nobody holds (free space that still holds KV)."""
        return self.free_blocks * self.block_tokens

    def free_queue(self) -> list[int]:
        """The free blocks in eviction order (next victim first)."""
        return [block for run in self._lru.values() for block in reversed(run.blocks)]

    # -- lookups ------------------------------------------------------------------------

    def _run_at(self, hashes: Sequence[int], start: int) -> Run | None:
        run = self.index.get(hashes[start])
        if run is None or run.blocks[0] != hashes[start]:
            return None  # not cached, or hashes that are not chained
        return run

    @staticmethod
    def _common(run: Run, hashes: Sequence[int], start: int, stop: int) -> int:
        """How many of `run`'s blocks equal hashes[start:stop] (a prefix, hashes chained)."""
        blocks = run.blocks
        length = min(len(blocks), stop - start)
        if tuple(hashes[start : start + length]) == blocks[:length]:
            return length
        low, high = 1, length  # blocks[0] matched; find the last k with hashes equal
        while low < high - 1:
            middle = (low + high) // 2
            if hashes[start + middle - 1] == blocks[middle - 1]:
                low = middle
            else:
                high = middle
        return low

    def match(self, hashes: Sequence[int], limit: int) -> tuple[int, int]:
        """(leading blocks of `hashes` cached, tokens of those nobody holds), at most
        `limit` blocks; changes nothing."""
        done = free = 0
        limit = min(limit, len(hashes))
        while done < limit:
            run = self._run_at(hashes, done)
            if run is None:
                break
            common = self._common(run, hashes, done, limit)
            done += common
            if not run.refs:
                free += common
            if common < len(run.blocks):
                break
        return done, free * self.block_tokens

    # -- holding ------------------------------------------------------------------------

    def _split(self, run: Run, at: int) -> None:
        """Cut `run` after `at` blocks, for the caller to hold the head: the tail keeps the
        run's holders and, if free, its place in the LRU queue."""
        tail = Run(run.blocks[at:], run.refs)
        run.blocks = run.blocks[:at]
        self.index.update(zip(tail.blocks, repeat(tail)))
        if run.slot is not None:
            tail.slot = run.slot
            self._lru[tail.slot] = tail
            self._lru[self._new_slot(run)] = run  # until the caller holds it

    def _new_slot(self, run: Run) -> int:
        run.slot = next(self._slots)
        return run.slot

    def _hold(self, run: Run) -> int:
        """One more holder for `run`; returns the blocks that go from free to used."""
        run.refs += 1
        if run.refs > 1:
            return 0
        assert run.slot is not None
        del self._lru[run.slot]
        run.slot = None
        self.free_blocks -= len(run.blocks)
        return len(run.blocks)

    def acquire(self, hashes: Sequence[int], blocks: int) -> int:
        """Hold the first `blocks` blocks of `hashes` (cached: see `match`); returns the
        tokens that go from free to used."""
        done = taken = 0
        while done < blocks:
            run = self._run_at(hashes, done)
            assert run is not None
            common = self._common(run, hashes, done, blocks)
            if common < len(run.blocks):
                self._split(run, common)
            taken += self._hold(run)
            done += common
        return taken * self.block_tokens

    def extend(self, hashes: Sequence[int], held: int, upto: int) -> tuple[int, int]:
        """Cache the blocks [held, upto) a request holding `held` blocks just computed:
        blocks already cached (computed meanwhile by another request) are held instead of
        the request's own copies. Returns (blocks now held, change of used tokens: minus
        the request's own copies given up for cached ones that were in use)."""
        change = 0
        while held < upto:
            run = self.index.get(hashes[held])
            if run is None:
                fresh = tuple(hashes[held:upto])
                if not self.index.keys().isdisjoint(fresh):
                    fresh = tuple(itertools.takewhile(lambda h: h not in self.index, fresh))
                self.index.update(zip(fresh, repeat(Run(fresh, 1))))
                return held + len(fresh), change * self.block_tokens
            if run.blocks[0] != hashes[held]:
                break
            common = self._common(run, hashes, held, upto)
            if common < len(run.blocks):
                self._split(run, common)
            if run.refs:
                change -= common
            self._hold(run)
            held += common
        return held, change * self.block_tokens

    def release(self, hashes: Sequence[int], held: int) -> int:
        """Drop a request's hold on the first `held` blocks of `hashes`; runs left without
        holders join the free queue, the last one first (so that, as in vLLM, a request's
        tail blocks are evicted before its head). Returns the tokens freed."""
        runs: list[Run] = []
        done = 0
        while done < held:
            run = self.index[hashes[done]]
            runs.append(run)
            done += len(run.blocks)
        freed = 0
        for run in reversed(runs):
            run.refs -= 1
            if not run.refs:
                self._lru[self._new_slot(run)] = run
                freed += len(run.blocks)
        self.free_blocks += freed
        return freed * self.block_tokens

    def evict_to(self, free_space_tokens: int) -> None:
        """Evict free blocks, least recently freed first and each run from its tail, until
        the free blocks fit in `free_space_tokens`."""
        excess = self.free_blocks - max(0, free_space_tokens) // self.block_tokens
        while excess > 0:
            slot, run = self._lru.popitem(last=False)
            if len(run.blocks) > excess:
                victims = run.blocks[-excess:]
                run.blocks = run.blocks[:-excess]
                self._lru[slot] = run
                self._lru.move_to_end(slot, last=False)
            else:
                victims, run.slot = run.blocks, None
            deque(map(self.index.__delitem__, victims), maxlen=0)
            self.free_blocks -= len(victims)
            self.evictions += len(victims)
            excess -= len(victims)
