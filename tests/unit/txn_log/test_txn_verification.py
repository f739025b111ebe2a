"""KIP-890 part 1 (broker/log/producer_state.py's verification guards and
broker/replica/txn_verification.py): a partition leader appends a transaction's first batch
only with the guard it got before asking the coordinator, and only if the coordinator said
the partition is in the transaction. Real `PartitionLog`s on disk; the coordinator's answer
is a function of the partitions (what `TxnVerifier.verify` returns over the wire)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from pathlib import Path

import pytest
from test_txn_log import ABORT, COMMIT, NOW, open_log, plain, refused, tbatch

from broker.log import PartitionLog
from broker.log.producer_state import VerificationGuard
from broker.replica.requests import ProducePartition
from broker.replica.txn_verification import produce_error, transactional_producer, verify_produce
from quorum.kafka_errors import ErrorCode

TP = tuple[str, int]


def test_a_transactions_first_batch_needs_the_guard_of_its_verification(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    # Not verified at all (a guard of None: none was started): refused, nothing written.
    assert refused(lambda: plog.append_as_leader(tbatch(7, 0, 0), 0, NOW, verification=None)) == (
        ErrorCode.INVALID_TXN_STATE
    )
    # Another verification's guard: refused.
    guard = plog.producers.start_verification(7, epoch=0, sequence=0, now_ms=NOW)
    assert isinstance(guard, VerificationGuard)
    assert refused(lambda: plog.append_as_leader(tbatch(7, 0, 0), 0, NOW, verification=VerificationGuard())) == (
        ErrorCode.INVALID_TXN_STATE
    )
    assert plog.log_end_offset == 0
    # The same verification again hands out the same guard; with it the batch is written.
    assert plog.producers.start_verification(7, epoch=0, sequence=0, now_ms=NOW) is guard
    plog.append_as_leader(tbatch(7, 0, 0), 0, NOW, verification=guard)
    # The transaction is open here now: nothing more to verify, later batches need no guard.
    assert plog.producers.start_verification(7, epoch=0, sequence=1, now_ms=NOW) is None
    plog.append_as_leader(tbatch(7, 0, 1), 0, NOW, verification=None)
    assert plog.log_end_offset == 2


def test_a_marker_between_verification_and_append_voids_the_guard(tmp_path: Path) -> None:
    """The race KIP-890 closes: the coordinator said "in the transaction", then the transaction
    was aborted (its marker written here) before the verified batch arrived; a late batch of
    the aborted transaction must not open a new one that no coordinator will ever end."""
    plog = open_log(tmp_path)
    first = plog.producers.start_verification(7, epoch=0, sequence=0, now_ms=NOW)
    plog.append_as_leader(tbatch(7, 0, 0), 0, NOW, verification=first)
    plog.append_marker(7, 0, COMMIT, 0, NOW)
    guard = plog.producers.start_verification(7, epoch=0, sequence=1, now_ms=NOW)
    plog.append_marker(7, 0, ABORT, 0, NOW)  # e.g. the coordinator's abort of the next transaction
    assert refused(lambda: plog.append_as_leader(tbatch(7, 0, 1), 0, NOW, verification=guard)) == (
        ErrorCode.INVALID_TXN_STATE
    )
    assert plog.last_stable_offset(plog.log_end_offset) == plog.log_end_offset  # nothing hangs


def test_while_verifying_a_higher_sequence_waits_for_the_lowest(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    guard = plog.producers.start_verification(7, epoch=0, sequence=0, now_ms=NOW)
    assert plog.producers.start_verification(7, epoch=0, sequence=1, now_ms=NOW) is guard
    assert refused(lambda: plog.append_as_leader(tbatch(7, 0, 1), 0, NOW, verification=guard)) == (
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    )
    plog.append_as_leader(tbatch(7, 0, 0), 0, NOW, verification=guard)
    plog.append_as_leader(tbatch(7, 0, 1), 0, NOW, verification=None)


def test_unfinished_verifications_expire_with_the_producers(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    first = plog.producers.start_verification(7, epoch=0, sequence=0, now_ms=NOW)
    plog.producers.remove_expired(NOW + plog.producers.expiration_ms)
    assert plog.producers.start_verification(7, epoch=0, sequence=0, now_ms=NOW) is not first


def test_without_verification_the_log_takes_the_batch_as_before(tmp_path: Path) -> None:
    plog = open_log(tmp_path)  # transaction.partition.verification.enable=false: no guard argument
    plog.append_as_leader(tbatch(7, 0, 0), 0, NOW)
    assert plog.producers.last_entry(7).current_txn_first_offset == 0  # type: ignore[union-attr]


def test_kafka_turns_coordinator_answers_into_produce_errors() -> None:
    retriable = (ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                 ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
                 ErrorCode.NETWORK_EXCEPTION)  # fmt: skip
    for code in retriable:
        assert produce_error(code) == ErrorCode.NOT_ENOUGH_REPLICAS
    assert produce_error(ErrorCode.PRODUCER_FENCED) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert produce_error(ErrorCode.TRANSACTION_ABORTABLE) == ErrorCode.INVALID_TXN_STATE
    assert produce_error(ErrorCode.INVALID_PRODUCER_ID_MAPPING) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert transactional_producer(tbatch(7, 3, 5)) == (7, 3, 5)
    assert transactional_producer(tbatch(7, 3, 5, transactional=False)) is None
    assert transactional_producer(plain()) is None and transactional_producer(b"\x00" * 10) is None


class Coordinator:
    """The coordinator's answers for one transactional id: the partitions in its transaction."""

    def __init__(self, in_transaction: set[TP], error: ErrorCode = ErrorCode.TRANSACTION_ABORTABLE) -> None:
        self.in_transaction = in_transaction
        self.error = error
        self.asked: list[tuple[str, int, int, list[TP]]] = []

    async def verify(self, tid: str, pid: int, epoch: int, partitions: Iterable[TP]) -> dict[TP, ErrorCode]:
        asked = sorted(partitions)
        self.asked.append((tid, pid, epoch, asked))
        return {tp: ErrorCode.NONE if tp in self.in_transaction else self.error for tp in asked}


