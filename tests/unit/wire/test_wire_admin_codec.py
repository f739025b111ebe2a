"""quorum.wire.admin_codec: version table, round trips at every served version (client
encoder -> server decoder, server encoder -> client decoder), blanket errors, requests
our typed values cannot express, and the layout kio's own reader sees."""

from __future__ import annotations

import struct
import uuid
from dataclasses import replace
from typing import Any

import pytest
import test_wire_admin_strategies as ads  # type: ignore[import-not-found,unused-ignore]  # a sibling module
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.index import UnknownEntity, load_request_schema, load_response_schema
from kio.serial import entity_reader as kio_native_reader

from quorum.controller.requests import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    AlterConfigOpType,
    AlterConfigsResource,
    AlterConfigsResult,
    AlterPartitionItem,
    AlterPartitionRequest,
    AlterPartitionResponse,
    AlterPartitionResult,
    BrokerEndpoint,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    ConfigResourceType,
    CreatableTopic,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsResult,
    CreateTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    ElectionType,
    ElectLeaderResult,
    ElectLeadersRequest,
    ElectLeadersResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    IsrMember,
)
from quorum.kafka_errors import default_message
from quorum.raft.errors import ErrorCode
from quorum.wire import codec
from quorum.wire.admin_codec import (
    ADMIN_API_VERSIONS,
    ADMIN_REQUEST_VERSIONS,
    AdminApiKey,
    AdminRequestError,
    ConfigEntry,
    ConfigSource,
    ConfigType,
    DecodedAdmin,
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeConfigsResult,
    UnregisterBrokerRequest,
    UnregisterBrokerResponse,
    admin_api_key,
    admin_error_response_for,
    decode_admin_request,
    decode_admin_response,
    encode_admin_error,
    encode_admin_request,
    encode_admin_response,
    is_admin_api,
)
from tests.scale import examples

SERVED = [(key, version) for key, (low, high) in sorted(ADMIN_API_VERSIONS.items()) for version in range(low, high + 1)]
NOT_CONTROLLER = 41


def ids(case: tuple[int, int]) -> str:
    key, version = case
    return f"{AdminApiKey(key).name.lower()}-v{version}"


def kio_parse(frame: bytes, cls: type[Any]) -> tuple[Any, Any]:
    """Parse one of *our* frames (with length prefix) with kio's native reader: an
    independent check that the bytes are what the schema says. Never fed foreign bytes."""
    (size,) = struct.unpack_from(">i", frame, 0)
    assert size == len(frame) - 4
    header, hsize = kio_native_reader(cls.__header_schema__)(frame, 4)
    body, bsize = kio_native_reader(cls)(frame, 4 + hsize)
    assert 4 + hsize + bsize == len(frame)
    return header, body


def request_for(key: int, version: int, data: st.DataObject) -> Any:
    return data.draw(ads.REQUESTS[key].filter(lambda r: ads.fits_version(r, version)), label="request")


def decoded_request(request: Any, version: int, correlation_id: int = 7) -> DecodedAdmin:
    frame, _, _ = encode_admin_request(request, correlation_id=correlation_id, client_id="c", api_version=version)
    return decode_admin_request(frame[4:])


# --------------------------------------------------------------------------- the version table


def test_version_table():
    assert set(ADMIN_API_VERSIONS) == {19, 20, 32, 37, 43, 44, 56, 60, 62, 63, 64, 67}
    assert ADMIN_REQUEST_VERSIONS == {k: hi for k, (_, hi) in ADMIN_API_VERSIONS.items()}
    for key in ADMIN_API_VERSIONS:
        assert is_admin_api(key)
    for key in (0, 1, 3, 18, 52, 55, 59, 65):
        assert not is_admin_api(key)
    assert not set(ADMIN_API_VERSIONS) & set(codec.API_VERSIONS)


@pytest.mark.parametrize("key", sorted(ADMIN_API_VERSIONS))
def test_served_range_is_every_version_kio_has(key):
    low, high = ADMIN_API_VERSIONS[key]
    # a range wherever Kafka has one
    assert low < high or key in (AdminApiKey.UNREGISTER_BROKER, AdminApiKey.ALLOCATE_PRODUCER_IDS)

    def has(version: int) -> bool:
        try:
            load_request_schema(key, version)
            load_response_schema(key, version)
        except UnknownEntity:  # kio has no schema of that version (anything else is a bug)
            return False
        return True

    assert all(has(v) for v in range(low, high + 1))
    assert not has(low - 1) and not has(high + 1)


