"""The group coordinator's broker configs: Kafka's names and defaults, parsed and refused
as every other NodeConfig key is (a ConfigError naming the key)."""

from __future__ import annotations

import pytest

from quorum.node.config import ConfigError, NodeConfig, config_from_properties

VOTERS = "1@127.0.0.1:19091,2@127.0.0.1:19092,3@127.0.0.1:19093"


def broker(**overrides: str) -> dict[str, str]:
    props = {
        "process.roles": "broker",
        "node.id": "101",
        "controller.quorum.voters": VOTERS,
        "listeners": "PLAINTEXT://127.0.0.1:9092",
        "log.dirs": "/data/b1",
    }
    props.update(overrides)
    return props


def error(props: dict[str, str]) -> str:
    with pytest.raises(ConfigError) as info:
        config_from_properties(props)
    return str(info.value)


# Kafka's defaults (GroupCoordinatorConfig; the two lists as in Kafka 4.0).
DEFAULTS = {
    "offsets_topic_num_partitions": 50,
    "offsets_topic_replication_factor": 3,
    "offsets_topic_segment_bytes": 104_857_600,
    "offsets_retention_minutes": 10_080,
    "offsets_retention_check_interval_ms": 600_000,
    "offsets_commit_timeout_ms": 5000,
    "offsets_load_buffer_size": 5_242_880,
    "group_initial_rebalance_delay_ms": 3000,
    "group_min_session_timeout_ms": 6000,
    "group_max_session_timeout_ms": 1_800_000,
    "group_max_size": 2_147_483_647,
    "group_consumer_heartbeat_interval_ms": 5000,
    "group_consumer_session_timeout_ms": 45_000,
    "group_consumer_assignors": ("uniform", "range"),
    "group_coordinator_rebalance_protocols": ("classic", "consumer"),
}


def test_defaults() -> None:
    c = config_from_properties(broker())
    assert {name: getattr(c, name) for name in DEFAULTS} == DEFAULTS
    assert c.offsets_retention_ms == 7 * 24 * 3600 * 1000
    assert not {k for k in c.extra if k.startswith(("offsets.", "group."))}


