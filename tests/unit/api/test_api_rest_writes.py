"""REST writes: the typed requests sent to the controller, success answers, and how every
Kafka error code, an unreachable controller and controller failures map to HTTP."""

from __future__ import annotations

import uuid
from typing import Any, cast

import pytest
from rest_api_support import (  # type: ignore[import-not-found,unused-ignore]  # a sibling module on pytest's path
    CLUSTER_ID,
    URL,
    V3,
    FakeNode,
    client_for,
    default_answer,
    failing_answer,
    unavailable,
)

from quorum.controller.requests import (
    AlterConfigOp,
    AlterConfigOpType,
    AlterConfigsResource,
    AlterConfigsResult,
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
    PartitionsIncrease,
)
from quorum.metadata.records import ConfigRecord, PartitionChangeRecord, PartitionRecord, TopicRecord, kafka_uuid_string
from quorum.metadata.records import ConfigResourceType as RecordResourceType


@pytest.fixture
def node() -> FakeNode:
    return FakeNode()


@pytest.fixture
def client(node: FakeNode):
    return client_for(node)


def _error(response, status: int, code: int, message: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert set(body) == {"error_code", "message"}
    assert body["error_code"] == code
    if message is not None:
        assert body["message"] == message
    return cast(dict[str, Any], body)


# ================================================================ create topic


def test_create_topic_sends_create_topics_and_answers_201(client, node):
    new_id = uuid.UUID(int=99)
    node.after_write = [
        TopicRecord("payments", new_id),
        PartitionRecord(0, new_id, (1, 2), (1, 2), leader=1, leader_epoch=0, partition_epoch=0),
        PartitionRecord(1, new_id, (2, 1), (2, 1), leader=2, leader_epoch=0, partition_epoch=0),
    ]
    response = client.post(
        f"{V3}/topics",
        json={
            "topic_name": "payments",
            "partitions_count": 2,
            "replication_factor": 2,
            "configs": [{"name": "cleanup.policy", "value": "compact"}, {"name": "retention.ms", "value": "60000"}],
        },
    )
    assert response.status_code == 201, response.text
    assert response.headers["location"] == f"{URL}/topics/payments"
    body = response.json()
    assert body["kind"] == "KafkaTopic"
    assert body["metadata"] == {
        "self": f"{URL}/topics/payments",
        "resource_name": f"crn:///kafka={CLUSTER_ID}/topic=payments",
    }
    assert (body["partitions_count"], body["replication_factor"], body["is_internal"]) == (2, 2, False)
    assert body["topic_id"] == kafka_uuid_string(new_id)
    assert node.requests == [
        CreateTopicsRequest(
            topics=(CreatableTopic("payments", 2, 2, None, {"cleanup.policy": "compact", "retention.ms": "60000"}),),
            validate_only=False,
        )
    ]
    assert client.get(f"{V3}/topics/payments").json() == body


def test_create_topic_with_only_a_name_uses_the_defaults(client, node):
    response = client.post(f"{V3}/topics", json={"topic_name": "t"})
    assert response.status_code == 201
    (request,) = node.requests
    assert request == CreateTopicsRequest((CreatableTopic("t", -1, -1, None, {}),))


def test_create_topic_validate_only_answers_200_from_the_result(client, node):
    node.answer = CreateTopicsResponse(
        (CreateTopicResult("t", topic_id=uuid.UUID(int=5), num_partitions=6, replication_factor=2),)
    )
    response = client.post(f"{V3}/topics", json={"topic_name": "t", "validate_only": True})
    assert response.status_code == 200, response.text
    assert "location" not in response.headers
    body = response.json()
    assert (body["topic_name"], body["partitions_count"], body["replication_factor"]) == ("t", 6, 2)
    assert node.requests[0].validate_only is True


def test_create_topic_with_the_rest_proxy_assignment_map(client, node):
    response = client.post(
        f"{V3}/topics",
        json={"topic_name": "t", "partitions_count": 9, "replicas_assignments": {"0": [1, 2], "1": [2, 1]}},
    )
    assert response.status_code == 201, response.text
    (request,) = node.requests
    assert isinstance(request, CreateTopicsRequest)
    topic = request.topics[0]
    assert (topic.num_partitions, topic.replication_factor) == (-1, -1)
    assert topic.assignments == {0: (1, 2), 1: (2, 1)}
    body = response.json()
    assert (body["partitions_count"], body["replication_factor"]) == (2, 2)


def test_create_topic_with_an_assignment_list(client, node):
    response = client.post(
        f"{V3}/topics",
        json={"topic_name": "t", "replicas_assignments": [{"partition_id": 0, "broker_ids": [3, 1, 2]}]},
    )
    assert response.status_code == 201, response.text
    assert node.requests[0].topics[0].assignments == {0: (3, 1, 2)}


def test_create_topic_passes_kafkas_sentinels_and_bad_counts_to_the_controller(client, node):
    client.post(f"{V3}/topics", json={"topic_name": "t", "partitions_count": 0, "replication_factor": -3})
    assert node.requests[0].topics[0] == CreatableTopic("t", 0, -3, None, {})


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {
                "topic_name": "t",
                "replicas_assignments": [
                    {"partition_id": 0, "broker_ids": [1]},
                    {"partition_id": 0, "broker_ids": [2]},
                ],
            },
            "Found multiple manual partition assignments for partition 0.",
        ),
        (
            {
                "topic_name": "t",
                "configs": [{"name": "retention.ms", "value": "1"}, {"name": "retention.ms", "value": "2"}],
            },
            "Duplicate topic config name: retention.ms",
        ),
        (
            {"topic_name": "t", "configs": [{"name": "retention.ms"}, {"name": "segment.ms", "value": None}]},
            "Null value not supported for topic configs: retention.ms,segment.ms",
        ),
    ],
)
def test_create_topic_rejections_made_before_the_controller(client, node, body, message):
    _error(client.post(f"{V3}/topics", json=body), 400, 40002, message)
    assert node.requests == []


