"""KIP-890 part 1 on the produce path (Kafka 3.9's ReplicaManager
`appendRecordsWithTransactionVerification` and AddPartitionsToTxnManager), as a function the
replica manager awaits before it appends a Produce request's partitions.

For each partition whose first batch is transactional and whose producer has no transaction
open in this leader's log, the log's producer state hands out a guard
(`ProducerStateManager.start_verification`); the transaction coordinator is then asked, in one
round trip for all of them, whether those partitions are in the producer's transaction
(`TxnVerify`: AddPartitionsToTxn v4 with VerifyOnly, `broker.txn.verification`). A partition
the coordinator does not confirm is answered without an append, with the error a Produce
client understands (`produce_error`); the others are appended with their guards, which the
log checks (a marker that came meanwhile voids the guard: INVALID_TXN_STATE).

Transactional batches of more than one producer in one request: INVALID_PRODUCER_ID_MAPPING
for every partition of the request (Kafka refuses the request the same way).

The group coordinator's TxnOffsetCommit goes through the same rule (Kafka 3.9's
GroupCoordinator and `maybeStartTransactionVerificationForPartition`):
`verify_coordinator_write` starts the verification of its `__consumer_offsets` partition (no
sequence), asks the coordinator, and hands back the guard its transactional batch is then
appended with (`check_coordinator_append` checks it) and the coordinator's answer, which
`coordinator_write_error` turns into what TxnOffsetCommit answers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Final

from broker.log import PartitionLog
from broker.log.producer_state import NO_SEQUENCE, VERIFICATION_OFF, VerificationGuard, read_producer_fields
from broker.replica.requests import ProducePartition
from quorum.kafka_errors import ErrorCode

__all__ = [
    "TxnVerify",
    "Verified",
    "coordinator_write_error",
    "produce_error",
    "transactional_producer",
    "verify_coordinator_write",
    "verify_produce",
]

TopicPartition = tuple[str, int]
# (transactional id, producer id, producer epoch, partitions) -> each partition's coordinator code.
TxnVerify = Callable[[str, int, int, Iterable[TopicPartition]], Awaitable[dict[TopicPartition, ErrorCode]]]

# Coordinator answers that mean "not verified yet, try again": Kafka turns them into
# NOT_ENOUGH_REPLICAS, which every client retries without refreshing its metadata.
_RETRY_AS_NOT_ENOUGH_REPLICAS: Final = frozenset({
    ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.NETWORK_EXCEPTION, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
})  # fmt: skip


def transactional_producer(records: bytes | bytearray | memoryview) -> tuple[int, int, int] | None:
    """(producer id, epoch, base sequence) of the first batch when it is a transactional *data*
    batch; None otherwise (including too short to hold a header: validation refuses it). A
    control batch is left out on purpose, unlike the produce path's transactional check
    (`broker.kafka.produce`): a client's marker is refused by the log, not verified."""
    fields = read_producer_fields(records)
    if fields is None or not fields.is_transactional or fields.is_control:
        return None
    return fields.producer_id, fields.producer_epoch, fields.base_sequence


def produce_error(code: ErrorCode) -> ErrorCode:
    """What a Produce answers for a partition the coordinator did not confirm (Kafka 3.9:
    PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH and TRANSACTION_ABORTABLE INVALID_TXN_STATE
    for the Produce versions served here; availability errors NOT_ENOUGH_REPLICAS)."""
    if code in _RETRY_AS_NOT_ENOUGH_REPLICAS:
        return ErrorCode.NOT_ENOUGH_REPLICAS
    if code == ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if code == ErrorCode.TRANSACTION_ABORTABLE:
        return ErrorCode.INVALID_TXN_STATE
    return code


def coordinator_write_error(code: ErrorCode) -> ErrorCode:
    """What a coordinator's verified write (TxnOffsetCommit) answers for the transaction
    coordinator's `code` (Kafka 3.9's AddPartitionsToTxnManager, then
    GroupMetadataManager.maybeConvertOffsetCommitError for the one retriable error it turns
    into another): PRODUCER_FENCED is INVALID_PRODUCER_EPOCH, NETWORK_EXCEPTION
    COORDINATOR_LOAD_IN_PROGRESS (retried without a coordinator lookup). TRANSACTION_ABORTABLE
    stays: the request's version decides (INVALID_TXN_STATE before TxnOffsetCommit v4)."""
    if code == ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if code == ErrorCode.NETWORK_EXCEPTION:
        return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    return code


