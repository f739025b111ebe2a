"""KIP-631 metadata records: typed values, and Kafka's exact binary and JSON forms.

One frozen, slotted dataclass per record type. Field names are Kafka's in
snake_case (`TopicId` -> `topic_id`); the few renamings are noted on the class.
The schemas below transcribe apache/kafka
`metadata/src/main/resources/common/metadata/*.json` (fields, versions, nullable
and tagged fields, defaults); `_codec` compiles them into encoders and decoders.

Framing of one record value (Kafka's `AbstractApiMessageSerde`):

    frame_version uvarint (=1) | api_key uvarint | version uvarint | message

where `message` is the record in Kafka's flexible wire encoding for `version`.
Kafka writes frame version 1 and rejects 0 (the KRaft preview format of 2.8), so
we do the same; that makes our records readable by `kafka-dump-log.sh
--cluster-metadata-decoder` and Kafka's readable by us.

Versions we write (`encode_record` without an explicit version):

=================================  ===  =================================================
record (api key)                   ver  why
=================================  ===  =================================================
RegisterBrokerRecord (0)           3    newest: InControlledShutdown (v1+), LogDirs (v3)
UnregisterBrokerRecord (1)         0    only version
TopicRecord (2)                    0    only version
PartitionRecord (3)                0-2  the lowest that holds the values: v0; v1 when
                                        `directories` is non-empty; v2 when an ELR is set
ConfigRecord (4)                   0    only version
PartitionChangeRecord (5)          0-2  likewise: v0; v1 with `directories`; v2 with ELR
FenceBrokerRecord (7)              0    only version (legacy; we write BRCR instead)
UnfenceBrokerRecord (8)            0    only version (legacy)
RemoveTopicRecord (9)              0    only version
FeatureLevelRecord (12)            0    only version (Kafka: must stay 0)
ProducerIdsRecord (15)             0    only version
BrokerRegistrationChangeRecord     2    newest: InControlledShutdown (v1+), LogDirs (v2)
(17)
NoOpRecord (20)                    0    only version
=================================  ===  =================================================

Every version Kafka defines for these types is decoded. Records of other types
(ACLs, quotas, SCRAM, delegation tokens, controller registrations, ...) are
rejected with `RecordDecodeError`.

Leader elections in `PartitionChangeRecord`: `leader` is `NO_LEADER_CHANGE` (-2)
when the leader did not change, `NO_LEADER` (-1) when the partition now has none;
a list field that is None did not change. Kafka records an *unclean* election
(a leader chosen outside the ISR, allowed by `unclean.leader.election.enable`)
as `leader = new leader, isr = [new leader], leader_recovery_state = RECOVERING
(1)`; `is_unclean_election` recognizes it. A later change with
`leader_recovery_state = RECOVERED (0)` marks the end of the recovery.
"""

from __future__ import annotations

import base64
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Final

from quorum.frozen_init import fast_frozen_init
from quorum.metadata._codec import (
    REQUIRED,
    CompiledSchema,
    DecodeFn,
    Field,
    Schema,
    compile_schema,
    read_uvarint,
    uvarint_bytes,
)
from quorum.metadata.errors import RecordDecodeError

__all__ = [
    "API_KEYS",
    "FRAME_VERSION",
    "NO_LEADER",
    "NO_LEADER_CHANGE",
    "BrokerEndpoint",
    "BrokerFeature",
    "BrokerRegistrationChangeRecord",
    "ConfigRecord",
    "ConfigResourceType",
    "FeatureLevelRecord",
    "FenceBrokerRecord",
    "FencingChange",
    "LeaderRecoveryState",
    "MetadataRecord",
    "NoOpRecord",
    "PartitionChangeRecord",
    "PartitionRecord",
    "ProducerIdsRecord",
    "RecordDecodeError",
    "RegisterBrokerRecord",
    "RemoveTopicRecord",
    "SecurityProtocol",
    "TopicRecord",
    "UnfenceBrokerRecord",
    "UnregisterBrokerRecord",
    "api_key",
    "decode_record",
    "decode_record_with_version",
    "encode_record",
    "is_unclean_election",
    "kafka_uuid_string",
    "new_config_record",
    "record_to_json",
    "record_type_name",
    "write_version",
]

FRAME_VERSION = 1

NO_LEADER = -1
NO_LEADER_CHANGE = -2

_ID = tuple[int, ...]


