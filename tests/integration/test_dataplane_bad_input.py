"""Bad input against a real broker of a real cluster: hostile frames (hypothesis) get an
answer or a closed connection, bad batches get Kafka's error codes, and the broker keeps
serving real clients throughout (and nothing it acknowledged is lost)."""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from dataplane_support import bootstrap, broker_port, create_topic, partition_state, start_dataplane_cluster
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse
from kafka.record.default_records import DefaultRecordBatchBuilder
from metadata_cluster import MetadataCluster

from tests.scale import examples
from tests.unit.broker_kafka.test_kafka_listener import hostile_frames

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MetadataCluster]:
    c = start_dataplane_cluster(Path(tmp_path_factory.mktemp("badinput")))
    try:
        create_topic(c, "t", partitions=1, rf=3)
        yield c
    finally:
        c.close()


# asyncio's report of a failed task nobody awaited: bad input must end as the transport's
# INFO line "closing connection from <peer>: ...", never as one of these.
UNHANDLED_TASK_ERROR = "Task exception was never retrieved"


def unhandled_task_errors(cluster: MetadataCluster) -> list[str]:
    """The lines of every broker's log that report an unhandled asyncio task error."""
    return [
        f"broker {b}: {line}"
        for b in cluster.broker_ids
        for line in cluster.node_log(b).splitlines()
        if UNHANDLED_TASK_ERROR in line
    ]


@pytest.fixture(autouse=True)
def no_unhandled_task_errors(cluster: MetadataCluster) -> Iterator[None]:
    yield
    assert unhandled_task_errors(cluster) == []


def leader_port(cluster: MetadataCluster, topic: str = "t") -> int:
    return broker_port(cluster, int(partition_state(cluster, topic)[0]["leader"]))


def read_frame(s: socket.socket) -> bytes | None:
    head = b""
    while len(head) < 4:
        chunk = s.recv(4 - len(head))
        if not chunk:
            return None
        head += chunk
    (size,) = struct.unpack(">i", head)
    body = b""
    while len(body) < size:
        chunk = s.recv(size - len(body))
        if not chunk:
            return None
        body += chunk
    return body


ACKED: list[tuple[int, bytes]] = []
"""(offset, value) of every record `produce_ok` got acknowledged in this module's cluster."""


def produce_ok(cluster: MetadataCluster, value: bytes) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap(cluster), "acks": "all"})
    reports: list[tuple[object, int]] = []
    p.produce("t", value=value, partition=0, on_delivery=lambda err, msg: reports.append((err, msg.offset())))
    assert p.flush(20) == 0
    assert [err for err, _ in reports] == [None]
    ACKED.append((reports[0][1], value))


def batch(n: int = 3) -> bytearray:
    b = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=False, producer_id=-1, producer_epoch=-1, base_sequence=-1,
        batch_size=1 << 20,
    )  # fmt: skip
    for i in range(n):
        b.append(i, timestamp=1_700_000_000_000 + i, key=None, value=b"v%d" % i, headers=[])
    return bytearray(b.build())


def produce_frame(records: bytes, version: int = 9, acks: int = -1, correlation_id: int = 7) -> bytes:
    """A framed Produce request of `records` to partition t-0."""
    req = ProduceRequest(
        transactional_id=None,
        acks=acks,
        timeout_ms=5000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name="t",
                partition_data=[ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=records)],
            )
        ],
    )
    req.with_header(correlation_id=correlation_id, client_id="bad-input")
    frame = bytes(req.encode(version=version, header=True))
    return struct.pack(">i", len(frame)) + frame


def produce_raw(port: int, records: bytes, version: int = 9) -> int:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(produce_frame(records, version))
        body = read_frame(s)
    assert body is not None

    decoded = ProduceResponse.decode(body, version=version, header=True)
    return int(decoded.responses[0].partition_responses[0].error_code)


@pytest.mark.parametrize(
    ("damage", "expected"),
    [("crc", 2), ("magic", 87), ("count", 87), ("length", 87), ("too-large", 10)],
)
def test_bad_batches_get_kafka_error_codes(cluster: MetadataCluster, damage: str, expected: int) -> None:
    port = leader_port(cluster)
    data = batch()
    if damage == "crc":
        data[-1] ^= 0xFF
    elif damage == "magic":
        data[16] = 1
    elif damage == "count":
        struct.pack_into(">i", data, 57, 9)  # recordCount no longer matches
    elif damage == "length":
        struct.pack_into(">i", data, 8, len(data) + 100)  # batchLength lies
    else:
        big = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, batch_size=4 << 20)
        big.append(0, timestamp=1, key=None, value=b"x" * 1_100_000, headers=[])
        data = bytearray(big.build())
    code = produce_raw(port, bytes(data))
    # kio-level (listener) and log-level checks answer with Kafka's codes: CORRUPT_MESSAGE (2)
    # for a bad CRC, INVALID_RECORD (87) for a batch that does not frame, MESSAGE_TOO_LARGE (10).
    assert code in ({expected} | ({2, 87} if expected in (2, 87) else set())), code
    produce_ok(cluster, f"after-{damage}".encode())


