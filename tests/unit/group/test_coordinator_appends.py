"""The group coordinator's transactional batches in a real partition log (Kafka's
AppendOrigin.COORDINATOR): each carries base sequence 0, so the log checks only the producer
epoch; a client's batch alike would be taken for a duplicate of the first and not written."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from broker.coordinator.append_queue import encode_batch
from broker.group.records import OffsetKey, OffsetValue, encode_key, encode_value
from broker.log import LogConfig, LogError, PartitionLog
from quorum.kafka_errors import ErrorCode
from tests.unit.group.test_runtime_txn_offsets import NOW

PID = 9_000


def txn_batch(offset: int, epoch: int = 3) -> bytes:
    """What the coordinator appends for one TxnOffsetCommit of producer PID."""
    record = (encode_key(OffsetKey("g", "t", 0)), encode_value(OffsetValue(offset, -1, "", NOW)))
    return encode_batch([record], NOW, (PID, epoch))


def offsets_log(tmp_path: Path) -> PartitionLog:
    return PartitionLog.open(
        tmp_path / "__consumer_offsets-0", LogConfig(cleanup_policy=("compact",)), topic_id=uuid.uuid4()
    )


def test_every_transactional_offset_commit_of_a_transaction_is_written(tmp_path: Path) -> None:
    plog = offsets_log(tmp_path)
    first = plog.append_as_leader(txn_batch(41), 0, NOW, coordinator=True)
    second = plog.append_as_leader(txn_batch(42), 0, NOW, coordinator=True)
    assert (first.first_offset, second.first_offset) == (0, 1)
    assert plog.log_end_offset == 2


def test_as_a_clients_batch_the_second_would_be_a_duplicate(tmp_path: Path) -> None:
    plog = offsets_log(tmp_path)
    plog.append_as_leader(txn_batch(41), 0, NOW)
    again = plog.append_as_leader(txn_batch(42), 0, NOW)
    assert again.first_offset == 0 and plog.log_end_offset == 1  # answered, not written


def test_an_older_producer_epoch_is_refused(tmp_path: Path) -> None:
    plog = offsets_log(tmp_path)
    plog.append_as_leader(txn_batch(41, epoch=3), 0, NOW, coordinator=True)
    with pytest.raises(LogError) as refused:
        plog.append_as_leader(txn_batch(42, epoch=2), 0, NOW, coordinator=True)
    assert refused.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    assert plog.log_end_offset == 1