def test_api_versions_advertises_the_admin_apis():
    advertised = codec.ApiVersionsResult().api_keys
    expected = {**codec.API_VERSIONS, **codec.VOTER_API_VERSIONS, **codec.FEATURE_API_VERSIONS, **ADMIN_API_VERSIONS}
    assert advertised == expected == codec.advertised_api_versions()
    # ApiVersions over the wire, and the KIP-511 answer to a version from the future.
    call = codec.encode_request(
        codec.ApiVersionsCall(), correlation_id=3, client_id="x", cluster_id=None, source_id=-1, destination_id=-1
    )
    request = codec.decode_request(call[4:])
    frame = codec.encode_response(request, codec.ApiVersionsResult())
    assert codec.decode_response(18, 4, frame[4:])[1].api_keys == advertised
    future = bytearray(call[4:])
    struct.pack_into(">h", future, 2, 9)
    with pytest.raises(codec.WireError) as info:
        codec.decode_request(bytes(future))
    answer = codec.error_response_for(info.value)
    assert answer is not None
    result = codec.decode_response(18, 4, answer[4:])[1]
    assert result.error == ErrorCode.UNSUPPORTED_VERSION and result.api_keys == advertised


@pytest.mark.parametrize("case", SERVED, ids=ids)
def test_codec_decode_request_still_refuses_admin_keys(case):
    """The node routes admin keys to this module; codec.decode_request keeps its answer."""
    key, version = case
    header = struct.pack(">hhih", key, version, 5, 1) + b"c"
    with pytest.raises(codec.WireError) as info:
        codec.decode_request(header + b"\x00" * 8)
    assert info.value.code == ErrorCode.INVALID_REQUEST
    assert info.value.header is not None and info.value.header.api_key == key
    assert codec.error_response_for(info.value) is None


# --------------------------------------------------------------------------- round trips


@settings(max_examples=examples(40))
@pytest.mark.parametrize("case", SERVED, ids=ids)
@given(data=st.data(), correlation_id=ads.i32, client_id=st.none() | st.text(max_size=10))
def test_request_round_trip_every_version(case, data, correlation_id, client_id):
    key, version = case
    request = request_for(key, version, data)
    frame, api_key, api_version = encode_admin_request(
        request, correlation_id=correlation_id, client_id=client_id, api_version=version
    )
    assert (api_key, api_version) == (key, version) and admin_api_key(request) == key
    decoded = decode_admin_request(frame[4:])
    assert (decoded.api_key, decoded.api_version) == (key, version)
    assert (decoded.correlation_id, decoded.client_id) == (correlation_id, client_id)
    assert decoded.header == codec.RequestHeaderInfo(key, version, correlation_id, client_id)
    assert decoded.request == ads.project_request(request, version)
    header, _ = kio_parse(frame, load_request_schema(key, version))
    assert (header.request_api_key, header.request_api_version, header.correlation_id) == (key, version, correlation_id)
    # Re-encoding what the server decoded gives the same bytes.
    again, _, _ = encode_admin_request(
        decoded.request, correlation_id=correlation_id, client_id=client_id, api_version=version
    )
    assert again == frame


@settings(max_examples=examples(40))
@pytest.mark.parametrize("case", SERVED, ids=ids)
@given(data=st.data(), correlation_id=ads.i32)
def test_response_round_trip_every_version(case, data, correlation_id):
    key, version = case
    decoded = decoded_request(request_for(key, version, data), version, correlation_id)
    response = data.draw(ads.RESPONSES[key], label="response")
    frame = encode_admin_response(decoded, response)
    header, _ = kio_parse(frame, load_response_schema(key, version))
    assert header.correlation_id == correlation_id
    assert decode_admin_response(key, version, frame[4:], decoded.request) == ads.project_response(response, version)


