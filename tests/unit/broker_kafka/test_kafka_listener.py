"""The listener on a real loopback socket: real Kafka clients (kafka-python, confluent-kafka)
against the in-memory fake services, and hostile bytes (hypothesis) that must get an error
code or a closed connection while the listener keeps serving other connections.

The fake services stand in for the broker's state only; the codec, framing, ordering
and sessions exercised here are the real ones. End-to-end tests against real brokers are
in tests/integration (the integrator's)."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse

from broker.kafka.apis import SUPPORTED, ApiKey
from broker.kafka.server import KafkaListener
from broker.kafka.services import ListenerConfig
from quorum.kafka_errors import ErrorCode
from tests.scale import examples
from tests.unit.broker_kafka.conftest import batch
from tests.unit.broker_kafka.fake_services import FakeServices, make_image

pytestmark = pytest.mark.integration

MAX_FRAME = 1 << 20


class Running:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.services: FakeServices | None = None
        self.listener: KafkaListener | None = None
        self.port = 0

    def run(self, coro: Any, timeout: float = 10) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def _start(self) -> None:
        # Bind first, then publish the bound port in the image clients read.
        self.services = FakeServices(make_image({1: ("127.0.0.1", 1, None)}, {"t": {0: (1, (1,))}}), node_id=1)
        self.listener = KafkaListener(self.services, ListenerConfig(socket_request_max_bytes=MAX_FRAME))
        self.port = await self.listener.start("127.0.0.1", 0)
        self.services._image = make_image(
            {1: ("127.0.0.1", self.port, None)}, {"t": {0: (1, (1,))}, "u": {0: (1, (1,)), 1: (1, (1,))}}
        )
        for key in (("u", 0), ("u", 1)):
            self.services.parts.setdefault(key, type(self.services.parts[("t", 0)])())

    def stop(self) -> None:
        if self.listener is not None:
            self.run(self.listener.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@pytest.fixture(scope="module")
def broker() -> Iterator[Running]:
    r = Running()
    r.run(r._start())
    yield r
    r.stop()


def _roundtrip(port: int, frame: bytes, timeout: float = 5.0) -> bytes | None:
    """Send one framed request; the response body, or None if the broker closed."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(frame)
        return _read_frame(s)


def _read_frame(s: socket.socket) -> bytes | None:
    head = _read_exact(s, 4)
    if head is None:
        return None
    return _read_exact(s, struct.unpack(">i", head)[0])


