"""`pykraft quorum describe --status|--replication`, `add-controller` and `remove-controller`,
as `kafka-metadata-quorum.sh` offers them.

It sends DescribeQuorum to each `--bootstrap-controller` address in turn until
the leader answers (non-leaders answer NOT_LEADER_OR_FOLLOWER). AddRaftVoter and
RemoveRaftVoter go to any controller (a follower relays them to its leader).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from collections.abc import Callable

from quorum.node.config import ConfigError, NodeConfig, load_config
from quorum.node.meta_properties import StorageError, decode_uuid, directory_uuid, read_meta_properties, uuid_string
from quorum.node.tool_requests import (
    MAX_TRY_S,
    Address,
    ask,
    ask_raft_api,
    ask_until_final,
    first_answer,
    parse_bootstrap,
)
from quorum.raft.describe import QuorumDescription, ReplicaDescription
from quorum.raft.errors import ErrorCode
from quorum.raft.voter_set import KRAFT_VERSION_DYNAMIC, ReplicaKey, VoterNode
from quorum.wire import admin_codec, codec, voter_codec

DESCRIBE_QUORUM_VERSION = codec.REQUEST_VERSIONS[codec.api_key_of(codec.DescribeQuorumCall())]
CLIENT_ID = "pykraft-quorum-cli"


async def _describe_one(address: Address, timeout_s: float) -> QuorumDescription | None:
    call = codec.DescribeQuorumCall()
    answer = await ask_raft_api(
        address, call, version=DESCRIBE_QUORUM_VERSION, client_id=CLIENT_ID, timeout_s=timeout_s
    )
    return answer if isinstance(answer, QuorumDescription) else None


async def _cluster_id_of(address: Address, timeout_s: float) -> str | None:
    """The cluster id a controller reports in DescribeCluster (what kafka-metadata-quorum.sh prints)."""
    call = admin_codec.DescribeClusterRequest(endpoint_type=2)
    frame, api_key, version = admin_codec.encode_admin_request(call, correlation_id=2, client_id=CLIENT_ID)
    answer = await ask(
        address, frame, lambda raw: admin_codec.decode_admin_response(api_key, version, raw, call), timeout_s
    )
    if not isinstance(answer, admin_codec.DescribeClusterResponse) or answer.error_code:
        return None
    return answer.cluster_id


def query_cluster_id(addresses: list[Address], timeout_s: float = 2.0) -> str | None:
    """The cluster id from the first controller address that answers DescribeCluster."""
    return asyncio.run(first_answer(addresses, lambda address: _cluster_id_of(address, timeout_s)))


def query_leader(addresses: list[Address], timeout_s: float = 2.0) -> QuorumDescription | None:
    """The leader's DescribeQuorum answer, from the first address that gives one."""
    return asyncio.run(first_answer(addresses, lambda address: _describe_one(address, timeout_s)))


def status_fields(d: QuorumDescription) -> dict[str, object]:
    leader = next((v for v in d.voters if v.replica_id == d.leader_id), None)
    others = [v for v in d.voters if v.replica_id != d.leader_id]
    max_lag = 0
    max_lag_time = -1
    if leader is not None:
        ends = [v.log_end_offset for v in d.voters]
        max_lag = max(0, leader.log_end_offset - min(ends)) if ends else 0
        laggard = min(d.voters, key=lambda v: v.log_end_offset)
        if laggard.replica_id == d.leader_id:
            max_lag_time = 0
        elif laggard.last_caught_up_ms >= 0 and leader.last_caught_up_ms >= 0:
            max_lag_time = max(0, leader.last_caught_up_ms - laggard.last_caught_up_ms)
    del others
    return {
        "LeaderId": d.leader_id,
        "LeaderEpoch": d.leader_epoch,
        "HighWatermark": d.high_watermark,
        "MaxFollowerLag": max_lag,
        "MaxFollowerLagTimeMs": max_lag_time,
        "CurrentVoters": [v.replica_id for v in d.voters],
        "CurrentObservers": [o.replica_id for o in d.observers],
    }


