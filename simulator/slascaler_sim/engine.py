"""One simulated engine replica with vLLM v1's scheduler semantics.

Each step has a token budget (`max_num_batched_tokens`, the chunk size). Running requests are
served first, in order: a decode costs one token, a partial prefill its next chunk (what is
left of the budget); then waiting requests are admitted while budget remains, fewer than
`max_num_seqs` run and the KV cache has room. A prefill's last chunk produces the first token.
When a decode finds the KV cache full, the most recently admitted request is preempted
(recompute: it goes back to the front of the queue and must prefill prompt + generated again).

A prefill chunk pays the attention of its tokens over everything already in the KV cache
(earlier chunks and cached prefix blocks): t new tokens after k cost t·(k + t/2) query-key
pairs at the profile's rate (`profiles.prefill_pairs`).

Context limit (`profile.max_model_len`), as vLLM 0.33.0 answers (its `renderers/params.py`,
`v1/engine/input_processor.py`, `entrypoints/serve/utils/api_utils.get_max_tokens`): a
prompt of `max_model_len` tokens or more, or a request asking for more output tokens than
`max_model_len`, is refused with HTTP 400 before it reaches the engine: no `vllm:` metric
counts it (only the API server's `http_requests_total{status="4xx"}`, from
prometheus-fastapi-instrumentator, which the simulator does not export); the replica lists
it in `refused`, the fleet counts it in `failed_requests`. A request whose prompt plus
output would exceed the context has its `max_tokens` lowered to what is left, so its
generation stops there (finish reason "length"). A request's `output` is taken as its
`max_tokens`. (vLLM 0.11.0's OpenAI server refused prompt + max_tokens > max_model_len
instead, when max_tokens was given: `entrypoints/openai/serving_engine._validate_input`.)

Automatic prefix caching (vLLM v1's default): a request's `block_hashes` name its prompt's
blocks of `hash_block_tokens` tokens. At its admission the longest cached run of leading
blocks (at most `prompt - 1` tokens, whole blocks) is a hit: those tokens skip prefill and
their blocks are shared, counted once in the KV cache. Each full prompt block is cached when
its prefill completes; blocks no running request uses stay cached as free space and are
evicted least recently freed first (`sim.kvcache`). Requests without hashes share nothing.

Skip-ahead: while a step carries only decodes and nothing can be admitted, the batch is
unchanged until the next completion, so k identical steps are taken at once (their duration
computed at the mean KV length over the k steps); an arrival cuts such a run short at the
next step boundary, because it may be admissible.

Driven by `sim.fleet`; records into a `MetricRecorder` (metric semantics in `sim.recorder`).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from enum import Enum

from slascaler.model.observation import ForwardPass
from slascaler_sim.kvcache import PrefixCache
from slascaler_sim.profiles import CostProfile, prefill_pairs
from slascaler_sim.recorder import MEAN_TIME_PER_TOKEN, PREFILL_BATCH, MetricRecorder

DEFAULT_BLOCK_TOKENS = 16  # vLLM's default --block-size (`CacheConfig.DEFAULT_BLOCK_SIZE`)


@dataclass(slots=True, eq=False)
class Request:
    """One request and its progress (times in seconds of the fleet's clock)."""

    id: int
    arrival: float  # at the router (what the client sees)
    prompt: int
    output: int  # tokens to generate (its max_tokens); lowered to what the context leaves
    # Hashes of the prompt's blocks of `hash_block_tokens` tokens, in order; equal hashes mean
    # equal prefixes (vLLM chains each block's hash to its parent's). A trace's `hash_ids`
    # cover 512 tokens each (Mooncake's traces); vLLM's own blocks are 16 tokens.
    block_hashes: tuple[int, ...] = ()
    hash_block_tokens: int = DEFAULT_BLOCK_TOKENS
    engine_arrival: float = math.nan  # at the replica
    prefill_target: int = 0  # tokens to prefill: prompt, or prompt + generated after preemption
    prefilled: int = 0  # includes the tokens found in the prefix cache
    generated: int = 0
    kv: int = 0  # KV tokens of its context (in `held` cached blocks or its own)
    held: int = 0  # leading prompt blocks it holds in the prefix cache (shared with others)
    cached_tokens: int = 0  # prompt tokens found in the prefix cache at first admission
    refused: str | None = None  # vLLM's error message, for a request refused (HTTP 400)
    scheduled_at: float | None = None
    first_token_at: float | None = None
    last_token_at: float | None = None
    done_at: float | None = None
    preemptions: int = 0

    @property
    def decoding(self) -> bool:
        return self.prefilled >= self.prefill_target


def context_refusal(prompt: int, max_tokens: int, max_model_len: int) -> str | None:
    """vLLM 0.33.0's error for a request that its context limit refuses, None if accepted."""
    if prompt > max_model_len:
        return (
            f"This model's maximum context length is {max_model_len} tokens. However, your "
            f"prompt contains {prompt} input tokens, which exceeds this limit even without "
            "any output tokens."
        )
    if prompt == max_model_len:
        return (
            f"The decoder prompt (length {prompt}) plus the number of requested output tokens "
            f"(at least 1) is longer than the maximum model length of {max_model_len}."
        )
    if max_tokens > max_model_len:
        return f"max_tokens={max_tokens} cannot be greater than max_model_len={max_model_len}."
    return None


class Phase(Enum):
    STARTING = "starting"  # loading the model: not routable
    READY = "ready"
    DRAINING = "draining"  # finishes its requests, takes no new ones
    STOPPED = "stopped"


@dataclass(slots=True)
class _Step:
    start: float
    duration: float  # of one step
    repeats: int
    chunks: list[tuple[Request, int]]  # prefill tokens per request in the (single) step
    decodes: list[Request]
    decode_kv: int  # KV tokens the decodes read (per step, mean over a skip-ahead run)

    @property
    def end(self) -> float:
        return self.start + self.duration * self.repeats


@dataclass(eq=False)
class Replica:
    """One engine: its queue, running batch, KV cache, settings and lifecycle."""

    name: str
    profile: CostProfile
    max_num_seqs: int
    max_num_batched_tokens: int
    ready_at: float
    phase: Phase = Phase.STARTING
    waiting: deque[Request] = field(default_factory=deque)
    running: list[Request] = field(default_factory=list)
    kv_used: int = 0  # KV tokens in use by running requests (shared cache blocks once)
    recorder: MetricRecorder = field(init=False)
    finished: list[Request] = field(default_factory=list)
    refused: list[Request] = field(default_factory=list)  # refused at submission, never served
    step: _Step | None = None
    last_step: _Step | None = None  # the latest completed iteration (for `forward_pass`)
    cache: PrefixCache | None = None  # made at the first request with block hashes
    # When the replica's own next event falls: becoming ready, or the end of its step run;
    # kept up to date by every method that changes its phase or step (a plain attribute, as
    # the fleet's event loop reads it for each replica at every event, its hottest line).
    next_event: float = field(init=False)

    def __post_init__(self) -> None:
        self.recorder = MetricRecorder(self.profile.max_model_len)
        self._sync_next_event()

    @property
    def outstanding(self) -> int:
        return len(self.waiting) + len(self.running)

    def _sync_next_event(self) -> None:
        if self.phase is Phase.STARTING:
            self.next_event = self.ready_at
        else:
            self.next_event = self.step.end if self.step is not None else math.inf

    def handle_event(self, now: float) -> None:
        """The replica's own event at `now`: becoming ready, or the end of its step run."""
        if self.phase is Phase.STARTING:
            self.phase = Phase.READY
        else:
            self._finish_step()
        self._plan(now)  # also brings the gauges up to `now`, and the next event

    def submit(self, request: Request, now: float) -> None:
        request.engine_arrival = now
        limit = self.profile.max_model_len
        refusal = context_refusal(request.prompt, request.output, limit)
        if refusal is not None:
            request.refused = refusal
            self.refused.append(request)
            return
        request.output = min(request.output, limit - request.prompt)
        request.prefill_target = request.prompt
        if request.block_hashes and self.cache is None:
            self.cache = PrefixCache(request.hash_block_tokens)
        self.waiting.append(request)
        if self.step is None:
            self._plan(now)
        elif self.step.repeats > 1:
            # Cut a decode-only run at the first step boundary at or after the arrival.
            done = max(1, math.ceil((now - self.step.start) / self.step.duration - 1e-12))
            self.step.repeats = min(self.step.repeats, done)
            self._sync_next_event()
        self._update_gauges(now)

    def forward_pass(self) -> ForwardPass:
        """The latest iteration and the waiting queue, as Dynamo's instrumented scheduler
        publishes them (`ForwardPassMetrics`); all zeros once idle (its idle heartbeat).
        Queued prefill counts whole prompts; a preempted request waits as queued decode KV."""
        step = self.last_step if self.step is not None else None
        if step is None:
            return ForwardPass(0.0, 0, 0, 0, 0, 0, 0)
        return ForwardPass(
            wall_time_s=step.duration,
            scheduled_prefill_tokens=sum(t for _, t in step.chunks),
            scheduled_prefill_requests=len(step.chunks),
            scheduled_decode_kv_tokens=step.decode_kv,
            scheduled_decode_requests=len(step.decodes),
            queued_prefill_tokens=sum(r.prompt for r in self.waiting if not r.preemptions),
            queued_decode_kv_tokens=sum(r.prefill_target for r in self.waiting if r.preemptions),
        )

    @property
    def kv_cache_usage(self) -> float:
        """`vllm:kv_cache_usage_perc`: the share of the KV cache in use (0–1)."""
        return self.kv_used / self.profile.kv_capacity_tokens

    def drain(self, now: float) -> None:
        self.phase = Phase.DRAINING
        if self.step is None and not self.outstanding:
            self.phase = Phase.STOPPED
        self._sync_next_event()

    def cached_prefix_tokens(self, request: Request) -> int:
        """Prompt tokens of `request` this replica would find in its prefix cache now."""
        blocks, _ = self._lookup(request)
        return blocks * request.hash_block_tokens

    # -- scheduling -------------------------------------------------------------------

    def _update_gauges(self, now: float) -> None:
        self.recorder.set_gauges(now, len(self.waiting), len(self.running))
        self.recorder.kv_cache_usage = self.kv_used / self.profile.kv_capacity_tokens

    def _lookup(self, request: Request) -> tuple[int, int]:
        """(leading prompt blocks cached, tokens of those no request uses now): whole blocks,
        at most all tokens to prefill but one (vLLM computes the last token for its logits)."""
        cache = self.cache
        if cache is None or not request.block_hashes:
            return 0, 0
        size = request.hash_block_tokens
        if size != cache.block_tokens:
            return 0, 0
        tokens = max(request.prefill_target, request.prompt)  # prompt + generated if preempted
        limit = min(request.prompt // size, (tokens - 1) // size)
        return cache.match(request.block_hashes, limit)

    def _release(self, request: Request) -> None:
        """Free what a request holds: its own KV and its references to cached blocks."""
        freed = request.kv
        if request.held:
            cache = self.cache
            assert cache is not None
            freed += cache.release(request.block_hashes, request.held)
            freed -= request.held * cache.block_tokens
            request.held = 0
        self.kv_used -= freed
        request.kv = 0

    def _preempt_for(self, tokens_needed: int) -> None:
        capacity = self.profile.kv_capacity_tokens
        while self.running and self.kv_used + tokens_needed > capacity:
            victim = self.running.pop()
            self._release(victim)
            victim.prefilled = 0
            victim.prefill_target = victim.prompt + max(0, victim.generated)
            victim.preemptions += 1
            self.recorder.counters["vllm:num_preemptions_total"] += 1
            self.waiting.appendleft(victim)
            if self.cache is not None:
                self.cache.evict_to(capacity - self.kv_used)

    def _plan(self, now: float) -> None:
        if self.phase not in (Phase.STARTING, Phase.STOPPED):
            self._schedule(now)
        self._sync_next_event()

    def _schedule(self, now: float) -> None:
        budget = self.max_num_batched_tokens
        running = self.running
        if self.kv_used + len(running) > self.profile.kv_capacity_tokens:
            # Only then can the decodes' next tokens not fit (counting them is the hot path).
            self._preempt_for(sum(1 for r in running if r.decoding))
        chunks: list[tuple[Request, int]] = []
        decodes: list[Request] = []
        pairs = 0.0
        kv_read = 0  # KV tokens the decodes read
        for request in running:
            if budget <= 0:
                break
            if request.prefilled >= request.prefill_target:  # decoding (inlined: hot path)
                decodes.append(request)
                kv_read += request.kv
                budget -= 1
            else:
                tokens = request.prefill_target - request.prefilled
                if tokens > budget:  # min() as a comparison: the hot path
                    tokens = budget
                chunks.append((request, tokens))
                pairs += prefill_pairs(tokens, request.prefilled)
                budget -= tokens
        kv_free = self.profile.kv_capacity_tokens - self.kv_used - len(decodes)
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            request = self.waiting[0]
            hit_blocks, reclaimed = self._lookup(request)
            hit = hit_blocks * request.hash_block_tokens
            tokens = request.prefill_target - hit
            if tokens > budget:
                tokens = budget
            if tokens + reclaimed > kv_free:
                break
            self.waiting.popleft()
            if request.scheduled_at is None:
                request.scheduled_at = now
                request.cached_tokens = hit
                counters = self.recorder.counters
                counters["vllm:prefix_cache_queries_total"] += request.prompt
                counters["vllm:prefix_cache_hits_total"] += hit
            if hit_blocks:
                assert self.cache is not None
                self.kv_used += self.cache.acquire(request.block_hashes, hit_blocks)
                request.held = hit_blocks
                request.prefilled = request.kv = hit
            self.running.append(request)
            chunks.append((request, tokens))
            pairs += prefill_pairs(tokens, hit)
            budget -= tokens
            kv_free -= tokens + reclaimed
        if not chunks and not decodes:
            self.step = None
            self._update_gauges(now)
            if self.phase is Phase.DRAINING and not self.outstanding:
                self.phase = Phase.STOPPED
            return
        # Each decode took one token of the budget, each chunk its tokens.
        prefill_tokens = self.max_num_batched_tokens - budget - len(decodes)
        repeats = 1
        if not chunks:
            # Decode-only: nothing changes until a request finishes or the KV cache fills.
            remaining = min(r.output - r.generated for r in decodes)
            room = (self.profile.kv_capacity_tokens - self.kv_used) // max(1, len(decodes))
            repeats = max(1, min(remaining, room))
            kv_read += len(decodes) * (repeats - 1) // 2
        duration = self.profile.step_ms(prefill_tokens, len(decodes), kv_read, pairs) / 1000.0
        self.step = _Step(now, duration, repeats, chunks, decodes, kv_read)
        self._update_gauges(now)

    def _finish_step(self) -> None:
        step = self.step
        assert step is not None
        self.step = None
        self.last_step = step
        repeats, duration, record, end = step.repeats, step.duration, self.recorder, step.end
        finishing = False
        for request in step.decodes:
            request.generated += repeats
            request.kv += repeats
            request.last_token_at = end
            finishing = finishing or request.generated >= request.output
        self.kv_used += repeats * len(step.decodes)
        if step.decodes:
            # Every decode of the step waited the same step time for its token.
            record.observe(
                "vllm:inter_token_latency_seconds", duration, repeats * len(step.decodes)
            )
        record.counters["vllm:generation_tokens_total"] += repeats * len(step.decodes)
        if step.chunks:  # TGI times each prefill batch once, whatever it holds
            record.observe_extra(PREFILL_BATCH, duration)
        for request, tokens in step.chunks:
            request.prefilled += tokens
            request.kv += tokens
            self.kv_used += tokens
            if request.block_hashes and self.cache is not None:
                self._cache_blocks(request)
            if request.decoding:
                self._emit_token_after_prefill(request, end)
                finishing = finishing or request.generated >= request.output
        # Only a request of this step can have reached its output length (others left at
        # the step that did): the running batch is searched only when one did.
        done = [r for r in self.running if r.generated >= r.output] if finishing else []
        if done:
            self.running = [r for r in self.running if r.generated < r.output]
            for request in done:
                self._complete(request, end)
        if self.cache is not None:
            self.cache.evict_to(self.profile.kv_capacity_tokens - self.kv_used)

    def _cache_blocks(self, request: Request) -> None:
        """Cache the prompt blocks the request has filled and not cached yet (those another
        request cached meanwhile are shared instead)."""
        cache = self.cache
        assert cache is not None
        size = request.hash_block_tokens
        if size != cache.block_tokens:
            return
        full = min(len(request.block_hashes), request.prompt // size, request.prefilled // size)
        if request.held < full:
            request.held, change = cache.extend(request.block_hashes, request.held, full)
            self.kv_used += change

    def _emit_token_after_prefill(self, request: Request, now: float) -> None:
        record = self.recorder
        if request.first_token_at is None:
            assert request.scheduled_at is not None
            request.first_token_at = now
            record.observe(
                "vllm:time_to_first_token_seconds",
                now - request.engine_arrival + self.profile.frontend_ms / 1000.0,
            )
            record.observe(
                "vllm:request_queue_time_seconds", request.scheduled_at - request.engine_arrival
            )
            record.observe("vllm:request_prefill_time_seconds", now - request.scheduled_at)
            record.counters["vllm:prompt_tokens_total"] += request.prompt
            record.counters["vllm:prompt_tokens_cached_total"] += request.cached_tokens
        elif request.last_token_at is not None:
            record.observe("vllm:inter_token_latency_seconds", now - request.last_token_at)
        request.generated += 1
        request.kv += 1
        self.kv_used += 1
        request.last_token_at = now
        record.counters["vllm:generation_tokens_total"] += 1

    def _complete(self, request: Request, now: float) -> None:
        """Account a request that left the running batch (the caller removed it)."""
        self._release(request)
        request.done_at = now
        record = self.recorder
        assert request.first_token_at is not None
        record.observe("vllm:e2e_request_latency_seconds", now - request.engine_arrival)
        record.observe("vllm:request_decode_time_seconds", now - request.first_token_at)
        record.observe("vllm:request_prompt_tokens", float(request.prompt))
        record.observe(
            "vllm:request_prefill_kv_computed_tokens",
            float(request.prompt - request.cached_tokens),
        )
        record.observe("vllm:request_generation_tokens", float(request.output))
        if request.scheduled_at is not None:  # TGI: inference time / generated tokens
            inference = now - request.scheduled_at
            record.observe_extra(MEAN_TIME_PER_TOKEN, inference / max(1, request.output))
        record.counters["vllm:request_success_total"] += 1
        self.finished.append(request)