@settings(max_examples=examples(100))
@given(data=st.data())
def test_highest_version_round_trips_are_exact(data):
    key = data.draw(st.sampled_from(sorted(ADMIN_API_VERSIONS)), label="key")
    request = data.draw(ads.REQUESTS[key], label="request")
    frame, _, version = encode_admin_request(request, correlation_id=1, client_id=None)
    assert version == ADMIN_API_VERSIONS[key][1]
    decoded = decode_admin_request(frame[4:])
    assert decoded.request == request
    response = data.draw(ads.RESPONSES[key], label="response")
    # Exact, except that a BrokerRegistration refusal (no message field) decodes with Kafka's message.
    expected = ads.project_response(response, version) if key == 62 else response
    assert decode_admin_response(key, version, encode_admin_response(decoded, response)[4:]) == expected


# --------------------------------------------------------------------------- blanket errors


def expected_blanket(request: Any, code: int, message: str | None, version: int) -> Any:
    """What Kafka's getErrorResponse puts in each response, as our typed values."""
    match request:
        case CreateTopicsRequest():
            return CreateTopicsResponse(tuple(CreateTopicResult(t.name, code, message) for t in request.topics))
        case DeleteTopicsRequest():
            named = tuple(DeleteTopicResult(n, None, code, message) for n in request.names)
            by_id = tuple(DeleteTopicResult(None, i, code, message) for i in request.topic_ids)
            return ads.project_response(DeleteTopicsResponse(named + by_id), version)
        case CreatePartitionsRequest():
            return CreatePartitionsResponse(
                tuple(CreatePartitionsResult(t.name, code, message) for t in request.topics)
            )
        case IncrementalAlterConfigsRequest():
            return IncrementalAlterConfigsResponse(
                tuple(AlterConfigsResult(r.resource_type, r.resource_name, code, message) for r in request.resources)
            )
        case DescribeConfigsRequest():
            return DescribeConfigsResponse(
                tuple(DescribeConfigsResult(r.resource_type, r.resource_name, code, message) for r in request.resources)
            )
        case ElectLeadersRequest():
            results = tuple(ElectLeaderResult(t, p, code, message) for t, p in request.partitions or ())
            return ElectLeadersResponse(code if version >= 1 else 0, results)
        case BrokerRegistrationRequest():
            return BrokerRegistrationResponse(code, -1, default_message(code))  # no message on the wire
        case BrokerHeartbeatRequest():
            return BrokerHeartbeatResponse(code, is_caught_up=False, is_fenced=True, should_shut_down=False)
        case AlterPartitionRequest():
            return AlterPartitionResponse(code, ())
        case UnregisterBrokerRequest():
            return UnregisterBrokerResponse(code, message)
        case AllocateProducerIdsRequest():
            return AllocateProducerIdsResponse(code)
        case DescribeClusterRequest():
            endpoint_type = request.endpoint_type if version >= 1 else 1
            return DescribeClusterResponse("", -1, (), code, message, endpoint_type)
    raise AssertionError(request)


@settings(max_examples=examples(25))
@pytest.mark.parametrize("case", SERVED, ids=ids)
@given(data=st.data(), message=st.none() | st.text(max_size=30))
def test_blanket_error_fills_every_item(case, data, message):
    key, version = case
    decoded = decoded_request(request_for(key, version, data), version)
    frame = encode_admin_error(decoded, NOT_CONTROLLER, message)
    got = decode_admin_response(key, version, frame[4:])
    assert got == expected_blanket(decoded.request, NOT_CONTROLLER, message, version)


@pytest.mark.parametrize("case", SERVED, ids=ids)
def test_blanket_error_from_a_header_alone(case):
    key, version = case
    header = codec.RequestHeaderInfo(key, version, 99, "c")
    frame = encode_admin_error(header, int(ErrorCode.INVALID_REQUEST), "bad")
    assert struct.unpack_from(">ii", frame) == (len(frame) - 4, 99)
    got = decode_admin_response(key, version, frame[4:])
    for name in ("topics", "resources", "results", "partitions", "brokers"):
        assert getattr(got, name, ()) == ()
    if key in (19, 20, 32, 37, 44):  # per-item errors only, and no items
        assert not hasattr(got, "error_code")
    else:  # a top-level code (ElectLeaders v0 has none on the wire)
        assert got.error_code == (0 if (key, version) == (43, 0) else 42)


