"""`LogConfig`: the topic configs a partition log obeys, resolved as Kafka resolves them
(the topic's own value, else the broker's synonym, else Kafka's default)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from quorum.controller.topic_configs import ConfigValue, effective_configs

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
        v = effective_configs(topic_configs, broker_defaults, defaults=defaults)

        def i(name: str) -> int:
            value = v[name]
            assert isinstance(value, int)
            return value

        policy = v["cleanup.policy"]
        return cls(
            segment_bytes=i("segment.bytes"),
            segment_ms=i("segment.ms"),
            segment_index_bytes=i("segment.index.bytes"),
            index_interval_bytes=i("index.interval.bytes"),
            retention_ms=i("retention.ms"),
            retention_bytes=i("retention.bytes"),
            max_message_bytes=i("max.message.bytes"),
            message_timestamp_type=str(v["message.timestamp.type"]),
            flush_messages=i("flush.messages"),
            flush_ms=i("flush.ms"),
            cleanup_policy=tuple(policy) if isinstance(policy, list | tuple) else (str(policy),),
            file_delete_delay_ms=i("file.delete.delay.ms"),
            delete_retention_ms=i("delete.retention.ms"),
            min_cleanable_dirty_ratio=float(v["min.cleanable.dirty.ratio"]),  # type: ignore[arg-type]
            min_compaction_lag_ms=i("min.compaction.lag.ms"),
            max_compaction_lag_ms=i("max.compaction.lag.ms"),
        )
