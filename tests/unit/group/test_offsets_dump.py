"""`pykraft log dump --offsets-decoder`: a `__consumer_offsets` segment written with the
project's batch encoder, printed as `kafka-dump-log.sh --offsets-decoder` prints it.

The consumer-protocol subscription and assignment are serialized with kio (independently of
the decoder, which reads them back); the expected texts of the group record and of the
ConsumerGroupMetadata record (type 3) are the ones Kafka's own DumpLogSegmentsTest expects for
the same records, and its value that does not match its key fails with the same figures
(a tagged field of 536870911 bytes, 1 byte left), in pykraft's words. The texts of the other
KIP-848 records follow Kafka's generated JsonConverters: the schema's camelCase field names in
schema order, uuids as Kafka's Uuid.toString() (URL-safe base64 without padding), an int8 as a
number, null for a null string."""

from __future__ import annotations

import base64
import io
import struct
import subprocess
import sys
from pathlib import Path
from uuid import UUID

from kio.schema.consumer_protocol_assignment.v3.data import ConsumerProtocolAssignment
from kio.schema.consumer_protocol_assignment.v3.data import TopicPartition as AssignedPartition
from kio.schema.consumer_protocol_subscription.v3.data import ConsumerProtocolSubscription
from kio.schema.consumer_protocol_subscription.v3.data import TopicPartition as OwnedPartition
from kio.schema.types import TopicName
from kio.serial import entity_writer
from kio.static.primitive import i32

from broker.group.offsets_dump import parse_offsets_record
from broker.group.records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    GroupKey,
    GroupValue,
    MemberValue,
    OffsetKey,
    OffsetValue,
    TopicMetadata,
    TopicPartitions,
    encode_key,
    encode_value,
)
from broker.log.records import BatchHeader, Record, encode_records
from quorum.storage.batch_layout import ATTR_CONTROL, ATTR_TRANSACTIONAL

TS = 1_700_000_000_000
TOPIC_ID = UUID("00010203-0405-0607-0809-0a0b0c0d0e0f")  # Kafka's Uuid.toString(): AAECAwQFBgcICQoLDA0ODw


def consumer_protocol(entity: object, version: int = 3) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return struct.pack(">h", version) + buf.getvalue()


SUBSCRIPTION = consumer_protocol(
    ConsumerProtocolSubscription(
        topics=("foo",),
        user_data=None,
        owned_partitions=(OwnedPartition(topic=TopicName("foo"), partitions=(i32(0),)),),
        generation_id=i32(0),
        rack_id="rack",
    )
)
ASSIGNMENT = consumer_protocol(
    ConsumerProtocolAssignment(
        assigned_partitions=(AssignedPartition(topic=TopicName("foo"), partitions=(i32(0),)),), user_data=None
    )
)


def member(subscription: bytes, assignment: bytes) -> MemberValue:
    return MemberValue("member", "instance", "client", "host", 1000, 100, subscription, assignment)


def group(subscription: bytes, assignment: bytes, protocol_type: str = "consumer") -> GroupValue:
    return GroupValue(protocol_type, 10, "range", "member", -1, (member(subscription, assignment),))