def test_create_topics_not_controller_as_kafka_sends_it():
    request = CreateTopicsRequest((CreatableTopic("a", 3, 1), CreatableTopic("b")))
    decoded = decoded_request(request, 7)
    frame = encode_admin_error(decoded, NOT_CONTROLLER, "This is not the correct controller for this cluster.")
    _, body = kio_parse(frame, load_response_schema(19, 7))
    assert [(t.name, int(t.error_code), t.num_partitions, t.topic_id) for t in body.topics] == [
        ("a", 41, -1, None),
        ("b", 41, -1, None),
    ]
    assert all(t.error_message.startswith("This is not") for t in body.topics)


def test_admin_error_response_for_plain_wire_errors():
    assert admin_error_response_for(codec.WireError(ErrorCode.INVALID_REQUEST, "x")) is None
    header = codec.RequestHeaderInfo(19, 7, 5, None)
    frame = admin_error_response_for(codec.WireError(ErrorCode.INVALID_REQUEST, "x", header=header))
    assert frame is not None
    assert decode_admin_response(19, 7, frame[4:]) == CreateTopicsResponse(())
    # No response schema (a version outside the range, or a key not served here): close.
    for key, version in ((19, 1), (19, 8), (3, 0), (18, 0)):
        err = codec.WireError(ErrorCode.UNSUPPORTED_VERSION, "x", header=codec.RequestHeaderInfo(key, version, 1, None))
        assert admin_error_response_for(err) is None


# --------------------------------------------------------------------------- requests we cannot express


def _reencode(request: Any, version: int, edit: Any) -> bytes:
    """Encode `request`, let `edit(kio body)` return a changed body, frame it again."""
    frame, key, _ = encode_admin_request(request, correlation_id=21, client_id="t", api_version=version)
    cls = load_request_schema(key, version)
    header, body = kio_parse(frame, cls)
    return codec._frame(header, edit(body))[4:]


def _rejected(frame: bytes) -> AdminRequestError:
    with pytest.raises(AdminRequestError) as info:
        decode_admin_request(frame)
    err = info.value
    assert isinstance(err, codec.WireError) and err.code == ErrorCode.INVALID_REQUEST
    assert err.header is not None and err.header.correlation_id == 21
    return err


def test_null_topic_config_value_is_invalid_config_for_every_topic():
    request = CreateTopicsRequest((CreatableTopic("a", configs={"x": "1"}), CreatableTopic("b")))

    def edit(body: Any) -> Any:
        a, b = body.topics
        config = type(a.configs[0])(name="x", value=None)
        return replace(body, topics=(replace(a, configs=(config,)), b))

    err = _rejected(_reencode(request, 5, edit))
    assert err.error_code == 40 and "Null value not supported for topic configs: x" in err.message
    frame = admin_error_response_for(err)
    assert frame is not None
    got = decode_admin_response(19, 5, frame[4:])
    assert [(t.name, t.error_code) for t in got.topics] == [("a", 40), ("b", 40)]


def test_two_assignments_for_one_partition_is_invalid_replica_assignment():
    request = CreateTopicsRequest((CreatableTopic("a", assignments={0: (1,), 1: (2,)}),))

    def edit(body: Any) -> Any:
        (a,) = body.topics
        first = a.assignments[0]
        return replace(body, topics=(replace(a, assignments=(first, first)),))

    err = _rejected(_reencode(request, 7, edit))
    assert err.error_code == 39
    frame = admin_error_response_for(err)
    assert frame is not None
    assert decode_admin_response(19, 7, frame[4:]).topics[0].error_code == 39


@pytest.mark.parametrize(
    ("name", "topic_id", "message"),
    [("t", uuid.UUID(int=5), "both topic name and topic id"), (None, None, "Neither topic name nor id")],
)
def test_delete_topics_state_needs_exactly_one_of_name_and_id(name, topic_id, message):
    request = DeleteTopicsRequest(names=("keep",))

    def edit(body: Any) -> Any:
        (state,) = body.topics
        return replace(body, topics=(state, replace(state, name=name, topic_id=topic_id)))

    err = _rejected(_reencode(request, 6, edit))
    assert message in err.message and err.error_code == 42
    frame = admin_error_response_for(err)
    assert frame is not None
    names = [t.name for t in decode_admin_response(20, 6, frame[4:]).topics]
    assert names[0] == "keep" and all(t.error_code == 42 for t in decode_admin_response(20, 6, frame[4:]).topics)


