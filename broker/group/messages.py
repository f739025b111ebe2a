"""The group coordinator's requests and answers, as plain frozen values.

The listener (`broker.kafka.group_apis`) builds the requests from decoded frames and encodes
the answers; the coordinator (`broker.group.shard.GroupShard`) takes and returns them.
Times are milliseconds; errors are `ErrorCode`s, per item where Kafka has them per item.
"""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

from quorum.frozen_init import fast_frozen_init
from quorum.kafka_errors import ErrorCode


@dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    client_id: str
    client_host: str
    version: int  # the JoinGroup version: v4+ require a known member id (KIP-394)


fast_frozen_init(JoinRequest)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class JoinedMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


fast_frozen_init(JoinedMember)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: ErrorCode
    generation: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    members: tuple[JoinedMember, ...] = ()  # the leader's answer only
    skip_assignment: bool = False


fast_frozen_init(JoinResult)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class SyncRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    generation: int
    protocol_type: str | None
    protocol_name: str | None
    assignments: tuple[tuple[str, bytes], ...]  # the leader's: (member id, assignment)


fast_frozen_init(SyncRequest)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


fast_frozen_init(SyncResult)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    generation: int


fast_frozen_init(HeartbeatRequest)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class LeavingMember:
    member_id: str
    group_instance_id: str | None = None


fast_frozen_init(LeavingMember)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class LeaveResult:
    error: ErrorCode  # the group's (UNKNOWN_MEMBER_ID when the group is unknown, ...)
    members: tuple[tuple[LeavingMember, ErrorCode], ...] = ()


fast_frozen_init(LeaveResult)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True, init=False)
class CommitPartition:
    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""

    # Compiled with the module (the dataclass decorator's __init__ would run as Python there);
    # uncompiled, fast_frozen_init replaces it.
    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        leader_epoch: int = -1,
        metadata: str | None = "",
    ) -> None:
        object.__setattr__(self, "topic", topic)
        object.__setattr__(self, "partition", partition)
        object.__setattr__(self, "offset", offset)
        object.__setattr__(self, "leader_epoch", leader_epoch)
        object.__setattr__(self, "metadata", metadata)


fast_frozen_init(CommitPartition)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True, init=False)
class CommitRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    generation: int  # -1: a commit from outside any generation (admin tools, simple consumers)
    retention_ms: int  # -1: the broker's offsets.retention.minutes
    partitions: tuple[CommitPartition, ...]
    version: int  # the OffsetCommit version (v9+: GROUP_ID_NOT_FOUND for an unknown group)

    # Compiled with the module (the dataclass decorator's __init__ would run as Python there);
    # uncompiled, fast_frozen_init replaces it.
    def __init__(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation: int,
        retention_ms: int,
        partitions: tuple[CommitPartition, ...],
        version: int,
    ) -> None:
        object.__setattr__(self, "group_id", group_id)
        object.__setattr__(self, "member_id", member_id)
        object.__setattr__(self, "group_instance_id", group_instance_id)
        object.__setattr__(self, "generation", generation)
        object.__setattr__(self, "retention_ms", retention_ms)
        object.__setattr__(self, "partitions", partitions)
        object.__setattr__(self, "version", version)


fast_frozen_init(CommitRequest)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class TxnCommitRequest:
    """TxnOffsetCommit (API 28): offsets committed inside a producer's transaction. They stay
    pending (invisible to OffsetFetch) until the transaction's marker completes them."""

    group_id: str
    producer_id: int  # int64, the transactional producer's id
    producer_epoch: int  # int16
    partitions: tuple[CommitPartition, ...]
    member_id: str = ""  # v3+ (v0-2: "", generation -1, no instance: not checked, as Kafka)
    group_instance_id: str | None = None
    generation: int = -1
    transactional_id: str = ""


fast_frozen_init(TxnCommitRequest)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    topic: str
    partition: int
    offset: int = -1
    leader_epoch: int = -1
    metadata: str = ""
    error: ErrorCode = ErrorCode.NONE


fast_frozen_init(CommittedOffset)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = "classic"


fast_frozen_init(GroupListing)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class DescribedMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


fast_frozen_init(DescribedMember)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    error: ErrorCode
    state: str
    protocol_type: str
    protocol: str
    members: tuple[DescribedMember, ...] = ()


fast_frozen_init(GroupDescription)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class ConsumerHeartbeatRequest:
    """ConsumerGroupHeartbeat (KIP-848). None fields are "unchanged since the last heartbeat"."""

    group_id: str
    member_id: str
    member_epoch: int  # 0: join; -1: leave; -2: a static member leaving for a while
    instance_id: str | None
    rack_id: str | None
    rebalance_timeout_ms: int
    subscribed: tuple[str, ...] | None
    server_assignor: str | None
    owned: tuple[tuple[UUID, int], ...] | None
    client_id: str
    client_host: str
    subscribed_regex: str | None = None  # SubscribedTopicRegex (None: unchanged; "": none)


fast_frozen_init(ConsumerHeartbeatRequest)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class ConsumerHeartbeatResult:
    error: ErrorCode
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = -1
    heartbeat_interval_ms: int = 0
    assignment: tuple[tuple[UUID, int], ...] | None = None


fast_frozen_init(ConsumerHeartbeatResult)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class ConsumerMemberDescription:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed: tuple[str, ...]
    assignment: tuple[tuple[UUID, int], ...]
    target: tuple[tuple[UUID, int], ...]
    subscribed_regex: str | None = None


fast_frozen_init(ConsumerMemberDescription)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class ConsumerGroupDescription:
    group_id: str
    error: ErrorCode
    state: str = "Dead"
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor: str = ""
    members: tuple[ConsumerMemberDescription, ...] = ()


fast_frozen_init(ConsumerGroupDescription)  # not a decorator: mypyc makes a decorated class a Python class