def replication_rows(d: QuorumDescription, *, human: bool) -> list[dict[str, object]]:
    leader_end = next((v.log_end_offset for v in d.voters if v.replica_id == d.leader_id), 0)
    now = int(time.time() * 1000)

    def stamp(ms: int) -> object:
        if not human:
            return ms
        return f"{now - ms} ms ago" if ms >= 0 else "-1"

    def row(r: ReplicaDescription, status: str) -> dict[str, object]:
        return {
            "NodeId": r.replica_id,
            "DirectoryId": uuid_string(r.directory_id),  # Kafka 3.9's column (KIP-853); zeros: unknown
            "LogEndOffset": r.log_end_offset,
            "Lag": max(0, leader_end - r.log_end_offset) if r.log_end_offset >= 0 else leader_end,
            "LastFetchTimestamp": stamp(r.last_fetch_ms),
            "LastCaughtUpTimestamp": stamp(r.last_caught_up_ms),
            "Status": status,
        }

    rows = [row(v, "Leader") for v in d.voters if v.replica_id == d.leader_id]
    rows += [row(v, "Follower") for v in d.voters if v.replica_id != d.leader_id]
    rows += [row(o, "Observer") for o in d.observers]
    return rows


def format_table(rows: list[dict[str, object]]) -> str:
    if not rows:
        return ""
    cols = list(rows[0])
    widths = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in cols}
    lines = ["  ".join(c.ljust(widths[c]) for c in cols).rstrip()]
    lines += ["  ".join(str(r[c]).ljust(widths[c]) for c in cols).rstrip() for r in rows]
    return "\n".join(lines)


class QuorumCommandError(Exception):
    """The voter change was refused or could not be delivered; the message says why."""


# A bad --bootstrap-controller or config, an unformatted directory, a refused voter change.
EXPECTED_ERRORS = (ValueError, ConfigError, StorageError, QuorumCommandError)


def describe(args: argparse.Namespace) -> int:
    addresses = parse_bootstrap(args.bootstrap_controller)
    described = query_leader(addresses)
    if described is None:
        print(f"error: no quorum leader answered at {args.bootstrap_controller}", flush=True)
        return 1
    if args.status:
        # kafka-metadata-quorum.sh's first line: the cluster id (from DescribeCluster; a bare Raft
        # test server, `controller --synthetic-load-*`, does not serve it and gets no such line).
        cluster_id = query_cluster_id(addresses)
        fields = {**({"ClusterId": cluster_id} if cluster_id else {}), **status_fields(described)}
        if args.json:
            print(json.dumps(fields))
        else:
            for key, value in fields.items():
                print(f"{key + ':':<24}{json.dumps(value) if isinstance(value, list) else value}")
    else:
        rows = replication_rows(described, human=args.human_readable)
        print(json.dumps(rows) if args.json else format_table(rows))
    return 0


# ------------------------------------------------- add-controller / remove-controller (KIP-853)

VOTER_CHANGE_RETRIABLE = frozenset({ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_LEADER_OR_FOLLOWER})


def _voter_change_addresses(args: argparse.Namespace, config: NodeConfig | None) -> list[Address]:
    if args.bootstrap_controller:
        return parse_bootstrap(args.bootstrap_controller)
    if config is not None and config.controller_quorum_bootstrap_servers:
        return [(hp.host, hp.port) for hp in config.controller_quorum_bootstrap_servers]
    if config is not None and config.controller_quorum_voters:
        return [(hp.host, hp.port) for hp in config.controller_quorum_voters.values()]
    raise QuorumCommandError("no controller to ask: give --bootstrap-controller HOST:PORT[,...]")