def test_create_topic_already_exists(client, node):
    node.answer = CreateTopicsResponse((CreateTopicResult("orders", 36, "Topic 'orders' already exists."),))
    _error(client.post(f"{V3}/topics", json={"topic_name": "orders"}), 400, 40002, "Topic 'orders' already exists.")


def test_create_topic_without_a_kafka_message_gets_kafkas_default_text(client, node):
    node.answer = CreateTopicsResponse((CreateTopicResult("x", 38),))
    _error(client.post(f"{V3}/topics", json={"topic_name": "x"}), 400, 40002, "Replication-factor is invalid.")


# ================================================================ partitions count, delete


def test_patch_partitions_count_sends_create_partitions(client, node):
    node.after_write = [PartitionRecord(3, node.image().topic_by_name("orders").id, (1, 2, 3), (1, 2, 3), leader=1)]
    response = client.patch(f"{V3}/topics/orders", json={"partitions_count": 4})
    assert response.status_code == 200, response.text
    assert response.json()["partitions_count"] == 4
    assert node.requests == [CreatePartitionsRequest((PartitionsIncrease("orders", 4),))]


def test_patch_to_the_same_count_is_400(client, node):
    node.answer = CreatePartitionsResponse((CreatePartitionsResult("orders", 37, "Topic already has 3 partitions."),))
    _error(
        client.patch(f"{V3}/topics/orders", json={"partitions_count": 3}), 400, 40002, "Topic already has 3 partitions."
    )


def test_patch_unknown_topic_is_404(client, node):
    node.answer = CreatePartitionsResponse((CreatePartitionsResult("nope", 3),))
    _error(client.patch(f"{V3}/topics/nope", json={"partitions_count": 3}), 404, 40403)


def test_patch_topic_gone_by_the_time_of_the_read_is_404(client, node):
    node.answer = lambda request: default_answer(request)
    _error(client.patch(f"{V3}/topics/ghost", json={"partitions_count": 3}), 404, 40403)


def test_delete_topic_sends_delete_topics_and_answers_204(client, node):
    response = client.delete(f"{V3}/topics/orders")
    assert response.status_code == 204 and response.content == b""
    assert node.requests == [DeleteTopicsRequest(names=("orders",))]


def test_delete_unknown_topic_is_404_40403(client, node):
    node.answer = DeleteTopicsResponse((DeleteTopicResult("nope", None, 3, None),))
    _error(client.delete(f"{V3}/topics/nope"), 404, 40403, "This server does not host this topic-partition.")


# ================================================================ configs


def _alter(topic: str, *ops: AlterConfigOp, validate_only: bool = False) -> IncrementalAlterConfigsRequest:
    return IncrementalAlterConfigsRequest(
        (AlterConfigsResource(ConfigResourceType.TOPIC, topic, ops),), validate_only=validate_only
    )


def test_put_config_sets_it(client, node):
    node.after_write = [ConfigRecord(RecordResourceType.TOPIC.value, "orders", "retention.ms", "5000")]
    response = client.put(f"{V3}/topics/orders/configs/retention.ms", json={"value": "5000"})
    assert response.status_code == 204 and response.content == b""
    assert node.requests == [_alter("orders", AlterConfigOp("retention.ms", AlterConfigOpType.SET, "5000"))]
    assert client.get(f"{V3}/topics/orders/configs/retention.ms").json()["value"] == "5000"


