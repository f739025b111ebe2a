"""The consumer-group tools on a real 3+3 cluster with real consumers (confluent-kafka):
``pykraft consumer-groups`` (describe, list, reset-offsets, delete), ``pykraft
console-consumer --group``, and the REST API's consumer-group resources.

One cluster for the module (``__consumer_offsets`` with 3 partitions and no initial
rebalance delay, so that groups form in a second); each test uses its own topic and groups.
What the tools say is checked against what the group's consumers did and what a consumer
then reads.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import pytest
from dataplane_support import bootstrap, create_topic, module_cluster
from metadata_cluster import MetadataCluster, run_pykraft

pytestmark = pytest.mark.integration

cluster = module_cluster("group-tools", {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "3"})

T0 = 1_700_000_000_000  # the timestamp of each test topic's first record (ms)


def produce(c: MetadataCluster, topic: str, per_partition: int, partitions: int) -> None:
    """`per_partition` records into each partition; record i of a partition has value
    ``p<partition>-<i>`` and timestamp T0 + i s."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap(c), "acks": "all", "linger.ms": 5})
    failures: list[Any] = []
    for p in range(partitions):
        for i in range(per_partition):
            producer.produce(topic, value=f"p{p}-{i}".encode(), partition=p, timestamp=T0 + i * 1000,
                             on_delivery=lambda err, _m: err is not None and failures.append(err))  # fmt: skip
    assert producer.flush(30) == 0 and not failures, failures


class GroupMember:
    """A consumer in a group, and the values it read while it waited for its partitions."""

    def __init__(self, consumer: Any) -> None:
        self.consumer = consumer
        self.read: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.consumer, name)


@contextmanager
def member(c: MetadataCluster, group: str, topic: str, client_id: str = "tools-test") -> Iterator[GroupMember]:
    """A live member of `group` subscribed to `topic` that has its partitions (and commits nothing
    by itself)."""
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap(c),
            "group.id": group,
            "client.id": client_id,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    joined = GroupMember(consumer)
    try:
        deadline = time.monotonic() + 30
        while not consumer.assignment():
            assert time.monotonic() < deadline, f"group {group} gave no partitions"
            m = consumer.poll(0.2)
            if m is not None and m.error() is None:
                joined.read.append(m.value().decode())
        yield joined
    finally:
        consumer.close()


def consume(consumer: Any, count: int, timeout: float = 30) -> list[str]:
    values: list[str] = consumer.read[:count] if isinstance(consumer, GroupMember) else []
    if isinstance(consumer, GroupMember):
        del consumer.read[: len(values)]
    deadline = time.monotonic() + timeout
    while len(values) < count and time.monotonic() < deadline:
        for m in consumer.consume(num_messages=count - len(values), timeout=0.5):
            if m.error() is None:
                values.append(m.value().decode())
    return values


def committed(c: MetadataCluster, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets, as a plain consumer of the group reads them (OffsetFetch)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap(c), "group.id": group, "enable.auto.commit": False})
    try:
        answer = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=15)
        return {tp.partition: tp.offset for tp in answer if tp.offset >= 0}
    finally:
        consumer.close()


def groups_cli(c: MetadataCluster, *args: str) -> Any:
    return run_pykraft("consumer-groups", "--bootstrap-server", bootstrap(c), "--timeout", "30000", *args)


def table(stdout: str) -> list[list[str]]:
    """The rows of one of the tool's tables, each split into its columns (header first)."""
    return [line.split() for line in stdout.splitlines() if line.strip()]


# ---------------------------------------------------------------- describe, and REST, on a live group


