"""Cross-check the admin codec against an independent implementation: kafka-python's
protocol classes (kafka-python==3.0.12). Requests kafka-python encodes decode with ours
to the same typed values; our frames (requests and responses) decode with kafka-python
and re-encode to the same bytes. kafka-python has the client admin apis only (no
BrokerRegistration, BrokerHeartbeat, AlterPartition or UnregisterBroker)."""

from __future__ import annotations

from typing import Any

import pytest
import test_wire_admin_strategies as ads  # type: ignore[import-not-found,unused-ignore]  # a sibling module
from hypothesis import given, settings
from hypothesis import strategies as st

from quorum.controller.requests import (
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    ElectLeadersRequest,
    IncrementalAlterConfigsRequest,
)
from quorum.wire.admin_codec import (
    ADMIN_API_VERSIONS,
    DescribeClusterRequest,
    DescribeConfigsRequest,
    decode_admin_request,
    decode_admin_response,
    encode_admin_error,
    encode_admin_request,
    encode_admin_response,
)
from tests.scale import examples

kafka = pytest.importorskip("kafka")
from kafka.protocol.admin import cluster as kcluster  # noqa: E402
from kafka.protocol.admin import configs as kconfigs  # noqa: E402
from kafka.protocol.admin import topics as ktopics  # noqa: E402

KP_CLASSES: dict[int, tuple[Any, Any]] = {
    19: (ktopics.CreateTopicsRequest, ktopics.CreateTopicsResponse),
    20: (ktopics.DeleteTopicsRequest, ktopics.DeleteTopicsResponse),
    32: (kconfigs.DescribeConfigsRequest, kconfigs.DescribeConfigsResponse),
    37: (ktopics.CreatePartitionsRequest, ktopics.CreatePartitionsResponse),
    43: (ktopics.ElectLeadersRequest, ktopics.ElectLeadersResponse),
    44: (kconfigs.IncrementalAlterConfigsRequest, kconfigs.IncrementalAlterConfigsResponse),
    60: (kcluster.DescribeClusterRequest, kcluster.DescribeClusterResponse),
}
CASES = [
    (key, v) for key in sorted(KP_CLASSES) for v in range(ADMIN_API_VERSIONS[key][0], ADMIN_API_VERSIONS[key][1] + 1)
]


def ids(case: tuple[int, int]) -> str:
    return f"api{case[0]}-v{case[1]}"


def test_pinned_version_and_same_ranges():
    assert kafka.__version__ == "3.0.12"
    for key, (request_cls, response_cls) in KP_CLASSES.items():
        low, high = ADMIN_API_VERSIONS[key]
        for cls in (request_cls, response_cls):
            assert cls.json["validVersions"] == f"{low}-{high}"


# --------------------------------------------------------------------------- typed value -> kafka-python request


