"""Transactions in the partition logs (broker/log: producer_state, control_records, txn_index,
partition_log): Kafka 3.9's rules for transactional batches and end-transaction markers, the
last stable offset, the `.txnindex` files (golden bytes, truncation, retention, recovery),
through real `PartitionLog`s on disk; and a property test over random interleavings checking
what a read_committed reader below the LSO sees."""

from __future__ import annotations

import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from broker.log import LogConfig, LogError, PartitionLog
from broker.log.control_records import MARKER_ATTRIBUTES, EndTxnMarker, decode_marker_batch, encode_marker_batch
from broker.log.producer_state import (
    BatchProducerFields,
    ProducerEntry,
    decode_snapshot,
    encode_snapshot,
    read_producer_fields,
)
from broker.log.txn_index import AbortedTxn
from quorum.kafka_errors import ErrorCode
from quorum.storage.record_batch import scan_frames
from tests.scale import examples

NOW = int(time.time() * 1000)
COMMIT = EndTxnMarker(True, 0)
ABORT = EndTxnMarker(False, 0)


def tbatch(pid: int, epoch: int, seq: int, n: int = 1, *, transactional: bool = True) -> bytes:
    """A producer's batch of `n` records (transactional by default), as a client sends it."""
    b = DefaultRecordBatchBuilder(2, 0, transactional, pid, epoch, seq, batch_size=1 << 20)
    for i in range(n):
        b.append(i, timestamp=NOW, key=None, value=f"{pid}-{epoch}-{seq + i}".encode(), headers=[])
    return bytes(b.build())


def plain(n: int = 1) -> bytes:
    b = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, batch_size=1 << 20)
    for i in range(n):
        b.append(i, timestamp=NOW, key=None, value=b"plain", headers=[])
    return bytes(b.build())


def open_log(path: Path, name: str = "t-0", **cfg: int) -> PartitionLog:
    return PartitionLog.open(path / name, LogConfig(**cfg), topic_id=uuid.uuid4())


def refused(call: object) -> ErrorCode:
    with pytest.raises(LogError) as err:
        call()  # type: ignore[operator]
    return err.value.code


def all_aborted(plog: PartitionLog) -> list[AbortedTxn]:
    return [e for seg in plog.segments for e in seg.txn_index.entries]


def txnindex_bytes(plog: PartitionLog) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(plog.directory.glob("*.txnindex"))}


# ---------------------------------------------------------------------------- golden bytes


def test_marker_batch_golden_bytes_and_kafka_python_reads_it() -> None:
    data = encode_marker_batch(7, 3, EndTxnMarker(True, 5), 1_700_000_000_000)
    frames = scan_frames(data).frames
    assert len(frames) == 1 and frames[0].attributes == 0x30 and frames[0].record_count == 1
    # The record: length 16, attributes 0, timestamp delta 0, offset delta 0, key (4 bytes:
    # version 0, type 1 = COMMIT), value (6 bytes: version 0, coordinator epoch 5), 0 headers.
    assert data[61:] == bytes.fromhex("20" "00" "00" "00" "08" "00000001" "0c" "0000" "00000005" "00")  # fmt: skip
    batch = DefaultRecordBatch(bytearray(data))
    assert batch.is_control_batch and batch.is_transactional
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (7, 3, -1)
    (record,) = list(batch)
    assert record.commit and record.version == 0
    assert decode_marker_batch(data) == (EndTxnMarker(True, 5), 1_700_000_000_000)
    abort = encode_marker_batch(7, 3, EndTxnMarker(False, 9), 0)
    assert abort[61 + 5 : 61 + 9] == bytes.fromhex("00000000")  # key: version 0, type 0 = ABORT
    assert next(iter(DefaultRecordBatch(bytearray(abort)))).abort