def test_describe_and_rest_show_the_lag_of_a_live_group(cluster: MetadataCluster) -> None:
    from confluent_kafka import TopicPartition

    c = cluster
    create_topic(c, "lagged", partitions=3)
    produce(c, "lagged", per_partition=10, partitions=3)
    with member(c, "half", "lagged", client_id="half-client") as consumer:
        assert len(consume(consumer, 12)) == 12
        # The group read part of the topic: it commits 7 of p0 and 3 of p1, nothing of p2.
        consumer.commit(offsets=[TopicPartition("lagged", 0, 7), TopicPartition("lagged", 1, 3)], asynchronous=False)
        member_id = consumer.memberid()

        proc = groups_cli(c, "--describe", "--group", "half")
        assert proc.returncode == 0 and proc.stderr == "", proc.stderr
        rows = table(proc.stdout)
        assert rows[0] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                           "CONSUMER-ID", "HOST", "CLIENT-ID"]  # fmt: skip
        assert rows[1:] == [
            ["half", "lagged", "0", "7", "10", "3", member_id, "/127.0.0.1", "half-client"],
            ["half", "lagged", "1", "3", "10", "7", member_id, "/127.0.0.1", "half-client"],
            ["half", "lagged", "2", "-", "10", "-", member_id, "/127.0.0.1", "half-client"],
        ]

        members = groups_cli(c, "--describe", "--group", "half", "--members", "--verbose")
        assert table(members.stdout) == [
            ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"],
            ["half", member_id, "/127.0.0.1", "half-client", "3", "lagged(0,1,2)"],
        ]
        state = table(groups_cli(c, "--describe", "--group", "half", "--state").stdout)
        assert state[0] == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]
        assert state[1][0] == "half" and state[1][3:] == ["range", "Stable", "1"]
        assert state[1][2] in {f"({b})" for b in c.broker_ids}

        # Offsets of an active group are not reset (Kafka's rule), and nothing changes.
        refused = groups_cli(c, "--reset-offsets", "--group", "half", "--all-topics", "--to-earliest", "--execute")
        assert refused.returncode == 1
        assert (
            "\nError: Assignments can only be reset if the group 'half' is inactive, but the current state is Stable.\n"
            in refused.stdout
        )
        assert committed(c, "half", "lagged", 3) == {0: 7, 1: 3}
        # Nor are the offsets of a topic its members subscribe to deleted.
        subscribed = groups_cli(c, "--delete-offsets", "--group", "half", "--topic", "lagged:0")
        assert subscribed.returncode == 1
        assert table(subscribed.stdout) == [
            ["Error:", "Encounter", "some", "partition", "level", "error,", "see", "the", "follow-up", "details:"],
            ["TOPIC", "PARTITION", "STATUS"],
            ["lagged", "0", *"Error: :Deleting offsets of a topic is forbidden while the consumer group is "
             "actively subscribed to it.".split()],
        ]  # fmt: skip
        assert committed(c, "half", "lagged", 3) == {0: 7, 1: 3}

        rest_checks(c, member_id)


def rest_checks(c: MetadataCluster, member_id: str) -> None:
    """Every consumer-group route of a broker's and a controller's REST API for the live group
    "half" (p0 committed at 7, p1 at 3, of 10 records each), and 404 for unknown ones."""
    for node in (c.broker_ids[1], c.controller_ids[0]):
        base = c.url(node)
        group_url = f"{base}/consumer-groups/half"

        listed = c.get_json(node, "/consumer-groups")
        assert listed["kind"] == "KafkaConsumerGroupList"
        half = next(g for g in listed["data"] if g["consumer_group_id"] == "half")
        one = c.get_json(node, "/consumer-groups/half")
        assert half == one
        assert one["kind"] == "KafkaConsumerGroup" and one["metadata"]["self"] == group_url
        assert one["metadata"]["resource_name"] == f"crn:///kafka={c.cluster_id}/consumer-group=half"
        assert (one["state"], one["type"], one["is_simple"], one["partition_assignor"]) == (
            "STABLE",
            "CLASSIC",
            False,
            "range",
        )
        assert one["consumers"] == {"related": f"{group_url}/consumers"}
        assert one["lag_summary"] == {"related": f"{group_url}/lag-summary"}
        assert one["coordinator"]["related"].rsplit("/", 1)[1] in {str(b) for b in c.broker_ids}

        consumers = c.get_json(node, "/consumer-groups/half/consumers")
        assert [(x["consumer_id"], x["client_id"], x["instance_id"]) for x in consumers["data"]] == [
            (member_id, "half-client", None)
        ]
        consumer = c.get_json(node, f"/consumer-groups/half/consumers/{member_id}")
        assert consumer == consumers["data"][0] and consumer["kind"] == "KafkaConsumer"
        assignments = c.http.get(consumer["assignments"]["related"]).json()
        assert [(a["topic_name"], a["partition_id"]) for a in assignments["data"]] == [("lagged", p) for p in range(3)]

        lags = c.get_json(node, "/consumer-groups/half/lags")
        assert lags["kind"] == "KafkaConsumerLagList"
        fields = ("partition_id", "current_offset", "log_end_offset", "lag", "consumer_id", "client_id")
        assert [tuple(x[f] for f in fields) for x in lags["data"]] == [
            (1, 3, 10, 7, member_id, "half-client"),
            (0, 7, 10, 3, member_id, "half-client"),
        ]
        lag = c.get_json(node, "/consumer-groups/half/lags/lagged/partitions/0")
        assert lag == lags["data"][1] and lag["kind"] == "KafkaConsumerLag"

        summary = c.get_json(node, "/consumer-groups/half/lag-summary")
        assert summary["kind"] == "KafkaConsumerGroupLagSummary"
        fields = ("max_lag", "total_lag", "max_lag_topic_name", "max_lag_partition_id", "max_lag_consumer_id")
        assert tuple(summary[f] for f in fields) == (7, 10, "lagged", 1, member_id)
        assert summary["max_lag_client_id"] == "half-client"

        for path in (
            "/consumer-groups/no-such-group",
            "/consumer-groups/no-such-group/consumers",
            f"/consumer-groups/no-such-group/consumers/{member_id}",
            "/consumer-groups/no-such-group/lags",
            "/consumer-groups/no-such-group/lags/lagged/partitions/0",
            "/consumer-groups/no-such-group/lag-summary",
            "/consumer-groups/half/consumers/no-such-member",
            "/consumer-groups/half/lags/lagged/partitions/2",  # nothing committed there
        ):
            r = c.get(node, path)
            assert r.status_code == 404, (path, r.text)
            assert r.json()["error_code"] == 404 and r.json()["message"], (path, r.text)


