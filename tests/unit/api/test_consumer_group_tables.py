"""What ``pykraft consumer-groups`` prints (kafka-consumer-groups.sh's tables, character for
character) and Kafka's lag rule, on hand-built group descriptions: no cluster needed."""

from __future__ import annotations

from datetime import timedelta

import pytest

from api.consumer_groups import UsageError, parse_datetime, parse_duration, parse_states, parse_topic_partitions
from api.group_admin import TP, Coordinator, GroupAdminError, GroupDescription, GroupListing, Member
from api.group_lag import offset_rows, rest_lag_rows
from api.group_tables import (
    Output,
    delete_table,
    list_table,
    members_table,
    offsets_table,
    reset_plan_table,
    state_table,
)

COORD = Coordinator(5, "127.0.0.1", 9093)
ALICE = Member("alice-1", None, "cli-a", "/127.0.0.1", (TP("orders", 0), TP("orders", 1)))
BOB = Member("bob-1", None, "cli-b", "/127.0.0.2", (TP("orders", 2),))


def group(state: str = "Stable", members: tuple[Member, ...] = (BOB, ALICE), gid: str = "g") -> GroupDescription:
    return GroupDescription(gid, state, False, "range", "classic", COORD, members)


def test_rows_members_with_most_partitions_first_then_unheld_commits() -> None:
    committed = {TP("orders", 0): 4, TP("orders", 2): 9, TP("audit", 0): 3}
    log_end = {TP("orders", 0): 10, TP("orders", 1): 5, TP("orders", 2): 7, TP("audit", 0): 3}
    rows = offset_rows(group(), committed, log_end)
    assert [(r.tp, r.member.member_id if r.member else None) for r in rows] == [
        (TP("orders", 0), "alice-1"),
        (TP("orders", 1), "alice-1"),
        (TP("orders", 2), "bob-1"),
        (TP("audit", 0), None),
    ]
    # Lag = log end - committed; none without a commit; negative past the log end (Kafka's rule).
    assert [r.lag for r in rows] == [6, None, -2, 0]
    # The REST Proxy: only committed partitions, never below 0.
    assert [(r.tp, r.rest_lag) for r in rest_lag_rows(rows)] == [
        (TP("orders", 0), 6),
        (TP("orders", 2), 0),
        (TP("audit", 0), 0),
    ]


def test_offsets_table_is_kafkas() -> None:
    committed = {TP("orders", 0): 4, TP("orders", 2): 9}
    log_end = {TP("orders", 0): 10, TP("orders", 1): 5}
    o = Output()
    offsets_table(o, group(), offset_rows(group(), committed, log_end))
    head = "GROUP           TOPIC           PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG             CONSUMER-ID     HOST            CLIENT-ID"  # noqa: E501
    assert o.stdout == (
        f"\n{head}"
        "\ng               orders          0          4               10              6               alice-1         /127.0.0.1      cli-a"  # noqa: E501
        "\ng               orders          1          -               5               -               alice-1         /127.0.0.1      cli-a"  # noqa: E501
        "\ng               orders          2          9               -               -               bob-1           /127.0.0.2      cli-b"  # noqa: E501
        "\n"
    )
    assert o.stderr == ""


def test_offsets_table_widens_for_long_values_and_notes_an_empty_group() -> None:
    d = group("Empty", members=(), gid="a-rather-long-group-name")
    o = Output()
    offsets_table(o, d, offset_rows(d, {TP("a-long-topic-name-here", 3): 1}, {TP("a-long-topic-name-here", 3): 11}))
    assert o.stderr == "\nConsumer group 'a-rather-long-group-name' has no active members.\n"
    lines = o.stdout.split("\n")
    assert lines[0] == "" and lines[-1] == ""
    assert lines[1].startswith("GROUP                    TOPIC                  PARTITION  CURRENT-OFFSET")
    assert lines[2] == (
        "a-rather-long-group-name a-long-topic-name-here 3          1               11              10              "
        "-               -               -"
    )


def test_group_without_rows_or_unknown() -> None:
    o = Output()
    d = group("Empty", members=())
    offsets_table(o, d, offset_rows(d, {}, {}))
    assert (o.stdout, o.stderr) == ("", "\nConsumer group 'g' has no active members.\n")
    o = Output()
    d = GroupDescription("nope", "Dead", True, "", "classic", COORD, ())
    offsets_table(o, d, [])
    assert (o.stdout, o.stderr) == ("\nError: Consumer group 'nope' does not exist.\n", "")
    o = Output()
    offsets_table(o, group("PreparingRebalance", members=()), [])
    assert o.stderr == "\nWarning: Consumer group 'g' is rebalancing.\n"


