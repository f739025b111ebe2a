"""The transaction coordinator's requests and answers, as plain frozen values.

The listener (a later slice) builds the requests from decoded frames and encodes the
answers; the coordinator (`broker.txn.coordinator.TxnCoordinator`) takes and returns them.
Producer ids are int64, epochs int16 (-1: none), times milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from quorum.frozen_init import fast_frozen_init
from quorum.kafka_errors import ErrorCode

__all__ = [
    "AddOffsetsRequest",
    "AddPartitionsRequest",
    "EndTxnRequest",
    "InitProducerIdRequest",
    "InitProducerIdResult",
    "MarkerRequest",
    "TopicPartition",
    "TransactionDescription",
    "TransactionListing",
    "TxnResult",
]

TopicPartition = tuple[str, int]
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1


class TxnResult(IntEnum):
    """How a transaction ends: Kafka's TransactionResult (and control record type)."""

    ABORT = 0
    COMMIT = 1


@dataclass(frozen=True, slots=True)
class InitProducerIdRequest:
    transactional_id: str
    transaction_timeout_ms: int
    producer_id: int = NO_PRODUCER_ID  # v3+: the producer's current id and epoch, to bump
    producer_epoch: int = NO_PRODUCER_EPOCH


fast_frozen_init(InitProducerIdRequest)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class InitProducerIdResult:
    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


fast_frozen_init(InitProducerIdResult)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class AddPartitionsRequest:
    """AddPartitionsToTxn for one transaction (v4+ batches several: one request each)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: frozenset[TopicPartition]


fast_frozen_init(AddPartitionsRequest)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class AddOffsetsRequest:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    group_id: str


fast_frozen_init(AddOffsetsRequest)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class EndTxnRequest:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    result: TxnResult


fast_frozen_init(EndTxnRequest)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class MarkerRequest:
    """The COMMIT/ABORT markers one transaction needs (WriteTxnMarkers' entry): the runtime
    sends them to the partitions' leaders and reports each partition's result."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int  # the leader epoch of the coordinator's __transaction_state partition
    result: TxnResult
    partitions: frozenset[TopicPartition]


fast_frozen_init(MarkerRequest)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    """DescribeTransactions' answer for one transactional id (KIP-664)."""

    error: ErrorCode
    transactional_id: str
    state: str = ""  # Kafka's state name: "Empty", "Ongoing", ...
    transaction_timeout_ms: int = 0
    transaction_start_time_ms: int = -1
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    topics: tuple[tuple[str, tuple[int, ...]], ...] = ()  # (topic, partitions), sorted


fast_frozen_init(TransactionDescription)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class TransactionListing:
    """One entry of ListTransactions (KIP-664)."""

    transactional_id: str
    producer_id: int
    state: str


fast_frozen_init(TransactionListing)  # not a decorator: mypyc makes a decorated class a Python class