# ---------------------------------------------------------------- reset-offsets


def test_reset_to_earliest_makes_an_inactive_group_read_everything_again(cluster: MetadataCluster) -> None:
    c = cluster
    create_topic(c, "reread", partitions=3)
    produce(c, "reread", per_partition=10, partitions=3)
    with member(c, "rr", "reread") as consumer:
        first = consume(consumer, 30)
        consumer.commit(asynchronous=False)
    assert sorted(first) == sorted(f"p{p}-{i}" for p in range(3) for i in range(10))
    assert committed(c, "rr", "reread", 3) == {0: 10, 1: 10, 2: 10}

    dry = groups_cli(c, "--reset-offsets", "--group", "rr", "--all-topics", "--to-earliest", "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert table(dry.stdout) == [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]] + [
        ["rr", "reread", str(p), "0"] for p in range(3)
    ]
    assert committed(c, "rr", "reread", 3) == {0: 10, 1: 10, 2: 10}  # a dry run changes nothing

    done = groups_cli(c, "--reset-offsets", "--group", "rr", "--all-topics", "--to-earliest", "--execute")
    assert done.returncode == 0 and table(done.stdout) == table(dry.stdout), done.stdout + done.stderr
    # A consumer of the group that would start at the end (auto.offset.reset=latest) reads all again.
    from confluent_kafka import Consumer

    again = Consumer({"bootstrap.servers": bootstrap(c), "group.id": "rr", "auto.offset.reset": "latest",
                      "enable.auto.commit": False})  # fmt: skip
    again.subscribe(["reread"])
    try:
        second = consume(again, 30)
    finally:
        again.close()
    assert sorted(second) == sorted(first)


def test_reset_to_offset_shift_by_and_to_datetime_set_what_they_say(cluster: MetadataCluster) -> None:
    c = cluster
    create_topic(c, "moves", partitions=2)
    produce(c, "moves", per_partition=10, partitions=2)
    with member(c, "mv", "moves") as consumer:
        consume(consumer, 20)  # the group exists and goes Empty when it leaves

    def reset(*scenario: str, scope: tuple[str, ...] = ("--topic", "moves")) -> Any:
        proc = groups_cli(c, "--reset-offsets", "--group", "mv", *scope, *scenario, "--execute")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc

    reset("--to-offset", "4")
    assert committed(c, "mv", "moves", 2) == {0: 4, 1: 4}
    reset("--shift-by", "-3", scope=("--topic", "moves:1"))
    assert committed(c, "mv", "moves", 2) == {0: 4, 1: 1}
    reset("--shift-by", "2")
    assert committed(c, "mv", "moves", 2) == {0: 6, 1: 3}
    past = reset("--shift-by", "100", scope=("--topic", "moves:0"))  # beyond the log end: moved to it
    assert committed(c, "mv", "moves", 2) == {0: 10, 1: 3}
    assert (
        "New offset (106) is higher than latest offset for topic partition moves-0. Value will be set to 10"
        in past.stderr
    )
    # Record i has timestamp T0 + i s: the first at or after T0 + 5.5 s is offset 6.
    when = datetime.fromtimestamp((T0 + 5500) / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]
    reset("--to-datetime", when)
    assert committed(c, "mv", "moves", 2) == {0: 6, 1: 6}
    reset("--to-datetime", when + "+01:00")  # an hour earlier than that: every record is after it
    assert committed(c, "mv", "moves", 2) == {0: 0, 1: 0}
    reset("--to-latest", scope=("--all-topics",))
    assert committed(c, "mv", "moves", 2) == {0: 10, 1: 10}

    deleted = groups_cli(c, "--delete-offsets", "--group", "mv", "--topic", "moves:1")
    assert deleted.returncode == 0, deleted.stdout + deleted.stderr
    assert table(deleted.stdout) == [
        "Request succeed for deleting offsets with topic moves:1 group mv".split(),
        ["TOPIC", "PARTITION", "STATUS"],
        ["moves", "1", "Successful"],
    ]
    assert committed(c, "mv", "moves", 2) == {0: 10}