class LeaderRecoveryState(IntEnum):
    """Kafka's LeaderRecoveryState; PartitionChangeRecord uses -1 for "no change"."""

    RECOVERED = 0
    RECOVERING = 1


LEADER_RECOVERY_NO_CHANGE = -1


class FencingChange(IntEnum):
    """BrokerRegistrationChangeRecord.fenced values (Kafka's BrokerRegistrationFencingChange)."""

    UNFENCE = -1
    NONE = 0
    FENCE = 1


class ConfigResourceType(IntEnum):
    """Kafka's ConfigResource.Type ids (ConfigRecord.resource_type)."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32


class SecurityProtocol(IntEnum):
    """Kafka's SecurityProtocol ids (BrokerEndpoint.security_protocol)."""

    PLAINTEXT = 0
    SSL = 1
    SASL_PLAINTEXT = 2
    SASL_SSL = 3


# --------------------------------------------------------------------------- record types


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    """One listener of a broker (RegisterBrokerRecord.EndPoints)."""

    name: str
    host: str
    port: int
    security_protocol: int = 0  # SecurityProtocol.PLAINTEXT


fast_frozen_init(BrokerEndpoint)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class BrokerFeature:
    """A feature range a broker supports (RegisterBrokerRecord.Features)."""

    name: str
    min_supported_version: int
    max_supported_version: int


fast_frozen_init(BrokerFeature)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class RegisterBrokerRecord:
    """apiKey 0. A broker (re-)registered; `broker_epoch` is the offset of this record."""

    broker_id: int
    incarnation_id: uuid.UUID
    broker_epoch: int
    end_points: tuple[BrokerEndpoint, ...] = ()
    features: tuple[BrokerFeature, ...] = ()
    rack: str | None = None
    fenced: bool = True
    in_controlled_shutdown: bool = False
    is_migrating_zk_broker: bool = False
    log_dirs: tuple[uuid.UUID, ...] = ()


fast_frozen_init(RegisterBrokerRecord)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class UnregisterBrokerRecord:
    """apiKey 1."""

    broker_id: int
    broker_epoch: int


fast_frozen_init(UnregisterBrokerRecord)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class TopicRecord:
    """apiKey 2."""

    name: str
    topic_id: uuid.UUID


fast_frozen_init(TopicRecord)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class PartitionRecord:
    """apiKey 3. The full state of a new partition (also how snapshots hold partitions)."""

    partition_id: int
    topic_id: uuid.UUID
    replicas: _ID
    isr: _ID
    removing_replicas: _ID = ()
    adding_replicas: _ID = ()
    leader: int = NO_LEADER
    leader_recovery_state: int = 0  # LeaderRecoveryState.RECOVERED
    leader_epoch: int = -1
    partition_epoch: int = -1
    directories: tuple[uuid.UUID, ...] = ()
    eligible_leader_replicas: _ID | None = None
    last_known_elr: _ID | None = None


fast_frozen_init(PartitionRecord)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class ConfigRecord:
    """apiKey 4. Sets (or, with value None, deletes) one config key of a resource."""

    resource_type: int
    resource_name: str
    name: str
    value: str | None


fast_frozen_init(ConfigRecord)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class PartitionChangeRecord:
    """apiKey 5. A change to a partition; None / NO_LEADER_CHANGE / -1 mean "unchanged"."""

    partition_id: int
    topic_id: uuid.UUID
    isr: _ID | None = None
    leader: int = NO_LEADER_CHANGE
    replicas: _ID | None = None
    removing_replicas: _ID | None = None
    adding_replicas: _ID | None = None
    leader_recovery_state: int = LEADER_RECOVERY_NO_CHANGE
    directories: tuple[uuid.UUID, ...] | None = None
    eligible_leader_replicas: _ID | None = None
    last_known_elr: _ID | None = None


fast_frozen_init(PartitionChangeRecord)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class FenceBrokerRecord:
    """apiKey 7 (legacy; Kafka's `Id`/`Epoch` are `broker_id`/`broker_epoch` here)."""

    broker_id: int
    broker_epoch: int


fast_frozen_init(FenceBrokerRecord)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class UnfenceBrokerRecord:
    """apiKey 8 (legacy; Kafka's `Id`/`Epoch` are `broker_id`/`broker_epoch` here)."""

    broker_id: int
    broker_epoch: int