def _read_exact(s: socket.socket, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def _api_versions_frame(correlation_id: int) -> bytes:
    req = ApiVersionsRequest(client_software_name="probe", client_software_version="1")
    req.with_header(correlation_id=correlation_id, client_id="probe")
    return bytes(req.encode(version=3, header=True, framed=True))


def _still_serving(port: int) -> None:
    body = _roundtrip(port, _api_versions_frame(4242))
    assert body is not None and struct.unpack_from(">i", body)[0] == 4242


# --------------------------------------------------------------------------- real clients


def test_kafka_python_produce_and_consume(broker: Running) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    producer = KafkaProducer(
        bootstrap_servers=f"127.0.0.1:{broker.port}", enable_idempotence=False, acks="all", linger_ms=5
    )
    futures = [producer.send("u", value=b"m%d" % i, partition=i % 2) for i in range(200)]
    producer.flush(10)
    offsets = [f.get(5).offset for f in futures]
    producer.close(5)
    assert sorted(offsets[0::2]) == list(range(100)) and sorted(offsets[1::2]) == list(range(100))
    consumer = KafkaConsumer(
        bootstrap_servers=f"127.0.0.1:{broker.port}", enable_auto_commit=False, consumer_timeout_ms=3000
    )
    consumer.assign([TopicPartition("u", 0), TopicPartition("u", 1)])
    consumer.seek_to_beginning()
    got: list[bytes] = []
    for msg in consumer:
        got.append(msg.value)
        if len(got) == 200:
            break
    consumer.close()
    assert sorted(got) == sorted(b"m%d" % i for i in range(200))


def test_confluent_kafka_produce_and_consume(broker: Running) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    p = Producer({"bootstrap.servers": f"127.0.0.1:{broker.port}", "acks": "all", "linger.ms": 5})
    delivered: list[int] = []
    for i in range(100):
        p.produce(
            "t",
            value=b"c%d" % i,
            partition=0,
            on_delivery=lambda err, msg: delivered.append(msg.offset()) if err is None else None,
        )
    assert p.flush(10) == 0
    assert len(delivered) == 100
    c = Consumer(
        {
            "bootstrap.servers": f"127.0.0.1:{broker.port}",
            "group.id": "unused",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    c.assign([TopicPartition("t", 0, min(delivered))])
    got = []
    deadline = time.monotonic() + 10
    while len(got) < 100 and time.monotonic() < deadline:
        msg = c.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    c.close()
    assert got == [b"c%d" % i for i in range(100)]


def test_kafka_python_default_idempotent_producer_gets_a_producer_id(broker: Running) -> None:
    """kafka-python 3.x enables idempotence by default: it asks InitProducerId first, then
    sends batches carrying that producer id, epoch 0 and sequences from 0."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=f"127.0.0.1:{broker.port}", max_block_ms=3000)
    try:
        metadata = producer.send("t", b"x", partition=0).get(5)
        assert metadata.offset >= 0
    finally:
        producer.close(2)
    assert broker.services is not None and broker.services.producer_ids_given == 1


# --------------------------------------------------------------------------- ordering


def test_pipelined_requests_answered_in_order(broker: Running) -> None:
    frames = []
    for corr in range(1, 21):
        if corr % 2:
            req: Any = MetadataRequest(topics=None, allow_auto_topic_creation=False)
            req.with_header(correlation_id=corr, client_id="p")
            frames.append(bytes(req.encode(version=12, header=True, framed=True)))
        else:
            frames.append(_api_versions_frame(corr))
    with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as s:
        s.sendall(b"".join(frames))
        seen = []
        for _ in frames:
            body = _read_frame(s)
            assert body is not None
            seen.append(struct.unpack_from(">i", body)[0])
    assert seen == list(range(1, 21))


# --------------------------------------------------------------------------- bad input


def test_oversized_and_negative_frames_close_only_that_connection(broker: Running) -> None:
    for prefix in (struct.pack(">i", MAX_FRAME + 1), struct.pack(">i", -5)):
        with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as s:
            s.sendall(prefix + b"\0" * 64)
            assert _read_exact(s, 4) is None
        _still_serving(broker.port)


def _valid_requests() -> list[tuple[bytes, Any, int]]:
    """(frame without length prefix, kafka-python response class, version) of well-formed
    requests that the fuzzer mutates."""
    produce = ProduceRequest(
        transactional_id=None,
        acks=1,
        timeout_ms=1000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name="t",
                partition_data=[ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=batch(2))],
            )
        ],
    )
    produce.with_header(correlation_id=11, client_id="f")
    fetch = FetchRequest(
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            FetchRequest.FetchTopic(
                topic="t",
                partitions=[
                    FetchRequest.FetchTopic.FetchPartition(
                        partition=0,
                        current_leader_epoch=-1,
                        fetch_offset=0,
                        last_fetched_epoch=-1,
                        log_start_offset=-1,
                        partition_max_bytes=1 << 20,
                    )
                ],
            )
        ],
        forgotten_topics_data=[],
        rack_id="",
    )
    fetch.with_header(correlation_id=12, client_id="f")
    metadata = MetadataRequest(topics=None, allow_auto_topic_creation=False)
    metadata.with_header(correlation_id=13, client_id="f")
    out = []
    for req, answer, versions in (
        (produce, ProduceResponse, (3, 9)),
        (fetch, FetchResponse, (4, 12)),
        (metadata, MetadataResponse, (1, 12)),
    ):
        for v in versions:
            out.append((bytes(req.encode(version=v, header=True)), answer, v))
    out.append((_api_versions_frame(14)[4:], ApiVersionsResponse, 3))
    return out


VALID_REQUESTS = _valid_requests()
VALID = [frame for frame, _, _ in VALID_REQUESTS]
ANSWER_OF = {frame[:8]: (answer, version) for frame, answer, version in VALID_REQUESTS}  # by key, version, corr id


def test_each_valid_request_gets_its_answer(broker: Running) -> None:
    """The frames the fuzzer starts from, unmutated: each answered, decodable at its version."""
    for frame, answer, version in VALID_REQUESTS:
        body = _roundtrip(broker.port, struct.pack(">i", len(frame)) + frame)
        assert body is not None, (answer, version)
        answer.decode(body, version=version, header=True)


@st.composite
def hostile_frames(draw: st.DrawFn) -> tuple[str, bytes]:
    kind = draw(st.sampled_from(["random", "header+random", "truncated", "flipped", "lying-prefix", "bad-version"]))
    if kind == "bad-version":  # a well-formed request relabelled with a version we do not serve
        valid = draw(st.sampled_from(VALID))
        key = struct.unpack_from(">h", valid)[0]
        low, high = SUPPORTED[key]
        version = draw(st.sampled_from([low - 1, high + 1, high + 7, -1]))
        body = valid[:2] + struct.pack(">h", version) + valid[4:]
    elif kind == "random":
        body = draw(st.binary(max_size=200))
    elif kind == "header+random":
        key = draw(st.sampled_from(sorted(SUPPORTED) + [4, 22, 999, -1]))
        low, high = SUPPORTED.get(key, (0, 3))
        version = draw(st.integers(min_value=low - 1, max_value=high + 1))
        body = struct.pack(">hhi", key, version, 77) + draw(st.binary(max_size=200))
    else:
        valid = draw(st.sampled_from(VALID))
        if kind == "truncated":
            body = valid[: draw(st.integers(min_value=0, max_value=len(valid) - 1))]
        elif kind == "flipped":
            data = bytearray(valid)
            for _ in range(draw(st.integers(min_value=1, max_value=8))):
                i = draw(st.integers(min_value=0, max_value=len(data) - 1))
                data[i] = draw(st.integers(min_value=0, max_value=255))
            body = bytes(data)
        else:  # a length prefix larger than the bytes that follow: the peer then goes away
            return kind, struct.pack(">i", len(valid) + draw(st.integers(min_value=1, max_value=1000))) + valid
    return kind, struct.pack(">i", len(body)) + body


def closed_by_its_header(body: bytes) -> bool:
    """Kafka closes the connection on a frame too short for (key, version, correlation id),
    an api it does not serve, or a version outside its range, ApiVersions excepted
    (KIP-511: answered UNSUPPORTED_VERSION)."""
    if len(body) < 8:
        return True
    key, version = struct.unpack_from(">hh", body)
    if key not in SUPPORTED:
        return True
    low, high = SUPPORTED[key]
    return key != ApiKey.API_VERSIONS and not low <= version <= high


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=hostile_frames())
def test_hostile_frames_get_an_answer_or_a_closed_connection(broker: Running, case: tuple[str, bytes]) -> None:
    """A closed connection exactly where Kafka closes one (the header, a lying length, a
    truncated body); an answer carries the request's correlation id, an ApiVersions at a
    version not ours is answered UNSUPPORTED_VERSION, and the answer to a frame whose
    header is intact decodes as that request's response."""
    kind, frame = case
    body = frame[4:]
    with socket.create_connection(("127.0.0.1", broker.port), timeout=2) as s:
        s.sendall(frame)
        s.shutdown(socket.SHUT_WR)  # a lying prefix waits for bytes that never come
        try:
            answer = _read_frame(s)
        except TimeoutError:
            # e.g. a mutated fetch now long-polling: only a request that was accepted may wait
            assert not closed_by_its_header(body) and kind not in ("truncated", "lying-prefix")
            answer = None
    must_close = closed_by_its_header(body) or kind == "lying-prefix"
    if kind == "truncated" and struct.unpack_from(">h", body.ljust(2, b"\xff"))[0] != ApiKey.API_VERSIONS:
        must_close = True  # every field of these requests is required: a cut body is malformed
    if must_close:
        assert answer is None
    if answer is not None:
        key, version, correlation_id = struct.unpack_from(">hhi", body)
        assert struct.unpack_from(">i", answer)[0] == correlation_id
        if key == ApiKey.API_VERSIONS:
            error = struct.unpack_from(">h", answer, 4)[0]
            low, high = SUPPORTED[key]
            if not low <= version <= high:
                assert error == ErrorCode.UNSUPPORTED_VERSION
        if body[:8] in ANSWER_OF:
            response, at = ANSWER_OF[body[:8]]
            response.decode(answer, version=at, header=True)
    _still_serving(broker.port)
