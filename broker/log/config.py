"""`LogConfig`: the topic configs a partition log obeys, resolved as Kafka resolves them
(the topic's own value, else the broker's synonym, else Kafka's default)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Final

from quorum.controller.topic_configs import ConfigValue, effective_configs
from quorum.frozen_init import fast_constructor

LONG_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = 1024**3  # segment.bytes: roll when the active segment would exceed it
    segment_ms: int = 7 * 24 * 3600 * 1000  # segment.ms: roll a segment this old (ms)
    segment_index_bytes: int = 10 * 1024 * 1024  # segment.index.bytes: roll when an index is full
    index_interval_bytes: int = 4096  # index.interval.bytes: one index entry per this many bytes
    retention_ms: int = 7 * 24 * 3600 * 1000  # retention.ms (-1: no time limit)
    retention_bytes: int = -1  # retention.bytes per partition (-1: no size limit)
    max_message_bytes: int = 1048588  # max.message.bytes: the largest batch accepted
    message_timestamp_type: str = "CreateTime"  # or LogAppendTime
    flush_messages: int = LONG_MAX  # flush.messages: fsync after this many messages
    flush_ms: int = LONG_MAX  # flush.ms: fsync when the last one is this old (ms)
    cleanup_policy: tuple[str, ...] = ("delete",)  # cleanup.policy
    file_delete_delay_ms: int = 60_000  # file.delete.delay.ms
    delete_retention_ms: int = 86_400_000  # delete.retention.ms: how long a cleaned tombstone stays (ms)
    min_cleanable_dirty_ratio: float = 0.5  # min.cleanable.dirty.ratio: dirty bytes / cleanable bytes
    min_compaction_lag_ms: int = 0  # min.compaction.lag.ms: a record younger than this is not cleaned
    max_compaction_lag_ms: int = LONG_MAX  # max.compaction.lag.ms: dirty records this old force a cleaning

    @property
    def compacted(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def deletes(self) -> bool:
        """Whether retention.ms and retention.bytes apply (cleanup.policy holds "delete", as
        "delete" and "compact,delete" do; a compact-only topic keeps its segments)."""
        return "delete" in self.cleanup_policy

    @classmethod
    def from_topic_config(
        cls,
        topic_configs: Mapping[str, str],
        broker_defaults: Mapping[str, str],
        *,
        defaults: Mapping[str, ConfigValue] | None = None,
    ) -> LogConfig:
        """`defaults`: `default_configs(broker_defaults)`, when the caller keeps it."""
        return cls.from_values(effective_configs(topic_configs, broker_defaults, defaults=defaults))

    @classmethod
    def from_values(cls, values: Mapping[str, ConfigValue]) -> LogConfig:
        """The LogConfig of parsed topic config values (every name of `_FIELD_OF` in `values`)."""
        kwargs: dict[str, Any] = {field: _field_value(field, values[name]) for name, field in _FIELD_OF.items()}
        return cls(**kwargs)

    def overridden(self, overrides: Mapping[str, ConfigValue]) -> LogConfig:
        """This config with the fields of the parsed topic configs `overrides` (`topic_overrides`)
        replaced: a topic's LogConfig from its broker's, at the cost of the topic's own configs
        (each field depends on its own config alone). Itself when nothing changes."""
        changes = {
            field: _field_value(field, value) for name, value in overrides.items() if (field := _FIELD_OF.get(name))
        }
        if not changes:
            return self
        made: LogConfig = _make(*[changes[f] if f in changes else getattr(self, f) for f in _FIELDS])
        return made


_FIELDS: Final = tuple(f.name for f in fields(LogConfig))
_make: Final = fast_constructor(LogConfig)  # LogConfig(*every field): no frozen __init__ (a hot path)

# Each field and the topic config it holds.
_FIELD_OF: Final[dict[str, str]] = {
    "segment.bytes": "segment_bytes",
    "segment.ms": "segment_ms",
    "segment.index.bytes": "segment_index_bytes",
    "index.interval.bytes": "index_interval_bytes",
    "retention.ms": "retention_ms",
    "retention.bytes": "retention_bytes",
    "max.message.bytes": "max_message_bytes",
    "message.timestamp.type": "message_timestamp_type",
    "flush.messages": "flush_messages",
    "flush.ms": "flush_ms",
    "cleanup.policy": "cleanup_policy",
    "file.delete.delay.ms": "file_delete_delay_ms",
    "delete.retention.ms": "delete_retention_ms",
    "min.cleanable.dirty.ratio": "min_cleanable_dirty_ratio",
    "min.compaction.lag.ms": "min_compaction_lag_ms",
    "max.compaction.lag.ms": "max_compaction_lag_ms",
}


def _field_value(field: str, value: ConfigValue) -> object:
    """A parsed topic config value as its LogConfig field holds it."""
    if field == "cleanup_policy":
        return tuple(value) if isinstance(value, list | tuple) else (str(value),)
    if field == "message_timestamp_type":
        return str(value)
    if field == "min_cleanable_dirty_ratio":
        return float(value)  # type: ignore[arg-type]
    assert isinstance(value, int)
    return value
