"""An in-memory `BrokerServices` for the listener's unit tests (a test fake: the real one
is the integrator's `broker.serving.LocalBrokerServices`).

Partitions hold whole batches in memory. Produce checks the CRC-32C (CORRUPT_MESSAGE) and
`max_message_bytes` (MESSAGE_TOO_LARGE), assigns offsets by patching baseOffset, and
leads only the partitions whose leader is `node_id` (NOT_LEADER_OR_FOLLOWER with the
leader hint otherwise). Fetch reads whole batches from the one holding the fetch offset,
at least one batch, and long-polls on an asyncio.Condition.
"""

from __future__ import annotations

import asyncio
import struct
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import crc32c

from broker.kafka.services import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    DeleteRecordsPartition,
    DeleteRecordsResult,
    EpochEndOffset,
    EpochQuery,
    FetchParams,
    FetchPartitionResult,
    LeaderHint,
    ListOffsetsPartition,
    ListOffsetsResult,
    LogDirDescription,
    LogDirPartition,
    PartitionView,
    ProduceParams,
    ProducePartitionResult,
    ReplicaView,
)
from quorum.kafka_errors import ErrorCode
from quorum.metadata.image import (
    BrokerRegistration,
    ClusterImage,
    MetadataImage,
    PartitionRegistration,
    TopicImage,
    TopicsImage,
)
from quorum.metadata.records import BrokerEndpoint


@dataclass
class FakePartition:
    batches: list[tuple[int, int, bytes]] = field(default_factory=list)  # (base, last, bytes)
    log_start: int = 0
    leo: int = 0
    epoch: int = 0


def make_image(
    brokers: Mapping[int, tuple[str, int, str | None]],
    topics: Mapping[str, Mapping[int, tuple[int, tuple[int, ...]]]],
    *,
    fenced: frozenset[int] = frozenset(),
) -> MetadataImage:
    """brokers: id -> (host, port, rack); topics: name -> {partition: (leader, replicas)}."""
    regs = {
        b: BrokerRegistration(
            id=b,
            epoch=10 + b,
            incarnation_id=uuid.UUID(int=b + 1),
            listeners=(BrokerEndpoint("PLAINTEXT", host, port),),
            rack=rack,
            fenced=b in fenced,
        )
        for b, (host, port, rack) in brokers.items()
    }
    by_id = {}
    for i, (name, parts) in enumerate(topics.items()):
        tid = uuid.UUID(int=1000 + i)
        by_id[tid] = TopicImage(
            name,
            tid,
            {
                p: PartitionRegistration(replicas=reps, isr=reps, leader=leader, leader_epoch=3)
                for p, (leader, reps) in parts.items()
            },
        )
    return MetadataImage(
        cluster=ClusterImage(regs),
        topics=TopicsImage(by_id=by_id, by_name={t.name: t for t in by_id.values()}),
    )


