"""The byte layout of a Kafka magic-v2 record batch header: the one place its field
positions, attribute bits and codec numbers are written down.

    baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8 (=2)
    | crc uint32 | attributes int16 | lastOffsetDelta int32 | baseTimestamp int64
    | maxTimestamp int64 | producerId int64 | producerEpoch int16 | baseSequence int32
    | recordCount int32 | records...

All integers are big-endian; every `*_AT` is a byte offset from the batch's first byte.
`batchLength` counts the bytes after itself (total size - LOG_OVERHEAD); the CRC-32C
covers `attributes` to the end of the batch, so baseOffset and partitionLeaderEpoch can be
patched without recomputing it. The metadata log, the partition logs, the produce path
and the dump tools all read and patch headers through these names.
"""

from __future__ import annotations

import struct
from typing import Final

MAGIC: Final = 2

BASE_OFFSET_AT: Final = 0  # int64
BATCH_LENGTH_AT: Final = 8  # int32
PARTITION_LEADER_EPOCH_AT: Final = 12  # int32
MAGIC_AT: Final = 16  # int8
CRC_AT: Final = 17  # uint32
ATTRIBUTES_AT: Final = 21  # int16; the CRC-covered region starts here
LAST_OFFSET_DELTA_AT: Final = 23  # int32
BASE_TIMESTAMP_AT: Final = 27  # int64, ms
MAX_TIMESTAMP_AT: Final = 35  # int64, ms
PRODUCER_ID_AT: Final = 43  # int64
PRODUCER_EPOCH_AT: Final = 51  # int16
BASE_SEQUENCE_AT: Final = 53  # int32
RECORDS_COUNT_AT: Final = 57  # int32
# Bytes before batchLength's coverage starts: baseOffset (8) + batchLength (4).
LOG_OVERHEAD: Final = 12
# Full fixed header of a v2 batch (61 bytes); the records start here.
BATCH_HEADER_SIZE: Final = 61
CRC_START: Final = ATTRIBUTES_AT

# The whole fixed header, in field order (the fields listed in the module docstring).
HEADER: Final = struct.Struct(">qiibIhiqqqhii")
# Its first LOG_OVERHEAD bytes: baseOffset, batchLength (enough to frame a batch).
LOG_HEADER: Final = struct.Struct(">qi")

# attributes bits
ATTR_COMPRESSION_MASK: Final = 0x07  # the codec, one of the COMPRESSION_* numbers
ATTR_TIMESTAMP_TYPE: Final = 0x08  # set: LogAppendTime (every record has maxTimestamp); clear: CreateTime
ATTR_TRANSACTIONAL: Final = 0x10
ATTR_CONTROL: Final = 0x20
# KIP-534: set by the log cleaner on a batch that holds tombstones; baseTimestamp is then the
# time (ms) after which its tombstones may be removed (record timestamps stay base + delta).
ATTR_DELETE_HORIZON: Final = 0x40

COMPRESSION_NONE: Final = 0
COMPRESSION_GZIP: Final = 1
COMPRESSION_SNAPPY: Final = 2
COMPRESSION_LZ4: Final = 3
COMPRESSION_ZSTD: Final = 4
# Kafka's names (kafka-dump-log.sh's `compresscodec:`), indexed by codec number.
CODEC_NAMES: Final = ("none", "gzip", "snappy", "lz4", "zstd")

assert HEADER.size == BATCH_HEADER_SIZE and LOG_HEADER.size == LOG_OVERHEAD
assert [struct.calcsize(HEADER.format[: i + 2]) for i in range(12)] == [
    BATCH_LENGTH_AT, PARTITION_LEADER_EPOCH_AT, MAGIC_AT, CRC_AT, ATTRIBUTES_AT, LAST_OFFSET_DELTA_AT,
    BASE_TIMESTAMP_AT, MAX_TIMESTAMP_AT, PRODUCER_ID_AT, PRODUCER_EPOCH_AT, BASE_SEQUENCE_AT, RECORDS_COUNT_AT,
]  # fmt: skip


def codec_name(codec: int) -> str:
    """Kafka's name of a codec number (the number itself when it is unknown)."""
    return CODEC_NAMES[codec] if 0 <= codec < len(CODEC_NAMES) else str(codec)
