"""A topic's LogConfig: `LogManager.config_for` (the broker's LogConfig with the topic's own
values) equals `LogConfig.from_topic_config` (every config resolved) for any overrides."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.log.config import LogConfig
from broker.log.manager import LogManager
from quorum.controller.errors import InvalidConfigError

# Valid and invalid values of the configs a LogConfig holds, and of others it ignores.
_VALUES = {
    "retention.ms": ["-1", "0", "60000", " 3600000 ", "x"],
    "retention.bytes": ["-1", "1048576"],
    "segment.bytes": ["14", "1048576", "-5"],
    "segment.ms": ["1", "3600000"],
    "cleanup.policy": ["delete", "compact", "compact,delete", "bogus"],
    "message.timestamp.type": ["CreateTime", "LogAppendTime"],
    "min.cleanable.dirty.ratio": ["0.1", "0.9"],
    "flush.ms": ["1000"],
    "max.compaction.lag.ms": ["60000"],
    "compression.type": ["gzip", "nope"],
    "min.insync.replicas": ["2"],
    "not.a.topic.config": ["1"],
}
_BROKERS = [{}, {"log.retention.hours": "2", "log.segment.bytes": "1000000", "log.cleanup.policy": "compact"}]


def _resolve(f: object) -> LogConfig | str:
    try:
        return f()  # type: ignore[operator, no-any-return]
    except InvalidConfigError as exc:
        return f"{type(exc).__name__}: {exc}"


@pytest.mark.parametrize("broker", _BROKERS)
@settings(max_examples=150, deadline=None)
@given(
    overrides=st.lists(st.sampled_from(sorted(_VALUES)), unique=True, max_size=5).flatmap(
        lambda names: st.fixed_dictionaries({n: st.sampled_from(_VALUES[n]) for n in names})
    )
)
def test_config_for_equals_the_full_derivation(
    tmp_path_factory: pytest.TempPathFactory, broker: dict[str, str], overrides: dict[str, str]
) -> None:
    logs = _manager(tmp_path_factory.mktemp("d"), broker)
    full = _resolve(lambda: LogConfig.from_topic_config(overrides, logs.broker_defaults))
    assert _resolve(lambda: logs.config_for(overrides)) == full


_MANAGERS: dict[tuple[tuple[str, str], ...], LogManager] = {}


def _manager(root: Path, broker: dict[str, str]) -> LogManager:
    key = tuple(sorted(broker.items()))
    if key not in _MANAGERS:
        _MANAGERS[key] = LogManager([root], broker, background=False)
    return _MANAGERS[key]


def test_no_overrides_is_the_brokers_config_itself(tmp_path: Path) -> None:
    logs = LogManager([tmp_path], {"log.retention.hours": "2"}, background=False)
    assert logs.config_for({}) is logs.config_for({"not.a.topic.config": "1"})
    assert logs.config_for({}).retention_ms == 7_200_000
