"""SnapshotStore files (create, chunked receive, positioned reads, cleanup) and snapshot contents."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quorum.raft.types import Batch, ControlType, OffsetAndEpoch
from quorum.storage.record_batch import CorruptRecordError, decode_batches, encode_batch
from quorum.storage.snapshots import (
    SnapshotStore,
    decode_snapshot,
    decode_snapshot_with_header,
    encode_snapshot,
    snapshot_file_name,
)
from tests.scale import examples

SID = OffsetAndEpoch(epoch=3, offset=100)


def test_file_name() -> None:
    assert snapshot_file_name(SID) == "00000000000000000100-0000000003.checkpoint"
    with pytest.raises(ValueError):
        snapshot_file_name(OffsetAndEpoch(epoch=-1, offset=0))


def test_create_list_read(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    assert store.list() == [] and store.latest() is None
    data = bytes(range(256)) * 10
    store.create(SID, data)
    older = OffsetAndEpoch(epoch=4, offset=50)  # higher epoch, lower offset: still older by offset
    store.create(older, b"old")
    (tmp_path / "00000000000000000000.log").write_bytes(b"")  # not a snapshot
    assert store.list() == [older, SID]
    assert store.latest() == SID
    assert store.size(SID) == len(data)
    assert store.read_all(SID) == data
    assert store.contains(SID) and not store.contains(OffsetAndEpoch(epoch=3, offset=101))
    assert not any(p.name.endswith(".part") for p in tmp_path.iterdir())


def test_read_positions(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    data = os.urandom(10_000)
    store.create(SID, data)
    for step in (1, 333, 4096, 20_000):
        got = b""
        pos = 0
        while True:
            chunk = store.read(SID, pos, step)
            if not chunk:
                break
            assert chunk == data[pos : pos + step]
            got += chunk
            pos += len(chunk)
        assert got == data
    assert store.read(SID, len(data), 10) == b""
    assert store.read(SID, 5, 0) == b""
    with pytest.raises(ValueError):
        store.read(SID, len(data) + 1, 10)
    with pytest.raises(ValueError):
        store.read(SID, -1, 10)
    with pytest.raises(FileNotFoundError):
        store.read(OffsetAndEpoch(epoch=1, offset=1), 0, 10)
    with pytest.raises(FileNotFoundError):
        store.size(OffsetAndEpoch(epoch=1, offset=1))


def test_chunked_receive(tmp_path: Path) -> None:
    source = SnapshotStore(tmp_path / "leader")
    data = os.urandom(5_000)
    source.create(SID, data)
    dest = SnapshotStore(tmp_path / "follower")
    dest.begin_receive(SID, len(data))
    pos = 0
    while pos < len(data):
        chunk = source.read(SID, pos, 1_024)
        dest.write_chunk(SID, pos, chunk)
        pos += len(chunk)
        if pos < len(data):
            assert dest.list() == []  # invisible until finished
            assert dest.receiving(SID) == pos
    dest.finish_receive(SID)
    assert dest.list() == [SID] and dest.read_all(SID) == data
    assert dest.receiving(SID) is None
    assert sorted(p.name for p in (tmp_path / "follower").iterdir()) == [snapshot_file_name(SID)]


def test_receive_rejects_bad_chunks(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    with pytest.raises(ValueError):
        store.write_chunk(SID, 0, b"x")
    store.begin_receive(SID, 10)
    store.write_chunk(SID, 0, b"abcd")
    with pytest.raises(ValueError):
        store.write_chunk(SID, 0, b"abcd")  # duplicate
    with pytest.raises(ValueError):
        store.write_chunk(SID, 6, b"ab")  # gap
    with pytest.raises(ValueError):
        store.write_chunk(SID, 4, b"x" * 7)  # past size
    with pytest.raises(ValueError):
        store.finish_receive(SID)  # incomplete
    store.write_chunk(SID, 4, b"efghij")
    store.finish_receive(SID)
    assert store.read_all(SID) == b"abcdefghij"
    with pytest.raises(ValueError):
        store.finish_receive(SID)


def test_begin_receive_restarts_and_abort(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    store.begin_receive(SID, 4)
    store.write_chunk(SID, 0, b"ab")
    store.begin_receive(SID, 3)  # e.g. a new leader: start over
    store.write_chunk(SID, 0, b"xyz")
    store.finish_receive(SID)
    assert store.read_all(SID) == b"xyz"
    other = OffsetAndEpoch(epoch=4, offset=200)
    store.begin_receive(other, 5)
    store.write_chunk(other, 0, b"12")
    store.abort_receive(other)
    assert store.list() == [SID]
    assert not any(p.name.endswith(".part") for p in tmp_path.iterdir())


def test_stale_part_files_removed_on_open(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    store.create(SID, b"done")
    store.begin_receive(OffsetAndEpoch(epoch=4, offset=200), 100)
    store.write_chunk(OffsetAndEpoch(epoch=4, offset=200), 0, b"partial")
    (tmp_path / "00000000000000000300-0000000004.checkpoint.part").write_bytes(b"crashed create")
    reopened = SnapshotStore(tmp_path)
    assert reopened.list() == [SID]
    assert sorted(p.name for p in tmp_path.iterdir()) == [snapshot_file_name(SID)]
    store.close()


def test_delete_before(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    ids = [OffsetAndEpoch(epoch=e, offset=o) for e, o in ((1, 10), (2, 20), (2, 30), (3, 40))]
    for sid in ids:
        store.create(sid, b"s")
    assert store.delete_before(ids[2]) == ids[:2]
    assert store.list() == ids[2:]
    assert store.delete_before(ids[2]) == []
    store.delete(ids[3])
    assert store.list() == [ids[2]]


def test_create_replaces_same_id(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    store.create(SID, b"one")
    store.create(SID, b"two")
    assert store.read_all(SID) == b"two"


# --------------------------------------------------------------------------- contents


def test_encode_snapshot_layout() -> None:
    records = [b"r%d" % i for i in range(25)]
    data = encode_snapshot(SID, records, last_contained_timestamp_ms=1_234, batch_records=10)
    batches, consumed = decode_batches(data)
    assert consumed == len(data)
    assert [b.control_type for b in batches] == [
        ControlType.SNAPSHOT_HEADER,
        None,
        None,
        None,
        ControlType.SNAPSHOT_FOOTER,
    ]
    assert [b.base_offset for b in batches] == [0, 1, 11, 21, 26]
    assert [len(b.records) for b in batches] == [1, 10, 10, 5, 1]
    assert {b.epoch for b in batches} == {SID.epoch}
    header, values = decode_snapshot_with_header(data)
    assert header.last_contained_timestamp_ms == 1_234 and values == records


def test_empty_snapshot() -> None:
    data = encode_snapshot(SID, [], last_contained_timestamp_ms=0)
    assert decode_snapshot(data) == []
    assert len(decode_batches(data)[0]) == 2


@settings(max_examples=examples(100))
@given(st.lists(st.binary(max_size=40), max_size=60), st.integers(1, 20), st.integers(0, 2**40))
def test_property_snapshot_round_trip(records: list[bytes], per_batch: int, ts: int) -> None:
    data = encode_snapshot(SID, records, last_contained_timestamp_ms=ts, batch_records=per_batch)
    header, values = decode_snapshot_with_header(data)
    assert values == records and header.last_contained_timestamp_ms == ts


def test_decode_snapshot_rejects_damage() -> None:
    records = [b"a", b"b", b"c"]
    good = encode_snapshot(SID, records, last_contained_timestamp_ms=5, batch_records=2)
    flipped = bytearray(good)
    flipped[len(good) // 2] ^= 0x01
    damaged: list[bytes] = [bytes(flipped), good[:-3], good[:-1]]
    batches = decode_batches(good)[0]
    no_header = b"".join(encode_batch(b) for b in batches[1:])
    no_footer = b"".join(encode_batch(b) for b in batches[:-1])
    gap = b"".join(
        encode_batch(Batch(b.base_offset + (5 if i == 2 else 0), b.epoch, b.records, b.timestamp_ms, b.control_type))
        for i, b in enumerate(batches)
    )
    damaged += [no_header, no_footer, gap, b""]
    for data in damaged:
        with pytest.raises(CorruptRecordError):
            decode_snapshot(data)