async def _ask(
    verify: TxnVerify, transactional_id: str, producer: tuple[int, int], partitions: Iterable[TopicPartition]
) -> dict[TopicPartition, ErrorCode]:
    """One round trip to the transaction coordinator; a partition its answer leaves out was
    not verified (UNKNOWN_SERVER_ERROR)."""
    wanted = list(partitions)
    codes = await verify(transactional_id, producer[0], producer[1], wanted)
    return {tp: codes.get(tp, ErrorCode.UNKNOWN_SERVER_ERROR) for tp in wanted}


async def verify_coordinator_write(
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    partition: TopicPartition,
    leader_log: Callable[[str, int], PartitionLog | None],
    verify: TxnVerify,
    now_ms: int,
) -> tuple[VerificationGuard | None, ErrorCode]:
    """KIP-890 for a coordinator's transactional write to `partition` (its own, led here): the
    guard to append with (None: the producer's transaction is open here already, nothing was
    asked) and the transaction coordinator's code for the partition (NONE: verified);
    NOT_LEADER_OR_FOLLOWER when this broker does not lead it."""
    plog = leader_log(*partition)
    if plog is None:
        return None, ErrorCode.NOT_LEADER_OR_FOLLOWER
    guard = plog.producers.start_verification(producer_id, sequence=NO_SEQUENCE, epoch=producer_epoch, now_ms=now_ms)
    if guard is None:
        return None, ErrorCode.NONE
    codes = await _ask(verify, transactional_id, (producer_id, producer_epoch), [partition])
    return guard, codes[partition]


class Verified:
    """The outcome for one request: each partition's guard for its append (by index in the
    request; VERIFICATION_OFF where nothing is verified) and the partitions refused."""

    __slots__ = ("guards", "refused")

    def __init__(self) -> None:
        self.guards: dict[int, VerificationGuard | None] = {}
        self.refused: dict[int, tuple[ErrorCode, str]] = {}

    def guard(self, index: int) -> VerificationGuard | None:
        return self.guards.get(index, VERIFICATION_OFF)


async def verify_produce(
    transactional_id: str,
    partitions: Sequence[ProducePartition],
    leader_log: Callable[[str, int], PartitionLog | None],
    verify: TxnVerify,
    now_ms: int,
) -> Verified:
    """Start the verifications of `partitions` (those this broker leads: `leader_log`), ask
    the coordinator once, and say which may be appended with which guard."""
    out = Verified()
    producers: set[tuple[int, int]] = set()
    asked: dict[TopicPartition, int] = {}
    for i, part in enumerate(partitions):
        producer = transactional_producer(part.records)
        if producer is None:
            continue
        pid, epoch, sequence = producer
        producers.add((pid, epoch))
        plog = leader_log(part.topic, part.partition)
        if plog is None:
            out.guards[i] = None  # not led here: the append answers why (and never unverified)
            continue
        guard = plog.producers.start_verification(pid, sequence=sequence, epoch=epoch, now_ms=now_ms)
        out.guards[i] = guard
        if guard is not None:
            asked[(part.topic, part.partition)] = i
    if len(producers) > 1:
        why = "Transactional records contained more than one producer ID"
        out.refused = {i: (ErrorCode.INVALID_PRODUCER_ID_MAPPING, why) for i in range(len(partitions))}
        return out
    if not asked:
        return out
    ((pid, epoch),) = producers
    codes = await _ask(verify, transactional_id, (pid, epoch), asked)
    for tp, i in asked.items():
        code = codes[tp]
        if code != ErrorCode.NONE:
            answer = produce_error(code)
            why = (
                "Partition was not added to the transaction"
                if answer == ErrorCode.INVALID_TXN_STATE
                else f"Unable to verify the partition has been added to the transaction: {code.name}"
            )
            out.refused[i] = (answer, why)
    return out
