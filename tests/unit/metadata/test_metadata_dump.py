"""kafka-dump-log style output for real segment and snapshot files."""

from __future__ import annotations

import json
import struct
import uuid
from pathlib import Path

from quorum.metadata.dump import dump_segment, dump_snapshot, main
from quorum.metadata.records import FeatureLevelRecord, PartitionRecord, TopicRecord, encode_record
from quorum.raft.control_records import encode_leader_change
from quorum.raft.types import Batch, ControlType, OffsetAndEpoch
from quorum.storage.file_log import FileLog
from quorum.storage.snapshots import SnapshotStore, encode_snapshot

U = uuid.UUID("01020304-0506-0708-090a-0b0c0d0e0f10")
U_STR = "AQIDBAUGBwgJCgsMDQ4PEA"
TS = 1_700_000_000_000


def write_log(directory: Path) -> Path:
    log = FileLog.open(directory)
    try:
        log.append(
            [
                Batch(0, 1, (encode_leader_change(1, [1, 2, 3], [1, 2]),), TS, ControlType.LEADER_CHANGE),
                Batch(
                    1,
                    1,
                    (encode_record(FeatureLevelRecord("metadata.version", 20)), encode_record(TopicRecord("foo", U))),
                    TS,
                ),
                Batch(
                    3,
                    2,
                    (
                        encode_record(PartitionRecord(0, U, (1, 2), (1,), leader=1, leader_epoch=0, partition_epoch=0)),
                        b"\x01\x63\x00",
                    ),
                    TS + 5,
                ),
            ]
        )
        log.flush()
        paths = log.segment_paths
    finally:
        log.close()
    assert len(paths) == 1
    return paths[0]


def batch_fields(data: bytes, position: int) -> tuple[int, int]:
    """(size, crc) of the batch at `position`."""
    _base, length, _epoch, _magic, crc = struct.unpack_from(">qiibI", data, position)
    return length + 12, crc


def test_dump_segment(tmp_path: Path) -> None:
    path = write_log(tmp_path / "__cluster_metadata-0")
    data = path.read_bytes()
    lines = list(dump_segment(path))
    assert lines[0] == "Log starting offset: 0"
    size0, crc0 = batch_fields(data, 0)
    assert lines[1] == (
        f"baseOffset: 0 lastOffset: 0 count: 1 baseSequence: -1 lastSequence: -1 producerId: -1 "
        f"producerEpoch: -1 partitionLeaderEpoch: 1 isTransactional: false isControl: true "
        f"deleteHorizonMs: OptionalLong.empty position: 0 "
        f"CreateTime: {TS} size: {size0} magic: 2 compresscodec: none crc: {crc0} isvalid: true"
    )
    leader_change = encode_leader_change(1, [1, 2, 3], [1, 2])
    assert lines[2] == (
        f"| offset: 0 CreateTime: {TS} keySize: 4 valueSize: {len(leader_change)} sequence: -1 headerKeys: [] "
        'LeaderChange: {"version":0,"leaderId":1,"voters":[{"voterId":1},{"voterId":2},{"voterId":3}],'
        '"grantingVoters":[{"voterId":1},{"voterId":2}]}'
    )
    size1, crc1 = batch_fields(data, size0)
    assert lines[3] == (
        f"baseOffset: 1 lastOffset: 2 count: 2 baseSequence: -1 lastSequence: -1 producerId: -1 "
        f"producerEpoch: -1 partitionLeaderEpoch: 1 isTransactional: false isControl: false "
        f"deleteHorizonMs: OptionalLong.empty position: {size0} "
        f"CreateTime: {TS} size: {size1} magic: 2 compresscodec: none crc: {crc1} isvalid: true"
    )
    feature = encode_record(FeatureLevelRecord("metadata.version", 20))
    assert lines[4] == (
        f"| offset: 1 CreateTime: {TS} keySize: -1 valueSize: {len(feature)} sequence: -1 headerKeys: [] "
        'payload: {"type":"FEATURE_LEVEL_RECORD","version":0,"data":{"name":"metadata.version","featureLevel":20}}'
    )
    assert lines[5].endswith(
        f'payload: {{"type":"TOPIC_RECORD","version":0,"data":{{"name":"foo","topicId":"{U_STR}"}}}}'
    )
    assert lines[6].startswith("baseOffset: 3 lastOffset: 4 count: 2 ") and "partitionLeaderEpoch: 2" in lines[6]
    assert f"position: {size0 + size1} CreateTime: {TS + 5}" in lines[6]
    payload = json.loads(lines[7].split(" payload: ", 1)[1])
    assert payload == {
        "type": "PARTITION_RECORD",
        "version": 0,
        "data": {
            "partitionId": 0,
            "topicId": U_STR,
            "replicas": [1, 2],
            "isr": [1],
            "removingReplicas": [],
            "addingReplicas": [],
            "leader": 1,
            "leaderEpoch": 0,
            "partitionEpoch": 0,
        },
    }
    assert (
        lines[8].startswith("| offset: 4 ")
        and "payload: Error at 4, skipping. unknown metadata record type 99" in lines[8]
    )
    assert len(lines) == 9


