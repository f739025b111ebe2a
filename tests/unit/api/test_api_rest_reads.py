"""REST reads: shapes, links and 404s of every GET route, over a real replayed metadata image."""

from __future__ import annotations

from typing import Any, cast

import pytest
from rest_api_support import (  # type: ignore[import-not-found,unused-ignore]  # a sibling module on pytest's path
    CLUSTER_ID,
    ORDERS_ID,
    URL,
    V3,
    FakeNode,
    client_for,
    quorum,
    unavailable,
)

from quorum.controller.topic_configs import describe_all
from quorum.metadata.image import ConfigResource
from quorum.metadata.records import kafka_uuid_string
from quorum.node.quorum_cli import replication_rows, status_fields


@pytest.fixture
def node() -> FakeNode:
    return FakeNode()


@pytest.fixture
def client(node: FakeNode):
    return client_for(node)


def _ok(response, kind: str) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["kind"] == kind
    return cast(dict[str, Any], body)


def _not_found(response, code: int, message: str | None = None) -> None:
    assert response.status_code == 404, response.text
    body = response.json()
    assert body["error_code"] == code
    assert set(body) == {"error_code", "message"}
    if message is not None:
        assert body["message"] == message


# ---------------------------------------------------------------- cluster


def test_list_clusters_has_the_one_cluster(client):
    body = _ok(client.get("/v3/clusters"), "KafkaClusterList")
    assert body["metadata"] == {"self": "http://testserver/v3/clusters", "next": None}
    assert [c["cluster_id"] for c in body["data"]] == [CLUSTER_ID]
    assert body["data"][0] == client.get(V3).json()


def test_get_cluster_shape_and_links(client):
    body = _ok(client.get(V3), "KafkaCluster")
    assert body["metadata"] == {"self": URL, "resource_name": f"crn:///kafka={CLUSTER_ID}"}
    assert body["cluster_id"] == CLUSTER_ID
    assert body["controller"] == {"related": f"{URL}/quorum/status"}
    assert body["brokers"] == {"related": f"{URL}/brokers"}
    assert body["topics"] == {"related": f"{URL}/topics"}
    assert body["partition_reassignments"] == {"related": f"{URL}/topics/-/partitions/-/reassignment"}
    assert body["quorum_replication"] == {"related": f"{URL}/quorum/replication"}


def test_links_follow_the_request_host(node):
    response = client_for(node).get(V3, headers={"host": "node-7.example:18081"})
    assert response.json()["metadata"]["self"] == f"http://node-7.example:18081{V3}"


@pytest.mark.parametrize(
    "path",
    ["", "/brokers", "/brokers/1", "/topics", "/topics/orders", "/topics/orders/configs", "/quorum/status"],
)
def test_unknown_cluster_is_404(client, path):
    _not_found(client.get(f"/v3/clusters/other-cluster{path}"), 404, "Cluster other-cluster cannot be found.")


# ---------------------------------------------------------------- brokers


def test_list_brokers(client):
    body = _ok(client.get(f"{V3}/brokers"), "KafkaBrokerList")
    assert body["metadata"] == {"self": f"{URL}/brokers", "next": None}
    assert [(b["broker_id"], b["rack"], b["fenced"]) for b in body["data"]] == [
        (1, "a", False),
        (2, "b", False),
        (3, None, True),
    ]


def test_get_broker_shape(client):
    body = _ok(client.get(f"{V3}/brokers/2"), "KafkaBroker")
    assert body == {
        "kind": "KafkaBroker",
        "metadata": {"self": f"{URL}/brokers/2", "resource_name": f"crn:///kafka={CLUSTER_ID}/broker=2"},
        "cluster_id": CLUSTER_ID,
        "broker_id": 2,
        "host": "127.0.0.1",
        "port": 9092,
        "rack": "b",
        "partition_replicas": {"related": f"{URL}/brokers/2/partition-replicas"},
        "fenced": False,
        "in_controlled_shutdown": False,
        "epoch": 11,
        "listeners": [
            {"name": "PLAINTEXT", "host": "127.0.0.1", "port": 9092, "security_protocol": 0},
            {"name": "INTERNAL", "host": "10.0.0.1", "port": 19092, "security_protocol": 0},
        ],
    }


