"""Sharding by label: `SLASCALER_SELECTOR` in kubectl's syntax, refused with the reason when
it cannot be read, and turned into Kopf's label filter with Kubernetes' meaning (`!=` and
`notin` match objects without the label); the pool coordinator's shard test means the same."""

from __future__ import annotations

import pytest

from slascaler.settings import Settings, SettingsError, parse_selector, selector_matches
from slascaler.wiring import label_filter

URL = {"SLASCALER_PROMETHEUS_URL": "http://prometheus:9090"}


def admits(selector: str, labels: dict[str, str]) -> bool:
    """Whether Kopf's filter built from `selector` lets an object with `labels` through."""
    for key, check in label_filter(parse_selector(selector)).items():
        if not check(labels.get(key)):
            return False
    return True


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ("shard=a", {"shard": "a"}, True),
        ("shard=a", {"shard": "b"}, False),
        ("shard=a", {}, False),
        ("shard==a", {"shard": "a"}, True),
        ("shard!=a", {}, True),
        ("shard!=a", {"shard": "a"}, False),
        ("tier in (gold, silver)", {"tier": "silver"}, True),
        ("tier in (gold,silver)", {"tier": "bronze"}, False),
        ("tier notin (gold)", {}, True),
        ("slascaler.io/shard", {"slascaler.io/shard": "x"}, True),
        ("!slascaler.io/shard", {"slascaler.io/shard": "x"}, False),
        ("shard=a,tier in (gold,silver),!legacy", {"shard": "a", "tier": "gold"}, True),
        ("shard=a,shard!=b", {"shard": "a"}, True),
        ("", {"anything": "x"}, True),
    ],
)
def test_selectors_mean_what_kubectl_means(
    selector: str, labels: dict[str, str], expected: bool
) -> None:
    assert admits(selector, labels) is expected
    assert selector_matches(parse_selector(selector), labels) is expected, "the pools' shard test"


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        ("shard=a b", "'a b' is not a label value"),
        ("tier in ()", "lists no values"),
        ("-bad=x", "'-bad' is not a label key"),
    ],
)
def test_a_selector_that_cannot_be_read_stops_the_operator_with_the_reason(
    selector: str, message: str
) -> None:
    with pytest.raises(SettingsError, match="SLASCALER_SELECTOR") as error:
        Settings.from_env({**URL, "SLASCALER_SELECTOR": selector})
    assert message in str(error.value) and "shard=a" in str(error.value)


def test_cycle_settings_are_checked_against_the_interval() -> None:
    settings = Settings.from_env({**URL, "SLASCALER_SELECTOR": "shard=a"})
    assert settings.max_concurrent_evaluations == 64 and settings.batch_window_s == 1.0
    assert settings.evaluation_timeout_s == 10.0 and settings.recording_rules
    with pytest.raises(SettingsError, match="SLASCALER_EVALUATION_TIMEOUT: 30s is outside"):
        Settings.from_env({**URL, "SLASCALER_EVALUATION_TIMEOUT": "30s"})
    with pytest.raises(SettingsError, match="SLASCALER_BATCH_WINDOW: 10s is outside"):
        Settings.from_env({**URL, "SLASCALER_BATCH_WINDOW": "10s"})
    off = Settings.from_env({**URL, "SLASCALER_RECORDING_RULES": "false"})
    assert not off.recording_rules
