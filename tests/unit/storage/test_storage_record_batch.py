"""Record batch codec: round trips, Kafka layout (cross-checked against kio), robustness."""

from __future__ import annotations

import io
import struct
import time
import uuid

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.records.readers import read_batch
from kio.schema.leader_change_message.v0.data import LeaderChangeMessage as KioLeaderChangeV0
from kio.schema.leader_change_message.v0.data import Voter as KioVoterV0
from kio.schema.leader_change_message.v1.data import LeaderChangeMessage as KioLeaderChangeV1
from kio.schema.leader_change_message.v1.data import Voter as KioVoterV1
from kio.schema.snapshot_footer_record.v0.data import SnapshotFooterRecord as KioFooter
from kio.schema.snapshot_header_record.v0.data import SnapshotHeaderRecord as KioHeader
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32, i64

from quorum.raft.control_records import (
    LeaderChange,
    decode_leader_change,
    decode_snapshot_footer,
    decode_snapshot_header,
    encode_leader_change,
    encode_snapshot_footer,
    encode_snapshot_header,
)
from quorum.raft.types import Batch, ControlType
from quorum.storage import record_batch as rb
from quorum.storage.record_batch import (
    BATCH_HEADER_SIZE,
    CorruptRecordError,
    decode_batches,
    encode_batch,
    encode_batches,
    peek_batch_header,
    scan_batches,
)
from tests.scale import examples

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
CONTROL = st.sampled_from([None, *ControlType])


@st.composite
def batches(
    draw: st.DrawFn,
    *,
    base_offset: st.SearchStrategy[int] | None = None,
    timestamps: st.SearchStrategy[int] = INT64,
    max_records: int = 20,
    max_value: int = 64,
) -> Batch:
    records = draw(st.lists(st.binary(max_size=max_value), min_size=1, max_size=max_records))
    return Batch(
        base_offset=draw(base_offset if base_offset is not None else st.integers(0, 2**62)),
        epoch=draw(st.integers(0, 2**31 - 1)),
        records=tuple(records),
        timestamp_ms=draw(timestamps),
        control_type=draw(CONTROL),
    )


@st.composite
def batch_runs(draw: st.DrawFn, max_batches: int = 6) -> list[Batch]:
    """Contiguous batches, as a log or a Fetch response holds them."""
    n = draw(st.integers(1, max_batches))
    offset = draw(st.integers(0, 2**40))
    out = []
    for _ in range(n):
        b = draw(batches(base_offset=st.just(offset), max_records=5, max_value=32))
        out.append(b)
        offset = b.end_offset
    return out


# --------------------------------------------------------------------------- round trips


def test_round_trip_data_batch() -> None:
    batch = Batch(base_offset=42, epoch=7, records=(b"a", b"", b"x" * 300), timestamp_ms=1_700_000_000_123)
    data = encode_batch(batch)
    assert decode_batches(data) == ([batch], len(data))


def test_round_trip_control_batch() -> None:
    value = encode_leader_change(1, [1, 2, 3], [1, 3])
    batch = Batch(0, 3, (value,), 99, ControlType.LEADER_CHANGE)
    data = encode_batch(batch)
    (decoded,), consumed = decode_batches(data)
    assert decoded == batch and consumed == len(data)
    assert decoded.is_control
    assert decode_leader_change(decoded.records[0]) == LeaderChange(1, (1, 2, 3), (1, 3))


def test_round_trip_beyond_varint_table() -> None:
    # More records than the precomputed varint table and values longer than it: slow paths.
    records = tuple(i.to_bytes(3, "big") for i in range(20_000)) + (b"v" * 70_000,)
    batch = Batch(2**40, 2**31 - 1, records, -5)
    data = encode_batch(batch)
    assert decode_batches(data) == ([batch], len(data))


def test_empty_batch_is_rejected() -> None:
    with pytest.raises(ValueError):
        encode_batch(Batch(0, 1, ()))


@settings(max_examples=examples(200))
@given(batches())
def test_property_round_trip(batch: Batch) -> None:
    data = encode_batch(batch)
    assert decode_batches(data) == ([batch], len(data))
    assert decode_batches(memoryview(data)) == ([batch], len(data))
    assert decode_batches(bytearray(data), verify_crc=False) == ([batch], len(data))


@settings(max_examples=examples(200))
@given(batch_runs())
def test_property_round_trip_many(run: list[Batch]) -> None:
    data = encode_batches(run)
    result = scan_batches(data)
    assert result.batches == run and result.consumed == len(data) and result.error is None
    pos = 0
    for batch, position in zip(run, result.positions, strict=True):
        assert position == pos
        peek = peek_batch_header(data, pos)
        assert peek is not None
        base, size, epoch, last_delta = peek
        assert (base, epoch, last_delta) == (batch.base_offset, batch.epoch, len(batch.records) - 1)
        assert size == len(encode_batch(batch))
        pos += size


