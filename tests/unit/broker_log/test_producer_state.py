"""Idempotent producers' state (broker/log/producer_state.py): Kafka 3.9's sequence and epoch
rules, on the sans-IO manager and through a real `PartitionLog` (leader and follower
appends, snapshots, restarts, truncation)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder

from broker.log import LogConfig, LogError, PartitionLog
from broker.log.producer_state import (
    SEQUENCE_MAX,
    ProducerBatch,
    ProducerEntry,
    ProducerStateManager,
    SnapshotError,
    decode_snapshot,
    encode_snapshot,
    increment_sequence,
)
from quorum.kafka_errors import ErrorCode

NOW = int(time.time() * 1000)  # producers expire by their batches' timestamps: recent ones


def pbatch(pid: int, epoch: int, seq: int, n: int = 1, *, ts: int = NOW) -> bytes:
    """One idempotent batch of `n` records, as a client sends it."""
    b = DefaultRecordBatchBuilder(2, 0, False, pid, epoch, seq, batch_size=1 << 20)
    for i in range(n):
        b.append(i, timestamp=ts, key=None, value=f"{pid}-{epoch}-{seq + i}".encode(), headers=[])
    return bytes(b.build())


def open_log(path: Path, **cfg: int) -> PartitionLog:
    return PartitionLog.open(path / "t-0", LogConfig(**cfg), topic_id=uuid.uuid4())


def refused(plog: PartitionLog, data: bytes) -> ErrorCode:
    end = plog.log_end_offset
    with pytest.raises(LogError) as err:
        plog.append_as_leader(data, 0, NOW)
    assert plog.log_end_offset == end  # nothing written
    return err.value.code


# ---------------------------------------------------------------------------- one rule each


def test_a_retried_batch_gets_its_original_offsets_and_is_not_written_again(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    first = plog.append_as_leader(pbatch(7, 0, 0, 3), 0, NOW)
    plog.append_as_leader(pbatch(7, 0, 3, 2), 0, NOW)
    end = plog.log_end_offset
    again = plog.append_as_leader(pbatch(7, 0, 0, 3), 0, NOW)
    assert (again.first_offset, again.last_offset) == (first.first_offset, first.last_offset) == (0, 2)
    assert plog.log_end_offset == end == 5


def test_only_the_last_five_batches_are_remembered(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    for seq in range(6):
        plog.append_as_leader(pbatch(7, 0, seq), 0, NOW)
    assert plog.append_as_leader(pbatch(7, 0, 1), 0, NOW).first_offset == 1  # still among the last 5
    # The first batch fell out: its retry is out of order, not a duplicate (Kafka's rule).
    assert refused(plog, pbatch(7, 0, 0)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_a_sequence_gap_is_out_of_order(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    plog.append_as_leader(pbatch(7, 0, 0, 2), 0, NOW)
    assert refused(plog, pbatch(7, 0, 3)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    plog.append_as_leader(pbatch(7, 0, 2), 0, NOW)


def test_an_overlapping_retry_is_out_of_order_never_duplicate_sequence_number(tmp_path: Path) -> None:
    """Kafka 3.9's broker never answers DUPLICATE_SEQUENCE_NUMBER: a batch that is not an exact
    repeat of a kept one and does not follow the last sequence is OUT_OF_ORDER_SEQUENCE_NUMBER."""
    plog = open_log(tmp_path)
    plog.append_as_leader(pbatch(7, 0, 0, 3), 0, NOW)
    assert refused(plog, pbatch(7, 0, 1, 2)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_an_older_epoch_is_invalid_producer_epoch(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    plog.append_as_leader(pbatch(7, 3, 0), 0, NOW)
    assert refused(plog, pbatch(7, 2, 1)) == ErrorCode.INVALID_PRODUCER_EPOCH


def test_a_new_epoch_starts_at_sequence_zero(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    plog.append_as_leader(pbatch(7, 0, 0, 4), 0, NOW)
    assert refused(plog, pbatch(7, 1, 4)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    plog.append_as_leader(pbatch(7, 1, 0), 0, NOW)
    # The older epoch's batches are forgotten: its retry is now a fenced epoch.
    assert refused(plog, pbatch(7, 0, 0, 4)) == ErrorCode.INVALID_PRODUCER_EPOCH


def test_an_unknown_producer_may_start_anywhere_never_unknown_producer_id(tmp_path: Path) -> None:
    """Kafka 3.9's broker has no UNKNOWN_PRODUCER_ID throw site: a producer it does not know
    (new, expired, or its batches deleted) is accepted at any sequence."""
    plog = open_log(tmp_path)
    assert plog.append_as_leader(pbatch(9, 4, 1234), 0, NOW).first_offset == 0
    plog.append_as_leader(pbatch(9, 4, 1235), 0, NOW)


def test_sequences_wrap_after_int32_max() -> None:
    m = ProducerStateManager("t-0")
    m.on_append([ProducerBatch(1, 0, SEQUENCE_MAX - 1, 0, 1, NOW)], 2)
    assert m.entries[1].last_seq == SEQUENCE_MAX
    assert m.check_client_append([ProducerBatch(1, 0, 0, 2, 0, NOW)]) is None
    assert increment_sequence(SEQUENCE_MAX - 1, 3) == 1
    dup = m.check_client_append([ProducerBatch(1, 0, SEQUENCE_MAX - 1, 9, 1, NOW)])
    assert dup is not None and (dup.first_offset, dup.last_offset) == (0, 1)


def test_followers_accept_what_the_leader_wrote_and_track_it(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "a")
    for epoch, seq in ((5, 0), (5, 1), (4, 0)):  # a lower epoch: the leader would refuse it...
        data = pbatch(7, epoch, seq)
        if epoch == 5:
            leader.append_as_leader(data, 0, NOW)
    follower = open_log(tmp_path / "b")
    follower.append_as_follower(leader.read(0, 1 << 20, max_offset=10, min_one_batch=True))
    assert follower.producers.entries[7].last_seq == 1
    # ...a follower takes it from its leader as it is (Kafka: a warning, no error).
    b = bytearray(pbatch(7, 4, 0))
    b[0:8] = (2).to_bytes(8, "big")
    follower.append_as_follower(bytes(b))
    assert follower.producers.entries[7].producer_epoch == 4
    # Once leader, the follower answers the producer's retry as a duplicate.
    assert follower.append_as_leader(pbatch(7, 4, 0), 1, NOW).first_offset == 2


# ---------------------------------------------------------------------------- durability


def test_state_survives_a_clean_restart_from_the_snapshot(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    for seq in range(3):
        plog.append_as_leader(pbatch(7, 0, seq), 0, NOW)
    plog.close(snapshot=True)
    assert sorted(p.name for p in (tmp_path / "t-0").glob("*.snapshot")) == [f"{3:020d}.snapshot"]
    again = PartitionLog.open(tmp_path / "t-0", LogConfig(), topic_id=None, clean=True)
    assert again.append_as_leader(pbatch(7, 0, 2), 0, NOW).first_offset == 2  # the last batch: a duplicate
    assert refused(again, pbatch(7, 0, 5)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_state_is_rebuilt_from_the_roll_snapshot_and_the_segments_after_it(tmp_path: Path) -> None:
    plog = open_log(tmp_path, segment_bytes=400)
    for seq in range(12):
        plog.append_as_leader(pbatch(7, 0, seq), 0, NOW)
    snapshots = sorted(p.name for p in (tmp_path / "t-0").glob("*.snapshot"))
    assert len(plog.segments) > 2 and snapshots == [f"{s.base_offset:020d}.snapshot" for s in plog.segments[1:]]
    plog.close()  # an unclean stop: no snapshot at the log end
    again = PartitionLog.open(tmp_path / "t-0", LogConfig(segment_bytes=400), topic_id=None)
    assert again.producers.entries[7].last_seq == 11
    # As Kafka's, a snapshot keeps each producer's last batch only: the batches known again are
    # that one and those of the segments after it (here the active one), and their retries are
    # duplicates answered with their offsets.
    active = again.segments[-1].base_offset
    assert 7 < active < 12
    for seq in range(active - 1, 12):
        assert again.append_as_leader(pbatch(7, 0, seq), 0, NOW).first_offset == seq
    assert again.log_end_offset == 12
    assert again.append_as_leader(pbatch(7, 0, 12), 0, NOW).first_offset == 12


def test_a_damaged_snapshot_is_dropped_and_the_log_replayed(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    for seq in range(3):
        plog.append_as_leader(pbatch(7, 0, seq), 0, NOW)
    plog.close(snapshot=True)
    path = tmp_path / "t-0" / f"{3:020d}.snapshot"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(SnapshotError):
        decode_snapshot(bytes(data))
    again = PartitionLog.open(tmp_path / "t-0", LogConfig(), topic_id=None, clean=True)
    assert not path.exists() and again.producers.entries[7].last_seq == 2


def test_truncation_forgets_the_truncated_batches_and_their_snapshots(tmp_path: Path) -> None:
    plog = open_log(tmp_path, segment_bytes=400)
    for seq in range(12):
        plog.append_as_leader(pbatch(7, 0, seq), 0, NOW)
    plog.truncate_to(4)
    assert plog.log_end_offset == 4
    assert all(int(p.name[:20]) <= 4 for p in (tmp_path / "t-0").glob("*.snapshot"))
    assert plog.producers.entries[7].last_seq == 3
    # The producer's retry of seq 4 is appended again (it is no longer in the log).
    assert plog.append_as_leader(pbatch(7, 0, 4), 0, NOW).first_offset == 4
    plog.truncate_fully_and_start_at(100)
    assert not list((tmp_path / "t-0").glob("*.snapshot")) and not plog.producers.entries


def test_producers_expire_after_producer_id_expiration_ms() -> None:
    m = ProducerStateManager("t-0", expiration_ms=1000)
    m.on_append([ProducerBatch(1, 0, 0, 0, 0, NOW), ProducerBatch(2, 0, 0, 1, 0, NOW + 500)], 2)
    assert m.remove_expired(NOW + 999) == 0
    assert m.remove_expired(NOW + 1000) == 1 and list(m.entries) == [2]
    # Loading a snapshot drops the expired producers too.
    m.load(decode_snapshot(encode_snapshot([ProducerEntry(3, 0, (), NOW)])), 5, NOW + 10**6)
    assert not m.entries


def test_snapshot_round_trip_keeps_the_last_batch_of_each_producer() -> None:
    m = ProducerStateManager("t-0")
    m.on_append([ProducerBatch(1, 2, 0, 0, 1, NOW), ProducerBatch(1, 2, 2, 2, 3, NOW + 1)], 6)
    entries = decode_snapshot(m.snapshot_bytes())
    assert entries == [ProducerEntry(1, 2, (m.entries[1].batches[-1],), NOW + 1)]


# ---------------------------------------------------------------------------- the property


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[dict[int, list[int]], list[tuple[int, int]]]:
    """Two producers' batches (record counts) and any order of sends: retries, duplicates,
    reorders, sends of batches far ahead or far behind."""
    producers = {pid: draw(st.lists(st.integers(1, 3), min_size=1, max_size=12)) for pid in (1, 2)}
    sends = draw(
        st.lists(
            st.sampled_from([(pid, i) for pid, sizes in producers.items() for i in range(len(sizes))]), max_size=60
        )
    )
    return producers, sends


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_any_retry_order_appends_each_batch_at_most_once_and_answers_duplicates_with_its_offset(
    scenario: tuple[dict[int, list[int]], list[tuple[int, int]]],
) -> None:
    producers, sends = scenario
    firsts = {pid: [sum(sizes[:i]) for i in range(len(sizes))] for pid, sizes in producers.items()}
    m = ProducerStateManager("t-0")
    log: list[tuple[int, int]] = []  # (producer, batch index) per appended batch, in log order
    offset_of: dict[tuple[int, int], int] = {}
    end = 0
    for pid, i in sends:
        size = producers[pid][i]
        batch = ProducerBatch(pid, 0, firsts[pid][i], end, size - 1, NOW)
        recent = [b for b in log if b[0] == pid][-5:]
        try:
            duplicate = m.check_client_append([batch])
        except LogError as exc:
            assert exc.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
            assert (pid, i) not in recent, "a retry of one of the producer's last 5 batches must be a duplicate"
            continue
        if duplicate is not None:
            # Only a batch already written is a duplicate, and it gets its own offsets back.
            assert (pid, i) in offset_of
            first = offset_of[(pid, i)]
            assert (duplicate.first_offset, duplicate.last_offset) == (first, first + size - 1)
            continue
        assert (pid, i) not in offset_of, "a batch was appended twice"
        m.on_append([batch], end + size)
        log.append((pid, i))
        offset_of[(pid, i)] = end
        end += size
    for pid in producers:
        mine = [i for p, i in log if p == pid]
        # After its first batch (an unknown producer may start anywhere), a producer's batches
        # are in the log in order and without a gap.
        assert mine == list(range(mine[0], mine[0] + len(mine))) if mine else True


def test_an_idle_producer_expires_after_the_brokers_producer_id_expiration_ms(tmp_path: Path) -> None:
    """producer.id.expiration.ms from the broker's config, checked every
    producer.id.expiration.check.interval.ms (10 min): once expired, the producer is unknown
    and may start at any sequence; before, a gap is out of order."""
    from broker.log import LogManager
    from broker.log.partition_log import PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS

    logs = LogManager([tmp_path], {"producer.id.expiration.ms": "1000"}, background=False)
    plog = logs.get_or_create("t", 0, uuid.uuid4(), {})
    plog.append_as_leader(pbatch(7, 0, 0, ts=NOW), 0, NOW)
    assert refused(plog, pbatch(7, 0, 5, ts=NOW)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    later = int(time.time() * 1000) + PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS + 1
    assert plog.append_as_leader(pbatch(7, 0, 5, ts=later), 0, later).first_offset == 1
    logs.close()


def _always_in_sequence(last_seq: int, next_seq: int) -> bool:
    return True


def _no_duplicates(self: ProducerEntry, batch: ProducerBatch) -> None:
    return None


@pytest.mark.pure_python  # plants mutants by replacing module functions (conftest.py)
@pytest.mark.parametrize(
    ("target", "name", "mutant"),
    [
        ("broker.log.producer_state", "in_sequence", _always_in_sequence),  # no sequence check
        ("broker.log.producer_state.ProducerEntry", "duplicate_of", _no_duplicates),  # no duplicate detection
        ("broker.log.producer_state", "NUM_BATCHES_TO_RETAIN", 1),  # remembers one batch, not five
    ],
    ids=["no-sequence-check", "no-duplicate-detection", "one-batch-kept"],
)
def test_the_property_catches_single_rule_mutants(
    monkeypatch: pytest.MonkeyPatch, target: str, name: str, mutant: object
) -> None:
    """The property above can fail: each broken rule is caught."""
    monkeypatch.setattr(f"{target}.{name}", mutant)
    with pytest.raises(AssertionError):
        test_any_retry_order_appends_each_batch_at_most_once_and_answers_duplicates_with_its_offset()


def test_a_clean_log_from_before_producer_state_is_not_scanned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Kafka's upgrade rule: a cleanly closed log with no snapshot at all holds no producer
    state to rebuild; empty snapshots at the last two segments' bases and the log end are
    written instead of reading the log."""
    plog = open_log(tmp_path, segment_bytes=400)
    for _ in range(12):
        plog.append_as_leader(pbatch(-1, -1, -1), 0, NOW)
    bases = [s.base_offset for s in plog.segments]
    plog.close()
    for path in (tmp_path / "t-0").glob("*.snapshot"):
        path.unlink()  # as a log written before this version
    monkeypatch.setattr(PartitionLog, "_replay_producers", lambda self, start: pytest.fail("the log was scanned"))
    again = PartitionLog.open(tmp_path / "t-0", LogConfig(segment_bytes=400), topic_id=None, clean=True)
    assert not again.producers.entries
    names = sorted(p.name for p in (tmp_path / "t-0").glob("*.snapshot"))
    assert names == [f"{o:020d}.snapshot" for o in sorted({*bases[-2:], 12})]
