"""The log cleaner on real partition-log files: the latest record per key kept at its own
offset, tombstones kept for delete.retention.ms then removed, the active segment and the
records at or above the high watermark untouched, the dirty-ratio and lag rules,
compressed batches re-batched with their codec, the swap refused when the log changed,
and an interrupted swap finished at open. Batches are built by kafka-python's encoder and
read back by its decoder, the encoder of the cleaner is checked against it too."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from broker.log import LogConfig, LogManager, PartitionLog, cleaner
from broker.log.checkpoints import read_offsets
from broker.log.records import BatchHeader, Record, encode_records
from quorum.storage.batch_layout import ATTR_DELETE_HORIZON
from quorum.storage.record_batch import scan_frames

NOW = 1_700_000_000_000
DAY = 86_400_000

KV = tuple[bytes, bytes | None]


def batch(records: list[KV], *, ts: int = NOW, codec: int = 0) -> bytes:
    b = DefaultRecordBatchBuilder(2, codec, False, -1, -1, -1, batch_size=1 << 22)
    for i, (k, v) in enumerate(records):
        b.append(i, timestamp=ts + i, key=k, value=v, headers=[("h", k)])
    return bytes(b.build())


def open_log(tmp_path: Path, **cfg: object) -> PartitionLog:
    config = LogConfig(cleanup_policy=("compact",), **cfg)  # type: ignore[arg-type]
    return PartitionLog.open(tmp_path / "t-0", config, topic_id=uuid.uuid4())


def read_all(plog: PartitionLog) -> list[tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes]]]]:
    """Every record from the log start, as kafka-python decodes them (CRC checked)."""
    out = []
    offset = plog.log_start_offset
    while offset < plog.log_end_offset:
        data = bytes(plog.read(offset, 1 << 20, max_offset=plog.log_end_offset, min_one_batch=True))
        if not data:
            break
        for f in scan_frames(data).frames:
            b = DefaultRecordBatch(data[f.position : f.position + f.size])
            assert b.validate_crc()
            for r in b:
                if r.offset >= offset:
                    out.append((r.offset, r.timestamp, r.key, r.value, r.headers))
            offset = f.last_offset + 1
    return out


def latest(plog: PartitionLog) -> dict[bytes | None, bytes | None]:
    return {k: v for _o, _t, k, v, _h in read_all(plog)}


def run(plog: PartitionLog, *, now: int = NOW, first_dirty: int = 0, hw: int | None = None,
        horizon: int = -1) -> cleaner.CleanResult | None:  # fmt: skip
    """One whole cleaning, as the broker does it (plan, clean off the loop, swap)."""
    p = cleaner.plan(plog, first_dirty, plog.log_end_offset if hw is None else hw, now, horizon)
    result = cleaner.clean(p)
    if result is not None:
        assert cleaner.swap(result)
    return result


def write(plog: PartitionLog, batches: list[list[KV]], *, codec: int = 0, roll_each: bool = True) -> None:
    for records in batches:
        plog.append_as_leader(batch(records, codec=codec), 3, NOW)
        if roll_each:
            plog.roll()


def test_encoder_matches_kafka_python() -> None:
    for codec in range(5):
        recs = [Record(100, NOW, b"k1", b"v1", ((b"h", b"x"),)), Record(105, NOW + 5, b"k2", None),
                Record(107, NOW - 3, None, b"v3")]  # fmt: skip
        data = encode_records(recs, BatchHeader(7, codec))
        b = DefaultRecordBatch(data)
        assert b.validate_crc() and b.compression_type == codec and b.base_offset == 100
        assert b.leader_epoch == 7 and b.max_timestamp == NOW + 5
        got = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in b]
        assert got == [(100, NOW, b"k1", b"v1", [("h", b"x")]), (105, NOW + 5, b"k2", None, []),
                       (107, NOW - 3, None, b"v3", [])]  # fmt: skip
    # A delete horizon: baseTimestamp carries it, the records keep their own timestamps.
    data = encode_records([Record(9, NOW, b"k", None)], BatchHeader(0, 0, delete_horizon_ms=NOW + DAY))
    b = DefaultRecordBatch(data)
    assert b.first_timestamp == NOW + DAY and [r.timestamp for r in b] == [NOW]
    assert b.attributes & ATTR_DELETE_HORIZON


def test_latest_per_key_kept_offsets_preserved_active_untouched(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    write(plog, [[(b"a", b"a0"), (b"b", b"b0")], [(b"a", b"a1"), (b"c", b"c0")], [(b"b", b"b1")]])
    plog.append_as_leader(batch([(b"a", b"a-active"), (b"a", b"a-active2")]), 3, NOW)  # stays in the active segment
    before = read_all(plog)
    result = run(plog)
    assert result is not None and result.end_of_dirty == 5
    after = read_all(plog)
    assert [(o, k, v) for o, _t, k, v, _h in after] == [
        (2, b"a", b"a1"), (3, b"c", b"c0"), (4, b"b", b"b1"), (5, b"a", b"a-active"), (6, b"a", b"a-active2"),
    ]  # fmt: skip
    # Timestamps and headers of kept records are the original ones.
    assert {o: (t, h) for o, t, _k, _v, h in after} == {o: (t, h) for o, t, _k, _v, h in before if o >= 2}
    assert plog.log_end_offset == 7 and plog.active.size > 0
    # Read from an offset the cleaner removed: the next record.
    data = plog.read(0, 1 << 20, max_offset=7, min_one_batch=True)
    assert scan_frames(bytes(data)).frames[0].base_offset == 2
    # Reopened, the cleaned log is the same.
    plog.close()
    again = open_log(tmp_path)
    assert read_all(again) == after


def test_tombstones_kept_for_delete_retention_then_removed(tmp_path: Path) -> None:
    plog = open_log(tmp_path, delete_retention_ms=DAY)
    write(plog, [[(b"a", b"a0"), (b"b", b"b0")], [(b"a", None)], [(b"c", b"c0")]])
    result = run(plog, now=NOW)
    assert result is not None and result.next_delete_horizon_ms == NOW + DAY
    assert latest(plog) == {b"a": None, b"b": b"b0", b"c": b"c0"}  # the tombstone stays
    # Before the horizon, nothing triggers a cleaning (nothing dirty, horizon not due)...
    assert run(plog, now=NOW + DAY - 1, first_dirty=result.end_of_dirty, horizon=NOW + DAY) is None
    # ...after it, the tombstone goes, the rest stays.
    again = run(plog, now=NOW + DAY + 1, first_dirty=result.end_of_dirty, horizon=NOW + DAY)
    assert again is not None and again.next_delete_horizon_ms == -1
    assert [(o, k, v) for o, _t, k, v, _h in read_all(plog)] == [(1, b"b", b"b0"), (3, b"c", b"c0")]


def test_compressed_batches_recompressed_with_their_codec(tmp_path: Path) -> None:
    for codec in (1, 2, 3, 4):
        plog = open_log(tmp_path / str(codec))
        write(plog, [[(b"a", b"x" * 500), (b"b", b"b0"), (b"a", b"y" * 500)], [(b"b", b"b1")]], codec=codec)
        assert run(plog) is not None
        data = bytes(plog.read(0, 1 << 20, max_offset=plog.log_end_offset, min_one_batch=True))
        first = DefaultRecordBatch(data[: scan_frames(data).frames[0].size])
        assert first.compression_type == codec
        assert [(o, k, v) for o, _t, k, v, _h in read_all(plog)] == [(2, b"a", b"y" * 500), (3, b"b", b"b1")]


def test_dirty_ratio_and_min_lag(tmp_path: Path) -> None:
    plog = open_log(tmp_path, min_cleanable_dirty_ratio=0.9)
    write(plog, [[(b"a", b"a0")], [(b"a", b"a1")]])
    first = run(plog)  # all of it is dirty: ratio 1.0
    assert first is not None
    write(plog, [[(b"a", b"a2")]])
    # One dirty segment against one clean one: 0.5 < 0.9, no cleaning.
    assert run(plog, first_dirty=first.end_of_dirty) is None
    assert len(read_all(plog)) == 2
    # min.compaction.lag.ms: a segment younger than the lag stays dirty.
    young = open_log(tmp_path / "young", min_compaction_lag_ms=60_000)
    write(young, [[(b"a", b"a0")], [(b"a", b"a1")]])
    assert run(young, now=NOW + 1) is None
    assert run(young, now=NOW + 60_002) is not None
    assert [k for _o, _t, k, _v, _h in read_all(young)] == [b"a"]


def test_max_compaction_lag_forces_a_cleaning(tmp_path: Path) -> None:
    plog = open_log(tmp_path, min_cleanable_dirty_ratio=0.99, max_compaction_lag_ms=60_000)
    write(plog, [[(b"a", b"a0"), (b"b", b"b")], [(b"c", b"c")]])
    first = run(plog)
    assert first is not None
    write(plog, [[(b"a", b"a1")]])
    assert run(plog, now=NOW + 1, first_dirty=first.end_of_dirty) is None
    assert run(plog, now=NOW + 60_010, first_dirty=first.end_of_dirty) is not None
    assert latest(plog)[b"a"] == b"a1" and len(read_all(plog)) == 3


def test_high_watermark_bounds_the_cleaning(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    write(plog, [[(b"a", b"a0")], [(b"a", b"a1")], [(b"a", b"a2")]])
    run(plog, hw=2)  # the third segment [2, 3) is above the HW
    assert [o for o, *_ in read_all(plog)] == [1, 2]


def test_swap_refused_when_the_log_changed(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    write(plog, [[(b"a", b"a0")], [(b"a", b"a1")], [(b"a", b"a2")]])
    p = cleaner.plan(plog, 0, plog.log_end_offset, NOW, -1)
    result = cleaner.clean(p)
    assert result is not None
    plog.truncate_to(1)  # e.g. a follower's truncation while the cleaner ran
    assert not cleaner.swap(result)
    assert not list((tmp_path / "t-0").glob("*.swap")) and not list((tmp_path / "t-0").glob("*.cleaned"))
    assert [o for o, *_ in read_all(plog)] == [0]


@pytest.mark.parametrize("stage", ["cleaned", "swap", "half-renamed"])
def test_interrupted_swap_recovered_at_open(tmp_path: Path, stage: str) -> None:
    plog = open_log(tmp_path)
    write(plog, [[(b"a", b"a0"), (b"b", b"b0")], [(b"a", b"a1")], [(b"c", b"c0")]])
    before = read_all(plog)
    p = cleaner.plan(plog, 0, plog.log_end_offset, NOW, -1)
    result = cleaner.clean(p)
    assert result is not None and len(result.groups) == 1
    plog.flush()
    plog.close()  # a crash now: the swap never happened on the loop
    d = tmp_path / "t-0"
    cleaned = sorted(d.glob("*.cleaned"))
    assert len(cleaned) == 3
    if stage in ("swap", "half-renamed"):  # the crash came after the loop renamed them .swap
        for path in cleaned:
            os.rename(path, path.with_name(path.name.replace(".cleaned", ".swap")))
    if stage == "half-renamed":  # ...the old segments went and the index was renamed already
        for base in (0, 2, 3):
            for ext in (".log", ".index", ".timeindex"):
                os.rename(d / f"{base:020d}{ext}", d / f"{base:020d}{ext}.deleted")
        os.rename(d / f"{0:020d}.index.swap", d / f"{0:020d}.index")
    again = open_log(tmp_path)
    assert not list(d.glob("*.swap")) and not list(d.glob("*.cleaned"))
    got = [(o, k, v) for o, _t, k, v, _h in read_all(again)]
    if stage == "cleaned":  # never swapped: the old segments stay
        assert got == [(o, k, v) for o, _t, k, v, _h in before]
    else:
        assert got == [(1, b"b", b"b0"), (2, b"a", b"a1"), (3, b"c", b"c0")]
    assert again.log_end_offset == 4


def test_follower_accepts_a_compacted_leaders_gaps(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "leader")
    write(leader, [[(b"a", b"a0"), (b"b", b"b0")], [(b"a", b"a1")], [(b"a", b"a2")]])
    run(leader)
    follower = open_log(tmp_path / "follower")
    data = bytes(leader.read(0, 1 << 20, max_offset=leader.log_end_offset, min_one_batch=True))
    while data:
        follower.append_as_follower(data)
        if follower.log_end_offset >= leader.log_end_offset:
            break
        data = bytes(leader.read(follower.log_end_offset, 1 << 20, max_offset=leader.log_end_offset,
                                 min_one_batch=True))  # fmt: skip
    assert read_all(follower) == read_all(leader)


def test_manager_cleaning_pass_writes_and_reloads_the_cleaner_checkpoint(tmp_path: Path) -> None:
    root = tmp_path / "logs"
    logs = LogManager([root], {}, background=False)
    logs.load()
    plog = logs.get_or_create("t", 0, uuid.uuid4(), {"cleanup.policy": "compact"})
    write(plog, [[(b"a", b"a0")], [(b"a", b"a1")], [(b"b", b"b0")]])
    hw = plog.log_end_offset
    assert logs.cleaning_pass(lambda t, p: hw) == 1 and logs.cleaner.cleanings == 1
    assert read_offsets(root / cleaner.CLEANER_CHECKPOINT_FILE) == {("t", 0): 3}
    # Nothing dirty since: the next pass plans it, the cleaning finds nothing to do.
    logs.cleaning_pass(lambda t, p: hw)
    assert logs.cleaner.cleanings == 1
    logs.close()
    again = LogManager([root], {}, background=False)
    again.load()
    assert again.cleaner.checkpoints[root] == {("t", 0): 3}
    again.close()


def test_log_append_time_batches_keep_their_time(tmp_path: Path) -> None:
    plog = open_log(tmp_path, message_timestamp_type="LogAppendTime")
    plog.append_as_leader(batch([(b"a", b"a0"), (b"b", b"b0")]), 3, NOW + 777)
    plog.roll()
    write(plog, [[(b"a", b"a1")]])
    assert run(plog) is not None
    got = read_all(plog)
    assert [(o, t, k) for o, t, k, _v, _h in got] == [(1, NOW + 777, b"b"), (2, NOW, b"a")]
