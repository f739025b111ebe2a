"""Empty and null arrays in every request the broker advertises, at every advertised version.

Each request is built from kio's schema with one item in every array (so that nested
arrays are reached), then each array in turn is set to empty and, where the schema allows
it, to null. The frame is written by kio's own writer (independent of the project's
`Writer`), decoded by the decoder the broker uses for that api (the kio-schema reader,
the hand-rolled Produce, Fetch and OffsetCommit decoders, the admin codec of the forwarded apis), and
the decoded value is compared with what the request says, Kafka's meaning included:
DescribeConfigs' empty `configuration_keys` means every config, as null does.

Also: librdkafka's Metadata v9+ request for all topics (its four-byte array placeholder,
see `quorum.wire._reader.read_request_body`) is answered with every topic.
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import struct
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from kafka.protocol.metadata.metadata import MetadataResponse
from kafka.protocol.producer.produce import ProduceRequest
from kio.index import UnknownEntity, load_request_schema
from kio.schema.errors import ErrorCode as KioErrorCode
from kio.serial import entity_writer
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_schema_field_type,
    is_optional,
)

from broker.kafka.apis import FORWARDED, SUPPORTED, ApiKey, is_flexible
from broker.kafka.context import RequestContext, decode_body
from broker.kafka.fetch import decode_fetch
from broker.kafka.offset_commit_wire import decode_offset_commit
from broker.kafka.produce import decode_produce
from broker.kafka.server import KafkaRequestHandler
from broker.kafka.wire import MalformedRequest, parse_request_header
from broker.kafka.write_txn_markers import decode_write_txn_markers
from quorum.wire.admin_codec import AdminRequestError, decode_admin_request
from quorum.wire.codec import WireError
from tests.unit.broker_kafka.conftest import TOPICS

Path = tuple[tuple[str, int | None], ...]  # (field name, item index or None for the field itself)

# Values that every decoder reads back as written (a zero uuid reads back as None).
_PRIMITIVES: dict[str, Any] = {
    "int8": 2,
    "int16": 2,
    "int32": 2,
    "int64": 2,
    "uint8": 2,
    "uint16": 2,
    "uint32": 2,
    "uint64": 2,
    "float64": 2.0,
    "bool": True,
    "string": "a",
    "bytes": b"a",
    "records": b"r",
    "uuid": uuid.UUID(int=1),
    "error_code": KioErrorCode.none,
    "timedelta_i32": timedelta(milliseconds=2),
    "timedelta_i64": timedelta(milliseconds=2),
}

# Where the generic value would be a request the decoder rightly refuses.
_OVERRIDES: dict[tuple[str, str], Any] = {
    ("DeleteTopicState", "topic_id"): None,  # a name and an id: INVALID_REQUEST (Kafka)
    ("AlterConfigsResource", "resource_type"): 2,  # TOPIC; IncrementalAlterConfigs refuses others
}


def _sample(cls: type[Any]) -> Any:
    """An entity of `cls` with a value in every field and one item in every array."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        override = _OVERRIDES.get((cls.__name__, f.name), _OVERRIDES)
        if override is not _OVERRIDES:
            values[f.name] = override
            continue
        match classify_field(f):
            case PrimitiveField():
                values[f.name] = _PRIMITIVES[get_schema_field_type(f)]
            case PrimitiveTupleField():
                values[f.name] = (_PRIMITIVES[get_schema_field_type(f)],)
            case EntityField(entity_type):
                values[f.name] = _sample(entity_type)
            case EntityTupleField(entity_type):
                values[f.name] = (_sample(entity_type),)
    return cls(**values)


def _arrays(entity: Any, path: Path = ()) -> Iterator[tuple[Path, bool]]:
    """(path, nullable) of every array field in `entity`, nested ones included."""
    for f in dataclasses.fields(entity):
        cls = classify_field(f)
        value = getattr(entity, f.name)
        if isinstance(cls, PrimitiveTupleField | EntityTupleField):
            yield (*path, (f.name, None)), is_optional(f)
            if isinstance(cls, EntityTupleField):
                for i, item in enumerate(value):
                    yield from _arrays(item, (*path, (f.name, i)))
        elif isinstance(cls, EntityField) and value is not None:
            yield from _arrays(value, (*path, (f.name, None)))


