"""`LogManager`: every partition log of one broker, over its `log.dirs`.

At start it opens each `<topic>-<partition>` directory found (skipping the metadata log's
`__cluster_metadata-0`, `meta.properties` and other files), recovering from the log dir's
`recovery-point-offset-checkpoint` unless the last stop was clean (`.kafka_cleanshutdown`,
removed at start and written at a clean close, as Kafka does). Directories named
`*-delete` (a deletion interrupted by a crash) are removed.

New partitions go to the online log dir holding the fewest partitions. A storage error in
any log operation or checkpoint of a dir takes that dir offline (`broker.log.dir_failure`):
its logs refuse every operation, and checkpoints, flushes and the clean-shutdown marker
skip it from then on. A deleted partition's
directory is renamed `<topic>-<partition>.<uuid hex>-delete` at once (so a re-created
topic of the same name starts empty) and removed after `file.delete.delay.ms`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from uuid import UUID

from broker.log.checkpoints import (
    CLEAN_SHUTDOWN_FILE,
    LOG_START_OFFSET_FILE,
    RECOVERY_POINT_FILE,
    REPLICATION_OFFSET_FILE,
    read_offsets,
    write_offsets,
)
from broker.log.config import LogConfig
from broker.log.dir_failure import KafkaStorageError, LogDirFailures
from broker.log.partition_log import PartitionLog
from quorum.controller.topic_configs import default_configs
from quorum.storage.durable import atomic_write

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
_DELETE_SUFFIX = "-delete"


class LogManager:
    def __init__(
        self, log_dirs: Sequence[Path], broker_defaults: Mapping[str, str], failures: LogDirFailures | None = None
    ) -> None:
        self.log_dirs = [Path(d) for d in log_dirs]
        self.failures = failures if failures is not None else LogDirFailures()
        self.broker_defaults = dict(broker_defaults)
        # The broker's value of every topic config, parsed once (they come from its static config).
        self.config_defaults = default_configs(self.broker_defaults)
        self.logs: dict[TopicPartition, PartitionLog] = {}
        # Invariant: _by_topic[t] is exactly {p for (t', p) in logs if t' == t}; no empty sets.
        self._by_topic: dict[str, set[int]] = {}
        self._dir_of: dict[TopicPartition, Path] = {}
        self._hw: dict[TopicPartition, int] = {}
        self._pending_deletes: list[tuple[float, Path]] = []

    def config_for(self, topic_config: Mapping[str, str]) -> LogConfig:
        return LogConfig.from_topic_config(topic_config, self.broker_defaults, defaults=self.config_defaults)

    def _add(self, tp: TopicPartition, plog: PartitionLog, root: Path) -> None:
        plog.dir_failures = self.failures
        self.logs[tp] = plog
        self._by_topic.setdefault(tp[0], set()).add(tp[1])
        self._dir_of[tp] = root

    def _remove(self, tp: TopicPartition) -> PartitionLog | None:
        plog = self.logs.pop(tp, None)
        partitions = self._by_topic.get(tp[0])
        if partitions is not None:
            partitions.discard(tp[1])
            if not partitions:
                del self._by_topic[tp[0]]
        self._dir_of.pop(tp, None)
        return plog

    # ------------------------------------------------------------------ start

    def load(self) -> None:
        for root in self.log_dirs:
            root.mkdir(parents=True, exist_ok=True)
            clean_marker = root / CLEAN_SHUTDOWN_FILE
            clean = clean_marker.exists()
            recovery = self._read(root / RECOVERY_POINT_FILE)
            starts = self._read(root / LOG_START_OFFSET_FILE)
            self._hw.update(self._read(root / REPLICATION_OFFSET_FILE))
            for child in sorted(root.iterdir()):
                if not child.is_dir():
                    continue
                if child.name.endswith(_DELETE_SUFFIX):
                    shutil.rmtree(child, ignore_errors=True)
                    continue
                tp = PartitionLog.parse_dir_name(child.name)
                if tp is None or tp[0].startswith("__cluster_metadata"):
                    continue
                config = self.config_for({})
                try:
                    plog = PartitionLog.open(
                        child,
                        config,
                        topic_id=None,
                        recovery_point=recovery.get(tp, 0),
                        log_start_offset=starts.get(tp, 0),
                        clean=clean,
                    )
                except OSError as exc:
                    log.error("cannot open partition log %s: %s", child, exc)
                    continue
                if plog.recovery is not None and plog.recovery.segments_recovered:
                    log.info(
                        "%s: recovered %d segments from offset %d, cut %d bytes%s",
                        child.name, plog.recovery.segments_recovered, recovery.get(tp, 0), plog.recovery.bytes_cut,
                        f" ({plog.recovery.reason})" if plog.recovery.reason else "",
                    )  # fmt: skip
                self._add(tp, plog, root)
            clean_marker.unlink(missing_ok=True)

    @staticmethod
    def _read(path: Path) -> dict[TopicPartition, int]:
        try:
            return read_offsets(path)
        except (ValueError, OSError) as exc:
            log.warning("ignoring unreadable checkpoint %s: %s", path, exc)
            return {}

    # ------------------------------------------------------------------ partitions

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self.logs.get((topic, partition))

    def get_or_create(
        self, topic: str, partition: int, topic_id: UUID, topic_config: Mapping[str, str]
    ) -> PartitionLog:
        tp = (topic, partition)
        config = self.config_for(topic_config)
        existing = self.logs.get(tp)
        if existing is not None:
            existing.update_config(config)
            from broker.log.checkpoints import read_partition_metadata, write_partition_metadata

            stored = None
            with contextlib.suppress(ValueError, OSError):
                stored = read_partition_metadata(existing.directory)
            if stored is None:
                root = self._dir_of[tp]
                refused = self.failures.refuse(root)
                if refused is not None:
                    raise refused
                try:
                    write_partition_metadata(existing.directory, topic_id)
                except OSError as exc:
                    raise self.failures.fail(root, exc, f"writing partition.metadata of {topic}-{partition}") from exc
            elif stored != topic_id:
                # A log of an older topic of the same name: it is not this topic's data.
                log.info("%s-%d: replacing the log of topic id %s", topic, partition, stored)
                self.delete(topic, partition)
                return self.get_or_create(topic, partition, topic_id, topic_config)
            return existing
        online = self.online_dirs()
        if not online:
            raise KafkaStorageError(f"no log dir is online to create {topic}-{partition}")
        root = min(online, key=lambda d: sum(1 for r in self._dir_of.values() if r == d))
        try:
            plog = PartitionLog.open(root / f"{topic}-{partition}", config, topic_id=topic_id)
        except OSError as exc:
            raise self.failures.fail(root, exc, f"creating the log of {topic}-{partition}") from exc
        self._add(tp, plog, root)
        return plog

    def online_dirs(self) -> list[Path]:
        return [d for d in self.log_dirs if not self.failures.is_offline(d)]

    def update_config(self, topic: str, topic_config: Mapping[str, str]) -> None:
        """Apply a topic's changed configs to each of its partition logs here (one parse)."""
        partitions = self._by_topic.get(topic)
        if not partitions:
            return
        config = self.config_for(topic_config)
        for partition in partitions:
            self.logs[(topic, partition)].update_config(config)

    def delete(self, topic: str, partition: int) -> None:
        plog = self._remove((topic, partition))
        self._hw.pop((topic, partition), None)
        if plog is None:
            return
        plog.close()
        target = plog.directory.with_name(f"{plog.directory.name}.{uuid.uuid4().hex}{_DELETE_SUFFIX}")
        try:
            os.rename(plog.directory, target)
        except OSError:
            target = plog.directory
        self._pending_deletes.append((time.monotonic() + plog.config.file_delete_delay_ms / 1000, target))

    def purge_deleted(self, *, now: float | None = None, force: bool = False) -> int:
        now = time.monotonic() if now is None else now
        keep, done = [], 0
        for due, path in self._pending_deletes:
            if force or due <= now:
                shutil.rmtree(path, ignore_errors=True)
                done += 1
            else:
                keep.append((due, path))
        self._pending_deletes = keep
        return done

    def all_logs(self) -> Iterable[PartitionLog]:
        return list(self.logs.values())

    def high_watermark_checkpoint(self) -> dict[TopicPartition, int]:
        return dict(self._hw)

    # ------------------------------------------------------------------ periodic work

    def checkpoint(self, high_watermarks: Mapping[TopicPartition, int]) -> None:
        """Write the three per-log-dir checkpoint files (atomically)."""
        for root in self.online_dirs():
            mine = [tp for tp, r in self._dir_of.items() if r == root]
            try:
                write_offsets(
                    root / REPLICATION_OFFSET_FILE, {tp: high_watermarks[tp] for tp in mine if tp in high_watermarks}
                )
                write_offsets(root / RECOVERY_POINT_FILE, {tp: self.logs[tp].recovery_point for tp in mine})
                write_offsets(root / LOG_START_OFFSET_FILE, {tp: self.logs[tp].log_start_offset for tp in mine})
            except OSError as exc:
                self.failures.fail(root, exc, "writing the offset checkpoints")

    def retention_pass(self, now_ms: int, high_watermark_of: Callable[[str, int], int]) -> int:
        deleted = 0
        for (topic, partition), plog in list(self.logs.items()):
            with contextlib.suppress(KafkaStorageError):  # its dir is offline now (logged once)
                deleted += plog.delete_retained_segments(now_ms, high_watermark_of(topic, partition))
        self.purge_deleted()
        return deleted

    def roll_pass(self, now_ms: int) -> None:
        """segment.ms: roll active segments that are old enough, even without new appends."""
        for plog in self.logs.values():
            with contextlib.suppress(KafkaStorageError):  # its dir is offline now (logged once)
                plog.maybe_roll(now_ms)

    def flush_pass(self, now_ms: int) -> None:
        """flush.ms (log.flush.interval.ms): fsync logs whose oldest unflushed write is that old."""
        for plog in self.logs.values():
            if plog.unflushed_messages and now_ms - plog.last_flush_ms >= plog.config.flush_ms:
                with contextlib.suppress(KafkaStorageError):  # its dir is offline now (logged once)
                    plog.flush()

    def close(self, high_watermarks: Mapping[TopicPartition, int] | None = None) -> None:
        """A clean close: flush every log, write the checkpoints and the clean-shutdown marker.
        An offline dir gets none of them (its logs are only closed): the next start recovers it."""
        for plog in self.logs.values():
            with contextlib.suppress(KafkaStorageError):
                plog.flush()
        self.checkpoint(high_watermarks if high_watermarks is not None else self._hw)
        for tp, plog in self.logs.items():
            if self.failures.is_offline(self._dir_of[tp]):
                with contextlib.suppress(OSError):
                    plog.close()
            else:
                plog.close()
        self.purge_deleted(force=True)
        for root in self.online_dirs():
            try:
                atomic_write(root / CLEAN_SHUTDOWN_FILE, b"")
            except OSError as exc:
                self.failures.fail(root, exc, "writing the clean-shutdown marker")
        self.logs.clear()
