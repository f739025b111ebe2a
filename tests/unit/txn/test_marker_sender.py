"""`MarkerSender` against small Kafka-protocol servers on loopback that answer WriteTxnMarkers
v1 (the real partition-log side is another module's; the integration test uses it)."""

from __future__ import annotations

import asyncio
import io
import struct
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode as KioErrorCode
from kio.serial import entity_writer

from broker.kafka.wire import frame_response, parse_request_header
from broker.txn.marker_sender import NO_PARTITION, MarkerSender
from broker.txn.messages import MarkerRequest, TopicPartition, TxnResult
from quorum.kafka_errors import ErrorCode
from quorum.wire._reader import read_request_body

E = ErrorCode
REQUEST = load_request_schema(27, 1)
RESPONSE = load_response_schema(27, 1)


def _nested(cls: Any, name: str) -> Any:
    import sys

    return getattr(sys.modules[cls.__module__], name)


class FakeBroker:
    """Answers each WriteTxnMarkers partition with `answer(tp)`; records what it got."""

    def __init__(self, answer: Callable[[TopicPartition], ErrorCode]) -> None:
        self.answer = answer
        self.received: list[tuple[int, int, bool, int, tuple[TopicPartition, ...]]] = []
        self.requests = 0
        self.server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                frame = await reader.readexactly(size)
                header = parse_request_header(memoryview(frame), True)
                body = read_request_body(REQUEST, frame, header.body_offset)
                self.requests += 1
                results = []
                for m in body.markers:
                    tps = tuple((t.name, int(p)) for t in m.topics for p in t.partition_indexes)
                    self.received.append((int(m.producer_id), int(m.producer_epoch), bool(m.transaction_result),
                                          int(m.coordinator_epoch), tps))  # fmt: skip
                    pr = _nested(RESPONSE, "WritableTxnMarkerPartitionResult")
                    tr = _nested(RESPONSE, "WritableTxnMarkerTopicResult")
                    topics = tuple(
                        tr(name=t.name, partitions=tuple(
                            pr(partition_index=p, error_code=KioErrorCode(int(self.answer((t.name, int(p))))))
                            for p in t.partition_indexes))
                        for t in m.topics
                    )  # fmt: skip
                    results.append(_nested(RESPONSE, "WritableTxnMarkerResult")(producer_id=m.producer_id,
                                                                                topics=topics))  # fmt: skip
                buf = io.BytesIO()
                entity_writer(RESPONSE)(buf, RESPONSE(markers=tuple(results)))
                writer.write(frame_response(header.correlation_id, True, buf.getbuffer()))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()


class Results:
    def __init__(self) -> None:
        self.written: list[tuple[MarkerRequest, dict[TopicPartition, ErrorCode]]] = []
        self.deleted: list[tuple[MarkerRequest, frozenset[TopicPartition]]] = []
        self.current = True
        self.changed = asyncio.Event()

    def markers_written(self, request: MarkerRequest, results: Mapping[TopicPartition, ErrorCode]) -> None:
        self.written.append((request, dict(results)))
        self.changed.set()

    def partitions_deleted(self, request: MarkerRequest, partitions: frozenset[TopicPartition]) -> None:
        self.deleted.append((request, partitions))
        self.changed.set()

    def is_current(self, request: MarkerRequest) -> bool:
        return self.current

    async def next(self) -> None:
        async with asyncio.timeout(5):
            await self.changed.wait()
        self.changed.clear()


def request(*tps: TopicPartition, pid: int = 7, result: TxnResult = TxnResult.COMMIT) -> MarkerRequest:
    return MarkerRequest("tx", pid, 3, 11, result, frozenset(tps))


def run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(coro)


def test_markers_are_grouped_per_leader_and_their_results_reported() -> None:
    async def go() -> None:
        b1, b2 = FakeBroker(lambda tp: E.NONE), FakeBroker(lambda tp: E.NONE)
        await b1.start()
        await b2.start()
        leaders = {("a", 0): (1, 5), ("a", 1): (2, 5), ("b", 0): (1, 5)}
        ports = {1: b1.port, 2: b2.port}
        results = Results()
        sender = MarkerSender(9, lambda t, p: leaders[(t, p)], lambda b: ("127.0.0.1", ports[b]), results)
        sender.start()
        r = request(("a", 0), ("a", 1), ("b", 0))
        sender.send(r)
        got: dict[TopicPartition, ErrorCode] = {}
        while len(got) < 3:
            await results.next()
            for req, res in results.written:
                assert req == r
                got.update(res)
        assert got == {("a", 0): E.NONE, ("a", 1): E.NONE, ("b", 0): E.NONE}
        assert b1.received == [(7, 3, True, 11, (("a", 0), ("b", 0)))]  # one request for broker 1's two
        assert b2.received == [(7, 3, True, 11, (("a", 1),))]
        await sender.stop()
        await b1.stop()
        await b2.stop()

    run(go())


def test_a_refused_partition_waits_for_a_new_leader_and_a_deleted_one_is_reported() -> None:
    async def go() -> None:
        old = FakeBroker(lambda tp: E.NOT_LEADER_OR_FOLLOWER)
        new = FakeBroker(lambda tp: E.NONE)
        await old.start()
        await new.start()
        leaders: dict[TopicPartition, tuple[int, int] | None] = {("a", 0): (1, 5), ("gone", 0): NO_PARTITION}
        ports = {1: old.port, 2: new.port}
        results = Results()
        sender = MarkerSender(9, lambda t, p: leaders[(t, p)], lambda b: ("127.0.0.1", ports[b]), results)
        sender.start()
        r = request(("a", 0), ("gone", 0), result=TxnResult.ABORT)
        sender.send(r)
        while not (results.deleted and results.written):
            await results.next()
        assert results.deleted == [(r, frozenset({("gone", 0)}))]
        assert results.written == [(r, {("a", 0): E.NOT_LEADER_OR_FOLLOWER})]
        # The coordinator sends the partition again: it waits while the metadata is unchanged.
        sender.send(request(("a", 0), result=TxnResult.ABORT))
        sender.on_metadata()
        await asyncio.sleep(0.3)
        assert old.requests == 1 and sender.waiting == 1
        leaders[("a", 0)] = (2, 6)  # the partition moved
        sender.on_metadata()
        await results.next()
        assert results.written[-1][1] == {("a", 0): E.NONE}
        assert new.received == [(7, 3, False, 11, (("a", 0),))]
        await sender.stop()
        await old.stop()
        await new.stop()

    run(go())


def test_an_unreachable_leader_is_tried_again_and_a_moved_coordinator_drops_its_markers() -> None:
    async def go() -> None:
        broker = FakeBroker(lambda tp: E.NONE)
        await broker.start()
        port = broker.port
        await broker.stop()  # nothing listens there yet
        leaders = {("a", 0): (1, 5)}
        results = Results()
        sender = MarkerSender(9, lambda t, p: leaders[(t, p)], lambda b: ("127.0.0.1", port), results,
                              retry_backoff_s=0.05)  # fmt: skip
        sender.start()
        sender.send(request(("a", 0)))
        await asyncio.sleep(0.3)
        assert results.written == [] and sender.waiting == 1  # kept, retried
        again = FakeBroker(lambda tp: E.NONE)
        again.server = await asyncio.start_server(again._serve, "127.0.0.1", port)
        await results.next()
        assert results.written[-1][1] == {("a", 0): E.NONE}
        results.current = False
        sender.send(request(("a", 0), pid=8))
        await asyncio.sleep(0.2)
        assert sender.waiting == 0 and again.requests == 1  # dropped, never sent
        await sender.stop()
        await again.stop()

    run(go())
