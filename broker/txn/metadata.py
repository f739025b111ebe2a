"""One transactional id's state at the coordinator, and its transitions (Kafka's
TransactionMetadata, Kafka 3.9), sans-IO.

A transition is computed first (`Transit`: the whole state it leads to), written to
`__transaction_state` as one record (`value_of`), and applied (`TxnMetadata.apply`) only
once that record is committed, so the state held in memory is always what the log says
(plus the fields Kafka keeps in memory only: the last producer id and epoch).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Final

from broker.txn.messages import NO_PRODUCER_EPOCH, TopicPartition
from broker.txn.records import PartitionsSchema, TransactionLogValue
from quorum.frozen_init import fast_frozen_init

__all__ = ["EPOCH_MAX", "Transit", "TxnMetadata", "TxnState", "epoch_exhausted", "metadata_of", "value_of"]

EPOCH_MAX: Final = 2**15 - 1  # Short.MaxValue: the epoch only the coordinator's fence may reach


def epoch_exhausted(epoch: int) -> bool:
    """No more epochs for this producer id (>= 32766): the next InitProducerId gets a new id,
    so that the coordinator can always fence a producer with one more bump."""
    return epoch >= EPOCH_MAX - 1


class TxnState(IntEnum):
    """TransactionStatus: the numbers are the record's, the names DescribeTransactions'."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6  # being expired: only ever a pending transition (its record is a tombstone)
    PREPARE_EPOCH_FENCE = 7  # Ongoing being fenced: never written by the coordinator

    @property
    def kafka_name(self) -> str:
        return "".join(word.capitalize() for word in self.name.split("_"))


PREPARED: Final = frozenset({TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT})
COMPLETED: Final = frozenset({TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT})
# States a transactional id may expire from (after transactional.id.expiration.ms idle).
EXPIRABLE: Final = frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT})


@dataclass(frozen=True, slots=True)
class Transit:
    """The whole state a transition leads to (Kafka's TxnTransitMetadata)."""

    state: TxnState
    producer_id: int
    last_producer_id: int  # in memory only
    producer_epoch: int
    last_producer_epoch: int  # in memory only
    timeout_ms: int
    partitions: frozenset[TopicPartition]
    start_ms: int  # -1: no transaction started
    last_update_ms: int


fast_frozen_init(Transit)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(slots=True)
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int  # -1 until the first InitProducerId is committed
    timeout_ms: int
    state: TxnState
    start_ms: int
    last_update_ms: int
    partitions: set[TopicPartition] = field(default_factory=set)
    # What Kafka keeps in memory only (not in the record): the producer id and epoch before
    # the last InitProducerId, so that a retried InitProducerId gets the same answer.
    last_producer_id: int = -1
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    # The tagged fields of a v1 value (KIP-890 part 2), kept as read.
    previous_producer_id: int = -1
    next_producer_id: int = -1
    client_transaction_version: int = 0

    def transit(
        self,
        state: TxnState,
        *,
        now_ms: int,
        producer_id: int | None = None,
        last_producer_id: int | None = None,
        producer_epoch: int | None = None,
        last_producer_epoch: int | None = None,
        timeout_ms: int | None = None,
        partitions: frozenset[TopicPartition] | None = None,
        start_ms: int | None = None,
    ) -> Transit:
        """The transition to `state`, every field the current one unless given."""
        return Transit(
            state,
            self.producer_id if producer_id is None else producer_id,
            self.last_producer_id if last_producer_id is None else last_producer_id,
            self.producer_epoch if producer_epoch is None else producer_epoch,
            self.last_producer_epoch if last_producer_epoch is None else last_producer_epoch,
            self.timeout_ms if timeout_ms is None else timeout_ms,
            frozenset(self.partitions) if partitions is None else partitions,
            self.start_ms if start_ms is None else start_ms,
            now_ms,
        )

    def apply(self, t: Transit) -> None:
        """The transition's record is committed: this is the state now."""
        self.state = t.state
        self.producer_id = t.producer_id
        self.last_producer_id = t.last_producer_id
        self.producer_epoch = t.producer_epoch
        self.last_producer_epoch = t.last_producer_epoch
        self.timeout_ms = t.timeout_ms
        self.partitions = set(t.partitions)
        self.start_ms = t.start_ms
        self.last_update_ms = t.last_update_ms


def value_of(m: TxnMetadata, t: Transit | None = None) -> TransactionLogValue:
    """The record value of `m` after transition `t` (or as it is): partitions grouped by topic,
    sorted; null for Empty (as Kafka writes it)."""
    state = m.state if t is None else t.state
    partitions = frozenset(m.partitions) if t is None else t.partitions
    by_topic: dict[str, list[int]] = {}
    for topic, p in partitions:
        by_topic.setdefault(topic, []).append(p)
    schema = None if state == TxnState.EMPTY else tuple(
        PartitionsSchema(topic, tuple(sorted(by_topic[topic]))) for topic in sorted(by_topic)
    )  # fmt: skip
    return TransactionLogValue(
        producer_id=m.producer_id if t is None else t.producer_id,
        producer_epoch=m.producer_epoch if t is None else t.producer_epoch,
        transaction_timeout_ms=m.timeout_ms if t is None else t.timeout_ms,
        transaction_status=int(state),
        transaction_partitions=schema,
        transaction_last_update_timestamp_ms=m.last_update_ms if t is None else t.last_update_ms,
        transaction_start_timestamp_ms=m.start_ms if t is None else t.start_ms,
        previous_producer_id=m.previous_producer_id,
        next_producer_id=m.next_producer_id,
        client_transaction_version=m.client_transaction_version,
    )


def metadata_of(transactional_id: str, v: TransactionLogValue) -> TxnMetadata:
    """The state a record value describes (Kafka's readTxnRecordValue: the last producer id
    and epoch are unknown; an Empty transaction's partitions are ignored)."""
    state = TxnState(v.transaction_status)
    partitions: set[TopicPartition] = set()
    if state != TxnState.EMPTY:
        for schema in v.transaction_partitions or ():
            partitions.update((schema.topic, p) for p in schema.partition_ids)
    return TxnMetadata(
        transactional_id, v.producer_id, v.producer_epoch, v.transaction_timeout_ms, state,
        v.transaction_start_timestamp_ms, v.transaction_last_update_timestamp_ms, partitions,
        previous_producer_id=v.previous_producer_id, next_producer_id=v.next_producer_id,
        client_transaction_version=v.client_transaction_version,
    )  # fmt: skip
