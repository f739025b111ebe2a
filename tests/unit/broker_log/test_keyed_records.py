"""`encode_keyed_records` (a coordinator's batch) writes exactly what `encode_records` writes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.log.records import BatchHeader, Record, encode_keyed_records, encode_records
from quorum.storage.batch_layout import ATTR_TRANSACTIONAL

pairs = st.lists(st.tuples(st.binary(max_size=300), st.none() | st.binary(max_size=3000)), min_size=1, max_size=40)
headers = st.sampled_from([
    BatchHeader(partition_leader_epoch=-1, attributes=0),
    BatchHeader(-1, ATTR_TRANSACTIONAL, producer_id=77, producer_epoch=3, base_sequence=0),
    BatchHeader(-1, 1),  # gzip
    BatchHeader(-1, 8, max_timestamp=5),  # LogAppendTime: the general path
    BatchHeader(-1, 0, delete_horizon_ms=9),  # a delete horizon: the general path
])  # fmt: skip


@given(pairs, st.integers(min_value=0, max_value=2**45), headers)
def test_keyed_records_are_encoded_as_records_would_be(
    records: list[tuple[bytes, bytes | None]], timestamp: int, header: BatchHeader
) -> None:
    expected = encode_records([Record(i, timestamp, k, v) for i, (k, v) in enumerate(records)], header)
    assert encode_keyed_records(records, timestamp, header) == expected


def test_an_empty_batch_is_refused() -> None:
    with pytest.raises(ValueError):
        encode_keyed_records([], 1, BatchHeader(-1, 0))
