"""Fetch answers as file ranges (`PartitionLog.read_range`): the exact bytes served for
fetch offsets, byte budgets, high watermarks and partial trailing batches, checked against
a model that walks every batch of the segment files (Kafka's `LocalLog.read` rule); the
high watermark's position kept from appends equals the one found by reading; ranges of
deleted and truncated segments."""

from __future__ import annotations

import gc
import os
import random
import uuid
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from broker.log import LogConfig, PartitionLog
from broker.log.file_range import FileRange, complete_batches_size
from quorum.storage.record_batch import scan_frames

NOW = 1_700_000_000_000


def batch(n: int, size: int) -> bytes:
    b = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, batch_size=1 << 22)
    for i in range(n):
        b.append(i, timestamp=NOW + i, key=None, value=b"v" * size, headers=[])
    return bytes(b.build())


def open_log(path: Path, **cfg: int) -> PartitionLog:
    return PartitionLog.open(path, LogConfig(**cfg), topic_id=uuid.uuid4())


def varied_log(path: Path, batches: int = 60, seed: int = 7, **cfg: int) -> PartitionLog:
    rng = random.Random(seed)
    plog = open_log(path, **cfg)
    for _ in range(batches):
        plog.append_as_leader(batch(rng.randint(1, 6), rng.choice((10, 100, 700))), 1, NOW)
    return plog


def model(plog: PartitionLog, offset: int, max_bytes: int, max_offset: int, min_one: bool) -> bytes:
    """Kafka's rule over the whole files: from the batch holding `offset` (or the first after
    it) in the first segment that has one, up to where the first batch holding an offset >=
    `max_offset` starts (that segment's end if none does), at most `max_bytes` (at least the
    first batch when `min_one`)."""
    if offset >= max_offset or offset == plog.log_end_offset:
        return b""
    for seg in plog.segments:
        data = os.pread(seg.fd, seg.size, 0)
        frames = scan_frames(data).frames
        first = next((f for f in frames if f.last_offset >= offset), None)
        if first is None:
            continue
        bound = next((f.position for f in frames if f.last_offset >= max_offset), len(data))
        budget = max(max_bytes, first.size) if min_one else max_bytes
        length = min(bound - first.position, budget)
        return data[first.position : first.position + length] if length > 0 else b""
    return b""


def served(plog: PartitionLog, offset: int, max_bytes: int, max_offset: int, min_one: bool) -> bytes:
    r = plog.read_range(offset, max_bytes, max_offset=max_offset, min_one_batch=min_one)
    return b"" if r is None else r.pread()


