"""REST error bodies: the Kafka code → HTTP table, schema errors (422), bad JSON (400), wrong
media type (415), unknown routes (404) and methods (405), and hostile inputs that must get a
4xx, never a 5xx or an exception."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode as KioErrorCode
from rest_api_support import (  # type: ignore[import-not-found,unused-ignore]  # a sibling module on pytest's path
    V3,
    FakeNode,
    client_for,
)

from api.rest.errors import (
    KAFKA_DEFAULT_MESSAGES,
    KAFKA_ERROR_MAP,
    ApiError,
    kafka_error,
    kafka_error_http,
    kafka_error_is_retriable,
    kafka_error_name,
)
from quorum.controller.errors import ErrorCode


@pytest.fixture
def node() -> FakeNode:
    return FakeNode()


@pytest.fixture
def client(node: FakeNode):
    return client_for(node)


def _error(response, status: int, code: int) -> str:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert set(body) == {"error_code", "message"} and body["error_code"] == code
    assert isinstance(body["message"], str) and body["message"]
    return body["message"]


# ---------------------------------------------------------------- the mapping table


def test_the_rest_proxy_table():
    """reference/kafka-ecosystem.md §1.5, code by code."""
    assert kafka_error_http(ErrorCode.TOPIC_ALREADY_EXISTS) == (400, 40002)
    assert kafka_error_http(ErrorCode.INVALID_PARTITIONS) == (400, 40002)
    assert kafka_error_http(ErrorCode.INVALID_REPLICATION_FACTOR) == (400, 40002)
    assert kafka_error_http(ErrorCode.POLICY_VIOLATION) == (400, 40002)
    assert kafka_error_http(ErrorCode.INVALID_CONFIG) == (400, 40002)
    assert kafka_error_http(ErrorCode.INVALID_REQUEST) == (400, 40002)
    assert kafka_error_http(35) == (400, 40002)  # UNSUPPORTED_VERSION
    assert kafka_error_http(54) == (400, 40002)  # SECURITY_DISABLED
    assert kafka_error_http(ErrorCode.UNKNOWN_SERVER_ERROR) == (400, 40002)
    assert kafka_error_http(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) == (404, 40403)
    assert kafka_error_http(5) == (404, 40404)  # LEADER_NOT_AVAILABLE
    assert kafka_error_http(8) == (503, 50302)  # BROKER_NOT_AVAILABLE
    assert kafka_error_http(58) == (401, 40101)  # SASL_AUTHENTICATION_FAILED
    for authz in (29, 30, 31, 53):  # TOPIC/GROUP/CLUSTER/TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        assert kafka_error_http(authz) == (403, 40301)
    for retriable in (7, 19, 20, 6, ErrorCode.NOT_CONTROLLER):  # timeouts, ISR, not leader, not controller
        assert kafka_error_http(retriable) == (500, 50003)


def test_the_current_rest_utils_mapper_for_codes_the_table_leaves_out():
    assert kafka_error_http(ErrorCode.INVALID_TOPIC_EXCEPTION) == (400, 40002)
    assert kafka_error_http(ErrorCode.TOPIC_DELETION_DISABLED) == (400, 40002)
    assert kafka_error_http(ErrorCode.UNKNOWN_TOPIC_ID) == (404, 40403)
    assert kafka_error_http(ErrorCode.THROTTLING_QUOTA_EXCEEDED) == (429, 42901)
    assert kafka_error_http(10) == (413, 413)  # MESSAGE_TOO_LARGE


def test_every_kafka_error_maps_to_a_client_error_or_a_retriable_500():
    """Only a code Kafka does not define is a 500/50002; a Kafka error that rejects the request is a 4xx."""
    for code in KioErrorCode:
        if code == 0:
            continue
        status, rest = kafka_error_http(code)
        if code in KAFKA_ERROR_MAP:
            assert (status, rest) == KAFKA_ERROR_MAP[code]
        elif code.retriable and "AUTH" not in code.name.upper():
            assert (status, rest) == (500, 50003), code
        else:
            assert 400 <= status < 500, code
        assert rest != 50002
    assert kafka_error_http(9999) == (500, 50002)
    assert kafka_error_http(-2) == (500, 50002)


def test_kafka_names_and_retriability():
    assert kafka_error_name(84) == "ELECTION_NOT_NEEDED"
    assert kafka_error_name(-1) == "UNKNOWN_SERVER_ERROR"
    assert kafka_error_name(31337) == "UNKNOWN_ERROR_31337"
    assert kafka_error_is_retriable(3) and not kafka_error_is_retriable(36) and not kafka_error_is_retriable(31337)


def test_kafka_error_messages():
    assert kafka_error(36, "Topic 't' already exists.").message == "Topic 't' already exists."
    assert kafka_error(36).message == KAFKA_DEFAULT_MESSAGES[36] == "Topic with this name already exists."
    assert kafka_error(3).message == "This server does not host this topic-partition."
    assert kafka_error(75).message == "UNKNOWN_LEADER_EPOCH (Kafka error code 75)."
    error = kafka_error(37, "")
    assert isinstance(error, ApiError)
    assert error.body() == {"error_code": 40002, "message": "Number of partitions is below 1."}


# ---------------------------------------------------------------- request errors


def test_schema_errors_are_422_with_the_error_body(client, node):
    message = _error(client.post(f"{V3}/topics", json={"topic_name": "t", "partitions_count": "3"}), 422, 422)
    assert message.startswith("Request validation failed: body.partitions_count:")
    assert node.requests == []


@pytest.mark.parametrize(
    "body",
    [
        {},
        [],
        "topic",
        None,
        {"topic_name": None},
        {"topic_name": 7},
        {"topic_name": "t", "extra": 1},
        {"topic_name": "t", "partitions_count": 1.5},
        {"topic_name": "t", "partitions_count": True},
        {"topic_name": "t", "partitions_count": 2**31},
        {"topic_name": "t", "replication_factor": 2**15},
        {"topic_name": "t", "validate_only": "yes"},
        {"topic_name": "t", "configs": {"a": "b"}},
        {"topic_name": "t", "configs": [{"name": "a", "value": 1}]},
        {"topic_name": "t", "configs": [{"value": "1"}]},
        {"topic_name": "t", "configs": [{"name": "a", "value": "1", "source": "x"}]},
        {"topic_name": "t", "replicas_assignments": {"x": [1]}},
        {"topic_name": "t", "replicas_assignments": {"99999999999": [1]}},
        {"topic_name": "t", "replicas_assignments": {"0": [2**31]}},
        {"topic_name": "t", "replicas_assignments": [{"partition_id": 0}]},
        {"topic_name": "t", "replicas_assignments": [{"partition_id": 0, "broker_ids": [1], "x": 1}]},
    ],
)
def test_create_topic_schema_errors(client, node, body):
    _error(client.post(f"{V3}/topics", json=body), 422, 422)
    assert node.requests == []


@pytest.mark.parametrize(
    "content",
    [
        rb'{"topic_name": "\ud800"}',
        rb'{"topic_name": "t", "configs": [{"name": "a", "value": "\udfff"}]}',
        rb'{"topic_name": "t", "replicas_assignments": {"\udc00": [1]}}',
    ],
)
def test_lone_surrogates_are_422(client, node, content):
    response = client.post(f"{V3}/topics", content=content, headers={"content-type": "application/json"})
    message = _error(response, 422, 422)
    assert "surrogate" in message
    assert node.requests == []


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("PATCH", "/topics/orders", {}),
        ("PATCH", "/topics/orders", {"partitions_count": -(2**31) - 1}),
        ("PATCH", "/topics/orders", {"partitions_count": 4, "validate_only": True}),
        ("PUT", "/topics/orders/configs/retention.ms", {"value": 5}),
        ("PUT", "/topics/orders/configs/retention.ms", {"val": "5"}),
        ("POST", "/topics/orders/configs:alter", {}),
        ("POST", "/topics/orders/configs:alter", {"data": [{"name": "retention.ms", "operation": "RESET"}]}),
        ("POST", "/topics/orders/configs:alter", {"data": [{"name": "retention.ms", "operation": "set"}]}),
        ("POST", "/topics/orders/configs:alter", {"data": {"name": "retention.ms"}}),
        ("POST", "/elect-leaders", {}),
        ("POST", "/elect-leaders", {"election_type": "preferred"}),
        ("POST", "/elect-leaders", {"election_type": "PREFERRED", "partitions": [{"topic_name": "orders"}]}),
        ("POST", "/elect-leaders", {"election_type": "PREFERRED", "partitions": "all"}),
        ("POST", "/topics/orders/partitions/0/elect-leader", {"election_type": "DIRTY"}),
        ("POST", "/topics/orders/partitions/0/elect-leader", {"type": "PREFERRED"}),
    ],
)
def test_write_schema_errors(client, node, method, path, body):
    _error(client.request(method, V3 + path, json=body), 422, 422)
    assert node.requests == []


@pytest.mark.parametrize(
    "path",
    [
        "/topics/orders/partitions/abc",
        "/topics/orders/partitions/1.5",
        f"/topics/orders/partitions/{2**31}",
        f"/topics/orders/partitions/{-(2**31) - 1}",
        "/topics/orders/partitions/0/replicas/x",
        "/brokers/one",
        f"/brokers/{2**63}",
    ],
)
def test_path_parameter_errors_are_422(client, path):
    _error(client.get(V3 + path), 422, 422)


@pytest.mark.parametrize("content", [b"{", b'{"topic_name": }', b"\xff\xfe{}", b"[" * 100_000 + b"]" * 100_000])
def test_a_body_that_is_not_json_is_400(client, node, content):
    _error(client.post(f"{V3}/topics", content=content, headers={"content-type": "application/json"}), 400, 400)
    assert node.requests == []


def test_nan_and_infinity_are_rejected(client, node):
    for literal in (b"NaN", b"Infinity", b"-Infinity", b"1e400"):
        content = b'{"topic_name": "t", "partitions_count": ' + literal + b"}"
        _error(client.post(f"{V3}/topics", content=content, headers={"content-type": "application/json"}), 422, 422)
    assert node.requests == []


def test_integral_floats_are_integers(client, node):
    assert client.post(f"{V3}/topics", json={"topic_name": "t", "partitions_count": 3.0}).status_code == 201
    assert node.requests[0].topics[0].num_partitions == 3


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded"])
def test_a_body_not_sent_as_json_is_415(client, node, content_type):
    headers = {} if content_type is None else {"content-type": content_type}
    _error(client.post(f"{V3}/topics", content=b'{"topic_name": "t"}', headers=headers), 415, 415)
    assert node.requests == []


def test_json_with_a_charset_or_a_json_suffix_is_accepted(client):
    for content_type in ("application/json; charset=utf-8", "application/vnd.api+json"):
        response = client.post(f"{V3}/topics", content=b'{"topic_name": "t"}', headers={"content-type": content_type})
        assert response.status_code == 201, response.text


def test_an_empty_body_is_422(client):
    _error(client.post(f"{V3}/topics", headers={"content-type": "application/json"}), 422, 422)


def test_unknown_route_is_404_json(client):
    assert _error(client.get("/v3/nothing"), 404, 404) == "HTTP 404 Not Found"
    _error(client.get("/"), 404, 404)
    _error(client.get(f"{V3}/topics/orders/partitions/0/replicas/1/extra"), 404, 404)


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("PUT", "/topics", "GET, HEAD, POST"),
        ("POST", "/topics/orders", "DELETE, GET, HEAD, PATCH"),
        ("GET", "/topics/orders/configs:alter", "POST"),
        ("POST", "/topics/orders/configs/retention.ms", "DELETE, GET, HEAD, PUT"),
        ("DELETE", "/quorum/status", "GET, HEAD"),
        ("GET", "/elect-leaders", "POST"),
    ],
)
def test_wrong_method_is_405_with_every_allowed_method(client, method, path, allow):
    response = client.request(method, V3 + path)
    assert _error(response, 405, 405) == "HTTP 405 Method Not Allowed"
    assert response.headers["allow"] == allow


@pytest.mark.parametrize(
    "path",
    [
        "/topics/%ED%A0%80",  # an encoded lone surrogate
        "/topics/%FF%FE",  # not UTF-8
        "/topics/" + "x" * 10_000,
        "/topics/a%00b",
        "/topics/%2E%2E",
        "/topics/orders/configs/%ED%A0%80",
    ],
)
def test_hostile_paths_get_4xx(client, path):
    response = client.get(V3 + path)
    assert 400 <= response.status_code < 500
    assert set(response.json()) == {"error_code", "message"}


def test_an_encoded_slash_is_a_path_separator(client):
    assert client.get(f"{V3}/topics/orders%2Fpartitions").json()["kind"] == "KafkaPartitionList"


def test_hostile_cluster_id(client):
    response = client.get("/v3/clusters/%ED%A0%80/topics")
    assert response.status_code == 404 and response.json()["error_code"] == 404


def test_messages_with_odd_characters_are_ascii_json(client):
    response = client.get(f"{V3}/topics/orders/configs/caf%C3%A9")
    assert response.status_code == 404
    assert response.content.isascii()
    assert response.json()["message"].startswith("Config café cannot be found")
