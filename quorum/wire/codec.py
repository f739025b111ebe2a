"""Kafka-protocol codec for the quorum's RPCs: core messages <-> framed Kafka bytes.

Every KRaft RPC addresses the single partition `__cluster_metadata-0`, wrapped in
Kafka's Topics/Partitions arrays (Fetch v13+ names the topic by its fixed id,
`METADATA_TOPIC_ID`). Entities, header versions and writers come from kio's
generated schemas; *reading* uses `quorum.wire._reader`, a defensive walker over
the same schemas, because kio's native reader can abort the process on hostile
lengths (see that module).

Frames: `encode_*` return complete frames (4-byte big-endian length prefix, header,
body); `decode_*` take a frame *without* the length prefix (what the transport
hands over). Decoders raise only `WireError`.

Error placement: a core response's `error` goes in the partition-level error
field; the codes Kafka reports for the whole request (`TOP_LEVEL_ERRORS`, e.g.
INCONSISTENT_CLUSTER_ID) are also put in the top-level field. Decoding takes the
top-level code when it is set, else the partition's. Codes a peer sends that
`ErrorCode` does not know map to `UNKNOWN_ERROR_FALLBACK`.
"""

from __future__ import annotations

import io
import struct
import sys
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from datetime import timedelta
from enum import IntEnum
from functools import cache
from typing import Any, Final, TypeAlias

from kio.index import KioIndexError, load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode as KioErrorCode
from kio.serial import entity_writer

from quorum.frozen_init import fast_frozen_init
from quorum.raft.describe import QuorumDescription, ReplicaDescription
from quorum.raft.errors import ErrorCode
from quorum.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Request,
    Response,
    VoteRequest,
    VoteResponse,
)
from quorum.raft.types import OffsetAndEpoch
from quorum.raft.voter_set import ZERO_UUID
from quorum.storage.record_batch import CorruptRecordError, decode_batches, encode_batches
from quorum.wire import fetch_direct
from quorum.wire._reader import MalformedError, entity_reader, read_request_body
from quorum.wire.admin_versions import ADMIN_API_VERSIONS

__all__ = [
    "API_VERSIONS",
    "DEFAULT_LISTENER",
    "METADATA_PARTITION",
    "METADATA_TOPIC",
    "METADATA_TOPIC_ID",
    "REQUEST_VERSIONS",
    "TOP_LEVEL_ERRORS",
    "UNKNOWN_ERROR_FALLBACK",
    "VOTER_API_VERSIONS",
    "FEATURE_API_VERSIONS",
    "ApiKey",
    "ApiVersionsCall",
    "ApiVersionsResult",
    "DecodedRequest",
    "DescribeQuorumCall",
    "ErrorResult",
    "RequestHeaderInfo",
    "WireError",
    "advertised_api_versions",
    "api_key_of",
    "decode_request",
    "decode_response",
    "encode_error_response",
    "encode_request",
    "encode_response",
    "error_from_wire",
    "error_response_for",
]


class ApiKey(IntEnum):
    FETCH = 1
    API_VERSIONS = 18
    VOTE = 52
    BEGIN_QUORUM_EPOCH = 53
    END_QUORUM_EPOCH = 54
    DESCRIBE_QUORUM = 55
    FETCH_SNAPSHOT = 59


METADATA_TOPIC: Final = "__cluster_metadata"
METADATA_TOPIC_ID: Final = uuid.UUID(int=1)  # Kafka's fixed topic id of the metadata topic
METADATA_PARTITION: Final = 0
DEFAULT_LISTENER: Final = "CONTROLLER"

# (min, max) version served per api key. Fetch starts at 13, the first version that
# names the topic by id (what KRaft replicas send); the KRaft RPCs from their v0.
API_VERSIONS: Final[dict[int, tuple[int, int]]] = {
    ApiKey.FETCH: (13, 17),
    ApiKey.API_VERSIONS: (0, 4),
    ApiKey.VOTE: (0, 2),
    ApiKey.BEGIN_QUORUM_EPOCH: (0, 1),
    ApiKey.END_QUORUM_EPOCH: (0, 1),
    ApiKey.DESCRIBE_QUORUM: (0, 2),
    ApiKey.FETCH_SNAPSHOT: (0, 1),
}

# The version `encode_request` sends unless told otherwise: the highest served.
# Vote v2 (Kafka 4.0, KIP-996) is the first that carries PreVote.
REQUEST_VERSIONS: Final[dict[int, int]] = {key: high for key, (_, high) in API_VERSIONS.items()}


# KIP-853's voter changes (AddRaftVoter 80, RemoveRaftVoter 81, UpdateRaftVoter 82), coded by
# `quorum.wire.voter_codec`; Kafka 3.9 serves AddRaftVoter v0 (4.0: v1) and the others v0.
VOTER_API_VERSIONS: Final[dict[int, tuple[int, int]]] = {80: (0, 1), 81: (0, 0), 82: (0, 0)}
# UpdateFeatures (kraft.version upgrade; quorum.wire.features_codec), as Kafka 3.9 serves it.
FEATURE_API_VERSIONS: Final[dict[int, tuple[int, int]]] = {57: (0, 1)}


def advertised_api_versions() -> dict[int, tuple[int, int]]:
    """Every (min, max) version a node serves, for ApiVersions: this module's API_VERSIONS,
    the voter changes (`VOTER_API_VERSIONS`) and the controller's admin apis
    (`quorum.wire.admin_versions.ADMIN_API_VERSIONS`); the node routes the last two to their
    codecs before `decode_request`."""
    return {**API_VERSIONS, **VOTER_API_VERSIONS, **FEATURE_API_VERSIONS, **ADMIN_API_VERSIONS}


TOP_LEVEL_ERRORS: Final = frozenset(
    {ErrorCode.INCONSISTENT_CLUSTER_ID, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, ErrorCode.UNSUPPORTED_VERSION}
)

# Kafka's UNKNOWN_SERVER_ERROR (-1) once ErrorCode has it; until then a retriable code.
UNKNOWN_ERROR_FALLBACK: Final[ErrorCode] = getattr(ErrorCode, "UNKNOWN_SERVER_ERROR", ErrorCode.NETWORK_EXCEPTION)

_KNOWN_ERRORS: Final = frozenset(int(code) for code in ErrorCode)


def error_from_wire(code: int) -> ErrorCode:
    """The ErrorCode for a wire value; unknown values become UNKNOWN_ERROR_FALLBACK."""
    return ErrorCode(code) if code in _KNOWN_ERRORS else UNKNOWN_ERROR_FALLBACK


def _kio_error(code: int) -> KioErrorCode:
    try:
        return KioErrorCode(int(code))
    except ValueError:
        return KioErrorCode.unknown_server_error


# --------------------------------------------------------------------------- public types