fast_frozen_init(UnfenceBrokerRecord)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class RemoveTopicRecord:
    """apiKey 9. Removes the topic, its partitions and its configs."""

    topic_id: uuid.UUID


fast_frozen_init(RemoveTopicRecord)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class FeatureLevelRecord:
    """apiKey 12. Level 0 removes the feature."""

    name: str
    feature_level: int


fast_frozen_init(FeatureLevelRecord)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class ProducerIdsRecord:
    """apiKey 15. The next producer id block starts at `next_producer_id`."""

    broker_id: int
    broker_epoch: int
    next_producer_id: int


fast_frozen_init(ProducerIdsRecord)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class BrokerRegistrationChangeRecord:
    """apiKey 17. `fenced`: FencingChange (-1 unfence, 0 none, 1 fence);
    `in_controlled_shutdown`: 0 no change, 1 now in controlled shutdown;
    `log_dirs`: empty means unchanged."""

    broker_id: int
    broker_epoch: int
    fenced: int = 0  # FencingChange.NONE
    in_controlled_shutdown: int = 0
    log_dirs: tuple[uuid.UUID, ...] = ()


fast_frozen_init(BrokerRegistrationChangeRecord)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class NoOpRecord:
    """apiKey 20. Written by the active controller to advance the log (KIP-835)."""


fast_frozen_init(NoOpRecord)  # not a decorator: mypyc makes a decorated class a Python class


# Each record type's apiKey (a table, not a ClassVar: mypyc 2.4.1 takes a ClassVar of a compiled
# dataclass for a field).
API_KEYS: Final[dict[type, int]] = {
    RegisterBrokerRecord: 0,
    UnregisterBrokerRecord: 1,
    TopicRecord: 2,
    PartitionRecord: 3,
    ConfigRecord: 4,
    PartitionChangeRecord: 5,
    FenceBrokerRecord: 7,
    UnfenceBrokerRecord: 8,
    RemoveTopicRecord: 9,
    FeatureLevelRecord: 12,
    ProducerIdsRecord: 15,
    BrokerRegistrationChangeRecord: 17,
    NoOpRecord: 20,
}


def api_key(cls: type) -> int:
    """The apiKey of metadata record class `cls` (KeyError for any other class)."""
    return API_KEYS[cls]


MetadataRecord = (
    RegisterBrokerRecord
    | UnregisterBrokerRecord
    | TopicRecord
    | PartitionRecord
    | ConfigRecord
    | PartitionChangeRecord
    | FenceBrokerRecord
    | UnfenceBrokerRecord
    | RemoveTopicRecord
    | FeatureLevelRecord
    | ProducerIdsRecord
    | BrokerRegistrationChangeRecord
    | NoOpRecord
)


def is_unclean_election(change: PartitionChangeRecord) -> bool:
    """True if `change` records an unclean leader election.

    Kafka (PartitionChangeBuilder) writes an unclean election as a new leader
    (>= 0) with `leader_recovery_state = RECOVERING` and `isr = [leader]`: the
    leader came from outside the ISR and may lack committed records. The
    recovery state is the marker (ISR = [leader] alone also happens cleanly).
    """
    return change.leader >= 0 and change.leader_recovery_state == LeaderRecoveryState.RECOVERING


# --------------------------------------------------------------------------- schemas


def _f(attr: str, json: str, kind: str, **kw: Any) -> Field:
    return Field(attr, json, kind, **kw)


_ENDPOINT = Schema(
    "BrokerEndpoint",
    BrokerEndpoint,
    (
        _f("name", "name", "string"),
        _f("host", "host", "string"),
        _f("port", "port", "uint16"),
        _f("security_protocol", "securityProtocol", "int16"),
    ),
)
_FEATURE = Schema(
    "BrokerFeature",
    BrokerFeature,
    (
        _f("name", "name", "string"),
        _f("min_supported_version", "minSupportedVersion", "int16"),
        _f("max_supported_version", "maxSupportedVersion", "int16"),
    ),
)