@pytest.mark.parametrize("field", ["resource_type", "config_operation"])
def test_unknown_config_resource_type_or_operation(field):
    request = IncrementalAlterConfigsRequest(
        (
            AlterConfigsResource(ConfigResourceType.TOPIC, "t", (ads.AlterConfigOp("a", AlterConfigOpType.SET, "1"),)),
            AlterConfigsResource(ConfigResourceType.BROKER, "1", ()),
        )
    )

    def edit(body: Any) -> Any:
        res, other = body.resources
        if field == "resource_type":
            res = replace(res, resource_type=8)  # BROKER_LOGGER
        else:
            op = res.configs[0]
            res = replace(res, configs=(replace(op, config_operation=9),))
        return replace(body, resources=(res, other))

    err = _rejected(_reencode(request, 1, edit))
    assert err.error_code == 42
    frame = admin_error_response_for(err)
    assert frame is not None
    got = decode_admin_response(44, 1, frame[4:]).resources
    assert all(r.error_code == 42 for r in got)
    assert (ConfigResourceType.BROKER, "1") in [(r.resource_type, r.resource_name) for r in got]


def test_unknown_election_type():
    request = ElectLeadersRequest(ElectionType.PREFERRED, (("t", 0),))

    def edit(body: Any) -> Any:
        return replace(body, election_type=7)

    err = _rejected(_reencode(request, 2, edit))
    frame = admin_error_response_for(err)
    assert frame is not None
    assert decode_admin_response(43, 2, frame[4:]) == ElectLeadersResponse(
        42, (ElectLeaderResult("t", 0, 42, err.message),)
    )


# --------------------------------------------------------------------------- what older versions cannot say


def test_requests_a_version_cannot_carry_are_refused_on_encode():
    with pytest.raises(codec.WireError) as info:
        encode_admin_request(
            DeleteTopicsRequest(topic_ids=(uuid.uuid4(),)), correlation_id=1, client_id=None, api_version=5
        )
    assert info.value.code == ErrorCode.UNSUPPORTED_VERSION
    with pytest.raises(codec.WireError):
        encode_admin_request(ElectLeadersRequest(ElectionType.UNCLEAN), correlation_id=1, client_id=None, api_version=0)
    for version in (1, 8):
        with pytest.raises(codec.WireError) as info:
            encode_admin_request(CreateTopicsRequest(()), correlation_id=1, client_id=None, api_version=version)
        assert info.value.code == ErrorCode.UNSUPPORTED_VERSION
    with pytest.raises(TypeError):
        encode_admin_request(codec.ApiVersionsCall(), correlation_id=1, client_id=None)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        admin_api_key(codec.DescribeQuorumCall())  # type: ignore[arg-type]


def test_out_of_range_values_are_wire_errors():
    bad = [
        BrokerRegistrationRequest(1, "c", uuid.uuid4(), (BrokerEndpoint("L", "h", 70000),)),
        BrokerHeartbeatRequest(2**31, 0, 0, False, False),
        CreateTopicsRequest((CreatableTopic("a", replication_factor=2**15),)),
        CreateTopicsRequest((), timeout_ms=2**31),
        DescribeConfigsRequest((ads.DescribeConfigsResource(300, "x"),)),
    ]
    for request in bad:
        with pytest.raises(codec.WireError):
            encode_admin_request(request, correlation_id=1, client_id=None)


def test_response_type_must_fit_the_request():
    decoded = decoded_request(CreateTopicsRequest(()), 7)
    with pytest.raises(TypeError):
        encode_admin_response(decoded, DeleteTopicsResponse(()))  # type: ignore[arg-type]
    with pytest.raises(codec.WireError):
        decode_admin_response(20, 6, encode_admin_response(decoded, CreateTopicsResponse(()))[4:], decoded.request)