def test_members_table_verbose_and_with_instance_ids() -> None:
    o = Output()
    members_table(o, group(), verbose=True)
    assert o.stdout == (
        "\nGROUP           CONSUMER-ID     HOST            CLIENT-ID       #PARTITIONS     ASSIGNMENT\n"
        "g               bob-1           /127.0.0.2      cli-b           1               orders(2)\n"
        "g               alice-1         /127.0.0.1      cli-a           2               orders(0,1)\n"
    )
    static = Member("s-1", "instance-a", "cli-s", "/h", ())
    o = Output()
    members_table(o, group(members=(static,)), verbose=False)
    assert o.stdout == (
        "\nGROUP           CONSUMER-ID     GROUP-INSTANCE-ID HOST            CLIENT-ID       #PARTITIONS     \n"
        "g               s-1             instance-a        /h              cli-s           0               \n"
    )


def test_members_table_of_an_empty_group_prints_the_header() -> None:
    o = Output()
    members_table(o, group("Empty", members=()), verbose=False)
    assert o.stderr == "\nConsumer group 'g' has no active members.\n"
    assert o.stdout == "\nGROUP           CONSUMER-ID     HOST            CLIENT-ID       #PARTITIONS     \n"


def test_state_table() -> None:
    o = Output()
    state_table(o, group())
    assert o.stdout == (
        "\nGROUP                     COORDINATOR (ID)          ASSIGNMENT-STRATEGY  STATE           #MEMBERS"
        "\ng                         127.0.0.1:9093  (5)       range                Stable          2"
        "\n"
    )


def test_list_tables() -> None:
    listings = [GroupListing("g1", "Stable", False), GroupListing("other", "Empty", False)]
    o = Output()
    list_table(o, listings, with_state=False)
    assert o.stdout == "g1\nother\n"
    o = Output()
    list_table(o, listings, with_state=True)
    assert o.stdout == (
        "GROUP                     STATE               \n"
        "g1                        Stable              \n"
        "other                     Empty               \n"
    )


def test_reset_plan_and_refusal_tables() -> None:
    o = Output()
    reset_plan_table(o, {"g": {TP("t", 1): 7, TP("t", 0): 0}})
    assert o.stdout == (
        "\nGROUP                          TOPIC                          PARTITION  NEW-OFFSET     "
        "\ng                              t                              0          0              "
        "\ng                              t                              1          7              "
        "\n"
    )
    o = Output()
    reset_plan_table(o, {"g": {}})  # a refused group: Kafka still prints the header
    assert o.stdout == "\nGROUP                          TOPIC                          PARTITION  NEW-OFFSET     \n"


def test_delete_tables() -> None:
    o = Output()
    delete_table(o, {"a": None, "b": None})
    assert o.stdout == "Deletion of requested consumer groups ('a, b') was successful.\n"
    o = Output()
    delete_table(o, {"busy": GroupAdminError(68, "The group is not empty.")})
    assert o.stdout == (
        "\nError: Deletion of some consumer groups failed:\n"
        "* Group 'busy' could not be deleted due to: java.util.concurrent.ExecutionException: "
        "org.apache.kafka.common.errors.GroupNotEmptyException: The group is not empty.\n"
    )


def test_option_values() -> None:
    assert parse_datetime("2024-01-02T03:04:05.678") == 1704164645678
    assert parse_datetime("2024-01-02T03:04:05.678+01:00") == 1704164645678 - 3_600_000
    assert parse_datetime("2024-01-02T03:04:05.678Z") == 1704164645678
    assert parse_duration("PT1H30M") == timedelta(hours=1, minutes=30)
    assert parse_duration("P1DT0.5S") == timedelta(days=1, seconds=0.5)
    assert parse_topic_partitions("t:0,2") == [TP("t", 0), TP("t", 2)]
    assert parse_states("stable,EMPTY") == ["Stable", "Empty"]
    for bad in (lambda: parse_datetime("2024-01-02 03:04:05"), lambda: parse_duration("1h"),
                lambda: parse_topic_partitions("t:x"), lambda: parse_states("sleepy")):  # fmt: skip
        with pytest.raises(UsageError):
            bad()
