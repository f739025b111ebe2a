"""The metadata plane through every node's REST API and the `pykraft` console script.

One 3-controller + 3-broker cluster (racks rack-1..3) is shared by every test of this
module: none of them stops a node. Topic names are unique per test.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from metadata_cluster import MetadataCluster, closed_after, known_bug, run_pykraft, start_cluster, wait_until

pytestmark = pytest.mark.integration

RF5_MESSAGE = "The target replication factor of 5 cannot be reached because only 3 broker(s) are registered."
PROPAGATION_S = 5.0  # "shortly after": a committed change reaches every node's image within this


@pytest.fixture(scope="module")
def md(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[MetadataCluster]:
    c = start_cluster(tmp_path_factory.mktemp("metadata-rest"))
    with closed_after(request, [c]):
        yield c


def racks_of(md: MetadataCluster) -> dict[int, str]:
    return {b: info["rack"] for b, info in md.brokers(md.controller_ids[0]).items()}


def assert_error(r: Any, status: int, code: int, message: str | re.Pattern[str] | None = None) -> dict[str, Any]:
    """The v3 error body: exactly {error_code, message}."""
    assert r.status_code == status, f"{r.request.method} {r.request.url}: {r.status_code} {r.text}"
    body = r.json()
    assert set(body) == {"error_code", "message"}, body
    assert body["error_code"] == code, body
    if isinstance(message, str):
        assert body["message"] == message, body
    elif message is not None:
        assert message.search(body["message"]), body
    return dict(body)


def assert_absent_everywhere(md: MetadataCluster, name: str) -> None:
    for node_id in md.running_ids():
        assert_error(md.get(node_id, f"/topics/{name}"), 404, 40403)
        assert name not in md.topics(node_id)


def partition_fields(p: dict[str, Any]) -> tuple[Any, ...]:
    """A partition's data, without the links (which name the node that answered)."""
    return (p["partition_id"], p["replica_ids"], p["isr"], p["leader_id"], p["leader_epoch"], p["partition_epoch"])


def check_placement(partitions: list[dict[str, Any]], rf: int, racks: dict[int, str]) -> None:
    for p in partitions:
        replicas = p["replica_ids"]
        assert len(replicas) == rf, p
        assert len(set(replicas)) == rf, f"replicas not distinct: {p}"
        assert set(replicas) <= set(racks), p
        assert len({racks[b] for b in replicas}) == min(rf, len(set(racks.values()))), f"not rack-aware: {p}"
        # Every broker is up: the ISR is every replica and the preferred replica leads.
        assert p["isr"] == replicas, p
        assert p["leader_id"] == replicas[0], p


# --------------------------------------------------------------------------- 1. create everywhere


def test_create_topic_through_every_node(md: MetadataCluster) -> None:
    racks = racks_of(md)
    assert sorted(set(racks.values())) == ["rack-1", "rack-2", "rack-3"], racks
    created: dict[str, tuple[int, dict[str, Any]]] = {}
    for count, node_id in enumerate(sorted(md.nodes), start=2):
        name = f"every-node-{node_id}"
        t0 = time.monotonic()
        r = md.post(node_id, "/topics", {"topic_name": name, "partitions_count": count, "replication_factor": 3})
        assert r.status_code == 201, f"create through node {node_id}: {r.status_code} {r.text}"
        took = time.monotonic() - t0
        body = r.json()
        assert body["kind"] == "KafkaTopic"
        assert (body["topic_name"], body["partitions_count"], body["replication_factor"]) == (name, count, 3)
        assert body["cluster_id"] == md.cluster_id
        assert body["topic_id"], body
        assert r.headers["location"] == body["metadata"]["self"]
        assert r.headers["location"].endswith(f"/v3/clusters/{md.cluster_id}/topics/{name}")
        assert r.headers["location"].startswith(md.nodes[node_id].rest_url)
        # Read-your-writes: the node that answered the create has the topic in its image.
        got = md.get(node_id, f"/topics/{name}")
        assert got.status_code == 200, f"node {node_id} does not see {name} right after creating it: {got.text}"
        assert got.json()["topic_id"] == body["topic_id"]
        parts = md.partitions(node_id, name)
        assert [p["partition_id"] for p in parts] == list(range(count))
        check_placement(parts, 3, racks)
        created[name] = (node_id, body)
        print(f"create through node {node_id} ({md.nodes[node_id].role}): {took * 1000:.0f} ms")

    # Shortly after, every node sees every topic, with the same id and the same partitions.
    for name, (origin, body) in created.items():
        seen = md.wait_topic_everywhere(name, timeout=PROPAGATION_S)
        assert {n: t["topic_id"] for n, t in seen.items()} == {n: body["topic_id"] for n in md.nodes}
        reference = [partition_fields(p) for p in md.partitions(origin, name)]
        for node_id in md.nodes:
            mine = [partition_fields(p) for p in md.partitions(node_id, name)]
            assert mine == reference, f"node {node_id} and node {origin} disagree on {name}"

    # The preferred leaders are spread over the brokers (placement starts at a random broker
    # per topic, then goes round-robin over the rack-alternated list).
    leaders = [p["leader_id"] for name in created for p in md.partitions(md.controller_ids[0], name)]
    assert set(leaders) == set(racks), f"some broker leads nothing: {leaders}"


