"""The active controller's requests and answers, as typed values.

They mirror Kafka's RPCs (CreateTopics, DeleteTopics, CreatePartitions,
IncrementalAlterConfigs, DescribeConfigs, ElectLeaders, BrokerRegistration,
BrokerHeartbeat, AlterPartition, AllocateProducerIds) with the fields pykraft uses. The controller
takes and returns these; `quorum.wire.admin_codec` maps them to the Kafka
protocol; the REST API builds them from JSON. Error codes are Kafka's numbers;
`message` is the human text Kafka would send (or None).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from uuid import UUID

from quorum.frozen_init import fast_frozen_init

NO_NUM_PARTITIONS = -1  # CreateTopics: use the broker default (num.partitions)
NO_REPLICATION_FACTOR = -1  # CreateTopics: use default.replication.factor


class ConfigResourceType(IntEnum):
    TOPIC = 2
    BROKER = 4


class AlterConfigOpType(IntEnum):
    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


class ElectionType(IntEnum):
    PREFERRED = 0
    UNCLEAN = 1


# ---------------------------------------------------------------- topics


@dataclass(frozen=True, slots=True)
class CreatableTopic:
    name: str
    num_partitions: int = NO_NUM_PARTITIONS
    replication_factor: int = NO_REPLICATION_FACTOR
    # Manual assignment: partition -> broker ids (then num_partitions/replication_factor are -1).
    assignments: Mapping[int, tuple[int, ...]] | None = None
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CreateTopicsRequest:
    topics: tuple[CreatableTopic, ...]
    validate_only: bool = False
    timeout_ms: int = 30_000


fast_frozen_init(CreateTopicsRequest)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class CreateTopicResult:
    name: str
    error_code: int = 0
    message: str | None = None
    topic_id: UUID | None = None
    num_partitions: int = -1
    replication_factor: int = -1
    configs: Mapping[str, str] = field(default_factory=dict)  # explicit topic configs


@dataclass(frozen=True, slots=True)
class CreateTopicsResponse:
    topics: tuple[CreateTopicResult, ...]


fast_frozen_init(CreateTopicsResponse)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class DeleteTopicsRequest:
    names: tuple[str, ...] = ()
    topic_ids: tuple[UUID, ...] = ()
    timeout_ms: int = 30_000


fast_frozen_init(DeleteTopicsRequest)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class DeleteTopicResult:
    name: str | None
    topic_id: UUID | None
    error_code: int = 0
    message: str | None = None


fast_frozen_init(DeleteTopicResult)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class DeleteTopicsResponse:
    topics: tuple[DeleteTopicResult, ...]


fast_frozen_init(DeleteTopicsResponse)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class PartitionsIncrease:
    name: str
    count: int  # the new total number of partitions
    assignments: tuple[tuple[int, ...], ...] | None = None  # replicas of each new partition


fast_frozen_init(PartitionsIncrease)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class CreatePartitionsRequest:
    topics: tuple[PartitionsIncrease, ...]
    validate_only: bool = False
    timeout_ms: int = 30_000


fast_frozen_init(CreatePartitionsRequest)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class CreatePartitionsResult:
    name: str
    error_code: int = 0
    message: str | None = None


fast_frozen_init(CreatePartitionsResult)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class CreatePartitionsResponse:
    topics: tuple[CreatePartitionsResult, ...]


fast_frozen_init(CreatePartitionsResponse)  # not a decorator: mypyc makes a decorated class a Python class


# ---------------------------------------------------------------- configs


@dataclass(frozen=True, slots=True, init=False)
class AlterConfigOp:
    name: str
    op: AlterConfigOpType
    value: str | None = None

    # Compiled with the module (the dataclass decorator's __init__ would run as Python there);
    # uncompiled, fast_frozen_init replaces it.
    def __init__(self, name: str, op: AlterConfigOpType, value: str | None = None) -> None:
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "op", op)
        object.__setattr__(self, "value", value)


fast_frozen_init(AlterConfigOp)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True, init=False)
class AlterConfigsResource:
    resource_type: ConfigResourceType
    resource_name: str
    ops: tuple[AlterConfigOp, ...]

    # Compiled with the module (the dataclass decorator's __init__ would run as Python there);
    # uncompiled, fast_frozen_init replaces it.
    def __init__(self, resource_type: ConfigResourceType, resource_name: str, ops: tuple[AlterConfigOp, ...]) -> None:
        object.__setattr__(self, "resource_type", resource_type)
        object.__setattr__(self, "resource_name", resource_name)
        object.__setattr__(self, "ops", ops)


fast_frozen_init(AlterConfigsResource)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True, init=False)
class IncrementalAlterConfigsRequest:
    resources: tuple[AlterConfigsResource, ...]
    validate_only: bool = False

    # Compiled with the module (the dataclass decorator's __init__ would run as Python there);
    # uncompiled, fast_frozen_init replaces it.
    def __init__(self, resources: tuple[AlterConfigsResource, ...], validate_only: bool = False) -> None:
        object.__setattr__(self, "resources", resources)
        object.__setattr__(self, "validate_only", validate_only)


fast_frozen_init(IncrementalAlterConfigsRequest)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True, init=False)
class AlterConfigsResult:
    resource_type: ConfigResourceType
    resource_name: str
    error_code: int = 0
    message: str | None = None

    # Compiled with the module (the dataclass decorator's __init__ would run as Python there);
    # uncompiled, fast_frozen_init replaces it.
    def __init__(
        self,
        resource_type: ConfigResourceType,
        resource_name: str,
        error_code: int = 0,
        message: str | None = None,
    ) -> None:
        object.__setattr__(self, "resource_type", resource_type)
        object.__setattr__(self, "resource_name", resource_name)
        object.__setattr__(self, "error_code", error_code)
        object.__setattr__(self, "message", message)


fast_frozen_init(AlterConfigsResult)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True, init=False)
class IncrementalAlterConfigsResponse:
    resources: tuple[AlterConfigsResult, ...]

    # Compiled with the module (the dataclass decorator's __init__ would run as Python there);
    # uncompiled, fast_frozen_init replaces it.
    def __init__(self, resources: tuple[AlterConfigsResult, ...]) -> None:
        object.__setattr__(self, "resources", resources)


fast_frozen_init(IncrementalAlterConfigsResponse)  # not a decorator: mypyc makes a decorated class a Python class


# ---------------------------------------------------------------- leaders


@dataclass(frozen=True, slots=True)
class ElectLeadersRequest:
    election_type: ElectionType
    # (topic name, partition) pairs; None = every partition
    partitions: tuple[tuple[str, int], ...] | None = None
    timeout_ms: int = 30_000


fast_frozen_init(ElectLeadersRequest)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class ElectLeaderResult:
    topic: str
    partition: int
    error_code: int = 0  # ELECTION_NOT_NEEDED (84) when the right leader already leads
    message: str | None = None


fast_frozen_init(ElectLeaderResult)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class ElectLeadersResponse:
    error_code: int
    results: tuple[ElectLeaderResult, ...]


fast_frozen_init(ElectLeadersResponse)  # not a decorator: mypyc makes a decorated class a Python class


# ---------------------------------------------------------------- brokers


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    name: str
    host: str
    port: int
    security_protocol: int = 0  # PLAINTEXT


fast_frozen_init(BrokerEndpoint)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class BrokerRegistrationRequest:
    broker_id: int
    cluster_id: str
    incarnation_id: UUID
    listeners: tuple[BrokerEndpoint, ...]
    rack: str | None = None
    features: Mapping[str, tuple[int, int]] = field(default_factory=dict)  # name -> (min, max)
    previous_broker_epoch: int = -1


@dataclass(frozen=True, slots=True)
class BrokerRegistrationResponse:
    error_code: int
    broker_epoch: int = -1
    message: str | None = None


fast_frozen_init(BrokerRegistrationResponse)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True, init=False)
class BrokerHeartbeatRequest:
    broker_id: int
    broker_epoch: int
    current_metadata_offset: int
    want_fence: bool
    want_shut_down: bool

    # Compiled with the module (the dataclass decorator's __init__ would run as Python there);
    # uncompiled, fast_frozen_init replaces it.
    def __init__(
        self,
        broker_id: int,
        broker_epoch: int,
        current_metadata_offset: int,
        want_fence: bool,
        want_shut_down: bool,
    ) -> None:
        object.__setattr__(self, "broker_id", broker_id)
        object.__setattr__(self, "broker_epoch", broker_epoch)
        object.__setattr__(self, "current_metadata_offset", current_metadata_offset)
        object.__setattr__(self, "want_fence", want_fence)
        object.__setattr__(self, "want_shut_down", want_shut_down)


fast_frozen_init(BrokerHeartbeatRequest)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True, init=False)
class BrokerHeartbeatResponse:
    error_code: int
    is_caught_up: bool = False
    is_fenced: bool = True
    should_shut_down: bool = False

    # Compiled with the module (the dataclass decorator's __init__ would run as Python there);
    # uncompiled, fast_frozen_init replaces it.
    def __init__(
        self,
        error_code: int,
        is_caught_up: bool = False,
        is_fenced: bool = True,
        should_shut_down: bool = False,
    ) -> None:
        object.__setattr__(self, "error_code", error_code)
        object.__setattr__(self, "is_caught_up", is_caught_up)
        object.__setattr__(self, "is_fenced", is_fenced)
        object.__setattr__(self, "should_shut_down", should_shut_down)


fast_frozen_init(BrokerHeartbeatResponse)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class IsrMember:
    """An entry of AlterPartition's NewIsrWithEpochs; broker epoch -1 skips the epoch check."""

    broker_id: int
    broker_epoch: int = -1


