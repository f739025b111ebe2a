"""Records: ``POST .../topics/{topic_name}/records`` (REST Proxy v3 produce, streamed) and
``GET .../partitions/{partition_id}/offset`` (a partition's earliest and latest offsets).

Produce. The body is one produce request or many concatenated (`api.rest.json_stream`);
each becomes a record (`api.rest.produce_payload`) sent through the node's Kafka producer
(`api.rest.record_producer`), and the answer streams back one delivery report per record,
in request order, each followed by CRLF, as soon as the record and all before it are
acknowledged. The HTTP status is 200 once the body started; each report carries its own
``error_code`` (200, or the error as the REST Proxy maps it). The request is read while
the answer is written, so a client may keep one connection open and stream for as long
as it likes; at most `MAX_IN_FLIGHT` records wait for their reports (reading pauses, and
TCP pushes back on the client, beyond that).

Errors before the stream starts are plain error answers: an unknown cluster 404, an
unknown topic 404/40403, a body that is not ``application/json`` 415, an empty body 422,
no live broker 503/50302. In the stream: a request that is not a record 400, a partition
the topic does not have 40402, a value the broker refuses for its size 413, and Kafka's
other errors as `api.rest.errors.kafka_error_http` maps them. A body that stops being
JSON, or one record over the size bound, ends the stream after its error report.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from typing import Any, Final

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response
from starlette.types import Receive, Scope, Send

from api.context import NodeContext
from api.rest import models as m
from api.rest.common import (
    READ_ERRORS,
    ClusterScope,
    PartitionId,
    TopicName,
    error_response,
    error_responses,
    node_context,
)
from api.rest.errors import BROKER_NOT_AVAILABLE, KAFKA_RETRIABLE_ERROR, PARTITION_NOT_FOUND, ApiError, bad_request
from api.rest.json_stream import JsonStream, JsonSyntaxError, ValueTooLarge
from api.rest.lean_route import LeanRoute
from api.rest.produce_payload import BadRecord, ReportWriter, parse_request
from api.rest.record_producer import Delivery, RecordProducer
from quorum.controller.topic_configs import effective_config
from quorum.metadata.image import ConfigResource, MetadataImage

log = logging.getLogger(__name__)

router = APIRouter(prefix="/v3/clusters/{cluster_id}", route_class=LeanRoute)

MAX_IN_FLIGHT: Final = 8192  # records of one request waiting for their reports
_JSON_SLACK: Final = 64 * 1024  # JSON around a record's base64 payload
TOO_LARGE_MESSAGE: Final = "The request included a message larger than the maximum message size the server can accept."
EMPTY_BODY_MESSAGE: Final = "Payload error. Request body is empty. Data is required."
# No content-length: the answer is chunked, its length unknown until the body ends.
_STREAM_HEADERS: Final = [(b"content-type", b"application/json")]

# ---------------------------------------------------------------- the node's producer


def record_producer(request: Request) -> RecordProducer:
    """The app's producer, created on the first records request."""
    state = request.app.state
    producer: RecordProducer | None = getattr(state, "record_producer", None)
    if producer is None:
        ctx = node_context(request)
        producer = RecordProducer(lambda: bootstrap_servers(ctx), client_id=f"pykraft-rest-{ctx.node_id}")
        state.record_producer = producer
    return producer


def bootstrap_servers(ctx: NodeContext) -> str:
    """``host:port`` of every live broker's first plaintext listener, this node's first."""
    image = ctx.image()
    addresses: list[str] = []
    for broker in sorted(image.cluster.brokers.values(), key=lambda b: (b.id != ctx.node_id, b.id)):
        if broker.fenced:
            continue
        for endpoint in broker.listeners:
            if endpoint.security_protocol == 0:
                host = endpoint.host or "127.0.0.1"
                addresses.append(f"[{host}]:{endpoint.port}" if ":" in host else f"{host}:{endpoint.port}")
                break
    return ",".join(addresses)


def max_message_bytes(ctx: NodeContext, image: MetadataImage, topic: str) -> int:
    """The topic's effective ``max.message.bytes``: the largest batch its leader accepts."""
    value = effective_config(
        "max.message.bytes",
        image.topic_config(topic),
        ctx.broker_defaults(),
        dynamic_default_broker=image.config(ConfigResource.broker("")),
        dynamic_broker=image.config(ConfigResource.broker(ctx.node_id)),
    )
    assert isinstance(value, int)
    return value