def _replace(entity: Any, path: Path, value: Any) -> Any:
    (name, index), rest = path[0], path[1:]
    if not rest:
        return dataclasses.replace(entity, **{name: value})
    current = getattr(entity, name)
    if index is None:
        return dataclasses.replace(entity, **{name: _replace(current, rest, value)})
    items = list(current)
    items[index] = _replace(items[index], rest, value)
    return dataclasses.replace(entity, **{name: tuple(items)})


def _frame(key: int, version: int, body: Any) -> bytes:
    """The request frame (without its length prefix), written by kio."""
    cls = type(body)
    header = cls.__header_schema__(
        request_api_key=key, request_api_version=version, correlation_id=9, client_id="arrays"
    )
    buf = io.BytesIO()
    entity_writer(cls.__header_schema__)(buf, header)
    entity_writer(cls)(buf, body)
    return buf.getvalue()


def _context(key: int, version: int, frame: bytes) -> RequestContext:
    flexible = is_flexible(key, version)
    view = memoryview(frame)
    return RequestContext(parse_request_header(view, flexible), view, flexible)


# --------------------------------------------------------------------------- per-api meaning


def _records(value: memoryview | bytes | None) -> bytes | None:
    return None if value is None else bytes(value)


def _produce(body: Any, ctx: RequestContext) -> tuple[Any, Any]:
    got = decode_produce(ctx)
    want = tuple((t.name, tuple((p.index, _records(p.records)) for p in t.partition_data)) for t in body.topic_data)
    return tuple((name, tuple((i, _records(r)) for i, r in parts)) for name, parts in got.topics), want


def _fetch(body: Any, ctx: RequestContext) -> tuple[Any, Any]:
    got = decode_fetch(ctx)
    want_parts = tuple(
        (t.topic, p.partition, p.fetch_offset, p.partition_max_bytes) for t in body.topics for p in t.partitions
    )
    want_forgotten = tuple((t.topic, p) for t in getattr(body, "forgotten_topics_data", ()) for p in t.partitions)
    got_parts = tuple((p.topic, p.partition, p.fetch_offset, p.partition_max_bytes) for p in got.partitions)
    return (got_parts, got.forgotten), (want_parts, want_forgotten)


def _write_txn_markers(body: Any, ctx: RequestContext) -> tuple[Any, Any]:
    got = [
        (m.producer_id, m.producer_epoch, m.committed, m.coordinator_epoch, topics)
        for m, topics in decode_write_txn_markers(ctx)
    ]
    want = [
        (m.producer_id, m.producer_epoch, m.transaction_result, m.coordinator_epoch,
         tuple((t.name, tuple(t.partition_indexes)) for t in m.topics))
        for m in body.markers
    ]  # fmt: skip
    return got, want


def _offset_commit(body: Any, ctx: RequestContext) -> tuple[Any, Any]:
    got = decode_offset_commit(ctx)
    want = tuple((t.name, tuple(p.partition_index for p in t.partitions)) for t in body.topics)
    return tuple((name, tuple(p[0] for p in parts)) for name, parts in got.topics), want


def _admin(frame: bytes) -> Any:
    try:
        return decode_admin_request(frame).request
    except AdminRequestError as exc:  # refused per item: what was read is in the skeleton
        return exc.decoded.request


def _create_topics(body: Any, frame: bytes) -> tuple[Any, Any]:
    got = tuple((t.name, t.assignments, dict(t.configs)) for t in _admin(frame).topics)
    want = tuple(
        (
            t.name,
            {a.partition_index: tuple(a.broker_ids) for a in t.assignments} or None,  # none given: automatic
            {c.name: c.value for c in t.configs},
        )
        for t in body.topics
    )
    return got, want


def _delete_topics(body: Any, frame: bytes) -> tuple[Any, Any]:
    got = _admin(frame)
    if hasattr(body, "topic_names"):
        return (got.names, got.topic_ids), (tuple(body.topic_names), ())
    return (got.names, got.topic_ids), (tuple(t.name for t in body.topics), ())