def test_fenced_broker(client):
    body = _ok(client.get(f"{V3}/brokers/3"), "KafkaBroker")
    assert body["fenced"] is True and body["rack"] is None and body["epoch"] == 12


@pytest.mark.parametrize("broker_id", [4, 0, -1, 2**31 - 1])
def test_unknown_broker_is_404(client, broker_id):
    _not_found(client.get(f"{V3}/brokers/{broker_id}"), 404, f"Broker {broker_id} cannot be found.")
    _not_found(client.get(f"{V3}/brokers/{broker_id}/partition-replicas"), 404)


def test_partition_replicas_of_a_broker(client):
    body = _ok(client.get(f"{V3}/brokers/3/partition-replicas"), "KafkaReplicaList")
    assert [(r["topic_name"], r["partition_id"], r["is_leader"], r["is_in_sync"]) for r in body["data"]] == [
        ("events", 0, False, False),
        ("orders", 0, False, True),
        ("orders", 1, False, True),
        ("orders", 2, False, False),
    ]
    assert body["metadata"]["self"] == f"{URL}/brokers/3/partition-replicas"


# ---------------------------------------------------------------- topics


def test_list_topics_sorted_with_internal_flag(client):
    body = _ok(client.get(f"{V3}/topics"), "KafkaTopicList")
    assert [
        (t["topic_name"], t["is_internal"], t["partitions_count"], t["replication_factor"]) for t in body["data"]
    ] == [
        ("__consumer_offsets", True, 1, 1),
        ("events", False, 1, 3),
        ("orders", False, 3, 3),
    ]


def test_get_topic_shape(client):
    body = _ok(client.get(f"{V3}/topics/orders"), "KafkaTopic")
    assert body == {
        "kind": "KafkaTopic",
        "metadata": {"self": f"{URL}/topics/orders", "resource_name": f"crn:///kafka={CLUSTER_ID}/topic=orders"},
        "cluster_id": CLUSTER_ID,
        "topic_name": "orders",
        "is_internal": False,
        "replication_factor": 3,
        "partitions_count": 3,
        "partitions": {"related": f"{URL}/topics/orders/partitions"},
        "configs": {"related": f"{URL}/topics/orders/configs"},
        "partition_reassignments": {"related": f"{URL}/topics/orders/partitions/-/reassignment"},
        "topic_id": kafka_uuid_string(ORDERS_ID),
    }


@pytest.mark.parametrize(
    "path",
    [
        "/topics/nope",
        "/topics/nope/partitions",
        "/topics/nope/partitions/0",
        "/topics/nope/partitions/0/replicas",
        "/topics/nope/partitions/0/replicas/1",
        "/topics/nope/partitions/-/reassignment",
        "/topics/nope/partitions/0/reassignment",
        "/topics/nope/configs",
        "/topics/nope/configs/retention.ms",
        "/topics/nope/configs/no.such.config",
    ],
)
def test_unknown_topic_is_404_40403(client, path):
    _not_found(client.get(V3 + path), 40403, "This server does not host this topic-partition.")


# ---------------------------------------------------------------- partitions and replicas


def test_list_partitions(client):
    body = _ok(client.get(f"{V3}/topics/orders/partitions"), "KafkaPartitionList")
    assert body["metadata"] == {"self": f"{URL}/topics/orders/partitions", "next": None}
    rows = [(p["partition_id"], p["leader_id"], p["replica_ids"], p["isr"], p["leader_epoch"]) for p in body["data"]]
    assert rows == [(0, 1, [1, 2, 3], [1, 2, 3], 0), (1, 2, [2, 3, 1], [2, 3, 1], 2), (2, 1, [3, 1, 2], [1, 2], 1)]