# --------------------------------------------------------------------------- layout / kio cross-check


def test_header_layout() -> None:
    batch = Batch(10, 4, (b"hello", b"world"), 1234)
    data = encode_batch(batch)
    base, length, epoch, magic, crc = struct.unpack_from(">qiibI", data, 0)
    assert (base, length, epoch, magic) == (10, len(data) - 12, 4, 2)
    assert crc == crc32c(data[21:])
    attrs, last_delta, base_ts, max_ts, pid, pepoch, seq, count = struct.unpack_from(">hiqqqhii", data, 21)
    assert (attrs, last_delta, base_ts, max_ts, pid, pepoch, seq, count) == (0, 1, 1234, 1234, -1, -1, -1, 2)
    # First record: length 11 (zigzag 22), attrs 0, tsDelta 0, offsetDelta 0, key -1, len 5, value, 0 headers.
    assert data[BATCH_HEADER_SIZE : BATCH_HEADER_SIZE + 12] == b"\x16\x00\x00\x00\x01\x0ahello\x00"
    assert data[BATCH_HEADER_SIZE + 12 :] == b"\x16\x00\x00\x02\x01\x0aworld\x00"


def test_control_attribute_and_key() -> None:
    data = encode_batch(Batch(0, 1, (b"\x00\x00",), 0, ControlType.SNAPSHOT_FOOTER))
    (attrs,) = struct.unpack_from(">h", data, 21)
    assert attrs == 0x20
    # keyLength 4 (zigzag 8), key = version 0, type 4.
    assert data[BATCH_HEADER_SIZE + 4 : BATCH_HEADER_SIZE + 9] == b"\x08\x00\x00\x00\x04"


@settings(max_examples=examples(200))
@given(batches(timestamps=st.integers(0, 4_000_000_000_000)))
def test_kio_reads_our_batches(batch: Batch) -> None:
    """kio's independent v2 reader (it verifies the CRC and framing) agrees on every field."""
    data = encode_batch(batch)
    kb, size = read_batch(data, 0)
    assert size == len(data)
    assert kb.base_offset == batch.base_offset
    assert kb.batch_length == len(data) - 12
    assert kb.partition_leader_epoch == batch.epoch
    assert kb.attributes == (0x20 if batch.is_control else 0)
    assert kb.last_offset_delta == len(batch.records) - 1
    assert kb.base_timestamp == kb.max_timestamp == batch.timestamp_ms
    assert (kb.producer_id, kb.producer_epoch, kb.base_sequence) == (-1, -1, -1)
    assert [r.offset for r in kb.records] == list(range(batch.base_offset, batch.end_offset))
    assert tuple(r.value for r in kb.records) == batch.records
    expected_key = None if batch.control_type is None else struct.pack(">hh", 0, batch.control_type)
    assert all(r.key == expected_key and r.headers == () for r in kb.records)
    # kio truncates record timestamps to whole seconds.
    assert all(int(r.timestamp.timestamp()) == batch.timestamp_ms // 1000 for r in kb.records)


def test_we_read_kio_written_batches() -> None:
    """A batch written by kio's writer (per-record timestamps, headers, keys) decodes."""
    import datetime

    from kio.records.schema import NewRecordBatch, Record, RecordHeader
    from kio.records.writers import write_new_batch
    from kio.static.primitive import TZAwareMicros, i8

    t0 = datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)
    records = tuple(
        Record(
            attributes=i8(0),
            timestamp=TZAwareMicros.parse(t0 + datetime.timedelta(seconds=i)),
            offset=i64(100 + i),
            key=b"k" if i == 1 else None,
            value=b"value-%d" % i,
            headers=(RecordHeader(key=b"h", value=None),) if i == 2 else (),
        )
        for i in range(4)
    )
    buf = io.BytesIO()
    write_new_batch(
        buf,
        NewRecordBatch(
            producer_id=i64(-1),
            producer_epoch=i16(-1),
            partition_leader_epoch=i32(9),
            base_sequence=i32(-1),
            records=records,
            attributes=i16(0),
        ),
    )
    (batch,), consumed = decode_batches(buf.getvalue())
    assert consumed == len(buf.getvalue())
    assert batch == Batch(100, 9, tuple(b"value-%d" % i for i in range(4)), int(t0.timestamp() * 1000))


# --------------------------------------------------------------------------- errors, torn tails