def test_unknown_error_codes_become_unknown_server_error():
    decoded = decoded_request(UnregisterBrokerRequest(1), 0)
    frame = encode_admin_response(decoded, UnregisterBrokerResponse(9999, "?"))
    assert decode_admin_response(64, 0, frame[4:]) == UnregisterBrokerResponse(-1, "?")
    # ...while a code kio does not know, sent by a newer peer, is kept as a number.
    raw = bytearray(frame[4:])
    struct.pack_into(">h", raw, 4 + 1 + 4, 250)  # header v1 (corr id + tags), throttle time, then the error code
    assert decode_admin_response(64, 0, bytes(raw)).error_code == 250


def test_decode_admin_response_refuses_what_is_not_served():
    for key, version in ((19, 1), (19, 8), (1, 13), (18, 3)):
        with pytest.raises(codec.WireError) as info:
            decode_admin_response(key, version, b"\x00\x00\x00\x01\x00")
        assert info.value.code == ErrorCode.UNSUPPORTED_VERSION


def test_decode_admin_request_refuses_keys_and_versions_not_served():
    frame, _, _ = encode_admin_request(CreateTopicsRequest(()), correlation_id=4, client_id="c", api_version=2)
    body = bytearray(frame[4:])
    struct.pack_into(">h", body, 2, 1)  # CreateTopics v1: removed in Kafka 4.0, no kio schema
    with pytest.raises(codec.WireError) as info:
        decode_admin_request(bytes(body))
    assert info.value.code == ErrorCode.UNSUPPORTED_VERSION and info.value.header is not None
    assert admin_error_response_for(info.value) is None
    struct.pack_into(">hh", body, 0, 52, 0)  # a Vote request belongs to codec.decode_request
    with pytest.raises(codec.WireError) as info:
        decode_admin_request(bytes(body))
    assert info.value.code == ErrorCode.INVALID_REQUEST
    # Bytes after the body are ignored, as Kafka ignores them (read_request_body).
    assert decode_admin_request(frame[4:] + b"\x00").request == decode_admin_request(frame[4:]).request


# --------------------------------------------------------------------------- layouts and grouping


def test_create_topics_v7_layout():
    topic_id = uuid.uuid4()
    request = CreateTopicsRequest(
        (CreatableTopic("t", -1, -1, {0: (1, 2), 1: (2, 3)}, {"cleanup.policy": "compact"}),),
        validate_only=True,
        timeout_ms=1500,
    )
    frame, _, _ = encode_admin_request(request, correlation_id=2, client_id="c")
    _, body = kio_parse(frame, load_request_schema(19, 7))
    (t,) = body.topics
    assert (t.name, t.num_partitions, t.replication_factor) == ("t", -1, -1)
    assert [(a.partition_index, a.broker_ids) for a in t.assignments] == [(0, (1, 2)), (1, (2, 3))]
    assert [(c.name, c.value) for c in t.configs] == [("cleanup.policy", "compact")]
    assert body.validate_only is True and body.timeout.total_seconds() == 1.5

    decoded = decode_admin_request(frame[4:])
    result = CreateTopicResult("t", 0, None, topic_id, 2, 2, {"cleanup.policy": "compact"})
    out = encode_admin_response(decoded, CreateTopicsResponse((result,)))
    _, rbody = kio_parse(out, load_response_schema(19, 7))
    (r,) = rbody.topics
    assert (r.topic_id, r.num_partitions, r.replication_factor) == (topic_id, 2, 2)
    (c,) = r.configs
    assert (c.name, c.value, c.config_source, c.read_only, c.is_sensitive) == (
        "cleanup.policy",
        "compact",
        ConfigSource.DYNAMIC_TOPIC_CONFIG,
        False,
        False,
    )