@given(
    st.booleans(),
    st.integers(-(2**31), 2**31 - 1),
    st.integers(0, 2**63 - 1),
    st.integers(-(2**15), 2**15 - 1),
    st.integers(-(2**63), 2**63 - 1),
)
@settings(max_examples=examples(300), deadline=None)
def test_marker_batch_at_fixed_positions_is_the_record_encoders_batch(
    committed: bool, epoch: int, producer_id: int, producer_epoch: int, timestamp: int
) -> None:
    """`encode_marker_batch` writes the canonical layout at fixed positions: byte for byte
    the general encoder's batch (`encode_keyed_records` of the marker's key and value)."""
    from broker.log.control_records import MARKER_ATTRIBUTES, encode_marker_record
    from broker.log.records import BatchHeader, encode_keyed_records

    marker = EndTxnMarker(committed, epoch)
    header = BatchHeader(-1, MARKER_ATTRIBUTES, producer_id, producer_epoch, -1)
    general = encode_keyed_records([encode_marker_record(marker)], timestamp, header)
    assert bytes(encode_marker_batch(producer_id, producer_epoch, marker, timestamp)) == general


def test_marker_batch_is_a_new_buffer_each_call_and_follows_every_argument() -> None:
    """`encode_marker_batch` copies the last batch it built for the same arguments (a round of
    markers writes one per partition): each call gets its own buffer, which the leader's
    append rewrites in place, and any other argument builds anew."""
    first = encode_marker_batch(11, 2, EndTxnMarker(True, 4), 1_700_000_000_000)
    again = encode_marker_batch(11, 2, EndTxnMarker(True, 4), 1_700_000_000_000)
    assert again == first and again is not first
    first[0:8] = b"\xff" * 8  # the leader assigns the base offset in place
    assert encode_marker_batch(11, 2, EndTxnMarker(True, 4), 1_700_000_000_000) == again
    for args in (
        (12, 2, EndTxnMarker(True, 4), 1_700_000_000_000),
        (11, 3, EndTxnMarker(True, 4), 1_700_000_000_000),
        (11, 2, EndTxnMarker(False, 4), 1_700_000_000_000),
        (11, 2, EndTxnMarker(True, 5), 1_700_000_000_000),
        (11, 2, EndTxnMarker(True, 4), 1_700_000_000_001),
    ):
        producer_id, producer_epoch, marker, timestamp = args
        built = encode_marker_batch(producer_id, producer_epoch, marker, timestamp)
        assert decode_marker_batch(built) == (marker, timestamp)
        assert read_producer_fields(built) == BatchProducerFields(MARKER_ATTRIBUTES, producer_id, producer_epoch, -1)


def test_aborted_txn_entry_golden_bytes() -> None:
    entry = AbortedTxn(producer_id=0x0102030405060708, first_offset=10, last_offset=20, last_stable_offset=21)
    assert entry.encode() == bytes.fromhex(
        "0000" "0102030405060708" "000000000000000a" "0000000000000014" "0000000000000015"
    )  # fmt: skip
    assert len(entry.encode()) == 34 and AbortedTxn.decode(entry.encode()) == entry


def test_snapshot_keeps_open_transactions_and_a_producer_whose_last_write_was_a_marker() -> None:
    entries = [
        ProducerEntry(1, 0, (), NOW, coordinator_epoch=4),  # a marker of a new epoch: no batch
        ProducerEntry(2, 0, (), NOW, current_txn_first_offset=12),
    ]
    back = decode_snapshot(encode_snapshot(entries))
    assert [(e.producer_id, e.batches, e.coordinator_epoch, e.current_txn_first_offset) for e in back] == [
        (1, (), 4, -1), (2, (), -1, 12),
    ]  # fmt: skip


# ---------------------------------------------------------------------------- one rule each


