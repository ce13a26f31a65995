"""Long prompts sharing a replica's steps: the window's exposure and the replicas it needs."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import long_prompt_minute
from slascaler.engines import vllm_token_buckets
from slascaler.model.collisions import (
    PromptCollisions,
    _poisson_tail,
    _share_longer,
    fewest_replicas,
    prompt_collisions,
)
from slascaler.model.histogram import Histogram
from slascaler.model.observation import Observation

CHUNK = 8192
OBJECTIVE_MS = 250.0


def long_prompt_window(
    requests: int = 18, prompt_low: float = 6000.0, prompt_high: float = 7000.0
) -> Observation:
    """A minute of the prefill-bound scenario on one replica, no collision."""
    step = (prompt_high - prompt_low) / max(1, requests - 1)
    return long_prompt_minute([prompt_low + step * i for i in range(requests)])


def collisions(observation: Observation, objective_ms: float = OBJECTIVE_MS) -> PromptCollisions:
    assert observation.prefill is not None
    found = prompt_collisions(
        observation, observation.prefill.mean, 5.0, CHUNK, objective_ms, 0.95, 0.05, 16
    )
    assert found is not None
    return found


def test_poisson_tail_is_the_complement_of_the_cumulative_sum() -> None:
    assert _poisson_tail(0.0, 0) == 0.0
    assert _poisson_tail(0.7, 0) == pytest.approx(1 - math.exp(-0.7))
    below = sum(math.exp(-1.5) * 1.5**k / math.factorial(k) for k in range(3))
    assert _poisson_tail(1.5, 2) == pytest.approx(1 - below)


def test_prompts_beyond_the_top_bucket_spread_from_it_with_their_mean() -> None:
    # An 8k model's prompt buckets stop at 5000: prompts of 6000–8000 tokens all land in
    # +Inf. With their mean of 7000 they are taken as spread over 5000–9000.
    finite = [b for b in vllm_token_buckets(8192) if b < 8192]
    assert max(finite) == 5000
    prompts = Histogram.from_values([6000.0, 7000.0, 8000.0], finite)
    assert _share_longer(prompts, 5000.0) == pytest.approx(1.0)
    assert _share_longer(prompts, 8000.0) == pytest.approx(0.25)
    assert _share_longer(prompts, 9000.0) == 0.0
    # Inside the finite buckets the histogram's own interpolation stands.
    short = Histogram.from_values([100.0, 300.0, 3000.0, 4000.0], finite)
    assert _share_longer(short, 1000.0) == pytest.approx(0.5)


def test_one_replica_of_long_prompts_needs_a_second_to_keep_them_apart() -> None:
    found = collisions(long_prompt_window())
    assert found.intrinsic == 0.0, "each prompt's prefill alone meets 250 ms"
    assert found.exposed == pytest.approx(1.0), "each takes over 125 ms alone"
    assert found.tolerated == 0, "the p95 of 18 requests is the slowest one"
    assert found.window_risk(1) > 0.05 >= found.window_risk(2)
    assert found.replicas == 2


def test_short_prompts_need_no_replica_for_collisions() -> None:
    found = collisions(long_prompt_window(prompt_low=200.0, prompt_high=1500.0))
    assert found.exposed == 0.0 and found.intrinsic == 0.0
    assert found.replicas == 1


def test_prompts_too_long_alone_are_for_the_chunk_size_not_replicas() -> None:
    # At a 150 ms objective each prompt's prefill alone (~180 ms) misses it: replicas
    # cannot help, whatever the collisions.
    # (The histogram spreads the 6000–7000-token prompts over 5000–8000 with their mean, so
    # 90% of them read as longer than the ~5300 tokens that take 145 ms alone.)
    found = collisions(long_prompt_window(), objective_ms=150.0)
    assert found.intrinsic > 0.85
    assert found.replicas is None


def test_a_window_without_what_it_takes_gives_nothing() -> None:
    window = long_prompt_window()
    for missing in (
        replace(window, prompt_tokens=None),
        replace(window, itl=None),
        replace(window, request_rate=0.0),
        replace(window, prompt_token_rate=math.nan),
    ):
        assert prompt_collisions(missing, 180.0, 5.0, CHUNK, 250.0, 0.95, 0.05, 16) is None


@settings(max_examples=300, deadline=None)
@given(
    requests=st.floats(1, 5000),
    tolerated=st.integers(0, 50),
    intrinsic=st.floats(0, 0.2),
    exposed=st.floats(0, 1),
    prefill_load=st.floats(0, 40),
    risk=st.floats(0.001, 0.5),
)
def test_more_replicas_never_raise_the_risk_and_the_count_is_the_fewest_within_it(
    requests: float,
    tolerated: int,
    intrinsic: float,
    exposed: float,
    prefill_load: float,
    risk: float,
) -> None:
    found = PromptCollisions(requests, tolerated, intrinsic, exposed, prefill_load, None)
    risks = [found.window_risk(c) for c in range(1, 41)]
    assert all(later <= earlier + 1e-12 for earlier, later in itertools.pairwise(risks))
    count = fewest_replicas(found, risk, 40)
    if count is None:
        own = _poisson_tail(requests * intrinsic, tolerated)
        assert own > risk or risks[-1] > risk
    else:
        assert risks[count - 1] <= risk
        assert count == 1 or risks[count - 2] > risk
