"""The transaction coordinator's rules (`broker.txn.coordinator.TxnCoordinator`), one
behaviour each, with the error codes Kafka 3.9 answers (TransactionCoordinator.scala,
TransactionMetadata.scala, TransactionStateManager.scala, the marker channel)."""

from __future__ import annotations

import pytest

from broker.txn.coordinator import OFFSETS_TOPIC, TxnConfig
from broker.txn.messages import (
    AddOffsetsRequest,
    AddPartitionsRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    InitProducerIdResult,
    MarkerRequest,
    TxnResult,
)
from broker.txn.metadata import TxnState
from broker.txn.records import TransactionLogKey, TransactionLogValue, decode_key, decode_value
from quorum.kafka_errors import ErrorCode
from tests.unit.txn.txn_harness import TID, E, Harness

COMMIT, ABORT = TxnResult.COMMIT, TxnResult.ABORT
S = TxnState
A0, A1, B0 = ("a", 0), ("a", 1), ("b", 0)


def started(h: Harness, *tps: tuple[str, int]) -> tuple[int, int]:
    """A producer with an Ongoing transaction over `tps` (A0 by default)."""
    r = h.init()
    assert h.add(r.producer_id, r.producer_epoch, *(tps or (A0,))) == E.NONE
    return r.producer_id, r.producer_epoch


def records(h: Harness) -> list[tuple[str, TransactionLogValue | None]]:
    return [(decode_key(k).transactional_id, decode_value(v)) for k, v in h.log]


# ================================================================== InitProducerId


def test_init_gives_a_new_id_at_epoch_0_answered_only_once_committed() -> None:
    h = Harness()
    out = h.c.init_producer_id(InitProducerIdRequest(TID, 60_000), 1, 0)
    assert out.replies == {} and len(out.writes) == 1
    value = out.writes[0].value
    assert value is not None and (value.producer_id, value.producer_epoch, value.transaction_status) == (1000, 0, 0)
    assert value.transaction_partitions is None and value.transaction_start_timestamp_ms == -1
    assert h.take(out) == {}
    assert h.complete() == {1: InitProducerIdResult(E.NONE, 1000, 0)}
    assert h.state().state == S.EMPTY


@pytest.mark.parametrize(("tid", "pid", "epoch"), [("", -1, -1), (TID, 5, -1), (TID, -1, 0)])
def test_init_bad_request(tid: str, pid: int, epoch: int) -> None:
    assert Harness().init(tid, pid=pid, epoch=epoch).error == E.INVALID_REQUEST


BAD_TIMEOUT = E.INVALID_TRANSACTION_TIMEOUT


@pytest.mark.parametrize(
    ("timeout", "error"), [(0, BAD_TIMEOUT), (-1, BAD_TIMEOUT), (900_001, BAD_TIMEOUT), (900_000, E.NONE), (1, E.NONE)]
)
def test_init_timeout_must_be_within_transaction_max_timeout_ms(timeout: int, error: E) -> None:
    assert Harness().init(timeout=timeout).error == error
    assert Harness(TxnConfig(transaction_max_timeout_ms=1000)).init(timeout=1001).error == E.INVALID_TRANSACTION_TIMEOUT


def test_init_without_a_producer_id_at_hand() -> None:
    h = Harness()
    h.id_error = E.COORDINATOR_LOAD_IN_PROGRESS
    assert h.init() == InitProducerIdResult(E.COORDINATOR_LOAD_IN_PROGRESS, -1, -1)
    assert TID not in h.c.txns


def test_reinit_bumps_the_epoch_and_a_retry_gets_the_same_answer() -> None:
    h = Harness()
    assert h.init() == InitProducerIdResult(E.NONE, 1000, 0)
    assert h.init() == InitProducerIdResult(E.NONE, 1000, 1)  # a new producer instance
    assert h.init(pid=1000, epoch=1) == InitProducerIdResult(E.NONE, 1000, 2)  # KIP-360: bump my own epoch
    assert h.init(pid=1000, epoch=1) == InitProducerIdResult(E.NONE, 1000, 2)  # its retry: the same, no bump
    assert h.init(pid=1000, epoch=0) == InitProducerIdResult(E.PRODUCER_FENCED)  # older than the last epoch
    assert h.init(pid=999, epoch=2) == InitProducerIdResult(E.PRODUCER_FENCED)  # not this id's producer
    assert [v.producer_epoch for _, v in records(h) if v] == [0, 1, 2, 2]