def _batch_bytes() -> bytes:
    return encode_batch(Batch(5, 2, (b"abc", b"defg"), 77))


def test_torn_tail_stops_without_error() -> None:
    one = _batch_bytes()
    two = encode_batch(Batch(7, 2, (b"z",), 78))
    data = one + two
    for cut in range(len(data) + 1):
        got, consumed = decode_batches(data[:cut])
        if cut < len(one):
            assert (got, consumed) == ([], 0)
        elif cut < len(data):
            assert consumed == len(one) and len(got) == 1
        else:
            assert consumed == len(data) and len(got) == 2


def _corrupt(data: bytes) -> CorruptRecordError:
    with pytest.raises(CorruptRecordError) as info:
        decode_batches(data)
    return info.value


def test_crc_mismatch() -> None:
    data = bytearray(_batch_bytes())
    data[-2] ^= 0x40
    err = _corrupt(bytes(data))
    assert "CRC" in str(err) and err.position == 0
    # Without CRC verification a value byte flip is just different data.
    got, _ = decode_batches(bytes(data), verify_crc=False)
    assert got[0].records[1] != b"defg"


def test_corruption_position_points_at_second_batch() -> None:
    first = _batch_bytes()
    second = bytearray(encode_batch(Batch(7, 2, (b"z",), 78)))
    second[-1] ^= 1
    result = scan_batches(first + bytes(second))
    assert len(result.batches) == 1 and result.consumed == len(first)
    assert result.error is not None and result.error.position == len(first)
    with pytest.raises(CorruptRecordError):
        decode_batches(first + bytes(second))


def _rewrite_header(data: bytes, fmt: str, offset: int, *values: int) -> bytes:
    buf = bytearray(data)
    struct.pack_into(fmt, buf, offset, *values)
    struct.pack_into(">I", buf, 17, crc32c(bytes(buf[21:])))
    return bytes(buf)


def test_bad_magic() -> None:
    assert "magic" in str(_corrupt(_rewrite_header(_batch_bytes(), ">b", 16, 1)))


def test_compressed_attribute() -> None:
    assert "compressed" in str(_corrupt(_rewrite_header(_batch_bytes(), ">h", 21, 1)))


@pytest.mark.parametrize("length", [-1, -(2**31), 0, 48, 2**31 - 1])
def test_bad_lengths(length: int) -> None:
    data = bytearray(_batch_bytes())
    struct.pack_into(">i", data, 8, length)
    assert "length" in str(_corrupt(bytes(data)))


def test_bad_record_count_and_delta() -> None:
    data = _batch_bytes()
    for fmt, off, value in ((">i", 57, 3), (">i", 57, 0), (">i", 57, -1), (">i", 23, 5), (">i", 57, 2**31 - 1)):
        _corrupt(_rewrite_header(data, fmt, off, value))


def test_negative_base_offset() -> None:
    _corrupt(_rewrite_header(_batch_bytes(), ">q", 0, -3))


def test_unknown_control_type() -> None:
    data = bytearray(encode_batch(Batch(0, 1, (b"x",), 0, ControlType.LEADER_CHANGE)))
    data[BATCH_HEADER_SIZE + 8] = 0  # the control type's low byte: COMMIT (0)
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    assert "control" in str(_corrupt(bytes(data)))


def _with_records(body: bytes, count: int, attributes: int = 0) -> bytes:
    """A batch with a valid header and CRC around arbitrary record bytes."""
    post = struct.pack(">hiqqqhii", attributes, count - 1, 0, 0, -1, -1, -1, count) + body
    return struct.pack(">qiibI", 0, len(post) + 9, 1, 2, crc32c(post)) + post


def test_malformed_records_with_valid_crc() -> None:
    cases = [
        b"\x0c\x00\x00\x00\x01\x02a\x00",  # length says 6, fields use 7
        b"\x0e\x00\x00\x02\x01\x02a\x00",  # offset delta 1 for the first record
        b"\x0e\x00\x00\x00\x01\x03a\x00",  # null value
        b"\x0e\x00\x00\x00\x01\x04a\x00",  # value longer than the record
        b"\x0e\x00\x00\x00\x01\x02a\x05",  # negative header count
        b"\x0e\x00\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x00",  # 11-byte varlong
        b"\xff\xff\xff\xff\xff\x01",  # 6-byte varint length
        b"\x0e\x00\x00\x00\x01\x02a\x00\x00",  # trailing byte after the last record
        b"\x0e\x00\x00\x00\x01\x02",  # record runs past the batch
    ]
    for body in cases:
        _corrupt(_with_records(body, 1))
    # Control batch whose record has no key.
    _corrupt(_with_records(b"\x0e\x00\x00\x00\x01\x02a\x00", 1, attributes=0x20))
    # And a valid one built the same way decodes (the helper itself is right).
    assert decode_batches(_with_records(b"\x0e\x00\x00\x00\x01\x02a\x00", 1))[0][0].records == (b"a",)