_SCHEMAS: tuple[tuple[Schema, str], ...] = (
    (
        Schema(
            "RegisterBrokerRecord",
            RegisterBrokerRecord,
            (
                _f("broker_id", "brokerId", "int32"),
                _f("is_migrating_zk_broker", "isMigratingZkBroker", "bool", since=2, default=False),
                _f("incarnation_id", "incarnationId", "uuid"),
                _f("broker_epoch", "brokerEpoch", "int64"),
                _f("end_points", "endPoints", "[]struct", struct=_ENDPOINT),
                _f("features", "features", "[]struct", struct=_FEATURE),
                _f("rack", "rack", "string", nullable=True),
                _f("fenced", "fenced", "bool", default=True),
                _f("in_controlled_shutdown", "inControlledShutdown", "bool", since=1, default=False),
                _f("log_dirs", "logDirs", "[]uuid", since=3, tag=0, default=()),
            ),
            range(4),
        ),
        "REGISTER_BROKER_RECORD",
    ),
    (
        Schema(
            "UnregisterBrokerRecord",
            UnregisterBrokerRecord,
            (_f("broker_id", "brokerId", "int32"), _f("broker_epoch", "brokerEpoch", "int64")),
        ),
        "UNREGISTER_BROKER_RECORD",
    ),
    (
        Schema("TopicRecord", TopicRecord, (_f("name", "name", "string"), _f("topic_id", "topicId", "uuid"))),
        "TOPIC_RECORD",
    ),
    (
        Schema(
            "PartitionRecord",
            PartitionRecord,
            (
                _f("partition_id", "partitionId", "int32", default=-1),
                _f("topic_id", "topicId", "uuid"),
                _f("replicas", "replicas", "[]int32"),
                _f("isr", "isr", "[]int32"),
                _f("removing_replicas", "removingReplicas", "[]int32", default=()),
                _f("adding_replicas", "addingReplicas", "[]int32", default=()),
                _f("leader", "leader", "int32", default=-1),
                _f("leader_recovery_state", "leaderRecoveryState", "int8", tag=0, default=0),
                _f("leader_epoch", "leaderEpoch", "int32", default=-1),
                _f("partition_epoch", "partitionEpoch", "int32", default=-1),
                _f("directories", "directories", "[]uuid", since=1, default=()),
                _f(
                    "eligible_leader_replicas",
                    "eligibleLeaderReplicas",
                    "[]int32",
                    since=2,
                    nullable=True,
                    tag=1,
                    default=None,
                ),
                _f("last_known_elr", "lastKnownElr", "[]int32", since=2, nullable=True, tag=2, default=None),
            ),
            range(3),
        ),
        "PARTITION_RECORD",
    ),
    (
        Schema(
            "ConfigRecord",
            ConfigRecord,
            (
                _f("resource_type", "resourceType", "int8"),
                _f("resource_name", "resourceName", "string"),
                _f("name", "name", "string"),
                _f("value", "value", "string", nullable=True),
            ),
        ),
        "CONFIG_RECORD",
    ),
    (
        Schema(
            "PartitionChangeRecord",
            PartitionChangeRecord,
            (
                _f("partition_id", "partitionId", "int32", default=-1),
                _f("topic_id", "topicId", "uuid"),
                _f("isr", "isr", "[]int32", nullable=True, tag=0, default=None),
                _f("leader", "leader", "int32", tag=1, default=NO_LEADER_CHANGE),
                _f("replicas", "replicas", "[]int32", nullable=True, tag=2, default=None),
                _f("removing_replicas", "removingReplicas", "[]int32", nullable=True, tag=3, default=None),
                _f("adding_replicas", "addingReplicas", "[]int32", nullable=True, tag=4, default=None),
                _f("leader_recovery_state", "leaderRecoveryState", "int8", tag=5, default=LEADER_RECOVERY_NO_CHANGE),
                _f("directories", "directories", "[]uuid", since=1, nullable=True, tag=8, default=None),
                _f(
                    "eligible_leader_replicas",
                    "eligibleLeaderReplicas",
                    "[]int32",
                    since=2,
                    nullable=True,
                    tag=6,
                    default=None,
                ),
                _f("last_known_elr", "lastKnownElr", "[]int32", since=2, nullable=True, tag=7, default=None),
            ),
            range(3),
        ),
        "PARTITION_CHANGE_RECORD",
    ),
    (
        Schema(
            "FenceBrokerRecord",
            FenceBrokerRecord,
            (_f("broker_id", "id", "int32"), _f("broker_epoch", "epoch", "int64")),
        ),
        "FENCE_BROKER_RECORD",
    ),
    (
        Schema(
            "UnfenceBrokerRecord",
            UnfenceBrokerRecord,
            (_f("broker_id", "id", "int32"), _f("broker_epoch", "epoch", "int64")),
        ),
        "UNFENCE_BROKER_RECORD",
    ),
    (
        Schema("RemoveTopicRecord", RemoveTopicRecord, (_f("topic_id", "topicId", "uuid"),)),
        "REMOVE_TOPIC_RECORD",
    ),
    (
        Schema(
            "FeatureLevelRecord",
            FeatureLevelRecord,
            (_f("name", "name", "string"), _f("feature_level", "featureLevel", "int16")),
        ),
        "FEATURE_LEVEL_RECORD",
    ),
    (
        Schema(
            "ProducerIdsRecord",
            ProducerIdsRecord,
            (
                _f("broker_id", "brokerId", "int32"),
                _f("broker_epoch", "brokerEpoch", "int64", default=-1),
                _f("next_producer_id", "nextProducerId", "int64"),
            ),
        ),
        "PRODUCER_IDS_RECORD",
    ),
    (
        Schema(
            "BrokerRegistrationChangeRecord",
            BrokerRegistrationChangeRecord,
            (
                _f("broker_id", "brokerId", "int32"),
                _f("broker_epoch", "brokerEpoch", "int64"),
                _f("fenced", "fenced", "int8", tag=0, default=0),
                _f("in_controlled_shutdown", "inControlledShutdown", "int8", since=1, tag=1, default=0),
                _f("log_dirs", "logDirs", "[]uuid", since=2, tag=2, default=()),
            ),
            range(3),
        ),
        "BROKER_REGISTRATION_CHANGE_RECORD",
    ),
    (Schema("NoOpRecord", NoOpRecord, ()), "NO_OP_RECORD"),
)