def test_get_partition_shape(client):
    body = _ok(client.get(f"{V3}/topics/orders/partitions/1"), "KafkaPartition")
    base = f"{URL}/topics/orders/partitions/1"
    assert body == {
        "kind": "KafkaPartition",
        "metadata": {"self": base, "resource_name": f"crn:///kafka={CLUSTER_ID}/topic=orders/partition=1"},
        "cluster_id": CLUSTER_ID,
        "topic_name": "orders",
        "partition_id": 1,
        "leader": {"related": f"{base}/replicas/2"},
        "replicas": {"related": f"{base}/replicas"},
        "reassignment": {"related": f"{base}/reassignment"},
        "leader_id": 2,
        "replica_ids": [2, 3, 1],
        "isr": [2, 3, 1],
        "leader_epoch": 2,
        "partition_epoch": 2,
        "leader_recovery_state": "RECOVERED",
    }


def test_leaderless_partition(client):
    body = _ok(client.get(f"{V3}/topics/events/partitions/0"), "KafkaPartition")
    assert body["leader"] is None and body["leader_id"] is None
    assert body["isr"] == [] and body["replica_ids"] == [2, 1, 3]
    assert (body["leader_epoch"], body["partition_epoch"]) == (1, 2)


@pytest.mark.parametrize("partition_id", [3, -1, 2**31 - 1])
def test_unknown_partition_is_404_40402(client, partition_id):
    message = f"Partition {partition_id} of topic orders cannot be found."
    for suffix in ("", "/replicas", "/replicas/1", "/reassignment"):
        _not_found(client.get(f"{V3}/topics/orders/partitions/{partition_id}{suffix}"), 40402, message)


def test_list_replicas(client):
    body = _ok(client.get(f"{V3}/topics/orders/partitions/2/replicas"), "KafkaReplicaList")
    assert [(r["broker_id"], r["is_leader"], r["is_in_sync"]) for r in body["data"]] == [
        (3, False, False),
        (1, True, True),
        (2, False, True),
    ]


def test_get_replica_shape(client):
    body = _ok(client.get(f"{V3}/topics/orders/partitions/2/replicas/1"), "KafkaReplica")
    base = f"{URL}/topics/orders/partitions/2/replicas/1"
    assert body == {
        "kind": "KafkaReplica",
        "metadata": {"self": base, "resource_name": f"crn:///kafka={CLUSTER_ID}/topic=orders/partition=2/replica=1"},
        "cluster_id": CLUSTER_ID,
        "topic_name": "orders",
        "partition_id": 2,
        "broker_id": 1,
        "is_leader": True,
        "is_in_sync": True,
        "broker": {"related": f"{URL}/brokers/1"},
    }


def test_the_leader_link_resolves_to_the_leader_replica(client):
    partition = client.get(f"{V3}/topics/orders/partitions/2").json()
    leader = client.get(partition["leader"]["related"]).json()
    assert leader["kind"] == "KafkaReplica" and leader["broker_id"] == 1 and leader["is_leader"] is True


def test_replica_not_on_the_partition_is_404(client):
    _not_found(
        client.get(f"{V3}/topics/__consumer_offsets/partitions/0/replicas/2"),
        404,
        "Replica 2 of partition 0 of topic __consumer_offsets cannot be found.",
    )


# ---------------------------------------------------------------- reassignments


def test_reassignments(client):
    every = _ok(client.get(f"{V3}/topics/-/partitions/-/reassignment"), "KafkaReassignmentList")
    one = _ok(client.get(f"{V3}/topics/events/partitions/0/reassignment"), "KafkaReassignment")
    assert every["data"] == [one]
    assert one["adding_replicas"] == [3] and one["removing_replicas"] == []
    assert one["replicas"] == {"related": f"{URL}/topics/events/partitions/0/replicas"}
    assert _ok(client.get(f"{V3}/topics/events/partitions/-/reassignment"), "KafkaReassignmentList")["data"] == [one]
    assert _ok(client.get(f"{V3}/topics/orders/partitions/-/reassignment"), "KafkaReassignmentList")["data"] == []
    _not_found(client.get(f"{V3}/topics/orders/partitions/0/reassignment"), 404)


# ---------------------------------------------------------------- configs