def test_epoch_exhaustion_rotates_the_producer_id() -> None:
    h = Harness()
    h.c.replay(TransactionLogKey(TID), TransactionLogValue(77, 32_765, 60_000, 4, (), 0, 0))
    assert h.init() == InitProducerIdResult(E.NONE, 77, 32_766)
    assert h.init() == InitProducerIdResult(E.NONE, 1000, 0)  # 32766 is exhausted: a new id
    assert (h.state().last_producer_id, h.state().last_producer_epoch) == (77, -1)


def test_rotation_with_an_expected_epoch_and_its_retry() -> None:
    h = Harness()
    h.c.replay(TransactionLogKey(TID), TransactionLogValue(77, 32_766, 60_000, 4, (), 0, 0))
    assert h.init(pid=77, epoch=32_766) == InitProducerIdResult(E.NONE, 1000, 0)
    # The answer was lost; the retry with the old id and its exhausted epoch gets the same.
    assert h.init(pid=77, epoch=32_766) == InitProducerIdResult(E.NONE, 1000, 0)
    assert h.init(pid=77, epoch=5) == InitProducerIdResult(E.PRODUCER_FENCED)


def test_init_while_a_transition_is_pending_or_prepared_is_concurrent() -> None:
    h = Harness()
    h.init()
    h.take(h.c.init_producer_id(InitProducerIdRequest(TID, 60_000), 50, 0))  # its record is not committed yet
    assert h.init().error == E.CONCURRENT_TRANSACTIONS
    h.complete()
    pid, epoch = h.init().producer_id, 2
    assert h.add(pid, epoch, A0) == E.NONE
    assert h.end(pid, epoch, COMMIT) == E.NONE  # PrepareCommit, markers outstanding
    assert h.init().error == E.CONCURRENT_TRANSACTIONS
    h.finish()
    assert h.init() == InitProducerIdResult(E.NONE, pid, 3)


def test_init_with_an_ongoing_transaction_fences_and_aborts_it_first() -> None:
    h = Harness()
    pid, epoch = started(h, A0, B0)
    assert h.init().error == E.CONCURRENT_TRANSACTIONS  # answered once PrepareAbort is committed
    prepared = records(h)[-1][1]
    assert prepared is not None and prepared.transaction_status == S.PREPARE_ABORT
    assert prepared.producer_epoch == epoch + 1  # the bump that fences the old producer
    assert [(m.result, m.producer_epoch, m.partitions) for m in h.markers] == [(ABORT, epoch + 1, frozenset({A0, B0}))]
    assert h.add(pid, epoch, A1) == E.PRODUCER_FENCED
    assert h.end(pid, epoch, COMMIT) == E.PRODUCER_FENCED
    h.finish()
    assert h.state().state == S.COMPLETE_ABORT
    assert h.init() == InitProducerIdResult(E.NONE, pid, epoch + 2)  # the client's retry


def test_the_fence_holds_the_old_epoch_until_committed() -> None:
    """While the fence's PrepareAbort is in flight the old epoch is told to retry, not fenced;
    after a failed write it carries on (nothing was fenced)."""
    h = Harness()
    pid, epoch = started(h)
    h.take(h.c.init_producer_id(InitProducerIdRequest(TID, 60_000), 50, 0))
    assert h.add(pid, epoch, A1) == E.CONCURRENT_TRANSACTIONS
    assert h.complete(E.NOT_ENOUGH_REPLICAS) == {50: InitProducerIdResult(E.COORDINATOR_NOT_AVAILABLE)}
    assert (h.state().state, h.state().producer_epoch) == (S.ONGOING, epoch)
    assert h.add(pid, epoch, A1) == E.NONE


@pytest.mark.parametrize(("append", "answer"), [
    (E.NOT_ENOUGH_REPLICAS, E.COORDINATOR_NOT_AVAILABLE), (E.REQUEST_TIMED_OUT, E.COORDINATOR_NOT_AVAILABLE),
    (E.UNKNOWN_TOPIC_OR_PARTITION, E.COORDINATOR_NOT_AVAILABLE), (E.NOT_LEADER_OR_FOLLOWER, E.NOT_COORDINATOR),
    (E.KAFKA_STORAGE_ERROR, E.NOT_COORDINATOR), (E.MESSAGE_TOO_LARGE, E.UNKNOWN_SERVER_ERROR),
])  # fmt: skip
def test_a_failed_append_answers_the_coordinator_error_and_changes_nothing(append: E, answer: E) -> None:
    h = Harness()
    assert h.init(code=append) == InitProducerIdResult(answer)
    assert h.log == [] and h.c.durable_state() == {}
    assert h.init() == InitProducerIdResult(E.NONE, 1000, 0)  # the id created before is used