# ---------------------------------------------------------------- delete, list


def test_delete_removes_an_empty_group_and_refuses_an_active_one(cluster: MetadataCluster) -> None:
    c = cluster
    create_topic(c, "deletable", partitions=1)
    produce(c, "deletable", per_partition=3, partitions=1)
    with member(c, "doomed", "deletable") as consumer:
        consume(consumer, 3)
        consumer.commit(asynchronous=False)
        busy = groups_cli(c, "--delete", "--group", "doomed")
        assert busy.returncode == 1
        assert busy.stdout == (
            "\nError: Deletion of some consumer groups failed:\n"
            "* Group 'doomed' could not be deleted due to: java.util.concurrent.ExecutionException: "
            "org.apache.kafka.common.errors.GroupNotEmptyException: The group is not empty.\n"
        )
        assert "doomed" in groups_cli(c, "--list").stdout.split()

    listed = groups_cli(c, "--list", "--state")
    assert ["doomed", "Empty"] in table(listed.stdout)
    gone = groups_cli(c, "--delete", "--group", "doomed")
    assert (gone.returncode, gone.stdout) == (0, "Deletion of requested consumer groups ('doomed') was successful.\n")
    assert "doomed" not in groups_cli(c, "--list").stdout.split()
    described = groups_cli(c, "--describe", "--group", "doomed")
    assert (described.returncode, described.stdout) == (1, "\nError: Consumer group 'doomed' does not exist.\n")
    assert c.get(c.broker_ids[0], "/consumer-groups/doomed").status_code == 404
    assert committed(c, "doomed", "deletable", 1) == {}


def test_list_shows_the_groups(cluster: MetadataCluster) -> None:
    c = cluster
    create_topic(c, "listed", partitions=1)
    with member(c, "list-a", "listed"), member(c, "list-b", "listed"):
        proc = groups_cli(c, "--list")
        assert proc.returncode == 0
        assert {"list-a", "list-b"} <= set(proc.stdout.split())
        stable = groups_cli(c, "--list", "--state", "stable")
        rows = table(stable.stdout)
        assert rows[0] == ["GROUP", "STATE"] and ["list-a", "Stable"] in rows and ["list-b", "Stable"] in rows
        assert all(r[1] == "Stable" for r in rows[1:])


# ---------------------------------------------------------------- console-consumer --group


def test_console_consumer_group_commits_and_a_second_run_resumes(cluster: MetadataCluster) -> None:
    c = cluster
    create_topic(c, "console", partitions=2)
    produce(c, "console", per_partition=10, partitions=2)
    common = ("console-consumer", "--bootstrap-server", bootstrap(c), "--topic", "console", "--group", "cc")
    first = run_pykraft(*common, "--from-beginning", "--max-messages", "8", "--timeout-ms", "20000")
    assert first.returncode == 0, first.stderr
    got_first = first.stdout.split()
    assert len(got_first) == 8 and "Processed a total of 8 messages" in first.stderr
    assert sum(committed(c, "cc", "console", 2).values()) == 8  # what it printed, committed
    # The second run starts where the first stopped (its --from-beginning applies to
    # partitions without a committed offset only), and reads the rest once.
    second = run_pykraft(*common, "--from-beginning", "--timeout-ms", "5000")
    assert second.returncode == 0, second.stderr
    got_second = second.stdout.split()
    assert sorted(got_first + got_second) == sorted(f"p{p}-{i}" for p in range(2) for i in range(10))
    assert committed(c, "cc", "console", 2) == {0: 10, 1: 10}
    lag = table(groups_cli(c, "--describe", "--group", "cc").stdout)
    assert [r[5] for r in lag[1:]] == ["0", "0"]