# (key, value) of each record, offsets 0.. in order.
RECORDS: list[tuple[bytes | None, bytes | None]] = [
    (encode_key(OffsetKey("grp", "orders", 3)), encode_value(OffsetValue(42, 5, "md", TS))),
    (encode_key(OffsetKey("grp", "orders", 4)), encode_value(OffsetValue(7, -1, "", TS, TS + 60_000))),
    (encode_key(GroupKey("group")), encode_value(group(SUBSCRIPTION, ASSIGNMENT), 4)),
    (encode_key(GroupKey("group")), encode_value(group(b"Subscription", b"Assignment"), 4)),
    (encode_key(GroupKey("connect-g")), encode_value(group(b"\x00\x01", b"", "connect"), 2)),
    (encode_key(OffsetKey("grp", "orders", 3)), None),
    (encode_key(GroupKey("group")), None),
    (struct.pack(">h", 32767) + b"\x00\x01g", b"\x00\x00"),
    (encode_key(ConsumerGroupMetadataKey("group")), encode_value(ConsumerGroupMetadataValue(10))),
    (encode_key(OffsetKey("grp", "orders", 3)), b"\x00\x03\x00"),
    (None, b"no key"),
    (encode_key(GroupKey('ünïcödé "q"')), encode_value(GroupValue("", 0, None, None, -1, ()), 0)),
    (encode_key(GroupKey("g0")), encode_value(group(SUBSCRIPTION, ASSIGNMENT), 0)),
    (encode_key(GroupKey("g1")), encode_value(group(SUBSCRIPTION, ASSIGNMENT), 1)),
    # KIP-848's consumer-group records, types 4..8, a tombstone, and (as in Kafka's test) a
    # ConsumerGroupMemberMetadataValue with Java's defaults ("" for every string) under a type 3 key.
    (
        encode_key(ConsumerGroupPartitionMetadataKey("group")),
        encode_value(ConsumerGroupPartitionMetadataValue((TopicMetadata(TOPIC_ID, "foo", 3),))),
    ),
    (
        encode_key(ConsumerGroupMemberMetadataKey("group", "member")),
        encode_value(
            ConsumerGroupMemberMetadataValue(
                None, "rack", "client", "/127.0.0.1", ("bar", "foo"), None, "uniform", 45000
            )
        ),
    ),
    (
        encode_key(ConsumerGroupTargetAssignmentMetadataKey("group")),
        encode_value(ConsumerGroupTargetAssignmentMetadataValue(10)),
    ),
    (
        encode_key(ConsumerGroupTargetAssignmentMemberKey("group", "member")),
        encode_value(ConsumerGroupTargetAssignmentMemberValue((TopicPartitions(TOPIC_ID, (0, 2)),))),
    ),
    (
        encode_key(ConsumerGroupCurrentMemberAssignmentKey("group", "member")),
        encode_value(
            ConsumerGroupCurrentMemberAssignmentValue(
                10, 9, 1, (TopicPartitions(TOPIC_ID, (0,)),), (TopicPartitions(TOPIC_ID, (2,)),)
            )
        ),
    ),
    (encode_key(ConsumerGroupMemberMetadataKey("group", "member")), None),
    (encode_key(ConsumerGroupMetadataKey("group")), bytes.fromhex("0000 01 01 01 01 01 01 ffffffff 01 00")),
]