@pytest.mark.parametrize(
    ("key", "text", "value"),
    [
        ("offsets.topic.num.partitions", "3", 3),
        ("offsets.topic.replication.factor", " 1 ", 1),
        ("offsets.topic.segment.bytes", "1048576", 1_048_576),
        ("offsets.retention.minutes", "1", 1),
        ("offsets.retention.check.interval.ms", "86400000000", 86_400_000_000),  # a Java long
        ("offsets.commit.timeout.ms", "100", 100),
        ("offsets.load.buffer.size", "65536", 65_536),
        ("group.initial.rebalance.delay.ms", "0", 0),
        ("group.min.session.timeout.ms", "100", 100),
        ("group.max.session.timeout.ms", "60000", 60_000),
        ("group.max.size", "300", 300),
        ("group.consumer.heartbeat.interval.ms", "500", 500),
        ("group.consumer.session.timeout.ms", "6000", 6000),
        ("group.consumer.assignors", "range", ("range",)),
        ("group.consumer.assignors", " range , uniform ", ("range", "uniform")),
        (
            "group.consumer.assignors",
            "org.apache.kafka.coordinator.group.assignor.UniformAssignor",
            ("uniform",),
        ),
        ("group.coordinator.rebalance.protocols", "classic", ("classic",)),
        ("group.coordinator.rebalance.protocols", "CONSUMER,Classic", ("consumer", "classic")),
    ],
)
def test_each_key_parses(key: str, text: str, value: object) -> None:
    c = config_from_properties(broker(**{key: text}))
    assert getattr(c, key.replace(".", "_")) == value
    assert key not in c.extra


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"offsets.topic.num.partitions": "0"}, "offsets.topic.num.partitions: 0 is below the minimum 1"),
        ({"offsets.topic.num.partitions": "fifty"}, "offsets.topic.num.partitions: 'fifty' is not an integer"),
        ({"offsets.topic.replication.factor": "0"}, "offsets.topic.replication.factor: 0 is below the minimum 1"),
        ({"offsets.topic.replication.factor": "32768"}, "offsets.topic.replication.factor: 32768 is above"),
        ({"offsets.topic.segment.bytes": "0"}, "offsets.topic.segment.bytes: 0 is below the minimum 1"),
        ({"offsets.topic.segment.bytes": "2147483648"}, "offsets.topic.segment.bytes: 2147483648 is above"),
        ({"offsets.retention.minutes": "0"}, "offsets.retention.minutes: 0 is below the minimum 1"),
        ({"offsets.retention.minutes": "1.5"}, "offsets.retention.minutes: '1.5' is not an integer"),
        (
            {"offsets.retention.check.interval.ms": "0"},
            "offsets.retention.check.interval.ms: 0 is below the minimum 1",
        ),
        ({"offsets.commit.timeout.ms": "0"}, "offsets.commit.timeout.ms: 0 is below the minimum 1"),
        ({"offsets.load.buffer.size": "0"}, "offsets.load.buffer.size: 0 is below the minimum 1"),
        ({"group.initial.rebalance.delay.ms": "-1"}, "group.initial.rebalance.delay.ms: -1 is below the minimum 0"),
        ({"group.min.session.timeout.ms": "-5"}, "group.min.session.timeout.ms: -5 is below the minimum 0"),
        ({"group.max.session.timeout.ms": "x"}, "group.max.session.timeout.ms: 'x' is not an integer"),
        ({"group.max.size": "0"}, "group.max.size: 0 is below the minimum 1"),
        ({"group.max.size": "2147483648"}, "group.max.size: 2147483648 is above the maximum 2147483647"),
        (
            {"group.consumer.heartbeat.interval.ms": "0"},
            "group.consumer.heartbeat.interval.ms: 0 is below the minimum 1",
        ),
        ({"group.consumer.session.timeout.ms": ""}, "group.consumer.session.timeout.ms: '' is not an integer"),
        (
            {"group.min.session.timeout.ms": "10000", "group.max.session.timeout.ms": "9999"},
            "group.min.session.timeout.ms: 10000 must be at most group.max.session.timeout.ms (9999)",
        ),
        (
            {"group.consumer.heartbeat.interval.ms": "45000"},
            "group.consumer.heartbeat.interval.ms: 45000 must be less than group.consumer.session.timeout.ms (45000)",
        ),
        ({"group.consumer.assignors": ""}, "group.consumer.assignors must not be empty"),
        ({"group.consumer.assignors": "uniform,sticky"}, "group.consumer.assignors: unknown assignor 'sticky'"),
        ({"group.consumer.assignors": "range,range"}, "group.consumer.assignors: range appears more than once"),
        (
            {"group.coordinator.rebalance.protocols": "classic,share"},
            "group.coordinator.rebalance.protocols: unknown protocol 'share'",
        ),
        (
            {"group.coordinator.rebalance.protocols": "consumer"},
            "group.coordinator.rebalance.protocols: disabling the 'classic' protocol is not supported",
        ),
        (
            {"group.coordinator.rebalance.protocols": " "},
            "group.coordinator.rebalance.protocols: disabling the 'classic' protocol is not supported",
        ),
    ],
)
def test_bad_values_are_refused(overrides: dict[str, str], expected: str) -> None:
    assert expected in error(broker(**overrides))


def test_fields_match_the_dataclass_defaults() -> None:
    """A NodeConfig built in code (tests, the cluster launcher) has the same defaults."""
    c = NodeConfig(process_roles=frozenset({"broker"}), node_id=1, controller_quorum_voters={})
    assert {name: getattr(c, name) for name in DEFAULTS} == DEFAULTS