def _expected_configs(node: FakeNode, topic: str) -> list[dict[str, Any]]:
    image = node.image()
    entries = describe_all(
        image.topic_config(topic),
        node.broker_defaults(),
        dynamic_default_broker=image.config(ConfigResource.broker("")),
        dynamic_broker=image.config(ConfigResource.broker(node.node_id)),
    )
    return [
        {
            "name": e.name,
            "value": e.value,
            "is_default": e.is_default,
            "is_read_only": e.is_read_only,
            "is_sensitive": e.is_sensitive,
            "source": e.source.name,
            "synonyms": [{"name": s.name, "value": s.value, "source": s.source.name} for s in e.synonyms],
        }
        for e in entries
    ]


def _config_fields(item: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in item.items() if k not in ("kind", "metadata", "cluster_id", "topic_name")}


@pytest.mark.parametrize("topic", ["orders", "events"])
def test_list_topic_configs_is_describe_configs(client, node, topic):
    body = _ok(client.get(f"{V3}/topics/{topic}/configs"), "KafkaTopicConfigList")
    assert [_config_fields(c) for c in body["data"]] == _expected_configs(node, topic)
    assert {c["topic_name"] for c in body["data"]} == {topic}
    assert all(c["kind"] == "KafkaTopicConfig" for c in body["data"])


def test_get_topic_config_overridden(client):
    body = _ok(client.get(f"{V3}/topics/orders/configs/cleanup.policy"), "KafkaTopicConfig")
    assert body == {
        "kind": "KafkaTopicConfig",
        "metadata": {
            "self": f"{URL}/topics/orders/configs/cleanup.policy",
            "resource_name": f"crn:///kafka={CLUSTER_ID}/topic=orders/config=cleanup.policy",
        },
        "cluster_id": CLUSTER_ID,
        "topic_name": "orders",
        "name": "cleanup.policy",
        "value": "compact",
        "is_default": False,
        "is_read_only": False,
        "is_sensitive": False,
        "source": "DYNAMIC_TOPIC_CONFIG",
        "synonyms": [
            {"name": "cleanup.policy", "value": "compact", "source": "DYNAMIC_TOPIC_CONFIG"},
            {"name": "log.cleanup.policy", "value": "delete", "source": "DEFAULT_CONFIG"},
        ],
    }


def test_config_from_the_dynamic_cluster_default(client):
    body = _ok(client.get(f"{V3}/topics/events/configs/retention.bytes"), "KafkaTopicConfig")
    assert (body["value"], body["source"], body["is_default"]) == ("1073741824", "DYNAMIC_DEFAULT_BROKER_CONFIG", False)
    assert body["synonyms"] == [
        {"name": "log.retention.bytes", "value": "1073741824", "source": "DYNAMIC_DEFAULT_BROKER_CONFIG"},
        {"name": "log.retention.bytes", "value": "-1", "source": "DEFAULT_CONFIG"},
    ]


def test_config_from_the_static_broker_config(client):
    body = _ok(client.get(f"{V3}/topics/events/configs/retention.ms"), "KafkaTopicConfig")
    assert body["value"] == str(72 * 3600 * 1000)


def test_unknown_config_is_404(client):
    _not_found(
        client.get(f"{V3}/topics/orders/configs/no.such.config"),
        404,
        f"Config no.such.config cannot be found for TOPIC orders in cluster {CLUSTER_ID}.",
    )


def test_all_topics_configs(client, node):
    body = _ok(client.get(f"{V3}/topics/-/configs"), "KafkaTopicConfigList")
    per_topic = len(_expected_configs(node, "orders"))
    assert len(body["data"]) == 3 * per_topic
    assert [c["topic_name"] for c in body["data"][::per_topic]] == ["__consumer_offsets", "events", "orders"]
    orders = [_config_fields(c) for c in body["data"] if c["topic_name"] == "orders"]
    assert orders == _expected_configs(node, "orders")