def _partition_record_version(r: Any) -> int:
    if r.eligible_leader_replicas is not None or r.last_known_elr is not None:
        return 2
    return 1 if r.directories else 0


def _partition_change_version(r: Any) -> int:
    if r.eligible_leader_replicas is not None or r.last_known_elr is not None:
        return 2
    return 1 if r.directories is not None else 0


@dataclass(frozen=True)
class _RecordType:
    api_key: int
    type_name: str
    compiled: CompiledSchema
    pick_version: Callable[[Any], int]
    headers: dict[int, bytes]
    fixed_version: int  # the version every record of the type is written at; -1: pick_version decides


def _fixed(version: int) -> Callable[[Any], int]:
    return lambda _record: version


# The types written at one version other than 0, and the two whose version depends on the record.
_FIXED_VERSION: dict[type, int] = {RegisterBrokerRecord: 3, BrokerRegistrationChangeRecord: 2}
_WRITE_VERSION: dict[type, Callable[[Any], int]] = {
    **{cls: _fixed(version) for cls, version in _FIXED_VERSION.items()},
    PartitionRecord: _partition_record_version,
    PartitionChangeRecord: _partition_change_version,
}

_BY_CLASS: dict[type, _RecordType] = {}
_BY_KEY: dict[int, _RecordType] = {}
# Decoders keyed by api_key << 16 | version.
_DECODERS: dict[int, DecodeFn] = {}

for _schema, _type_name in _SCHEMAS:
    _api_key = API_KEYS[_schema.cls]
    _compiled = compile_schema(_schema)
    _headers = {v: uvarint_bytes(FRAME_VERSION) + uvarint_bytes(_api_key) + uvarint_bytes(v) for v in _schema.versions}
    _pick = _WRITE_VERSION.get(_schema.cls)
    _fixed_at = _FIXED_VERSION.get(_schema.cls, 0 if _pick is None else -1)
    _rt = _RecordType(_api_key, _type_name, _compiled, _pick or _fixed(0), _headers, _fixed_at)
    _BY_CLASS[_schema.cls] = _rt
    _BY_KEY[_api_key] = _rt
    for _v, _dec in _compiled.decoders.items():
        _DECODERS[_api_key << 16 | _v] = _dec
del _schema, _type_name, _api_key, _compiled, _headers, _rt, _pick, _fixed_at

_ENCODE_ERRORS = (struct.error, AttributeError, TypeError, OverflowError)
_DECODE_ERRORS = (IndexError, struct.error, ValueError, OverflowError)


# --------------------------------------------------------------------------- API


def write_version(record: MetadataRecord) -> int:
    """The version `encode_record` writes for `record` (see the module docstring)."""
    return _record_type(record).pick_version(record)


