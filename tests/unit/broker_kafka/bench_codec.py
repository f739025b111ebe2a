"""Micro-benchmark of the listener's hot paths (not collected by pytest; run it):

    PYTHONPATH=. python tests/unit/broker_kafka/bench_codec.py [--profile]

Measures, with services that answer at once (so only the listener's own cost shows):
- Produce: decode + hand the records over + encode the answer, in-process;
- Fetch: decode + encode an answer carrying the records;
- the same Produce through a loopback socket (transport framing included), pipelined.
Prints MB/s of record bytes and requests/s.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import socket
import struct
import time
from typing import Any

from kafka.protocol.consumer.fetch import FetchRequest
from kafka.protocol.producer.produce import ProduceRequest

from broker.kafka.server import KafkaListener, KafkaRequestHandler
from broker.kafka.services import (
    FetchParams,
    FetchPartitionResult,
    ListenerConfig,
    ProduceParams,
    ProducePartitionResult,
)
from quorum.kafka_errors import ErrorCode
from tests.unit.broker_kafka.conftest import batch
from tests.unit.broker_kafka.fake_services import FakeServices, make_image


class InstantServices(FakeServices):
    """Appends nothing, reads a fixed payload: the listener's cost only."""

    payload = b""

    async def produce(self, params: ProduceParams) -> list[ProducePartitionResult]:
        return [ProducePartitionResult(ErrorCode.NONE, base_offset=0, log_start_offset=0) for _ in params.partitions]

    async def fetch(self, params: FetchParams) -> list[FetchPartitionResult]:
        return [FetchPartitionResult(ErrorCode.NONE, 10, 10, 0, self.payload) for _ in params.partitions]


def _services(partitions: int) -> InstantServices:
    return InstantServices(make_image({1: ("127.0.0.1", 1, None)}, {"t": {p: (1, (1,)) for p in range(partitions)}}))


def produce_frame(partitions: int, batch_bytes: int, version: int = 9) -> bytes:
    records = batch(max(batch_bytes // 1024, 1), value_size=1000)
    req = ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout_ms=30000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name="t",
                partition_data=[
                    ProduceRequest.TopicProduceData.PartitionProduceData(index=p, records=records)
                    for p in range(partitions)
                ],
            )
        ],
    )
    req.with_header(correlation_id=1, client_id="bench")
    return bytes(req.encode(version=version, header=True))


def fetch_frame(partitions: int) -> bytes:
    req = FetchRequest(
        replica_id=-1,
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=50 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            FetchRequest.FetchTopic(
                topic="t",
                partitions=[
                    FetchRequest.FetchTopic.FetchPartition(
                        partition=p,
                        current_leader_epoch=-1,
                        fetch_offset=0,
                        last_fetched_epoch=-1,
                        log_start_offset=-1,
                        partition_max_bytes=1 << 20,
                    )
                    for p in range(partitions)
                ],
            )
        ],
        forgotten_topics_data=[],
        rack_id="",
    )
    req.with_header(correlation_id=1, client_id="bench")
    return bytes(req.encode(version=12, header=True))


async def in_process(
    handler: KafkaRequestHandler, frame: bytes, record_bytes: int, seconds: float
) -> tuple[float, float]:
    n = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(50):
            await handler(frame)
        n += 50
    took = time.perf_counter() - start
    return n * record_bytes / took / 1e6, n / took


async def over_socket(frame: bytes, record_bytes: int, count: int, depth: int = 8) -> tuple[float, float]:
    services = _services(1)
    listener = KafkaListener(services, ListenerConfig())
    port = await listener.start("127.0.0.1", 0)
    framed = struct.pack(">i", len(frame)) + frame
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    start = time.perf_counter()

    async def send() -> None:
        for _ in range(count):
            writer.write(framed)
            await writer.drain()

    async def receive() -> None:
        for _ in range(count):
            size = struct.unpack(">i", await reader.readexactly(4))[0]
            await reader.readexactly(size)

    await asyncio.gather(send(), receive())
    took = time.perf_counter() - start
    writer.close()
    await listener.stop()
    return count * record_bytes / took / 1e6, count / took


async def main(profile: bool) -> None:
    seconds = 1.5
    cases: list[tuple[str, int, int]] = [
        ("1 x 1 MiB", 1, 1 << 20),
        ("10 x 100 KiB", 10, 100 << 10),
        ("100 x 16 KiB", 100, 16 << 10),
    ]
    for name, parts, size in cases:
        frame = produce_frame(parts, size)
        record_bytes = parts * len(batch(max(size // 1024, 1), value_size=1000))
        handler = KafkaRequestHandler(_services(parts), ListenerConfig())
        mbs, rps = await in_process(handler, frame, record_bytes, seconds)
        print(f"produce in-process {name:>14}: {mbs:9.0f} MB/s {rps:9.0f} req/s")
    for name, parts, size in cases:
        services = _services(parts)
        services.payload = batch(max(size // 1024, 1), value_size=1000)
        handler = KafkaRequestHandler(services, ListenerConfig())
        frame = fetch_frame(parts)
        mbs, rps = await in_process(handler, frame, parts * len(services.payload), seconds)
        print(f"fetch   in-process {name:>14}: {mbs:9.0f} MB/s {rps:9.0f} req/s")
    frame = produce_frame(1, 1 << 20)
    mbs, rps = await over_socket(frame, len(batch(1024, value_size=1000)), 400)
    print(f"produce loopback socket 1 x 1 MiB: {mbs:9.0f} MB/s {rps:9.0f} req/s")
    if profile:
        handler = KafkaRequestHandler(_services(100), ListenerConfig())
        frame = produce_frame(100, 16 << 10)
        prof = cProfile.Profile()
        prof.enable()
        await in_process(handler, frame, 1, 1.0)
        prof.disable()
        pstats.Stats(prof).sort_stats("cumulative").print_stats(15)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--profile", action="store_true")
    args: Any = parser.parse_args()
    asyncio.run(main(args.profile))
    _ = socket
