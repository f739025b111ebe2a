"""NodeConfig: Kafka's names and defaults, and a clear error for every bad value."""

from __future__ import annotations

from pathlib import Path

import pytest

from quorum.node.config import (
    ConfigError,
    HostPort,
    Listener,
    NodeConfig,
    config_from_properties,
    load_config,
    parse_listeners,
    parse_properties,
    parse_voters,
)

REPO = Path(__file__).resolve().parents[3]

VOTERS = "1@127.0.0.1:19091,2@127.0.0.1:19092,3@127.0.0.1:19093"


def controller_props(**overrides: str) -> dict[str, str]:
    props = {
        "process.roles": "controller",
        "node.id": "1",
        "controller.quorum.voters": VOTERS,
        "listeners": "CONTROLLER://127.0.0.1:19091",
        "log.dirs": "/data/c1",
    }
    props.update({k.replace("_", "."): v for k, v in overrides.items()})
    return props


def broker_props(**overrides: str) -> dict[str, str]:
    props = {
        "process.roles": "broker",
        "node.id": "101",
        "controller.quorum.voters": VOTERS,
        "listeners": "PLAINTEXT://127.0.0.1:9092",
        "log.dirs": "/data/b1",
    }
    props.update(overrides)
    return props


# ----------------------------------------------------------------------------- defaults


def test_controller_config_and_kafka_defaults() -> None:
    c = config_from_properties(controller_props())
    assert c.process_roles == frozenset({"controller"})
    assert c.is_controller and not c.is_broker
    assert c.node_id == 1
    assert c.controller_quorum_voters == {
        1: HostPort("127.0.0.1", 19091),
        2: HostPort("127.0.0.1", 19092),
        3: HostPort("127.0.0.1", 19093),
    }
    assert c.listeners == (Listener("CONTROLLER", "127.0.0.1", 19091),)
    assert c.controller_listeners == c.listeners
    assert c.controller_listener_names == ("CONTROLLER",)
    assert c.log_dirs == ("/data/c1",)
    assert c.metadata_log_dir == "/data/c1"  # defaults to the first log dir
    assert c.all_log_dirs == ("/data/c1",)
    # Kafka's defaults (QuorumConfig, KRaftConfigs, ReplicationConfigs, ...).
    assert c.controller_quorum_election_timeout_ms == 1000
    assert c.controller_quorum_fetch_timeout_ms == 2000
    assert c.controller_quorum_election_backoff_max_ms == 1000
    assert c.controller_quorum_request_timeout_ms == 2000
    assert c.controller_quorum_retry_backoff_ms == 20
    assert c.controller_quorum_append_linger_ms == 25
    assert c.metadata_log_segment_bytes == 1024**3
    assert c.metadata_log_max_record_bytes_between_snapshots == 20971520
    assert c.metadata_log_max_snapshot_interval_ms == 3600000
    assert c.metadata_max_idle_interval_ms == 500
    assert c.broker_heartbeat_interval_ms == 2000
    assert c.broker_session_timeout_ms == 9000
    assert c.replica_lag_time_max_ms == 30000
    assert c.num_partitions == 1
    assert c.default_replication_factor == 1
    assert c.min_insync_replicas == 1
    assert c.unclean_leader_election_enable is False
    assert c.log_retention_ms == 604800000
    assert c.auto_leader_rebalance_enable is True
    assert c.leader_imbalance_check_interval_seconds == 300
    assert c.leader_imbalance_per_broker_percentage == 10
    assert c.broker_rack is None
    assert c.rest_listener is None and c.rest_address is None
    assert c.cluster_id is None
    assert c.extra == {}


def test_dataclass_defaults_match_parsed_defaults() -> None:
    parsed = config_from_properties(controller_props())
    built = NodeConfig(
        process_roles=parsed.process_roles,
        node_id=parsed.node_id,
        controller_quorum_voters=parsed.controller_quorum_voters,
        listeners=parsed.listeners,
        log_dirs=parsed.log_dirs,
        metadata_log_dir=parsed.metadata_log_dir,
    )
    assert built == parsed