fast_frozen_init(IsrMember)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class AlterPartitionItem:
    topic_id: UUID
    partition: int
    leader_epoch: int
    new_isr: tuple[IsrMember, ...]
    leader_recovery_state: int
    partition_epoch: int


fast_frozen_init(AlterPartitionItem)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class AlterPartitionRequest:
    broker_id: int
    broker_epoch: int
    partitions: tuple[AlterPartitionItem, ...]


fast_frozen_init(AlterPartitionRequest)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class AlterPartitionResult:
    topic_id: UUID
    partition: int
    error_code: int
    leader_id: int = -1
    leader_epoch: int = -1
    isr: tuple[int, ...] = ()
    leader_recovery_state: int = 0
    partition_epoch: int = -1


fast_frozen_init(AlterPartitionResult)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class AlterPartitionResponse:
    error_code: int
    partitions: tuple[AlterPartitionResult, ...]


fast_frozen_init(AlterPartitionResponse)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class AllocateProducerIdsRequest:
    """KIP-730 (api 67): a broker asks for a block of producer ids."""

    broker_id: int
    broker_epoch: int


fast_frozen_init(AllocateProducerIdsRequest)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class AllocateProducerIdsResponse:
    error_code: int
    producer_id_start: int = -1  # the block's first id
    producer_id_len: int = 0  # ids in the block: [start, start + len)


fast_frozen_init(AllocateProducerIdsResponse)  # not a decorator: mypyc makes a decorated class a Python class


AdminRequest = (
    CreateTopicsRequest
    | DeleteTopicsRequest
    | CreatePartitionsRequest
    | IncrementalAlterConfigsRequest
    | ElectLeadersRequest
)
AdminResponse = (
    CreateTopicsResponse
    | DeleteTopicsResponse
    | CreatePartitionsResponse
    | IncrementalAlterConfigsResponse
    | ElectLeadersResponse
)
ControllerRequest = (
    AdminRequest
    | BrokerRegistrationRequest
    | BrokerHeartbeatRequest
    | AlterPartitionRequest
    | AllocateProducerIdsRequest
)
ControllerResponse = (
    AdminResponse
    | BrokerRegistrationResponse
    | BrokerHeartbeatResponse
    | AlterPartitionResponse
    | AllocateProducerIdsResponse
)
