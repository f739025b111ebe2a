"""FileLog: segments on real files, group-commit flush, truncation, recovery of torn/corrupt tails."""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quorum.raft.control_records import encode_leader_change
from quorum.raft.types import Batch, ControlType
from quorum.storage.file_log import FileLog, segment_file_name
from quorum.storage.record_batch import decode_batches, encode_batch
from tests.scale import examples


def make_batches(start: int, sizes: list[int], epoch: int = 1, payload: int = 20) -> list[Batch]:
    out = []
    offset = start
    for n in sizes:
        out.append(Batch(offset, epoch, tuple(b"%08d" % (offset + i) + b"x" * payload for i in range(n)), offset))
        offset += n
    return out


def seg_files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".log"))


@pytest.fixture
def logdir(tmp_path: Path) -> Path:
    return tmp_path / "__cluster_metadata-0"


@pytest.fixture
def log(logdir: Path) -> Iterator[FileLog]:
    lg = FileLog.open(logdir)
    yield lg
    lg.close()


def test_new_log_is_empty(logdir: Path, log: FileLog) -> None:
    assert (log.start_offset, log.end_offset, log.batches) == (0, 0, [])
    assert seg_files(logdir) == ["00000000000000000000.log"]
    assert log.recovered_truncation is None and log.recovery is None


def test_append_flush_reopen(logdir: Path, log: FileLog) -> None:
    batches = make_batches(0, [1, 3, 2])
    control = Batch(6, 2, (encode_leader_change(1, [1, 2, 3], [1, 2]),), 5, ControlType.LEADER_CHANGE)
    log.append(batches)
    log.append([control])
    log.flush()
    assert log.end_offset == 7
    log.close()
    with FileLog.open(logdir) as again:
        assert again.batches == [*batches, control]
        assert (again.start_offset, again.end_offset) == (0, 7)
        assert again.recovered_truncation is None
        # And the file is exactly the concatenated encodings.
        data = (logdir / segment_file_name(0)).read_bytes()
        assert data == b"".join(encode_batch(b) for b in [*batches, control])


def test_append_is_visible_to_readers_before_flush(logdir: Path, log: FileLog) -> None:
    log.append(make_batches(0, [2]))
    batches, _ = decode_batches((logdir / segment_file_name(0)).read_bytes())
    assert batches == log.batches


def test_non_contiguous_append_rejected(log: FileLog) -> None:
    log.append(make_batches(0, [2]))
    with pytest.raises(ValueError):
        log.append(make_batches(3, [1]))
    with pytest.raises(ValueError):
        log.append(make_batches(1, [1]))
    # A bad batch later in the list rejects the whole call before anything is written.
    with pytest.raises(ValueError):
        log.append([*make_batches(2, [1]), *make_batches(9, [1])])
    assert log.end_offset == 2
    log.append([])
    assert log.end_offset == 2


def test_segment_rolling(logdir: Path) -> None:
    batches = make_batches(0, [1, 2, 3, 1, 1, 4, 2, 1, 1, 1])
    size = len(encode_batch(batches[0]))
    with FileLog.open(logdir, segment_bytes=3 * size) as lg:
        lg.append(batches[:4])
        lg.append(batches[4:])
        lg.flush()
        paths = lg.segment_paths
        assert lg.segment_count > 2
    names = seg_files(logdir)
    assert names == [p.name for p in paths]
    # Each segment starts with the batch whose base offset names it, and none is over the limit
    # unless it holds a single batch.
    for name in names:
        data = (logdir / name).read_bytes()
        got, consumed = decode_batches(data)
        assert consumed == len(data)
        assert got[0].base_offset == int(name[:20])
        assert len(data) <= 3 * size or len(got) == 1
    with FileLog.open(logdir, segment_bytes=3 * size) as again:
        assert again.batches == batches and again.end_offset == batches[-1].end_offset


def test_oversized_batch_gets_its_own_segment(logdir: Path) -> None:
    with FileLog.open(logdir, segment_bytes=100) as lg:
        lg.append(make_batches(0, [10, 10, 10]))
        assert seg_files(logdir) == [segment_file_name(0), segment_file_name(10), segment_file_name(20)]