def test_overrides_and_extra_keys() -> None:
    c = config_from_properties(
        controller_props(
            **{
                "controller.quorum.election.timeout.ms": " 1500 ",
                "controller.quorum.fetch.timeout.ms": "3000",
                "metadata.log.dir": "/meta",
                "log.dirs": "/a, /b",
                "unclean.leader.election.enable": "TRUE",
                "auto.leader.rebalance.enable": "false",
                "rest.listener": "http://127.0.0.1:18081/",
                "broker.rack": "rack-a",
                "cluster.id": "MkU3OEVBNTcwNTJENDM2Qg",
                "some.unknown.key": "kept",
            }
        )
    )
    assert c.controller_quorum_election_timeout_ms == 1500
    assert c.controller_quorum_fetch_timeout_ms == 3000
    assert c.metadata_log_dir == "/meta"
    assert c.log_dirs == ("/a", "/b")
    assert c.all_log_dirs == ("/a", "/b", "/meta")
    assert c.unclean_leader_election_enable is True
    assert c.auto_leader_rebalance_enable is False
    assert c.rest_listener == "http://127.0.0.1:18081"
    assert c.rest_address == HostPort("127.0.0.1", 18081)
    assert c.broker_rack == "rack-a"
    assert c.cluster_id == "MkU3OEVBNTcwNTJENDM2Qg"
    assert c.extra == {"some.unknown.key": "kept"}


def test_log_dir_singular_and_kafka_default() -> None:
    props = controller_props()
    del props["log.dirs"]
    assert config_from_properties(props).log_dirs == ("/tmp/kafka-logs",)
    props["log.dir"] = "/single"
    assert config_from_properties(props).log_dirs == ("/single",)
    props["log.dirs"] = "/plural"  # log.dirs wins over log.dir
    assert config_from_properties(props).log_dirs == ("/plural",)


@pytest.mark.parametrize(
    ("key", "value", "expected_ms"),
    [
        ("log.retention.ms", "1000", 1000),
        ("log.retention.minutes", "2", 120_000),
        ("log.retention.hours", "1", 3_600_000),
        ("log.retention.ms", "-1", -1),
    ],
)
def test_log_retention_units(key: str, value: str, expected_ms: int) -> None:
    assert config_from_properties(broker_props(**{key: value})).log_retention_ms == expected_ms


def test_log_retention_ms_wins_over_hours() -> None:
    c = config_from_properties(broker_props(**{"log.retention.hours": "1", "log.retention.ms": "5"}))
    assert c.log_retention_ms == 5


def test_broker_config() -> None:
    c = config_from_properties(
        broker_props(**{"advertised.listeners": "PLAINTEXT://localhost:9092", "broker.rack": "r1"})
    )
    assert c.is_broker and not c.is_controller
    assert c.effective_advertised_listeners == (Listener("PLAINTEXT", "localhost", 9092),)
    assert c.controller_listeners == ()
    assert c.broker_rack == "r1"


def test_combined_roles() -> None:
    c = config_from_properties(
        controller_props(
            **{
                "process.roles": "broker,controller",
                "listeners": "PLAINTEXT://:9092,CONTROLLER://127.0.0.1:19091",
            }
        )
    )
    assert c.process_roles == frozenset({"broker", "controller"})
    assert c.controller_listeners == (Listener("CONTROLLER", "127.0.0.1", 19091),)
    assert c.effective_advertised_listeners == c.listeners


def test_deploy_local_configs_load() -> None:
    for i in (1, 2, 3):
        c = load_config(REPO / "deploy" / "local" / f"controller-{i}.properties")
        assert c.node_id == i
        assert c.is_controller
        assert c.listeners == (Listener("CONTROLLER", "127.0.0.1", 19090 + i),)
        assert sorted(c.controller_quorum_voters) == [1, 2, 3]
        assert c.rest_address == HostPort("127.0.0.1", 18080 + i)
        assert c.extra == {}