def test_record_headers_are_skipped() -> None:
    # One header: key "k" (len 1 -> 0x02), null value (-1 -> 0x01).
    body = b"\x14\x00\x00\x00\x01\x02a\x02\x02k\x01"
    assert decode_batches(_with_records(body, 1))[0][0].records == (b"a",)


# --------------------------------------------------------------------------- fuzzing


def _decode_or_corrupt(data: bytes, verify_crc: bool = True) -> None:
    try:
        got, consumed = decode_batches(data, verify_crc=verify_crc)
    except CorruptRecordError:
        return
    assert 0 <= consumed <= len(data)
    assert all(isinstance(b, Batch) and b.records for b in got)


@settings(max_examples=examples(500), suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=400), st.booleans())
def test_fuzz_random_bytes(data: bytes, verify_crc: bool) -> None:
    _decode_or_corrupt(data, verify_crc)


@settings(max_examples=examples(500), suppress_health_check=[HealthCheck.too_slow])
@given(batch_runs(), st.data())
def test_fuzz_truncation_and_bit_flips(run: list[Batch], data: st.DataObject) -> None:
    encoded = encode_batches(run)
    cut = data.draw(st.integers(0, len(encoded)))
    got, consumed = decode_batches(encoded[:cut])
    # A truncated buffer yields exactly the batches that fit entirely.
    sizes = [len(encode_batch(b)) for b in run]
    fit = 0
    total = 0
    while fit < len(run) and total + sizes[fit] <= cut:
        total += sizes[fit]
        fit += 1
    assert got == run[:fit] and consumed == total
    flipped = bytearray(encoded)
    for _ in range(data.draw(st.integers(1, 4))):
        bit = data.draw(st.integers(0, len(encoded) * 8 - 1))
        flipped[bit // 8] ^= 1 << (bit % 8)
    _decode_or_corrupt(bytes(flipped))
    _decode_or_corrupt(bytes(flipped), verify_crc=False)
    # Flips with the CRC recomputed exercise the record parser itself.
    result = scan_batches(encoded)
    for pos in result.positions:
        length = struct.unpack_from(">i", flipped, pos + 8)[0]
        end = pos + 12 + length
        if 0 < length and end <= len(flipped) and pos + 21 <= end:
            struct.pack_into(">I", flipped, pos + 17, crc32c(bytes(flipped[pos + 21 : end])))
    _decode_or_corrupt(bytes(flipped))


@settings(max_examples=examples(500), suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200), st.integers(-3, 40), st.sampled_from([0, 0x20]))
def test_fuzz_random_records_with_valid_crc(body: bytes, count: int, attributes: int) -> None:
    _decode_or_corrupt(_with_records(body, count, attributes))


# --------------------------------------------------------------------------- control messages


def test_leader_change_matches_kio() -> None:
    ours = encode_leader_change(2, [1, 2, 3], [2, 3])
    buf = io.BytesIO()
    entity_writer(KioLeaderChangeV0)(
        buf,
        KioLeaderChangeV0(
            version=i16(0),
            leader_id=i32(2),  # type: ignore[arg-type]
            voters=tuple(KioVoterV0(voter_id=i32(v)) for v in (1, 2, 3)),
            granting_voters=tuple(KioVoterV0(voter_id=i32(v)) for v in (2, 3)),
        ),
    )
    assert ours == buf.getvalue()
    parsed, size = entity_reader(KioLeaderChangeV0)(ours, 0)
    assert size == len(ours) and parsed.leader_id == 2
    assert [v.voter_id for v in parsed.voters] == [1, 2, 3]


def test_leader_change_v1_from_kio_decodes() -> None:
    buf = io.BytesIO()
    entity_writer(KioLeaderChangeV1)(
        buf,
        KioLeaderChangeV1(
            version=i16(1),
            leader_id=i32(3),  # type: ignore[arg-type]
            voters=tuple(KioVoterV1(voter_id=i32(v), voter_directory_id=uuid.uuid4()) for v in (1, 3)),
            granting_voters=(KioVoterV1(voter_id=i32(3), voter_directory_id=uuid.uuid4()),),
        ),
    )
    assert decode_leader_change(buf.getvalue()) == LeaderChange(3, (1, 3), (3,), version=1)