# ================================================================== AddPartitionsToTxn / AddOffsetsToTxn


def test_add_partitions_starts_the_transaction_now() -> None:
    h = Harness()
    r = h.init()
    h.now = 5_000
    assert h.add(r.producer_id, r.producer_epoch, A0, B0) == E.NONE
    m = h.state()
    assert (m.state, m.partitions, m.start_ms, m.last_update_ms) == (S.ONGOING, {A0, B0}, 5_000, 5_000)
    h.now = 6_000
    assert h.add(r.producer_id, r.producer_epoch, A1) == E.NONE
    assert (h.state().partitions, h.state().start_ms) == ({A0, A1, B0}, 5_000)
    value = records(h)[-1][1]
    assert value is not None and [(p.topic, p.partition_ids) for p in value.transaction_partitions or ()] == [
        ("a", (0, 1)), ("b", (0,))]  # fmt: skip


def test_add_partitions_already_in_the_transaction_writes_nothing() -> None:
    h = Harness()
    pid, epoch = started(h, A0, B0)
    n = len(h.log)
    out = h.c.add_partitions(AddPartitionsRequest(TID, pid, epoch, frozenset({A0})), 9, 0)
    assert out.replies == {9: E.NONE} and out.writes == []
    assert len(h.log) == n


def test_add_partitions_errors() -> None:
    h = Harness(TxnConfig(concurrent_transactions_hold_ms=0))  # Kafka's answers: nothing is held
    assert h.add(1000, 0, A0) == E.INVALID_PRODUCER_ID_MAPPING  # unknown transactional id
    r = h.init()
    assert h.add(r.producer_id + 1, r.producer_epoch, A0) == E.INVALID_PRODUCER_ID_MAPPING
    assert h.add(r.producer_id, r.producer_epoch + 1, A0) == E.PRODUCER_FENCED
    assert h.add(r.producer_id, r.producer_epoch, A0, tid="") == E.INVALID_REQUEST
    h.take(h.c.add_partitions(AddPartitionsRequest(TID, r.producer_id, r.producer_epoch, frozenset({A0})), 9, 0))
    assert h.add(r.producer_id, r.producer_epoch, A1) == E.CONCURRENT_TRANSACTIONS  # a pending transition
    h.complete()
    assert h.end(r.producer_id, r.producer_epoch, COMMIT) == E.NONE
    assert h.add(r.producer_id, r.producer_epoch, A1) == E.CONCURRENT_TRANSACTIONS  # prepared


def held_add(h: Harness, pid: int, epoch: int, *tps: tuple[str, int], token: int = 99) -> None:
    """An AddPartitionsToTxn sent while the previous transaction completes: held, unanswered."""
    out = h.c.add_partitions(AddPartitionsRequest(TID, pid, epoch, frozenset(tps)), token, h.now)
    assert out.replies == {} and out.writes == [] and out.markers == []


def test_add_partitions_is_held_until_the_previous_transaction_completes() -> None:
    h = Harness()
    pid, epoch = started(h, A0)
    assert h.end(pid, epoch, COMMIT) == E.NONE  # PrepareCommit committed, markers out
    h.now = 50
    held_add(h, pid, epoch, A1)
    held_add(h, pid, epoch, B0, token=98)  # a second one (a client would not) is held too
    assert h.c.next_deadline_ms() == 50 + TxnConfig().concurrent_transactions_hold_ms
    h.now = 60
    m = h.markers.pop(0)
    assert h.take(h.c.markers_written(m, dict.fromkeys(m.partitions, E.NONE))) == {}  # completion record in flight
    # The completion commits: the first held request starts the next transaction (its record
    # commits, then it is answered); the second found that transition pending.
    assert h.complete() == {99: E.NONE, 98: E.CONCURRENT_TRANSACTIONS}
    assert [(v.transaction_status if v else None) for _, v in records(h)][-3:] == [
        S.PREPARE_COMMIT, S.COMPLETE_COMMIT, S.ONGOING,
    ]  # fmt: skip
    assert h.state().state == S.ONGOING and h.state().partitions == {A1} and h.state().start_ms == 60
    # Nothing held any more: the next deadline is the periodic abort check's.
    assert h.c.next_deadline_ms() == TxnConfig().abort_timed_out_transaction_cleanup_interval_ms