def _describe_configs(body: Any, frame: bytes) -> tuple[Any, Any]:
    got = tuple((r.resource_name, r.config_names) for r in _admin(frame).resources)
    # Kafka (ConfigHelper): null or empty configuration_keys = every config.
    want = tuple((r.resource_name, tuple(r.configuration_keys or ()) or None) for r in body.resources)
    return got, want


def _create_partitions(body: Any, frame: bytes) -> tuple[Any, Any]:
    got = tuple((t.name, t.count, t.assignments) for t in _admin(frame).topics)
    want = tuple(
        (t.name, t.count, None if t.assignments is None else tuple(tuple(a.broker_ids) for a in t.assignments))
        for t in body.topics
    )
    return got, want


def _elect_leaders(body: Any, frame: bytes) -> tuple[Any, Any]:
    got = _admin(frame).partitions
    if body.topic_partitions is None:
        return got, None  # every partition
    return got, tuple((t.topic, p) for t in body.topic_partitions for p in t.partitions)


def _incremental_alter_configs(body: Any, frame: bytes) -> tuple[Any, Any]:
    got = tuple((r.resource_name, tuple((op.name, op.value) for op in r.ops)) for r in _admin(frame).resources)
    want = tuple((r.resource_name, tuple((c.name, c.value) for c in r.configs)) for r in body.resources)
    return got, want


_ADMIN: dict[int, Callable[[Any, bytes], tuple[Any, Any]]] = {
    ApiKey.CREATE_TOPICS: _create_topics,
    ApiKey.DELETE_TOPICS: _delete_topics,
    ApiKey.DESCRIBE_CONFIGS: _describe_configs,
    ApiKey.CREATE_PARTITIONS: _create_partitions,
    ApiKey.ELECT_LEADERS: _elect_leaders,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: _incremental_alter_configs,
}
assert set(_ADMIN) == set(FORWARDED)


def decoded_and_expected(key: int, version: int, body: Any) -> tuple[Any, Any]:
    """(what the broker's decoder for `key` makes of `body` written by kio, what it should)."""
    frame = _frame(key, version, body)
    if key in _ADMIN:
        return _ADMIN[key](body, frame)
    ctx = _context(key, version, frame)
    if key == ApiKey.PRODUCE:
        return _produce(body, ctx)
    if key == ApiKey.FETCH:
        return _fetch(body, ctx)
    if key == ApiKey.WRITE_TXN_MARKERS:
        return _write_txn_markers(body, ctx)
    if key == ApiKey.OFFSET_COMMIT:
        return _offset_commit(body, ctx)
    return decode_body(ctx), body  # the kio-schema apis: the very entity


# --------------------------------------------------------------------------- the cases


def _kio_has(key: int, version: int) -> bool:
    try:
        load_request_schema(key, version)
    except UnknownEntity:
        return False
    return True


# Produce v0-2 (advertised for librdkafka's feature probe, answered UNSUPPORTED_VERSION)
# have no kio schema (Kafka 4 dropped them): kafka-python writes those.
OLD_PRODUCE = [v for v in range(SUPPORTED[ApiKey.PRODUCE][0], 3) if not _kio_has(ApiKey.PRODUCE, v)]


def _cases() -> Iterator[Any]:
    for key, (low, high) in sorted(SUPPORTED.items()):
        for version in range(low, high + 1):
            if key == ApiKey.PRODUCE and version in OLD_PRODUCE:
                continue
            if key == ApiKey.WRITE_TXN_MARKERS and not _kio_has(key, version):
                continue  # v0: kio dropped it (Kafka 4); tests/unit/txn_log covers its bytes
            base = _sample(load_request_schema(key, version))
            for path, nullable in _arrays(base):
                name = ".".join(f"{n}[{i}]" if i is not None else n for n, i in path)
                for value in ((), None):
                    label = "empty" if value is not None else "null" if nullable else "null-refused"
                    yield pytest.param(
                        key, version, path, value, nullable, id=f"{ApiKey(key).name}-v{version}-{name}-{label}"
                    )


CASES = list(_cases())


