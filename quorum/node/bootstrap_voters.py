"""The initial voter set of a dynamic quorum (KIP-853), as `kafka-storage.sh format` writes it.

`pykraft storage format --standalone` makes the node the only voter; `--initial-controllers
1@host:port:directory-id,...` lists them all; `--no-initial-controllers` formats a controller
that will join an existing quorum (added later with `pykraft quorum add-controller`). The first
two write the *bootstrap checkpoint*: the snapshot `00000000000000000000-0000000000.checkpoint`
in `__cluster_metadata-0`, holding a KRaftVersionRecord (kraft.version 1) and a VotersRecord,
and the node's own entry's directory id becomes its metadata log dir's `directory.id`.
Nodes of such a quorum set `controller.quorum.bootstrap.servers` instead of
`controller.quorum.voters` (which stays kraft.version 0: static voters, no checkpoint).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from quorum.node.config import NodeConfig
from quorum.node.meta_properties import (
    FormatResult,
    StorageError,
    decode_uuid,
    format_storage,
    random_uuid,
    uuid_string,
)
from quorum.raft.types import OffsetAndEpoch
from quorum.raft.voter_set import KRAFT_VERSION_DYNAMIC, Endpoint, ReplicaKey, VoterNode, VoterSet
from quorum.storage.snapshots import SnapshotStore, SnapshotVoters, encode_snapshot

__all__ = [
    "BOOTSTRAP_SNAPSHOT_ID",
    "InitialVoters",
    "controller_endpoint",
    "format_node",
    "initial_voters",
    "parse_initial_controllers",
    "write_bootstrap_checkpoint",
]

METADATA_PARTITION_DIR = "__cluster_metadata-0"
# Kafka's bootstrap checkpoint: offset 0, epoch 0 (no record of the log is below it).
BOOTSTRAP_SNAPSHOT_ID = OffsetAndEpoch(epoch=0, offset=0)


@dataclass(frozen=True, slots=True)
class InitialVoters:
    voters: VoterSet
    directory_id: str  # this node's metadata log dir directory.id (Kafka's uuid string)


def controller_endpoint(config: NodeConfig) -> Endpoint:
    """The endpoint other nodes reach this controller at: its first controller listener, as
    advertised (advertised.listeners, else listeners). Raises StorageError without one."""
    names = config.controller_listener_names
    listeners = [lst for lst in config.effective_advertised_listeners if lst.name in names]
    listeners += [lst for lst in config.controller_listeners if lst.name not in {x.name for x in listeners}]
    if not listeners:
        raise StorageError(f"node {config.node_id} has no controller listener ({','.join(names)})")
    lst = listeners[0]
    if not lst.host or lst.host in ("0.0.0.0", "::") or lst.port == 0:  # noqa: S104 - a check, not a bind
        raise StorageError(
            f"controller listener {lst.name}://{lst.host}:{lst.port} has no fixed host and port that others "
            "can reach; set one in listeners or advertised.listeners"
        )
    return Endpoint(lst.name, lst.host, lst.port)


def parse_initial_controllers(text: str, listener_name: str) -> VoterSet:
    """``id@host:port:directory-id,...`` (kafka-storage.sh's --initial-controllers)."""
    nodes: list[VoterNode] = []
    for entry in (e.strip() for e in text.split(",")):
        id_text, at, rest = entry.partition("@")
        address, sep, directory = rest.rpartition(":")
        host, sep2, port_text = address.rpartition(":")
        if not at or not sep or not sep2 or not host or not id_text.isdigit() or not port_text.isdigit():
            raise StorageError(
                f"--initial-controllers: {entry!r} is not of the form id@host:port:directory-id "
                "(for example 1@localhost:9093:JEXY6aqzQY-32P5TStzaFg)"
            )
        port = int(port_text)
        if not 0 < port <= 65535:
            raise StorageError(f"--initial-controllers: {entry!r}: port {port} out of range (1-65535)")
        raw = decode_uuid(directory, what=f"--initial-controllers directory id of {id_text}")
        key = ReplicaKey(int(id_text), uuid.UUID(bytes=raw))
        nodes.append(VoterNode(key, (Endpoint(listener_name, host.strip("[]"), port),), 0, KRAFT_VERSION_DYNAMIC))
    try:
        return VoterSet.of(nodes)
    except ValueError:
        ids = [n.node_id for n in nodes]
        dup = next(i for i in ids if ids.count(i) > 1)
        raise StorageError(f"--initial-controllers: node id {dup} is listed more than once") from None


def initial_voters(
    config: NodeConfig, *, standalone: bool, initial_controllers: str | None, no_initial_controllers: bool
) -> InitialVoters | None:
    """The voter set to bootstrap (None: no checkpoint to write), checked against the config
    as kafka-storage.sh does."""
    chosen = sum((standalone, initial_controllers is not None, no_initial_controllers))
    if chosen > 1:
        raise StorageError("only one of --standalone, --initial-controllers and --no-initial-controllers may be given")
    dynamic = chosen == 1
    if dynamic and not config.is_controller:
        raise StorageError(
            "--standalone, --initial-controllers and --no-initial-controllers format a controller; "
            f"node {config.node_id} has process.roles={','.join(sorted(config.process_roles))}"
        )
    if dynamic and config.controller_quorum_voters:
        raise StorageError(
            "--standalone, --initial-controllers and --no-initial-controllers need a dynamic quorum: "
            "remove controller.quorum.voters and set controller.quorum.bootstrap.servers"
        )
    if config.is_controller and not config.controller_quorum_voters and not dynamic:
        raise StorageError(
            "a controller of a dynamic quorum (controller.quorum.bootstrap.servers, no controller.quorum.voters) "
            "is formatted with --standalone, --initial-controllers or --no-initial-controllers"
        )
    if not dynamic or no_initial_controllers:
        return None
    endpoint = controller_endpoint(config)
    if standalone:
        directory_id = random_uuid()
        me = VoterNode(
            ReplicaKey(config.node_id, uuid.UUID(bytes=decode_uuid(directory_id, what="directory.id"))),
            (endpoint,),
            0,
            KRAFT_VERSION_DYNAMIC,
        )
        return InitialVoters(VoterSet.of([me]), directory_id)
    assert initial_controllers is not None
    voters = parse_initial_controllers(initial_controllers, endpoint.name)
    mine = voters.node(config.node_id)
    if mine is None:
        raise StorageError(
            f"--initial-controllers does not list this node ({config.node_id}); "
            "format a controller that joins later with --no-initial-controllers"
        )
    return InitialVoters(voters, uuid_string(mine.key.directory_id))


def write_bootstrap_checkpoint(metadata_log_dir: str | Path, voters: VoterSet, *, timestamp_ms: int) -> Path:
    """Write the bootstrap checkpoint (kraft.version 1 and `voters`) into the metadata log dir."""
    directory = Path(metadata_log_dir) / METADATA_PARTITION_DIR
    directory.mkdir(parents=True, exist_ok=True)
    store = SnapshotStore(directory)
    data = encode_snapshot(
        BOOTSTRAP_SNAPSHOT_ID,
        (),
        last_contained_timestamp_ms=timestamp_ms,
        voters=SnapshotVoters(KRAFT_VERSION_DYNAMIC, voters),
    )
    return store.create(BOOTSTRAP_SNAPSHOT_ID, data)


def format_node(
    config: NodeConfig, cluster_id: str, bootstrap: InitialVoters | None, *, ignore_formatted: bool = False
) -> FormatResult:
    """`storage format`: meta.properties in every log dir (the metadata log dir's directory.id
    from `bootstrap` when given) and, when the metadata log dir was formatted now, the
    bootstrap checkpoint of `bootstrap`'s voters. Raises StorageError."""
    result = format_storage(
        config,
        cluster_id,
        ignore_formatted=ignore_formatted,
        metadata_directory_id=None if bootstrap is None else bootstrap.directory_id,
    )
    if bootstrap is not None and any(d == config.metadata_log_dir for d, _ in result.formatted):
        write_bootstrap_checkpoint(config.metadata_log_dir, bootstrap.voters, timestamp_ms=int(time.time() * 1000))
    return result