def test_an_open_transaction_holds_the_lso_until_its_marker_is_below_the_hw(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    plog.append_as_leader(plain(2), 0, NOW)  # 0-1
    plog.append_as_leader(tbatch(7, 0, 0, 3), 0, NOW)  # 2-4
    plog.append_as_leader(plain(), 0, NOW)  # 5
    assert plog.last_stable_offset(6) == 2
    assert plog.producers.last_entry(7).current_txn_first_offset == 2  # type: ignore[union-attr]
    marker = plog.append_marker(7, 0, COMMIT, 0, NOW)  # 6
    assert marker.first_offset == 6
    assert plog.last_stable_offset(6) == 2  # the marker is not below the HW yet
    assert plog.last_stable_offset(7) == 7
    assert all_aborted(plog) == []  # a commit writes no index entry


def test_an_abort_writes_the_kafka_entry_with_the_lso_after_it(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    plog.append_as_leader(tbatch(7, 0, 0, 2), 0, NOW)  # 0-1 (7 opens at 0)
    plog.append_as_leader(tbatch(8, 0, 0, 2), 0, NOW)  # 2-3 (8 opens at 2)
    plog.append_as_leader(tbatch(7, 0, 2), 0, NOW)  # 4
    plog.append_marker(7, 0, ABORT, 0, NOW)  # 5: 8 is still open, the LSO after it is 2
    plog.append_marker(8, 0, ABORT, 0, NOW)  # 6: nothing open: 7
    assert all_aborted(plog) == [AbortedTxn(7, 0, 5, 2), AbortedTxn(8, 2, 6, 7)]
    assert txnindex_bytes(plog) == {
        "00000000000000000000.txnindex": AbortedTxn(7, 0, 5, 2).encode() + AbortedTxn(8, 2, 6, 7).encode()
    }
    # Kafka's collectAbortedTxns: overlapping [fetch, upper).
    assert plog.aborted_transactions(0, 2) == [AbortedTxn(7, 0, 5, 2)]
    assert plog.aborted_transactions(6, 7) == [AbortedTxn(8, 2, 6, 7)]
    assert plog.aborted_transactions(0, 7) == all_aborted(plog)


def test_a_marker_of_an_empty_transaction_closes_nothing(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    plog.append_marker(7, 0, ABORT, 0, NOW)
    assert all_aborted(plog) == [] and plog.last_stable_offset(1) == 1
    assert plog.producers.last_entry(7).coordinator_epoch == 0  # type: ignore[union-attr]


def test_marker_epochs_are_checked_as_kafka_does(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    plog.append_as_leader(tbatch(7, 2, 0), 0, NOW)
    assert refused(lambda: plog.append_marker(7, 1, COMMIT, 0, NOW)) == ErrorCode.INVALID_PRODUCER_EPOCH
    plog.append_marker(7, 2, EndTxnMarker(True, 5), 0, NOW)
    plog.append_as_leader(tbatch(7, 2, 1), 0, NOW)
    assert refused(lambda: plog.append_marker(7, 2, EndTxnMarker(False, 4), 0, NOW)) == (
        ErrorCode.TRANSACTION_COORDINATOR_FENCED
    )
    end = plog.log_end_offset
    assert end == 3  # nothing refused was written
    # A marker with a newer producer epoch (the coordinator's abort after a timeout) is taken:
    # the producer's next epoch starts at sequence 0.
    plog.append_marker(7, 3, EndTxnMarker(False, 5), 0, NOW)
    assert plog.producers.last_entry(7).producer_epoch == 3  # type: ignore[union-attr]
    assert all_aborted(plog) == [AbortedTxn(7, 2, 3, 4)]
    assert refused(lambda: plog.append_as_leader(tbatch(7, 3, 1), 0, NOW)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    plog.append_as_leader(tbatch(7, 3, 0), 0, NOW)


def test_a_plain_write_while_the_producers_transaction_is_open_is_invalid_txn_state(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    plog.append_as_leader(tbatch(7, 0, 0), 0, NOW)
    assert refused(lambda: plog.append_as_leader(tbatch(7, 0, 1, transactional=False), 0, NOW)) == (
        ErrorCode.INVALID_TXN_STATE
    )
    plog.append_marker(7, 0, COMMIT, 0, NOW)
    plog.append_as_leader(tbatch(7, 0, 1, transactional=False), 0, NOW)  # closed: fine again


def test_a_clients_control_batch_is_invalid_record(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    assert refused(lambda: plog.append_as_leader(encode_marker_batch(7, 0, COMMIT, NOW), 0, NOW)) == (
        ErrorCode.INVALID_RECORD
    )
    assert plog.log_end_offset == 0


def test_a_follower_copy_keeps_the_same_transactions_and_index(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "l", segment_bytes=400)
    follower = open_log(tmp_path / "f", segment_bytes=400)
    for round_ in range(4):
        leader.append_as_leader(tbatch(7, 0, 2 * round_), 0, NOW)
        leader.append_as_leader(tbatch(8, 0, round_), 0, NOW)
        leader.append_as_leader(tbatch(7, 0, 2 * round_ + 1), 0, NOW)
        leader.append_marker(7, 0, ABORT if round_ % 2 else COMMIT, 0, NOW)
    data = leader.read(0, 1 << 20, max_offset=leader.log_end_offset, min_one_batch=True)
    while follower.log_end_offset < leader.log_end_offset:
        follower.append_as_follower(
            leader.read(follower.log_end_offset, 200, max_offset=leader.log_end_offset, min_one_batch=True)
        )
    assert len(leader.segments) > 1 and data
    assert all_aborted(follower) == all_aborted(leader) == [AbortedTxn(7, 4, 7, 1), AbortedTxn(7, 12, 15, 1)]
    assert follower.last_stable_offset(16) == leader.last_stable_offset(16) == 1  # 8 opened at 1


def test_truncating_a_marker_reopens_its_transaction_and_drops_its_entry(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    plog.append_as_leader(tbatch(7, 0, 0, 2), 0, NOW)  # 0-1
    plog.append_marker(7, 0, ABORT, 0, NOW)  # 2
    plog.append_as_leader(plain(), 0, NOW)  # 3
    assert all_aborted(plog) == [AbortedTxn(7, 0, 2, 3)] and plog.last_stable_offset(4) == 4
    plog.truncate_to(2)
    assert all_aborted(plog) == [] and txnindex_bytes(plog) == {}
    assert plog.last_stable_offset(2) == 0
    plog.append_marker(7, 0, ABORT, 0, NOW)  # written again, at 2
    assert all_aborted(plog) == [AbortedTxn(7, 0, 2, 3)]


def test_retention_and_delete_records_take_the_txnindex_with_their_segment(tmp_path: Path) -> None:
    plog = open_log(tmp_path, segment_bytes=300)
    for seq in range(6):
        plog.append_as_leader(tbatch(7, 0, seq), 0, NOW)
        plog.append_marker(7, 0, ABORT, 0, NOW)
    first = plog.segments[0].txn_index.path
    assert first.exists() and len(plog.segments) > 2
    plog.delete_records_before(plog.segments[1].base_offset)
    assert not first.exists()
    assert all_aborted(plog) and all(e.last_offset >= plog.segments[0].base_offset for e in all_aborted(plog))


def test_recovery_rebuilds_the_same_lso_and_index_after_a_crash(tmp_path: Path) -> None:
    plog = open_log(tmp_path, segment_bytes=500)
    for seq in range(12):
        plog.append_as_leader(tbatch(7 + seq % 3, 0, seq // 3), 0, NOW)
        if seq % 3 == 1:
            plog.append_marker(7 + seq % 3, 0, ABORT if seq % 2 else COMMIT, 0, NOW)
    plog.append_as_leader(tbatch(20, 0, 0), 0, NOW)  # left open
    hw = plog.log_end_offset
    want_lso, want_index, want_entries = plog.last_stable_offset(hw), txnindex_bytes(plog), all_aborted(plog)
    assert want_entries and len(plog.segments) > 2
    # kill -9: no close, no snapshot at the log end; the directory as the crash left it, and
    # then a power loss that took every .txnindex file.
    crashed = tmp_path / "crash"
    shutil.copytree(plog.directory, crashed / "t-0")
    reopened = open_log(crashed)
    assert reopened.last_stable_offset(hw) == want_lso
    assert txnindex_bytes(reopened) == want_index
    for f in (crashed / "t-0").glob("*.txnindex"):
        f.unlink()
    reopened.close()
    again = PartitionLog.open(crashed / "t-0", LogConfig(segment_bytes=500), topic_id=None, recovery_point=0)
    assert again.last_stable_offset(hw) == want_lso
    assert txnindex_bytes(again) == want_index and all_aborted(again) == want_entries


def test_a_clean_restart_keeps_open_transactions_from_the_snapshot(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    plog.append_as_leader(plain(), 0, NOW)
    plog.append_as_leader(tbatch(7, 0, 0), 0, NOW)  # 1, open
    plog.close(snapshot=True)
    again = PartitionLog.open(tmp_path / "t-0", LogConfig(), topic_id=None, clean=True, recovery_point=2)
    assert again.last_stable_offset(2) == 1
    again.append_marker(7, 0, COMMIT, 0, NOW)
    assert again.last_stable_offset(3) == 3


# ---------------------------------------------------------------------------- read_committed, randomized


@dataclass
class Model:
    """What the log holds, batch by batch: (first, last, producer id, epoch, first seq, kind),
    kind "txn", "idem", "plain", "commit" or "abort"."""

    batches: list[tuple[int, int, int, int, int, str]] = field(default_factory=list)
    epochs: dict[int, int] = field(default_factory=dict)

    def open_txn_first(self, pid: int) -> int | None:
        first = None
        for b0, _b1, p, _e, _s, kind in self.batches:
            if p != pid:
                continue
            if kind == "txn" and first is None:
                first = b0
            elif kind in ("commit", "abort"):
                first = None
        return first

    def next_seq(self, pid: int) -> tuple[int, int]:
        mine = [b for b in self.batches if b[2] == pid]
        if not mine:
            return self.epochs.get(pid, 0), 0
        epoch = mine[-1][3]
        data = [b for b in mine if b[3] == epoch and b[5] in ("txn", "idem")]
        return epoch, (data[-1][4] + data[-1][1] - data[-1][0] + 1) if data else 0

    def expected_visible(self, lso: int) -> set[int]:
        """Offsets below `lso` a read_committed reader must see: plain and idempotent records,
        and those of transactions committed by a marker in the log."""
        out: set[int] = set()
        pending: dict[int, list[int]] = {}
        for b0, b1, pid, _e, _s, kind in self.batches:
            if kind in ("plain", "idem"):
                out |= {o for o in range(b0, b1 + 1) if o < lso}
            elif kind == "txn":
                pending.setdefault(pid, []).extend(range(b0, b1 + 1))
            else:
                if kind == "commit":
                    out |= {o for o in pending.get(pid, []) if o < lso}
                pending.pop(pid, None)
        return out


def read_committed(plog: PartitionLog, lso: int, max_bytes: int) -> set[int]:
    """A read_committed consumer (Kafka's Fetcher rule) reading from the log start to the LSO
    in fetches of `max_bytes`, each with the log's aborted-transaction list."""
    seen: set[int] = set()
    offset = plog.log_start_offset
    aborted_pids: set[int] = set()
    while offset < lso:
        data = bytes(plog.read(offset, max_bytes, max_offset=lso, min_one_batch=True))
        frames = scan_frames(data).frames
        assert frames, f"nothing read at {offset} below the LSO {lso}"
        pending = sorted(plog.aborted_transactions(offset, frames[-1].last_offset + 1), key=lambda t: t.first_offset)
        for f in frames:
            while pending and pending[0].first_offset <= f.last_offset:
                aborted_pids.add(pending.pop(0).producer_id)
            batch = DefaultRecordBatch(bytearray(data[f.position : f.position + f.size]))
            if batch.is_control_batch:
                if next(iter(batch)).abort:
                    aborted_pids.discard(batch.producer_id)
            elif not (batch.is_transactional and batch.producer_id in aborted_pids):
                seen |= {r.offset for r in batch if r.offset >= offset}
        offset = frames[-1].last_offset + 1
    return seen


OPS = st.one_of(
    st.tuples(st.just("txn"), st.sampled_from([1, 2, 3]), st.integers(1, 3)),
    st.tuples(st.just("idem"), st.just(100), st.integers(1, 3)),
    st.tuples(st.just("plain"), st.just(-1), st.integers(1, 3)),
    st.tuples(st.sampled_from(["commit", "abort", "abort+bump"]), st.sampled_from([1, 2, 3]), st.just(0)),
    st.tuples(st.sampled_from(["hw", "truncate", "roll", "crash", "restart"]), st.just(0), st.integers(0, 100)),
)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(OPS, min_size=1, max_size=40), max_bytes=st.sampled_from([1, 150, 1 << 20]))
def test_read_committed_sees_every_committed_record_and_nothing_open_or_aborted(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, int, int]], max_bytes: int
) -> None:
    root = tmp_path_factory.mktemp("txn")
    plog = open_log(root / "l", segment_bytes=600)
    follower = open_log(root / "f", segment_bytes=450)
    model = Model()
    hw = 0
    for kind, pid, arg in ops:
        end = plog.log_end_offset
        if kind in ("txn", "idem", "plain"):
            epoch, seq = model.next_seq(pid)
            data = plain(arg) if kind == "plain" else tbatch(pid, epoch, seq, arg, transactional=kind == "txn")
            info = plog.append_as_leader(data, 0, NOW)
            model.batches.append((info.first_offset, info.last_offset, pid, epoch, seq, kind))
        elif kind in ("commit", "abort", "abort+bump"):
            epoch, _seq = model.next_seq(pid)
            epoch += kind == "abort+bump"
            info = plog.append_marker(pid, epoch, EndTxnMarker(kind == "commit", 0), 0, NOW)
            model.batches.append((info.first_offset, info.last_offset, pid, epoch, 0, kind.split("+")[0]))
            model.epochs[pid] = epoch
        elif kind == "hw":
            hw = hw + (end - hw) * arg // 100
        elif kind == "truncate":
            cut = hw + (end - hw) * arg // 100
            plog.truncate_to(cut)
            model.batches = [b for b in model.batches if b[1] < cut]
        elif kind == "roll":
            plog.roll()
        else:  # a crash (everything re-walked) or a clean restart
            plog.close(snapshot=kind == "restart")
            plog = PartitionLog.open(
                root / "l" / "t-0", LogConfig(segment_bytes=600), topic_id=None, clean=kind == "restart",
                recovery_point=plog.log_end_offset if kind == "restart" else 0,
            )  # fmt: skip
        assert plog.log_end_offset == (model.batches[-1][1] + 1 if model.batches else 0)
        hw = min(hw, plog.log_end_offset)
        # The follower copies what the leader has (truncated first where the leader was).
        if follower.log_end_offset > plog.log_end_offset:
            follower.truncate_to(plog.log_end_offset)
        while follower.log_end_offset < plog.log_end_offset:
            follower.append_as_follower(
                plog.read(follower.log_end_offset, 300, max_offset=plog.log_end_offset, min_one_batch=True)
            )
        lso = plog.last_stable_offset(hw)
        assert plog.log_start_offset <= lso <= hw
        for p in (1, 2, 3):
            first = model.open_txn_first(p)
            assert first is None or lso <= first, f"producer {p}'s open transaction at {first} is below the LSO {lso}"
        assert read_committed(plog, lso, max_bytes) == model.expected_visible(lso)
        assert all_aborted(follower) == all_aborted(plog)


def test_a_leaders_control_batch_that_is_no_marker_is_corrupt_and_writes_nothing(tmp_path: Path) -> None:
    from broker.log.records import BatchHeader, Record, encode_records

    follower = open_log(tmp_path)
    follower.append_as_follower(tbatch(7, 0, 0))
    bad = encode_records([Record(1, NOW, b"x", b"y")], BatchHeader(0, 0x30, 7, 0, -1))
    assert refused(lambda: follower.append_as_follower(bad)) == ErrorCode.CORRUPT_MESSAGE
    assert follower.log_end_offset == 1 and follower.last_stable_offset(1) == 0


def keyed(pid: int, seq: int, key: bytes, value: bytes, *, transactional: bool) -> bytes:
    b = DefaultRecordBatchBuilder(2, 0, transactional, pid, 0 if pid >= 0 else -1, seq, batch_size=1 << 20)
    b.append(0, timestamp=NOW, key=key, value=value, headers=[])
    return bytes(b.build())


def test_compaction_keeps_what_aborted_and_open_transactions_would_hide(tmp_path: Path) -> None:
    """Kafka's cleaner rules: an aborted record never removes an older record of its key, an
    open transaction's records are not cleaned, the `.txnindex` entries survive the swap."""
    from broker.log import cleaner

    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(cleanup_policy=("compact",)), topic_id=uuid.uuid4())
    plog.append_as_leader(keyed(-1, -1, b"k", b"committed", transactional=False), 0, NOW)  # 0
    plog.roll()
    plog.append_as_leader(keyed(7, 0, b"k", b"aborted", transactional=True), 0, NOW)  # 1
    plog.append_marker(7, 0, ABORT, 0, NOW)  # 2
    plog.roll()
    plog.append_as_leader(keyed(8, 0, b"j", b"old", transactional=False), 0, NOW)  # 3
    plog.roll()
    plog.append_as_leader(keyed(9, 0, b"j", b"open", transactional=True), 0, NOW)  # 4: stays open
    plog.roll()
    plog.append_as_leader(keyed(-1, -1, b"i", b"later", transactional=False), 0, NOW)  # 5, active segment
    hw = plog.log_end_offset
    entries = all_aborted(plog)
    assert entries == [AbortedTxn(7, 1, 2, 3)]
    result = cleaner.clean(cleaner.plan(plog, 0, hw, NOW, -1))
    assert result is not None and cleaner.swap(result)
    lso = plog.last_stable_offset(hw)
    assert lso == 4
    assert read_committed(plog, lso, 1 << 20) == {0, 3}  # k=committed (offset 0) and j=old survive
    assert all_aborted(plog) == entries
    # The aborted batch itself is gone (test_txn_cleaner.py): a log re-walked after a crash
    # rebuilds no entry for a transaction with no record left, and reads the same.
    reopened = PartitionLog.open(tmp_path / "t-0", LogConfig(cleanup_policy=("compact",)), topic_id=None)
    assert all_aborted(reopened) == [] and reopened.last_stable_offset(hw) == lso
    assert read_committed(reopened, lso, 1 << 20) == {0, 3}


def test_log_dump_prints_markers_and_the_txnindex_as_kafka_dump_log(tmp_path: Path) -> None:
    from broker.log.dump import dump_partition_file, is_partition_file

    plog = open_log(tmp_path)
    plog.append_as_leader(tbatch(7, 0, 0, 2), 0, NOW)
    plog.append_marker(7, 0, EndTxnMarker(False, 4), 0, NOW)
    txnindex = plog.segments[0].txn_index.path
    assert is_partition_file(txnindex)
    assert list(dump_partition_file(txnindex)) == [
        f"Dumping {txnindex}",
        "version: 0 producerId: 7 firstOffset: 0 lastOffset: 2 lastStableOffset: 3",
    ]
    lines = list(dump_partition_file(plog.segments[0].path, print_data_log=True))
    assert any("isTransactional: true isControl: true" in line for line in lines)
    assert any(line.endswith("endTxnMarker: ABORT coordinatorEpoch: 4") for line in lines)


@given(
    st.booleans(),
    st.integers(-(2**31), 2**31 - 1),
    st.integers(0, 2**40),
    st.booleans(),
    st.lists(st.tuples(st.integers(0, 77), st.integers(0, 255)), max_size=3),
)
@settings(max_examples=examples(300), suppress_health_check=[HealthCheck.too_slow], deadline=None)
def test_the_canonical_marker_read_at_fixed_positions_is_the_record_decoders_answer(
    committed: bool, epoch: int, timestamp: int, log_append_time: bool, flips: list[tuple[int, int]]
) -> None:
    """`decode_marker_batch` reads a marker batch in `encode_marker_batch`'s layout at fixed
    positions; whatever the bytes (a marker of either kind, any coordinator epoch and
    timestamp, LogAppendTime, bytes changed anywhere), its answer is the general decoder's."""
    from broker.log import control_records
    from broker.log.records import batch_records

    data = bytearray(encode_marker_batch(7, 3, EndTxnMarker(committed, epoch), timestamp))
    if log_append_time:
        data[22] |= 0x08  # attributes (low byte): LogAppendTime; the max timestamp differs
        data[35:43] = (timestamp + 5).to_bytes(8, "big")
    for at, value in flips:
        if at >= 21:  # from the attributes on (offsets, length, epoch, magic, CRC play no part)
            data[at] = value

    def general() -> tuple[EndTxnMarker, int] | None | str:
        try:
            for _offset, ts, record in batch_records(bytes(data), payloads=True):
                return control_records.decode_marker_record(record.key, record.value), ts
        except Exception as exc:  # noqa: BLE001 - the kind of failure is compared only as "fails"
            return f"fails: {type(exc).__name__}"
        return None

    fast = control_records._canonical_marker(bytes(data))
    if fast is not None:
        assert fast == general()
    if not flips:
        assert fast == (EndTxnMarker(committed, epoch), timestamp + 5 if log_append_time else timestamp)