def _record_type(record: object) -> _RecordType:
    rt = _BY_CLASS.get(type(record))
    if rt is None:
        raise TypeError(f"not a metadata record: {type(record).__name__}")
    return rt


def record_type_name(record: MetadataRecord) -> str:
    """Kafka's MetadataRecordType name, e.g. "TOPIC_RECORD"."""
    return _record_type(record).type_name


def encode_record(record: MetadataRecord, version: int | None = None) -> bytes:
    """The framed bytes of `record`, as Kafka's MetadataRecordSerde writes them.

    `version` defaults to `write_version(record)`. Raises TypeError for a
    non-record, ValueError for a value the version cannot hold (out-of-range
    integers, a None in a non-nullable field, a string over 32767 UTF-8 bytes, a
    non-default value of a field the version lacks).
    """
    if version is None and type(record) is ConfigRecord:
        fast = _encode_config_record(record)
        if fast is not None:
            return fast
    rt = _record_type(record)
    if version is None:
        version = rt.fixed_version if rt.fixed_version >= 0 else rt.pick_version(record)
    header = rt.headers.get(version)
    if header is None:
        raise ValueError(f"{rt.type_name} has no version {version}")
    out = [header]
    try:
        rt.compiled.encoders[version](record, out)
    except _ENCODE_ERRORS as exc:
        raise ValueError(f"cannot encode {rt.type_name} v{version}: {exc}") from None
    return b"".join(out)


# `ConfigRecord.__new__` is `object.__new__` for a Python class; a class compiled by mypyc has
# its own (object.__new__ refuses it).
_alloc_config_record = ConfigRecord.__new__


def new_config_record(resource_type: int, resource_name: str, name: str, value: str | None) -> ConfigRecord:
    """`ConfigRecord(...)` on the hot paths (a config write's rule; decoding, once per config
    write on every follower and broker): compiled, one C call per field (the dataclass's
    `__init__` runs as Python)."""
    record: ConfigRecord = _alloc_config_record(ConfigRecord)
    object.__setattr__(record, "resource_type", resource_type)
    object.__setattr__(record, "resource_name", resource_name)
    object.__setattr__(record, "name", name)
    object.__setattr__(record, "value", value)
    return record


# Each byte value as a bytes object of its own.
_BYTE: Final = [bytes((i,)) for i in range(256)]
# A ConfigRecord's frame at its only version (0) up to its resource type, by the type's byte:
# frame version, api key, record version, resource type (int8).
_CONFIG_RECORD_PREFIX: Final = [_BY_CLASS[ConfigRecord].headers[0] + b for b in _BYTE]


def _encode_config_record(r: ConfigRecord) -> bytes | None:
    """`encode_record(r)` of a ConfigRecord (one per config write) in compiled code, the same
    bytes as its generated encoder (which runs as Python, about 9k instructions): resource
    type (int8), resource name, name and value (compact strings, the value nullable), no
    tagged fields. None for anything but the common shape (an int resource type in range,
    str fields each under 127 UTF-8 bytes): the generated encoder writes those, or raises."""
    resource_type = r.resource_type
    resource_name = r.resource_name
    name = r.name
    value = r.value
    if type(resource_type) is not int or not -128 <= resource_type <= 127:
        return None
    if type(resource_name) is not str or type(name) is not str:
        return None
    raw_resource = resource_name.encode()
    raw_name = name.encode()
    if len(raw_resource) >= 0x7F or len(raw_name) >= 0x7F:
        return None
    if value is None:
        raw_value = b""
        value_length = _BYTE[0]  # null
    elif type(value) is str:
        raw_value = value.encode()
        if len(raw_value) >= 0x7F:
            return None
        value_length = _BYTE[len(raw_value) + 1]
    else:
        return None
    return b"".join(
        [
            _CONFIG_RECORD_PREFIX[resource_type & 0xFF],
            _BYTE[len(raw_resource) + 1],
            raw_resource,
            _BYTE[len(raw_name) + 1],
            raw_name,
            value_length,
            raw_value,
            _BYTE[0],  # no tagged fields
        ]
    )


_CONFIG_RECORD_KEY: Final = _BY_CLASS[ConfigRecord].api_key