def test_create_topic_defaults_and_smaller_rf(md: MetadataCluster) -> None:
    controller_props = md.nodes[md.controller_ids[0]].plan.properties
    default_partitions = int(controller_props.get("num.partitions", "1"))
    default_rf = int(controller_props["default.replication.factor"])
    assert default_rf == 3
    racks = racks_of(md)
    for node_id in (md.broker_ids[0], md.controller_ids[-1]):
        name = f"defaults-{node_id}"
        body = md.create_topic(node_id, name)
        assert (body["partitions_count"], body["replication_factor"]) == (default_partitions, default_rf), body
        check_placement(md.partitions(node_id, name), default_rf, racks)
    # Only one of the two given: the other one takes its default.
    body = md.create_topic(md.broker_ids[1], "defaults-rf-only", replication_factor=2)
    assert (body["partitions_count"], body["replication_factor"]) == (default_partitions, 2)
    body = md.create_topic(md.broker_ids[2], "defaults-count-only", partitions_count=9)
    assert (body["partitions_count"], body["replication_factor"]) == (9, default_rf)
    check_placement(md.partitions(md.broker_ids[2], "defaults-count-only"), default_rf, racks)
    # RF 2 spans 2 racks; RF 1 is one replica.
    md.create_topic(md.controller_ids[0], "rf-two", partitions_count=6, replication_factor=2)
    check_placement(md.partitions(md.controller_ids[0], "rf-two"), 2, racks)
    md.create_topic(md.controller_ids[1], "rf-one", partitions_count=3, replication_factor=1)
    check_placement(md.partitions(md.controller_ids[1], "rf-one"), 1, racks)


# --------------------------------------------------------------------------- 2. refusals and changes


def test_replication_factor_above_registered_brokers_is_refused(md: MetadataCluster) -> None:
    for node_id in (md.broker_ids[0], md.controller_ids[0]):
        r = md.post(
            node_id, "/topics", {"topic_name": f"too-wide-{node_id}", "partitions_count": 1, "replication_factor": 5}
        )
        assert_error(r, 400, 40002, RF5_MESSAGE)
        # The same with validate_only: the same answer.
        r = md.post(
            node_id, "/topics", {"topic_name": f"too-wide-{node_id}", "replication_factor": 5, "validate_only": True}
        )
        assert_error(r, 400, 40002, RF5_MESSAGE)
    for node_id in (md.broker_ids[0], md.controller_ids[0]):
        assert_absent_everywhere(md, f"too-wide-{node_id}")


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        (".", "'.' is not allowed"),
        ("..", "'..' is not allowed"),
        ("has space", "'has space' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"),
        ("sl/ash", "'sl/ash' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"),
        ("x" * 250, f"the length of '{'x' * 250}' is longer than the max allowed length 249"),
    ],
)
def test_invalid_topic_names_are_refused(md: MetadataCluster, name: str, reason: str) -> None:
    r = md.post(md.broker_ids[1], "/topics", {"topic_name": name})
    assert_error(r, 400, 40002, f"Topic name is invalid: {reason}")
    assert name not in md.topics(md.broker_ids[1])


