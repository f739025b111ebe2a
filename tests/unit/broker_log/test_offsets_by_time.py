"""ListOffsets by timestamp on the partition log: the first record whose timestamp is at
or after the target, record-exact inside compressed batches of every codec (Kafka
decompresses the one batch it lands in), and the one decompression helper's limits."""

from __future__ import annotations

import gzip
import os
import struct
import uuid
import zlib
from pathlib import Path

import pytest
import snappy
from kafka.record.default_records import DefaultRecordBatchBuilder

from broker.log import LogConfig, PartitionLog
from broker.log.compression import DecompressionError, decompress
from broker.log.partition_log import MAX_TIMESTAMP
from quorum.storage.batch_layout import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
)

NOW = 1_700_000_000_000
CODECS = {
    "none": COMPRESSION_NONE,
    "gzip": COMPRESSION_GZIP,
    "snappy": COMPRESSION_SNAPPY,
    "lz4": COMPRESSION_LZ4,
    "zstd": COMPRESSION_ZSTD,
}


def batch(codec: int, n: int, ts: int, *, step: int = 1) -> bytes:
    b = DefaultRecordBatchBuilder(2, codec, False, -1, -1, -1, batch_size=1 << 24)
    for i in range(n):
        b.append(i, timestamp=ts + i * step, key=None, value=f"value-{i:06d}".encode() * 4, headers=[])
    return bytes(b.build())


def open_log(tmp_path: Path, **cfg: object) -> PartitionLog:
    return PartitionLog.open(tmp_path / "t-0", LogConfig(**cfg), topic_id=uuid.uuid4())  # type: ignore[arg-type]


@pytest.mark.parametrize("codec", list(CODECS), ids=list(CODECS))
def test_offset_for_timestamp_is_record_exact_in_compressed_batches(tmp_path: Path, codec: str) -> None:
    plog = open_log(tmp_path)
    plog.append_as_leader(batch(CODECS[codec], 10, NOW - 10_000), 1, NOW)  # offsets 0..9
    plog.append_as_leader(batch(CODECS[codec], 1000, NOW), 1, NOW)  # offsets 10..1009, times NOW..NOW+999
    assert plog.offset_for_timestamp(NOW + 500) == (510, NOW + 500, 1)
    assert plog.offset_for_timestamp(NOW) == (10, NOW, 1)
    assert plog.offset_for_timestamp(NOW + 999) == (1009, NOW + 999, 1)
    assert plog.offset_for_timestamp(NOW - 10_000 + 7) == (7, NOW - 10_000 + 7, 1)
    assert plog.offset_for_timestamp(NOW + 1000) is None
    assert plog.offset_for_timestamp(MAX_TIMESTAMP) == (1009, NOW + 999, 1)
    # Below the log start nothing is answered, even inside the batch that holds it.
    plog.delete_records_before(700)
    assert plog.offset_for_timestamp(NOW + 500) == (700, NOW + 690, 1)


def test_gaps_in_record_times_find_the_first_at_or_after(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    plog.append_as_leader(batch(COMPRESSION_ZSTD, 100, NOW, step=10), 1, NOW)  # NOW, NOW+10, ...
    assert plog.offset_for_timestamp(NOW + 501) == (51, NOW + 510, 1)


def test_log_append_time_batches_answer_their_first_record(tmp_path: Path) -> None:
    plog = open_log(tmp_path, message_timestamp_type="LogAppendTime")
    plog.append_as_leader(batch(COMPRESSION_LZ4, 50, NOW - 99_000), 1, NOW)
    plog.append_as_leader(batch(COMPRESSION_LZ4, 50, NOW - 99_000), 1, NOW + 5)
    # Every record of a LogAppendTime batch carries the batch's time.
    assert plog.offset_for_timestamp(NOW + 1) == (50, NOW + 5, 1)
    assert plog.offset_for_timestamp(NOW - 50_000) == (0, NOW, 1)


def test_a_damaged_compressed_batch_answers_its_first_offset(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    plog.append_as_leader(batch(COMPRESSION_ZSTD, 100, NOW), 1, NOW)
    seg = plog.active
    data = bytearray(seg.read(0, seg.size))
    data[80:90] = b"\xff" * 10  # inside the compressed records (not a header field)
    os.pwrite(seg.fd, bytes(data), 0)
    assert plog.offset_for_timestamp(NOW + 50) == (0, NOW + 99, 1)


def _xerial(raw: bytes, block: int = 1000) -> bytes:
    """snappy-java's framing (what Kafka's Java producer writes): a header, then blocks."""
    out = bytearray(b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1))
    for i in range(0, len(raw), block):
        chunk = snappy.compress(raw[i : i + block])
        out += struct.pack(">i", len(chunk)) + chunk
    return bytes(out)


def test_decompress_every_codec_and_framing() -> None:
    import lz4.frame
    import zstandard

    raw = b"".join(f"record {i} ".encode() for i in range(5000))
    assert decompress(COMPRESSION_NONE, raw) == raw
    assert decompress(COMPRESSION_GZIP, gzip.compress(raw)) == raw
    assert decompress(COMPRESSION_GZIP, gzip.compress(raw[:100]) + gzip.compress(raw[100:])) == raw
    assert decompress(COMPRESSION_SNAPPY, snappy.compress(raw)) == raw
    assert decompress(COMPRESSION_SNAPPY, _xerial(raw)) == raw
    assert decompress(COMPRESSION_LZ4, lz4.frame.compress(raw)) == raw
    assert decompress(COMPRESSION_ZSTD, zstandard.ZstdCompressor().compress(raw)) == raw
    # A stream written without its content size (librdkafka's) decompresses too.
    assert decompress(COMPRESSION_ZSTD, zstandard.ZstdCompressor(write_content_size=False).compress(raw)) == raw


@pytest.mark.parametrize("codec", [c for c in CODECS if c != "none"])
def test_decompress_refuses_garbage_cut_streams_and_bombs(codec: str) -> None:
    import lz4.frame
    import zstandard

    number = CODECS[codec]
    bomb_raw = b"\x00" * (8 << 20)
    compress = {
        "gzip": lambda d: gzip.compress(d),
        "snappy": lambda d: snappy.compress(d),
        "lz4": lambda d: lz4.frame.compress(d),
        "zstd": lambda d: zstandard.ZstdCompressor(write_content_size=False).compress(d),
    }[codec]
    bomb = compress(bomb_raw)
    assert len(bomb) < 500_000
    with pytest.raises(DecompressionError):
        decompress(number, bomb, limit=1 << 20)
    assert decompress(number, bomb, limit=8 << 20) == bomb_raw
    with pytest.raises(DecompressionError):
        decompress(number, b"\x17not compressed at all, not even a little" * 3)
    good = compress(b"abc" * 10_000)
    with pytest.raises(DecompressionError):
        decompress(number, good[: len(good) // 2])


def test_decompress_refuses_an_unknown_codec() -> None:
    with pytest.raises(DecompressionError):
        decompress(5, zlib.compress(b"x"))


def test_decompress_several_zstd_frames() -> None:
    import zstandard

    one, two = b"first frame " * 1000, b"second frame " * 1000
    frames = zstandard.ZstdCompressor().compress(one) + zstandard.ZstdCompressor(write_content_size=False).compress(two)
    assert decompress(COMPRESSION_ZSTD, frames) == one + two