def _decode_config_record(buf: bytes, p: int, size: int) -> ConfigRecord | None:
    """The ConfigRecord v0 body in `buf[p:size]` in compiled code, the record its generated
    decoder gives (which runs as Python, about 7 µs): resource type (int8), resource name and
    name (compact strings), value (compact nullable string), an empty tagged-field section,
    nothing after. None for anything but that common shape (one-byte lengths, valid UTF-8):
    the generated decoder reads the rest, or raises."""
    if p >= size:
        return None
    resource_type = buf[p]
    if resource_type >= 0x80:
        resource_type -= 0x100
    p += 1
    strings: list[str | None] = []
    try:
        for nullable in (False, False, True):
            length = buf[p]  # compact: length + 1, 0 for null
            if length == 0 and nullable:
                strings.append(None)
                p += 1
                continue
            if not 0 < length < 0x80:
                return None
            end = p + length
            if end > size:
                return None
            strings.append(buf[p + 1 : end].decode())
            p = end
        if p + 1 != size or buf[p] != 0:
            return None
    except (IndexError, UnicodeDecodeError):
        return None
    resource_name, name, value = strings
    if resource_name is None or name is None:
        return None
    return new_config_record(resource_type, resource_name, name, value)


def decode_record_with_version(data: bytes | bytearray | memoryview) -> tuple[MetadataRecord, int]:
    """Decode one framed record value; return (record, version).

    Raises RecordDecodeError (and nothing else) for any malformed input: a frame
    version other than 1, an unknown type or version, truncation, trailing bytes,
    bad lengths, invalid UTF-8.
    """
    buf = data if type(data) is bytes else bytes(data)
    size = len(buf)
    try:
        if size >= 3 and buf[0] == FRAME_VERSION and buf[1] < 0x80 and buf[2] < 0x80:
            api_key = buf[1]
            version = buf[2]
            p = 3
        else:
            frame, p = read_uvarint(buf, 0)
            if frame != FRAME_VERSION:
                raise RecordDecodeError(f"unsupported metadata record frame version {frame} (only 1 is)")
            api_key, p = read_uvarint(buf, p)
            version, p = read_uvarint(buf, p)
        if api_key == _CONFIG_RECORD_KEY and version == 0:
            config = _decode_config_record(buf, p, size)  # one per config write
            if config is not None:
                return config, 0
        decoder = _DECODERS.get(api_key << 16 | version)
        if decoder is None:
            rt = _BY_KEY.get(api_key)
            if rt is None:
                raise RecordDecodeError(f"unknown metadata record type {api_key}")
            raise RecordDecodeError(f"unsupported {rt.type_name} version {version}")
        record, p = decoder(buf, p, size)
    except RecordDecodeError:
        raise
    except _DECODE_ERRORS as exc:
        raise RecordDecodeError(f"malformed metadata record: {type(exc).__name__}: {exc}") from None
    if p != size:
        raise RecordDecodeError(f"{size - p} byte(s) of garbage after {type(record).__name__}")
    return record, version


def decode_record(data: bytes | bytearray | memoryview) -> MetadataRecord:
    """Decode one framed record value (see `decode_record_with_version`)."""
    return decode_record_with_version(data)[0]


# --------------------------------------------------------------------------- JSON


def kafka_uuid_string(value: uuid.UUID) -> str:
    """Kafka's Uuid.toString(): URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode("ascii")


def _json_value(f: Field, value: Any, version: int) -> Any:
    if value is None:
        return None
    kind = f.kind
    if kind == "uuid":
        return kafka_uuid_string(value)
    if kind == "[]uuid":
        return [kafka_uuid_string(u) for u in value]
    if kind == "[]int32":
        return list(value)
    if kind == "[]struct":
        assert f.struct is not None
        return [_json_struct(f.struct, item, version) for item in value]
    if kind == "bool":
        return bool(value)
    return value


def _json_struct(schema: Schema, obj: Any, version: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in schema.fields:
        if f.since > version:
            continue
        value = getattr(obj, f.attr)
        if f.tag is not None and f.default is not REQUIRED and value == f.default:
            continue  # Kafka's JSON converters omit tagged fields at their default
        out[f.json] = _json_value(f, value, version)
    return out


def record_to_json(record: MetadataRecord, version: int | None = None) -> dict[str, Any]:
    """The record as Kafka's generated `<Record>JsonConverter.write` renders it
    (camelCase field names in schema order, UUIDs in Kafka's base64 form, tagged
    fields only when not at their default)."""
    rt = _record_type(record)
    if version is None:
        version = rt.pick_version(record)
    return _json_struct(rt.compiled.schema, record, version)