def test_every_advertised_api_and_version_has_array_cases() -> None:
    keys_with_arrays = {c.values[0] for c in CASES}
    # ApiVersions, DescribeCluster, Heartbeat, InitProducerId, AddOffsetsToTxn and EndTxn have no
    # arrays in their requests.
    no_arrays = {ApiKey.API_VERSIONS, ApiKey.DESCRIBE_CLUSTER, ApiKey.HEARTBEAT, ApiKey.INIT_PRODUCER_ID,
                 ApiKey.ADD_OFFSETS_TO_TXN, ApiKey.END_TXN}  # fmt: skip
    assert keys_with_arrays == set(SUPPORTED) - no_arrays
    assert any(c.values[3] is None and c.values[4] for c in CASES)  # nullable arrays exist and are covered


@pytest.mark.parametrize(("key", "version", "path", "value", "nullable"), CASES)
def test_empty_and_null_arrays_decode_to_what_the_request_says(
    key: int, version: int, path: Path, value: Any, nullable: bool
) -> None:
    base = _sample(load_request_schema(key, version))
    got, want = decoded_and_expected(key, version, base)
    assert got == want  # the base request itself
    variant = _replace(base, path, value)
    if value is None and not nullable:
        # Kafka's generated readers refuse it ("non-nullable field ... was serialized as
        # null"): the request is malformed and its connection closed.
        with pytest.raises((MalformedRequest, WireError)) as info:
            decoded_and_expected(key, version, variant)
        assert not isinstance(info.value, AdminRequestError)
        return
    got, want = decoded_and_expected(key, version, variant)
    assert got == want


@pytest.mark.parametrize("version", OLD_PRODUCE)
@pytest.mark.parametrize(
    "topics",
    [
        [("a", [(2, b"r")])],  # the base request
        [],  # empty topic_data
        [("a", [])],  # empty partition_data
        [("a", []), ("b", [(3, b"s"), (4, b"")])],
        None,  # null topic_data: refused
        [("a", None)],  # null partition_data: refused
    ],
)
def test_old_produce_versions_decode_empty_arrays(version: int, topics: list[Any] | None) -> None:
    data = ProduceRequest.TopicProduceData
    request = ProduceRequest(
        transactional_id=None,
        acks=1,
        timeout_ms=5,
        topic_data=None
        if topics is None
        else [
            data(
                name=name,
                partition_data=None
                if parts is None
                else [data.PartitionProduceData(index=i, records=r) for i, r in parts],
            )
            for name, parts in topics
        ],
    )
    request.with_header(correlation_id=9, client_id="arrays")
    ctx = _context(ApiKey.PRODUCE, version, bytes(request.encode(version=version, header=True)))
    if topics is None or any(parts is None for _, parts in topics):
        with pytest.raises(MalformedRequest):
            decode_produce(ctx)
        return
    got = decode_produce(ctx)
    assert (got.acks, got.timeout_ms) == (1, 5)
    assert [(name, [(i, _records(r)) for i, r in parts]) for name, parts in got.topics] == topics


# --------------------------------------------------------------------------- librdkafka's Metadata


def _metadata_frame(version: int, body: bytes, correlation_id: int = 5) -> bytes:
    """A Metadata request frame (without its length prefix): header v2 + `body` as given."""
    head = struct.pack(">hhih", ApiKey.METADATA, version, correlation_id, 4) + b"rdkf" + b"\x00"
    return head + body


@pytest.mark.parametrize(
    ("body", "all_topics"),
    [
        # librdkafka 2.16 rd_kafka_metadata(): a 4-byte zero count placeholder, then
        # allow_auto_topic_creation=1, include_topic_authorized_operations=0, no tags.
        pytest.param(bytes.fromhex("00000000010000"), True, id="librdkafka-all-topics-auto-create"),
        pytest.param(bytes.fromhex("00000000000000"), True, id="librdkafka-all-topics"),
        pytest.param(bytes.fromhex("01000000"), False, id="librdkafka-brokers-only-empty-array"),
        pytest.param(bytes.fromhex("00000000"), True, id="null-exact-length"),
    ],
)
def test_librdkafka_metadata_requests_are_answered(handler: KafkaRequestHandler, body: bytes, all_topics: bool) -> None:
    raw = asyncio.run(handler(_metadata_frame(12, body)))
    assert raw is not None
    response = MetadataResponse[12].decode(bytes(raw)[4:], header=True)  # type: ignore[index]
    assert response.header.correlation_id == 5
    names = sorted(t[1] for t in response.topics)
    assert names == (sorted(TOPICS) if all_topics else [])
