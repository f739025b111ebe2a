"""`pykraft quorum describe --status|--replication`, as `kafka-metadata-quorum.sh describe`.

It sends DescribeQuorum to each `--bootstrap-controller` address in turn until
the leader answers (non-leaders answer NOT_LEADER_OR_FOLLOWER).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from quorum.node.meta_properties import uuid_string
from quorum.raft.describe import QuorumDescription, ReplicaDescription
from quorum.wire import admin_codec, codec
from quorum.wire.transport import PeerUnavailable, request

DESCRIBE_QUORUM_VERSION = codec.REQUEST_VERSIONS[codec.api_key_of(codec.DescribeQuorumCall())]


async def _describe_one(host: str, port: int, timeout_s: float) -> QuorumDescription | None:
    frame = codec.encode_request(
        codec.DescribeQuorumCall(),
        correlation_id=1,
        client_id="pykraft-quorum-cli",
        cluster_id=None,
        source_id=-1,
        destination_id=-1,
        api_version=DESCRIBE_QUORUM_VERSION,
    )
    try:
        async with asyncio.timeout(timeout_s):
            raw = await request(host, port, frame)
        _, answer = codec.decode_response(codec.api_key_of(codec.DescribeQuorumCall()), DESCRIBE_QUORUM_VERSION, raw)
    except (PeerUnavailable, codec.WireError, TimeoutError, OSError):
        return None
    return answer if isinstance(answer, QuorumDescription) else None


async def _cluster_id_of(host: str, port: int, timeout_s: float) -> str | None:
    """The cluster id a controller reports in DescribeCluster (what kafka-metadata-quorum.sh prints)."""
    call = admin_codec.DescribeClusterRequest(endpoint_type=2)
    frame, api_key, version = admin_codec.encode_admin_request(call, correlation_id=2, client_id="pykraft-quorum-cli")
    try:
        async with asyncio.timeout(timeout_s):
            raw = await request(host, port, frame)
        answer = admin_codec.decode_admin_response(api_key, version, raw, call)
    except (PeerUnavailable, codec.WireError, TimeoutError, OSError):
        return None
    if not isinstance(answer, admin_codec.DescribeClusterResponse) or answer.error_code:
        return None
    return answer.cluster_id


def query_cluster_id(addresses: list[tuple[str, int]], timeout_s: float = 2.0) -> str | None:
    """The cluster id from the first controller address that answers DescribeCluster."""

    async def run() -> str | None:
        for host, port in addresses:
            found = await _cluster_id_of(host, port, timeout_s)
            if found is not None:
                return found
        return None

    return asyncio.run(run())


def query_leader(addresses: list[tuple[str, int]], timeout_s: float = 2.0) -> QuorumDescription | None:
    """The leader's DescribeQuorum answer, from the first address that gives one."""

    async def run() -> QuorumDescription | None:
        for host, port in addresses:
            found = await _describe_one(host, port, timeout_s)
            if found is not None:
                return found
        return None

    return asyncio.run(run())


def parse_bootstrap(text: str) -> list[tuple[str, int]]:
    out = []
    for item in text.split(","):
        host, _, port = item.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"bad --bootstrap-controller entry {item!r}: expected host:port")
        out.append((host.strip("[]"), int(port)))
    return out


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


EXPECTED_ERRORS = (ValueError,)  # a bad --bootstrap-controller


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