def test_unparsable_broker_default_does_not_fail_the_read(node):
    node.defaults["log.retention.hours"] = "seventy-two"
    body = _ok(client_for(node).get(f"{V3}/topics/events/configs/retention.ms"), "KafkaTopicConfig")
    assert body["source"] == "UNKNOWN" and body["value"] is None
    overridden = _ok(client_for(node).get(f"{V3}/topics/orders/configs/retention.ms"), "KafkaTopicConfig")
    assert overridden["value"] == "1000"


# ---------------------------------------------------------------- the quorum


def test_quorum_status(client):
    body = _ok(client.get(f"{V3}/quorum/status"), "KafkaQuorumStatus")
    assert body == {
        "kind": "KafkaQuorumStatus",
        "metadata": {"self": f"{URL}/quorum/status", "resource_name": f"crn:///kafka={CLUSTER_ID}/quorum=metadata"},
        "cluster_id": CLUSTER_ID,
        "leader_id": 1001,
        "leader_epoch": 7,
        "high_watermark": 120,
        "max_follower_lag": 25,
        "max_follower_lag_time_ms": 500,
        "voters": [1001, 1002, 1003],
        "observers": [1, 3],
        "replication": {"related": f"{URL}/quorum/replication"},
    }


def test_quorum_status_agrees_with_the_cli(client):
    body = client.get(f"{V3}/quorum/status").json()
    cli = status_fields(quorum())
    assert [body[k] for k in ("leader_id", "leader_epoch", "high_watermark", "max_follower_lag")] == [
        cli["LeaderId"],
        cli["LeaderEpoch"],
        cli["HighWatermark"],
        cli["MaxFollowerLag"],
    ]
    assert body["max_follower_lag_time_ms"] == cli["MaxFollowerLagTimeMs"]
    assert (body["voters"], body["observers"]) == (cli["CurrentVoters"], cli["CurrentObservers"])


def test_quorum_replication(client):
    body = _ok(client.get(f"{V3}/quorum/replication"), "KafkaQuorumReplicaList")
    rows = [
        (
            r["node_id"],
            r["log_end_offset"],
            r["lag"],
            r["last_fetch_timestamp"],
            r["last_caught_up_timestamp"],
            r["status"],
        )
        for r in body["data"]
    ]
    assert rows == [
        (1001, 125, 0, 1_700_000_000_500, 1_700_000_000_500, "Leader"),
        (1002, 120, 5, 1_700_000_000_400, 1_700_000_000_300, "Follower"),
        (1003, 100, 25, 1_700_000_000_200, 1_700_000_000_000, "Follower"),
        (1, 125, 0, 1_700_000_000_450, 1_700_000_000_450, "Observer"),
        (3, -1, 125, -1, -1, "Observer"),
    ]
    cli = replication_rows(quorum(), human=False)
    assert [(r["NodeId"], r["LogEndOffset"], r["Lag"], r["Status"]) for r in cli] == [
        (row[0], row[1], row[2], row[5]) for row in rows
    ]
    assert (body["leader_id"], body["leader_epoch"]) == (1001, 7)


def test_quorum_lag_time_unknown_when_never_caught_up(node):
    d = quorum()
    laggard = d.voters[2]
    node.described = type(d)(
        d.leader_id,
        d.leader_epoch,
        d.high_watermark,
        (d.voters[0], d.voters[1], type(laggard)(laggard.replica_id, laggard.log_end_offset, -1, -1)),
        d.observers,
    )
    assert client_for(node).get(f"{V3}/quorum/status").json()["max_follower_lag_time_ms"] == -1


def test_quorum_without_leader_is_503(node):
    node.described = unavailable()
    for path in ("/quorum/status", "/quorum/replication"):
        response = client_for(node).get(V3 + path)
        assert response.status_code == 503
        body = response.json()
        assert body["error_code"] == 50302 and "no quorum leader is known" in body["message"]


@pytest.mark.parametrize(("exc", "code"), [(TimeoutError(), 50003), (RuntimeError("boom"), 50002)])
def test_quorum_describe_failures_are_json_errors(node, exc, code):
    node.described = exc
    response = client_for(node).get(f"{V3}/quorum/status")
    assert response.status_code == 500 and response.json()["error_code"] == code
