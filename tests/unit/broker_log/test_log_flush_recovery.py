"""Flushes on roll, the recovery point and its checkpoint, recovery past it only, and the
disk work that runs on a log dir's `DiskQueue` (real threads, real files, real fsync)."""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from broker.log import LogConfig, LogManager, PartitionLog
from broker.log.checkpoints import (
    LEADER_EPOCH_FILE,
    RECOVERY_POINT_FILE,
    REPLICATION_OFFSET_FILE,
    read_epochs,
    read_offsets,
)
from broker.log.disk_queue import DiskQueue
from quorum.storage.record_batch import scan_frames

NOW = 1_700_000_000_000
SMALL = {"segment.bytes": "2000"}  # a segment holds three 5-record batches of ~600 bytes


def batch(n: int = 5, ts: int = NOW, size: int = 100) -> bytes:
    b = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, batch_size=1 << 22)
    for i in range(n):
        b.append(i, timestamp=ts + i, key=None, value=b"v" * size, headers=[])
    return bytes(b.build())


def fill(plog: PartitionLog, batches: int) -> None:
    for i in range(batches):
        plog.append_as_leader(batch(ts=NOW + i * 5), 1, NOW)


def read_all(plog: PartitionLog) -> list[int]:
    """Every offset the log returns, reading from its start."""
    out, offset = [], plog.log_start_offset
    while offset < plog.log_end_offset:
        frames = scan_frames(bytes(plog.read(offset, 1 << 20, max_offset=plog.log_end_offset, min_one_batch=True)))
        assert frames.error is None and frames.frames
        for f in frames.frames:
            out.extend(range(f.base_offset, f.last_offset + 1))
        offset = frames.frames[-1].last_offset + 1
    return out


class Gate:
    """Holds a disk queue's thread until `open()`: what was queued behind it has not run."""

    def __init__(self, queue: DiskQueue) -> None:
        self._event = threading.Event()
        queue.submit("gate", lambda: None if self._event.wait(30) else None)

    def open(self) -> None:
        self._event.set()


@pytest.fixture
def queue() -> Iterator[DiskQueue]:
    q = DiskQueue("test")
    yield q
    q.close()


def crash(logs: LogManager) -> None:
    """kill -9, as far as the files go: descriptors closed, nothing flushed or written."""
    for plog in logs.all_logs():
        for seg in plog.segments:
            os.close(seg.fd)


# ---------------------------------------------------------------- flush on roll, recovery point


def test_a_rolled_segment_is_flushed_in_the_background_and_moves_the_recovery_point(
    tmp_path: Path, queue: DiskQueue
) -> None:
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(segment_bytes=2000), topic_id=uuid.uuid4(), disk=queue)
    gate = Gate(queue)
    fill(plog, 10)
    assert len(plog.segments) >= 3
    # The flushes are queued behind the gate: nothing vouched for yet.
    assert plog.recovery_point == 0
    gate.open()
    queue.drain()
    # Every rolled segment is on disk: the recovery point is the active segment's base.
    assert plog.recovery_point == plog.active.base_offset > 0
    assert plog.recovery_point < plog.log_end_offset  # the active segment is not flushed


def test_a_flush_overtaken_by_a_truncation_does_not_move_the_recovery_point(tmp_path: Path, queue: DiskQueue) -> None:
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(segment_bytes=2000), topic_id=uuid.uuid4(), disk=queue)
    gate = Gate(queue)
    fill(plog, 10)
    assert plog.active.base_offset > 10
    plog.truncate_to(5)  # a follower's truncation while the flushes wait
    plog.append_as_leader(batch(), 2, NOW)  # offsets 5..9 written again, not flushed
    gate.open()
    queue.drain()
    # The flushes queued before the truncation covered the old 5..9, not these.
    assert plog.recovery_point == 0
    plog.roll()
    queue.drain()
    assert plog.recovery_point == plog.log_end_offset == 10


def test_recovery_point_checkpoint_names_only_flushed_offsets(tmp_path: Path) -> None:
    root = tmp_path / "d"
    logs = LogManager([root], SMALL)
    logs.load()
    queue = logs.disk(root)
    plog = logs.get_or_create("t", 0, uuid.uuid4(), SMALL)
    gate = Gate(queue)
    fill(plog, 10)
    logs.checkpoint_recovery_points()  # the flushes have not run: it names 0
    gate.open()
    logs.drain()
    assert read_offsets(root / RECOVERY_POINT_FILE) == {("t", 0): 0}
    logs.checkpoint_recovery_points()
    logs.drain()
    assert read_offsets(root / RECOVERY_POINT_FILE) == {("t", 0): plog.active.base_offset}
    logs.close()