def send_voter_call(
    addresses: list[Address],
    call: voter_codec.VoterCall,
    timeout_s: float,
    *,
    made: tuple[ErrorCode, Callable[[QuorumDescription], bool]] | None = None,
) -> None:
    """Send the change to the controllers in turn (any of them relays it to the leader) until
    one answers it for good; retriable answers (REQUEST_TIMED_OUT: e.g. the new controller is
    not caught up yet, or another change is in flight; NOT_LEADER_OR_FOLLOWER: an election)
    and unanswered tries are sent again until `timeout_s`. Raises QuorumCommandError.

    `made` = (the refusal a repeated change gets, whether a description shows it made): a try
    that timed out may still have been committed, and the next one is then refused
    (DUPLICATE_VOTER, VOTER_NOT_FOUND); after more than one try, that refusal is success when
    the leader's description shows the change (as `topics create` settles a resent create)."""
    api_key = voter_codec.api_key_of(call)
    version = codec.VOTER_API_VERSIONS[api_key][1]  # the highest served
    tries = 0

    def prepare(remaining_s: float) -> tuple[bytes, float]:
        nonlocal tries
        tries += 1
        # AddRaftVoter's TimeoutMs: what is left, at most; its answer may take that and 5 s more.
        attempt = voter_codec.within_ms(call, int(remaining_s * 1000))
        frame, _, _ = voter_codec.encode_voter_request(
            attempt, correlation_id=1, client_id=CLIENT_ID, api_version=version
        )
        return frame, max(MAX_TRY_S, voter_codec.requested_timeout_ms(attempt) / 1000 + 5)

    answer = asyncio.run(
        ask_until_final(
            addresses,
            prepare,
            lambda raw: voter_codec.decode_voter_response(api_key, version, raw),
            timeout_s=timeout_s,
            retriable=lambda a: a.error in VOTER_CHANGE_RETRIABLE,
            describe=lambda a: a.error.name,
            gave_up=lambda why: QuorumCommandError(f"the voter change {why}"),
        )
    )
    if made is not None and tries > 1 and answer.error == made[0] and _description_shows(addresses, made[1]):
        return  # an earlier try made the change; its answer was lost or came too late
    if answer.error != ErrorCode.NONE:  # a refusal, with Kafka's message when there is one
        raise QuorumCommandError(f"{answer.error.name}: {answer.message}" if answer.message else answer.error.name)


def _description_shows(addresses: list[Address], made: Callable[[QuorumDescription], bool]) -> bool:
    """Whether the leader's DescribeQuorum (the first controller that gives one) shows `made`."""
    described = asyncio.run(first_answer(addresses, lambda address: _describe_one(address, MAX_TRY_S)))
    return described is not None and made(described)


def _has_voter(key: ReplicaKey) -> Callable[[QuorumDescription], bool]:
    return lambda d: any(v.replica_id == key.node_id and v.directory_id == key.directory_id for v in d.voters)


def add_controller(args: argparse.Namespace) -> int:
    """`kafka-metadata-quorum.sh add-controller`: add the controller whose config is --config,
    as a voter: its node.id, its metadata log dir's directory.id and its controller listener."""
    from quorum.node.bootstrap_voters import controller_endpoint

    config = load_config(args.config)
    if not config.is_controller:
        raise QuorumCommandError(f"{args.config}: node {config.node_id} is not a controller (process.roles)")
    meta = read_meta_properties(config.metadata_log_dir)
    if meta is None:
        raise QuorumCommandError(
            f"{config.metadata_log_dir} is not formatted: run `pykraft storage format --config {args.config} "
            "--cluster-id ID --no-initial-controllers` and start the controller first"
        )
    if meta.directory_id is None:
        raise QuorumCommandError(f"{config.metadata_log_dir}/meta.properties has no directory.id")
    endpoint = controller_endpoint(config)
    node = VoterNode(ReplicaKey(config.node_id, directory_uuid(meta)), (endpoint,), 0, KRAFT_VERSION_DYNAMIC)
    call = voter_codec.AddRaftVoter(meta.cluster_id, node, min(args.timeout_ms, voter_codec.ADMIN_REQUEST_TIMEOUT_MS))
    added = (ErrorCode.DUPLICATE_VOTER, _has_voter(node.key))
    send_voter_call(_voter_change_addresses(args, config), call, args.timeout_ms / 1000, made=added)
    print(
        f"Added controller {config.node_id} with directory id {meta.directory_id} and endpoints: "
        f"{endpoint.name}://{endpoint.host}:{endpoint.port}"
    )
    return 0


def remove_controller(args: argparse.Namespace) -> int:
    """`kafka-metadata-quorum.sh remove-controller --controller-id N --controller-directory-id D`."""
    directory = uuid.UUID(bytes=decode_uuid(args.controller_directory_id, what="--controller-directory-id"))
    config = load_config(args.config) if args.config else None
    key = ReplicaKey(args.controller_id, directory)
    call = voter_codec.RemoveRaftVoter(None, key)
    has = _has_voter(key)
    removed = (ErrorCode.VOTER_NOT_FOUND, lambda d: not has(d))
    send_voter_call(_voter_change_addresses(args, config), call, args.timeout_ms / 1000, made=removed)
    print(f"Removed KRaft controller {args.controller_id} with directory id {args.controller_directory_id}")
    return 0
