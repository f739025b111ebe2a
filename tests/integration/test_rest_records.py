"""REST records on a real 3+3 cluster: ``POST .../topics/{t}/records`` (each format, headers,
partitions, timestamps, errors, a 10,000-record stream) and ``GET .../partitions/{p}/offset``,
every report checked against what a real Kafka consumer (confluent-kafka) then reads.

One cluster for the module; each test uses its own topics.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from dataplane_support import bootstrap, confluent_consume_all, create_topic, start_dataplane_cluster
from metadata_cluster import MetadataCluster, closed_after
from rest_stream import encode_records, stream_records

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[MetadataCluster]:
    c = start_dataplane_cluster(Path(tmp_path_factory.mktemp("rest-records")))
    with closed_after(request, [c]):
        yield c


def records_url(c: MetadataCluster, node: int, topic: str) -> str:
    return f"{c.nodes[node].rest_url}/v3/clusters/{c.cluster_id}/topics/{topic}/records"


def post_records(c: MetadataCluster, node: int, topic: str, *records: Any, **kwargs: Any) -> httpx.Response:
    body = "".join(json.dumps(r) for r in records)
    headers = {"content-type": "application/json", **kwargs.pop("headers", {})}
    return c.http.post(records_url(c, node, topic), content=body.encode(), headers=headers, timeout=60, **kwargs)


def reports_of(response: httpx.Response) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.text
    assert response.text.endswith("\r\n")
    return [json.loads(line) for line in response.text.split("\r\n") if line]


def read_at(c: MetadataCluster, topic: str, partition: int, offset: int) -> Any:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap(c), "group.id": "unused", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, partition, offset)])
        for _ in range(60):
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                assert message.offset() == offset
                return message
        raise AssertionError(f"nothing read at {topic}-{partition}@{offset}")
    finally:
        consumer.close()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_each_format_with_headers_partition_and_timestamp(cluster: MetadataCluster) -> None:
    create_topic(cluster, "rest-formats", 3, 3)
    node = cluster.broker_ids[0]
    sent = [
        {"key": {"type": "BINARY", "data": b64(b"\x00\x01key")}, "value": {"type": "BINARY", "data": b64(b"\xffbin")}},
        {"key": {"type": "STRING", "data": "clé"}, "value": {"type": "STRING", "data": "välue"}},
        {"key": {"type": "JSON", "data": [1, "k"]}, "value": {"type": "JSON", "data": {"a": 1.5, "b": None}}},
        {
            "partition_id": 2,
            "headers": [{"name": "h1", "value": b64(b"v1")}, {"name": "h1", "value": b64(b"v2")}, {"name": "h2"}],
            "value": {"type": "STRING", "data": "to partition 2"},
            "timestamp": "2021-02-05T19:14:42.123Z",
        },
        {},
    ]
    expected = [
        (b"\x00\x01key", b"\xffbin"),
        ("clé".encode(), "välue".encode()),
        (b'[1,"k"]', b'{"a":1.5,"b":null}'),
        (None, b"to partition 2"),
        (None, None),
    ]
    reports = reports_of(post_records(cluster, node, "rest-formats", *sent))
    assert [r["error_code"] for r in reports] == [200] * 5, reports
    assert all(r["cluster_id"] == cluster.cluster_id and r["topic_name"] == "rest-formats" for r in reports)
    assert reports[0]["key"] == {"type": "BINARY", "size": 5} and reports[0]["value"] == {"type": "BINARY", "size": 4}
    assert reports[1]["key"] == {"type": "STRING", "size": 4} and reports[1]["value"] == {"type": "STRING", "size": 6}
    assert reports[2]["value"] == {"type": "JSON", "size": 18}
    assert reports[3]["partition_id"] == 2 and reports[3]["timestamp"] == "2021-02-05T19:14:42.123Z"
    assert "key" not in reports[3] and "key" not in reports[4] and "value" not in reports[4]
    for report, (key, value) in zip(reports, expected, strict=True):
        message = read_at(cluster, "rest-formats", report["partition_id"], report["offset"])
        assert (message.key(), message.value()) == (key, value)
    stamped = read_at(cluster, "rest-formats", 2, reports[3]["offset"])
    assert stamped.timestamp()[1] == 1612552482123
    assert stamped.headers() == [("h1", b"v1"), ("h1", b"v2"), ("h2", None)]


def test_keyed_records_land_where_javas_partitioner_puts_them(cluster: MetadataCluster) -> None:
    """murmur2 of the key, as Kafka's Java producer (and so the REST Proxy) partitions."""
    from confluent_kafka import Producer

    create_topic(cluster, "rest-keys", 6, 3)
    keys = [f"key-{i}" for i in range(30)]
    reports = reports_of(
        post_records(
            cluster, cluster.broker_ids[1], "rest-keys", *({"key": {"type": "STRING", "data": k}} for k in keys)
        )
    )
    placed: dict[str, int] = {}
    producer = Producer({"bootstrap.servers": bootstrap(cluster), "partitioner": "murmur2_random"})
    for k in keys:
        producer.produce(
            "rest-keys",
            key=k.encode(),
            on_delivery=lambda err, msg: placed.__setitem__(msg.key().decode(), msg.partition()),
        )
    assert producer.flush(30) == 0
    assert {k: r["partition_id"] for k, r in zip(keys, reports, strict=True)} == placed