SUBSCRIPTION_JSON = (
    '{"topics":["foo"],"userData":null,"ownedPartitions":[{"topic":"foo","partitions":[0]}],'
    '"generationId":0,"rackId":"rack"}'
)
ASSIGNMENT_JSON = '{"assignedPartitions":[{"topic":"foo","partitions":[0]}],"userData":null}'
B64_SUB, B64_ASSIGN = base64.b64encode(b"Subscription").decode(), base64.b64encode(b"Assignment").decode()
EXPECTED_KEYS_AND_PAYLOADS = [
    ' key: {"type":"1","data":{"group":"grp","topic":"orders","partition":3}}'
    ' payload: {"version":"3","data":{"offset":42,"leaderEpoch":5,"metadata":"md","commitTimestamp":1700000000000}}',
    ' key: {"type":"1","data":{"group":"grp","topic":"orders","partition":4}}'
    ' payload: {"version":"1","data":{"offset":7,"metadata":"","commitTimestamp":1700000000000,'
    '"expireTimestamp":1700000060000}}',
    # Kafka's DumpLogSegmentsTest.testOffsetsMessageParser expects exactly these two for this group:
    ' key: {"type":"2","data":{"group":"group"}}'
    ' payload: {"version":"4","data":{"protocolType":"consumer","generation":10,"protocol":"range",'
    '"leader":"member","currentStateTimestamp":-1,"members":[{"memberId":"member",'
    '"groupInstanceId":"instance","clientId":"client","clientHost":"host",'
    '"rebalanceTimeout":1000,"sessionTimeout":100,"subscription":{"topics":["foo"],'
    '"userData":null,"ownedPartitions":[{"topic":"foo","partitions":[0]}],'
    '"generationId":0,"rackId":"rack"},"assignment":{"assignedPartitions":'
    '[{"topic":"foo","partitions":[0]}],"userData":null}}]}}',
    ' key: {"type":"2","data":{"group":"group"}}'
    ' payload: {"version":"4","data":{"protocolType":"consumer","generation":10,"protocol":"range",'
    '"leader":"member","currentStateTimestamp":-1,"members":[{"memberId":"member",'
    '"groupInstanceId":"instance","clientId":"client","clientHost":"host",'
    f'"rebalanceTimeout":1000,"sessionTimeout":100,"subscription":"{B64_SUB}",'
    f'"assignment":"{B64_ASSIGN}"}}]}}}}',
    # Not the consumer protocol: the member's bytes stay bytes. Version 2 has no groupInstanceId.
    ' key: {"type":"2","data":{"group":"connect-g"}}'
    ' payload: {"version":"2","data":{"protocolType":"connect","generation":10,"protocol":"range",'
    '"leader":"member","currentStateTimestamp":-1,"members":[{"memberId":"member",'
    '"clientId":"client","clientHost":"host",'
    '"rebalanceTimeout":1000,"sessionTimeout":100,"subscription":"AAE=","assignment":""}]}}',
    ' key: {"type":"1","data":{"group":"grp","topic":"orders","partition":3}} payload: <DELETE>',
    ' key: {"type":"2","data":{"group":"group"}} payload: <DELETE>',
    " key: Unknown record type 32767 at offset 7, skipping.",
    # Kafka's DumpLogSegmentsTest.testOffsetsMessageParser expects exactly this for this record:
    ' key: {"type":"3","data":{"groupId":"group"}} payload: {"version":"0","data":{"epoch":10}}',
    " key: Error at offset 9, skipping. could not read value version 3: need 8 bytes at 2, 1 left",
    " key: Failed to decode message at offset 10 using offset topic decoder (message had a missing key)",
    ' key: {"type":"2","data":{"group":"ünïcödé \\"q\\""}}'
    ' payload: {"version":"0","data":{"protocolType":"","generation":0,"protocol":null,"leader":null,"members":[]}}',
    # Version 0: no currentStateTimestamp, groupInstanceId or rebalanceTimeout; version 1 adds rebalanceTimeout.
    ' key: {"type":"2","data":{"group":"g0"}}'
    ' payload: {"version":"0","data":{"protocolType":"consumer","generation":10,"protocol":"range",'
    '"leader":"member","members":[{"memberId":"member","clientId":"client","clientHost":"host",'
    f'"sessionTimeout":100,"subscription":{SUBSCRIPTION_JSON},"assignment":{ASSIGNMENT_JSON}}}]}}}}',
    ' key: {"type":"2","data":{"group":"g1"}}'
    ' payload: {"version":"1","data":{"protocolType":"consumer","generation":10,"protocol":"range",'
    '"leader":"member","members":[{"memberId":"member","clientId":"client","clientHost":"host",'
    f'"rebalanceTimeout":1000,"sessionTimeout":100,"subscription":{SUBSCRIPTION_JSON},'
    f'"assignment":{ASSIGNMENT_JSON}}}]}}}}',
    ' key: {"type":"4","data":{"groupId":"group"}}'
    ' payload: {"version":"0","data":{"topics":[{"topicId":"AAECAwQFBgcICQoLDA0ODw","topicName":"foo",'
    '"numPartitions":3,"partitionMetadata":[]}]}}',
    ' key: {"type":"5","data":{"groupId":"group","memberId":"member"}}'
    ' payload: {"version":"0","data":{"instanceId":null,"rackId":"rack","clientId":"client",'
    '"clientHost":"/127.0.0.1","subscribedTopicNames":["bar","foo"],"subscribedTopicRegex":null,'
    '"rebalanceTimeoutMs":45000,"serverAssignor":"uniform"}}',
    ' key: {"type":"6","data":{"groupId":"group"}} payload: {"version":"0","data":{"assignmentEpoch":10}}',
    ' key: {"type":"7","data":{"groupId":"group","memberId":"member"}}'
    ' payload: {"version":"0","data":{"topicPartitions":[{"topicId":"AAECAwQFBgcICQoLDA0ODw","partitions":[0,2]}]}}',
    ' key: {"type":"8","data":{"groupId":"group","memberId":"member"}}'
    ' payload: {"version":"0","data":{"memberEpoch":10,"previousMemberEpoch":9,"state":1,'
    '"assignedPartitions":[{"topicId":"AAECAwQFBgcICQoLDA0ODw","partitions":[0]}],'
    '"partitionsPendingRevocation":[{"topicId":"AAECAwQFBgcICQoLDA0ODw","partitions":[2]}]}}',
    ' key: {"type":"5","data":{"groupId":"group","memberId":"member"}} payload: <DELETE>',
    # Kafka: "... due to: Error reading byte array of 536870911 byte(s): only 1 byte(s) available."
    " key: Error at offset 20, skipping. could not read value version 0: need 536870911 bytes at 13, 1 left",
]