def test_duplicate_and_colliding_topics_are_refused(md: MetadataCluster) -> None:
    first = md.create_topic(md.broker_ids[0], "dup.topic", partitions_count=2)
    for node_id in md.nodes:  # every node refuses it, whichever node it asks
        r = md.post(node_id, "/topics", {"topic_name": "dup.topic", "partitions_count": 5})
        assert_error(r, 400, 40002, "Topic 'dup.topic' already exists.")
        r = md.post(node_id, "/topics", {"topic_name": "dup_topic"})
        assert_error(r, 400, 40002, "Topic 'dup_topic' collides with existing topic: dup.topic")
    # Neither changed nor created anything.
    for node_id in md.nodes:
        t = md.topics(node_id)
        assert t["dup.topic"]["topic_id"] == first["topic_id"]
        assert t["dup.topic"]["partitions_count"] == 2
        assert "dup_topic" not in t


def test_bad_configs_are_refused(md: MetadataCluster) -> None:
    node = md.controller_ids[1]
    r = md.post(node, "/topics", {"topic_name": "cfg-unknown", "configs": [{"name": "no.such.config", "value": "1"}]})
    assert_error(r, 400, 40002, "Unknown topic config name: no.such.config")
    r = md.post(node, "/topics", {"topic_name": "cfg-bad", "configs": [{"name": "retention.ms", "value": "abc"}]})
    assert_error(r, 400, 40002, "Invalid value abc for configuration retention.ms: Not a number of type LONG")
    r = md.post(node, "/topics", {"topic_name": "cfg-bad", "configs": [{"name": "cleanup.policy", "value": "shred"}]})
    assert_error(r, 400, 40002, re.compile(r"^Invalid value shred for configuration cleanup\.policy"))
    for name in ("cfg-unknown", "cfg-bad"):
        assert_absent_everywhere(md, name)
    # Good configs are stored and described on every node.
    md.create_topic(node, "cfg-good", configs=[{"name": "retention.ms", "value": "3600000"}])
    for node_id in md.nodes:
        entry = wait_until(
            f"retention.ms of cfg-good on node {node_id}",
            lambda n=node_id: (
                (e := md.get_json(n, "/topics/cfg-good/configs/retention.ms"))["value"] == "3600000" and e
            ),
            PROPAGATION_S,
        )
        assert entry["source"] == "DYNAMIC_TOPIC_CONFIG" and entry["is_default"] is False


def test_manual_replica_assignment(md: MetadataCluster) -> None:
    b4, b5, b6 = md.broker_ids
    assignment = {"0": [b6, b4, b5], "1": [b5, b6], "2": [b4]}
    # Irregular replica counts are refused; a regular one is taken as given.
    r = md.post(md.broker_ids[0], "/topics", {"topic_name": "manual-irregular", "replicas_assignments": assignment})
    assert_error(r, 400, 40002)
    assignment = {"0": [b6, b4], "1": [b5, b6], "2": [b4, b5]}
    r = md.post(md.broker_ids[0], "/topics", {"topic_name": "manual", "replicas_assignments": assignment})
    assert r.status_code == 201, r.text
    assert (r.json()["partitions_count"], r.json()["replication_factor"]) == (3, 2)
    for node_id in md.nodes:
        parts = wait_until(f"manual on node {node_id}", lambda n=node_id: md.partitions(n, "manual"), PROPAGATION_S)
        assert {str(p["partition_id"]): p["replica_ids"] for p in parts} == assignment
        assert {str(p["partition_id"]): p["leader_id"] for p in parts} == {k: v[0] for k, v in assignment.items()}
    # The list form works too; an unregistered broker, a duplicate broker and a gap are refused.
    r = md.post(
        md.controller_ids[0],
        "/topics",
        {"topic_name": "manual-list", "replicas_assignments": [{"partition_id": 0, "broker_ids": [b5, b4, b6]}]},
    )
    assert r.status_code == 201, r.text
    assert md.partitions(md.controller_ids[0], "manual-list")[0]["replica_ids"] == [b5, b4, b6]
    r = md.post(md.broker_ids[1], "/topics", {"topic_name": "manual-bad", "replicas_assignments": {"0": [b4, 99]}})
    assert_error(r, 400, 40002, "The manual partition assignment includes broker 99, but no such broker is registered.")
    r = md.post(md.broker_ids[1], "/topics", {"topic_name": "manual-bad", "replicas_assignments": {"0": [b4, b4]}})
    assert_error(r, 400, 40002)
    r = md.post(
        md.broker_ids[1], "/topics", {"topic_name": "manual-bad", "replicas_assignments": {"0": [b4], "2": [b5]}}
    )
    assert_error(r, 400, 40002)
    assert_absent_everywhere(md, "manual-bad")
    assert_absent_everywhere(md, "manual-irregular")


