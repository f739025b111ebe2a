"""The Kafka client behind the REST records endpoints: librdkafka (confluent-kafka), as the
REST Proxy uses a Kafka producer, so that a record written over HTTP takes the same path
as one from any client: a Produce request to the partition's leader, validated and
replicated by the broker, acknowledged with ``acks=all``.

`RecordProducer` bridges librdkafka to the node's event loop. ``send`` hands a record to
librdkafka and returns at once; a `Delivery` is filled in by librdkafka's delivery
callback, which runs on one polling thread per producer; after each poll that delivered
something, the thread wakes the loop once (not once per record) and the streams waiting
on it read their deliveries in order. Memory is bounded by librdkafka's queue
(``queue.buffering.max.kbytes``); a full queue makes ``send`` wait.

Producers are kept per batch size: a topic whose ``max.message.bytes`` is below
librdkafka's default ``batch.size`` gets batches no larger than it accepts, so a batch of
small records is never refused as a whole.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any, Final

from confluent_kafka import KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

from api.rest.errors import (
    KAFKA_DEFAULT_MESSAGES,
    KAFKA_ERROR,
    KAFKA_RETRIABLE_ERROR,
    PARTITION_NOT_FOUND,
    UNKNOWN_TOPIC_OR_PARTITION,
    kafka_error_http,
)
from api.rest.produce_payload import OutgoingRecord

log = logging.getLogger(__name__)

DEFAULT_BATCH_BYTES: Final = 1_000_000  # librdkafka's batch.size default
DELIVERY_TIMEOUT_MS: Final = 30_000  # a record not acknowledged by then is reported as failed
QUEUE_KBYTES: Final = 64 * 1024  # librdkafka's buffer for records not yet acknowledged
LINGER_MS: Final = 1  # a lone record (one per request) waits this long for others to share its batch
MAX_REQUEST_BYTES: Final = 104_857_600  # Kafka's socket.request.max.bytes: larger records are refused here
_POLL_S: Final = 0.1
_FULL_QUEUE_WAIT_S: Final = 0.005

# librdkafka's local error codes (negative) that have a REST meaning of their own.
_LOCAL_UNKNOWN_PARTITION: Final = KafkaError._UNKNOWN_PARTITION
_LOCAL_UNKNOWN_TOPIC: Final = KafkaError._UNKNOWN_TOPIC


class Delivery:
    """What became of one record: set once, by librdkafka's callback (or at once for a record
    that was refused before it was sent). ``done`` is written last."""

    __slots__ = ("record", "error_code", "message", "partition", "offset", "timestamp_ms", "done")

    def __init__(self, record: OutgoingRecord | None) -> None:
        self.record = record
        self.error_code = 200  # the report's REST code: 200, or the error's
        self.message = ""
        self.partition = -1
        self.offset = -1
        self.timestamp_ms: int | None = None
        self.done = False

    def fail(self, code: int, message: str) -> Delivery:
        self.error_code, self.message, self.done = code, message, True
        return self

    def __call__(self, err: KafkaError | None, msg: Message) -> None:
        # librdkafka's delivery callback, on the polling thread.
        if err is not None:
            self.error_code, self.message = delivery_error(err)
        else:
            self.partition = msg.partition() or 0  # both set on every successful delivery
            self.offset = msg.offset() or 0
            ts_type, ts = msg.timestamp()
            self.timestamp_ms = ts if ts_type != 0 else None
        self.done = True


def delivery_error(err: KafkaError) -> tuple[int, str]:
    """The REST code and message of a failed delivery (as the REST Proxy's mapper gives them)."""
    code = err.code()
    if code == _LOCAL_UNKNOWN_PARTITION:
        return PARTITION_NOT_FOUND, "Partition not found."
    if code == _LOCAL_UNKNOWN_TOPIC:
        return UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition."
    if code > 0:
        _, rest_code = kafka_error_http(code)
        return rest_code, KAFKA_DEFAULT_MESSAGES.get(code) or err.str()
    return (KAFKA_RETRIABLE_ERROR if err.retriable() else KAFKA_ERROR), err.str()


class _OneProducer:
    def __init__(self, config: dict[str, Any], loop: asyncio.AbstractEventLoop, wake: Callable[[], None]) -> None:
        self.producer = Producer(config)
        self._loop = loop
        self._wake = wake
        self._closed = False
        self._thread = threading.Thread(target=self._poll, name="rest-producer-poll", daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._closed:
            try:
                served = self.producer.poll(_POLL_S)
            except Exception:  # a callback can only fail on a bug; keep delivering the others
                log.exception("REST producer poll failed")
                continue
            if served:
                try:
                    self._loop.call_soon_threadsafe(self._wake)
                except RuntimeError:  # the loop is closed: the node is stopping
                    return

    def close(self, timeout_s: float) -> None:
        remaining = self.producer.flush(timeout_s)
        if remaining:
            log.warning("REST producer closed with %d records not acknowledged", remaining)
        self._closed = True
        self._thread.join(timeout=1.0)


class RecordProducer:
    """Producers (one per batch size) and an admin client, created on first use."""

    def __init__(self, bootstrap: Callable[[], str], client_id: str) -> None:
        self._bootstrap = bootstrap  # "host:port,..." of the live brokers, read when a client starts
        self._client_id = client_id
        self._producers: dict[int, _OneProducer] = {}
        self._admin: AdminClient | None = None
        self._waiters: set[asyncio.Event] = set()

    def _base_config(self) -> dict[str, Any]:
        return {
            "bootstrap.servers": self._bootstrap(),
            "client.id": self._client_id,
            "socket.nagle.disable": True,
            "logger": log,
        }

    def _producer(self, batch_bytes: int) -> Producer:
        size = max(1, min(DEFAULT_BATCH_BYTES, batch_bytes))
        one = self._producers.get(size)
        if one is None:
            config = self._base_config() | {
                "acks": "all",
                "enable.idempotence": False,  # pykraft's brokers do not grant producer ids yet
                "partitioner": "murmur2_random",  # keyed records land where Java's producer puts them
                "batch.size": size,
                "message.max.bytes": MAX_REQUEST_BYTES,  # the broker judges each record's size
                "message.timeout.ms": DELIVERY_TIMEOUT_MS,
                "queue.buffering.max.kbytes": QUEUE_KBYTES,
                "linger.ms": LINGER_MS,
            }
            one = _OneProducer(config, asyncio.get_running_loop(), self._wake_all)
            self._producers[size] = one
        return one.producer

    # ------------------------------------------------------------ sending

    async def send(self, topic: str, record: OutgoingRecord, batch_bytes: int, delivery: Delivery) -> None:
        """Hand `record` to librdkafka; `delivery` is filled in when it is acknowledged or fails."""
        producer = self._producer(batch_bytes)
        while True:
            try:
                producer.produce(
                    topic,
                    value=record.value,
                    key=record.key,
                    partition=-1 if record.partition is None else record.partition,
                    on_delivery=delivery,
                    timestamp=record.timestamp_ms or 0,
                    headers=list(record.headers) if record.headers else None,
                )
                return
            except BufferError:  # librdkafka's queue is full: wait for acknowledgements
                await asyncio.sleep(_FULL_QUEUE_WAIT_S)
            except KafkaException as exc:
                err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
                if err is None:
                    delivery.fail(KAFKA_ERROR, str(exc))
                else:
                    delivery.fail(*delivery_error(err))
                return

    def waiter(self) -> asyncio.Event:
        """An event set whenever some deliveries completed; `release` it when done."""
        event = asyncio.Event()
        self._waiters.add(event)
        return event

    def release(self, event: asyncio.Event) -> None:
        self._waiters.discard(event)

    def _wake_all(self) -> None:
        for event in self._waiters:
            event.set()

    # ------------------------------------------------------------ offsets

    async def partition_offsets(self, topic: str, partition: int, timeout_s: float = 10.0) -> tuple[int, int]:
        """(earliest, latest) offsets of a partition, from its leader (ListOffsets)."""
        if self._admin is None:
            self._admin = AdminClient(self._base_config())
        tp = TopicPartition(topic, partition)
        answers = []
        for spec in (OffsetSpec.earliest(), OffsetSpec.latest()):  # type: ignore[no-untyped-call]
            futures = self._admin.list_offsets({tp: spec}, request_timeout=timeout_s)
            answers.append(asyncio.wrap_future(futures[tp]))
        earliest, latest = await asyncio.gather(*answers)
        return int(earliest.offset), int(latest.offset)

    async def close(self, timeout_s: float = 5.0) -> None:
        producers, self._producers = list(self._producers.values()), {}
        for one in producers:
            await asyncio.to_thread(one.close, timeout_s)