class FakeServices:
    def __init__(self, image: MetadataImage, node_id: int = 1, *, max_message_bytes: int = 1_048_588) -> None:
        self._image = image
        self._node_id = node_id
        self.max_message_bytes = max_message_bytes
        self.parts: dict[tuple[str, int], FakePartition] = {}
        self.changed = asyncio.Condition()
        self.forwarded: list[tuple[int, int, bytes]] = []
        self.forward_answer: bytes | None = None
        # Or a function (api key, version, frame) -> answer frame *with* length prefix.
        self.responder: Callable[[int, int, bytes], bytes] | None = None
        self.fetch_calls: list[FetchParams] = []
        self.views: dict[tuple[str, int], PartitionView] = {}
        self.producer_ids_given = 0
        for topic in image.topics.by_id.values():
            for pid in topic.partitions:
                self.parts[(topic.name, pid)] = FakePartition()

    @property
    def node_id(self) -> int:
        return self._node_id

    @property
    def cluster_id(self) -> str:
        return "fake-cluster-id"

    def image(self) -> MetadataImage:
        return self._image

    def _leader_check(self, topic: str, partition: int) -> tuple[ErrorCode, LeaderHint | None]:
        t = self._image.topic_by_name(topic)
        reg = t.partitions.get(partition) if t is not None else None
        if reg is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
        if reg.leader != self._node_id:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER, LeaderHint(reg.leader, reg.leader_epoch)
        return ErrorCode.NONE, None

    def _is_replica(self, topic: str, partition: int) -> bool:
        t = self._image.topic_by_name(topic)
        reg = t.partitions.get(partition) if t is not None else None
        return reg is not None and self._node_id in reg.replicas

    async def produce(self, params: ProduceParams) -> list[ProducePartitionResult]:
        out = []
        for p in params.partitions:
            err, hint = self._leader_check(p.topic, p.partition)
            if err != ErrorCode.NONE:
                out.append(ProducePartitionResult(err, current_leader=hint))
                continue
            data = bytearray(p.records)
            if len(data) > self.max_message_bytes:
                out.append(ProducePartitionResult(ErrorCode.MESSAGE_TOO_LARGE))
                continue
            (crc,) = struct.unpack_from(">I", data, 17)
            if crc32c.crc32c(bytes(data[21:])) != crc:
                out.append(ProducePartitionResult(ErrorCode.CORRUPT_MESSAGE, error_message="bad crc"))
                continue
            part = self.parts[(p.topic, p.partition)]
            (last_delta,) = struct.unpack_from(">i", data, 23)
            base = part.leo
            struct.pack_into(">q", data, 0, base)
            part.batches.append((base, base + last_delta, bytes(data)))
            part.leo = base + last_delta + 1
            out.append(ProducePartitionResult(ErrorCode.NONE, base_offset=base, log_start_offset=part.log_start))
        async with self.changed:
            self.changed.notify_all()
        return out

    def _read(self, part: FakePartition, offset: int, max_bytes: int, min_one: bool) -> bytes:
        chunks: list[bytes] = []
        size = 0
        for _base, last, data in part.batches:
            if last < offset:
                continue
            if size + len(data) > max_bytes and not (min_one and not chunks):
                break
            chunks.append(data)
            size += len(data)
        return b"".join(chunks)

    def _fetch_now(self, params: FetchParams) -> list[FetchPartitionResult]:
        out = []
        budget = params.max_bytes
        for p in params.partitions:
            err, hint = self._leader_check(p.topic, p.partition)
            follower_read = (
                not params.fetch_only_leader
                and err == ErrorCode.NOT_LEADER_OR_FOLLOWER
                and self._is_replica(p.topic, p.partition)
            )
            if err != ErrorCode.NONE and not follower_read:
                out.append(FetchPartitionResult(err, current_leader=hint))
                continue
            part = self.parts[(p.topic, p.partition)]
            if p.fetch_offset < part.log_start or p.fetch_offset > part.leo:
                out.append(FetchPartitionResult(ErrorCode.OFFSET_OUT_OF_RANGE, part.leo, part.leo, part.log_start))
                continue
            first = budget == params.max_bytes
            records = self._read(part, p.fetch_offset, min(p.partition_max_bytes, budget), first)
            budget = max(budget - len(records), 0)
            out.append(FetchPartitionResult(ErrorCode.NONE, part.leo, part.leo, part.log_start, records))
        return out

    async def fetch(self, params: FetchParams) -> list[FetchPartitionResult]:
        self.fetch_calls.append(params)
        deadline = time.monotonic() + params.max_wait_ms / 1000
        while True:
            results = self._fetch_now(params)
            size = sum(len(r.records) for r in results)
            errors = any(r.error != ErrorCode.NONE for r in results)
            remaining = deadline - time.monotonic()
            if size >= params.min_bytes or errors or remaining <= 0:
                return results
            async with self.changed:
                try:
                    await asyncio.wait_for(self.changed.wait(), remaining)
                except TimeoutError:
                    pass

    def partition_view(self, topic: str, partition: int) -> PartitionView | None:
        return self.views.get((topic, partition))

    async def list_offsets(
        self, replica_id: int, isolation_level: int, partitions: Sequence[ListOffsetsPartition]
    ) -> list[ListOffsetsResult]:
        out = []
        for p in partitions:
            err, hint = self._leader_check(p.topic, p.partition)
            if err != ErrorCode.NONE:
                out.append(ListOffsetsResult(err, current_leader=hint))
                continue
            part = self.parts[(p.topic, p.partition)]
            if p.timestamp == EARLIEST_TIMESTAMP:
                out.append(ListOffsetsResult(ErrorCode.NONE, -1, part.log_start, part.epoch))
            elif p.timestamp == LATEST_TIMESTAMP:
                out.append(ListOffsetsResult(ErrorCode.NONE, -1, part.leo, part.epoch))
            elif p.timestamp == MAX_TIMESTAMP:
                last = part.batches[-1][0] if part.batches else -1
                out.append(ListOffsetsResult(ErrorCode.NONE, 1234, last, part.epoch))
            else:
                out.append(ListOffsetsResult(ErrorCode.NONE, -1, -1, -1))
        return out

    async def offset_for_leader_epoch(self, replica_id: int, queries: Sequence[EpochQuery]) -> list[EpochEndOffset]:
        out = []
        for q in queries:
            err, _ = self._leader_check(q.topic, q.partition)
            if err != ErrorCode.NONE:
                out.append(EpochEndOffset(err))
            else:
                out.append(EpochEndOffset(ErrorCode.NONE, q.leader_epoch, self.parts[(q.topic, q.partition)].leo))
        return out

    async def delete_records(
        self, timeout_ms: int, partitions: Sequence[DeleteRecordsPartition]
    ) -> list[DeleteRecordsResult]:
        out = []
        for p in partitions:
            err, _ = self._leader_check(p.topic, p.partition)
            if err != ErrorCode.NONE:
                out.append(DeleteRecordsResult(err))
                continue
            part = self.parts[(p.topic, p.partition)]
            offset = part.leo if p.offset == -1 else p.offset
            if offset > part.leo:
                out.append(DeleteRecordsResult(ErrorCode.OFFSET_OUT_OF_RANGE))
                continue
            part.log_start = max(part.log_start, offset)
            out.append(DeleteRecordsResult(ErrorCode.NONE, part.log_start))
        return out

    def describe_log_dirs(self, topics: Mapping[str, Sequence[int]] | None) -> list[LogDirDescription]:
        parts = tuple(
            LogDirPartition(t, p, sum(len(b[2]) for b in fp.batches), 0)
            for (t, p), fp in sorted(self.parts.items())
            if topics is None or p in topics.get(t, ())
        )
        return [LogDirDescription("/fake/log-dir", ErrorCode.NONE, parts, 1 << 30, 1 << 29)]

    async def new_producer_id(self) -> tuple[ErrorCode, int]:
        self.producer_ids_given += 1
        return ErrorCode.NONE, 1000 + self.producer_ids_given - 1

    async def forward_to_controller(self, frame: bytes, api_key: int, api_version: int, timeout_ms: int) -> bytes:
        self.forwarded.append((api_key, api_version, frame))
        if self.responder is not None:
            return frame[8:12] + self.responder(api_key, api_version, frame)[8:]
        if self.forward_answer is None:
            raise TimeoutError("no controller in this fake")
        return frame[8:12] + self.forward_answer[4:]


def replica(broker_id: int, rack: str | None, leo: int, start: int = 0, caught_up: int = 0) -> ReplicaView:
    return ReplicaView(broker_id, rack, start, leo, caught_up)
