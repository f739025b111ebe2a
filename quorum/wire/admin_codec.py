"""Kafka-protocol codec for the controller's admin and broker-lifecycle RPCs.

Maps the typed values of `quorum.controller.requests` (plus DescribeConfigs,
UnregisterBroker and DescribeCluster, defined here) to Kafka frames and back:

    CreateTopics 19, DeleteTopics 20, DescribeConfigs 32, CreatePartitions 37,
    ElectLeaders 43, IncrementalAlterConfigs 44, AlterPartition 56,
    DescribeCluster 60, BrokerRegistration 62, BrokerHeartbeat 63, UnregisterBroker 64,
    AllocateProducerIds 67

Server side: `decode_admin_request` (a frame without its length prefix) ->
`DecodedAdmin`; `encode_admin_response` / `encode_admin_error` -> a complete frame
at the request's version. Client side: `encode_admin_request` (the highest version
served unless told otherwise) and `decode_admin_response`.

As in `quorum.wire.codec`, entities and writers come from kio's schemas, and all
reading goes through `quorum.wire._reader` (never kio's native reader, which can
abort the process on hostile lengths). Decoders raise only `codec.WireError`.

Version ranges (`ADMIN_API_VERSIONS`) are every version kio 0.6.5 has a schema for;
kio follows Kafka 4.x, whose baselines (KIP-896) dropped the oldest versions. Clients
negotiate the highest version both sides have, so every client in use lands inside
them (see the comment on the table).

What a version cannot carry is dropped on encode and defaulted on decode (e.g.
DeleteTopics error messages before v5, topic ids before CreateTopics v7, broker
epochs in the ISR before AlterPartition v3). A request whose items our typed values
cannot express (a null topic config value, two assignments for one partition, a
DeleteTopics state with both or neither of name and id, an unknown config resource
type, operation or election type) raises `AdminRequestError`, a WireError that
carries the items it could read, so `admin_error_response_for` answers every item
with the error, as Kafka's blanket error responses do.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final, TypeAlias

from quorum.controller.config_entry import ConfigEntry, ConfigSource, ConfigSynonym, ConfigType
from quorum.controller.requests import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    AlterConfigOp,
    AlterConfigOpType,
    AlterConfigsResource,
    AlterConfigsResult,
    AlterPartitionItem,
    AlterPartitionRequest,
    AlterPartitionResponse,
    AlterPartitionResult,
    BrokerEndpoint,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    ConfigResourceType,
    CreatableTopic,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsResult,
    CreateTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    ElectionType,
    ElectLeaderResult,
    ElectLeadersRequest,
    ElectLeadersResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    IsrMember,
    PartitionsIncrease,
)
from quorum.frozen_init import fast_frozen_init
from quorum.kafka_errors import default_message
from quorum.raft.errors import ErrorCode
from quorum.wire import admin_direct, api_frames
from quorum.wire._reader import MalformedError, entity_reader
from quorum.wire.admin_versions import ADMIN_API_VERSIONS, AdminApiKey
from quorum.wire.codec import (
    RequestHeaderInfo,
    WireError,
    _frame,
    _kio_error,
    _make,
    _nested,
    _peek_header,
    _schema,
)

__all__ = [
    "ADMIN_API_VERSIONS",
    "ADMIN_REQUEST_VERSIONS",
    "AdminApiKey",
    "AdminCall",
    "AdminReply",
    "AdminRequestError",
    "ConfigEntry",
    "ConfigSource",
    "ConfigSynonym",
    "ConfigType",
    "DecodedAdmin",
    "DescribeClusterBroker",
    "DescribeClusterRequest",
    "DescribeClusterResponse",
    "DescribeConfigsRequest",
    "DescribeConfigsResource",
    "DescribeConfigsResponse",
    "DescribeConfigsResult",
    "UnregisterBrokerRequest",
    "UnregisterBrokerResponse",
    "admin_api_key",
    "admin_error_response_for",
    "decode_admin_request",
    "decode_admin_response",
    "encode_admin_error",
    "encode_admin_request",
    "encode_admin_response",
    "is_admin_api",
]


# The version `encode_admin_request` sends unless told otherwise: the highest served.
ADMIN_REQUEST_VERSIONS: Final[dict[int, int]] = {key: high for key, (_, high) in ADMIN_API_VERSIONS.items()}

_ZERO_UUID: Final = uuid.UUID(int=0)
_ZERO_MS: Final = timedelta(0)
_AUTHORIZED_OPERATIONS_OMITTED: Final = -(2**31)  # Kafka's INT32_MIN sentinel

# --------------------------------------------------------------------------- typed values defined here


@dataclass(frozen=True, slots=True)
class DescribeConfigsResource:
    resource_type: int  # a ConfigResourceType value; others are passed through for the controller to refuse
    resource_name: str
    config_names: tuple[str, ...] | None = None  # None = every config; never empty (below)

    def __post_init__(self) -> None:
        # Kafka (ConfigHelper): empty configuration_keys mean every config, as null does.
        if self.config_names is not None and not self.config_names:
            object.__setattr__(self, "config_names", None)


@dataclass(frozen=True, slots=True)
class DescribeConfigsRequest:
    resources: tuple[DescribeConfigsResource, ...]
    include_synonyms: bool = False
    include_documentation: bool = False  # v3+


fast_frozen_init(DescribeConfigsRequest)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class DescribeConfigsResult:
    resource_type: int
    resource_name: str
    error_code: int = 0
    message: str | None = None
    entries: tuple[ConfigEntry, ...] = ()


fast_frozen_init(DescribeConfigsResult)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class DescribeConfigsResponse:
    results: tuple[DescribeConfigsResult, ...]


fast_frozen_init(DescribeConfigsResponse)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class UnregisterBrokerRequest:
    broker_id: int


fast_frozen_init(UnregisterBrokerRequest)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class UnregisterBrokerResponse:
    error_code: int
    message: str | None = None


fast_frozen_init(UnregisterBrokerResponse)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class DescribeClusterRequest:
    include_cluster_authorized_operations: bool = False
    endpoint_type: int = 1  # v1+: 1 = brokers, 2 = controllers (KIP-919)
    include_fenced_brokers: bool = False  # v2+


fast_frozen_init(DescribeClusterRequest)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class DescribeClusterBroker:
    broker_id: int
    host: str
    port: int
    rack: str | None = None
    is_fenced: bool = False  # v2+


fast_frozen_init(DescribeClusterBroker)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class DescribeClusterResponse:
    cluster_id: str
    controller_id: int = -1
    brokers: tuple[DescribeClusterBroker, ...] = ()
    error_code: int = 0
    message: str | None = None
    endpoint_type: int = 1  # v1+
    cluster_authorized_operations: int = _AUTHORIZED_OPERATIONS_OMITTED


fast_frozen_init(DescribeClusterResponse)  # not a decorator: mypyc makes a decorated class a Python class


AdminCall: TypeAlias = (
    CreateTopicsRequest
    | DeleteTopicsRequest
    | CreatePartitionsRequest
    | IncrementalAlterConfigsRequest
    | DescribeConfigsRequest
    | ElectLeadersRequest
    | BrokerRegistrationRequest
    | BrokerHeartbeatRequest
    | AlterPartitionRequest
    | UnregisterBrokerRequest
    | DescribeClusterRequest
    | AllocateProducerIdsRequest
)
AdminReply: TypeAlias = (
    CreateTopicsResponse
    | DeleteTopicsResponse
    | CreatePartitionsResponse
    | IncrementalAlterConfigsResponse
    | DescribeConfigsResponse
    | ElectLeadersResponse
    | BrokerRegistrationResponse
    | BrokerHeartbeatResponse
    | AlterPartitionResponse
    | UnregisterBrokerResponse
    | DescribeClusterResponse
    | AllocateProducerIdsResponse
)


@dataclass(frozen=True, slots=True, init=False)
class DecodedAdmin:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    header: RequestHeaderInfo
    request: AdminCall

    # Compiled with the module (the dataclass decorator's __init__ would run as Python there);
    # uncompiled, fast_frozen_init replaces it.
    def __init__(
        self,
        api_key: int,
        api_version: int,
        correlation_id: int,
        client_id: str | None,
        header: RequestHeaderInfo,
        request: AdminCall,
    ) -> None:
        object.__setattr__(self, "api_key", api_key)
        object.__setattr__(self, "api_version", api_version)
        object.__setattr__(self, "correlation_id", correlation_id)
        object.__setattr__(self, "client_id", client_id)
        object.__setattr__(self, "header", header)
        object.__setattr__(self, "request", request)


fast_frozen_init(DecodedAdmin)  # not a decorator: mypyc makes a decorated class a Python class


class AdminRequestError(WireError):
    """A request that parsed but that the typed values cannot express.

    `decoded.request` holds the items that could be read (e.g. every topic name),
    so that `admin_error_response_for` can answer each with `error_code` (a Kafka
    error number: INVALID_CONFIG, INVALID_REPLICA_ASSIGNMENT, INVALID_REQUEST).
    `code` is INVALID_REQUEST, as for every malformed request.
    """

    def __init__(self, error_code: int, message: str, *, decoded: DecodedAdmin) -> None:
        super().__init__(ErrorCode.INVALID_REQUEST, message, header=decoded.header)
        self.error_code = error_code
        self.decoded = decoded


class _Reject(Exception):
    def __init__(self, error_code: int, message: str, skeleton: AdminCall) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message
        self.skeleton = skeleton


_INVALID_REPLICA_ASSIGNMENT: Final = 39
_INVALID_CONFIG: Final = 40
_INVALID_REQUEST: Final = int(ErrorCode.INVALID_REQUEST)

# --------------------------------------------------------------------------- helpers


def _ms(value: timedelta) -> int:
    return value // timedelta(milliseconds=1)


def _td(ms: int) -> timedelta:
    return timedelta(milliseconds=ms)


def _code(value: Any) -> int:
    """An error code as read (a kio ErrorCode, or a plain int kio does not know)."""
    return int(value)


def _uuid_or_zero(value: uuid.UUID | None) -> uuid.UUID:
    return _ZERO_UUID if value is None else value


def _uuid_or_none(value: uuid.UUID | None) -> uuid.UUID | None:
    return None if value is None or value == _ZERO_UUID else value


def _grouped(pairs: Any) -> dict[Any, list[Any]]:
    """(key, item) pairs grouped by key, keys in first-appearance order."""
    out: dict[Any, list[Any]] = {}
    for key, item in pairs:
        out.setdefault(key, []).append(item)
    return out


def _resource_type(value: int) -> ConfigResourceType | None:
    try:
        return ConfigResourceType(value)
    except ValueError:
        return None


# --------------------------------------------------------------------------- CreateTopics (19)


def _enc_create_topics(cls: type[Any], r: CreateTopicsRequest, version: int) -> Any:
    tcls = _nested(cls, "CreatableTopic")
    acls, ccls = _nested(cls, "CreatableReplicaAssignment"), _nested(cls, "CreatableTopicConfig")
    topics = tuple(
        tcls(
            name=t.name,
            num_partitions=t.num_partitions,
            replication_factor=t.replication_factor,
            assignments=tuple(
                acls(partition_index=p, broker_ids=tuple(ids)) for p, ids in (t.assignments or {}).items()
            ),
            configs=tuple(ccls(name=k, value=v) for k, v in t.configs.items()),
        )
        for t in r.topics
    )
    return _make(cls, topics=topics, timeout=_td(r.timeout_ms), validate_only=r.validate_only)


def _dec_create_topics(body: Any, version: int) -> CreateTopicsRequest:
    topics: list[CreatableTopic] = []
    reject: tuple[int, str] | None = None
    for t in body.topics:
        assignments: dict[int, tuple[int, ...]] = {}
        for a in t.assignments:
            if a.partition_index in assignments and reject is None:
                reject = (
                    _INVALID_REPLICA_ASSIGNMENT,
                    f"Found multiple manual partition assignments for partition {a.partition_index} of {t.name}",
                )
            assignments[a.partition_index] = tuple(a.broker_ids)
        configs: dict[str, str] = {}
        for c in t.configs:
            if c.value is None:
                if reject is None:
                    reject = (_INVALID_CONFIG, f"Null value not supported for topic configs: {c.name}")
                continue
            configs[c.name] = c.value
        topics.append(
            CreatableTopic(
                name=t.name,
                num_partitions=t.num_partitions,
                replication_factor=t.replication_factor,
                assignments=assignments or None,
                configs=configs,
            )
        )
    request = CreateTopicsRequest(tuple(topics), validate_only=body.validate_only, timeout_ms=_ms(body.timeout))
    if reject is not None:
        skeleton = CreateTopicsRequest(tuple(CreatableTopic(t.name) for t in topics), validate_only=True)
        raise _Reject(*reject, skeleton)
    return request


def _enc_create_topics_response(cls: type[Any], r: CreateTopicsResponse, version: int) -> Any:
    rcls = _nested(cls, "CreatableTopicResult")
    has_configs = version >= 5
    ccls = _nested(cls, "CreatableTopicConfigs") if has_configs else None

    def result(t: CreateTopicResult) -> Any:
        configs: tuple[Any, ...] = ()
        if ccls is not None:
            configs = tuple(
                ccls(
                    name=k,
                    value=v,
                    read_only=False,
                    config_source=ConfigSource.DYNAMIC_TOPIC_CONFIG,
                    is_sensitive=False,
                )
                for k, v in t.configs.items()
            )
        return _make(
            rcls,
            name=t.name,
            topic_id=t.topic_id,
            error_code=_kio_error(t.error_code),
            error_message=t.message,
            num_partitions=t.num_partitions,
            replication_factor=t.replication_factor,
            configs=configs,
        )

    return _make(cls, throttle_time=_ZERO_MS, topics=tuple(result(t) for t in r.topics))


def _dec_create_topics_response(body: Any, version: int) -> CreateTopicsResponse:
    return CreateTopicsResponse(
        tuple(
            CreateTopicResult(
                name=t.name,
                error_code=_code(t.error_code),
                message=t.error_message,
                topic_id=_uuid_or_none(getattr(t, "topic_id", None)),
                num_partitions=getattr(t, "num_partitions", -1),
                replication_factor=getattr(t, "replication_factor", -1),
                configs={c.name: c.value for c in getattr(t, "configs", None) or () if c.value is not None},
            )
            for t in body.topics
        )
    )


def _err_create_topics(r: CreateTopicsRequest | None, code: int, message: str | None) -> CreateTopicsResponse:
    topics = r.topics if r is not None else ()
    return CreateTopicsResponse(tuple(CreateTopicResult(t.name, code, message) for t in topics))


# --------------------------------------------------------------------------- DeleteTopics (20)


def _enc_delete_topics(cls: type[Any], r: DeleteTopicsRequest, version: int) -> Any:
    if version >= 6:
        scls = _nested(cls, "DeleteTopicState")
        states = tuple(scls(name=n, topic_id=None) for n in r.names) + tuple(
            scls(name=None, topic_id=i) for i in r.topic_ids
        )
        return cls(topics=states, timeout=_td(r.timeout_ms))
    if r.topic_ids:
        raise WireError(ErrorCode.UNSUPPORTED_VERSION, f"DeleteTopics by topic id needs v6+, not v{version}")
    return cls(topic_names=tuple(r.names), timeout=_td(r.timeout_ms))


def _dec_delete_topics(body: Any, version: int) -> DeleteTopicsRequest:
    timeout_ms = _ms(body.timeout)
    if version < 6:
        return DeleteTopicsRequest(names=tuple(body.topic_names), timeout_ms=timeout_ms)
    names: list[str] = []
    ids: list[uuid.UUID] = []
    reject: str | None = None
    for s in body.topics:
        topic_id = _uuid_or_none(s.topic_id)
        if s.name is not None:
            names.append(s.name)
            if topic_id is not None:
                reject = reject or "You may not specify both topic name and topic id."
        elif topic_id is not None:
            ids.append(topic_id)
        else:
            reject = reject or "Neither topic name nor id were specified."
    request = DeleteTopicsRequest(names=tuple(names), topic_ids=tuple(ids), timeout_ms=timeout_ms)
    if reject is not None:
        raise _Reject(_INVALID_REQUEST, reject, request)
    return request


def _enc_delete_topics_response(cls: type[Any], r: DeleteTopicsResponse, version: int) -> Any:
    rcls = _nested(cls, "DeletableTopicResult")
    results = tuple(
        _make(
            rcls,
            name=t.name if version >= 6 else (t.name or ""),
            topic_id=t.topic_id,
            error_code=_kio_error(t.error_code),
            error_message=t.message,
        )
        for t in r.topics
    )
    return cls(throttle_time=_ZERO_MS, responses=results)


def _dec_delete_topics_response(body: Any, version: int) -> DeleteTopicsResponse:
    return DeleteTopicsResponse(
        tuple(
            DeleteTopicResult(
                name=t.name,
                topic_id=_uuid_or_none(getattr(t, "topic_id", None)),
                error_code=_code(t.error_code),
                message=getattr(t, "error_message", None),
            )
            for t in body.responses
        )
    )


def _err_delete_topics(r: DeleteTopicsRequest | None, code: int, message: str | None) -> DeleteTopicsResponse:
    if r is None:
        return DeleteTopicsResponse(())
    by_name = tuple(DeleteTopicResult(n, None, code, message) for n in r.names)
    by_id = tuple(DeleteTopicResult(None, i, code, message) for i in r.topic_ids)
    return DeleteTopicsResponse(by_name + by_id)


# --------------------------------------------------------------------------- CreatePartitions (37)


def _enc_create_partitions(cls: type[Any], r: CreatePartitionsRequest, version: int) -> Any:
    tcls, acls = _nested(cls, "CreatePartitionsTopic"), _nested(cls, "CreatePartitionsAssignment")
    topics = tuple(
        tcls(
            name=t.name,
            count=t.count,
            assignments=None if t.assignments is None else tuple(acls(broker_ids=tuple(a)) for a in t.assignments),
        )
        for t in r.topics
    )
    return cls(topics=topics, timeout=_td(r.timeout_ms), validate_only=r.validate_only)


def _dec_create_partitions(body: Any, version: int) -> CreatePartitionsRequest:
    topics = tuple(
        PartitionsIncrease(
            name=t.name,
            count=t.count,
            assignments=None if t.assignments is None else tuple(tuple(a.broker_ids) for a in t.assignments),
        )
        for t in body.topics
    )
    return CreatePartitionsRequest(topics, validate_only=body.validate_only, timeout_ms=_ms(body.timeout))


def _enc_create_partitions_response(cls: type[Any], r: CreatePartitionsResponse, version: int) -> Any:
    rcls = _nested(cls, "CreatePartitionsTopicResult")
    results = tuple(rcls(name=t.name, error_code=_kio_error(t.error_code), error_message=t.message) for t in r.topics)
    return cls(throttle_time=_ZERO_MS, results=results)


def _dec_create_partitions_response(body: Any, version: int) -> CreatePartitionsResponse:
    return CreatePartitionsResponse(
        tuple(CreatePartitionsResult(t.name, _code(t.error_code), t.error_message) for t in body.results)
    )


def _err_create_partitions(
    r: CreatePartitionsRequest | None, code: int, message: str | None
) -> CreatePartitionsResponse:
    topics = r.topics if r is not None else ()
    return CreatePartitionsResponse(tuple(CreatePartitionsResult(t.name, code, message) for t in topics))


# --------------------------------------------------------------------------- IncrementalAlterConfigs (44)


def _enc_incremental_alter_configs(cls: type[Any], r: IncrementalAlterConfigsRequest, version: int) -> Any:
    rcls, ccls = _nested(cls, "AlterConfigsResource"), _nested(cls, "AlterableConfig")
    resources = tuple(
        rcls(
            resource_type=int(res.resource_type),
            resource_name=res.resource_name,
            configs=tuple(ccls(name=o.name, config_operation=int(o.op), value=o.value) for o in res.ops),
        )
        for res in r.resources
    )
    return cls(resources=resources, validate_only=r.validate_only)


def _dec_incremental_alter_configs(body: Any, version: int) -> IncrementalAlterConfigsRequest:
    resources: list[AlterConfigsResource] = []
    reject: str | None = None
    for res in body.resources:
        rtype = _resource_type(res.resource_type)
        if rtype is None:
            reject = reject or f"Unsupported resource type {res.resource_type} for {res.resource_name!r}"
            continue
        ops: list[AlterConfigOp] = []
        for c in res.configs:
            try:
                op = AlterConfigOpType(c.config_operation)
            except ValueError:
                reject = reject or f"Unknown alter config operation type {c.config_operation} for {c.name}"
                continue
            ops.append(AlterConfigOp(c.name, op, c.value))
        resources.append(AlterConfigsResource(rtype, res.resource_name, tuple(ops)))
    request = IncrementalAlterConfigsRequest(tuple(resources), validate_only=body.validate_only)
    if reject is not None:
        skeleton = IncrementalAlterConfigsRequest(
            tuple(AlterConfigsResource(r.resource_type, r.resource_name, ()) for r in resources), validate_only=True
        )
        raise _Reject(_INVALID_REQUEST, reject, skeleton)
    return request


def _enc_incremental_alter_configs_response(cls: type[Any], r: IncrementalAlterConfigsResponse, version: int) -> Any:
    rcls = _nested(cls, "AlterConfigsResourceResponse")
    results = tuple(
        rcls(
            error_code=_kio_error(res.error_code),
            error_message=res.message,
            resource_type=int(res.resource_type),
            resource_name=res.resource_name,
        )
        for res in r.resources
    )
    return cls(throttle_time=_ZERO_MS, responses=results)


def _dec_incremental_alter_configs_response(body: Any, version: int) -> IncrementalAlterConfigsResponse:
    results: list[AlterConfigsResult] = []
    for res in body.responses:
        rtype = _resource_type(res.resource_type)
        if rtype is None:
            raise WireError(ErrorCode.INVALID_REQUEST, f"unknown config resource type {res.resource_type}")
        results.append(AlterConfigsResult(rtype, res.resource_name, _code(res.error_code), res.error_message))
    return IncrementalAlterConfigsResponse(tuple(results))


def _err_incremental_alter_configs(
    r: IncrementalAlterConfigsRequest | None, code: int, message: str | None
) -> IncrementalAlterConfigsResponse:
    resources = r.resources if r is not None else ()
    return IncrementalAlterConfigsResponse(
        tuple(AlterConfigsResult(res.resource_type, res.resource_name, code, message) for res in resources)
    )


# --------------------------------------------------------------------------- DescribeConfigs (32)


def _enc_describe_configs(cls: type[Any], r: DescribeConfigsRequest, version: int) -> Any:
    rcls = _nested(cls, "DescribeConfigsResource")
    resources = tuple(
        rcls(
            resource_type=res.resource_type,
            resource_name=res.resource_name,
            configuration_keys=None if res.config_names is None else tuple(res.config_names),
        )
        for res in r.resources
    )
    return _make(
        cls,
        resources=resources,
        include_synonyms=r.include_synonyms,
        include_documentation=r.include_documentation,
    )


def _dec_describe_configs(body: Any, version: int) -> DescribeConfigsRequest:
    resources = tuple(
        DescribeConfigsResource(
            resource_type=res.resource_type,
            resource_name=res.resource_name,
            config_names=None if res.configuration_keys is None else tuple(res.configuration_keys),
        )
        for res in body.resources
    )
    return DescribeConfigsRequest(
        resources,
        include_synonyms=body.include_synonyms,
        include_documentation=getattr(body, "include_documentation", False),
    )


def _enc_describe_configs_response(cls: type[Any], r: DescribeConfigsResponse, version: int) -> Any:
    rcls, ecls = _nested(cls, "DescribeConfigsResult"), _nested(cls, "DescribeConfigsResourceResult")
    scls = _nested(cls, "DescribeConfigsSynonym")

    def entry(e: ConfigEntry) -> Any:
        return _make(
            ecls,
            name=e.name,
            value=e.value,
            read_only=e.is_read_only,
            config_source=int(e.source),
            is_sensitive=e.is_sensitive,
            synonyms=tuple(scls(name=s.name, value=s.value, source=int(s.source)) for s in e.synonyms),
            config_type=int(e.config_type),
            documentation=e.documentation,
        )

    results = tuple(
        rcls(
            error_code=_kio_error(res.error_code),
            error_message=res.message,
            resource_type=res.resource_type,
            resource_name=res.resource_name,
            configs=tuple(entry(e) for e in res.entries),
        )
        for res in r.results
    )
    return cls(throttle_time=_ZERO_MS, results=results)


def _dec_describe_configs_response(body: Any, version: int) -> DescribeConfigsResponse:
    def entry(e: Any) -> ConfigEntry:
        return ConfigEntry(
            name=e.name,
            value=e.value,
            is_read_only=e.read_only,
            source=ConfigSource.for_id(e.config_source),
            is_sensitive=e.is_sensitive,
            synonyms=tuple(ConfigSynonym(s.name, s.value, ConfigSource.for_id(s.source)) for s in e.synonyms),
            documentation=getattr(e, "documentation", None),
            config_type=ConfigType.for_id(getattr(e, "config_type", ConfigType.UNKNOWN)),
        )

    return DescribeConfigsResponse(
        tuple(
            DescribeConfigsResult(
                resource_type=res.resource_type,
                resource_name=res.resource_name,
                error_code=_code(res.error_code),
                message=res.error_message,
                entries=tuple(entry(e) for e in res.configs),
            )
            for res in body.results
        )
    )


def _err_describe_configs(r: DescribeConfigsRequest | None, code: int, message: str | None) -> DescribeConfigsResponse:
    resources = r.resources if r is not None else ()
    return DescribeConfigsResponse(
        tuple(DescribeConfigsResult(res.resource_type, res.resource_name, code, message) for res in resources)
    )


# --------------------------------------------------------------------------- ElectLeaders (43)


def _enc_elect_leaders(cls: type[Any], r: ElectLeadersRequest, version: int) -> Any:
    if version == 0 and r.election_type != ElectionType.PREFERRED:
        raise WireError(ErrorCode.UNSUPPORTED_VERSION, "ElectLeaders v0 only elects preferred leaders")
    topic_partitions = None
    if r.partitions is not None:
        tcls = _nested(cls, "TopicPartitions")
        groups = _grouped(r.partitions)
        topic_partitions = tuple(tcls(topic=t, partitions=tuple(ps)) for t, ps in groups.items())
    return _make(cls, election_type=int(r.election_type), topic_partitions=topic_partitions, timeout=_td(r.timeout_ms))


def _dec_elect_leaders(body: Any, version: int) -> ElectLeadersRequest:
    partitions = None
    if body.topic_partitions is not None:
        partitions = tuple((t.topic, p) for t in body.topic_partitions for p in t.partitions)
    raw_type = getattr(body, "election_type", ElectionType.PREFERRED)
    try:
        election_type = ElectionType(raw_type)
    except ValueError:
        skeleton = ElectLeadersRequest(ElectionType.PREFERRED, partitions, _ms(body.timeout))
        raise _Reject(_INVALID_REQUEST, f"Unknown election type {raw_type}", skeleton) from None
    return ElectLeadersRequest(election_type, partitions, timeout_ms=_ms(body.timeout))


def _enc_elect_leaders_response(cls: type[Any], r: ElectLeadersResponse, version: int) -> Any:
    rcls, pcls = _nested(cls, "ReplicaElectionResult"), _nested(cls, "PartitionResult")
    groups = _grouped((res.topic, res) for res in r.results)
    results = tuple(
        rcls(
            topic=topic,
            partition_result=tuple(
                pcls(partition_id=p.partition, error_code=_kio_error(p.error_code), error_message=p.message)
                for p in parts
            ),
        )
        for topic, parts in groups.items()
    )
    return _make(cls, throttle_time=_ZERO_MS, error_code=_kio_error(r.error_code), replica_election_results=results)


def _dec_elect_leaders_response(body: Any, version: int) -> ElectLeadersResponse:
    results = tuple(
        ElectLeaderResult(t.topic, p.partition_id, _code(p.error_code), p.error_message)
        for t in body.replica_election_results
        for p in t.partition_result
    )
    return ElectLeadersResponse(_code(getattr(body, "error_code", 0)), results)


def _err_elect_leaders(r: ElectLeadersRequest | None, code: int, message: str | None) -> ElectLeadersResponse:
    partitions = r.partitions if r is not None and r.partitions is not None else ()
    return ElectLeadersResponse(code, tuple(ElectLeaderResult(t, p, code, message) for t, p in partitions))


# --------------------------------------------------------------------------- BrokerRegistration (62)


def _enc_broker_registration(cls: type[Any], r: BrokerRegistrationRequest, version: int) -> Any:
    lcls, fcls = _nested(cls, "Listener"), _nested(cls, "Feature")
    listeners = tuple(
        lcls(name=e.name, host=e.host, port=e.port, security_protocol=e.security_protocol) for e in r.listeners
    )
    features = tuple(
        fcls(name=name, min_supported_version=lo, max_supported_version=hi) for name, (lo, hi) in r.features.items()
    )
    return _make(
        cls,
        broker_id=r.broker_id,
        cluster_id=r.cluster_id,
        incarnation_id=r.incarnation_id,
        listeners=listeners,
        features=features,
        rack=r.rack,
        is_migrating_zk_broker=False,
        log_dirs=(),
        previous_broker_epoch=r.previous_broker_epoch,
    )


def _dec_broker_registration(body: Any, version: int) -> BrokerRegistrationRequest:
    return BrokerRegistrationRequest(
        broker_id=body.broker_id,
        cluster_id=body.cluster_id,
        incarnation_id=_uuid_or_zero(body.incarnation_id),
        listeners=tuple(BrokerEndpoint(e.name, e.host, e.port, e.security_protocol) for e in body.listeners),
        rack=body.rack,
        features={f.name: (f.min_supported_version, f.max_supported_version) for f in body.features},
        previous_broker_epoch=getattr(body, "previous_broker_epoch", -1),
    )


def _enc_broker_registration_response(cls: type[Any], r: BrokerRegistrationResponse, version: int) -> Any:
    return cls(throttle_time=_ZERO_MS, error_code=_kio_error(r.error_code), broker_epoch=r.broker_epoch)


def _dec_broker_registration_response(body: Any, version: int) -> BrokerRegistrationResponse:
    code = _code(body.error_code)
    # The response has no message field: a refusal carries Kafka's standard message.
    return BrokerRegistrationResponse(code, body.broker_epoch, default_message(code) if code else None)


def _err_broker_registration(r: Any, code: int, message: str | None) -> BrokerRegistrationResponse:
    return BrokerRegistrationResponse(code, -1, message)


# --------------------------------------------------------------------------- BrokerHeartbeat (63)


def _enc_broker_heartbeat(cls: type[Any], r: BrokerHeartbeatRequest, version: int) -> Any:
    return cls(
        broker_id=r.broker_id,
        broker_epoch=r.broker_epoch,
        current_metadata_offset=r.current_metadata_offset,
        want_fence=r.want_fence,
        want_shut_down=r.want_shut_down,
    )


def _dec_broker_heartbeat(body: Any, version: int) -> BrokerHeartbeatRequest:
    return BrokerHeartbeatRequest(
        broker_id=body.broker_id,
        broker_epoch=body.broker_epoch,
        current_metadata_offset=body.current_metadata_offset,
        want_fence=body.want_fence,
        want_shut_down=body.want_shut_down,
    )


def _enc_broker_heartbeat_response(cls: type[Any], r: BrokerHeartbeatResponse, version: int) -> Any:
    return cls(
        throttle_time=_ZERO_MS,
        error_code=_kio_error(r.error_code),
        is_caught_up=r.is_caught_up,
        is_fenced=r.is_fenced,
        should_shut_down=r.should_shut_down,
    )


def _dec_broker_heartbeat_response(body: Any, version: int) -> BrokerHeartbeatResponse:
    return BrokerHeartbeatResponse(_code(body.error_code), body.is_caught_up, body.is_fenced, body.should_shut_down)


def _err_broker_heartbeat(r: Any, code: int, message: str | None) -> BrokerHeartbeatResponse:
    return BrokerHeartbeatResponse(code)


# --------------------------------------------------------------------------- AlterPartition (56)


def _enc_alter_partition(cls: type[Any], r: AlterPartitionRequest, version: int) -> Any:
    tcls, pcls = _nested(cls, "TopicData"), _nested(cls, "PartitionData")
    with_epochs = version >= 3
    bcls = _nested(cls, "BrokerState") if with_epochs else None

    def partition(p: AlterPartitionItem) -> Any:
        isr: dict[str, Any]
        if bcls is not None:
            isr = {
                "new_isr_with_epochs": tuple(
                    bcls(broker_id=m.broker_id, broker_epoch=m.broker_epoch) for m in p.new_isr
                )
            }
        else:
            isr = {"new_isr": tuple(m.broker_id for m in p.new_isr)}
        return pcls(
            partition_index=p.partition,
            leader_epoch=p.leader_epoch,
            leader_recovery_state=p.leader_recovery_state,
            partition_epoch=p.partition_epoch,
            **isr,
        )

    groups = _grouped((p.topic_id, p) for p in r.partitions)
    topics = tuple(tcls(topic_id=t, partitions=tuple(partition(p) for p in ps)) for t, ps in groups.items())
    return cls(broker_id=r.broker_id, broker_epoch=r.broker_epoch, topics=topics)


def _dec_alter_partition(body: Any, version: int) -> AlterPartitionRequest:
    def isr(p: Any) -> tuple[IsrMember, ...]:
        if hasattr(p, "new_isr_with_epochs"):
            return tuple(IsrMember(b.broker_id, b.broker_epoch) for b in p.new_isr_with_epochs)
        return tuple(IsrMember(b) for b in p.new_isr)

    items = tuple(
        AlterPartitionItem(
            topic_id=_uuid_or_zero(t.topic_id),
            partition=p.partition_index,
            leader_epoch=p.leader_epoch,
            new_isr=isr(p),
            leader_recovery_state=p.leader_recovery_state,
            partition_epoch=p.partition_epoch,
        )
        for t in body.topics
        for p in t.partitions
    )
    return AlterPartitionRequest(body.broker_id, body.broker_epoch, items)


def _enc_alter_partition_response(cls: type[Any], r: AlterPartitionResponse, version: int) -> Any:
    tcls, pcls = _nested(cls, "TopicData"), _nested(cls, "PartitionData")
    groups = _grouped((p.topic_id, p) for p in r.partitions)
    topics = tuple(
        tcls(
            topic_id=t,
            partitions=tuple(
                pcls(
                    partition_index=p.partition,
                    error_code=_kio_error(p.error_code),
                    leader_id=p.leader_id,
                    leader_epoch=p.leader_epoch,
                    isr=tuple(p.isr),
                    leader_recovery_state=p.leader_recovery_state,
                    partition_epoch=p.partition_epoch,
                )
                for p in ps
            ),
        )
        for t, ps in groups.items()
    )
    return cls(throttle_time=_ZERO_MS, error_code=_kio_error(r.error_code), topics=topics)


def _dec_alter_partition_response(body: Any, version: int) -> AlterPartitionResponse:
    results = tuple(
        AlterPartitionResult(
            topic_id=_uuid_or_zero(t.topic_id),
            partition=p.partition_index,
            error_code=_code(p.error_code),
            leader_id=p.leader_id,
            leader_epoch=p.leader_epoch,
            isr=tuple(p.isr),
            leader_recovery_state=p.leader_recovery_state,
            partition_epoch=p.partition_epoch,
        )
        for t in body.topics
        for p in t.partitions
    )
    return AlterPartitionResponse(_code(body.error_code), results)


def _err_alter_partition(r: Any, code: int, message: str | None) -> AlterPartitionResponse:
    return AlterPartitionResponse(code, ())  # Kafka reports the whole request failing at the top level only


# --------------------------------------------------------------------------- UnregisterBroker (64)


def _enc_unregister_broker(cls: type[Any], r: UnregisterBrokerRequest, version: int) -> Any:
    return cls(broker_id=r.broker_id)


def _dec_unregister_broker(body: Any, version: int) -> UnregisterBrokerRequest:
    return UnregisterBrokerRequest(body.broker_id)


def _enc_unregister_broker_response(cls: type[Any], r: UnregisterBrokerResponse, version: int) -> Any:
    return cls(throttle_time=_ZERO_MS, error_code=_kio_error(r.error_code), error_message=r.message)


def _dec_unregister_broker_response(body: Any, version: int) -> UnregisterBrokerResponse:
    return UnregisterBrokerResponse(_code(body.error_code), body.error_message)


def _err_unregister_broker(r: Any, code: int, message: str | None) -> UnregisterBrokerResponse:
    return UnregisterBrokerResponse(code, message)


# --------------------------------------------------------------------------- DescribeCluster (60)


def _enc_describe_cluster(cls: type[Any], r: DescribeClusterRequest, version: int) -> Any:
    return _make(
        cls,
        include_cluster_authorized_operations=r.include_cluster_authorized_operations,
        endpoint_type=r.endpoint_type,
        include_fenced_brokers=r.include_fenced_brokers,
    )


def _dec_describe_cluster(body: Any, version: int) -> DescribeClusterRequest:
    return DescribeClusterRequest(
        include_cluster_authorized_operations=body.include_cluster_authorized_operations,
        endpoint_type=getattr(body, "endpoint_type", 1),
        include_fenced_brokers=getattr(body, "include_fenced_brokers", False),
    )


def _enc_describe_cluster_response(cls: type[Any], r: DescribeClusterResponse, version: int) -> Any:
    bcls = _nested(cls, "DescribeClusterBroker")
    brokers = tuple(
        _make(bcls, broker_id=b.broker_id, host=b.host, port=b.port, rack=b.rack, is_fenced=b.is_fenced)
        for b in r.brokers
    )
    return _make(
        cls,
        throttle_time=_ZERO_MS,
        error_code=_kio_error(r.error_code),
        error_message=r.message,
        endpoint_type=r.endpoint_type,
        cluster_id=r.cluster_id,
        controller_id=r.controller_id,
        brokers=brokers,
        cluster_authorized_operations=r.cluster_authorized_operations,
    )


def _dec_describe_cluster_response(body: Any, version: int) -> DescribeClusterResponse:
    return DescribeClusterResponse(
        cluster_id=body.cluster_id,
        controller_id=body.controller_id,
        brokers=tuple(
            DescribeClusterBroker(b.broker_id, b.host, b.port, b.rack, getattr(b, "is_fenced", False))
            for b in body.brokers
        ),
        error_code=_code(body.error_code),
        message=body.error_message,
        endpoint_type=getattr(body, "endpoint_type", 1),
        cluster_authorized_operations=body.cluster_authorized_operations,
    )


def _err_describe_cluster(r: DescribeClusterRequest | None, code: int, message: str | None) -> DescribeClusterResponse:
    endpoint_type = r.endpoint_type if r is not None else 1
    return DescribeClusterResponse(cluster_id="", error_code=code, message=message, endpoint_type=endpoint_type)


# --------------------------------------------------------------------------- AllocateProducerIds (67)


def _enc_allocate_producer_ids(cls: type[Any], r: AllocateProducerIdsRequest, version: int) -> Any:
    return cls(broker_id=r.broker_id, broker_epoch=r.broker_epoch)


def _dec_allocate_producer_ids(body: Any, version: int) -> AllocateProducerIdsRequest:
    return AllocateProducerIdsRequest(body.broker_id, body.broker_epoch)


def _enc_allocate_producer_ids_response(cls: type[Any], r: AllocateProducerIdsResponse, version: int) -> Any:
    return cls(
        throttle_time=_ZERO_MS,
        error_code=_kio_error(r.error_code),
        producer_id_start=r.producer_id_start,
        producer_id_len=r.producer_id_len,
    )


def _dec_allocate_producer_ids_response(body: Any, version: int) -> AllocateProducerIdsResponse:
    return AllocateProducerIdsResponse(_code(body.error_code), body.producer_id_start, body.producer_id_len)


def _err_allocate_producer_ids(r: Any, code: int, message: str | None) -> AllocateProducerIdsResponse:
    return AllocateProducerIdsResponse(code)


# --------------------------------------------------------------------------- the table


@dataclass(frozen=True, slots=True)
class _Api:
    key: int
    request_type: type[Any]
    response_type: type[Any]
    enc_request: Callable[[type[Any], Any, int], Any]
    dec_request: Callable[[Any, int], Any]
    enc_response: Callable[[type[Any], Any, int], Any]
    dec_response: Callable[[Any, int], Any]
    error_response: Callable[[Any, int, str | None], Any]  # (typed request or None, code, message)


fast_frozen_init(_Api)  # not a decorator: mypyc makes a decorated class a Python class


_APIS: Final[dict[int, _Api]] = {
    api.key: api
    for api in (
        _Api(
            AdminApiKey.CREATE_TOPICS,
            CreateTopicsRequest,
            CreateTopicsResponse,
            _enc_create_topics,
            _dec_create_topics,
            _enc_create_topics_response,
            _dec_create_topics_response,
            _err_create_topics,
        ),
        _Api(
            AdminApiKey.DELETE_TOPICS,
            DeleteTopicsRequest,
            DeleteTopicsResponse,
            _enc_delete_topics,
            _dec_delete_topics,
            _enc_delete_topics_response,
            _dec_delete_topics_response,
            _err_delete_topics,
        ),
        _Api(
            AdminApiKey.CREATE_PARTITIONS,
            CreatePartitionsRequest,
            CreatePartitionsResponse,
            _enc_create_partitions,
            _dec_create_partitions,
            _enc_create_partitions_response,
            _dec_create_partitions_response,
            _err_create_partitions,
        ),
        _Api(
            AdminApiKey.INCREMENTAL_ALTER_CONFIGS,
            IncrementalAlterConfigsRequest,
            IncrementalAlterConfigsResponse,
            _enc_incremental_alter_configs,
            _dec_incremental_alter_configs,
            _enc_incremental_alter_configs_response,
            _dec_incremental_alter_configs_response,
            _err_incremental_alter_configs,
        ),
        _Api(
            AdminApiKey.DESCRIBE_CONFIGS,
            DescribeConfigsRequest,
            DescribeConfigsResponse,
            _enc_describe_configs,
            _dec_describe_configs,
            _enc_describe_configs_response,
            _dec_describe_configs_response,
            _err_describe_configs,
        ),
        _Api(
            AdminApiKey.ELECT_LEADERS,
            ElectLeadersRequest,
            ElectLeadersResponse,
            _enc_elect_leaders,
            _dec_elect_leaders,
            _enc_elect_leaders_response,
            _dec_elect_leaders_response,
            _err_elect_leaders,
        ),
        _Api(
            AdminApiKey.BROKER_REGISTRATION,
            BrokerRegistrationRequest,
            BrokerRegistrationResponse,
            _enc_broker_registration,
            _dec_broker_registration,
            _enc_broker_registration_response,
            _dec_broker_registration_response,
            _err_broker_registration,
        ),
        _Api(
            AdminApiKey.BROKER_HEARTBEAT,
            BrokerHeartbeatRequest,
            BrokerHeartbeatResponse,
            _enc_broker_heartbeat,
            _dec_broker_heartbeat,
            _enc_broker_heartbeat_response,
            _dec_broker_heartbeat_response,
            _err_broker_heartbeat,
        ),
        _Api(
            AdminApiKey.ALTER_PARTITION,
            AlterPartitionRequest,
            AlterPartitionResponse,
            _enc_alter_partition,
            _dec_alter_partition,
            _enc_alter_partition_response,
            _dec_alter_partition_response,
            _err_alter_partition,
        ),
        _Api(
            AdminApiKey.UNREGISTER_BROKER,
            UnregisterBrokerRequest,
            UnregisterBrokerResponse,
            _enc_unregister_broker,
            _dec_unregister_broker,
            _enc_unregister_broker_response,
            _dec_unregister_broker_response,
            _err_unregister_broker,
        ),
        _Api(
            AdminApiKey.DESCRIBE_CLUSTER,
            DescribeClusterRequest,
            DescribeClusterResponse,
            _enc_describe_cluster,
            _dec_describe_cluster,
            _enc_describe_cluster_response,
            _dec_describe_cluster_response,
            _err_describe_cluster,
        ),
        _Api(
            AdminApiKey.ALLOCATE_PRODUCER_IDS,
            AllocateProducerIdsRequest,
            AllocateProducerIdsResponse,
            _enc_allocate_producer_ids,
            _dec_allocate_producer_ids,
            _enc_allocate_producer_ids_response,
            _dec_allocate_producer_ids_response,
            _err_allocate_producer_ids,
        ),
    )
}

_BY_REQUEST_TYPE: Final[dict[type[Any], _Api]] = {api.request_type: api for api in _APIS.values()}

assert set(_APIS) == set(ADMIN_API_VERSIONS)

# --------------------------------------------------------------------------- public API


def is_admin_api(api_key: int) -> bool:
    """Whether `api_key` is one of the apis this module serves."""
    return api_key in ADMIN_API_VERSIONS


def admin_api_key(request: AdminCall) -> int:
    """The Kafka api key that carries `request`; TypeError for anything else."""
    api = _BY_REQUEST_TYPE.get(type(request))
    if api is None:
        raise TypeError(f"not an admin request: {type(request).__name__}")
    return api.key


def _build(what: str, build: Callable[[], Any]) -> Any:
    try:
        return build()
    except WireError:
        raise
    except (TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise WireError(ErrorCode.INVALID_REQUEST, f"cannot encode {what}: {exc}") from exc


def encode_admin_request(
    request: AdminCall, *, correlation_id: int, client_id: str | None, api_version: int | None = None
) -> tuple[bytes, int, int]:
    """A complete request frame (length prefix, header, body) for `request`.

    Returns (frame, api key, api version); the version is the highest served
    (`ADMIN_REQUEST_VERSIONS`) unless `api_version` names another served one.
    Raises WireError when the request cannot be expressed at that version (e.g.
    DeleteTopics by id below v6, an unclean election at ElectLeaders v0) or a value
    is out of range; TypeError for a value that is not an admin request.
    """
    api = _BY_REQUEST_TYPE.get(type(request))
    if api is None:
        raise TypeError(f"not an admin request: {type(request).__name__}")
    cls, version = api_frames.request_schema(ADMIN_API_VERSIONS, api.key, api_version)
    body = _build(type(request).__name__, lambda: api.enc_request(cls, request, version))
    frame = api_frames.request_frame(
        cls, body, api_key=api.key, version=version, correlation_id=correlation_id, client_id=client_id
    )
    return frame, api.key, version


def decode_admin_request(frame: bytes | bytearray | memoryview) -> DecodedAdmin:
    """Decode an admin request frame (without its length prefix). Raises only WireError.

    WireError.header is set once the fixed header prefix parsed: INVALID_REQUEST for
    a key this module does not serve or a malformed header/body, UNSUPPORTED_VERSION
    for a version outside ADMIN_API_VERSIONS. AdminRequestError (a WireError) for
    a well-formed request that our typed values cannot express.
    """
    try:
        return _decode_admin_request(frame if type(frame) is bytes else bytes(frame))
    except WireError:
        raise
    except Exception as exc:  # defensive: the contract is "only WireError"
        raise WireError(ErrorCode.INVALID_REQUEST, f"undecodable admin request: {exc!r}") from exc


# Apis with a direct codec (`admin_direct`) for their common shape: the controller's writes.
_DIRECT_REQUESTS: Final[dict[int, Callable[[bytes, int, int], Any]]] = {
    AdminApiKey.INCREMENTAL_ALTER_CONFIGS: admin_direct.decode_incremental_alter_configs,
}
_DIRECT_RESPONSES: Final[dict[int, Callable[[Any, int, int], bytes | None]]] = {
    AdminApiKey.INCREMENTAL_ALTER_CONFIGS: admin_direct.encode_incremental_alter_configs_response,
}


_FLEXIBLE_REQUESTS: Final[dict[int, bool | None]] = {}  # by api_key << 16 | version


def _request_is_flexible(api_key: int, version: int) -> bool | None:
    """Whether the request schema of `api_key` at `version` is flexible (None: no schema),
    memoized: kio's schema lookup costs more than the rest of a small request's decoding."""
    key = api_key << 16 | version
    known = _FLEXIBLE_REQUESTS.get(key)
    if known is not None:
        return known
    if key in _FLEXIBLE_REQUESTS:
        return None
    cls = _schema(api_key, version, True)
    flexible = None if cls is None else bool(cls.__flexible__)
    _FLEXIBLE_REQUESTS[key] = flexible
    return flexible


def _decode_direct(frame: bytes) -> DecodedAdmin | None:
    """The request through its api's direct decoder, or None (no direct decoder, not the
    common shape, or anything the general path must judge)."""
    if len(frame) < 10:
        return None
    direct = _DIRECT_REQUESTS.get((frame[0] << 8) | frame[1])  # the api key (non-negative here)
    if direct is None:
        return None
    head = _peek_header(frame)
    low, high = ADMIN_API_VERSIONS[head.api_key]
    version = head.api_version
    if not low <= version <= high:
        return None
    # Request header v1 (v2 for flexible versions: then its tagged fields, none expected).
    n = (frame[8] << 8) | frame[9]  # the client id's length; 0xFFFF (-1) is a null id
    pos = 10 + (0 if n >= 0x8000 else n)
    flexible = _request_is_flexible(head.api_key, version)
    if flexible is None:
        return None
    if flexible:
        if len(frame) <= pos or frame[pos]:
            return None
        pos += 1
    request = direct(frame, pos, version)
    if request is None:
        return None
    return DecodedAdmin(head.api_key, version, head.correlation_id, head.client_id, head, request)


def _decode_admin_request(frame: bytes) -> DecodedAdmin:
    direct = _decode_direct(frame)
    if direct is not None:
        return direct
    head, body = api_frames.read_request(frame, ADMIN_API_VERSIONS, "an admin api")
    api = _APIS[head.api_key]
    version = head.api_version

    def decoded(request: AdminCall) -> DecodedAdmin:
        return DecodedAdmin(api.key, version, head.correlation_id, head.client_id, head, request)

    try:
        request = api.dec_request(body, version)
    except _Reject as reject:
        raise AdminRequestError(reject.error_code, reject.message, decoded=decoded(reject.skeleton)) from None
    except (TypeError, ValueError, AttributeError) as exc:
        raise WireError(ErrorCode.INVALID_REQUEST, f"bad {type(body).__name__} v{version}: {exc}", header=head) from exc
    return decoded(request)


# Response schemas found by `_schema` (a functools.cache, costlier to call), by
# api_key << 16 | version.
_RESPONSE_SCHEMAS: Final[dict[int, type[Any]]] = {}


def _response_frame(api: _Api, version: int, correlation_id: int, response: Any) -> bytes:
    key = api.key << 16 | version
    cls = _RESPONSE_SCHEMAS.get(key)
    if cls is None:
        cls = _schema(api.key, version, False)
        if cls is not None:
            _RESPONSE_SCHEMAS[key] = cls
    if cls is None:
        raise WireError(ErrorCode.UNSUPPORTED_VERSION, f"no response schema for api {api.key} v{version}")
    direct = _DIRECT_RESPONSES.get(api.key)
    if direct is not None:
        frame = direct(response, version, correlation_id)
        if frame is not None:
            return frame
    body = _build(type(response).__name__, lambda: api.enc_response(cls, response, version))
    return _frame(cls.__header_schema__(correlation_id=correlation_id), body)


def encode_admin_response(decoded: DecodedAdmin, response: AdminReply) -> bytes:
    """A complete response frame answering `decoded`, at the request's version.

    Raises TypeError when `response` is not the response type of the request's api,
    WireError when a value cannot be encoded (e.g. an int out of its field's range).
    """
    api = _APIS.get(decoded.api_key)
    if api is None:
        raise TypeError(f"api key {decoded.api_key} is not an admin api")
    if not isinstance(response, api.response_type):
        raise TypeError(f"api {api.key} cannot answer with {type(response).__name__}")
    return _response_frame(api, decoded.api_version, decoded.correlation_id, response)


def encode_admin_error(
    decoded_or_header: DecodedAdmin | RequestHeaderInfo, error_code: int, message: str | None = None
) -> bytes:
    """A response reporting `error_code` for the whole request, shaped as Kafka does.

    Every item of the request gets the error (each topic of CreateTopics /
    DeleteTopics / CreatePartitions, each resource of the config apis, each
    partition of ElectLeaders, whose top-level code is set too); apis with only a
    top-level code (AlterPartition, broker registration/heartbeat/unregistration,
    DescribeCluster) get it there, with the message where the schema has one. Given
    only a header (the body did not parse), the item lists are empty. Raises
    WireError when no response can be encoded (not an admin key, or a version with
    no schema): the caller should then close the connection, as Kafka does.
    """
    if isinstance(decoded_or_header, DecodedAdmin):
        header, request = decoded_or_header.header, decoded_or_header.request
    else:
        header, request = decoded_or_header, None
    api = _APIS.get(header.api_key)
    if api is None:
        raise WireError(ErrorCode.INVALID_REQUEST, f"cannot answer api key {header.api_key}")
    if request is not None and not isinstance(request, api.request_type):
        raise TypeError(f"api {api.key} does not carry {type(request).__name__}")
    response = api.error_response(request, int(error_code), message)
    return _response_frame(api, header.api_version, header.correlation_id, response)


def admin_error_response_for(error: WireError) -> bytes | None:
    """The response frame reporting a decode failure of an admin request, or None when
    it cannot be answered (its header did not parse, or the key/version has no
    response schema): then close the connection."""
    try:
        if isinstance(error, AdminRequestError):
            return encode_admin_error(error.decoded, error.error_code, error.message)
        if error.header is None:
            return None
        return encode_admin_error(error.header, int(error.code), error.message)
    except WireError:
        return None


def decode_admin_response(
    api_key: int, api_version: int, frame: bytes | bytearray | memoryview, request: AdminCall | None = None
) -> AdminReply:
    """Decode a response frame (without its length prefix) to its typed response.

    `request` (the request that was sent) is accepted for symmetry and checked
    against the api key. Raises only WireError (UNSUPPORTED_VERSION for a key or
    version not served here, INVALID_REQUEST for malformed bytes).
    """
    try:
        return _decode_admin_response(api_key, api_version, bytes(frame), request)
    except WireError:
        raise
    except MalformedError as exc:
        raise WireError(ErrorCode.INVALID_REQUEST, f"malformed response to api {api_key}: {exc}") from exc
    except Exception as exc:  # defensive: the contract is "only WireError"
        raise WireError(ErrorCode.INVALID_REQUEST, f"undecodable admin response: {exc!r}") from exc


def _decode_admin_response(api_key: int, api_version: int, frame: bytes, request: AdminCall | None) -> AdminReply:
    api = _APIS.get(api_key)
    low, high = ADMIN_API_VERSIONS.get(api_key, (0, -1))
    cls = _schema(api_key, api_version, False) if api is not None and low <= api_version <= high else None
    if api is None or cls is None:
        raise WireError(ErrorCode.UNSUPPORTED_VERSION, f"api {api_key} v{api_version} is not served here")
    if request is not None and not isinstance(request, api.request_type):
        raise WireError(ErrorCode.INVALID_REQUEST, f"api {api_key} does not answer {type(request).__name__}")
    _, pos = entity_reader(cls.__header_schema__)(frame, 0)
    body, end = entity_reader(cls)(frame, pos)
    if end != len(frame):
        raise WireError(ErrorCode.INVALID_REQUEST, f"{len(frame) - end} trailing bytes after the response")
    response: AdminReply = api.dec_response(body, api_version)
    return response