class WireError(Exception):
    """A frame that cannot be decoded (or a message that cannot be encoded).

    `code` is the Kafka error to report; `header` is set when the request header
    parsed, so that `error_response_for` can still answer the request.
    """

    def __init__(self, code: ErrorCode, message: str, *, header: RequestHeaderInfo | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.header = header

    def __repr__(self) -> str:
        return f"WireError({self.code.name}, {self.message!r})"


@dataclass(frozen=True, slots=True, init=False)
class RequestHeaderInfo:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None

    # Compiled with the module (the dataclass decorator's __init__ would run as Python there);
    # uncompiled, fast_frozen_init replaces it.
    def __init__(self, api_key: int, api_version: int, correlation_id: int, client_id: str | None) -> None:
        object.__setattr__(self, "api_key", api_key)
        object.__setattr__(self, "api_version", api_version)
        object.__setattr__(self, "correlation_id", correlation_id)
        object.__setattr__(self, "client_id", client_id)


fast_frozen_init(RequestHeaderInfo)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class ApiVersionsCall:
    """An ApiVersions request (v3+ names the client software)."""

    client_software_name: str = ""
    client_software_version: str = ""


fast_frozen_init(ApiVersionsCall)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class DescribeQuorumCall:
    """A DescribeQuorum request for `__cluster_metadata-0`."""


fast_frozen_init(DescribeQuorumCall)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class ApiVersionsResult:
    api_keys: Mapping[int, tuple[int, int]] = field(default_factory=advertised_api_versions)
    error: ErrorCode = ErrorCode.NONE
    # v3+ tagged fields (KIP-584): the features this node supports, (min, max) by name, and the
    # finalized levels (a level-0 feature is not finalized: Kafka leaves it out) as of
    # `finalized_epoch` (a metadata log offset; -1 = unknown, clients then ignore the levels).
    supported_features: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    finalized_features: Mapping[str, int] = field(default_factory=dict)
    finalized_epoch: int = -1


@dataclass(frozen=True, slots=True)
class ErrorResult:
    """A failed DescribeQuorum (or any failure without a typed response), with the
    leader hint a partition-level error carries."""

    error: ErrorCode
    message: str | None = None
    leader_id: int = -1
    leader_epoch: int = -1


fast_frozen_init(ErrorResult)  # not a decorator: mypyc makes a decorated class a Python class


Call: TypeAlias = Request | ApiVersionsCall | DescribeQuorumCall


@dataclass(frozen=True, slots=True)
class DecodedRequest:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    cluster_id: str | None  # None when the version has no cluster id or it was null
    source_id: int  # candidate id / leader id / replica id; -1 for ApiVersions, DescribeQuorum
    message: Call
    destination_id: int = -1  # the voter id the sender addressed (Vote v1+, BeginQuorumEpoch v1+)

    @property
    def header(self) -> RequestHeaderInfo:
        return RequestHeaderInfo(self.api_key, self.api_version, self.correlation_id, self.client_id)


fast_frozen_init(DecodedRequest)  # not a decorator: mypyc makes a decorated class a Python class


DecodedResponse: TypeAlias = Response | QuorumDescription | ApiVersionsResult | ErrorResult
Endpoints: TypeAlias = Mapping[int, tuple[str, int]]

# --------------------------------------------------------------------------- kio plumbing


@cache
def _schema(api_key: int, version: int, request: bool) -> type[Any] | None:
    try:
        if request:
            return load_request_schema(api_key, version)
        return load_response_schema(api_key, version)
    except (KioIndexError, ImportError, ValueError, AttributeError):
        return None


def _schema_or_raise(api_key: int, version: int, request: bool) -> type[Any]:
    cls = _schema(api_key, version, request)
    if cls is None:
        raise WireError(ErrorCode.UNSUPPORTED_VERSION, f"no schema for api {api_key} v{version}")
    return cls


_FIELD_NAMES: dict[type[Any], frozenset[str]] = {}


def _field_names(cls: type[Any]) -> frozenset[str]:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = frozenset(f.name for f in fields(cls))
    return names


def _make(cls: type[Any], **values: Any) -> Any:
    """Build a kio entity from the values its version has (others are dropped)."""
    names = _field_names(cls)
    return cls(**{k: v for k, v in values.items() if k in names})


def _nested(cls: type[Any], name: str) -> type[Any]:
    nested: type[Any] = getattr(sys.modules[cls.__module__], name)
    return nested


def _has(cls: type[Any], name: str) -> bool:
    return name in _field_names(cls)


def _frame(header: Any, body: Any) -> bytes:
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    try:
        entity_writer(type(header))(buf, header)
        entity_writer(type(body))(buf, body)
    except (struct.error, ValueError, TypeError, OverflowError, AttributeError) as exc:
        raise WireError(ErrorCode.INVALID_REQUEST, f"cannot encode {type(body).__name__}: {exc}") from exc
    view = buf.getbuffer()
    struct.pack_into(">i", view, 0, len(view) - 4)
    del view
    return buf.getvalue()


def _ms(value: timedelta) -> int:
    return value // timedelta(milliseconds=1)


_ZERO_MS: Final = timedelta(0)

# --------------------------------------------------------------------------- requests: encode


@dataclass(frozen=True, slots=True)
class _Ctx:
    cluster_id: str | None
    destination_id: int
    leader_endpoint: tuple[str, int] | None


fast_frozen_init(_Ctx)  # not a decorator: mypyc makes a decorated class a Python class


def _topic(cls: type[Any], partition: Any, name_field: str = "topic_name") -> Any:
    return _make(_nested(cls, "TopicData"), **{name_field: METADATA_TOPIC}, partitions=(partition,))


def _leader_endpoints(cls: type[Any], ctx: _Ctx) -> tuple[Any, ...]:
    if ctx.leader_endpoint is None or not _has(cls, "leader_endpoints"):
        return ()
    host, port = ctx.leader_endpoint
    return (_nested(cls, "LeaderEndpoint")(name=DEFAULT_LISTENER, host=host, port=port),)


def _wire_uuid(value: uuid.UUID) -> uuid.UUID | None:
    """A KIP-853 directory id as kio takes it (None: the zero uuid, "not known")."""
    return None if value == ZERO_UUID else value


def _read_uuid(part: Any, name: str) -> uuid.UUID:
    value = getattr(part, name, None)
    return value if isinstance(value, uuid.UUID) else ZERO_UUID


def _enc_vote(cls: type[Any], m: VoteRequest, ctx: _Ctx) -> Any:
    if m.pre_vote and not _has(_nested(cls, "PartitionData"), "pre_vote"):
        raise WireError(ErrorCode.UNSUPPORTED_VERSION, f"PreVote needs Vote v2+, not v{cls.__version__}")
    part = _make(
        _nested(cls, "PartitionData"),
        partition_index=METADATA_PARTITION,
        replica_epoch=m.candidate_epoch,
        replica_id=m.candidate_id,
        replica_directory_id=None,
        voter_directory_id=_wire_uuid(m.voter_directory_id),
        last_offset_epoch=m.last_offset_epoch,
        last_offset=m.last_offset,
        pre_vote=m.pre_vote,
    )
    return _make(cls, cluster_id=ctx.cluster_id, voter_id=ctx.destination_id, topics=(_topic(cls, part),))


def _enc_begin(cls: type[Any], m: BeginQuorumEpochRequest, ctx: _Ctx) -> Any:
    part = _make(
        _nested(cls, "PartitionData"),
        partition_index=METADATA_PARTITION,
        voter_directory_id=None,
        leader_id=m.leader_id,
        leader_epoch=m.leader_epoch,
    )
    return _make(
        cls,
        cluster_id=ctx.cluster_id,
        voter_id=ctx.destination_id,
        topics=(_topic(cls, part),),
        leader_endpoints=_leader_endpoints(cls, ctx),
    )


def _enc_end(cls: type[Any], m: EndQuorumEpochRequest, ctx: _Ctx) -> Any:
    pcls = _nested(cls, "PartitionData")
    if _has(pcls, "preferred_candidates"):
        info = _nested(cls, "ReplicaInfo")
        successors: dict[str, Any] = {
            "preferred_candidates": tuple(
                info(candidate_id=i, candidate_directory_id=None) for i in m.preferred_successors
            )
        }
    else:
        successors = {"preferred_successors": tuple(m.preferred_successors)}
    part = _make(
        pcls, partition_index=METADATA_PARTITION, leader_id=m.leader_id, leader_epoch=m.leader_epoch, **successors
    )
    return _make(
        cls, cluster_id=ctx.cluster_id, topics=(_topic(cls, part),), leader_endpoints=_leader_endpoints(cls, ctx)
    )


def _enc_fetch(cls: type[Any], m: FetchRequest, ctx: _Ctx) -> Any:
    part = _make(
        _nested(cls, "FetchPartition"),
        partition=METADATA_PARTITION,
        current_leader_epoch=m.current_leader_epoch,
        fetch_offset=m.fetch_offset,
        last_fetched_epoch=m.last_fetched_epoch,
        log_start_offset=m.log_start_offset,
        partition_max_bytes=m.max_bytes,
        replica_directory_id=_wire_uuid(m.replica_directory_id),
    )
    topic = _nested(cls, "FetchTopic")(topic_id=METADATA_TOPIC_ID, partitions=(part,))
    extra: dict[str, Any] = {}
    if _has(cls, "replica_state"):
        extra["replica_state"] = _nested(cls, "ReplicaState")(replica_id=m.replica_id, replica_epoch=-1)
    else:
        extra["replica_id"] = m.replica_id
    return _make(
        cls,
        cluster_id=ctx.cluster_id,
        max_wait=timedelta(milliseconds=m.max_wait_ms),
        min_bytes=0,
        max_bytes=m.max_bytes,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,  # a sessionless full fetch
        topics=(topic,),
        forgotten_topics_data=(),
        rack_id="",
        **extra,
    )


def _enc_fetch_snapshot(cls: type[Any], m: FetchSnapshotRequest, ctx: _Ctx) -> Any:
    snap = _nested(cls, "SnapshotId")(end_offset=m.snapshot_id.offset, epoch=m.snapshot_id.epoch)
    part = _make(
        _nested(cls, "PartitionSnapshot"),
        partition=METADATA_PARTITION,
        current_leader_epoch=m.current_leader_epoch,
        snapshot_id=snap,
        position=m.position,
        replica_directory_id=None,
    )
    topic = _nested(cls, "TopicSnapshot")(name=METADATA_TOPIC, partitions=(part,))
    return _make(cls, cluster_id=ctx.cluster_id, replica_id=m.replica_id, max_bytes=m.max_bytes, topics=(topic,))


def _enc_describe(cls: type[Any], m: DescribeQuorumCall, ctx: _Ctx) -> Any:
    part = _nested(cls, "PartitionData")(partition_index=METADATA_PARTITION)
    return cls(topics=(_topic(cls, part),))


def _enc_api_versions(cls: type[Any], m: ApiVersionsCall, ctx: _Ctx) -> Any:
    return _make(cls, client_software_name=m.client_software_name, client_software_version=m.client_software_version)


_REQUEST_ENCODERS: Final[dict[type[Any], tuple[int, Callable[[type[Any], Any, _Ctx], Any]]]] = {
    VoteRequest: (ApiKey.VOTE, _enc_vote),
    BeginQuorumEpochRequest: (ApiKey.BEGIN_QUORUM_EPOCH, _enc_begin),
    EndQuorumEpochRequest: (ApiKey.END_QUORUM_EPOCH, _enc_end),
    FetchRequest: (ApiKey.FETCH, _enc_fetch),
    FetchSnapshotRequest: (ApiKey.FETCH_SNAPSHOT, _enc_fetch_snapshot),
    DescribeQuorumCall: (ApiKey.DESCRIBE_QUORUM, _enc_describe),
    ApiVersionsCall: (ApiKey.API_VERSIONS, _enc_api_versions),
}


def api_key_of(message: Call) -> int:
    """The Kafka api key that carries `message`."""
    try:
        return _REQUEST_ENCODERS[type(message)][0]
    except KeyError:
        raise TypeError(f"not a request: {type(message).__name__}") from None


def encode_request(
    message: Call,
    *,
    correlation_id: int,
    client_id: str | None,
    cluster_id: str | None,
    source_id: int,
    destination_id: int,
    api_version: int | None = None,
    endpoints: Endpoints | None = None,
) -> bytes:
    """A complete request frame (length prefix, header v1/v2, body).

    `api_version` defaults to REQUEST_VERSIONS[key]. `endpoints` (node id ->
    (host, port)) supplies the leader's endpoint (that of `source_id`) for the
    BeginQuorumEpoch/EndQuorumEpoch v1 LeaderEndpoints. Raises WireError if the
    message cannot be expressed at that version (e.g. a pre-vote below Vote v2)
    or a value is out of range; TypeError for a non-request.
    """
    api_key, encoder = _REQUEST_ENCODERS.get(type(message), (None, None))
    if api_key is None or encoder is None:
        raise TypeError(f"not a request: {type(message).__name__}")
    version = REQUEST_VERSIONS[api_key] if api_version is None else api_version
    low, high = API_VERSIONS[api_key]
    if not low <= version <= high:
        raise WireError(ErrorCode.UNSUPPORTED_VERSION, f"api {api_key} v{version} is not in {low}..{high}")
    if version == fetch_direct.DIRECT_VERSION and type(message) is FetchRequest:
        try:
            return fetch_direct.encode_fetch_request(
                message,
                topic_id=METADATA_TOPIC_ID,
                correlation_id=correlation_id,
                client_id=client_id,
                cluster_id=cluster_id,
            )
        except struct.error:
            pass  # a value out of range: kio's path says which
    cls = _schema_or_raise(api_key, version, True)
    ctx = _Ctx(cluster_id, destination_id, None if endpoints is None else endpoints.get(source_id))
    try:
        body = encoder(cls, message, ctx)
    except (TypeError, ValueError) as exc:
        raise WireError(ErrorCode.INVALID_REQUEST, f"cannot encode {type(message).__name__}: {exc}") from exc
    header = cls.__header_schema__(
        request_api_key=api_key, request_api_version=version, correlation_id=correlation_id, client_id=client_id
    )
    return _frame(header, body)


# --------------------------------------------------------------------------- requests: decode

_FETCH_DIRECT_HEAD: Final = struct.pack(">hh", ApiKey.FETCH, fetch_direct.DIRECT_VERSION)


def _peek_header(frame: bytes) -> RequestHeaderInfo:
    # Bytes 0-7: api key (int16), api version (int16), correlation id (int32), big-endian;
    # bytes 8-9: the client id's length (int16, -1 for null), then its UTF-8 bytes. Read by
    # index (a C byte load once compiled: no struct method calls on the request path).
    size = len(frame)
    if size < 10:
        raise WireError(ErrorCode.INVALID_REQUEST, "frame shorter than a request header")
    api_key = (frame[0] << 8) | frame[1]
    api_version = (frame[2] << 8) | frame[3]
    correlation_id = (frame[4] << 24) | (frame[5] << 16) | (frame[6] << 8) | frame[7]
    n = (frame[8] << 8) | frame[9]
    if api_key >= 0x8000:
        api_key -= 0x10000
    if api_version >= 0x8000:
        api_version -= 0x10000
    if correlation_id >= 0x80000000:
        correlation_id -= 0x100000000
    if n >= 0x8000:
        n -= 0x10000
    client_id: str | None = None
    if n >= 0:
        if size < 10 + n:
            raise WireError(ErrorCode.INVALID_REQUEST, "truncated client id")
        try:
            client_id = frame[10 : 10 + n].decode("utf-8")
        except UnicodeDecodeError:
            raise WireError(ErrorCode.INVALID_REQUEST, "client id is not utf-8") from None
    elif n != -1:
        raise WireError(ErrorCode.INVALID_REQUEST, "bad client id length")
    return RequestHeaderInfo(api_key, api_version, correlation_id, client_id)


def _only_partition(
    head: RequestHeaderInfo | None,
    topics: Any,
    *,
    topic_field: str,
    partition_field: str,
    code: ErrorCode = ErrorCode.INVALID_REQUEST,
) -> Any:
    """The single partition of `__cluster_metadata-0`, or WireError."""
    if topics is None or len(topics) != 1:
        raise WireError(code, f"expected one topic, got {0 if topics is None else len(topics)}", header=head)
    topic = topics[0]
    name = getattr(topic, topic_field)
    expected = METADATA_TOPIC_ID if topic_field == "topic_id" else METADATA_TOPIC
    if name != expected:
        raise WireError(code, f"unexpected topic {name!r}", header=head)
    parts = topic.partitions
    if parts is None or len(parts) != 1:
        raise WireError(code, f"expected one partition, got {0 if parts is None else len(parts)}", header=head)
    part = parts[0]
    if getattr(part, partition_field) != METADATA_PARTITION:
        raise WireError(code, f"unexpected partition {getattr(part, partition_field)}", header=head)
    return part


def _dec_vote(head: RequestHeaderInfo, body: Any) -> tuple[Call, int, int, str | None]:
    p = _only_partition(head, body.topics, topic_field="topic_name", partition_field="partition_index")
    msg = VoteRequest(
        candidate_epoch=p.replica_epoch,
        candidate_id=p.replica_id,
        last_offset_epoch=p.last_offset_epoch,
        last_offset=p.last_offset,
        pre_vote=bool(getattr(p, "pre_vote", False)),
        voter_directory_id=_read_uuid(p, "voter_directory_id"),
    )
    return msg, p.replica_id, getattr(body, "voter_id", -1), body.cluster_id


def _dec_begin(head: RequestHeaderInfo, body: Any) -> tuple[Call, int, int, str | None]:
    p = _only_partition(head, body.topics, topic_field="topic_name", partition_field="partition_index")
    msg = BeginQuorumEpochRequest(leader_id=p.leader_id, leader_epoch=p.leader_epoch)
    return msg, p.leader_id, getattr(body, "voter_id", -1), body.cluster_id


def _dec_end(head: RequestHeaderInfo, body: Any) -> tuple[Call, int, int, str | None]:
    p = _only_partition(head, body.topics, topic_field="topic_name", partition_field="partition_index")
    if hasattr(p, "preferred_candidates"):
        successors = tuple(c.candidate_id for c in p.preferred_candidates or ())
    else:
        successors = tuple(p.preferred_successors or ())
    msg = EndQuorumEpochRequest(leader_id=p.leader_id, leader_epoch=p.leader_epoch, preferred_successors=successors)
    return msg, p.leader_id, -1, body.cluster_id


def _dec_fetch(head: RequestHeaderInfo, body: Any) -> tuple[Call, int, int, str | None]:
    p = _only_partition(head, body.topics, topic_field="topic_id", partition_field="partition")
    replica_id = body.replica_state.replica_id if hasattr(body, "replica_state") else body.replica_id
    msg = FetchRequest(
        replica_id=replica_id,
        current_leader_epoch=p.current_leader_epoch,
        fetch_offset=p.fetch_offset,
        last_fetched_epoch=p.last_fetched_epoch,
        log_start_offset=p.log_start_offset,
        max_wait_ms=_ms(body.max_wait),
        max_bytes=p.partition_max_bytes,
        replica_directory_id=_read_uuid(p, "replica_directory_id"),
    )
    return msg, replica_id, -1, body.cluster_id


def _dec_fetch_snapshot(head: RequestHeaderInfo, body: Any) -> tuple[Call, int, int, str | None]:
    p = _only_partition(head, body.topics, topic_field="name", partition_field="partition")
    msg = FetchSnapshotRequest(
        replica_id=body.replica_id,
        current_leader_epoch=p.current_leader_epoch,
        snapshot_id=OffsetAndEpoch(epoch=p.snapshot_id.epoch, offset=p.snapshot_id.end_offset),
        position=p.position,
        max_bytes=body.max_bytes,
    )
    return msg, body.replica_id, -1, body.cluster_id


def _dec_describe(head: RequestHeaderInfo, body: Any) -> tuple[Call, int, int, str | None]:
    _only_partition(head, body.topics, topic_field="topic_name", partition_field="partition_index")
    return DescribeQuorumCall(), -1, -1, None


def _dec_api_versions(head: RequestHeaderInfo, body: Any) -> tuple[Call, int, int, str | None]:
    msg = ApiVersionsCall(
        client_software_name=getattr(body, "client_software_name", ""),
        client_software_version=getattr(body, "client_software_version", ""),
    )
    return msg, -1, -1, None


_REQUEST_DECODERS: Final[dict[int, Callable[[RequestHeaderInfo, Any], tuple[Call, int, int, str | None]]]] = {
    ApiKey.VOTE: _dec_vote,
    ApiKey.BEGIN_QUORUM_EPOCH: _dec_begin,
    ApiKey.END_QUORUM_EPOCH: _dec_end,
    ApiKey.FETCH: _dec_fetch,
    ApiKey.FETCH_SNAPSHOT: _dec_fetch_snapshot,
    ApiKey.DESCRIBE_QUORUM: _dec_describe,
    ApiKey.API_VERSIONS: _dec_api_versions,
}


def decode_request(frame: bytes | bytearray | memoryview) -> DecodedRequest:
    """Decode a request frame (without its length prefix). Raises only WireError.

    WireError.header is set once the fixed header prefix parsed: INVALID_REQUEST for
    an unknown api key or a malformed header/body/partition set, UNSUPPORTED_VERSION
    for a version outside API_VERSIONS.
    """
    try:
        return _decode_request(bytes(frame))
    except WireError:
        raise
    except Exception as exc:  # defensive: the contract is "only WireError"
        raise WireError(ErrorCode.INVALID_REQUEST, f"undecodable request: {exc!r}") from exc


def _decode_request(frame: bytes) -> DecodedRequest:
    if frame[:4] == _FETCH_DIRECT_HEAD:
        fetch = fetch_direct.decode_fetch_request(frame, topic_id=METADATA_TOPIC_ID)
        if fetch is not None:
            return DecodedRequest(
                api_key=ApiKey.FETCH,
                api_version=fetch_direct.DIRECT_VERSION,
                correlation_id=fetch.correlation_id,
                client_id=fetch.client_id,
                cluster_id=fetch.cluster_id,
                source_id=fetch.message.replica_id,
                message=fetch.message,
            )
    head = _peek_header(frame)
    decoder = _REQUEST_DECODERS.get(head.api_key)
    if decoder is None:
        raise WireError(ErrorCode.INVALID_REQUEST, f"unknown api key {head.api_key}", header=head)
    low, high = API_VERSIONS[head.api_key]
    if not low <= head.api_version <= high:
        raise WireError(
            ErrorCode.UNSUPPORTED_VERSION,
            f"api {head.api_key} v{head.api_version} is not in {low}..{high}",
            header=head,
        )
    cls = _schema(head.api_key, head.api_version, True)
    if cls is None:  # pragma: no cover - API_VERSIONS only lists versions kio has
        raise WireError(ErrorCode.UNSUPPORTED_VERSION, "no schema", header=head)
    try:
        _, pos = entity_reader(cls.__header_schema__)(frame, 0)
        body = read_request_body(cls, frame, pos)  # bytes after the body are ignored (Kafka's rule)
    except MalformedError as exc:
        raise WireError(
            ErrorCode.INVALID_REQUEST, f"malformed {cls.__name__} v{head.api_version}: {exc}", header=head
        ) from exc
    message, source_id, destination_id, cluster_id = decoder(head, body)
    return DecodedRequest(
        api_key=head.api_key,
        api_version=head.api_version,
        correlation_id=head.correlation_id,
        client_id=head.client_id,
        cluster_id=cluster_id,
        source_id=source_id,
        message=message,
        destination_id=destination_id,
    )


# --------------------------------------------------------------------------- responses: encode


def _top_and_partition(error: ErrorCode) -> tuple[KioErrorCode, KioErrorCode]:
    code = _kio_error(error)
    return (code if error in TOP_LEVEL_ERRORS else KioErrorCode.none), code


def _node_endpoints(cls: type[Any], leader_id: int, endpoints: Endpoints | None) -> dict[str, Any]:
    if not endpoints or leader_id not in endpoints or not _has(cls, "node_endpoints"):
        return {}
    host, port = endpoints[leader_id]
    return {"node_endpoints": (_nested(cls, "NodeEndpoint")(node_id=leader_id, host=host, port=port),)}


def _enc_simple_response(cls: type[Any], r: Any, endpoints: Endpoints | None, **extra: Any) -> Any:
    top, code = _top_and_partition(r.error)
    part = _make(
        _nested(cls, "PartitionData"),
        partition_index=METADATA_PARTITION,
        error_code=code,
        leader_id=r.leader_id,
        leader_epoch=r.leader_epoch,
        **extra,
    )
    return _make(cls, error_code=top, topics=(_topic(cls, part),), **_node_endpoints(cls, r.leader_id, endpoints))


def _enc_vote_response(cls: type[Any], r: VoteResponse, endpoints: Endpoints | None) -> Any:
    return _enc_simple_response(cls, r, endpoints, vote_granted=r.vote_granted)


def _encode_fetch_response_direct(correlation_id: int, r: FetchResponse, endpoints: Endpoints | None) -> bytes | None:
    """`_enc_fetch_response`'s bytes at v17 without kio (None: a value out of range, for
    kio's path to report)."""
    top, code = _top_and_partition(r.error)
    endpoint = endpoints.get(r.leader_id) if endpoints else None
    try:
        return fetch_direct.encode_fetch_response(
            r,
            encode_batches(r.batches) if r.batches else b"",
            topic_id=METADATA_TOPIC_ID,
            correlation_id=correlation_id,
            top_code=int(top),
            partition_code=int(code),
            node_endpoint=None if endpoint is None else (r.leader_id, endpoint[0], endpoint[1]),
        )
    except (struct.error, ValueError):
        return None


def _enc_fetch_response(cls: type[Any], r: FetchResponse, endpoints: Endpoints | None) -> Any:
    top, code = _top_and_partition(r.error)
    pcls = _nested(cls, "PartitionData")
    tagged: dict[str, Any] = {
        "current_leader": _nested(cls, "LeaderIdAndEpoch")(leader_id=r.leader_id, leader_epoch=r.leader_epoch)
    }
    if r.diverging_epoch is not None:
        d = r.diverging_epoch
        tagged["diverging_epoch"] = _nested(cls, "EpochEndOffset")(epoch=d.epoch, end_offset=d.offset)
    if r.snapshot_id is not None:
        s = r.snapshot_id
        tagged["snapshot_id"] = _nested(cls, "SnapshotId")(end_offset=s.offset, epoch=s.epoch)
    part = _make(
        pcls,
        partition_index=METADATA_PARTITION,
        error_code=code,
        high_watermark=r.high_watermark,
        last_stable_offset=-1,
        log_start_offset=r.log_start_offset,
        aborted_transactions=(),
        preferred_read_replica=-1,
        records=encode_batches(r.batches) if r.batches else b"",
        **tagged,
    )
    topic = _nested(cls, "FetchableTopicResponse")(topic_id=METADATA_TOPIC_ID, partitions=(part,))
    return _make(
        cls,
        throttle_time=_ZERO_MS,
        error_code=top,
        session_id=0,
        responses=(topic,),
        **_node_endpoints(cls, r.leader_id, endpoints),
    )


def _enc_fetch_snapshot_response(cls: type[Any], r: FetchSnapshotResponse, endpoints: Endpoints | None) -> Any:
    top, code = _top_and_partition(r.error)
    snap = r.snapshot_id if r.snapshot_id is not None else OffsetAndEpoch(-1, -1)
    part = _make(
        _nested(cls, "PartitionSnapshot"),
        index=METADATA_PARTITION,
        error_code=code,
        snapshot_id=_nested(cls, "SnapshotId")(end_offset=snap.offset, epoch=snap.epoch),
        current_leader=_nested(cls, "LeaderIdAndEpoch")(leader_id=r.leader_id, leader_epoch=r.leader_epoch),
        size=r.size,
        position=r.position,
        unaligned_records=r.data,
    )
    topic = _nested(cls, "TopicSnapshot")(name=METADATA_TOPIC, partitions=(part,))
    return _make(
        cls, throttle_time=_ZERO_MS, error_code=top, topics=(topic,), **_node_endpoints(cls, r.leader_id, endpoints)
    )


def _enc_describe_response(cls: type[Any], d: QuorumDescription, endpoints: Endpoints | None) -> Any:
    rcls = _nested(cls, "ReplicaState")

    def replica(r: ReplicaDescription) -> Any:
        return _make(
            rcls,
            replica_id=r.replica_id,
            replica_directory_id=_wire_uuid(r.directory_id),
            log_end_offset=r.log_end_offset,
            last_fetch_timestamp=r.last_fetch_ms,
            last_caught_up_timestamp=r.last_caught_up_ms,
        )

    part = _make(
        _nested(cls, "PartitionData"),
        partition_index=METADATA_PARTITION,
        error_code=KioErrorCode.none,
        error_message=None,
        leader_id=d.leader_id,
        leader_epoch=d.leader_epoch,
        high_watermark=d.high_watermark,
        current_voters=tuple(replica(r) for r in d.voters),
        observers=tuple(replica(r) for r in d.observers),
    )
    nodes: tuple[Any, ...] = ()
    if _has(cls, "nodes") and endpoints:
        node, listener = _nested(cls, "Node"), _nested(cls, "Listener")
        nodes = tuple(
            node(node_id=i, listeners=(listener(name=DEFAULT_LISTENER, host=h, port=p),))
            for i, (h, p) in sorted(endpoints.items())
        )
    return _make(cls, error_code=KioErrorCode.none, error_message=None, topics=(_topic(cls, part),), nodes=nodes)


def _enc_describe_error(cls: type[Any], e: ErrorResult) -> Any:
    """A partition-level DescribeQuorum error (e.g. NOT_LEADER_OR_FOLLOWER with a leader hint)."""
    part = _make(
        _nested(cls, "PartitionData"),
        partition_index=METADATA_PARTITION,
        error_code=_kio_error(e.error),
        error_message=e.message,
        leader_id=e.leader_id,
        leader_epoch=e.leader_epoch,
        high_watermark=-1,
        current_voters=(),
        observers=(),
    )
    return _make(cls, error_code=KioErrorCode.none, error_message=None, topics=(_topic(cls, part),), nodes=())


def _api_versions_body(cls: type[Any], result: ApiVersionsResult) -> Any:
    api_version = _nested(cls, "ApiVersion")
    keys = tuple(
        api_version(api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in sorted(result.api_keys.items())
    )
    features: dict[str, Any] = {}
    if _has(cls, "finalized_features"):
        supported, finalized = _nested(cls, "SupportedFeatureKey"), _nested(cls, "FinalizedFeatureKey")
        features = {
            "supported_features": tuple(
                supported(name=n, min_version=lo, max_version=hi)
                for n, (lo, hi) in sorted(result.supported_features.items())
            ),
            "finalized_features_epoch": result.finalized_epoch,
            "finalized_features": tuple(
                finalized(name=n, min_version_level=level, max_version_level=level)
                for n, level in sorted(result.finalized_features.items())
                if level > 0
            ),
        }
    return _make(cls, error_code=_kio_error(result.error), api_keys=keys, throttle_time=_ZERO_MS, **features)


def _error_body(cls: type[Any], error: ErrorCode, message: str | None) -> Any:
    """A top-level error with no partitions, for any of our response schemas."""
    return _make(
        cls,
        error_code=_kio_error(error),
        error_message=message,
        throttle_time=_ZERO_MS,
        session_id=0,
        topics=(),
        responses=(),
        nodes=(),
        api_keys=(),
    )


_RESPONSE_TYPES: Final[dict[int, type[Any]]] = {
    ApiKey.VOTE: VoteResponse,
    ApiKey.BEGIN_QUORUM_EPOCH: BeginQuorumEpochResponse,
    ApiKey.END_QUORUM_EPOCH: EndQuorumEpochResponse,
    ApiKey.FETCH: FetchResponse,
    ApiKey.FETCH_SNAPSHOT: FetchSnapshotResponse,
    ApiKey.DESCRIBE_QUORUM: QuorumDescription,
    ApiKey.API_VERSIONS: ApiVersionsResult,
}


def _response_frame(api_key: int, version: int, correlation_id: int, build: Callable[[type[Any]], Any]) -> bytes:
    cls = _schema_or_raise(api_key, version, False)
    try:
        body = build(cls)
    except (TypeError, ValueError) as exc:
        raise WireError(ErrorCode.INVALID_REQUEST, f"cannot encode {cls.__name__}: {exc}") from exc
    return _frame(cls.__header_schema__(correlation_id=correlation_id), body)


def encode_response(
    request: DecodedRequest,
    response: Response | QuorumDescription | ApiVersionsResult | ErrorResult | ErrorCode,
    *,
    cluster_id: str | None = None,
    endpoints: Endpoints | None = None,
) -> bytes:
    """A complete response frame answering `request`, at the request's version.

    `response` is the core response of the request's type; a QuorumDescription or
    ErrorResult for DescribeQuorum; an ApiVersionsResult for ApiVersions; or a bare
    ErrorCode (a top-level error with no partitions, for any api). `endpoints` (node
    id -> (host, port)) fills NodeEndpoints for the leader (and DescribeQuorum v2's
    node list). `cluster_id` is accepted for symmetry with requests; no KRaft
    response carries one. Raises TypeError when the response does not fit the
    request, WireError when a value cannot be encoded.
    """
    del cluster_id
    key, version = request.api_key, request.api_version
    if isinstance(response, ErrorCode):
        return encode_error_response(request.header, response)
    if key == ApiKey.API_VERSIONS:
        if isinstance(response, ErrorResult):
            return encode_error_response(request.header, response.error, message=response.message)
        if not isinstance(response, ApiVersionsResult):
            raise TypeError(f"ApiVersions needs an ApiVersionsResult, not {type(response).__name__}")
        return _encode_api_versions(request.correlation_id, version, response)
    if isinstance(response, ErrorResult):
        if key == ApiKey.DESCRIBE_QUORUM:
            return _response_frame(key, version, request.correlation_id, lambda cls: _enc_describe_error(cls, response))
        return encode_error_response(request.header, response.error, message=response.message)
    expected = _RESPONSE_TYPES.get(key)
    if expected is None or not isinstance(response, expected):
        raise TypeError(f"api {key} cannot answer with {type(response).__name__}")
    build: Callable[[type[Any]], Any]
    match response:
        case VoteResponse():
            build = lambda cls: _enc_vote_response(cls, response, endpoints)  # noqa: E731
        case BeginQuorumEpochResponse() | EndQuorumEpochResponse():
            build = lambda cls: _enc_simple_response(cls, response, endpoints)  # noqa: E731
        case FetchResponse():
            if version == fetch_direct.DIRECT_VERSION:
                direct = _encode_fetch_response_direct(request.correlation_id, response, endpoints)
                if direct is not None:
                    return direct
            build = lambda cls: _enc_fetch_response(cls, response, endpoints)  # noqa: E731
        case FetchSnapshotResponse():
            build = lambda cls: _enc_fetch_snapshot_response(cls, response, endpoints)  # noqa: E731
        case QuorumDescription():
            build = lambda cls: _enc_describe_response(cls, response, endpoints)  # noqa: E731
        case _:  # pragma: no cover - excluded by the isinstance check above
            raise TypeError(type(response).__name__)
    return _response_frame(key, version, request.correlation_id, build)


def _encode_api_versions(correlation_id: int, version: int, result: ApiVersionsResult) -> bytes:
    # KIP-511: an error answer uses the v0 body, which every client can parse.
    body_version = 0 if result.error != ErrorCode.NONE else version
    return _response_frame(
        ApiKey.API_VERSIONS, body_version, correlation_id, lambda cls: _api_versions_body(cls, result)
    )


def encode_error_response(
    header: RequestHeaderInfo | DecodedRequest, error: ErrorCode, *, message: str | None = None
) -> bytes:
    """A top-level error response to a request whose header parsed.

    ApiVersions answers with the v0 body (listing advertised_api_versions() when the error is
    UNSUPPORTED_VERSION, per KIP-511), whatever version was asked. Other apis answer
    at the request's version. Raises WireError when no response can be encoded (an
    unknown api key or a version kio has no schema for); the caller should then
    close the connection, as Kafka does.
    """
    if isinstance(header, DecodedRequest):
        header = header.header
    key = header.api_key
    if key == ApiKey.API_VERSIONS:
        keys = advertised_api_versions() if error == ErrorCode.UNSUPPORTED_VERSION else {}
        return _encode_api_versions(header.correlation_id, 0, ApiVersionsResult(keys, error))
    if key not in API_VERSIONS:
        raise WireError(ErrorCode.INVALID_REQUEST, f"cannot answer unknown api key {key}")
    return _response_frame(key, header.api_version, header.correlation_id, lambda cls: _error_body(cls, error, message))


def error_response_for(error: WireError) -> bytes | None:
    """The response frame that reports `error` to its sender, or None when the
    request cannot be answered (its header did not parse, or its api key/version
    has no response schema): then close the connection."""
    if error.header is None:
        return None
    try:
        return encode_error_response(error.header, error.code, message=error.message)
    except WireError:
        return None


# --------------------------------------------------------------------------- responses: decode


def _response_body(api_key: int, version: int, frame: bytes) -> tuple[int, Any]:
    low, high = API_VERSIONS.get(api_key, (0, -1))
    cls = _schema(api_key, version, False) if low <= version <= high else None
    if cls is None:
        raise WireError(ErrorCode.UNSUPPORTED_VERSION, f"api {api_key} v{version} is not served here")
    header, pos = entity_reader(cls.__header_schema__)(frame, 0)
    if api_key == ApiKey.API_VERSIONS and version > 0 and len(frame) >= pos + 2:
        (error,) = struct.unpack_from(">h", frame, pos)
        if error != 0:
            # KIP-511: error answers may carry the v0 body; fall back to the asked version.
            v0 = _schema_or_raise(api_key, 0, False)
            try:
                body, end = entity_reader(v0)(frame, pos)
                if end == len(frame):
                    return header.correlation_id, body
            except MalformedError:
                pass
    body, end = entity_reader(cls)(frame, pos)
    if end != len(frame):
        raise WireError(ErrorCode.INVALID_REQUEST, f"{len(frame) - end} trailing bytes after the response")
    return header.correlation_id, body


def _first_partition(topics: Any, *, topic_field: str, partition_field: str) -> Any:
    return _only_partition(None, topics, topic_field=topic_field, partition_field=partition_field)


def _dec_simple_response(body: Any, kind: type[Any], request: Call | None) -> Any:
    top = error_from_wire(int(body.error_code))
    pre_vote = isinstance(request, VoteRequest) and request.pre_vote
    extra: dict[str, Any] = {"vote_granted": False, "pre_vote": pre_vote} if kind is VoteResponse else {}
    if top != ErrorCode.NONE and not body.topics:
        return kind(top, -1, -1, **extra)
    p = _first_partition(body.topics, topic_field="topic_name", partition_field="partition_index")
    error = top if top != ErrorCode.NONE else error_from_wire(int(p.error_code))
    if kind is VoteResponse:
        extra["vote_granted"] = bool(p.vote_granted)
    return kind(error, p.leader_id, p.leader_epoch, **extra)


def _present(epoch: int, offset: int) -> OffsetAndEpoch | None:
    return None if epoch == -1 and offset == -1 else OffsetAndEpoch(epoch=epoch, offset=offset)


def _dec_fetch_response(body: Any) -> FetchResponse:
    top = error_from_wire(int(body.error_code))
    if top != ErrorCode.NONE and not body.responses:
        return FetchResponse(top, -1, -1)
    p = _first_partition(body.responses, topic_field="topic_id", partition_field="partition_index")
    return _fetch_response(
        top,
        int(p.error_code),
        p.high_watermark,
        p.log_start_offset,
        (p.diverging_epoch.epoch, p.diverging_epoch.end_offset),
        (p.current_leader.leader_id, p.current_leader.leader_epoch),
        (p.snapshot_id.epoch, p.snapshot_id.end_offset),
        p.records or b"",
    )


def _fetch_response(
    top: ErrorCode,
    partition_code: int,
    high_watermark: int,
    log_start_offset: int,
    diverging: tuple[int, int],
    leader: tuple[int, int],
    snapshot: tuple[int, int],
    records: bytes | memoryview,
) -> FetchResponse:
    """The FetchResponse of one partition's answer (kio's or `fetch_direct`'s): the pairs
    are (epoch, offset) but `leader`, (leader_id, leader_epoch); (-1, -1) is absent."""
    error = top if top != ErrorCode.NONE else error_from_wire(partition_code)
    try:
        batches, _ = decode_batches(records, verify_crc=True)
    except CorruptRecordError as exc:
        raise WireError(ErrorCode.CORRUPT_MESSAGE, f"corrupt records in fetch response: {exc}") from exc
    return FetchResponse(
        error=error,
        leader_id=leader[0],
        leader_epoch=leader[1],
        high_watermark=high_watermark,
        log_start_offset=log_start_offset,
        diverging_epoch=_present(*diverging),
        snapshot_id=_present(*snapshot),
        batches=tuple(batches),
    )


def _dec_fetch_snapshot_response(body: Any) -> FetchSnapshotResponse:
    top = error_from_wire(int(body.error_code))
    if top != ErrorCode.NONE and not body.topics:
        return FetchSnapshotResponse(top, -1, -1)
    p = _first_partition(body.topics, topic_field="name", partition_field="index")
    error = top if top != ErrorCode.NONE else error_from_wire(int(p.error_code))
    return FetchSnapshotResponse(
        error=error,
        leader_id=p.current_leader.leader_id,
        leader_epoch=p.current_leader.leader_epoch,
        snapshot_id=_present(p.snapshot_id.epoch, p.snapshot_id.end_offset),
        size=p.size,
        position=p.position,
        data=bytes(p.unaligned_records),
    )


def _dec_describe_response(body: Any) -> QuorumDescription | ErrorResult:
    top = error_from_wire(int(body.error_code))
    if top != ErrorCode.NONE:
        return ErrorResult(top, getattr(body, "error_message", None))
    p = _first_partition(body.topics, topic_field="topic_name", partition_field="partition_index")
    error = error_from_wire(int(p.error_code))
    if error != ErrorCode.NONE:
        return ErrorResult(error, getattr(p, "error_message", None), p.leader_id, p.leader_epoch)

    def replicas(states: Any) -> tuple[ReplicaDescription, ...]:
        return tuple(
            ReplicaDescription(
                replica_id=r.replica_id,
                log_end_offset=r.log_end_offset,
                last_fetch_ms=getattr(r, "last_fetch_timestamp", -1),
                last_caught_up_ms=getattr(r, "last_caught_up_timestamp", -1),
                directory_id=_read_uuid(r, "replica_directory_id"),
            )
            for r in states or ()
        )

    return QuorumDescription(
        leader_id=p.leader_id,
        leader_epoch=p.leader_epoch,
        high_watermark=p.high_watermark,
        voters=replicas(p.current_voters),
        observers=replicas(p.observers),
    )


def _dec_api_versions_response(body: Any) -> ApiVersionsResult:
    keys = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in body.api_keys or ()}
    return ApiVersionsResult(
        keys,
        error_from_wire(int(body.error_code)),
        {str(f.name): (int(f.min_version), int(f.max_version)) for f in getattr(body, "supported_features", ())},
        {str(f.name): int(f.max_version_level) for f in getattr(body, "finalized_features", ())},
        int(getattr(body, "finalized_features_epoch", -1)),
    )


def decode_response(
    api_key: int, api_version: int, frame: bytes | bytearray | memoryview, *, request: Call | None = None
) -> tuple[int, DecodedResponse]:
    """Decode a response frame (without its length prefix) to (correlation id, message).

    Raft RPCs decode to their core response (top-level errors included, with
    leader -1/epoch -1 when the partition is absent); DescribeQuorum to a
    QuorumDescription or an ErrorResult; ApiVersions to an ApiVersionsResult.
    Pass the `request` that was sent so a Vote answer gets its `pre_vote` flag
    (the response does not echo it). Raises only WireError.
    """
    try:
        return _decode_response(api_key, api_version, bytes(frame), request)
    except WireError:
        raise
    except MalformedError as exc:
        raise WireError(ErrorCode.INVALID_REQUEST, f"malformed response to api {api_key}: {exc}") from exc
    except Exception as exc:  # defensive: the contract is "only WireError"
        raise WireError(ErrorCode.INVALID_REQUEST, f"undecodable response: {exc!r}") from exc


def _decode_response(api_key: int, api_version: int, frame: bytes, request: Call | None) -> tuple[int, DecodedResponse]:
    if api_key == ApiKey.FETCH and api_version == fetch_direct.DIRECT_VERSION:
        a = fetch_direct.decode_fetch_response(frame, topic_id=METADATA_TOPIC_ID)
        if a is not None:
            top = error_from_wire(a.top_code)
            return a.correlation_id, _fetch_response(
                top,
                a.partition_code,
                a.high_watermark,
                a.log_start_offset,
                a.diverging_epoch,
                a.leader,
                a.snapshot_id,
                a.records,
            )
    correlation_id, body = _response_body(api_key, api_version, frame)
    message: DecodedResponse
    match api_key:
        case ApiKey.VOTE:
            message = _dec_simple_response(body, VoteResponse, request)
        case ApiKey.BEGIN_QUORUM_EPOCH:
            message = _dec_simple_response(body, BeginQuorumEpochResponse, request)
        case ApiKey.END_QUORUM_EPOCH:
            message = _dec_simple_response(body, EndQuorumEpochResponse, request)
        case ApiKey.FETCH:
            message = _dec_fetch_response(body)
        case ApiKey.FETCH_SNAPSHOT:
            message = _dec_fetch_snapshot_response(body)
        case ApiKey.DESCRIBE_QUORUM:
            message = _dec_describe_response(body)
        case ApiKey.API_VERSIONS:
            message = _dec_api_versions_response(body)
        case _:  # pragma: no cover - _response_body rejects other keys
            raise WireError(ErrorCode.INVALID_REQUEST, f"unknown api key {api_key}")
    return correlation_id, message


def response_node_endpoints(api_key: int, api_version: int, frame: bytes | bytearray | memoryview) -> Endpoints:
    """The NodeEndpoints a Raft response carries (Fetch v17, Vote/BeginQuorumEpoch/
    EndQuorumEpoch v1, FetchSnapshot v1): node id -> (host, port). How a replica that knows
    no voters (controller.quorum.bootstrap.servers) learns where the leader listens.
    Empty when the version has none or the frame does not parse."""
    try:
        _, body = _response_body(api_key, api_version, bytes(frame))
    except Exception:  # noqa: BLE001 - best effort: the caller decoded this frame already
        return {}
    return {int(n.node_id): (str(n.host), int(n.port)) for n in getattr(body, "node_endpoints", None) or ()}
