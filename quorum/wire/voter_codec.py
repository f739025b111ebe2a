"""KIP-853's voter-change RPCs on the wire: AddRaftVoter (80), RemoveRaftVoter (81) and
UpdateRaftVoter (82), between plain values and framed Kafka bytes (kio's schemas; reading
through `quorum.wire._reader`, as the quorum codec does).

Served versions (Kafka 3.9 serves AddRaftVoter v0 and the others v0; 4.0 adds AddRaftVoter v1's
AckWhenCommitted): a request names the replica by (voter id, directory id) and, to add or
update one, its listeners (name, host, port) and its supported kraft.version range.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, Final, TypeAlias

from quorum.raft.errors import ErrorCode
from quorum.raft.voter_set import KRAFT_VERSION_DYNAMIC, ZERO_UUID, Endpoint, ReplicaKey, VoterNode
from quorum.wire import api_frames
from quorum.wire.codec import (
    _ZERO_MS,
    VOTER_API_VERSIONS,
    RequestHeaderInfo,
    WireError,
    _kio_error,
    _make,
    _nested,
    _read_uuid,
    _wire_uuid,
    error_from_wire,
)

ADD_RAFT_VOTER: Final = 80
REMOVE_RAFT_VOTER: Final = 81
UPDATE_RAFT_VOTER: Final = 82


# What kafka-metadata-quorum.sh sends as AddRaftVoter's TimeoutMs: its admin client's
# request.timeout.ms default (ms), capped by what is left of the tool's own deadline.
ADMIN_REQUEST_TIMEOUT_MS: Final = 30_000


@dataclass(frozen=True, slots=True)
class AddRaftVoter:
    cluster_id: str | None
    voter: VoterNode  # id, directory id, listeners (its kraft.version range is not sent: 0..1)
    # ms the leader may take, from the request's arrival, to add the voter: to wait for it to
    # catch up and for the VotersRecord to commit; then REQUEST_TIMED_OUT.
    timeout_ms: int = ADMIN_REQUEST_TIMEOUT_MS


@dataclass(frozen=True, slots=True)
class RemoveRaftVoter:
    cluster_id: str | None
    key: ReplicaKey


@dataclass(frozen=True, slots=True)
class UpdateRaftVoter:
    cluster_id: str | None
    current_leader_epoch: int
    voter: VoterNode


VoterCall: TypeAlias = AddRaftVoter | RemoveRaftVoter | UpdateRaftVoter


@dataclass(frozen=True, slots=True)
class VoterCallAnswer:
    error: ErrorCode
    message: str | None = None
    leader_id: int = -1  # UpdateRaftVoter's CurrentLeader
    leader_epoch: int = -1
    leader_host: str = ""
    leader_port: int = -1


def api_key_of(call: VoterCall) -> int:
    match call:
        case AddRaftVoter():
            return ADD_RAFT_VOTER
        case RemoveRaftVoter():
            return REMOVE_RAFT_VOTER
        case UpdateRaftVoter():
            return UPDATE_RAFT_VOTER


def requested_timeout_ms(call: VoterCall) -> int:
    """The time (ms) the call asks the leader to take at most: AddRaftVoter's TimeoutMs; 0 for
    the calls that carry none (the leader's controller.quorum.request.timeout.ms bounds them)."""
    return max(call.timeout_ms, 0) if isinstance(call, AddRaftVoter) else 0


def within_ms(call: VoterCall, remaining_ms: int) -> VoterCall:
    """`call` asking for no more than `remaining_ms` (an AddRaftVoter's TimeoutMs capped, as
    Kafka's admin client caps it by the time left to its call); the others unchanged."""
    if isinstance(call, AddRaftVoter) and call.timeout_ms > remaining_ms:
        return replace(call, timeout_ms=max(remaining_ms, 0))
    return call


def _listeners(cls: type[Any], endpoints: tuple[Endpoint, ...]) -> tuple[Any, ...]:
    listener = _nested(cls, "Listener")
    return tuple(listener(name=e.name, host=e.host, port=e.port) for e in endpoints)


def encode_voter_request(
    call: VoterCall, *, correlation_id: int, client_id: str | None, api_version: int | None = None
) -> tuple[bytes, int, int]:
    """(frame, api key, version) of a voter-change request; version defaults to the highest served."""
    key = api_key_of(call)
    cls, version = api_frames.request_schema(VOTER_API_VERSIONS, key, api_version)
    body: Any
    match call:
        case AddRaftVoter(cluster_id, voter, timeout_ms):
            body = _make(
                cls,
                cluster_id=cluster_id,
                timeout=timedelta(milliseconds=timeout_ms),
                voter_id=voter.node_id,
                voter_directory_id=_wire_uuid(voter.key.directory_id),
                listeners=_listeners(cls, voter.endpoints),
                ack_when_committed=True,
            )
        case RemoveRaftVoter(cluster_id, rkey):
            body = _make(
                cls, cluster_id=cluster_id, voter_id=rkey.node_id, voter_directory_id=_wire_uuid(rkey.directory_id)
            )
        case UpdateRaftVoter(cluster_id, epoch, voter):
            feature = _nested(cls, "KRaftVersionFeature")(
                min_supported_version=voter.min_kraft_version, max_supported_version=voter.max_kraft_version
            )
            body = _make(
                cls,
                cluster_id=cluster_id,
                current_leader_epoch=epoch,
                voter_id=voter.node_id,
                voter_directory_id=_wire_uuid(voter.key.directory_id),
                listeners=_listeners(cls, voter.endpoints),
                k_raft_version_feature=feature,
            )
    frame = api_frames.request_frame(
        cls, body, api_key=key, version=version, correlation_id=correlation_id, client_id=client_id
    )
    return frame, key, version


def _endpoints(listeners: Any) -> tuple[Endpoint, ...]:
    out = []
    for lst in listeners or ():
        if not lst.name or not lst.host:
            raise WireError(ErrorCode.INVALID_REQUEST, "a listener needs a name and a host")
        out.append(Endpoint(lst.name, lst.host, int(lst.port)))
    return tuple(out)


def decode_voter_request(frame: bytes | bytearray) -> tuple[RequestHeaderInfo, VoterCall]:
    """Decode a voter-change request (frame without its length prefix). Raises WireError
    (with the header once it parsed: the caller answers it)."""
    head, body = api_frames.read_request(bytes(frame), VOTER_API_VERSIONS, "a voter change")
    try:
        if body.voter_id < 0:
            raise WireError(ErrorCode.INVALID_REQUEST, f"voter id {body.voter_id} is negative", header=head)
        key = ReplicaKey(int(body.voter_id), _read_uuid(body, "voter_directory_id"))
        call: VoterCall
        if head.api_key == ADD_RAFT_VOTER:
            node = VoterNode(key, _endpoints(body.listeners), 0, KRAFT_VERSION_DYNAMIC)
            call = AddRaftVoter(body.cluster_id, node, int(body.timeout // timedelta(milliseconds=1)))
        elif head.api_key == REMOVE_RAFT_VOTER:
            call = RemoveRaftVoter(body.cluster_id, key)
        else:
            feature = body.k_raft_version_feature
            lo, hi = int(feature.min_supported_version), int(feature.max_supported_version)
            if lo < 0 or hi < lo:
                raise WireError(ErrorCode.INVALID_REQUEST, f"kraft.version range {lo}..{hi}", header=head)
            node = VoterNode(key, _endpoints(body.listeners), lo, hi)
            call = UpdateRaftVoter(body.cluster_id, int(body.current_leader_epoch), node)
    except WireError as exc:
        raise WireError(exc.code, exc.message, header=head) from None
    if key.directory_id == ZERO_UUID and head.api_key != UPDATE_RAFT_VOTER:
        # A voter of a dynamic quorum is a replica: (id, directory id) with a directory id.
        raise WireError(ErrorCode.INVALID_REQUEST, "the voter's directory id is missing", header=head)
    if isinstance(call, AddRaftVoter) and not call.voter.endpoints:
        raise WireError(ErrorCode.INVALID_REQUEST, "a new voter needs at least one listener", header=head)
    return head, call


def encode_voter_response(head: RequestHeaderInfo, answer: VoterCallAnswer) -> bytes:
    """The response frame answering `head`'s request at its version."""
    cls = api_frames.response_schema(head)
    extra: dict[str, Any] = {}
    if head.api_key == UPDATE_RAFT_VOTER:
        extra["current_leader"] = _nested(cls, "CurrentLeader")(
            leader_id=answer.leader_id,
            leader_epoch=answer.leader_epoch,
            host=answer.leader_host,
            port=answer.leader_port,
        )
    body = _make(
        cls,
        throttle_time=_ZERO_MS,
        error_code=_kio_error(answer.error),
        error_message=answer.message or None,
        **extra,
    )
    return api_frames.response_frame(cls, head, body)


def decode_voter_response(api_key: int, api_version: int, frame: bytes) -> VoterCallAnswer:
    """Decode a voter-change response (frame without its length prefix). Raises WireError."""
    body = api_frames.read_response(api_key, api_version, bytes(frame))
    leader = getattr(body, "current_leader", None)
    return VoterCallAnswer(
        error_from_wire(int(body.error_code)),
        getattr(body, "error_message", None),
        int(leader.leader_id) if leader is not None else -1,
        int(leader.leader_epoch) if leader is not None else -1,
        leader.host if leader is not None else "",
        int(leader.port) if leader is not None else -1,
    )