def test_put_null_value_goes_to_the_controller(client, node):
    node.answer = IncrementalAlterConfigsResponse(
        (
            AlterConfigsResult(
                ConfigResourceType.TOPIC, "orders", 40, "Null value not supported for topic configs: retention.ms"
            ),
        )
    )
    _error(client.put(f"{V3}/topics/orders/configs/retention.ms", json={}), 400, 40002)
    assert node.requests == [_alter("orders", AlterConfigOp("retention.ms", AlterConfigOpType.SET, None))]


def test_put_invalid_value(client, node):
    message = "Invalid value abc for configuration retention.ms: Not a number of type LONG"
    node.answer = IncrementalAlterConfigsResponse(
        (AlterConfigsResult(ConfigResourceType.TOPIC, "orders", 40, message),)
    )
    _error(client.put(f"{V3}/topics/orders/configs/retention.ms", json={"value": "abc"}), 400, 40002, message)


def test_delete_config_resets_it(client, node):
    response = client.delete(f"{V3}/topics/orders/configs/cleanup.policy")
    assert response.status_code == 204
    assert node.requests == [_alter("orders", AlterConfigOp("cleanup.policy", AlterConfigOpType.DELETE))]


def test_batch_alter(client, node):
    response = client.post(
        f"{V3}/topics/orders/configs:alter",
        json={
            "data": [
                {"name": "cleanup.policy", "operation": "DELETE"},
                {"name": "compression.type", "value": "gzip"},
                {"name": "retention.ms", "value": "1", "operation": "SET"},
                {"name": "min.insync.replicas", "value": "2", "operation": None},
            ],
            "validate_only": True,
        },
    )
    assert response.status_code == 204, response.text
    assert node.requests == [
        _alter(
            "orders",
            AlterConfigOp("cleanup.policy", AlterConfigOpType.DELETE),
            AlterConfigOp("compression.type", AlterConfigOpType.SET, "gzip"),
            AlterConfigOp("retention.ms", AlterConfigOpType.SET, "1"),
            AlterConfigOp("min.insync.replicas", AlterConfigOpType.SET, "2"),
            validate_only=True,
        )
    ]


def test_batch_alter_duplicate_names(client, node):
    body = {"data": [{"name": "retention.ms", "value": "1"}, {"name": "retention.ms", "operation": "DELETE"}]}
    _error(client.post(f"{V3}/topics/orders/configs:alter", json=body), 400, 40002)
    assert node.requests == []


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("PUT", "/topics/orders/configs/no.such", {"value": "1"}),
        ("DELETE", "/topics/orders/configs/no.such", None),
        ("POST", "/topics/orders/configs:alter", {"data": [{"name": "no.such", "value": "1"}]}),
    ],
)
def test_altering_an_unknown_config_is_404(client, node, method, path, body):
    kwargs = {} if body is None else {"json": body}
    _error(
        client.request(method, V3 + path, **kwargs),
        404,
        404,
        f"Config no.such cannot be found for TOPIC orders in cluster {CLUSTER_ID}.",
    )
    _error(client.request(method, V3 + path.replace("orders", "nope"), **kwargs), 404, 40403)
    assert node.requests == []


def test_altering_a_config_of_an_unknown_topic(client, node):
    node.answer = IncrementalAlterConfigsResponse((AlterConfigsResult(ConfigResourceType.TOPIC, "nope", 3, None),))
    _error(client.put(f"{V3}/topics/nope/configs/retention.ms", json={"value": "1"}), 404, 40403)


# ================================================================ leader elections


def test_elect_one_partition_preferred_by_default(client, node):
    orders = node.image().topic_by_name("orders").id
    node.after_write = [PartitionChangeRecord(1, orders, leader=2)]
    response = client.post(f"{V3}/topics/orders/partitions/1/elect-leader")
    assert response.status_code == 200, response.text
    assert node.requests == [ElectLeadersRequest(ElectionType.PREFERRED, (("orders", 1),))]
    body = response.json()
    assert body == {
        "kind": "KafkaLeaderElection",
        "metadata": {
            "self": f"{URL}/topics/orders/partitions/1",
            "resource_name": f"crn:///kafka={CLUSTER_ID}/topic=orders/partition=1",
        },
        "cluster_id": CLUSTER_ID,
        "topic_name": "orders",
        "partition_id": 1,
        "election_type": "PREFERRED",
        "error_code": 200,
        "message": None,
        "kafka_error_code": 0,
        "kafka_error_name": "NONE",
        "leader_id": 2,
        "partition": {"related": f"{URL}/topics/orders/partitions/1"},
    }
    assert client.get(f"{V3}/topics/orders/partitions/1").json()["leader_epoch"] == 3