def kp_request(request: Any, version: int) -> Any:
    match request:
        case CreateTopicsRequest():
            k = ktopics.CreateTopicsRequest
            topic_cls = k.CreatableTopic
            topics = [
                topic_cls(
                    name=t.name,
                    num_partitions=t.num_partitions,
                    replication_factor=t.replication_factor,
                    assignments=[
                        topic_cls.CreatableReplicaAssignment(partition_index=p, broker_ids=list(b))
                        for p, b in (t.assignments or {}).items()
                    ],
                    configs=[topic_cls.CreatableTopicConfig(name=n, value=v) for n, v in t.configs.items()],
                )
                for t in request.topics
            ]
            return k(version=version, topics=topics, timeout_ms=request.timeout_ms, validate_only=request.validate_only)
        case DeleteTopicsRequest():
            k = ktopics.DeleteTopicsRequest
            if version >= 6:
                states = [k.DeleteTopicState(name=n, topic_id=None) for n in request.names] + [
                    k.DeleteTopicState(name=None, topic_id=i) for i in request.topic_ids
                ]
                return k(version=version, topics=states, timeout_ms=request.timeout_ms)
            return k(version=version, topic_names=list(request.names), timeout_ms=request.timeout_ms)
        case CreatePartitionsRequest():
            k = ktopics.CreatePartitionsRequest
            tcls = k.CreatePartitionsTopic
            topics = [
                tcls(
                    name=t.name,
                    count=t.count,
                    assignments=None
                    if t.assignments is None
                    else [tcls.CreatePartitionsAssignment(broker_ids=list(a)) for a in t.assignments],
                )
                for t in request.topics
            ]
            return k(version=version, topics=topics, timeout_ms=request.timeout_ms, validate_only=request.validate_only)
        case IncrementalAlterConfigsRequest():
            k = kconfigs.IncrementalAlterConfigsRequest
            rcls = k.AlterConfigsResource
            resources = [
                rcls(
                    resource_type=int(r.resource_type),
                    resource_name=r.resource_name,
                    configs=[
                        rcls.AlterableConfig(name=o.name, config_operation=int(o.op), value=o.value) for o in r.ops
                    ],
                )
                for r in request.resources
            ]
            return k(version=version, resources=resources, validate_only=request.validate_only)
        case DescribeConfigsRequest():
            k = kconfigs.DescribeConfigsRequest
            resources = [
                k.DescribeConfigsResource(
                    resource_type=r.resource_type,
                    resource_name=r.resource_name,
                    configuration_keys=None if r.config_names is None else list(r.config_names),
                )
                for r in request.resources
            ]
            extra = {"include_documentation": request.include_documentation} if version >= 3 else {}
            return k(version=version, resources=resources, include_synonyms=request.include_synonyms, **extra)
        case ElectLeadersRequest():
            k = ktopics.ElectLeadersRequest
            topic_partitions = None
            if request.partitions is not None:
                groups: dict[str, list[int]] = {}
                for topic, partition in request.partitions:
                    groups.setdefault(topic, []).append(partition)
                topic_partitions = [k.TopicPartitions(topic=t, partitions=ps) for t, ps in groups.items()]
            extra = {"election_type": int(request.election_type)} if version >= 1 else {}
            return k(version=version, topic_partitions=topic_partitions, timeout_ms=request.timeout_ms, **extra)
        case DescribeClusterRequest():
            k = kcluster.DescribeClusterRequest
            extra: dict[str, Any] = {}
            if version >= 1:
                extra["endpoint_type"] = request.endpoint_type
            if version >= 2:
                extra["include_fenced_brokers"] = request.include_fenced_brokers
            return k(
                version=version,
                include_cluster_authorized_operations=request.include_cluster_authorized_operations,
                **extra,
            )
    raise AssertionError(request)


def kp_frame(message: Any, correlation_id: int, client_id: str = "kafka-python") -> bytes:
    message.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(message.encode(header=True, framed=True))


def draw_request(key: int, version: int, data: st.DataObject) -> Any:
    return data.draw(ads.REQUESTS[key].filter(lambda r: ads.fits_version(r, version)), label="request")


# --------------------------------------------------------------------------- tests


@settings(max_examples=examples(30))
@pytest.mark.parametrize("case", CASES, ids=ids)
@given(data=st.data(), correlation_id=ads.i32)
def test_kafka_python_request_decodes_with_ours(case, data, correlation_id):
    key, version = case
    request = draw_request(key, version, data)
    frame = kp_frame(kp_request(request, version), correlation_id)
    decoded = decode_admin_request(frame[4:])
    assert (decoded.api_key, decoded.api_version, decoded.correlation_id) == (key, version, correlation_id)
    assert decoded.client_id == "kafka-python"
    assert decoded.request == ads.project_request(request, version)
    # Our client encoder produces exactly kafka-python's bytes.
    ours, _, _ = encode_admin_request(
        request, correlation_id=correlation_id, client_id="kafka-python", api_version=version
    )
    assert ours == frame


@settings(max_examples=examples(30))
@pytest.mark.parametrize("case", CASES, ids=ids)
@given(data=st.data(), correlation_id=ads.i32)
def test_our_responses_decode_with_kafka_python(case, data, correlation_id):
    key, version = case
    request = draw_request(key, version, data)
    decoded = decode_admin_request(kp_frame(kp_request(request, version), correlation_id)[4:])
    response = data.draw(ads.RESPONSES[key], label="response")
    frame = encode_admin_response(decoded, response)
    theirs = KP_CLASSES[key][1].decode(frame, version=version, header=True, framed=True)
    assert theirs.header.correlation_id == correlation_id
    check_fields(theirs, ads.project_response(response, version))
    assert bytes(theirs.encode(header=True, framed=True)) == frame
    assert decode_admin_response(key, version, frame[4:]) == ads.project_response(response, version)