def test_add_partitions(md: MetadataCluster) -> None:
    racks = racks_of(md)
    created = md.create_topic(md.broker_ids[2], "grow", partitions_count=2)
    r = md.patch(md.broker_ids[0], "/topics/grow", {"partitions_count": 5})
    assert r.status_code == 200, r.text
    assert (r.json()["partitions_count"], r.json()["topic_id"]) == (5, created["topic_id"])
    parts = md.partitions(md.broker_ids[0], "grow")  # read-your-writes
    assert [p["partition_id"] for p in parts] == [0, 1, 2, 3, 4]
    check_placement(parts, 3, racks)
    for node_id in md.nodes:
        wait_until(
            f"5 partitions of grow on node {node_id}",
            lambda n=node_id: len(md.partitions(n, "grow")) == 5,
            PROPAGATION_S,
        )
    r = md.patch(md.controller_ids[2], "/topics/grow", {"partitions_count": 5})
    assert_error(r, 400, 40002, "Topic already has 5 partition(s).")
    r = md.patch(md.controller_ids[2], "/topics/grow", {"partitions_count": 3})
    assert_error(r, 400, 40002, "The topic grow currently has 5 partition(s); 3 would not be an increase.")
    r = md.patch(md.controller_ids[2], "/topics/no-such-topic", {"partitions_count": 3})
    assert_error(r, 404, 40403)
    assert len(md.partitions(md.controller_ids[2], "grow")) == 5


def test_delete_topic(md: MetadataCluster) -> None:
    md.create_topic(md.controller_ids[0], "doomed", partitions_count=3)
    md.wait_topic_everywhere("doomed", timeout=PROPAGATION_S)
    r = md.delete(md.broker_ids[1], "/topics/doomed")
    assert r.status_code == 204, r.text
    assert r.content == b""
    assert_error(md.get(md.broker_ids[1], "/topics/doomed"), 404, 40403)  # read-your-writes
    wait_until("doomed gone everywhere", lambda: all("doomed" not in md.topics(n) for n in md.nodes), PROPAGATION_S)
    assert_absent_everywhere(md, "doomed")
    assert_error(md.delete(md.controller_ids[1], "/topics/doomed"), 404, 40403)
    # The name can be used again: a new topic with a new id.
    again = md.create_topic(md.broker_ids[2], "doomed", partitions_count=1)
    assert again["partitions_count"] == 1


def _config(md: MetadataCluster, node_id: int, topic: str, name: str) -> dict[str, Any]:
    return dict(md.get_json(node_id, f"/topics/{topic}/configs/{name}"))