def test_after_a_crash_only_the_segments_past_the_recovery_point_are_rescanned(tmp_path: Path) -> None:
    root = tmp_path / "d"
    logs = LogManager([root], SMALL)
    logs.load()
    plog = logs.get_or_create("t", 0, uuid.uuid4(), SMALL)
    plog.assign_epoch_start_offset(1, 0)
    fill(plog, 30)
    logs.drain()
    logs.checkpoint_recovery_points()
    fill(plog, 2)  # past the checkpoint: in the page cache only
    end, segments, rp = plog.log_end_offset, len(plog.segments), plog.recovery_point
    assert segments >= 10 and 0 < rp < end
    logs.drain()
    crash(logs)

    again = LogManager([root], SMALL)
    again.load()
    reopened = again.get("t", 0)
    assert reopened is not None and reopened.recovery is not None
    # The segment holding the checkpointed recovery point and the ones after it: not all.
    past = sum(1 for s in reopened.segments if s.next_offset > rp)
    assert reopened.recovery.segments_recovered == past < segments
    assert reopened.log_end_offset == end
    assert read_all(reopened) == list(range(end))
    assert reopened.epoch_entries() == [(1, 0)]
    again.close()


def test_flush_ms_flushes_in_the_background(tmp_path: Path) -> None:
    root = tmp_path / "d"
    logs = LogManager([root], {"log.flush.interval.ms": "0"})
    logs.load()
    plog = logs.get_or_create("t", 0, uuid.uuid4(), {})
    gate = Gate(logs.disk(root))
    fill(plog, 3)
    logs.flush_pass(int(time.time() * 1000))  # queued behind the gate: the loop does not wait for the fsync
    assert plog.recovery_point == 0
    gate.open()
    logs.drain()
    assert plog.recovery_point == plog.log_end_offset == 15
    logs.close()


# ---------------------------------------------------------------- disk work off the loop


def test_the_leader_epoch_checkpoint_is_written_on_the_disk_queue_in_order(tmp_path: Path, queue: DiskQueue) -> None:
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(), topic_id=uuid.uuid4(), disk=queue)
    path = tmp_path / "t-0" / LEADER_EPOCH_FILE
    gate = Gate(queue)
    plog.assign_epoch_start_offset(1, 0)
    fill(plog, 2)
    plog.assign_epoch_start_offset(2, 10)
    assert plog.epoch_entries() == [(1, 0), (2, 10)]  # in memory at once
    assert not path.exists()  # on disk only when the queue gets there
    gate.open()
    queue.drain()
    assert read_epochs(path) == [(1, 0), (2, 10)]


def test_deleted_segments_are_renamed_at_once_and_unlinked_on_the_disk_queue(tmp_path: Path, queue: DiskQueue) -> None:
    plog = PartitionLog.open(
        tmp_path / "t-0", LogConfig(segment_bytes=2000, retention_bytes=1), topic_id=uuid.uuid4(), disk=queue
    )
    fill(plog, 10)
    queue.drain()
    gate = Gate(queue)
    first = plog.segments[0].path
    assert plog.delete_retained_segments(NOW, high_watermark=plog.log_end_offset) > 0
    assert not first.exists()
    assert first.with_name(first.name + ".deleted").exists()  # the unlink waits for the queue
    gate.open()
    queue.drain()
    assert not list((tmp_path / "t-0").glob("*.deleted"))


# ---------------------------------------------------------------- indexes: O(1) check, lazy, no descriptor


def test_clean_open_maps_no_index_of_a_sealed_segment_until_it_is_read(tmp_path: Path) -> None:
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(segment_bytes=2000, index_interval_bytes=100),
                             topic_id=uuid.uuid4())  # fmt: skip
    fill(plog, 30)
    plog.flush()
    plog.close()
    again = PartitionLog.open(tmp_path / "t-0", LogConfig(segment_bytes=2000, index_interval_bytes=100),
                              topic_id=None, recovery_point=150, clean=True)  # fmt: skip
    assert len(again.segments) >= 10
    assert [s.indexes_open for s in again.segments[:-1]] == [False] * (len(again.segments) - 1)
    assert again.active.indexes_open
    assert read_all(again)[:3] == [0, 1, 2]
    assert again.segments[0].indexes_open
    # Reads, time lookups and retention see the same data as before the restart.
    assert read_all(again) == list(range(150))
    assert again.offset_for_timestamp(NOW + 77) == (77, NOW + 77, 1)
    again.close()