@given(
    st.integers(-(2**31), 2**31 - 1),
    st.lists(st.integers(-(2**31), 2**31 - 1), max_size=10),
    st.lists(st.integers(-(2**31), 2**31 - 1), max_size=10),
)
def test_property_leader_change_round_trip(leader: int, voters: list[int], granting: list[int]) -> None:
    assert decode_leader_change(encode_leader_change(leader, voters, granting)) == LeaderChange(
        leader, tuple(voters), tuple(granting)
    )


def test_leader_change_rejects_huge_array() -> None:
    # The input that makes kio's native reader abort the process (2**32 - 2 voters).
    with pytest.raises(CorruptRecordError):
        decode_leader_change(bytes.fromhex("00000000000001ffffffff0f"))


@settings(max_examples=examples(500))
@given(st.binary(max_size=60))
def test_fuzz_control_messages(data: bytes) -> None:
    for decode in (decode_leader_change, decode_snapshot_header, decode_snapshot_footer):
        try:
            decode(data)
        except CorruptRecordError:
            pass


def test_snapshot_header_footer_match_kio() -> None:
    buf = io.BytesIO()
    entity_writer(KioHeader)(buf, KioHeader(version=i16(0), last_contained_log_timestamp=i64(1_700_000_000_000)))
    assert encode_snapshot_header(1_700_000_000_000) == buf.getvalue()
    assert decode_snapshot_header(buf.getvalue()).last_contained_timestamp_ms == 1_700_000_000_000
    buf = io.BytesIO()
    entity_writer(KioFooter)(buf, KioFooter(version=i16(0)))
    assert encode_snapshot_footer() == buf.getvalue()
    assert decode_snapshot_footer(buf.getvalue()).version == 0


def test_control_messages_reject_trailing_and_versions() -> None:
    with pytest.raises(CorruptRecordError):
        decode_snapshot_footer(encode_snapshot_footer() + b"\x00")
    with pytest.raises(CorruptRecordError):
        decode_snapshot_header(struct.pack(">hq", 1, 0) + b"\x00")
    with pytest.raises(CorruptRecordError):
        decode_leader_change(struct.pack(">hi", 7, 1) + b"\x01\x01\x00")
    # Tagged fields are skipped.
    assert decode_snapshot_footer(b"\x00\x00\x01\x05\x02ab").version == 0


# --------------------------------------------------------------------------- speed sanity


def test_encode_decode_speed_sanity() -> None:
    batch = Batch(0, 1, tuple(bytes([i % 256]) * 100 for i in range(1000)), 0)
    data = encode_batch(batch)
    best_encode = best_decode = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        encode_batch(batch)
        t1 = time.perf_counter()
        decode_batches(data)
        t2 = time.perf_counter()
        best_encode = min(best_encode, t1 - t0)
        best_decode = min(best_decode, t2 - t1)
    # Typically ~0.3 ms and ~1.2 ms; generous bounds so loaded CI machines do not flake.
    assert best_encode < 0.025, best_encode
    assert best_decode < 0.050, best_decode


def test_varint_table_matches_generic_encoder() -> None:
    for n in (0, 1, 63, 64, 8191, 8192, 2**14 - 1):
        assert rb._ZZ[n] == rb._zigzag_bytes(n)
    assert rb._zigzag_bytes(-1) == b"\x01"
    assert rb._zigzag_bytes(-(2**63)) == b"\xff" * 9 + b"\x01"


@pytest.mark.parametrize(
    "batch",
    [Batch(2**63, 1, (b"x",)), Batch(0, 2**31, (b"x",)), Batch(0, 1, (b"x",), timestamp_ms=2**63)],
)
def test_out_of_range_fields_raise_value_error(batch: Batch) -> None:
    with pytest.raises(ValueError):
        encode_batch(batch)


def test_a_batch_encoded_and_remembered_gives_the_same_bytes_again() -> None:
    from quorum.storage import record_batch

    batches = [Batch(base_offset=i * 3, epoch=1, records=(b"a", b"bc", bytes([i])), timestamp_ms=9) for i in range(40)]
    first = [record_batch.encode_and_remember(b) for b in batches]
    assert first == [record_batch._encode_batch(b) for b in batches]
    assert len(record_batch._RECENT) <= record_batch._RECENT_MAX
    last = batches[-1]
    assert encode_batch(last) is first[-1]  # remembered: the very bytes
    twin = Batch(base_offset=last.base_offset, epoch=1, records=last.records, timestamp_ms=9)
    assert encode_batch(twin) == first[-1] and encode_batch(twin) is not first[-1]  # another object: encoded
    assert encode_batch(batches[0]) == first[0]  # forgotten (the oldest went first): encoded again