def test_a_controller_node_produces_too(cluster: MetadataCluster) -> None:
    create_topic(cluster, "rest-via-controller", 1, 3)
    controller = min(i for i in cluster.nodes if i not in cluster.broker_ids)
    reports = reports_of(
        post_records(cluster, controller, "rest-via-controller", {"value": {"type": "STRING", "data": "x"}})
    )
    assert reports[0]["error_code"] == 200 and reports[0]["offset"] == 0
    assert read_at(cluster, "rest-via-controller", 0, 0).value() == b"x"


def test_errors_before_the_stream(cluster: MetadataCluster) -> None:
    create_topic(cluster, "rest-errors", 1, 3)
    node = cluster.broker_ids[0]
    missing = post_records(cluster, node, "no-such-topic", {"value": {"type": "STRING", "data": "x"}})
    assert (missing.status_code, missing.json()) == (
        404,
        {"error_code": 40403, "message": "This server does not host this topic-partition."},
    )
    url = records_url(cluster, node, "rest-errors").replace(cluster.cluster_id, "not-this-cluster")
    assert cluster.http.post(url, content=b"{}", headers={"content-type": "application/json"}).status_code == 404
    empty = cluster.http.post(
        records_url(cluster, node, "rest-errors"), content=b"  ", headers={"content-type": "application/json"}
    )
    assert (empty.status_code, empty.json()["error_code"]) == (422, 422)
    assert empty.json()["message"] == "Payload error. Request body is empty. Data is required."
    text = cluster.http.post(
        records_url(cluster, node, "rest-errors"), content=b"{}", headers={"content-type": "text/plain"}
    )
    assert (text.status_code, text.json()["error_code"]) == (415, 415)


def test_per_record_errors_leave_the_other_records_alone(cluster: MetadataCluster) -> None:
    create_topic(cluster, "rest-mixed", 2, 3)
    response = post_records(
        cluster,
        cluster.broker_ids[2],
        "rest-mixed",
        {"value": {"type": "STRING", "data": "first"}, "partition_id": 0},
        {"value": {"type": "STRING", "data": "bad partition"}, "partition_id": 7},
        {"value": {"type": "BINARY", "data": "not base64!"}},
        {"value": {"type": "AVRO", "data": "x"}},
        {"value": {"type": "STRING", "data": "last"}, "partition_id": 0},
    )
    reports = reports_of(response)
    assert [r["error_code"] for r in reports] == [200, 40402, 400, 400, 200]
    assert reports[1]["message"] == "Partition not found."
    assert reports[2]["message"] == "Bad Request: data=not base64! is not a base64 string."
    assert [reports[0]["offset"], reports[4]["offset"]] == [0, 1]
    assert read_at(cluster, "rest-mixed", 0, 1).value() == b"last"