# ---------------------------------------------------------------- produce

_NULLABLE_DATA: Final[dict[str, Any]] = {
    "anyOf": [
        {
            "type": "object",
            "properties": {"type": {"type": "string", "enum": ["BINARY", "JSON", "STRING"]}, "data": {}},
            "additionalProperties": False,
        },
        {"type": "null"},
    ]
}
_PRODUCE_BODY_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "description": (
        "One record; to produce many in one request, concatenate them (the answer then holds one "
        "delivery report per record, in order). type is BINARY (base64 data), JSON or STRING."
    ),
    "properties": {
        "partition_id": {"anyOf": [{"type": "integer", "format": "int32"}, {"type": "null"}]},
        "headers": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name"],
                "additionalProperties": False,
                "properties": {
                    "name": {"type": "string"},
                    "value": {"anyOf": [{"type": "string", "format": "byte"}, {"type": "null"}]},
                },
            },
        },
        "key": _NULLABLE_DATA,
        "value": _NULLABLE_DATA,
        "timestamp": {"anyOf": [{"type": "string", "format": "date-time"}, {"type": "null"}]},
    },
    "additionalProperties": False,
}


@router.post(
    "/topics/{topic_name}/records",
    summary="Produce Records",
    description=(
        "Produce records to a topic and stream back one delivery report per record, in order. "
        "Keep the connection open (Transfer-Encoding: chunked) to stream: each report's error_code "
        "is 200 or the record's own error; the HTTP status stays 200."
    ),
    tags=["Records (v3)"],
    response_model=m.ProduceResponse,
    responses=error_responses(404, 413, 415, 422),
    openapi_extra={
        "requestBody": {"required": True, "content": {"application/json": {"schema": _PRODUCE_BODY_SCHEMA}}}
    },
)
async def produce_records(request: Request, scope: ClusterScope, topic_name: TopicName) -> Response:
    topic = scope.topic(topic_name)
    content_type = request.headers.get("content-type", "")
    if content_type.split(";")[0].strip().lower() not in ("application/json", ""):
        raise ApiError(415, 415, "HTTP 415 Unsupported Media Type: send the records as application/json.")
    ctx = scope.ctx
    if not bootstrap_servers(ctx):
        raise ApiError(503, BROKER_NOT_AVAILABLE, "No broker is available to take the records.")
    limit = max_message_bytes(ctx, scope.image, topic_name)
    return RecordStream(
        producer=record_producer(request),
        ctx=ctx,
        topic=topic_name,
        partitions=len(topic.partitions),
        batch_bytes=limit,
        max_record_json=max(1 << 20, limit * 4 // 3 * 2 + _JSON_SLACK),
    )


class RecordStream(Response):
    """The produce answer as an ASGI app of its own: it reads the request body while it writes
    the reports (full duplex), which a buffered request or a plain streaming response cannot."""

    def __init__(
        self,
        *,
        producer: RecordProducer,
        ctx: NodeContext,
        topic: str,
        partitions: int,
        batch_bytes: int,
        max_record_json: int,
    ) -> None:
        super().__init__(status_code=200, media_type="application/json")
        self._producer = producer
        self._ctx = ctx
        self._topic = topic
        self._partitions = partitions
        self._batch_bytes = batch_bytes
        self._json = JsonStream(max_record_json)
        self._pending: deque[Delivery] = deque()
        self._reports = ReportWriter(ctx.cluster_id, topic)
        self._room = asyncio.Event()  # set when the writer took reports off `_pending`
        self._reading_done = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        first = await self._first_chunk(receive)
        if first is None:
            await error_response(ApiError(422, 422, EMPTY_BODY_MESSAGE))(scope, receive, send)
            return
        await send({"type": "http.response.start", "status": 200, "headers": _STREAM_HEADERS})
        wake = self._producer.waiter()
        reader = asyncio.create_task(self._read(*first, receive, wake))
        try:
            await self._write(send, wake)
        finally:
            self._producer.release(wake)
            if not reader.done():
                reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader

    # ------------------------------------------------------------ reading

    @staticmethod
    async def _first_chunk(receive: Receive) -> tuple[bytes, bool] | None:
        """The body up to its first byte that is not whitespace, and whether more follows;
        None when the body ends (or the client leaves) before one."""
        more_body = True
        while more_body:
            message = await receive()
            if message["type"] != "http.request":
                return None
            more_body = bool(message.get("more_body", False))
            data: bytes = message.get("body", b"")
            if data.strip():
                return data, more_body
        return None

    async def _read(self, data: bytes, more_body: bool, receive: Receive, wake: asyncio.Event) -> None:
        try:
            while True:
                for value in self._json.feed(data):
                    await self._send_one(value)
                if not more_body:
                    for value in self._json.close():
                        await self._send_one(value)
                    break
                message = await receive()
                if message["type"] != "http.request":  # the client went away
                    break
                more_body = bool(message.get("more_body", False))
                data = message.get("body", b"")
        except ValueTooLarge:
            self._pending.append(Delivery(None).fail(413, TOO_LARGE_MESSAGE))
        except JsonSyntaxError as exc:
            self._pending.append(Delivery(None).fail(400, f"Bad Request: Error processing JSON: {exc}"))
        finally:
            self._reading_done = True
            wake.set()

    async def _send_one(self, value: Any) -> None:
        while len(self._pending) >= MAX_IN_FLIGHT:
            self._room.clear()
            await self._room.wait()
        try:
            record = parse_request(value)
        except BadRecord as exc:
            self._pending.append(Delivery(None).fail(400, f"Bad Request: {exc}"))
            return
        delivery = Delivery(record)
        self._pending.append(delivery)
        if record.partition is not None and record.partition >= self._partitions:
            # The topic may have grown since the request started.
            topic = self._ctx.image().topic_by_name(self._topic)
            self._partitions = len(topic.partitions) if topic is not None else 0
            if record.partition >= self._partitions:
                delivery.fail(PARTITION_NOT_FOUND, "Partition not found.")
                return
        await self._producer.send(self._topic, record, self._batch_bytes, delivery)

    # ------------------------------------------------------------ writing

    async def _write(self, send: Send, wake: asyncio.Event) -> None:
        pending = self._pending
        reports = self._reports
        while True:
            out: list[str] = []
            while pending and pending[0].done:
                d = pending.popleft()
                if d.error_code == 200 and d.record is not None:
                    out.append(reports.success(d.record, d.partition, d.offset, d.timestamp_ms))
                else:
                    out.append(reports.error(d.error_code, d.message))
            if out:
                self._room.set()
                await send({"type": "http.response.body", "body": "".join(out).encode(), "more_body": True})
            if not pending and self._reading_done:
                break
            wake.clear()
            if pending and pending[0].done:
                continue
            await wake.wait()
        await send({"type": "http.response.body", "body": b"", "more_body": False})


# ---------------------------------------------------------------- offsets


@router.get(
    "/topics/{topic_name}/partitions/{partition_id}/offset",
    response_model=m.PartitionWithOffsetsData,
    summary="List Partition Offsets",
    tags=["Partition (v3)"],
    responses=error_responses(400, *READ_ERRORS),
)
async def get_partition_offsets(
    request: Request,
    scope: ClusterScope,
    topic_name: TopicName,
    partition_id: PartitionId,
    offset_type: str = Query(
        "earliest_and_latest",
        description="Only earliest_and_latest (another value answers 400/40002, as the REST Proxy does).",
        json_schema_extra={"enum": ["earliest_and_latest"]},
    ),
) -> m.PartitionWithOffsetsData:
    if offset_type != "earliest_and_latest":
        raise bad_request(f"offset_type:{offset_type} is invalid")
    scope.partition(topic_name, partition_id)
    if not bootstrap_servers(scope.ctx):
        raise ApiError(503, BROKER_NOT_AVAILABLE, "No broker is available to answer.")
    try:
        earliest, latest = await record_producer(request).partition_offsets(topic_name, partition_id)
    except Exception as exc:  # a KafkaException from the leader, or no leader in time
        raise ApiError(500, KAFKA_RETRIABLE_ERROR, f"The partition's offsets are not available: {exc}") from exc
    links = scope.links
    url = f"{links.partition(topic_name, partition_id)}/offset"
    return m.PartitionWithOffsetsData(
        metadata=links.meta(url, f"{links.crn_partition(topic_name, partition_id)}/offset_type={offset_type}"),
        cluster_id=links.cluster_id,
        topic_name=topic_name,
        partition_id=partition_id,
        earliest_offset=earliest,
        latest_offset=latest,
    )