def test_a_request_held_when_the_markers_finish_rides_in_the_completions_append() -> None:
    """The completion and the next transaction's Ongoing go in one append (one acks=all round
    trip): the log is what writing them one after the other gives, and the held request is
    answered only once both are committed."""
    h = Harness()
    pid, epoch = started(h, A0)
    assert h.end(pid, epoch, COMMIT) == E.NONE
    h.now = 50
    held_add(h, pid, epoch, A1)
    h.now = 60
    m = h.markers.pop(0)
    out = h.c.markers_written(m, dict.fromkeys(m.partitions, E.NONE), h.now)
    assert out.replies == {}
    assert [(w.key.transactional_id, w.value and w.value.transaction_status) for w in out.writes] == [
        (TID, S.COMPLETE_COMMIT), (TID, S.ONGOING),
    ]  # fmt: skip
    h.take(out)
    assert len(h.in_flight) == 1  # one append: both records
    assert h.c.next_deadline_ms() == TxnConfig().abort_timed_out_transaction_cleanup_interval_ms  # not held any more
    assert h.state().state == S.PREPARE_COMMIT  # nothing applied before the append commits
    assert h.end(pid, epoch, COMMIT) == E.CONCURRENT_TRANSACTIONS  # still pending
    assert h.complete() == {99: E.NONE}
    assert [(v.transaction_status if v else None) for _, v in records(h)][-3:] == [
        S.PREPARE_COMMIT, S.COMPLETE_COMMIT, S.ONGOING,
    ]  # fmt: skip
    assert h.state().state == S.ONGOING and h.state().partitions == {A1} and h.state().start_ms == 60
    reloaded = h.c.durable_state()
    assert h.reload().durable_state() == reloaded  # the log holds exactly that state


def test_only_the_first_held_request_rides_in_the_completions_append() -> None:
    h = Harness()
    pid, epoch = started(h, A0)
    assert h.end(pid, epoch, COMMIT) == E.NONE
    held_add(h, pid, epoch, A1)
    held_add(h, pid, epoch, B0, token=98)
    h.deliver()
    [append] = h.in_flight
    assert len(append) == 2
    # The first is answered with the completion; the second then adds its partition.
    assert h.complete() == {99: E.NONE, 98: E.NONE}
    assert h.state().state == S.ONGOING and h.state().partitions == {A1, B0}


@pytest.mark.parametrize("code", [E.NOT_ENOUGH_REPLICAS, E.NOT_LEADER_OR_FOLLOWER])
def test_a_failed_completion_append_holds_its_rider_again(code: ErrorCode) -> None:
    h = Harness(TxnConfig(concurrent_transactions_hold_ms=300))
    pid, epoch = started(h, A0)
    assert h.end(pid, epoch, COMMIT) == E.NONE
    h.now = 10
    held_add(h, pid, epoch, A1)
    h.deliver()
    if code == E.NOT_LEADER_OR_FOLLOWER:
        # Given up (prepared until a reload): answered as of now.
        assert h.complete(code) == {99: E.CONCURRENT_TRANSACTIONS}
        assert h.state().state == S.PREPARE_COMMIT
        return
    assert h.complete(code) == {}  # the completion is written again after retry.backoff.ms
    assert h.state().state == S.PREPARE_COMMIT
    assert h.c.next_deadline_ms() == 10 + TxnConfig().retry_backoff_ms  # the retry (the hold ends at 310)
    h.tick(10 + TxnConfig().retry_backoff_ms)
    [append] = h.in_flight
    assert [w.value and w.value.transaction_status for w in append] == [S.COMPLETE_COMMIT, S.ONGOING]
    assert h.complete() == {99: E.NONE}
    assert h.state().state == S.ONGOING and h.state().partitions == {A1}


def test_add_offsets_is_held_too() -> None:
    h = Harness()
    pid, epoch = started(h, A0)
    assert h.end(pid, epoch, ABORT) == E.NONE
    out = h.c.add_offsets(AddOffsetsRequest(TID, pid, epoch, "g"), 99, h.now)
    assert out.replies == {} and out.writes == []
    h.deliver()
    assert h.complete() == {99: E.NONE}
    assert h.state().state == S.ONGOING and {t for t, _ in h.state().partitions} == {OFFSETS_TOPIC}


def test_a_held_request_is_answered_concurrent_transactions_at_its_deadline() -> None:
    h = Harness(TxnConfig(concurrent_transactions_hold_ms=300))
    pid, epoch = started(h, A0)
    assert h.end(pid, epoch, COMMIT) == E.NONE
    h.now = 10
    held_add(h, pid, epoch, A1)
    assert h.c.next_deadline_ms() == 310
    assert h.c.tick(309).replies == {}
    out = h.c.tick(310)
    assert out.replies == {99: E.CONCURRENT_TRANSACTIONS} and out.writes == []
    h.finish()  # the markers and the completion, later: nothing more is answered or started
    assert h.state().state == S.COMPLETE_COMMIT and h.state().partitions == frozenset()


