"""The partition log on real files: appends and reads, recovery (torn tail, flipped byte,
deleted index), retention by time and by size, DeleteRecords, truncation and the epoch
cache, and the LogManager's checkpoints and clean shutdown."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from broker.log import LogConfig, LogError, LogManager, PartitionLog
from quorum.kafka_errors import ErrorCode
from quorum.storage.record_batch import scan_frames

NOW = 1_700_000_000_000


def batch(n: int = 5, ts: int = NOW, size: int = 100, key: bytes | None = None) -> bytes:
    b = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, batch_size=1 << 22)
    for i in range(n):
        b.append(i, timestamp=ts + i, key=key, value=b"v" * size, headers=[])
    return bytes(b.build())


def offsets(data: bytes | memoryview) -> list[tuple[int, int]]:
    return [(f.base_offset, f.last_offset) for f in scan_frames(bytes(data)).frames]


def open_log(tmp_path: Path, **cfg: int) -> PartitionLog:
    return PartitionLog.open(tmp_path / "t-0", LogConfig(**cfg), topic_id=uuid.uuid4())


def fill(plog: PartitionLog, batches: int, *, ts: int = NOW, per: int = 5) -> None:
    for i in range(batches):
        plog.append_as_leader(batch(per, ts=ts + i * per), 1, NOW)


def test_append_read_whole_batches_below_max_offset(tmp_path: Path) -> None:
    plog = open_log(tmp_path, segment_bytes=3000, index_interval_bytes=200)
    fill(plog, 40)
    assert plog.log_end_offset == 200 and len(plog.segments) > 3
    # The batch holding offset 12 comes back whole, then whole batches below max_offset, from
    # one segment at a time (as Kafka reads): this segment ends at 19.
    assert offsets(plog.read(12, 2000, max_offset=30, min_one_batch=True)) == [(10, 14), (15, 19)]
    assert offsets(plog.read(20, 2000, max_offset=30, min_one_batch=True)) == [(20, 24), (25, 29)]
    assert plog.read(30, 2000, max_offset=30, min_one_batch=True) == b""
    # At least one batch even above max_bytes; none without min_one_batch.
    assert offsets(plog.read(50, 10, max_offset=200, min_one_batch=True)) == [(50, 54)]
    assert plog.read(50, 10, max_offset=200, min_one_batch=False) == b""
    with pytest.raises(LogError) as err:
        plog.read(201, 100, max_offset=200, min_one_batch=True)
    assert err.value.code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_refused_appends_write_nothing(tmp_path: Path) -> None:
    plog = open_log(tmp_path, max_message_bytes=2000)
    fill(plog, 1)
    bad = bytearray(batch())
    bad[-3] ^= 0x55
    for data, code in (
        (bytes(bad), ErrorCode.CORRUPT_MESSAGE),
        (batch(30, size=100), ErrorCode.MESSAGE_TOO_LARGE),
        (batch()[:-7], ErrorCode.CORRUPT_MESSAGE),
    ):
        with pytest.raises(LogError) as err:
            plog.append_as_leader(data, 1, NOW)
        assert err.value.code == code
    assert plog.log_end_offset == 5 and offsets(plog.read(0, 10_000, max_offset=99, min_one_batch=True)) == [(0, 4)]


def test_compacted_topic_refuses_keyless_records(tmp_path: Path) -> None:
    plog = PartitionLog.open(tmp_path / "c-0", LogConfig(cleanup_policy=("compact",)), topic_id=uuid.uuid4())
    with pytest.raises(LogError) as err:
        plog.append_as_leader(batch(key=None), 1, NOW)
    assert err.value.code == ErrorCode.INVALID_RECORD
    plog.append_as_leader(batch(key=b"k"), 1, NOW)
    assert plog.log_end_offset == 5
    # Compressed batches too (decompressed for the check, as Kafka's LogValidator does).
    for codec in (1, 2, 3, 4):
        b = DefaultRecordBatchBuilder(2, codec, False, -1, -1, -1, batch_size=1 << 22)
        b.append(0, timestamp=NOW, key=b"k", value=b"v" * 1000, headers=[])
        b.append(1, timestamp=NOW, key=None, value=b"v" * 1000, headers=[])
        data = bytes(b.build())
        assert scan_frames(data).frames[0].compression == codec  # compressible: kafka-python compressed it
        with pytest.raises(LogError) as err:
            plog.append_as_leader(data, 1, NOW)
        assert err.value.code == ErrorCode.INVALID_RECORD
        assert err.value.record_errors == ((1, "Compacted topic cannot accept message without key."),)
    assert plog.log_end_offset == 5


def test_a_refused_batch_names_each_keyless_record(tmp_path: Path) -> None:
    """KIP-467, as Kafka's LogValidator answers: the index in the batch of every keyless record
    (librdkafka fails those with INVALID_RECORD and the others with _INVALID_DIFFERENT_RECORD),
    and a message that counts them and shows the first three."""
    plog = PartitionLog.open(tmp_path / "c-0", LogConfig(cleanup_policy=("compact",)), topic_id=uuid.uuid4())
    b = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, batch_size=1 << 22)
    for i in range(20):
        b.append(i, timestamp=NOW, key=None if i % 5 == 0 else b"k%d" % i, value=b"v", headers=[])
    with pytest.raises(LogError) as err:
        plog.append_as_leader(bytes(b.build()), 1, NOW)
    why = "Compacted topic cannot accept message without key."
    assert err.value.record_errors == ((0, why), (5, why), (10, why), (15, why))
    assert err.value.message == (
        "One or more records have been rejected due to 4 record errors in total, and only showing the first "
        f"three errors at most: [RecordError(batchIndex=0, message='{why}'), "
        f"RecordError(batchIndex=5, message='{why}'), RecordError(batchIndex=10, message='{why}')]"
    )
    assert plog.log_end_offset == 0


@pytest.mark.parametrize("damage", ["torn", "flipped"])
def test_recovery_cuts_a_damaged_tail_and_keeps_the_rest(tmp_path: Path, damage: str) -> None:
    plog = open_log(tmp_path)
    fill(plog, 10)
    plog.close()
    seg = tmp_path / "t-0" / "00000000000000000000.log"
    data = bytearray(seg.read_bytes())
    if damage == "torn":
        data = data[:-9]
    else:
        data[-40] ^= 0xFF
    seg.write_bytes(bytes(data))
    again = PartitionLog.open(tmp_path / "t-0", LogConfig(), topic_id=None, recovery_point=0)
    assert again.log_end_offset == 45  # the last batch is gone, the nine before it stay
    assert again.recovery is not None and again.recovery.bytes_cut > 0
    assert offsets(again.read(40, 10_000, max_offset=45, min_one_batch=True)) == [(40, 44)]
    again.append_as_leader(batch(), 1, NOW)  # the log goes on from the cut
    assert again.log_end_offset == 50


def test_recovery_rebuilds_a_deleted_index(tmp_path: Path) -> None:
    plog = open_log(tmp_path, index_interval_bytes=300)
    fill(plog, 30)
    plog.close()
    d = tmp_path / "t-0"
    before = (d / "00000000000000000000.index").read_bytes()
    assert before
    (d / "00000000000000000000.index").unlink()
    (d / "00000000000000000000.timeindex").unlink()
    again = PartitionLog.open(d, LogConfig(index_interval_bytes=300), topic_id=None, recovery_point=150, clean=True)
    assert again.log_end_offset == 150
    assert offsets(again.read(77, 400, max_offset=150, min_one_batch=True))[0] == (75, 79)
    assert again.offset_for_timestamp(NOW + 101) == (101, NOW + 101, 1)
    again.close()
    assert (d / "00000000000000000000.index").read_bytes() == before


def test_retention_by_time_deletes_whole_old_segments_below_the_high_watermark(tmp_path: Path) -> None:
    plog = open_log(tmp_path, segment_bytes=2000, retention_ms=60_000)
    fill(plog, 10, ts=NOW - 3_600_000)  # an hour old
    fill(plog, 10, ts=NOW)
    old = [s for s in plog.segments[:-1] if s.max_timestamp < NOW - 60_000]
    assert old
    # Nothing above the high watermark goes, even when old.
    assert plog.delete_retained_segments(NOW, high_watermark=0) == 0
    deleted = plog.delete_retained_segments(NOW, high_watermark=plog.log_end_offset)
    assert deleted == len(old)
    assert plog.log_start_offset == plog.segments[0].base_offset > 0
    assert all(s.max_timestamp >= NOW - 60_000 for s in plog.segments[:-1])
    with pytest.raises(LogError):
        plog.read(0, 100, max_offset=100, min_one_batch=True)


def test_retention_by_size_keeps_the_newest_bytes(tmp_path: Path) -> None:
    plog = open_log(tmp_path, segment_bytes=2000, retention_bytes=5000)
    fill(plog, 30)
    total = plog.size_bytes()
    assert total > 10_000
    deleted = plog.delete_retained_segments(NOW, high_watermark=plog.log_end_offset)
    assert deleted > 0 and plog.size_bytes() >= 5000 and plog.size_bytes() - plog.segments[0].size < 5000
    assert plog.log_start_offset == plog.segments[0].base_offset
    assert sorted(f for f in os.listdir(tmp_path / "t-0") if f.endswith(".log")) == [
        f"{s.base_offset:020d}.log" for s in plog.segments
    ]


def test_delete_records_moves_the_log_start(tmp_path: Path) -> None:
    plog = open_log(tmp_path, segment_bytes=2000)
    fill(plog, 20)
    assert plog.delete_records_before(42) == 42
    with pytest.raises(LogError):
        plog.read(41, 100, max_offset=100, min_one_batch=True)
    assert offsets(plog.read(42, 100, max_offset=100, min_one_batch=True)) == [(40, 44)]
    assert plog.offset_for_timestamp(-2)[0] == 42  # type: ignore[index]


def test_truncation_and_the_epoch_cache(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    plog.assign_epoch_start_offset(1, 0)
    fill(plog, 4)  # epoch 1: 0..19
    plog.assign_epoch_start_offset(3, 20)
    for _ in range(2):
        plog.append_as_leader(batch(), 3, NOW)  # epoch 3: 20..29
    assert plog.end_offset_for_epoch(1) == (1, 20)
    assert plog.end_offset_for_epoch(2) == (1, 20)
    assert plog.end_offset_for_epoch(3) == (3, 30)
    plog.truncate_to(22)  # the batch 20..24 goes whole
    assert plog.log_end_offset == 20 and plog.latest_epoch() == 1
    plog.close()
    again = PartitionLog.open(tmp_path / "t-0", LogConfig(), topic_id=None, recovery_point=0)
    assert again.epoch_entries() == [(1, 0)] and again.log_end_offset == 20


def test_log_manager_checkpoints_and_clean_shutdown(tmp_path: Path) -> None:
    root = tmp_path / "logs"
    (root / "__cluster_metadata-0").mkdir(parents=True)
    (root / "meta.properties").write_text("version=1\n")
    logs = LogManager([root], {})
    logs.load()
    tid = uuid.uuid4()
    plog = logs.get_or_create("orders", 0, tid, {})
    fill(plog, 3)
    logs.close({("orders", 0): 15})
    text = (root / "replication-offset-checkpoint").read_text().splitlines()
    assert text == ["0", "1", "orders 0 15"]
    assert (root / ".kafka_cleanshutdown").exists()
    again = LogManager([root], {})
    again.load()
    assert not (root / ".kafka_cleanshutdown").exists()
    assert again.high_watermark_checkpoint() == {("orders", 0): 15}
    reopened = again.get("orders", 0)
    assert reopened is not None and reopened.log_end_offset == 15 and reopened.recovery.segments_recovered == 0  # type: ignore[union-attr]
    assert again.get("__cluster_metadata", 0) is None
    again.delete("orders", 0)
    assert not (root / "orders-0").exists()
    assert any(p.name.endswith("-delete") for p in root.iterdir())
    again.purge_deleted(force=True)
    again.drain()  # the removal runs on the log dir's disk queue
    assert not any(p.name.endswith("-delete") for p in root.iterdir())


def test_log_manager_applies_a_topic_config_change_to_that_topics_logs_only(tmp_path: Path) -> None:
    logs = LogManager([tmp_path / "d"], {"log.retention.hours": "2"})
    logs.load()
    orders = [logs.get_or_create("orders", p, uuid.uuid4(), {}) for p in range(3)]
    other = logs.get_or_create("audit", 0, uuid.uuid4(), {"retention.ms": "5000"})
    assert {p.config.retention_ms for p in orders} == {7_200_000}
    logs.update_config("orders", {"retention.ms": "60000", "segment.bytes": "1048576"})
    assert {(p.config.retention_ms, p.config.segment_bytes) for p in orders} == {(60_000, 1_048_576)}
    assert other.config.retention_ms == 5000 and other.config.segment_bytes == 1024**3
    logs.delete("orders", 1)
    logs.update_config("orders", {})  # back to the broker's values, for the two that are left
    assert [p.config.retention_ms for p in (orders[0], orders[2])] == [7_200_000, 7_200_000]
    logs.update_config("missing", {"retention.ms": "1"})  # no partition here: nothing to do
    assert other.config.retention_ms == 5000


def test_truncate_below_the_log_start_restarts_the_log_at_the_target(tmp_path: Path) -> None:
    # After an unclean election the new leader's log may end below a follower's log start: the
    # follower must restart at the leader's end (Kafka's truncateTo), not at its own log start,
    # or every fetch is out of range and every truncation lands where it was.
    plog = open_log(tmp_path, segment_bytes=2000)
    fill(plog, 6)  # 30 records (606-byte batches of 5), several segments
    assert len(plog.segments) == 2  # [0, 15) and [15, 30)
    plog.delete_records_before(20)
    assert plog.segments[0].base_offset > 5 and plog.log_start_offset == 20
    plog.truncate_to(5)
    assert (plog.log_start_offset, plog.log_end_offset) == (5, 5)
    plog.append_as_follower(_at(batch(3), 5))
    assert (plog.log_start_offset, plog.log_end_offset) == (5, 8)


def _at(data: bytes, base_offset: int) -> bytes:
    """A batch as a leader stored it at ``base_offset`` (the base offset is outside the CRC)."""
    return base_offset.to_bytes(8, "big") + data[8:]


def test_a_follower_takes_gaps_but_refuses_overlaps(tmp_path: Path) -> None:
    # A leader's log has gaps after compaction, and keeps them when the topic's policy goes
    # from compact to delete: a follower of either policy appends them (Kafka does); a batch
    # that starts inside what the follower holds, or overlaps the previous one, is corrupt.
    plog = open_log(tmp_path)
    plog.append_as_follower(_at(batch(3), 0) + _at(batch(2), 10))
    assert plog.log_end_offset == 12
    with pytest.raises(LogError):
        plog.append_as_follower(_at(batch(3), 20) + _at(batch(3), 21))
    assert plog.log_end_offset == 12