def test_flush_is_group_commit(logdir: Path, log: FileLog, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = os.fsync

    def counting(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", counting)
    log.flush()
    assert calls == []  # nothing to sync
    for b in make_batches(0, [1, 1, 1]):
        log.append([b])
    log.flush()
    assert len(calls) == 1
    log.flush()
    assert len(calls) == 1


def test_flush_after_roll_syncs_old_segment_new_segment_and_dir(logdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    batches = make_batches(0, [1, 1])
    lg = FileLog.open(logdir, segment_bytes=len(encode_batch(batches[0])))
    calls: list[int] = []
    real = os.fsync

    def counting(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", counting)
    lg.append(batches)
    assert lg.segment_count == 2
    lg.flush()
    assert len(calls) == 3  # rolled segment, active segment, directory
    lg.close()


def test_truncate_within_segment(logdir: Path, log: FileLog) -> None:
    batches = make_batches(0, [2, 3, 1])
    log.append(batches)
    log.truncate_to(5)
    assert log.batches == batches[:2] and log.end_offset == 5
    log.truncate_to(5)  # no-op at the end
    for bad in (1, 3, 4, 6, 7, -1):
        with pytest.raises(ValueError):
            log.truncate_to(bad)
    log.append(make_batches(5, [1], epoch=2))
    log.close()
    with FileLog.open(logdir) as again:
        assert again.batches == [*batches[:2], *make_batches(5, [1], epoch=2)]


def test_truncate_across_segments(logdir: Path) -> None:
    batches = make_batches(0, [1] * 12)
    size = len(encode_batch(batches[0]))
    lg = FileLog.open(logdir, segment_bytes=3 * size)
    lg.append(batches)
    lg.flush()
    assert seg_files(logdir) == [segment_file_name(o) for o in (0, 3, 6, 9)]
    lg.truncate_to(7)  # inside segment 6
    assert seg_files(logdir) == [segment_file_name(o) for o in (0, 3, 6)]
    assert lg.end_offset == 7 and lg.batches == batches[:7]
    lg.truncate_to(3)  # exactly on a segment boundary: segment 3 goes, segment 0 is active
    assert seg_files(logdir) == [segment_file_name(0)]
    assert lg.end_offset == 3 and lg.batches == batches[:3]
    lg.append(batches[3:5])  # segment 0 is full, so this rolls again
    assert seg_files(logdir) == [segment_file_name(0), segment_file_name(3)]
    lg.close()
    with FileLog.open(logdir, segment_bytes=3 * size) as again:
        assert again.batches == batches[:5]


def test_truncate_to_start_empties(logdir: Path, log: FileLog) -> None:
    log.append(make_batches(0, [2, 2]))
    log.truncate_to(0)
    assert (log.start_offset, log.end_offset, log.batches) == (0, 0, [])
    assert (logdir / segment_file_name(0)).stat().st_size == 0


def test_torn_tail_is_truncated(logdir: Path, log: FileLog) -> None:
    batches = make_batches(0, [2, 2, 2])
    log.append(batches)
    log.close()
    path = logdir / segment_file_name(0)
    good = path.stat().st_size
    half = encode_batch(make_batches(6, [3])[0])
    with path.open("ab") as f:
        f.write(half[: len(half) // 2])
    with FileLog.open(logdir) as again:
        assert again.batches == batches and again.end_offset == 6
        assert again.recovered_truncation == 6
        assert again.recovery is not None
        assert again.recovery.position == good and again.recovery.bytes_dropped == len(half) // 2
        assert "incomplete" in again.recovery.reason
        assert path.stat().st_size == good
        again.append(make_batches(6, [1]))
    with FileLog.open(logdir) as third:
        assert third.end_offset == 7 and third.recovered_truncation is None


def test_tiny_torn_tail_shorter_than_a_header(logdir: Path, log: FileLog) -> None:
    log.append(make_batches(0, [1]))
    log.close()
    path = logdir / segment_file_name(0)
    with path.open("ab") as f:
        f.write(b"\x00\x00\x00")
    with FileLog.open(logdir) as again:
        assert again.end_offset == 1 and again.recovered_truncation == 1


def test_corrupt_byte_mid_last_segment(logdir: Path) -> None:
    batches = make_batches(0, [1] * 9)
    size = len(encode_batch(batches[0]))
    with FileLog.open(logdir, segment_bytes=4 * size) as lg:
        lg.append(batches)
    # Segments 0, 4, 8. Corrupt a value byte of the second batch of the 4 segment -> offset 5.
    path = logdir / segment_file_name(4)
    data = bytearray(path.read_bytes())
    data[size + size - 5] ^= 0xFF
    path.write_bytes(bytes(data))
    with FileLog.open(logdir, segment_bytes=4 * size) as again:
        assert again.end_offset == 5 and again.batches == batches[:5]
        assert again.recovery is not None and "CRC" in again.recovery.reason
        assert again.recovery.segment == path and again.recovery.position == size
        assert again.recovery.deleted_segments == (logdir / segment_file_name(8),)
        assert path.stat().st_size == size
        assert seg_files(logdir) == [segment_file_name(0), segment_file_name(4)]
        again.append(make_batches(5, [2], epoch=3))
        again.flush()
    with FileLog.open(logdir, segment_bytes=4 * size) as third:
        assert third.batches == [*batches[:5], *make_batches(5, [2], epoch=3)]


def test_offset_gap_counts_as_corruption(logdir: Path) -> None:
    logdir.mkdir()
    good = make_batches(0, [2, 1])
    gap = make_batches(10, [1])
    (logdir / segment_file_name(0)).write_bytes(b"".join(encode_batch(b) for b in [*good, *gap]))
    with FileLog.open(logdir) as lg:
        assert lg.batches == good and lg.recovered_truncation == 3
        assert lg.recovery is not None and "gap" in lg.recovery.reason


def test_first_batch_must_match_segment_name(logdir: Path) -> None:
    logdir.mkdir()
    (logdir / segment_file_name(5)).write_bytes(encode_batch(make_batches(6, [1])[0]))
    with FileLog.open(logdir) as lg:
        assert (lg.start_offset, lg.end_offset) == (5, 5) and lg.recovered_truncation == 5


def test_segment_not_continuing_the_log_is_deleted(logdir: Path) -> None:
    logdir.mkdir()
    (logdir / segment_file_name(0)).write_bytes(b"".join(encode_batch(b) for b in make_batches(0, [2])))
    (logdir / segment_file_name(7)).write_bytes(b"".join(encode_batch(b) for b in make_batches(7, [1])))
    (logdir / "quorum-state").write_text("{}")  # other files are left alone
    with FileLog.open(logdir) as lg:
        assert lg.end_offset == 2 and lg.recovered_truncation == 2
        assert seg_files(logdir) == [segment_file_name(0)]
    assert (logdir / "quorum-state").exists()


def test_reset(logdir: Path) -> None:
    batches = make_batches(0, [1] * 6)
    with FileLog.open(logdir, segment_bytes=2 * len(encode_batch(batches[0]))) as lg:
        lg.append(batches)
        lg.reset(100)
        assert (lg.start_offset, lg.end_offset, lg.batches) == (100, 100, [])
        assert seg_files(logdir) == [segment_file_name(100)]
        with pytest.raises(ValueError):
            lg.append(make_batches(6, [1]))
    with FileLog.open(logdir) as again:
        assert (again.start_offset, again.end_offset) == (100, 100)
        again.append(make_batches(100, [2], epoch=4))
    with FileLog.open(logdir) as third:
        assert third.batches == make_batches(100, [2], epoch=4)


def test_delete_before(logdir: Path) -> None:
    batches = make_batches(0, [1] * 10)
    size = len(encode_batch(batches[0]))
    with FileLog.open(logdir, segment_bytes=3 * size) as lg:
        lg.append(batches)  # segments 0, 3, 6, 9
        lg.delete_before(2)  # segment 0 still holds 2
        assert lg.start_offset == 0
        lg.delete_before(3)
        assert lg.start_offset == 3 and lg.batches == batches[3:]
        lg.delete_before(8)
        assert lg.start_offset == 6 and lg.batches == batches[6:]
        lg.delete_before(1_000)  # never the active segment
        assert lg.start_offset == 9 and lg.batches == batches[9:]
        assert seg_files(logdir) == [segment_file_name(9)]
        # Truncating below the new start is not a boundary of this log.
        with pytest.raises(ValueError):
            lg.truncate_to(3)
    with FileLog.open(logdir, segment_bytes=3 * size) as again:
        assert again.start_offset == 9 and again.batches == batches[9:]


def test_failed_write_leaves_log_unchanged(logdir: Path, log: FileLog, monkeypatch: pytest.MonkeyPatch) -> None:
    log.append(make_batches(0, [1]))
    path = logdir / segment_file_name(0)
    size = path.stat().st_size

    def full(fd: int, data: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(OSError):
        log.append(make_batches(1, [2]))
    monkeypatch.undo()
    assert log.end_offset == 1 and path.stat().st_size == size
    log.append(make_batches(1, [2]))
    assert log.end_offset == 3


def test_partial_write_is_completed(logdir: Path, log: FileLog, monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.write

    def short(fd: int, data: bytes) -> int:
        return real(fd, bytes(data)[: max(1, len(data) // 3)])

    monkeypatch.setattr(os, "write", short)
    batches = make_batches(0, [5, 5])
    log.append(batches)
    monkeypatch.undo()
    assert decode_batches((logdir / segment_file_name(0)).read_bytes())[0] == batches


def test_closed_log_rejects_use(log: FileLog) -> None:
    log.close()
    log.close()
    with pytest.raises(ValueError):
        log.append(make_batches(0, [1]))
    with pytest.raises(ValueError):
        log.flush()


def test_batch_position(logdir: Path, log: FileLog) -> None:
    batches = make_batches(0, [2, 2])
    log.append(batches)
    assert log.batch_position(0) == (logdir / segment_file_name(0), 0)
    assert log.batch_position(2) == (logdir / segment_file_name(0), len(encode_batch(batches[0])))
    assert log.batch_position(1) is None and log.batch_position(4) is None


# --------------------------------------------------------------------------- model-based property


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.lists(st.integers(1, 4), min_size=1, max_size=4)),
        st.tuples(st.just("truncate"), st.integers(0, 1_000)),
        st.tuples(st.just("flush"), st.just(0)),
        st.tuples(st.just("reopen"), st.just(0)),
        st.tuples(st.just("delete_before"), st.integers(0, 1_000)),
        st.tuples(st.just("reset"), st.integers(0, 50)),
    ),
    max_size=25,
)


@settings(max_examples=examples(60), deadline=None)
@given(OPS, st.integers(150, 600))
def test_property_matches_model(ops: list[tuple[str, object]], segment_bytes: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "__cluster_metadata-0"
        lg = FileLog.open(directory, segment_bytes=segment_bytes)
        model: list[Batch] = []
        start = 0
        epoch = 1
        try:
            for op, arg in ops:
                end = model[-1].end_offset if model else start
                if op == "append":
                    assert isinstance(arg, list)
                    new = make_batches(end, arg, epoch=epoch, payload=10)
                    lg.append(new)
                    model.extend(new)
                elif op == "truncate":
                    assert isinstance(arg, int)
                    bounds = [b.base_offset for b in model] + [end]
                    target = bounds[arg % len(bounds)]
                    lg.truncate_to(target)
                    model = [b for b in model if b.base_offset < target]
                    epoch += 1
                elif op == "flush":
                    lg.flush()
                elif op == "reopen":
                    lg.close()
                    lg = FileLog.open(directory, segment_bytes=segment_bytes)
                    assert lg.recovered_truncation is None
                elif op == "delete_before":
                    assert isinstance(arg, int)
                    lg.delete_before(start + arg % (end - start + 1))
                    start = lg.start_offset
                    model = [b for b in model if b.base_offset >= start]
                elif op == "reset":
                    assert isinstance(arg, int)
                    start = end + arg
                    lg.reset(start)
                    model = []
                assert lg.batches == model
                assert lg.start_offset == start
                assert lg.end_offset == (model[-1].end_offset if model else start)
            lg.close()
            lg = FileLog.open(directory, segment_bytes=segment_bytes)
            assert lg.batches == model and lg.start_offset == start
        finally:
            lg.close()
