"""The log cleaner and transactions (broker/log/cleaner.py, Kafka 3.9's LogCleaner rules): on
a compacted log holding committed and aborted transactions, a cleaning removes the aborted
transactions' batches; a marker stays while its transaction has a batch left, then gets a
delete horizon (now + delete.retention.ms) and goes with the first cleaning after it. A
read_committed reader's view (the latest committed value of each key) never changes, and
offsets are never rewritten."""

from __future__ import annotations

import uuid
from pathlib import Path

from test_txn_log import ABORT, COMMIT, NOW, keyed, read_committed

from broker.log import LogConfig, PartitionLog, cleaner
from quorum.storage.batch_layout import ATTR_CONTROL, ATTR_DELETE_HORIZON
from quorum.storage.record_batch import BatchFrame as ScannedFrame
from quorum.storage.record_batch import scan_frames

DAY = 86_400_000


def open_compacted(path: Path) -> PartitionLog:
    return PartitionLog.open(path / "t-0", LogConfig(cleanup_policy=("compact",), delete_retention_ms=DAY),
                             topic_id=uuid.uuid4())  # fmt: skip


def frames(plog: PartitionLog, end: int) -> list[tuple[ScannedFrame, bytes]]:
    """Every batch below `end` from the log start, with its bytes."""
    out = []
    offset = plog.log_start_offset
    while offset < end:
        data = bytes(plog.read(offset, 1 << 20, max_offset=end, min_one_batch=True))
        found = scan_frames(data).frames
        if not found:
            break
        out += [(f, data[f.position : f.position + f.size]) for f in found]
        offset = found[-1].last_offset + 1
    return out


def batches(plog: PartitionLog) -> list[tuple[int, str]]:
    """(base offset, "data" | "marker" | "marker+horizon") of every batch in the log."""
    out = []
    for f, _ in frames(plog, plog.log_end_offset):
        kind = "data"
        if f.attributes & ATTR_CONTROL:
            kind = "marker+horizon" if f.attributes & ATTR_DELETE_HORIZON else "marker"
        out.append((f.base_offset, kind))
    return out


def committed_view(plog: PartitionLog) -> dict[bytes, tuple[int, bytes]]:
    """The latest (offset, value) of each key a read_committed reader sees."""
    from kafka.record.default_records import DefaultRecordBatch

    end = plog.last_stable_offset(plog.log_end_offset)
    visible = read_committed(plog, end, 1 << 20)
    view: dict[bytes, tuple[int, bytes]] = {}
    for f, data in frames(plog, end):
        for r in DefaultRecordBatch(bytearray(data)):
            if r.offset in visible and not f.attributes & ATTR_CONTROL:
                view[r.key] = (r.offset, r.value)
    return view


def clean(plog: PartitionLog, now: int, horizon: int = -1) -> cleaner.CleanResult:
    """One whole cleaning of everything below the active segment (all of it dirty)."""
    result = cleaner.clean(cleaner.plan(plog, 0, plog.log_end_offset, now, horizon))
    assert result is not None and cleaner.swap(result)
    return result


def test_aborted_data_goes_first_then_the_markers_after_delete_retention(tmp_path: Path) -> None:
    plog = open_compacted(tmp_path)
    writes = [
        lambda: plog.append_as_leader(keyed(-1, -1, b"a", b"a0", transactional=False), 0, NOW),  # 0
        lambda: plog.append_as_leader(keyed(7, 0, b"a", b"a-aborted", transactional=True), 0, NOW),  # 1
        lambda: plog.append_marker(7, 0, ABORT, 0, NOW),  # 2
        lambda: plog.append_as_leader(keyed(8, 0, b"b", b"b-committed", transactional=True), 0, NOW),  # 3
        lambda: plog.append_marker(8, 0, COMMIT, 0, NOW),  # 4
        lambda: plog.append_as_leader(keyed(7, 1, b"c", b"c-aborted", transactional=True), 0, NOW),  # 5: own key
        lambda: plog.append_marker(7, 0, ABORT, 0, NOW),  # 6
        lambda: plog.append_as_leader(keyed(9, 0, b"d", b"d-committed", transactional=True), 0, NOW),  # 7
        lambda: plog.append_marker(9, 0, COMMIT, 0, NOW),  # 8
        lambda: plog.append_as_leader(keyed(-1, -1, b"b", b"b-new", transactional=False), 0, NOW),  # 9
    ]
    for write in writes:
        write()
        plog.roll()
    plog.append_as_leader(keyed(-1, -1, b"z", b"active", transactional=False), 0, NOW)  # 10, active segment
    view = committed_view(plog)
    assert view == {b"a": (0, b"a0"), b"b": (9, b"b-new"), b"d": (7, b"d-committed"), b"z": (10, b"active")}

    # 1st cleaning: the aborted batches go (even the one whose key nothing else holds), and
    # b-committed (shadowed); every marker stays, its transaction's batches were met.
    first = clean(plog, NOW)
    assert batches(plog) == [(0, "data"), (2, "marker"), (4, "marker"), (6, "marker"), (7, "data"), (8, "marker"),
                             (9, "data"), (10, "data")]  # fmt: skip
    assert first.next_delete_horizon_ms == -1
    assert committed_view(plog) == view

    # 2nd: the markers with no batch of theirs left get a delete horizon, and stay until it.
    second = clean(plog, NOW + 1)
    assert batches(plog) == [(0, "data"), (2, "marker+horizon"), (4, "marker+horizon"), (6, "marker+horizon"),
                             (7, "data"), (8, "marker"), (9, "data"), (10, "data")]  # fmt: skip
    assert second.next_delete_horizon_ms == NOW + 1 + DAY
    assert committed_view(plog) == view
    before_horizon = clean(plog, NOW + DAY, horizon=second.next_delete_horizon_ms)
    assert [o for o, _ in batches(plog)] == [0, 2, 4, 6, 7, 8, 9, 10]
    assert before_horizon.next_delete_horizon_ms == NOW + 1 + DAY

    # After delete.retention.ms: they go; d's COMMIT marker stays with its data.
    third = clean(plog, NOW + 2 + DAY, horizon=second.next_delete_horizon_ms)
    assert batches(plog) == [(0, "data"), (7, "data"), (8, "marker"), (9, "data"), (10, "data")]
    assert third.next_delete_horizon_ms == -1
    assert committed_view(plog) == view
    assert plog.log_end_offset == 11 and plog.last_stable_offset(11) == 11

    # Reopened (the producer state and LSO rebuilt from the cleaned log), the same view.
    plog.close()
    again = PartitionLog.open(tmp_path / "t-0", LogConfig(cleanup_policy=("compact",), delete_retention_ms=DAY),
                              topic_id=None)  # fmt: skip
    assert committed_view(again) == view and again.last_stable_offset(11) == 11