def test_load_config_file(tmp_path: Path) -> None:
    f = tmp_path / "c.properties"
    f.write_text(
        "process.roles = controller\nnode.id: 2\ncontroller.quorum.voters " + VOTERS + "\n"
        "listeners=CONTROLLER://127.0.0.1:19092\n"
    )
    c = load_config(f)
    assert c.node_id == 2
    assert load_config(f, overrides={"node.id": "3", "listeners": "CONTROLLER://127.0.0.1:1"}).node_id == 3


def test_load_config_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.properties")


def test_load_config_error_names_the_file(tmp_path: Path) -> None:
    f = tmp_path / "bad.properties"
    f.write_text("process.roles=controller\n")
    with pytest.raises(ConfigError, match=r"bad\.properties: node\.id is required"):
        load_config(f)


# ----------------------------------------------------------------------------- voters and listeners


def test_parse_voters() -> None:
    assert parse_voters(" 1@a:1 , 2@b.example:65535,3@[::1]:9093") == {
        1: HostPort("a", 1),
        2: HostPort("b.example", 65535),
        3: HostPort("::1", 9093),
    }
    assert str(HostPort("::1", 9093)) == "[::1]:9093"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("1@a:1,,2@b:2", "empty entry"),
        ("1-a:1", "id@host:port"),
        ("x@a:1", "voter id 'x'"),
        ("-1@a:1", "negative"),
        ("1@a:1,1@b:2", "more than once"),
        ("1@a", "host:port"),
        ("1@:1", "missing host"),
        ("1@a:port", "not an integer"),
        ("1@a:70000", "out of range"),
        ("1@a:0", "port 0"),
        ("1@::1:9093", "brackets"),
        ("1@[zz]:1", "IPv6"),
    ],
)
def test_bad_voters(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=f"controller.quorum.voters.*{message}"):
        parse_voters(text)


def test_parse_listeners() -> None:
    assert parse_listeners("controller://127.0.0.1:1, PLAINTEXT://:9092,EXTERNAL://[::1]:9094") == (
        Listener("CONTROLLER", "127.0.0.1", 1),
        Listener("PLAINTEXT", "", 9092),
        Listener("EXTERNAL", "::1", 9094),
    )
    assert str(Listener("CONTROLLER", "127.0.0.1", 1)) == "CONTROLLER://127.0.0.1:1"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("127.0.0.1:9092", "NAME://host:port"),
        ("PLAINTEXT://h:99999", "out of range"),
        ("PLAINTEXT://h:-1", "out of range"),
        ("PLAINTEXT://h:x", "not an integer"),
        ("PLAINTEXT://h:1,PLAINTEXT://h:2", "more than once"),
        ("PLAIN TEXT://h:1", "invalid listener name"),
    ],
)
def test_bad_listeners(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=f"listeners.*{message}"):
        parse_listeners(text)


# ----------------------------------------------------------------------------- validation errors


def _error(props: dict[str, str]) -> str:
    with pytest.raises(ConfigError) as info:
        config_from_properties(props)
    return str(info.value)


def test_missing_node_id() -> None:
    props = controller_props()
    del props["node.id"]
    assert "node.id is required" in _error(props)


def test_missing_process_roles() -> None:
    props = controller_props()
    del props["process.roles"]
    assert "process.roles is required" in _error(props)