def test_dump_segment_torn_tail(tmp_path: Path) -> None:
    path = write_log(tmp_path / "log")
    with path.open("ab") as f:
        f.write(b"\x00" * 20)
    lines = list(dump_segment(path))
    assert lines[-1].startswith(f"Found 20 invalid bytes at the end of {path.name}")
    assert len(lines) == 10


def test_dump_snapshot(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path / "snap")
    sid = OffsetAndEpoch(epoch=3, offset=42)
    records = [encode_record(FeatureLevelRecord("metadata.version", 20)), encode_record(TopicRecord("foo", U))]
    path = store.create(sid, encode_snapshot(sid, records, last_contained_timestamp_ms=TS))
    lines = list(dump_snapshot(path))
    assert lines[0] == "Snapshot end offset: 42, epoch: 3"
    assert "isControl: true" in lines[1] and lines[2].endswith(
        f'SnapshotHeader {{"version":0,"lastContainedLogTimestamp":{TS}}}'
    )
    assert "count: 2" in lines[3] and "partitionLeaderEpoch: 3" in lines[3]
    assert '"type":"FEATURE_LEVEL_RECORD"' in lines[4] and '"type":"TOPIC_RECORD"' in lines[5]
    assert lines[7].startswith("| offset: 3 ") and lines[7].endswith('SnapshotFooter {"version":0}')
    assert len(lines) == 8


def test_main_prints_files(tmp_path: Path, capsys) -> None:
    path = write_log(tmp_path / "log")
    assert main([str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"Dumping {path}" and out[1] == "Log starting offset: 0" and len(out) == 10
    assert main([str(tmp_path / "missing.log")]) == 1
    assert main([]) == 2


def test_dump_file_decodes_a_real_quorum_state_file(tmp_path: Path) -> None:
    from quorum.metadata.dump import dump_file
    from quorum.raft.types import ElectionState
    from quorum.storage.quorum_state import QuorumStateStore

    path = tmp_path / "quorum-state"
    QuorumStateStore(path, voters=[1, 2, 3], cluster_id="c").write(ElectionState(epoch=7, voted_id=2, leader_id=2))
    lines = list(dump_file(path))
    assert lines == [
        f"Dumping {path}",
        "Quorum state: clusterId: c leaderId: 2 leaderEpoch: 7 votedId: 2 appliedOffset: 0 currentVoters: [1,2,3] "
        "data_version: 0",
    ]
    assert not any("invalid bytes" in line for line in lines)
    path.write_text("{not json")
    assert list(dump_file(path))[1].startswith("Invalid quorum-state file quorum-state: not JSON")


def test_dump_file_header_and_kind_by_name(tmp_path: Path) -> None:
    from quorum.metadata.dump import dump_file

    path = write_log(tmp_path / "log")
    lines = list(dump_file(path))
    assert lines[0] == f"Dumping {path}" and lines[1] == "Log starting offset: 0"
    assert all("deleteHorizonMs: OptionalLong.empty" in line for line in lines if line.startswith("baseOffset:"))
