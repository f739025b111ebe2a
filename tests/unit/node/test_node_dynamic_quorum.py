"""KIP-853 on the node's side, without processes: `storage format --standalone`,
`--initial-controllers` and `--no-initial-controllers` (the bootstrap checkpoint and the
metadata directory.id), `controller.quorum.bootstrap.servers`, snapshots that keep the voter
set, and the `quorum add-controller` / `remove-controller` errors a user can fix."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from api import cli
from quorum.node.bootstrap_voters import BOOTSTRAP_SNAPSHOT_ID
from quorum.node.config import ConfigError, HostPort, config_from_properties
from quorum.node.meta_properties import decode_uuid, read_meta_properties
from quorum.raft.types import OffsetAndEpoch
from quorum.raft.voter_set import Endpoint, ReplicaKey, VoterNode, VoterSet
from quorum.storage.snapshots import SnapshotStore, SnapshotVoters, decode_snapshot_full, encode_snapshot

CLUSTER = "MkU3OEVBNTcwNTJENDM2Qg"
DIR_1 = "JEXY6aqzQY-32P5TStzaFg"
DIR_2 = "fMCL8kv1SWm87L_Md-I2hg"


def write_config(tmp_path: Path, node_id: int = 1, **extra: str) -> Path:
    props = {
        "process.roles": "controller",
        "node.id": str(node_id),
        "controller.quorum.bootstrap.servers": "127.0.0.1:19091",
        "listeners": f"CONTROLLER://127.0.0.1:{19090 + node_id}",
        "log.dirs": str(tmp_path / f"logs-{node_id}"),
        "metadata.log.dir": str(tmp_path / f"meta-{node_id}"),
    }
    props.update({k.replace("_", "."): v for k, v in extra.items()})
    path = tmp_path / f"node-{node_id}.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items() if v))
    return path


def bootstrap_checkpoint(tmp_path: Path, node_id: int = 1) -> SnapshotVoters | None:
    store = SnapshotStore(tmp_path / f"meta-{node_id}" / "__cluster_metadata-0")
    if not store.contains(BOOTSTRAP_SNAPSHOT_ID):
        return None
    _, records, voters = decode_snapshot_full(store.read_all(BOOTSTRAP_SNAPSHOT_ID))
    assert records == []
    return voters


def test_standalone_writes_kraft_version_1_and_this_node_as_the_only_voter(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path)
    assert cli.main(["storage", "format", "-c", str(config), "-t", CLUSTER, "--standalone"]) == 0
    assert "kraft.version 1 and voters 1@127.0.0.1:19091" in capsys.readouterr().out
    meta = read_meta_properties(tmp_path / "meta-1")
    assert meta is not None and meta.directory_id is not None
    voters = bootstrap_checkpoint(tmp_path)
    directory = uuid.UUID(bytes=decode_uuid(meta.directory_id))
    me = VoterNode(ReplicaKey(1, directory), (Endpoint("CONTROLLER", "127.0.0.1", 19091),), 0, 1)
    assert voters == SnapshotVoters(1, VoterSet.of([me]))
    # The other log dir gets its own directory id, and no checkpoint.
    other = read_meta_properties(tmp_path / "logs-1")
    assert other is not None and other.directory_id != meta.directory_id


def test_initial_controllers_take_the_node_s_own_directory_id(tmp_path: Path) -> None:
    config = write_config(tmp_path, node_id=2)
    initial = f"1@127.0.0.1:19091:{DIR_1},2@localhost:19092:{DIR_2}"
    assert cli.main(["storage", "format", "-c", str(config), "-t", CLUSTER, "--initial-controllers", initial]) == 0
    meta = read_meta_properties(tmp_path / "meta-2")
    assert meta is not None and meta.directory_id == DIR_2
    voters = bootstrap_checkpoint(tmp_path, 2)
    assert voters is not None and voters.voters is not None
    assert [(n.node_id, n.endpoints[0].host, n.endpoints[0].port) for n in voters.voters.nodes] == [
        (1, "127.0.0.1", 19091),
        (2, "localhost", 19092),
    ]


def test_no_initial_controllers_writes_no_checkpoint(tmp_path: Path) -> None:
    config = write_config(tmp_path, node_id=3)
    assert cli.main(["storage", "format", "-c", str(config), "-t", CLUSTER, "--no-initial-controllers"]) == 0
    assert read_meta_properties(tmp_path / "meta-3") is not None
    assert bootstrap_checkpoint(tmp_path, 3) is None


@pytest.mark.parametrize(
    ("flags", "extra", "message"),
    [
        ([], {}, "is formatted with --standalone, --initial-controllers or --no-initial-controllers"),
        (["--initial-controllers", f"2@h:1:{DIR_2}"], {}, "does not list this node (1)"),
        (["--initial-controllers", f"1@h:1:{DIR_1},1@h:2:{DIR_2}"], {}, "node id 1 is listed more than once"),
        (["--initial-controllers", "1@h:1"], {}, "not of the form id@host:port:directory-id"),
        (["--initial-controllers", "1@h:1:nope"], {}, "does not appear to be a valid UUID"),
        (["--initial-controllers", f"1@h:70000:{DIR_1}"], {}, "port 70000 out of range"),
        (["--standalone"], {"controller_quorum_voters": "1@127.0.0.1:19091"}, "remove controller.quorum.voters"),
        (["--standalone"], {"listeners": "CONTROLLER://:19091"}, "has no fixed host and port"),
    ],
)
def test_format_refusals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], extra: dict[str, str], message: str
) -> None:
    config = write_config(tmp_path, **extra)
    assert cli.main(["storage", "format", "-c", str(config), "-t", CLUSTER, *flags]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err, err
    assert read_meta_properties(tmp_path / "meta-1") is None  # nothing written


def test_only_one_way_to_name_the_initial_voters(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path)
    assert cli.main(["storage", "format", "-c", str(config), "-t", CLUSTER, "-s", "-N"]) == 2  # usage
    assert "not allowed with argument" in capsys.readouterr().err


def test_bootstrap_servers_replace_the_static_voters() -> None:
    base = {"process.roles": "broker", "node.id": "7", "listeners": "PLAINTEXT://127.0.0.1:9092"}
    config = config_from_properties({**base, "controller.quorum.bootstrap.servers": "127.0.0.1:1, localhost:2"})
    assert config.controller_quorum_voters == {}
    assert config.controller_quorum_bootstrap_servers == (HostPort("127.0.0.1", 1), HostPort("localhost", 2))
    with pytest.raises(ConfigError, match="controller.quorum.voters is required"):
        config_from_properties(base)
    with pytest.raises(ConfigError, match="empty entry"):
        config_from_properties({**base, "controller.quorum.bootstrap.servers": "127.0.0.1:1,,"})
    with pytest.raises(ConfigError, match="port 0"):
        config_from_properties({**base, "controller.quorum.bootstrap.servers": "127.0.0.1:0"})


def test_snapshots_keep_the_voter_set() -> None:
    voters = VoterSet.of([VoterNode(ReplicaKey(1, uuid.uuid4()), (Endpoint("CONTROLLER", "h", 1),))])
    sid = OffsetAndEpoch(epoch=3, offset=40)
    data = encode_snapshot(sid, [b"a", b"b"], last_contained_timestamp_ms=5, voters=SnapshotVoters(1, voters))
    _, records, found = decode_snapshot_full(data)
    assert records == [b"a", b"b"] and found == SnapshotVoters(1, voters)
    # kraft.version 0 (static voters): nothing is written, as Kafka does.
    static = encode_snapshot(sid, [b"a"], last_contained_timestamp_ms=5, voters=SnapshotVoters(0, None))
    assert decode_snapshot_full(static)[2] is None


def test_add_controller_needs_a_formatted_controller(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path, node_id=4)
    assert cli.main(["quorum", "add-controller", "--config", str(config)]) == 1
    assert "is not formatted" in capsys.readouterr().err
    broker = write_config(tmp_path, node_id=5, process_roles="broker", listeners="PLAINTEXT://127.0.0.1:9092")
    assert cli.main(["quorum", "add-controller", "--config", str(broker)]) == 1
    assert "is not a controller" in capsys.readouterr().err


def test_remove_controller_checks_the_directory_id(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["quorum", "remove-controller", "--controller-id", "2", "--bootstrap-controller", "127.0.0.1:1"]
    assert cli.main([*args, "--controller-directory-id", "xyz"]) == 1
    assert "--controller-directory-id string 'xyz' does not appear to be a valid UUID" in capsys.readouterr().err


def test_voter_change_gives_up_on_an_unreachable_quorum(capsys: pytest.CaptureFixture[str]) -> None:
    from quorum.node.free_ports import free_port

    port = free_port()
    args = ["quorum", "remove-controller", "--controller-id", "2", "--controller-directory-id", DIR_2]
    assert cli.main([*args, "--bootstrap-controller", f"127.0.0.1:{port}", "--timeout-ms", "300"]) == 1
    assert "did not complete in 0.3 s" in capsys.readouterr().err


def test_a_restarted_node_reads_the_voter_set_from_its_latest_snapshot(tmp_path: Path) -> None:
    """The log below a snapshot is deleted, VotersRecords included: at start the node takes
    the voter set (and the voters' addresses) from the snapshot's KIP-853 records."""
    import asyncio

    from quorum.node.config import config_from_properties
    from quorum.node.free_ports import free_ports
    from quorum.node.raft_node import METADATA_PARTITION_DIR, RaftNode
    from quorum.node.state_machine import DigestStateMachine

    me, other = free_ports(2)
    config = config_from_properties(
        {
            "process.roles": "controller",
            "node.id": "1",
            "controller.quorum.bootstrap.servers": f"127.0.0.1:{me}",
            "listeners": f"CONTROLLER://127.0.0.1:{me}",
            "log.dirs": str(tmp_path / "data"),
        }
    )
    directory = uuid.uuid4()
    voters = VoterSet.of(
        [
            VoterNode(ReplicaKey(1, directory), (Endpoint("CONTROLLER", "127.0.0.1", me),)),
            VoterNode(ReplicaKey(2, uuid.uuid4()), (Endpoint("CONTROLLER", "localhost", other),)),
        ]
    )
    sid = OffsetAndEpoch(epoch=2, offset=7)
    store = SnapshotStore(tmp_path / "data" / METADATA_PARTITION_DIR)
    store.create(sid, encode_snapshot(sid, [], last_contained_timestamp_ms=1, voters=SnapshotVoters(1, voters)))

    async def run() -> None:
        node = RaftNode(config, cluster_id=CLUSTER, state_machine=DigestStateMachine(), directory_id=directory)
        await node.start()
        try:
            assert node.core is not None
            assert node.core.voter_set == voters and node.core.kraft_version == 1 and node.core.is_voter
            assert node.voters == {1: HostPort("127.0.0.1", me), 2: HostPort("localhost", other)}
        finally:
            await node.stop(graceful=False)

    asyncio.run(run())
