"""Decompressing one record batch's records: the only decompression in pykraft.

Produce and fetch never decompress (batches are stored and served as the producer sent
them). Two slow paths need the records of a compressed batch: ListOffsets by timestamp
(the first record at or after a time, record-exact) and `pykraft log dump`
(`--deep-iteration`). Both call `decompress`. The log cleaner decompresses the batches it
rewrites and compresses what it keeps again with the same codec (`compress`).

Codecs are Kafka's (`quorum.storage.batch_layout.COMPRESSION_*`): gzip, snappy (raw, or in
the xerial framing that Kafka's Java producer writes), lz4 (the frame format) and zstd.
The output is bounded by `limit` bytes, so a small batch that expands without end (a
"decompression bomb") costs at most that much memory before it is refused.
"""

from __future__ import annotations

import struct
import zlib

from quorum.storage.batch_layout import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    codec_name,
)
from quorum.storage.record_batch import MAX_BATCH_SIZE

# The most a batch's records may expand to (bytes): the largest batch pykraft frames.
DEFAULT_LIMIT = MAX_BATCH_SIZE
# xerial snappy-java's stream header: magic (8), version (4), compatible version (4);
# then blocks of int32 compressed length + raw snappy bytes.
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = 16
_I32 = struct.Struct(">i")
_ZSTD_SLICE = 256  # compressed bytes fed at a time


class DecompressionError(ValueError):
    """The records do not decompress with the batch's codec, or expand beyond the limit."""


def decompress(codec: int, data: bytes | bytearray | memoryview, *, limit: int = DEFAULT_LIMIT) -> bytes:
    """The records of a batch compressed with `codec`, at most `limit` bytes of them."""
    try:
        if codec == COMPRESSION_NONE:
            out = bytes(data)
        elif codec == COMPRESSION_GZIP:
            out = _gzip(bytes(data), limit)
        elif codec == COMPRESSION_SNAPPY:
            out = _snappy(bytes(data), limit)
        elif codec == COMPRESSION_LZ4:
            out = _lz4(bytes(data), limit)
        elif codec == COMPRESSION_ZSTD:
            out = _zstd(bytes(data), limit)
        else:
            raise DecompressionError(f"unknown compression codec {codec}")
    except DecompressionError:
        raise
    except Exception as exc:  # each library raises its own error types on bad input
        raise DecompressionError(f"{codec_name(codec)} records do not decompress: {exc}") from None
    if len(out) > limit:
        raise DecompressionError(f"{codec_name(codec)} records expand beyond {limit} bytes")
    return out


def compress(codec: int, data: bytes | bytearray | memoryview) -> bytes:
    """`data` (a batch's records) compressed with `codec`, in the form `decompress` and Kafka's
    clients read: a gzip stream, raw snappy (as librdkafka writes), an lz4 frame, a zstd frame."""
    raw = bytes(data)
    if codec == COMPRESSION_NONE:
        return raw
    if codec == COMPRESSION_GZIP:
        c = zlib.compressobj(wbits=16 + zlib.MAX_WBITS)
        return c.compress(raw) + c.flush()
    if codec == COMPRESSION_SNAPPY:
        import snappy

        return bytes(snappy.compress(raw))
    if codec == COMPRESSION_LZ4:
        import lz4.frame

        return bytes(lz4.frame.compress(raw))
    if codec == COMPRESSION_ZSTD:
        import zstandard

        return zstandard.ZstdCompressor().compress(raw)
    raise ValueError(f"unknown compression codec {codec}")


def _gzip(data: bytes, limit: int) -> bytes:
    out = bytearray()
    while data:  # a gzip stream may hold several members
        d = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        out += d.decompress(data, limit + 1 - len(out))
        if len(out) > limit:
            break
        if not d.eof:
            raise DecompressionError("gzip records end before their stream does")
        data = d.unused_data
    return bytes(out)


def _snappy_length(block: bytes) -> int:
    """The uncompressed length a raw snappy block announces (its leading varint)."""
    value = shift = 0
    for i, b in enumerate(block[:5]):
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value
        shift += 7
        if i == 4:
            break
    raise DecompressionError("snappy block without a length")


def _snappy(data: bytes, limit: int) -> bytes:
    import snappy

    if not data.startswith(_XERIAL_MAGIC):
        blocks = [data]
    else:
        blocks, pos = [], _XERIAL_HEADER
        while pos < len(data):
            if pos + _I32.size > len(data):
                raise DecompressionError("xerial snappy block length cut short")
            (n,) = _I32.unpack_from(data, pos)
            if n < 0 or pos + _I32.size + n > len(data):
                raise DecompressionError("xerial snappy block runs past the records")
            blocks.append(data[pos + _I32.size : pos + _I32.size + n])
            pos += _I32.size + n
    out = bytearray()
    for block in blocks:
        if len(out) + _snappy_length(block) > limit:
            raise DecompressionError(f"snappy records expand beyond {limit} bytes")
        out += snappy.decompress(block)
    return bytes(out)


def _lz4(data: bytes, limit: int) -> bytes:
    import lz4.frame

    d = lz4.frame.LZ4FrameDecompressor()
    out = bytes(d.decompress(data, max_length=limit + 1))
    if len(out) <= limit and not d.eof:
        raise DecompressionError("lz4 records end before their frame does")
    return out


def _zstd(data: bytes, limit: int) -> bytes:
    import zstandard

    out = bytearray()
    rest = memoryview(data)
    while rest:  # one frame after the other
        d = zstandard.ZstdDecompressor().decompressobj()
        # Fed in slices so that the output is checked against the limit as it grows: a
        # zstd block of at most 128 KiB takes at least 4 input bytes, so one slice adds at
        # most _ZSTD_SLICE * 32 KiB (8 MiB) beyond what was checked.
        while rest and not d.eof and len(out) <= limit:
            piece, rest = rest[:_ZSTD_SLICE], rest[_ZSTD_SLICE:]
            out += d.decompress(piece)
        if len(out) > limit:
            break
        if not d.eof:
            raise DecompressionError("zstd records end before their frame does")
        rest = memoryview(d.unused_data + bytes(rest))
    return bytes(out)