def test_topic_configs_put_delete_alter(md: MetadataCluster) -> None:
    topic = "configured"
    md.create_topic(md.broker_ids[0], topic)
    default = _config(md, md.broker_ids[0], topic, "retention.ms")
    assert default["source"] in ("DEFAULT_CONFIG", "STATIC_BROKER_CONFIG"), default

    # PUT one config: 204, then visible on the writing node at once and everywhere shortly.
    r = md.put(md.broker_ids[1], f"/topics/{topic}/configs/retention.ms", {"value": "86400000"})
    assert r.status_code == 204, r.text
    entry = _config(md, md.broker_ids[1], topic, "retention.ms")
    assert (entry["value"], entry["source"], entry["is_default"]) == ("86400000", "DYNAMIC_TOPIC_CONFIG", False)
    for node_id in md.nodes:
        wait_until(
            f"retention.ms on node {node_id}",
            lambda n=node_id: _config(md, n, topic, "retention.ms")["value"] == "86400000",
            PROPAGATION_S,
        )
    listed = {c["name"]: c for c in md.get_json(md.controller_ids[0], f"/topics/{topic}/configs")["data"]}
    assert listed["retention.ms"]["value"] == "86400000"

    # Batch alter: SET two, DELETE one.
    body = {
        "data": [
            {"name": "cleanup.policy", "value": "compact"},
            {"name": "max.message.bytes", "value": "200000", "operation": "SET"},
            {"name": "retention.ms", "operation": "DELETE"},
        ]
    }
    r = md.post(md.controller_ids[2], f"/topics/{topic}/configs:alter", body)
    assert r.status_code == 204, r.text
    node = md.controller_ids[2]
    assert _config(md, node, topic, "cleanup.policy")["value"] == "compact"
    assert _config(md, node, topic, "max.message.bytes")["value"] == "200000"
    assert _config(md, node, topic, "retention.ms")["value"] == default["value"]
    assert _config(md, node, topic, "retention.ms")["source"] == default["source"]

    # DELETE (reset) one config.
    r = md.delete(md.broker_ids[2], f"/topics/{topic}/configs/cleanup.policy")
    assert r.status_code == 204, r.text
    reset = _config(md, md.broker_ids[2], topic, "cleanup.policy")
    assert (reset["value"], reset["source"]) == ("delete", "DEFAULT_CONFIG")

    # validate_only changes nothing; bad values and unknown names are refused.
    r = md.post(
        md.broker_ids[0],
        f"/topics/{topic}/configs:alter",
        {"data": [{"name": "max.message.bytes", "value": "1"}], "validate_only": True},
    )
    assert r.status_code == 204, r.text
    r = md.post(
        md.broker_ids[0], f"/topics/{topic}/configs:alter", {"data": [{"name": "retention.ms", "value": "forever"}]}
    )
    assert_error(r, 400, 40002, "Invalid value forever for configuration retention.ms: Not a number of type LONG")
    r = md.put(md.broker_ids[0], f"/topics/{topic}/configs/retention.ms", {"value": "soon"})
    assert_error(r, 400, 40002, "Invalid value soon for configuration retention.ms: Not a number of type LONG")
    r = md.put(md.broker_ids[0], f"/topics/{topic}/configs/no.such.config", {"value": "1"})
    assert_error(r, 404, 404, f"Config no.such.config cannot be found for TOPIC {topic} in cluster {md.cluster_id}.")
    r = md.put(md.broker_ids[0], "/topics/no-such-topic/configs/retention.ms", {"value": "1"})
    assert_error(r, 404, 40403)
    time.sleep(0.5)
    for node_id in md.nodes:
        assert _config(md, node_id, topic, "max.message.bytes")["value"] == "200000"
        assert _config(md, node_id, topic, "retention.ms")["source"] == default["source"]


def test_validate_only_creates_nothing(md: MetadataCluster) -> None:
    for node_id in (md.broker_ids[2], md.controller_ids[0]):
        name = f"dry-run-{node_id}"
        r = md.post(
            node_id,
            "/topics",
            {"topic_name": name, "partitions_count": 4, "replication_factor": 2, "validate_only": True},
        )
        assert r.status_code == 200, r.text
        body = r.json()
        assert (body["topic_name"], body["partitions_count"], body["replication_factor"]) == (name, 4, 2)
        assert "location" not in r.headers
    time.sleep(1.0)  # long enough for anything committed to reach every node
    for node_id in (md.broker_ids[2], md.controller_ids[0]):
        assert_absent_everywhere(md, f"dry-run-{node_id}")
    # And a real create of the same name afterwards is not a duplicate.
    md.create_topic(md.broker_ids[2], f"dry-run-{md.broker_ids[2]}", partitions_count=4, replication_factor=2)


# --------------------------------------------------------------------------- 8. the console script