def test_alter_partition_v3_carries_isr_epochs_and_groups_by_topic():
    a, b = uuid.uuid4(), uuid.uuid4()
    items = (
        AlterPartitionItem(a, 0, 5, (IsrMember(1, 10), IsrMember(2, 20)), 0, 7),
        AlterPartitionItem(b, 0, 1, (IsrMember(3, 30),), 1, 2),
        AlterPartitionItem(a, 1, 5, (IsrMember(2, 20),), 0, 8),
    )
    request = AlterPartitionRequest(1, 99, items)
    frame, _, version = encode_admin_request(request, correlation_id=2, client_id="b1")
    assert version == 3
    _, body = kio_parse(frame, load_request_schema(56, 3))
    assert [t.topic_id for t in body.topics] == [a, b]
    assert [(m.broker_id, m.broker_epoch) for m in body.topics[0].partitions[0].new_isr_with_epochs] == [
        (1, 10),
        (2, 20),
    ]
    decoded = decode_admin_request(frame[4:])
    assert decoded.request == AlterPartitionRequest(1, 99, (items[0], items[2], items[1]))
    v2, _, _ = encode_admin_request(request, correlation_id=2, client_id="b1", api_version=2)
    _, body2 = kio_parse(v2, load_request_schema(56, 2))
    assert body2.topics[0].partitions[0].new_isr == (1, 2)
    results = (AlterPartitionResult(b, 0, 0, 3, 2, (3,), 1, 3), AlterPartitionResult(a, 0, 0, 1, 6, (1, 2), 0, 8))
    out = encode_admin_response(decoded, AlterPartitionResponse(0, results))
    _, rbody = kio_parse(out, load_response_schema(56, 3))
    assert [t.topic_id for t in rbody.topics] == [b, a]
    assert decode_admin_response(56, 3, out[4:]) == AlterPartitionResponse(0, results)


def test_elect_leaders_groups_partitions_by_topic_and_keeps_null_for_all():
    request = ElectLeadersRequest(ElectionType.UNCLEAN, (("a", 0), ("b", 1), ("a", 2)), 9)
    frame, _, _ = encode_admin_request(request, correlation_id=1, client_id=None)
    _, body = kio_parse(frame, load_request_schema(43, 2))
    assert [(t.topic, t.partitions) for t in body.topic_partitions] == [("a", (0, 2)), ("b", (1,))]
    assert body.election_type == 1
    decoded = decode_admin_request(frame[4:])
    assert decoded.request.partitions == (("a", 0), ("a", 2), ("b", 1))
    every = decoded_request(ElectLeadersRequest(ElectionType.PREFERRED, None), 0)
    assert every.request == ElectLeadersRequest(ElectionType.PREFERRED, None)
    results = (ElectLeaderResult("a", 0, 0), ElectLeaderResult("b", 1, 84, "not needed"), ElectLeaderResult("a", 2, 0))
    out = encode_admin_response(decoded, ElectLeadersResponse(0, results))
    _, rbody = kio_parse(out, load_response_schema(43, 2))
    assert [(t.topic, [p.partition_id for p in t.partition_result]) for t in rbody.replica_election_results] == [
        ("a", [0, 2]),
        ("b", [1]),
    ]


def test_broker_registration_v4_layout():
    incarnation = uuid.uuid4()
    request = BrokerRegistrationRequest(
        7,
        "cluster-1",
        incarnation,
        (BrokerEndpoint("PLAINTEXT", "10.0.0.7", 9092), BrokerEndpoint("SSL", "10.0.0.7", 9093, 1)),
        rack="r1",
        features={"metadata.version": (7, 25), "kraft.version": (0, 1)},
        previous_broker_epoch=41,
    )
    frame, _, version = encode_admin_request(request, correlation_id=3, client_id="broker-7")
    assert version == 4
    _, body = kio_parse(frame, load_request_schema(62, 4))
    assert (body.broker_id, body.cluster_id, body.incarnation_id, body.rack) == (7, "cluster-1", incarnation, "r1")
    assert [(x.name, x.host, x.port, x.security_protocol) for x in body.listeners] == [
        ("PLAINTEXT", "10.0.0.7", 9092, 0),
        ("SSL", "10.0.0.7", 9093, 1),
    ]
    assert [(f.name, f.min_supported_version, f.max_supported_version) for f in body.features] == [
        ("metadata.version", 7, 25),
        ("kraft.version", 0, 1),
    ]
    assert body.previous_broker_epoch == 41 and body.is_migrating_zk_broker is False
    decoded = decode_admin_request(frame[4:])
    assert decoded.request == request
    out = encode_admin_response(decoded, BrokerRegistrationResponse(0, 1234))
    assert decode_admin_response(62, 4, out[4:]) == BrokerRegistrationResponse(0, 1234)