def _logs(tmp_path: Path, n: int) -> dict[TP, PartitionLog]:
    return {("t", p): open_log(tmp_path, f"t-{p}") for p in range(n)}


def test_verify_produce_asks_once_for_the_partitions_without_an_open_transaction(tmp_path: Path) -> None:
    logs = _logs(tmp_path, 3)
    # Partition 2 already has the transaction open: not asked about.
    open_one = logs[("t", 2)]
    guard = open_one.producers.start_verification(7, epoch=0, sequence=0, now_ms=NOW)
    open_one.append_as_leader(tbatch(7, 0, 0), 0, NOW, verification=guard)
    coordinator = Coordinator({("t", 0)})
    parts = [ProducePartition("t", 0, tbatch(7, 0, 0)), ProducePartition("t", 1, tbatch(7, 0, 0)),
             ProducePartition("t", 2, tbatch(7, 0, 1)), ProducePartition("t", 3, tbatch(7, 0, 0))]  # fmt: skip
    out = asyncio.run(verify_produce("app", parts, lambda t, p: logs.get((t, p)), coordinator.verify, NOW))
    assert coordinator.asked == [("app", 7, 0, [("t", 0), ("t", 1)])]
    assert out.refused == {1: (ErrorCode.INVALID_TXN_STATE, "Partition was not added to the transaction")}
    assert isinstance(out.guard(0), VerificationGuard) and out.guard(2) is None
    assert out.guard(3) is None  # not led here: appended never unverified
    logs[("t", 0)].append_as_leader(parts[0].records, 0, NOW, verification=out.guard(0))
    logs[("t", 2)].append_as_leader(parts[2].records, 0, NOW, verification=out.guard(2))


@pytest.mark.parametrize(
    ("answer", "produce"),
    [(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_ENOUGH_REPLICAS),
     (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH)],
)  # fmt: skip
def test_verify_produce_answers_what_the_client_understands(
    tmp_path: Path, answer: ErrorCode, produce: ErrorCode
) -> None:
    logs = _logs(tmp_path, 1)
    coordinator = Coordinator(set(), answer)
    parts = [ProducePartition("t", 0, tbatch(7, 0, 0))]
    out = asyncio.run(verify_produce("app", parts, lambda t, p: logs.get((t, p)), coordinator.verify, NOW))
    assert out.refused[0][0] == produce


def test_two_producers_in_one_request_are_refused_whole(tmp_path: Path) -> None:
    logs = _logs(tmp_path, 2)
    coordinator = Coordinator({("t", 0), ("t", 1)})
    parts = [ProducePartition("t", 0, tbatch(7, 0, 0)), ProducePartition("t", 1, tbatch(8, 0, 0))]
    out = asyncio.run(verify_produce("app", parts, lambda t, p: logs.get((t, p)), coordinator.verify, NOW))
    assert {i: e for i, (e, _) in out.refused.items()} == {0: ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                                                          1: ErrorCode.INVALID_PRODUCER_ID_MAPPING}  # fmt: skip
    assert coordinator.asked == []