def test_a_held_request_is_answered_when_the_completion_gives_up() -> None:
    h = Harness()
    pid, epoch = started(h, A0)
    assert h.end(pid, epoch, COMMIT) == E.NONE
    held_add(h, pid, epoch, A1)
    h.deliver()
    # The completion record fails for good (the partition moved): prepared until a reload.
    assert h.complete(E.NOT_LEADER_OR_FOLLOWER) == {99: E.CONCURRENT_TRANSACTIONS}
    assert h.state().state == S.PREPARE_COMMIT


def test_fenced_or_unknown_producers_are_not_held() -> None:
    h = Harness()
    pid, epoch = started(h, A0)
    assert h.end(pid, epoch, COMMIT) == E.NONE
    out = h.c.add_partitions(AddPartitionsRequest(TID, pid, epoch + 1, frozenset({A1})), 99, h.now)
    assert out.replies == {99: E.PRODUCER_FENCED}
    out = h.c.add_partitions(AddPartitionsRequest(TID, pid + 1, epoch, frozenset({A1})), 98, h.now)
    assert out.replies == {98: E.INVALID_PRODUCER_ID_MAPPING}


def test_an_id_whose_first_init_is_not_committed_has_no_producer() -> None:
    h = Harness()
    assert h.init(code=E.NOT_ENOUGH_REPLICAS).error == E.COORDINATOR_NOT_AVAILABLE
    assert h.add(1000, -1, A0) == E.INVALID_PRODUCER_ID_MAPPING


def test_add_offsets_adds_the_groups_offsets_partition() -> None:
    h = Harness()
    r = h.init()
    assert h.add_offsets(r.producer_id, r.producer_epoch, "my-group") == E.NONE
    assert h.state().partitions == {(OFFSETS_TOPIC, 12)}  # abs("my-group".hashCode()) % 50 (Java)
    h2 = Harness(TxnConfig(offsets_topic_num_partitions=7))
    r = h2.init()
    assert h2.add_offsets(r.producer_id, r.producer_epoch, "my-group") == E.NONE
    assert h2.state().partitions == {(OFFSETS_TOPIC, 1)}
    assert h2.add_offsets(r.producer_id, r.producer_epoch + 1, "my-group") == E.PRODUCER_FENCED


# ================================================================== VerifyOnly (KIP-890 part 1)


def test_verify_only_checks_each_partition_against_the_transaction() -> None:
    h = Harness()
    pid, epoch = started(h, A0)
    n = len(h.log)

    def verify(p: int, e: int, tid: str = TID) -> dict[tuple[str, int], E]:
        return h.c.verify_partitions(AddPartitionsRequest(tid, p, e, frozenset({A0, B0})))

    assert verify(pid, epoch) == {A0: E.NONE, B0: E.TRANSACTION_ABORTABLE}
    assert len(h.log) == n and h.in_flight == []  # nothing written
    assert verify(pid + 1, epoch) == {A0: E.INVALID_PRODUCER_ID_MAPPING, B0: E.INVALID_PRODUCER_ID_MAPPING}
    assert verify(pid, epoch + 1) == {A0: E.PRODUCER_FENCED, B0: E.PRODUCER_FENCED}
    assert verify(pid, epoch, "other") == {A0: E.INVALID_PRODUCER_ID_MAPPING, B0: E.INVALID_PRODUCER_ID_MAPPING}
    assert verify(pid, epoch, "") == {A0: E.INVALID_REQUEST, B0: E.INVALID_REQUEST}
    assert h.end(pid, epoch, COMMIT) == E.NONE
    assert verify(pid, epoch) == {A0: E.CONCURRENT_TRANSACTIONS, B0: E.CONCURRENT_TRANSACTIONS}
    h.finish()
    assert verify(pid, epoch) == {A0: E.TRANSACTION_ABORTABLE, B0: E.TRANSACTION_ABORTABLE}  # complete: none open


# ================================================================== EndTxn and the markers