def test_elect_one_partition_unclean(client, node):
    response = client.post(f"{V3}/topics/events/partitions/0/elect-leader", json={"election_type": "UNCLEAN"})
    assert response.status_code == 200
    assert node.requests == [ElectLeadersRequest(ElectionType.UNCLEAN, (("events", 0),))]
    assert response.json()["leader_id"] is None


def test_election_not_needed_is_a_success(client, node):
    node.answer = ElectLeadersResponse(0, (ElectLeaderResult("orders", 0, 84, "Leader election not needed"),))
    body = client.post(f"{V3}/topics/orders/partitions/0/elect-leader", json={}).json()
    assert (body["error_code"], body["kafka_error_code"], body["kafka_error_name"]) == (200, 84, "ELECTION_NOT_NEEDED")
    assert body["leader_id"] == 1


@pytest.mark.parametrize(
    ("kafka_code", "status", "rest_code"),
    [(3, 404, 40403), (80, 500, 50003), (83, 500, 50003), (42, 400, 40002)],
)
def test_elect_one_partition_failure(client, node, kafka_code, status, rest_code):
    node.answer = ElectLeadersResponse(0, (ElectLeaderResult("orders", 0, kafka_code, "no"),))
    _error(client.post(f"{V3}/topics/orders/partitions/0/elect-leader"), status, rest_code, "no")


def test_elect_leaders_batch_reports_each_partition(client, node):
    node.answer = ElectLeadersResponse(
        0,
        (
            ElectLeaderResult("orders", 2, 0),
            ElectLeaderResult("orders", 0, 84),
            ElectLeaderResult("events", 0, 83, "Eligible topic partition leaders are not available."),
            ElectLeaderResult("gone", 0, 3),
        ),
    )
    response = client.post(
        f"{V3}/elect-leaders",
        json={
            "election_type": "PREFERRED",
            "partitions": [
                {"topic_name": "orders", "partition_id": 2},
                {"topic_name": "orders", "partition_id": 0},
                {"topic_name": "events", "partition_id": 0},
                {"topic_name": "gone", "partition_id": 0},
            ],
        },
    )
    assert response.status_code == 200, response.text
    assert node.requests == [
        ElectLeadersRequest(ElectionType.PREFERRED, (("orders", 2), ("orders", 0), ("events", 0), ("gone", 0)))
    ]
    body = response.json()
    assert body["kind"] == "KafkaLeaderElectionList"
    assert body["metadata"] == {"self": f"{URL}/elect-leaders", "next": None}
    rows = [
        (d["topic_name"], d["partition_id"], d["error_code"], d["kafka_error_name"], d["leader_id"])
        for d in body["data"]
    ]
    assert rows == [
        ("events", 0, 50003, "ELIGIBLE_LEADERS_NOT_AVAILABLE", None),
        ("gone", 0, 40403, "UNKNOWN_TOPIC_OR_PARTITION", None),
        ("orders", 0, 200, "ELECTION_NOT_NEEDED", 1),
        ("orders", 2, 200, "NONE", 1),
    ]
    assert body["data"][0]["message"] == "Eligible topic partition leaders are not available."


def test_elect_leaders_for_every_partition(client, node):
    node.answer = ElectLeadersResponse(0, ())
    response = client.post(f"{V3}/elect-leaders", json={"election_type": "UNCLEAN"})
    assert response.status_code == 200 and response.json()["data"] == []
    assert node.requests == [ElectLeadersRequest(ElectionType.UNCLEAN, None)]


def test_elect_leaders_top_level_error(client, node):
    node.answer = ElectLeadersResponse(31, ())
    _error(client.post(f"{V3}/elect-leaders", json={"election_type": "PREFERRED"}), 403, 40301)


# ================================================================ every Kafka error code, every write