def test_missing_voters() -> None:
    props = controller_props()
    del props["controller.quorum.voters"]
    assert "controller.quorum.voters is required" in _error(props)


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"process.roles": "zookeeper"}, "process.roles: unknown role 'zookeeper'"),
        ({"process.roles": "controller,controller"}, "process.roles: duplicate role"),
        ({"node.id": "one"}, "node.id: 'one' is not an integer"),
        ({"node.id": "-1"}, "node.id: -1 is below the minimum 0"),
        ({"node.id": "7"}, "node.id 7 has the controller role but is not one of the voters [1, 2, 3]"),
        ({"controller.quorum.voters": "1@127.0.0.1"}, "controller.quorum.voters: expected host:port"),
        ({"listeners": "CONTROLLER://127.0.0.1:65536"}, "listeners: port 65536 out of range"),
        (
            {"listeners": "PLAINTEXT://127.0.0.1:9092"},
            "a controller needs a listener named in controller.listener.names",
        ),
        ({"listeners": ""}, "listeners is empty"),
        ({"controller.listener.names": " , "}, "controller.listener.names must not be empty"),
        ({"listeners": "SSL://h:1", "controller.listener.names": "SSL"}, "pykraft supports only PLAINTEXT"),
        ({"listeners": "WEIRD://h:1", "controller.listener.names": "WEIRD"}, "no security protocol for listener"),
        (
            {"controller.quorum.election.timeout.ms": "1s"},
            "controller.quorum.election.timeout.ms: '1s' is not an integer",
        ),
        ({"controller.quorum.fetch.timeout.ms": "0"}, "controller.quorum.fetch.timeout.ms: 0 is below the minimum 1"),
        ({"metadata.log.segment.bytes": "0"}, "metadata.log.segment.bytes: 0 is below the minimum 1"),
        ({"min.insync.replicas": "0"}, "min.insync.replicas: 0 is below the minimum 1"),
        ({"num.partitions": "many"}, "num.partitions: 'many' is not an integer"),
        ({"leader.imbalance.per.broker.percentage": "101"}, "leader.imbalance.per.broker.percentage: 101 is above"),
        ({"unclean.leader.election.enable": "yes"}, "unclean.leader.election.enable: 'yes' is not a boolean"),
        ({"log.retention.hours": "x"}, "log.retention.hours: 'x' is not an integer"),
        ({"log.dirs": " , "}, "log.dirs is empty"),
        ({"log.dirs": "/a,/a"}, "log.dirs: a directory appears more than once"),
        ({"rest.listener": "127.0.0.1:18081"}, "rest.listener: expected http://host:port"),
        ({"rest.listener": "http://127.0.0.1:99999"}, "rest.listener: invalid or out-of-range port"),
        ({"rest.listener": "http://127.0.0.1"}, "rest.listener: expected http://host:port"),
        ({"rest.listener": "http://127.0.0.1:1/api"}, "rest.listener: must not have a path"),
    ],
)
def test_controller_validation_errors(overrides: dict[str, str], expected: str) -> None:
    props = controller_props()
    props.update(overrides)
    assert expected in _error(props)


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"node.id": "1"}, "node.id 1 is a voter but process.roles has no controller role"),
        ({"listeners": "PLAINTEXT://h:1,CONTROLLER://h:2"}, "CONTROLLER://h:2 is a controller listener"),
        ({"listeners": "PLAINTEXT://h:1", "inter.broker.listener.name": "INTERNAL"}, "inter.broker.listener.name"),
        ({"advertised.listeners": "PLAINTEXT://:9092"}, "advertised.listeners: PLAINTEXT://:9092 has no host"),
        ({"advertised.listeners": "PLAINTEXT://h:0"}, "advertised.listeners: PLAINTEXT://h:0 has port 0"),
    ],
)
def test_broker_validation_errors(overrides: dict[str, str], expected: str) -> None:
    assert expected in _error(broker_props(**overrides))


def test_full_file_with_continuations_and_comments(tmp_path: Path) -> None:
    f = tmp_path / "node.properties"
    f.write_text(
        "# controller 1\n"
        "process.roles : controller\n"
        "node.id 1\n"
        "controller.quorum.voters=1@127.0.0.1:19091,\\\n"
        "                         2@127.0.0.1:19092,\\\n"
        "                         3@127.0.0.1:19093\n"
        "listeners=CONTROLLER://127.0.0.1:19091\n"
        "! metadata goes elsewhere\n"
        "metadata.log.dir=/meta\\\\dir\n",
        encoding="utf-8",
    )
    c = load_config(f)
    assert sorted(c.controller_quorum_voters) == [1, 2, 3]
    assert c.metadata_log_dir == "/meta\\dir"
    assert parse_properties(f.read_text())["node.id"] == "1"