def test_a_log_holds_one_descriptor_per_segment(tmp_path: Path) -> None:
    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    cfg = LogConfig(segment_bytes=2000, index_interval_bytes=100)
    plog = PartitionLog.open(tmp_path / "t-0", cfg, topic_id=uuid.uuid4())
    fill(plog, 60)
    plog.flush()
    plog.close()
    before = fds()
    again = PartitionLog.open(tmp_path / "t-0", cfg, topic_id=None, recovery_point=300, clean=True)
    read_all(again)  # every index mapped
    assert fds() - before == len(again.segments) >= 20
    again.close()
    assert fds() == before


def test_index_sanity_check_is_o1_as_kafkas(tmp_path: Path) -> None:
    from broker.log.index import CorruptIndexError, OffsetIndex

    path = tmp_path / "00000000000000001000.index"
    index = OffsetIndex(path, 1000, 8 * 1000, fresh=True)
    for i in range(1, 1001):
        index.add(1000 + 10 * i, 100 * i)
    index.close()
    raw = bytearray(path.read_bytes())
    # A disorder in the middle is not looked for (Kafka's sanityCheck is O(1) too): the
    # check reads the first and last entries only.
    raw[8 * 500 : 8 * 501] = (0).to_bytes(4, "big") + (0).to_bytes(4, "big")
    path.write_bytes(bytes(raw))
    OffsetIndex(path, 1000, 8 * 1000, fresh=False).release()
    # What it does catch: a size that is not whole entries, a last entry below the base,
    # a preallocated tail of zeros (the last key not above the first).
    for damage in ("size", "below", "zeros"):
        bad = bytearray(raw)
        if damage == "size":
            bad += b"\x00"
        elif damage == "below":
            bad[-8:] = (-1).to_bytes(4, "big", signed=True) + (0).to_bytes(4, "big")
        else:
            bad += bytes(8 * 100)
        path.write_bytes(bytes(bad))
        with pytest.raises(CorruptIndexError):
            OffsetIndex(path, 1000, 8 * 1000, fresh=False)


def test_an_index_found_damaged_on_first_use_is_rebuilt_from_its_segment(tmp_path: Path) -> None:
    cfg = LogConfig(segment_bytes=2000, index_interval_bytes=100)
    plog = PartitionLog.open(tmp_path / "t-0", cfg, topic_id=uuid.uuid4())
    fill(plog, 30)
    plog.flush()
    plog.close()
    first = tmp_path / "t-0" / "00000000000000000000.index"
    good = first.read_bytes()
    assert len(good) >= 16
    first.write_bytes(good[:-8] + (-5).to_bytes(4, "big", signed=True) + good[-4:])  # last entry below the base
    again = PartitionLog.open(tmp_path / "t-0", cfg, topic_id=None, recovery_point=150, clean=True)
    assert read_all(again) == list(range(150))
    again.close()
    assert first.read_bytes() == good


def test_an_active_index_grows_its_mapping_up_to_segment_index_bytes(tmp_path: Path) -> None:
    from broker.log.index import OffsetIndex

    path = tmp_path / "00000000000000000000.index"
    index = OffsetIndex(path, 0, 8 * 20_000, fresh=True)
    assert path.stat().st_size == 64 * 1024  # not the whole segment.index.bytes at once
    for i in range(1, 25_001):
        index.add(10 * i, 100 * i)
    assert index.full and index.entries == 20_000  # segment.index.bytes is the limit
    assert path.stat().st_size == 8 * 20_000
    assert index.lookup(10 * 12_345 + 5) == 100 * 12_345
    index.close()
    again = OffsetIndex(path, 0, 8 * 20_000, fresh=False)
    assert again.entries == 20_000 and again.lookup(10 * 19_999) == 100 * 19_999
    again.grow(8 * 40_000)
    again.add(10 * 20_001, 7)
    assert again.entries == 20_001 and again.lookup(10**9) == 7
    again.close()
    assert path.stat().st_size == 8 * 20_001


def test_a_partition_deleted_with_disk_work_queued_logs_no_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "d"
    logs = LogManager([root], SMALL)
    logs.load()
    gate = Gate(logs.disk(root))
    plog = logs.get_or_create("t", 0, uuid.uuid4(), SMALL)  # partition.metadata queued
    plog.assign_epoch_start_offset(1, 0)  # leader-epoch checkpoint queued
    fill(plog, 10)  # flushes of rolled segments queued
    logs.delete("t", 0)
    again = logs.get_or_create("t", 0, uuid.uuid4(), SMALL)  # the same name, a new topic
    gate.open()
    logs.drain()
    assert not [r for r in caplog.records if r.levelname == "ERROR"], caplog.text
    assert again.topic_id is not None
    from broker.log.checkpoints import read_partition_metadata

    assert read_partition_metadata(root / "t-0") == again.topic_id
    assert not (root / "t-0" / LEADER_EPOCH_FILE).exists()  # the old topic's epochs stayed out
    logs.close()