def test_describe_configs_v4_layout_and_v1_drops_documentation():
    request = DescribeConfigsRequest(
        (ads.DescribeConfigsResource(2, "t", None), ads.DescribeConfigsResource(4, "1", ("log.retention.ms",))),
        include_synonyms=True,
        include_documentation=True,
    )
    entry = ConfigEntry(
        "retention.ms",
        "1000",
        source=ConfigSource.DYNAMIC_TOPIC_CONFIG,
        synonyms=(
            ads.ConfigSynonym("retention.ms", "1000", ConfigSource.DYNAMIC_TOPIC_CONFIG),
            ads.ConfigSynonym("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG),
        ),
        documentation="How long to keep data.",
        config_type=ConfigType.LONG,
    )
    response = DescribeConfigsResponse(
        (DescribeConfigsResult(2, "t", entries=(entry,)), DescribeConfigsResult(4, "1", 42, "no such broker"))
    )
    for version in (1, 4):
        decoded = decoded_request(request, version)
        out = encode_admin_response(decoded, response)
        _, body = kio_parse(out, load_response_schema(32, version))
        (config,) = body.results[0].configs
        assert [(s.name, s.source) for s in config.synonyms] == [("retention.ms", 1), ("log.retention.hours", 5)]
        got = decode_admin_response(32, version, out[4:])
        assert got == ads.project_response(response, version)
        if version == 1:
            assert got.results[0].entries[0].documentation is None
            assert decoded.request.include_documentation is False
        else:
            assert got == response and decoded.request == request


def test_delete_topics_v6_by_name_and_id_and_v1_names_only():
    topic_id = uuid.uuid4()
    request = DeleteTopicsRequest(("a",), (topic_id,), 500)
    frame, _, version = encode_admin_request(request, correlation_id=1, client_id=None)
    _, body = kio_parse(frame, load_request_schema(20, 6))
    assert [(s.name, s.topic_id) for s in body.topics] == [("a", None), (None, topic_id)]
    assert decode_admin_request(frame[4:]).request == request
    v1 = decoded_request(DeleteTopicsRequest(("a", "b")), 1)
    assert v1.request == DeleteTopicsRequest(("a", "b"))
    out = encode_admin_response(v1, DeleteTopicsResponse((DeleteTopicResult("a", topic_id, 3, "gone"),)))
    assert decode_admin_response(20, 1, out[4:]) == DeleteTopicsResponse((DeleteTopicResult("a", None, 3, None),))


def test_describe_cluster_response():
    brokers = (
        ads.DescribeClusterBroker(1, "h1", 9092, "r1", False),
        ads.DescribeClusterBroker(2, "h2", 9092, None, True),
    )
    response = DescribeClusterResponse("cluster-id", controller_id=1, brokers=brokers)
    for version in (0, 1, 2):
        decoded = decoded_request(DescribeClusterRequest(include_fenced_brokers=True), version)
        out = encode_admin_response(decoded, response)
        _, body = kio_parse(out, load_response_schema(60, version))
        assert (body.cluster_id, body.controller_id, [b.broker_id for b in body.brokers]) == ("cluster-id", 1, [1, 2])
        assert decode_admin_response(60, version, out[4:]) == ads.project_response(response, version)


def test_empty_assignments_mean_none_and_configs_keep_order():
    request = CreateTopicsRequest((CreatableTopic("t", 1, 1, None, {"b": "2", "a": "1"}),))
    decoded = decoded_request(request, 2)
    assert decoded.request == request
    assert list(decoded.request.topics[0].configs) == ["b", "a"]


def test_only_the_admin_error_helper_can_answer_admin_decode_failures():
    """codec.error_response_for cannot answer admin keys (it returns None: close the
    connection); admin_error_response_for answers them, item by item."""
    request = CreateTopicsRequest((CreatableTopic("a", configs={"x": "1"}),))

    def edit(body: Any) -> Any:
        (a,) = body.topics
        return replace(body, topics=(replace(a, configs=(replace(a.configs[0], value=None),)),))

    err = _rejected(_reencode(request, 7, edit))
    assert codec.error_response_for(err) is None
    frame = admin_error_response_for(err)
    assert frame is not None
    assert decode_admin_response(19, 7, frame[4:]).topics[0].error_code == 40
