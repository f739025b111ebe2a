"""Retention on the partition log, Kafka's rules: retention.ms and retention.bytes only
when cleanup.policy holds "delete" (the log start offset always); the active segment
expires too (the log rolls first and keeps its end offset); a segment is dated by its
largest record timestamp, by its file's mtime only when it has none, before and after a
restart."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from broker.log import LogConfig, PartitionLog

HOUR = 3_600_000
NOW = int(time.time() * 1000)


def batch(n: int = 5, ts: int = NOW, size: int = 100) -> bytes:
    b = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, batch_size=1 << 22)
    for i in range(n):
        b.append(i, timestamp=ts if ts < 0 else ts + i, key=b"k", value=b"v" * size, headers=[])
    return bytes(b.build())


def open_log(tmp_path: Path, **cfg: object) -> PartitionLog:
    return PartitionLog.open(tmp_path / "t-0", LogConfig(**cfg), topic_id=uuid.uuid4())  # type: ignore[arg-type]


def fill(plog: PartitionLog, batches: int, *, ts: int) -> None:
    for _ in range(batches):
        plog.append_as_leader(batch(ts=ts), 1, NOW)


@pytest.mark.parametrize(
    ("policy", "deleted"), [(("compact",), False), (("delete",), True), (("compact", "delete"), True)]
)
def test_time_and_size_retention_apply_only_to_delete_policies(
    tmp_path: Path, policy: tuple[str, ...], deleted: bool
) -> None:
    for name, limits in (("time", {"retention_ms": HOUR}), ("size", {"retention_bytes": 1000})):
        plog = PartitionLog.open(
            tmp_path / f"{name}-0",
            LogConfig(segment_bytes=2000, cleanup_policy=policy, **limits),  # type: ignore[arg-type]
            topic_id=uuid.uuid4(),
        )
        fill(plog, 10, ts=NOW - 2 * HOUR)
        fill(plog, 2, ts=NOW)
        before = len(plog.segments)
        assert before > 3
        count = plog.delete_retained_segments(NOW, plog.log_end_offset)
        assert (count > 0) is deleted, (name, policy)
        assert (plog.log_start_offset > 0) is deleted
        if not deleted:
            assert len(plog.segments) == before and plog.segments[0].base_offset == 0


def test_a_compact_topic_still_drops_segments_below_the_log_start(tmp_path: Path) -> None:
    plog = open_log(tmp_path, segment_bytes=2000, cleanup_policy=("compact",), retention_ms=1)
    fill(plog, 10, ts=NOW - 2 * HOUR)
    plog.log_start_offset = 20  # DeleteRecords moves it; its own call drops segments already
    assert plog.delete_retained_segments(NOW, plog.log_end_offset) > 0
    assert plog.segments[0].base_offset <= 20 < plog.segments[0].next_offset
    assert plog.log_start_offset == 20


def test_an_idle_active_segment_expires_and_the_log_end_survives(tmp_path: Path) -> None:
    plog = open_log(tmp_path, retention_ms=HOUR)
    fill(plog, 4, ts=NOW - 2 * HOUR)  # one segment, the active one, all of it past retention
    assert len(plog.segments) == 1 and plog.log_end_offset == 20
    # Not while any of it is above the high watermark.
    assert plog.delete_retained_segments(NOW, high_watermark=19) == 0
    assert plog.delete_retained_segments(NOW, high_watermark=20) == 1
    assert plog.log_end_offset == plog.log_start_offset == 20
    assert len(plog.segments) == 1 and plog.active.base_offset == 20 and plog.active.size == 0
    assert sorted(p.name for p in (tmp_path / "t-0").glob("*.log")) == [f"{20:020d}.log"]
    # The empty active segment is never deleted (nor rolled again).
    assert plog.delete_retained_segments(NOW + 10 * HOUR, high_watermark=20) == 0
    assert plog.active.base_offset == 20
    plog.append_as_leader(batch(), 1, NOW)
    assert plog.log_end_offset == 25
    assert plog.offset_for_timestamp(NOW) == (20, NOW, 1)


def test_a_recent_active_segment_stays(tmp_path: Path) -> None:
    plog = open_log(tmp_path, segment_bytes=2000, retention_ms=HOUR)
    fill(plog, 10, ts=NOW - 2 * HOUR)
    fill(plog, 1, ts=NOW)
    kept = plog.active
    deleted = plog.delete_retained_segments(NOW, plog.log_end_offset)
    assert deleted > 0 and plog.segments == [kept] and plog.log_start_offset == kept.base_offset


def test_size_retention_can_take_the_active_segment_too(tmp_path: Path) -> None:
    plog = open_log(tmp_path, segment_bytes=2000, retention_bytes=0)
    fill(plog, 10, ts=NOW)
    end = plog.log_end_offset
    assert plog.delete_retained_segments(NOW, end) > 1
    assert plog.log_start_offset == plog.log_end_offset == end and plog.size_bytes() == 0


def test_segments_without_timestamps_are_dated_by_their_file(tmp_path: Path) -> None:
    plog = open_log(tmp_path, segment_bytes=2000, retention_ms=HOUR)
    fill(plog, 10, ts=-1)  # NO_TIMESTAMP records
    fill(plog, 1, ts=NOW)
    assert all(s.max_timestamp == -1 for s in plog.segments[:-1])
    first, second = plog.segments[0], plog.segments[1]
    old = time.time() - 3 * 3600
    os.utime(first.path, (old, old))
    assert plog.delete_retained_segments(NOW, plog.log_end_offset) == 1
    assert plog.segments[0] is second and plog.log_start_offset == second.base_offset


def test_after_a_restart_segments_are_dated_by_their_records_not_their_files(tmp_path: Path) -> None:
    plog = open_log(tmp_path, segment_bytes=2000, retention_ms=HOUR, index_interval_bytes=1 << 20)
    fill(plog, 6, ts=NOW - 2 * HOUR)  # old records ...
    fill(plog, 6, ts=NOW - 60_000)  # ... then recent ones
    fill(plog, 1, ts=NOW)
    sealed = plog.segments[:-1]
    # A rolled segment's time index ends with its largest timestamp (Kafka appends it on roll).
    for seg in sealed:
        last = seg.time_index.last()
        assert last is not None and last[0] == seg.max_timestamp
        assert seg.base_offset + last[1] == seg.offset_of_max_timestamp
    old_bases = [s.base_offset for s in sealed if s.max_timestamp < NOW - HOUR]
    recent_bases = [s.base_offset for s in sealed if s.max_timestamp >= NOW - HOUR]
    assert old_bases and recent_bases
    end = plog.log_end_offset
    plog.flush()
    plog.close()
    # The files' times say the opposite of the records: old files are fresh, fresh ones old.
    ancient, fresh = time.time() - 30 * 24 * 3600, time.time()
    for path in (tmp_path / "t-0").iterdir():
        stamp = fresh if path.name[:20].isdigit() and int(path.name[:20]) in old_bases else ancient
        os.utime(path, (stamp, stamp))
    again = PartitionLog.open(
        tmp_path / "t-0",
        LogConfig(segment_bytes=2000, retention_ms=HOUR),
        topic_id=None,
        clean=True,
        recovery_point=end,
    )
    assert again.delete_retained_segments(NOW, end) == len(old_bases)
    assert again.segments[0].base_offset == recent_bases[0] == again.log_start_offset
