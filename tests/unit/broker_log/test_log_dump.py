"""`pykraft log dump` on partition segments and indexes written by the broker's log code:
the lines kafka-dump-log.sh prints, checked against the records the test wrote."""

from __future__ import annotations

import struct
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from broker.log import LogConfig, PartitionLog

CODECS = {0: "none", 1: "gzip", 3: "lz4", 4: "zstd"}


def write_log(tmp_path: Path) -> tuple[Path, list[tuple[int, int, bytes | None, bytes]]]:
    d = tmp_path / "orders-0"
    plog = PartitionLog.open(d, LogConfig(index_interval_bytes=100), topic_id=uuid.uuid4())
    written = []
    offset = 0
    for codec in CODECS:
        b = DefaultRecordBatchBuilder(2, codec, False, -1, -1, -1, batch_size=1 << 20)
        for i in range(4):
            key = None if i == 0 else b"key-%d" % i
            value = (b"value-%d-%d " % (codec, i)) * 20  # compressible: the codec is kept
            b.append(i, timestamp=1_700_000_000_000 + offset, key=key, value=value, headers=[("h", b"x")])
            written.append((offset, 1_700_000_000_000 + offset, key, value))
            offset += 1
        plog.append_as_leader(bytes(b.build()), 7, 0)
    plog.flush()
    plog.close()
    return d, written


def dump(*args: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-m", "api.cli", "log", "dump", *args], capture_output=True, text=True, check=True
    )
    return out.stdout.splitlines()


def test_segment_dump_matches_the_records_written(tmp_path: Path) -> None:
    d, written = write_log(tmp_path)
    seg = d / "00000000000000000000.log"
    lines = dump("--print-data-log", "--files", str(seg))
    assert lines[0] == f"Dumping {seg}"
    assert lines[1] == "Log starting offset: 0"
    batches = [line for line in lines if line.startswith("baseOffset:")]
    assert len(batches) == len(CODECS)
    for i, (line, codec) in enumerate(zip(batches, CODECS.values(), strict=True)):
        assert line.startswith(
            f"baseOffset: {4 * i} lastOffset: {4 * i + 3} count: 4 baseSequence: -1 lastSequence: -1 "
            f"producerId: -1 producerEpoch: -1 partitionLeaderEpoch: 7 isTransactional: false isControl: false "
            f"deleteHorizonMs: OptionalLong.empty position: "
        ), line
        assert f" compresscodec: {codec} " in line and line.endswith("isvalid: true")
    records = [line for line in lines if line.startswith("| offset:")]
    expected = []
    for offset, ts, key, value in written:
        key_part = "" if key is None else f" key: {key.decode()}"
        expected.append(
            f"| offset: {offset} CreateTime: {ts} keySize: {-1 if key is None else len(key)} "
            f"valueSize: {len(value)} sequence: -1 headerKeys: [h]{key_part} payload: {value.decode()}"
        )
    assert records == expected


def test_a_flipped_byte_shows_isvalid_false(tmp_path: Path) -> None:
    d, _ = write_log(tmp_path)
    seg = d / "00000000000000000000.log"
    data = bytearray(seg.read_bytes())
    data[80] ^= 0xFF  # inside the first batch's records
    seg.write_bytes(bytes(data))
    batches = [line for line in dump(str(seg)) if line.startswith("baseOffset:")]
    assert batches[0].endswith("isvalid: false")
    assert all(line.endswith("isvalid: true") for line in batches[1:])


def test_index_dumps_and_verification(tmp_path: Path) -> None:
    d, _ = write_log(tmp_path)
    index = d / "00000000000000000000.index"
    entries = [line for line in dump(str(index)) if line.startswith("offset:")]
    assert entries and all(line.startswith("offset: ") and " position: " in line for line in entries)
    assert dump("--verify-index-only", str(index))[1].startswith(f"Index {index} is consistent")
    time_entries = [line for line in dump(str(d / "00000000000000000000.timeindex")) if line.startswith("timestamp:")]
    assert time_entries
    # Corrupt the first entry's relative offset: the tool reports the mismatch as Kafka does.
    raw = bytearray(index.read_bytes())
    struct.pack_into(">i", raw, 0, struct.unpack_from(">i", raw, 0)[0] + 1)
    index.write_bytes(bytes(raw))
    out = dump("--verify-index-only", str(index))
    assert out[1] == f"Mismatches in :{index}"
    assert out[2].startswith("  Index offset: ") and ", log offset: " in out[2]


@pytest.mark.parametrize("name", ["00000000000000000000.log"])
def test_dump_of_a_metadata_segment_is_still_the_metadata_decoder(tmp_path: Path, name: str) -> None:
    d = tmp_path / "__cluster_metadata-0"
    d.mkdir()
    (d / name).write_bytes(b"")
    assert dump(str(d / name)) == [f"Dumping {d / name}", "Log starting offset: 0"]