def _cli_ok(*args: str) -> str:
    result = run_pykraft(*args)
    assert result.returncode == 0, f"pykraft {' '.join(args)}: rc {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def test_console_script_topics_and_brokers(md: MetadataCluster) -> None:
    broker_url = md.nodes[md.broker_ids[0]].rest_url
    controller_url = md.nodes[md.controller_ids[1]].rest_url
    out = _cli_ok(
        "topics",
        "create",
        "--rest-url",
        broker_url,
        "--topic",
        "cli-topic",
        "--partitions",
        "3",
        "--replication-factor",
        "3",
        "--config",
        "retention.ms=60000",
    )
    assert out.strip() == "Created topic cli-topic."
    # Already there: an error, unless --if-not-exists.
    dup = run_pykraft("topics", "create", "--rest-url", controller_url, "--topic", "cli-topic")
    assert dup.returncode == 1
    assert "Topic 'cli-topic' already exists. (error 40002)" in dup.stderr
    _cli_ok("topics", "create", "--rest-url", controller_url, "--topic", "cli-topic", "--if-not-exists")
    out = _cli_ok("topics", "create", "--rest-url", controller_url, "--topic", "cli-dry", "--validate-only")
    assert out.strip() == "Topic cli-dry is valid."
    bad = run_pykraft("topics", "create", "--rest-url", broker_url, "--topic", "cli-wide", "--replication-factor", "5")
    assert bad.returncode == 1 and RF5_MESSAGE in bad.stderr, bad.stderr
    out = _cli_ok(
        "topics",
        "create",
        "--rest-url",
        broker_url,
        "--topic",
        "cli-manual",
        "--replica-assignment",
        f"{md.broker_ids[2]}:{md.broker_ids[0]},{md.broker_ids[1]}:{md.broker_ids[2]}",
    )
    assert md.partitions(md.broker_ids[0], "cli-manual")[1]["replica_ids"] == [md.broker_ids[1], md.broker_ids[2]]

    listed = _cli_ok("topics", "list", "--rest-url", controller_url).split()
    assert "cli-topic" in listed and "cli-manual" in listed and "cli-dry" not in listed
    assert listed == sorted(listed)

    topic = md.get_json(md.broker_ids[0], "/topics/cli-topic")
    parts = md.partitions(md.broker_ids[0], "cli-topic")
    lines = _cli_ok("topics", "describe", "--rest-url", broker_url, "--topic", "cli-topic").splitlines()
    # As kafka-topics.sh: every config not at its default, the brokers' static min.insync.replicas=2 included.
    assert lines[0] == (
        f"Topic: cli-topic\tTopicId: {topic['topic_id']}\tPartitionCount: 3\tReplicationFactor: 3\t"
        "Configs: min.insync.replicas=2,retention.ms=60000"
    )
    assert lines[1:] == [
        f"\tTopic: cli-topic\tPartition: {p['partition_id']}\tLeader: {p['leader_id']}"
        f"\tReplicas: {','.join(map(str, p['replica_ids']))}\tIsr: {','.join(map(str, p['isr']))}"
        for p in parts
    ]
    described = json.loads(
        _cli_ok("topics", "describe", "--rest-url", controller_url, "--topic", "cli-topic", "--json")
    )
    assert described["topic"]["topic_id"] == topic["topic_id"]
    assert [(c["name"], c["source"]) for c in described["configs"]] == [
        ("min.insync.replicas", "STATIC_BROKER_CONFIG"),
        ("retention.ms", "DYNAMIC_TOPIC_CONFIG"),
    ]

    out = _cli_ok(
        "topics",
        "alter",
        "--rest-url",
        controller_url,
        "--topic",
        "cli-topic",
        "--partitions",
        "5",
        "--config",
        "max.message.bytes=300000",
        "--delete-config",
        "retention.ms",
    )
    assert out.strip() == "Altered topic cli-topic."
    assert len(md.partitions(md.controller_ids[1], "cli-topic")) == 5
    assert _config(md, md.controller_ids[1], "cli-topic", "max.message.bytes")["value"] == "300000"
    assert _config(md, md.controller_ids[1], "cli-topic", "retention.ms")["source"] != "DYNAMIC_TOPIC_CONFIG"

    out = _cli_ok("topics", "delete", "--rest-url", broker_url, "--topic", "cli-manual")
    assert out.strip() == "Deleted topic cli-manual."
    assert "cli-manual" not in _cli_ok("topics", "list", "--rest-url", broker_url).split()
    gone = run_pykraft("topics", "delete", "--rest-url", broker_url, "--topic", "cli-manual")
    assert gone.returncode == 1, gone
    assert gone.stderr.strip() == "Error while executing topic command : Topic 'cli-manual' does not exist as expected"

    table = _cli_ok("brokers", "list", "--rest-url", controller_url).splitlines()
    assert table[0].split() == ["ID", "HOST", "PORT", "RACK", "STATE"]
    rows = {int(line.split()[0]): line.split() for line in table[1:]}
    assert sorted(rows) == md.broker_ids
    for k, broker_id in enumerate(md.broker_ids, start=1):
        listener = md.nodes[broker_id].plan.properties["listeners"]
        assert rows[broker_id] == [str(broker_id), "127.0.0.1", listener.rsplit(":", 1)[1], f"rack-{k}", "active"]
    as_json = json.loads(_cli_ok("brokers", "list", "--rest-url", broker_url, "--json"))
    assert [b["broker_id"] for b in as_json] == md.broker_ids
    assert all(b["fenced"] is False for b in as_json)

    unreachable = run_pykraft("topics", "list", "--rest-url", "http://127.0.0.1:1")
    assert unreachable.returncode == 1 and unreachable.stderr.startswith("error: ")