# (Kafka code, HTTP status, REST error code)
KAFKA_CODES = [
    (-1, 400, 40002),  # UNKNOWN_SERVER_ERROR
    (3, 404, 40403),  # UNKNOWN_TOPIC_OR_PARTITION
    (5, 404, 40404),  # LEADER_NOT_AVAILABLE
    (7, 500, 50003),  # REQUEST_TIMED_OUT (retriable)
    (8, 503, 50302),  # BROKER_NOT_AVAILABLE
    (10, 413, 413),  # MESSAGE_TOO_LARGE
    (17, 400, 40002),  # INVALID_TOPIC_EXCEPTION
    (19, 500, 50003),  # NOT_ENOUGH_REPLICAS (retriable)
    (29, 403, 40301),  # TOPIC_AUTHORIZATION_FAILED
    (31, 403, 40301),  # CLUSTER_AUTHORIZATION_FAILED
    (35, 400, 40002),  # UNSUPPORTED_VERSION
    (36, 400, 40002),  # TOPIC_ALREADY_EXISTS
    (37, 400, 40002),  # INVALID_PARTITIONS
    (38, 400, 40002),  # INVALID_REPLICATION_FACTOR
    (39, 400, 40002),  # INVALID_REPLICA_ASSIGNMENT
    (40, 400, 40002),  # INVALID_CONFIG
    (41, 500, 50003),  # NOT_CONTROLLER (retriable)
    (42, 400, 40002),  # INVALID_REQUEST
    (44, 400, 40002),  # POLICY_VIOLATION
    (54, 400, 40002),  # SECURITY_DISABLED
    (55, 400, 40002),  # OPERATION_NOT_ATTEMPTED
    (58, 401, 40101),  # SASL_AUTHENTICATION_FAILED
    (60, 400, 40002),  # REASSIGNMENT_IN_PROGRESS
    (73, 400, 40002),  # TOPIC_DELETION_DISABLED
    (80, 500, 50003),  # PREFERRED_LEADER_NOT_AVAILABLE (retriable)
    (83, 500, 50003),  # ELIGIBLE_LEADERS_NOT_AVAILABLE (retriable)
    (89, 429, 42901),  # THROTTLING_QUOTA_EXCEEDED
    (100, 404, 40403),  # UNKNOWN_TOPIC_ID
    (107, 400, 40002),  # INELIGIBLE_REPLICA
    (9999, 500, 50002),  # not a Kafka error code
]


WRITES = [
    ("POST", "/topics", {"topic_name": "t"}),
    ("PATCH", "/topics/orders", {"partitions_count": 5}),
    ("DELETE", "/topics/orders", None),
    ("PUT", "/topics/orders/configs/retention.ms", {"value": "1"}),
    ("DELETE", "/topics/orders/configs/retention.ms", None),
    ("POST", "/topics/orders/configs:alter", {"data": [{"name": "retention.ms", "value": "1"}]}),
    ("POST", "/topics/orders/partitions/0/elect-leader", {"election_type": "PREFERRED"}),
]


@pytest.mark.parametrize(("method", "path", "body"), WRITES, ids=[f"{m} {p}" for m, p, _ in WRITES])
@pytest.mark.parametrize(("kafka_code", "status", "rest_code"), KAFKA_CODES, ids=[str(c[0]) for c in KAFKA_CODES])
def test_kafka_error_codes_map_to_http(node, method, path, body, kafka_code, status, rest_code):
    node.answer = failing_answer(kafka_code, f"kafka says {kafka_code}")
    kwargs = {} if body is None else {"json": body}
    response = client_for(node).request(method, V3 + path, **kwargs)
    _error(response, status, rest_code, f"kafka says {kafka_code}")
    assert len(node.requests) == 1


# ================================================================ controller unreachable or failing


@pytest.mark.parametrize(
    ("method", "path", "body"), WRITES + [("POST", "/elect-leaders", {"election_type": "UNCLEAN"})]
)
def test_no_active_controller_is_503(node, method, path, body):
    node.answer = unavailable()
    kwargs = {} if body is None else {"json": body}
    body = _error(client_for(node).request(method, V3 + path, **kwargs), 503, 50302)
    assert body["message"] == "No active controller is available: no quorum leader is known"


@pytest.mark.parametrize(
    ("answer", "code"),
    [
        (TimeoutError(), 50003),
        (ConnectionResetError("reset"), 50002),
        (ElectLeadersResponse(0, ()), 50002),  # the wrong kind of answer
        (CreateTopicsResponse(()), 50002),  # no result for the topic
        (CreateTopicsResponse((CreateTopicResult("other"),)), 50002),
    ],
)
def test_controller_failures_are_json_500s(node, answer, code):
    node.answer = answer
    _error(client_for(node).post(f"{V3}/topics", json={"topic_name": "t"}), 500, code)


def test_unknown_cluster_writes_send_nothing(client, node):
    for method, path, body in WRITES:
        kwargs = {} if body is None else {"json": body}
        _error(
            client.request(method, "/v3/clusters/other" + path, **kwargs), 404, 404, "Cluster other cannot be found."
        )
    assert node.requests == []