@pytest.mark.parametrize("result", [COMMIT, ABORT])
def test_end_txn_prepares_answers_then_sends_markers_and_completes(result: TxnResult) -> None:
    h = Harness()
    pid, epoch = started(h, A0, B0)
    out = h.c.end_txn(EndTxnRequest(TID, pid, epoch, result), 9, 0)
    assert out.replies == {} and out.markers == []  # nothing before PrepareX is committed
    h.take(out)
    assert h.complete() == {9: E.NONE}
    prepared = S.PREPARE_COMMIT if result == COMMIT else S.PREPARE_ABORT
    assert h.state().state == prepared and h.c.pending_state(TID) in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT)
    [m] = h.markers
    assert (m.producer_id, m.producer_epoch, m.coordinator_epoch, m.result, m.partitions) == (
        pid, epoch, 7, result, frozenset({A0, B0}))  # fmt: skip
    h.take(h.c.markers_written(m, {A0: E.NONE}))
    assert h.in_flight == []  # B0 still waits
    h.markers.clear()
    h.take(h.c.markers_written(m, {B0: E.NONE}))
    h.complete()
    done = S.COMPLETE_COMMIT if result == COMMIT else S.COMPLETE_ABORT
    assert (h.state().state, h.state().partitions) == (done, set())
    value = records(h)[-1][1]
    assert value is not None and value.transaction_status == done and value.transaction_partitions == ()
    assert h.end(pid, epoch, result) == E.NONE  # the same result again
    assert h.end(pid, epoch, ABORT if result == COMMIT else COMMIT) == E.INVALID_TXN_STATE


def test_end_txn_errors() -> None:
    h = Harness()
    assert h.end(1000, 0, COMMIT) == E.INVALID_PRODUCER_ID_MAPPING
    r = h.init()
    assert h.end(r.producer_id, r.producer_epoch, COMMIT) == E.INVALID_TXN_STATE  # Empty: nothing to end
    assert h.end(r.producer_id, r.producer_epoch, COMMIT, tid="") == E.INVALID_REQUEST
    assert h.add(r.producer_id, r.producer_epoch, A0) == E.NONE
    assert h.end(r.producer_id + 1, r.producer_epoch, COMMIT) == E.INVALID_PRODUCER_ID_MAPPING
    assert h.end(r.producer_id, r.producer_epoch + 1, COMMIT) == E.PRODUCER_FENCED
    assert h.end(r.producer_id, r.producer_epoch - 1, COMMIT) == E.PRODUCER_FENCED
    assert h.end(r.producer_id, r.producer_epoch, COMMIT, code=E.NOT_LEADER_OR_FOLLOWER) == E.NOT_COORDINATOR
    assert h.state().state == S.ONGOING  # the failed PrepareCommit changed nothing
    assert h.end(r.producer_id, r.producer_epoch, COMMIT) == E.NONE
    # Markers outstanding: the same result is told to wait, and so is another one.
    assert h.end(r.producer_id, r.producer_epoch, COMMIT) == E.CONCURRENT_TRANSACTIONS
    assert h.end(r.producer_id, r.producer_epoch, ABORT) == E.CONCURRENT_TRANSACTIONS


def test_prepared_without_a_pending_completion() -> None:
    """A completion record that failed for good (NOT_COORDINATOR) leaves the transaction
    prepared with nothing pending: the same result waits, another is INVALID_TXN_STATE."""
    h = Harness()
    pid, epoch = started(h)
    assert h.end(pid, epoch, COMMIT) == E.NONE
    h.deliver()
    h.complete(E.NOT_LEADER_OR_FOLLOWER)
    assert h.state().state == S.PREPARE_COMMIT and h.c.pending_state(TID) is None
    assert h.end(pid, epoch, COMMIT) == E.CONCURRENT_TRANSACTIONS
    assert h.end(pid, epoch, ABORT) == E.INVALID_TXN_STATE


def test_a_completion_record_that_could_not_be_written_is_written_again() -> None:
    h = Harness()
    pid, epoch = started(h)
    assert h.end(pid, epoch, ABORT) == E.NONE
    h.deliver()
    h.complete(E.NOT_ENOUGH_REPLICAS)
    assert h.c.pending_state(TID) == S.COMPLETE_ABORT
    assert h.c.next_deadline_ms() == 100  # retry.backoff.ms
    h.tick(99)
    assert h.in_flight == []
    h.tick(100)
    h.complete()
    assert h.state().state == S.COMPLETE_ABORT


def test_marker_results() -> None:
    h = Harness()
    pid, epoch = started(h, A0, A1, B0)
    assert h.end(pid, epoch, COMMIT) == E.NONE
    [m] = h.markers
    h.markers.clear()
    # A retriable error: sent again for that partition only; a partition that takes no markers is done.
    h.take(h.c.markers_written(m, {A0: E.NOT_LEADER_OR_FOLLOWER, A1: E.UNSUPPORTED_FOR_MESSAGE_FORMAT, B0: E.NONE}))
    [again] = h.markers
    assert again.partitions == {A0} and (again.producer_epoch, again.result) == (epoch, COMMIT)
    # A stale report (another epoch) is ignored.
    stale = MarkerRequest(TID, pid, epoch - 1, 7, COMMIT, m.partitions)
    assert h.c.markers_written(stale, {A0: E.NONE}).writes == []
    h.deliver()
    h.complete()
    assert h.state().state == S.COMPLETE_COMMIT