def test_one_header_reader_and_the_control_batch_difference() -> None:
    """The produce path's transactional check and KIP-890's reader read the same header
    fields (`read_producer_fields`); a control batch counts as transactional for the former
    (a client's marker without a transactional id is refused) and is never verified."""
    from broker.kafka.produce import _is_transactional
    from broker.log.producer_state import read_producer_fields
    from quorum.storage.batch_layout import ATTR_CONTROL, ATTRIBUTES_AT

    control = bytearray(tbatch(7, 3, 5))
    control[ATTRIBUTES_AT + 1] |= ATTR_CONTROL
    fields = read_producer_fields(control)
    assert fields is not None and fields.is_control and fields.is_transactional
    assert (fields.producer_id, fields.producer_epoch, fields.base_sequence) == (7, 3, 5)
    assert _is_transactional(memoryview(control)) and transactional_producer(control) is None
    assert _is_transactional(memoryview(tbatch(7, 3, 5))) and not _is_transactional(memoryview(plain()))
    assert not _is_transactional(None) and read_producer_fields(b"\x00" * 60) is None


def test_a_coordinators_transactional_write_needs_its_guard_too(tmp_path: Path) -> None:
    """The group coordinator's TxnOffsetCommit batch (a coordinator's write: base sequence 0,
    no sequence rule) is checked against its KIP-890 guard as a client's batch is."""
    plog = open_log(tmp_path)
    assert refused(lambda: plog.append_as_leader(tbatch(7, 0, 0), 0, NOW, coordinator=True, verification=None)) == (
        ErrorCode.INVALID_TXN_STATE
    )
    assert plog.log_end_offset == 0
    guard = plog.producers.start_verification(7, epoch=0, sequence=-1, now_ms=NOW)
    assert (
        refused(
            lambda: plog.append_as_leader(tbatch(7, 0, 0), 0, NOW, coordinator=True, verification=VerificationGuard())
        )
        == ErrorCode.INVALID_TXN_STATE
    )
    plog.append_as_leader(tbatch(7, 0, 0), 0, NOW, coordinator=True, verification=guard)
    plog.append_as_leader(tbatch(7, 0, 0), 0, NOW, coordinator=True, verification=None)  # open here now
    plog.append_marker(7, 0, ABORT, 0, NOW)
    assert refused(lambda: plog.append_as_leader(tbatch(7, 0, 0), 0, NOW, coordinator=True, verification=guard)) == (
        ErrorCode.INVALID_TXN_STATE
    )
    plog.append_as_leader(tbatch(8, 0, 0), 0, NOW, coordinator=True)  # verification off: as before
    assert plog.log_end_offset == 4


def test_verify_coordinator_write_asks_once_and_hands_back_the_guard(tmp_path: Path) -> None:
    from broker.replica.txn_verification import coordinator_write_error, verify_coordinator_write

    plog = open_log(tmp_path)
    asked: list[tuple[str, int, int, list[TP]]] = []
    answer = ErrorCode.TRANSACTION_ABORTABLE

    async def verify(tid: str, pid: int, epoch: int, parts: Iterable[TP]) -> dict[TP, ErrorCode]:
        asked.append((tid, pid, epoch, list(parts)))
        return dict.fromkeys(asked[-1][3], answer)

    def led(topic: str, partition: int) -> PartitionLog | None:
        return plog if (topic, partition) == ("__consumer_offsets", 3) else None

    def run(partition: int) -> tuple[VerificationGuard | None, ErrorCode]:
        return asyncio.run(verify_coordinator_write("tx", 7, 0, ("__consumer_offsets", partition), led, verify, NOW))

    guard, code = run(3)
    assert isinstance(guard, VerificationGuard) and code == ErrorCode.TRANSACTION_ABORTABLE
    assert asked == [("tx", 7, 0, [("__consumer_offsets", 3)])]
    answer = ErrorCode.NONE
    assert run(3) == (guard, ErrorCode.NONE)
    assert run(4) == (None, ErrorCode.NOT_LEADER_OR_FOLLOWER)
    plog.append_as_leader(tbatch(7, 0, 0), 0, NOW, coordinator=True, verification=guard)
    assert run(3) == (None, ErrorCode.NONE) and len(asked) == 2  # open here: nothing asked
    assert coordinator_write_error(ErrorCode.PRODUCER_FENCED) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert coordinator_write_error(ErrorCode.NETWORK_EXCEPTION) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert coordinator_write_error(ErrorCode.TRANSACTION_ABORTABLE) == ErrorCode.TRANSACTION_ABORTABLE