def test_recovery_takes_the_epochs_of_the_rewalked_tail_from_its_batches(tmp_path: Path) -> None:
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(), topic_id=uuid.uuid4())
    fill(plog, 4)  # 0..19 in epoch 1
    plog.roll()  # flushed (inline here): the recovery point is 20
    assert plog.recovery_point == 20
    for _ in range(2):
        plog.append_as_leader(batch(), 3, NOW)  # 20..29 in epoch 3
    for seg in plog.segments:
        os.close(seg.fd)  # kill -9
    # What a queued write lost at the crash leaves: an epoch 5 at 20 that a truncation had
    # removed before these batches of epoch 3 were written there.
    (tmp_path / "t-0" / LEADER_EPOCH_FILE).write_text("0\n2\n1 0\n5 20\n")
    again = PartitionLog.open(tmp_path / "t-0", LogConfig(), topic_id=None, recovery_point=20)
    assert again.recovery is not None and again.recovery.segments_recovered == 1
    assert again.epoch_entries() == [(1, 0), (3, 20)]
    assert again.end_offset_for_epoch(1) == (1, 20)


def test_a_become_leader_queues_no_disk_work_the_epoch_file_goes_with_the_next_flush_or_tick(tmp_path: Path) -> None:
    root = tmp_path / "d"
    logs = LogManager([root], SMALL)
    logs.load()
    queue = logs.disk(root)
    plog = logs.get_or_create("t", 0, uuid.uuid4(), SMALL)
    queue.drain()
    path = plog.directory / LEADER_EPOCH_FILE
    plog.assign_epoch_start_offset(1, 0)  # what becoming leader does
    queue.drain()
    assert not path.exists()  # deferred to the manager's next pass
    fill(plog, 10)  # rolls: each flush writes the dirty epoch file first, in the same job
    queue.drain()
    assert read_epochs(path) == [(1, 0)] and plog.recovery_point > 0
    plog.assign_epoch_start_offset(3, plog.log_end_offset)
    logs.write_dirty_epochs()  # the data plane's 1 s tick
    queue.drain()
    assert read_epochs(path) == [(1, 0), (3, 50)]
    # A synchronous flush writes the newest snapshot; an older one still queued never
    # overwrites it.
    gate = Gate(queue)
    plog.assign_epoch_start_offset(4, 50)
    logs.write_dirty_epochs()  # queued behind the gate: [(1, 0), (4, 50)]
    plog.assign_epoch_start_offset(5, 50)
    plog.flush()  # in this thread: [(1, 0), (5, 50)]
    gate.open()
    queue.drain()
    assert read_epochs(path) == [(1, 0), (5, 50)]
    logs.close()


def test_an_unchanged_checkpoint_is_not_written_again_and_a_changed_one_is(tmp_path: Path) -> None:
    """An idle broker's periodic checkpoints: the same offsets are not rewritten (each write is
    a new file renamed into place, so its inode changes); any change is written."""
    root = tmp_path / "d"
    logs = LogManager([root], SMALL)
    logs.load()
    plog = logs.get_or_create("t", 0, uuid.uuid4(), SMALL)
    path = root / REPLICATION_OFFSET_FILE

    def checkpoint(hw: int) -> int:
        logs.checkpoint_high_watermarks({("t", 0): hw})
        logs.drain()
        assert read_offsets(path) == {("t", 0): hw}
        return path.stat().st_ino

    first = checkpoint(3)
    assert checkpoint(3) == first  # unchanged: not rewritten
    moved = checkpoint(4)
    assert moved != first
    assert checkpoint(4) == moved
    # Another partition appears in the dir: the file changes though no offset moved.
    logs.get_or_create("t", 1, uuid.uuid4(), SMALL)
    logs.checkpoint_high_watermarks({("t", 0): 4, ("t", 1): 0})
    logs.drain()
    assert read_offsets(path) == {("t", 0): 4, ("t", 1): 0}
    assert path.stat().st_ino != moved
    # The recovery points and log starts follow the same rule.
    logs.checkpoint_recovery_points()
    logs.drain()
    rp = (root / RECOVERY_POINT_FILE).stat().st_ino
    logs.checkpoint_recovery_points()
    logs.drain()
    assert (root / RECOVERY_POINT_FILE).stat().st_ino == rp
    fill(plog, 10)  # rolls segments: their flushes move the recovery point
    logs.drain()
    logs.checkpoint_recovery_points()
    logs.drain()
    assert (root / RECOVERY_POINT_FILE).stat().st_ino != rp
    assert read_offsets(root / RECOVERY_POINT_FILE)[("t", 0)] == plog.recovery_point > 0
    logs.close()