@pytest.mark.parametrize("code", [E.INVALID_PRODUCER_EPOCH, E.TRANSACTION_COORDINATOR_FENCED, E.CORRUPT_MESSAGE])
def test_marker_errors_that_stop_the_markers(code: E) -> None:
    """A newer producer or coordinator epoch at the partition (or an error Kafka calls fatal):
    no more markers; the transaction stays prepared until the partition is loaded again."""
    h = Harness()
    pid, epoch = started(h, A0, B0)
    assert h.end(pid, epoch, COMMIT) == E.NONE
    [m] = h.markers
    h.markers.clear()
    out = h.c.markers_written(m, {A0: code})
    assert out.markers == [] and out.writes == []
    assert h.c.markers_written(m, {B0: E.NONE}).writes == []
    assert h.state().state == S.PREPARE_COMMIT
    h.reload()
    assert [(r.partitions, r.coordinator_epoch) for r in h.markers] == [(frozenset({A0, B0}), 8)]


def test_deleted_partitions_need_no_marker() -> None:
    h = Harness()
    pid, epoch = started(h, A0, B0)
    assert h.end(pid, epoch, ABORT) == E.NONE
    [m] = h.markers
    h.markers.clear()
    h.take(h.c.markers_written(m, {A0: E.NONE}))
    h.take(h.c.partitions_deleted(m, [B0]))
    h.complete()
    assert h.state().state == S.COMPLETE_ABORT


def test_a_transaction_without_partitions_completes_at_once() -> None:
    h = Harness()
    r = h.init()
    assert h.add(r.producer_id, r.producer_epoch) == E.NONE  # Empty -> Ongoing with no partition
    assert h.end(r.producer_id, r.producer_epoch, COMMIT) == E.NONE
    assert h.markers == []
    h.complete()
    assert h.state().state == S.COMPLETE_COMMIT


# ================================================================== timers


def test_a_transaction_open_past_its_timeout_is_aborted_with_an_epoch_bump() -> None:
    h = Harness()
    r = h.init(timeout=1_000)
    h.now = 500
    assert h.add(r.producer_id, r.producer_epoch, A0) == E.NONE
    h.tick(1_600)  # timed out (500 + 1000 < 1600), but the check runs every 10 s
    assert h.in_flight == []
    assert h.c.next_deadline_ms() == 10_000
    h.tick(10_000)
    [[w]] = h.in_flight
    assert w.value is not None and (w.value.transaction_status, w.value.producer_epoch) == (S.PREPARE_ABORT, 1)
    h.complete()
    assert [(m.result, m.producer_epoch) for m in h.markers] == [(ABORT, 1)]
    assert h.add(r.producer_id, r.producer_epoch, A1) == E.PRODUCER_FENCED
    h.finish()
    assert h.state().state == S.COMPLETE_ABORT
    assert h.c.next_deadline_ms() == 20_000


def test_a_transaction_within_its_timeout_is_not_aborted() -> None:
    h = Harness()
    r = h.init(timeout=60_000)
    h.now = 1
    assert h.add(r.producer_id, r.producer_epoch, A0) == E.NONE
    h.tick(10_000)
    h.tick(60_001)  # start + timeout == now: not yet (Kafka: start + timeout < now)
    assert h.in_flight == []


def test_idle_transactional_ids_expire_with_a_tombstone() -> None:
    config = TxnConfig(transactional_id_expiration_ms=20_000, remove_expired_transaction_cleanup_interval_ms=10_000)
    h = Harness(config)
    r = h.init()
    rb = h.init(tid="busy", timeout=900_000)
    h.now = 10
    assert h.add(rb.producer_id, rb.producer_epoch, A0, tid="busy") == E.NONE  # Ongoing: never expires
    h.tick(10_000)  # the first check: nothing idle for 20 s yet
    assert h.in_flight == []
    h.tick(19_999)  # idle long enough, but the next check is at 20 s
    assert h.in_flight == []
    h.tick(20_000)
    assert [(w.key.transactional_id, w.value) for [w] in h.in_flight] == [(TID, None)]
    assert h.c.pending_state(TID) == S.DEAD
    assert h.init().error == E.CONCURRENT_TRANSACTIONS
    h.complete()
    assert TID not in h.c.txns and records(h)[-1] == (TID, None)
    assert h.add(r.producer_id, r.producer_epoch, A0) == E.INVALID_PRODUCER_ID_MAPPING
    h.reload()
    assert set(h.c.txns) == {"busy"}
    assert h.init() == InitProducerIdResult(E.NONE, 1002, 0)  # a new id