def test_ranges_are_kafkas_bytes_for_every_offset_budget_and_bound(tmp_path: Path) -> None:
    plog = varied_log(tmp_path / "t-0", segment_bytes=6000, index_interval_bytes=500)
    assert len(plog.segments) > 3
    ends = [f.last_offset + 1 for seg in plog.segments for f in scan_frames(os.pread(seg.fd, seg.size, 0)).frames]
    end = plog.log_end_offset
    bounds = [ends[0], ends[len(ends) // 3], ends[len(ends) // 2], ends[-2], end]  # HWs (batch ends) and the LEO
    checked = partial = 0
    for max_offset in bounds:
        for offset in range(0, end + 1):
            for max_bytes in (0, 1, 61, 300, 1000, 4000, 1 << 20):
                for min_one in (True, False):
                    want = model(plog, offset, max_bytes, max_offset, min_one)
                    got = served(plog, offset, max_bytes, max_offset, min_one)
                    assert got == want, (offset, max_bytes, max_offset, min_one)
                    checked += 1
                    partial += complete_batches_size(got) < len(got)
    assert checked > 5000 and partial > 500  # partial trailing batches were served too


def test_the_first_batch_is_whole_with_min_one_batch_and_partial_trailing_batches_are_cut(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0")
    for _ in range(4):
        plog.append_as_leader(batch(5, 100), 1, NOW)
    size = len(batch(5, 100))  # every batch has this size
    r = plog.read_range(7, 10, max_offset=20, min_one_batch=True)
    assert r is not None and (r.position, r.length) == (size, size)  # the batch 5..9, whole, above 10 bytes
    r = plog.read_range(5, size + 30, max_offset=20, min_one_batch=False)
    assert r is not None and r.length == size + 30 and complete_batches_size(r.pread()) == size
    # In-process readers get whole batches only.
    assert len(plog.read(5, size + 30, max_offset=20, min_one_batch=False)) == size
    assert plog.read(5, 30, max_offset=20, min_one_batch=False) == b""
    # Up to the high watermark's position, not beyond, whatever the budget.
    r = plog.read_range(0, 1 << 20, max_offset=10, min_one_batch=True)
    assert r is not None and r.length == 2 * size
    assert plog.read_range(10, 1 << 20, max_offset=10, min_one_batch=True) is None


def test_the_high_watermarks_position_from_appends_is_the_one_found_by_reading(tmp_path: Path) -> None:
    path = tmp_path / "t-0"
    plog = varied_log(path, segment_bytes=5000, index_interval_bytes=300)
    ends = [f.last_offset + 1 for seg in plog.segments for f in scan_frames(os.pread(seg.fd, seg.size, 0)).frames]
    kept = [(e, plog.position_of(e)) for e in ends[-40:]]  # from the appends' positions, rising
    plog.close()
    again = open_log(path, segment_bytes=5000, index_interval_bytes=300)
    assert not again._batch_ends
    bases = [s.base_offset for s in again.segments]

    def point(base: int, position: int, size: int) -> tuple[int, int]:
        """A segment's end is the next segment's start."""
        if position == size and base != bases[-1]:
            return bases[bases.index(base) + 1], 0
        return base, position

    for e, (seg, position) in kept:
        found_seg, found = again.position_of(e)  # found by the index and the batch headers
        want = point(seg.base_offset, position, seg.size)
        assert point(found_seg.base_offset, found, found_seg.size) == want, e


def test_a_range_of_a_deleted_segment_still_reads_its_bytes_and_its_descriptor_closes_after(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0", segment_bytes=2000)
    for _ in range(12):
        plog.append_as_leader(batch(5, 100), 1, NOW)
    first = plog.segments[0]
    r = plog.read_range(0, 1 << 20, max_offset=plog.log_end_offset, min_one_batch=True)
    assert r is not None
    before = r.pread()
    fd = r.fd
    segment_file = os.fstat(fd)
    # Retention-like deletion: the segment is closed, renamed and unlinked (INLINE disk queue).
    plog.delete_records_before(plog.segments[1].base_offset)
    assert plog.segments[0] is not first and not first.path.exists()
    assert not any(p.name.startswith(first.path.name) for p in first.path.parent.iterdir())
    assert r.pread() == before and r.intact
    del r
    gc.collect()
    # The last range gone, the descriptor is closed: fstat fails, or (the number reused at once
    # by a file opened elsewhere in the process) names another file.
    try:
        now = os.fstat(fd)
    except OSError:
        return
    assert (now.st_dev, now.st_ino) != (segment_file.st_dev, segment_file.st_ino)


def test_a_range_made_before_a_truncation_is_not_intact(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0")
    for _ in range(4):
        plog.append_as_leader(batch(5, 100), 1, NOW)
    r = plog.read_range(0, 1 << 20, max_offset=20, min_one_batch=True)
    assert r is not None and r.intact
    plog.truncate_to(10)
    assert not r.intact
    s = plog.read_range(0, 1 << 20, max_offset=10, min_one_batch=True)
    assert s is not None and s.intact and s.length == 2 * len(batch(5, 100))


def test_file_range_refuses_empty_ranges(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0")
    plog.append_as_leader(batch(1, 10), 1, NOW)
    with pytest.raises(ValueError):
        FileRange(plog.active.file, 0, 0)


def test_the_upper_bound_offset_of_a_range_covers_its_records_without_reading_them(tmp_path: Path) -> None:
    """read_committed's aborted-transaction lookup needs an offset above every record of a
    range: from the offset index (Kafka's fetchUpperBoundOffset), at most the bound asked."""
    plog = varied_log(tmp_path / "t-0", segment_bytes=6000, index_interval_bytes=500)
    end = plog.log_end_offset
    checked = 0
    for offset in range(0, end, 2):
        for max_bytes in (1, 300, 2000, 1 << 20):
            for max_offset in (end, end - 7):
                r = plog.read_range(offset, max_bytes, max_offset=max_offset, min_one_batch=False)
                if r is None:
                    continue
                upper = plog.upper_bound_offset(r, max_offset)
                frames = scan_frames(r.pread()).frames  # whole batches of the range
                seg = next(s for s in plog.segments if s.file is r.file)
                after = scan_frames(os.pread(seg.fd, seg.size, 0)).frames
                nxt = next((f.base_offset for f in after if f.position >= r.position + r.length), seg.next_offset)
                # The sparse index may name a later batch: a wider bound, never a narrower one.
                assert min(nxt, max_offset) <= upper <= min(max_offset, seg.next_offset)
                if frames:
                    assert upper > frames[-1].last_offset
                checked += 1
    assert checked > 100


def test_reads_at_recent_batch_ends_match_kafkas_bytes_across_rolls_and_truncations(tmp_path: Path) -> None:
    """A caught-up reader's offset is a recent batch end: its range comes from the appends'
    positions (`_recent_batch_at`), not the index; the bytes are the model's all the same,
    also where a roll put the next batch in a new segment and after a truncation."""
    rng = random.Random(11)
    plog = open_log(tmp_path / "t-0", segment_bytes=3000, index_interval_bytes=400)
    hits = 0
    for step in range(150):
        plog.append_as_leader(batch(rng.randint(1, 4), rng.choice((10, 100, 500))), 1, NOW)
        if step % 37 == 36:
            plog.truncate_to(plog.log_end_offset - rng.randint(1, 5))
        end = plog.log_end_offset
        recent = [e for e, _seg, _pos in list(plog._batch_ends)[-20:]]
        for offset in recent:
            hits += plog._recent_batch_at(offset) is not None
            for max_bytes in (0, 50, 1 << 20):
                for max_offset in (end, max(offset, end - 3)):
                    want = model(plog, offset, max_bytes, max_offset, True)
                    assert served(plog, offset, max_bytes, max_offset, True) == want, (step, offset, max_bytes)
    assert len(plog.segments) > 5 and hits > 150  # (reads below the HW drop the ends under it: fewer hits)