@settings(max_examples=examples(20))
@pytest.mark.parametrize("case", CASES, ids=ids)
@given(data=st.data())
def test_not_controller_reaches_kafka_python_per_item(case, data):
    key, version = case
    request = draw_request(key, version, data)
    decoded = decode_admin_request(kp_frame(kp_request(request, version), 5)[4:])
    frame = encode_admin_error(decoded, 41, "This is not the correct controller for this cluster.")
    theirs = KP_CLASSES[key][1].decode(frame, version=version, header=True, framed=True)
    assert bytes(theirs.encode(header=True, framed=True)) == frame
    codes = item_error_codes(key, theirs)
    assert codes == [41] * expected_items(decoded.request)
    if hasattr(theirs, "error_code") and not (key == 43 and version == 0):
        assert theirs.error_code == 41


def expected_items(request: Any) -> int:
    match request:
        case CreateTopicsRequest() | CreatePartitionsRequest():
            return len(request.topics)
        case DeleteTopicsRequest():
            return len(request.names) + len(request.topic_ids)
        case IncrementalAlterConfigsRequest() | DescribeConfigsRequest():
            return len(request.resources)
        case ElectLeadersRequest():
            return len(request.partitions or ())
        case DescribeClusterRequest():
            return 0
    raise AssertionError(request)


def item_error_codes(key: int, theirs: Any) -> list[int]:
    match key:
        case 19:
            return [t.error_code for t in theirs.topics]
        case 20:
            return [t.error_code for t in theirs.responses]
        case 32 | 37:
            return [r.error_code for r in theirs.results]
        case 43:
            return [p.error_code for t in theirs.replica_election_results for p in t.partition_result]
        case 44:
            return [r.error_code for r in theirs.responses]
        case 60:
            return []
    raise AssertionError(key)


def check_fields(theirs: Any, expected: Any) -> None:
    """kafka-python's view of our response carries the typed values' fields."""
    name = type(expected).__name__
    if name == "CreateTopicsResponse":
        assert [(t.name, t.error_code, t.error_message) for t in theirs.topics] == [
            (t.name, t.error_code, t.message) for t in expected.topics
        ]
        if theirs.version >= 5:
            assert [(t.num_partitions, t.replication_factor) for t in theirs.topics] == [
                (t.num_partitions, t.replication_factor) for t in expected.topics
            ]
            assert [{c.name: c.value for c in t.configs} for t in theirs.topics] == [
                dict(t.configs) for t in expected.topics
            ]
        if theirs.version >= 7:
            assert [t.topic_id for t in theirs.topics] == [t.topic_id for t in expected.topics]
    elif name == "DeleteTopicsResponse":
        assert [(t.name, t.error_code) for t in theirs.responses] == [(t.name, t.error_code) for t in expected.topics]
    elif name == "CreatePartitionsResponse":
        assert [(r.name, r.error_code, r.error_message) for r in theirs.results] == [
            (t.name, t.error_code, t.message) for t in expected.topics
        ]
    elif name == "IncrementalAlterConfigsResponse":
        assert [(r.resource_type, r.resource_name, r.error_code, r.error_message) for r in theirs.responses] == [
            (r.resource_type, r.resource_name, r.error_code, r.message) for r in expected.resources
        ]
    elif name == "DescribeConfigsResponse":
        assert [(r.resource_type, r.resource_name, r.error_code, r.error_message) for r in theirs.results] == [
            (r.resource_type, r.resource_name, r.error_code, r.message) for r in expected.results
        ]
        assert [
            [(c.name, c.value, c.read_only, c.config_source, c.is_sensitive, len(c.synonyms)) for c in r.configs]
            for r in theirs.results
        ] == [
            [(e.name, e.value, e.is_read_only, e.source, e.is_sensitive, len(e.synonyms)) for e in r.entries]
            for r in expected.results
        ]
    elif name == "ElectLeadersResponse":
        flat = [
            (t.topic, p.partition_id, p.error_code, p.error_message)
            for t in theirs.replica_election_results
            for p in t.partition_result
        ]
        assert flat == [(r.topic, r.partition, r.error_code, r.message) for r in expected.results]
    elif name == "DescribeClusterResponse":
        assert (theirs.cluster_id, theirs.controller_id, theirs.error_code, theirs.error_message) == (
            expected.cluster_id,
            expected.controller_id,
            expected.error_code,
            expected.message,
        )
        assert [(b.broker_id, b.host, b.port, b.rack) for b in theirs.brokers] == [
            (b.broker_id, b.host, b.port, b.rack) for b in expected.brokers
        ]
    else:  # pragma: no cover
        raise AssertionError(name)