def test_a_value_over_max_message_bytes_is_refused_by_the_broker(cluster: MetadataCluster) -> None:
    create_topic(cluster, "rest-small", 1, 3, max_message_bytes="4096")
    reports = reports_of(
        post_records(
            cluster,
            cluster.broker_ids[0],
            "rest-small",
            *({"value": {"type": "BINARY", "data": b64(b"s" * 500)}} for _ in range(20)),
            {"value": {"type": "BINARY", "data": b64(os.urandom(10_000))}},
            *({"value": {"type": "BINARY", "data": b64(b"t" * 500)}} for _ in range(20)),
        )
    )
    codes = [r["error_code"] for r in reports]
    # The small records around it go in batches the topic accepts; only the big one fails.
    assert codes == [200] * 20 + [413] + [200] * 20, codes
    assert reports[20]["message"].startswith("The request included a message larger than the max message size")
    assert [r["offset"] for r in reports if r["error_code"] == 200] == list(range(40))


def test_a_body_that_stops_being_json_ends_the_stream_after_its_error(cluster: MetadataCluster) -> None:
    create_topic(cluster, "rest-badjson", 1, 3)
    body = b'{"value": {"type": "STRING", "data": "ok"}} {"value": oops} {"value": {"type": "STRING", "data": "never"}}'
    response = cluster.http.post(
        records_url(cluster, cluster.broker_ids[0], "rest-badjson"),
        content=body,
        headers={"content-type": "application/json"},
    )
    reports = reports_of(response)
    assert [r["error_code"] for r in reports] == [200, 400]
    assert reports[1]["message"].startswith("Bad Request: Error processing JSON: Expecting value")


def test_a_streamed_request_of_10000_records_matches_what_a_consumer_reads(cluster: MetadataCluster) -> None:
    topic = "rest-stream"
    create_topic(cluster, topic, 3, 3)
    count = 10_000
    payload = os.urandom(1024)
    sent = [
        {
            "key": {"type": "STRING", "data": f"r{i}"},
            "value": {"type": "BINARY", "data": b64(payload[: i % 1024] + b"%d" % i)},
        }
        for i in range(count)
    ]
    status, reports, seconds = stream_records(records_url(cluster, cluster.broker_ids[1], topic), encode_records(sent))
    assert status == 200 and len(reports) == count
    assert all(r["error_code"] == 200 for r in reports), next(r for r in reports if r["error_code"] != 200)
    print(f"streamed {count} records of up to 1 KiB in {seconds:.2f} s ({count / seconds:.0f} records/s)")
    # Reports come in request order, and each partition's offsets are dense from 0.
    by_partition: dict[int, list[int]] = {}
    for r in reports:
        by_partition.setdefault(r["partition_id"], []).append(r["offset"])
    for offsets in by_partition.values():
        assert offsets == list(range(len(offsets)))
    messages = confluent_consume_all(bootstrap(cluster), topic, range(3), expected=count)
    assert len(messages) == count
    read = {(m.partition(), m.offset()): (m.key(), m.value()) for m in messages}
    for i, r in enumerate(reports):
        assert read[(r["partition_id"], r["offset"])] == (f"r{i}".encode(), payload[: i % 1024] + b"%d" % i), i
    # The partition resource's offsets agree.
    for p, offsets in by_partition.items():
        body = cluster.get_json(cluster.broker_ids[2], f"/topics/{topic}/partitions/{p}/offset")
        assert (body["kind"], body["earliest_offset"], body["latest_offset"]) == (
            "KafkaPartitionWithOffsets",
            0,
            len(offsets),
        )


def test_partition_offsets_follow_delete_records(cluster: MetadataCluster) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    create_topic(cluster, "rest-offsets", 1, 3)
    node = cluster.broker_ids[0]
    reports_of(
        post_records(cluster, node, "rest-offsets", *({"value": {"type": "STRING", "data": str(i)}} for i in range(10)))
    )
    body = cluster.get_json(node, "/topics/rest-offsets/partitions/0/offset")
    assert (body["earliest_offset"], body["latest_offset"]) == (0, 10)
    admin = AdminClient({"bootstrap.servers": bootstrap(cluster)})
    futures = admin.delete_records([TopicPartition("rest-offsets", 0, 4)])
    for future in futures.values():
        future.result(30)
    body = cluster.get_json(node, "/topics/rest-offsets/partitions/0/offset")
    assert (body["earliest_offset"], body["latest_offset"]) == (4, 10)
    assert cluster.get(node, "/topics/rest-offsets/partitions/5/offset").json()["error_code"] == 40402
    bad = cluster.get(node, "/topics/rest-offsets/partitions/0/offset?offset_type=latest")
    assert (bad.status_code, bad.json()["error_code"]) == (400, 40002)