def test_failing_acks0_produces_pipelined_close_the_connection_quietly(cluster: MetadataCluster) -> None:
    """acks=0 producers learn of a failure by the connection closing (Kafka's way). With
    several such requests in flight on one connection, the first failure closes it and
    the others must end quietly: `unhandled_task_errors` (checked after every test of this
    module) finds asyncio's "Task exception was never retrieved" in the broker's log."""
    port = leader_port(cluster)
    bad = batch()
    bad[-1] ^= 0xFF  # CRC mismatch: refused by the log after the request was read
    burst = b"".join(produce_frame(bytes(bad), acks=0, correlation_id=corr) for corr in range(20))
    for _ in range(10):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(burst)
            assert read_frame(s) is None  # closed, never answered (acks=0)
    produce_ok(cluster, b"after-acks0-burst")


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(frames=st.lists(hostile_frames(), min_size=1, max_size=4))
def test_hostile_frames_leave_the_broker_serving(cluster: MetadataCluster, frames: list[tuple[str, bytes]]) -> None:
    """A few hostile frames pipelined on one connection (a lying length prefix swallows
    the frames after it)."""
    port = leader_port(cluster)
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.sendall(b"".join(frame for _kind, frame in frames))
        s.shutdown(socket.SHUT_WR)
        try:
            body = read_frame(s)
        except (TimeoutError, ConnectionResetError):
            body = None
        if body is not None:
            assert len(body) >= 4
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(bytes.fromhex("0000000a0012000000000001ffff"))  # ApiVersions v0, correlation 1
        reply = read_frame(s)
    assert reply is not None and reply[:4] == b"\x00\x00\x00\x01"


def test_everything_acknowledged_is_still_there(cluster: MetadataCluster) -> None:
    from dataplane_support import confluent_consume_all

    produce_ok(cluster, b"final")
    msgs = confluent_consume_all(bootstrap(cluster), "t", [0], expected=10_000, timeout=8)
    assert [m.offset() for m in msgs] == list(range(len(msgs)))
    # Every record acknowledged in this module, after all the hostile input, at its offset.
    held = {m.offset(): m.value() for m in msgs}
    assert len(ACKED) >= 1 and all(held.get(offset) == value for offset, value in ACKED), (ACKED, len(held))


def metadata_v12_frame(body: bytes, correlation_id: int) -> bytes:
    """A framed Metadata v12 request (header v2, client id "md") with `body` as given."""
    frame = struct.pack(">hhih", 3, 12, correlation_id, 2) + b"md" + b"\x00" + body
    return struct.pack(">i", len(frame)) + frame


@pytest.mark.parametrize(
    ("body", "all_topics"),
    [
        pytest.param(b"\x00\x00\x00\x00", True, id="null-topics"),
        pytest.param(b"\x01\x00\x00\x00", False, id="empty-topics"),
        # librdkafka >= 2.x (Metadata v9+) asking for all topics: a 4-byte zero array-count
        # placeholder, then allow_auto_topic_creation, include_topic_authorized_operations
        # and the tagged fields; Kafka reads a null array and ignores the 3 bytes left.
        pytest.param(b"\x00\x00\x00\x00\x01\x00\x00", True, id="librdkafka-all-topics"),
    ],
)
def test_metadata_v12_with_null_or_empty_topics_is_answered(
    cluster: MetadataCluster, body: bytes, all_topics: bool
) -> None:
    from kafka.protocol.metadata.metadata import MetadataResponse

    with socket.create_connection(("127.0.0.1", leader_port(cluster)), timeout=10) as s:
        for corr in (21, 22):  # twice on one connection: it stays open
            s.sendall(metadata_v12_frame(body, corr))
            reply = read_frame(s)
            assert reply is not None, "connection closed"
            decoded = MetadataResponse[12].decode(reply, header=True)  # type: ignore[index]
            assert decoded.header.correlation_id == corr
            names = {t[1] for t in decoded.topics}
            assert ("t" in names) is all_topics and (bool(names) is all_topics)
            assert {b[0] for b in decoded.brokers} == set(cluster.broker_ids)


def test_confluent_kafka_list_topics(cluster: MetadataCluster) -> None:
    """librdkafka's rd_kafka_metadata() (Metadata v12 with its array placeholder)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap(cluster)})
    md = p.list_topics(timeout=10)
    assert "t" in md.topics and sorted(md.brokers) == sorted(cluster.broker_ids)
    assert list(p.list_topics("t", timeout=10).topics) == ["t"]