# A transactional offset commit (producer 9) and its commit marker (control record: key
# version 0 + type 1 = COMMIT; value version 0 + coordinator epoch 5).
TXN_COMMIT = (encode_key(OffsetKey("txn-g", "orders", 0)), encode_value(OffsetValue(99, 2, "", TS)))
COMMIT_MARKER = (b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x05")
EXPECTED_TXN = [
    ' key: {"type":"1","data":{"group":"txn-g","topic":"orders","partition":0}}'
    ' payload: {"version":"3","data":{"offset":99,"leaderEpoch":2,"metadata":"","commitTimestamp":1700000000000}}',
    " endTxnMarker: COMMIT coordinatorEpoch: 5",
]


def write_segment(tmp_path: Path) -> Path:
    """Three batches (2, 5 and the rest) of the records above, then a transactional batch and
    its commit marker, as the log writes them."""
    d = tmp_path / "__consumer_offsets-7"
    d.mkdir()
    records = [Record(i, TS + i, k, v) for i, (k, v) in enumerate(RECORDS)]
    segment = d / "00000000000000000000.log"
    with segment.open("wb") as f:
        for batch in (records[:2], records[2:7], records[7:]):
            f.write(encode_records(batch, BatchHeader(partition_leader_epoch=4, attributes=0)))
        n = len(records)
        txn = BatchHeader(partition_leader_epoch=4, attributes=ATTR_TRANSACTIONAL, producer_id=9, producer_epoch=0)
        f.write(encode_records([Record(n, TS + n, *TXN_COMMIT)], txn))
        marker = BatchHeader(4, ATTR_TRANSACTIONAL | ATTR_CONTROL, producer_id=9, producer_epoch=0)
        f.write(encode_records([Record(n + 1, TS + n + 1, *COMMIT_MARKER)], marker))
    return segment


def record_prefix(offset: int, key: bytes | None, value: bytes | None) -> str:
    return (
        f"| offset: {offset} CreateTime: {TS + offset} keySize: {-1 if key is None else len(key)} "
        f"valueSize: {-1 if value is None else len(value)} sequence: -1 headerKeys: []"
    )


def test_pykraft_log_dump_offsets_decoder(tmp_path: Path) -> None:
    segment = write_segment(tmp_path)
    out = subprocess.run(
        [sys.executable, "-m", "api.cli", "log", "dump", "--offsets-decoder", "--files", str(segment)],
        capture_output=True,
        text=True,
        check=True,
    )
    lines = out.stdout.splitlines()
    assert lines[:2] == [f"Dumping {segment}", "Log starting offset: 0"]
    batch_lines = [line for line in lines if line.startswith("baseOffset: ")]
    n = len(RECORDS)
    assert [line.split(" count: ")[0] for line in batch_lines] == [
        "baseOffset: 0 lastOffset: 1",
        "baseOffset: 2 lastOffset: 6",
        f"baseOffset: 7 lastOffset: {n - 1}",
        f"baseOffset: {n} lastOffset: {n}",
        f"baseOffset: {n + 1} lastOffset: {n + 1}",
    ]
    expected = [
        record_prefix(offset, key, value) + text
        for offset, ((key, value), text) in enumerate(
            zip([*RECORDS, TXN_COMMIT, COMMIT_MARKER], [*EXPECTED_KEYS_AND_PAYLOADS, *EXPECTED_TXN], strict=True)
        )
    ]
    assert [line for line in lines if line.startswith("| ")] == expected
    assert len(lines) == 2 + len(batch_lines) + len(expected)


def test_print_data_log_prints_no_key_or_payload_for_a_control_record(tmp_path: Path) -> None:
    segment = write_segment(tmp_path)
    out = subprocess.run(
        [sys.executable, "-m", "api.cli", "log", "dump", "--print-data-log", "--files", str(segment)],
        capture_output=True,
        text=True,
        check=True,
    )
    last = out.stdout.splitlines()[-1]
    assert last == record_prefix(len(RECORDS) + 1, *COMMIT_MARKER) + " endTxnMarker: COMMIT coordinatorEpoch: 5"


def test_a_subscription_of_an_unknown_version_stays_bytes() -> None:
    newer = struct.pack(">h", 4) + SUBSCRIPTION[2:]
    _, payload = parse_offsets_record(0, encode_key(GroupKey("g")), encode_value(group(newer, ASSIGNMENT)))
    assert payload is not None
    assert f'"subscription":"{base64.b64encode(newer).decode()}"' in payload
    assert '"assignment":{"assignedPartitions":[{"topic":"foo","partitions":[0]}],"userData":null}' in payload


def test_garbage_values_never_raise() -> None:
    key = encode_key(GroupKey("g"))
    for n in range(0, 40):
        text, payload = parse_offsets_record(5, key, encode_value(group(SUBSCRIPTION, ASSIGNMENT))[:n])
        assert payload is None and text is not None and text.startswith("Error at offset 5, skipping.")
    assert parse_offsets_record(5, b"\x00", None) == (
        "Error at offset 5, skipping. could not read the version of the key",
        None,
    )