def test_a_failed_tombstone_keeps_the_id() -> None:
    h = Harness(TxnConfig(transactional_id_expiration_ms=1, remove_expired_transaction_cleanup_interval_ms=10))
    h.init()
    h.tick(10)
    h.complete(E.NOT_ENOUGH_REPLICAS)
    assert h.c.pending_state(TID) is None and h.state().state == S.EMPTY
    assert h.init() == InitProducerIdResult(E.NONE, 1000, 1)


# ================================================================== replay


def test_reload_rebuilds_the_state_and_resumes_the_markers() -> None:
    h = Harness(value_version=1)
    pid, epoch = started(h, A0)
    assert h.end(pid, epoch, COMMIT) == E.NONE
    h.init(tid="other")
    before = h.c.durable_state()
    h.reload(coordinator_epoch=9)
    assert h.c.durable_state() == before
    assert [(m.result, m.coordinator_epoch, m.partitions) for m in h.markers] == [(COMMIT, 9, frozenset({A0}))]
    assert h.end(pid, epoch, COMMIT) == E.CONCURRENT_TRANSACTIONS
    h.finish()
    assert h.state().state == S.COMPLETE_COMMIT
    assert h.end(pid, epoch, COMMIT) == E.NONE


def test_the_last_epoch_is_not_durable() -> None:
    """As in Kafka 3.9 (the record has no field for it): a retried InitProducerId that spans
    a coordinator move is fenced."""
    h = Harness()
    h.init()
    assert h.init(pid=1000, epoch=0) == InitProducerIdResult(E.NONE, 1000, 1)
    h.reload()
    assert h.init(pid=1000, epoch=0) == InitProducerIdResult(E.PRODUCER_FENCED)


def test_replay_of_states_kafka_never_writes() -> None:
    h = Harness()
    h.c.replay(TransactionLogKey("dead"), TransactionLogValue(1, 0, 1000, S.DEAD, (), 0, 0))
    h.c.replay(TransactionLogKey("fencing"), TransactionLogValue(2, 3, 1000, S.PREPARE_EPOCH_FENCE, (), 0, 0))
    assert "dead" not in h.c.txns
    assert h.c.txns["fencing"].state == S.ONGOING


# ================================================================== DescribeTransactions / ListTransactions


def test_describe() -> None:
    h = Harness()
    assert h.c.describe(TID).error == E.TRANSACTIONAL_ID_NOT_FOUND
    assert h.c.describe("").error == E.INVALID_REQUEST
    h.now = 40
    pid, epoch = started(h, B0, A1, A0)
    d = h.c.describe(TID)
    assert (d.error, d.state, d.producer_id, d.producer_epoch, d.transaction_timeout_ms) == (
        E.NONE, "Ongoing", pid, epoch, 60_000)  # fmt: skip
    assert (d.transaction_start_time_ms, d.topics) == (40, (("a", (0, 1)), ("b", (0,))))
    assert h.end(pid, epoch, COMMIT) == E.NONE
    assert h.c.describe(TID).state == "PrepareCommit"
    h.finish()
    assert (h.c.describe(TID).state, h.c.describe(TID).topics) == ("CompleteCommit", ())


def test_list_transactions() -> None:
    h = Harness()
    h.now = 100
    started(h)  # tx: producer 1000, Ongoing since 100
    h.init(tid="idle")  # producer 1001, Empty
    everything, unknown = h.c.list_transactions(frozenset(), frozenset(), -1, 200)
    assert [(t.transactional_id, t.producer_id, t.state) for t in everything] == [
        ("idle", 1001, "Empty"), (TID, 1000, "Ongoing")]  # fmt: skip
    assert unknown == []
    ongoing, unknown = h.c.list_transactions(frozenset(), frozenset({"Ongoing", "Bogus"}), -1, 200)
    assert [t.transactional_id for t in ongoing] == [TID] and unknown == ["Bogus"]
    assert [t.transactional_id for t in h.c.list_transactions(frozenset({1001}), frozenset(), -1, 200)[0]] == ["idle"]
    # Running for longer than 50 ms at 200: the Ongoing one (started at 100); Empty has no start (-1).
    assert [t.transactional_id for t in h.c.list_transactions(frozenset(), frozenset({"Ongoing"}), 50, 200)[0]] == [TID]
    assert h.c.list_transactions(frozenset(), frozenset({"Ongoing"}), 100, 200)[0] == []