def _controller_segment(md: MetadataCluster) -> Path:
    segments = sorted(md.nodes[md.controller_ids[0]].partition_dir.glob("*.log"))
    assert segments, f"no segment in {md.nodes[md.controller_ids[0]].partition_dir}"
    return segments[0]


def test_log_dump_of_a_controller_segment(md: MetadataCluster) -> None:
    created = md.create_topic(md.broker_ids[1], "dumped-topic", partitions_count=2)
    # Wait until controller 1 has the record in its log (it is on disk before it is applied).
    wait_until("controller 1 to apply dumped-topic", lambda: "dumped-topic" in md.topics(md.controller_ids[0]), 5.0)
    out = _cli_ok("log", "dump", str(_controller_segment(md)))
    lines = out.splitlines()
    assert lines[0] == f"Dumping {_controller_segment(md)}" and lines[1] == "Log starting offset: 0"
    batches = [line for line in lines if line.startswith("baseOffset: ")]
    records = [line for line in lines if line.startswith("| offset: ")]
    assert batches and records
    assert all("isvalid: true" in b and "magic: 2" in b for b in batches)
    assert any("LeaderChange: " in r for r in records)  # the first batch of every epoch
    payloads = [json.loads(r.split(" payload: ", 1)[1]) for r in records if " payload: " in r]
    types = {p["type"] for p in payloads}
    assert {"TOPIC_RECORD", "PARTITION_RECORD", "REGISTER_BROKER_RECORD", "FEATURE_LEVEL_RECORD"} <= types, types
    topic_records = [p for p in payloads if p["type"] == "TOPIC_RECORD"]
    mine = [p for p in topic_records if p["data"]["name"] == "dumped-topic"]
    assert len(mine) == 1, topic_records
    assert mine[0]["data"]["topicId"] == created["topic_id"]
    # Batch offsets are contiguous.
    spans = [
        (int(m.group(1)), int(m.group(2)))
        for b in batches
        if (m := re.match(r"baseOffset: (\d+) lastOffset: (\d+)", b))
    ]
    for (_, last), (base, _) in zip(spans, spans[1:], strict=False):
        assert base == last + 1, spans


def test_log_dump_create_time_is_wall_clock(md: MetadataCluster) -> None:
    md.create_topic(md.broker_ids[2], "stamped-topic")
    wait_until("controller 1 to apply stamped-topic", lambda: "stamped-topic" in md.topics(md.controller_ids[0]), 5.0)
    lines = _cli_ok("log", "dump", str(_controller_segment(md))).splitlines()
    record = next(line for line in lines if '"name":"stamped-topic"' in line)
    create_time = int(re.search(r"CreateTime: (-?\d+)", record).group(1))  # type: ignore[union-attr]
    now_ms = time.time() * 1000
    known_bug(
        abs(create_time - now_ms) < 3_600_000,
        f"CreateTime {create_time} of the TOPIC_RECORD batch vs wall clock {now_ms:.0f} ms: {record}",
    )
