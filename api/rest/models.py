"""Pydantic models of the REST API: request bodies (strict; unknown fields rejected) and the
resources it answers with (REST Proxy v3 shapes, plus pykraft's extra fields).

Field names and kinds follow the REST Proxy v3 OpenAPI schemas (``ClusterData``,
``BrokerData``, ``TopicData``, ``PartitionData``, ``ReplicaData``, ``TopicConfigData``,
``ReassignmentData``, ``Error``...). Extra, pykraft-only fields are marked so in their
descriptions; clients of the REST Proxy ignore them.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, field_validator

INT16_MIN, INT16_MAX = -(2**15), 2**15 - 1
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def _encodable(value: str) -> str:
    """Reject strings that are not valid Unicode text (lone surrogates from JSON escapes)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("must be valid Unicode text (no lone surrogates)") from None
    return value


def _integral(value: object) -> object:
    """JSON Schema's ``integer`` admits 3.0: take an integral float as the integer (strict
    validation still rejects strings, booleans and fractions)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


Text = Annotated[str, AfterValidator(_encodable)]
Int32 = Annotated[int, BeforeValidator(_integral), Field(ge=INT32_MIN, le=INT32_MAX)]
Int16 = Annotated[int, BeforeValidator(_integral), Field(ge=INT16_MIN, le=INT16_MAX)]


# ====================================================================== common parts


class ErrorBody(BaseModel):
    """Every error answer (the REST Proxy v3 ``Error`` schema)."""

    error_code: int = Field(description="REST error code: 40002, 40403, 50003, ... or the HTTP status.")
    message: str | None


class Relationship(BaseModel):
    related: str


class ResourceMetadata(BaseModel):
    model_config = ConfigDict(validate_by_name=True, validate_by_alias=True, serialize_by_alias=True)

    self_: str = Field(alias="self")
    resource_name: str | None = None


class CollectionMetadata(BaseModel):
    model_config = ConfigDict(validate_by_name=True, validate_by_alias=True, serialize_by_alias=True)

    self_: str = Field(alias="self")
    next: str | None = None


# ====================================================================== resources


class ClusterData(BaseModel):
    kind: Literal["KafkaCluster"] = "KafkaCluster"
    metadata: ResourceMetadata
    cluster_id: str
    controller: Relationship | None = Field(
        default=None, description="The KRaft controller quorum (its status: the quorum leader is the controller)."
    )
    brokers: Relationship
    topics: Relationship
    partition_reassignments: Relationship
    consumer_groups: Relationship
    quorum_replication: Relationship = Field(description="pykraft: the quorum's replication state.")


class ClusterDataList(BaseModel):
    kind: Literal["KafkaClusterList"] = "KafkaClusterList"
    metadata: CollectionMetadata
    data: list[ClusterData]


class BrokerListener(BaseModel):
    name: str
    host: str
    port: int
    security_protocol: int


class BrokerData(BaseModel):
    kind: Literal["KafkaBroker"] = "KafkaBroker"
    metadata: ResourceMetadata
    cluster_id: str
    broker_id: int
    host: str | None
    port: int | None
    rack: str | None
    partition_replicas: Relationship
    fenced: bool = Field(description="pykraft: the broker is fenced (may not lead or be in an ISR).")
    in_controlled_shutdown: bool = Field(description="pykraft: the broker is shutting down.")
    epoch: int = Field(description="pykraft: the broker epoch (offset of its registration record).")
    listeners: list[BrokerListener] = Field(description="pykraft: every registered listener.")


class BrokerDataList(BaseModel):
    kind: Literal["KafkaBrokerList"] = "KafkaBrokerList"
    metadata: CollectionMetadata
    data: list[BrokerData]


class TopicData(BaseModel):
    kind: Literal["KafkaTopic"] = "KafkaTopic"
    metadata: ResourceMetadata
    cluster_id: str
    topic_name: str
    is_internal: bool
    replication_factor: int
    partitions_count: int
    partitions: Relationship
    configs: Relationship
    partition_reassignments: Relationship
    topic_id: str | None = Field(default=None, description="pykraft: Kafka's topic id (base64), when known.")


class TopicDataList(BaseModel):
    kind: Literal["KafkaTopicList"] = "KafkaTopicList"
    metadata: CollectionMetadata
    data: list[TopicData]


class PartitionData(BaseModel):
    kind: Literal["KafkaPartition"] = "KafkaPartition"
    metadata: ResourceMetadata
    cluster_id: str
    topic_name: str
    partition_id: int
    leader: Relationship | None = Field(description="The leader's replica; null when the partition has no leader.")
    replicas: Relationship
    reassignment: Relationship
    leader_id: int | None = Field(description="pykraft: the leader's broker id, null when none.")
    replica_ids: list[int] = Field(description="pykraft: the assigned replicas, preferred leader first.")
    isr: list[int] = Field(description="pykraft: the in-sync replicas.")
    leader_epoch: int = Field(description="pykraft")
    partition_epoch: int = Field(description="pykraft")
    leader_recovery_state: Literal["RECOVERED", "RECOVERING"] = Field(
        description="pykraft: RECOVERING after an unclean election until the leader recovered."
    )


class PartitionDataList(BaseModel):
    kind: Literal["KafkaPartitionList"] = "KafkaPartitionList"
    metadata: CollectionMetadata
    data: list[PartitionData]


class ReplicaData(BaseModel):
    kind: Literal["KafkaReplica"] = "KafkaReplica"
    metadata: ResourceMetadata
    cluster_id: str
    topic_name: str
    partition_id: int
    broker_id: int
    is_leader: bool
    is_in_sync: bool
    broker: Relationship


class ReplicaDataList(BaseModel):
    kind: Literal["KafkaReplicaList"] = "KafkaReplicaList"
    metadata: CollectionMetadata
    data: list[ReplicaData]


class ReassignmentData(BaseModel):
    kind: Literal["KafkaReassignment"] = "KafkaReassignment"
    metadata: ResourceMetadata
    cluster_id: str
    topic_name: str
    partition_id: int
    adding_replicas: list[int]
    removing_replicas: list[int]
    replicas: Relationship


class ReassignmentDataList(BaseModel):
    kind: Literal["KafkaReassignmentList"] = "KafkaReassignmentList"
    metadata: CollectionMetadata
    data: list[ReassignmentData]


ConfigSourceName = Literal[
    "DYNAMIC_TOPIC_CONFIG",
    "DYNAMIC_BROKER_CONFIG",
    "DYNAMIC_DEFAULT_BROKER_CONFIG",
    "STATIC_BROKER_CONFIG",
    "DEFAULT_CONFIG",
    "UNKNOWN",
]


class ConfigSynonymData(BaseModel):
    name: str
    value: str | None
    source: ConfigSourceName


class TopicConfigData(BaseModel):
    kind: Literal["KafkaTopicConfig"] = "KafkaTopicConfig"
    metadata: ResourceMetadata
    cluster_id: str
    topic_name: str
    name: str
    value: str | None
    is_default: bool
    is_read_only: bool
    is_sensitive: bool
    source: ConfigSourceName
    synonyms: list[ConfigSynonymData]


class TopicConfigDataList(BaseModel):
    kind: Literal["KafkaTopicConfigList"] = "KafkaTopicConfigList"
    metadata: CollectionMetadata
    data: list[TopicConfigData]


# ---------------------------------------------------------------- pykraft extensions


class QuorumStatusData(BaseModel):
    """``kafka-metadata-quorum describe --status``."""

    kind: Literal["KafkaQuorumStatus"] = "KafkaQuorumStatus"
    metadata: ResourceMetadata
    cluster_id: str
    leader_id: int
    leader_epoch: int
    high_watermark: int
    max_follower_lag: int
    max_follower_lag_time_ms: int
    voters: list[int]
    observers: list[int]
    replication: Relationship


class QuorumReplicaData(BaseModel):
    """One row of ``kafka-metadata-quorum describe --replication``."""

    kind: Literal["KafkaQuorumReplica"] = "KafkaQuorumReplica"
    node_id: int
    log_end_offset: int
    lag: int
    last_fetch_timestamp: int = Field(description="Epoch ms of the last fetch; -1 when unknown.")
    last_caught_up_timestamp: int = Field(description="Epoch ms when last caught up; -1 when unknown.")
    status: Literal["Leader", "Follower", "Observer"]


class QuorumReplicaDataList(BaseModel):
    kind: Literal["KafkaQuorumReplicaList"] = "KafkaQuorumReplicaList"
    metadata: CollectionMetadata
    cluster_id: str
    leader_id: int
    leader_epoch: int
    data: list[QuorumReplicaData]


class LeaderElectionData(BaseModel):
    """The outcome of a leader election for one partition."""

    kind: Literal["KafkaLeaderElection"] = "KafkaLeaderElection"
    metadata: ResourceMetadata
    cluster_id: str
    topic_name: str
    partition_id: int
    election_type: Literal["PREFERRED", "UNCLEAN"]
    error_code: int = Field(
        description="200 when the partition has the leader the election wants (elected now, or already), "
        "else the REST error code the failure maps to (40403, 50003, ...)."
    )
    message: str | None
    kafka_error_code: int = Field(description="Kafka's error code: 0, 84 ELECTION_NOT_NEEDED, 80, 83, 3, ...")
    kafka_error_name: str
    leader_id: int | None = Field(description="The partition's leader in this node's image after the election.")
    partition: Relationship


class LeaderElectionDataList(BaseModel):
    kind: Literal["KafkaLeaderElectionList"] = "KafkaLeaderElectionList"
    metadata: CollectionMetadata
    data: list[LeaderElectionData]


# ====================================================================== request bodies


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class ConfigEntryBody(_Body):
    name: Text
    value: Text | None = None


class ReplicasAssignmentBody(_Body):
    partition_id: Int32
    broker_ids: list[Int32]


_PARTITION_KEY_MAX_DIGITS = 10


class CreateTopicBody(_Body):
    """``CreateTopicRequestData``. ``replicas_assignments`` is the REST Proxy's map
    (``{"0": [1, 2]}``) or a list of ``{partition_id, broker_ids}``."""

    topic_name: Text
    partitions_count: Int32 | None = None
    replication_factor: Int16 | None = None
    configs: list[ConfigEntryBody] = Field(default_factory=list)
    replicas_assignments: dict[Text, list[Int32]] | list[ReplicasAssignmentBody] | None = None
    validate_only: bool = False

    @field_validator("replicas_assignments")
    @classmethod
    def _partition_keys(
        cls, value: dict[str, list[int]] | list[ReplicasAssignmentBody] | None
    ) -> dict[str, list[int]] | list[ReplicasAssignmentBody] | None:
        if isinstance(value, dict):
            for key in value:
                digits = key[1:] if key.startswith("-") else key
                if not (digits.isascii() and digits.isdigit() and len(digits) <= _PARTITION_KEY_MAX_DIGITS):
                    raise ValueError(f"partition id {key!r} is not an integer")
                if not INT32_MIN <= int(key) <= INT32_MAX:
                    raise ValueError(f"partition id {key} is out of range")
        return value


class UpdatePartitionCountBody(_Body):
    partitions_count: Int32


class UpdateConfigBody(_Body):
    value: Text | None = None


class AlterConfigEntryBody(_Body):
    name: Text
    value: Text | None = None
    operation: Literal["SET", "DELETE", "APPEND", "SUBTRACT"] | None = Field(
        default=None, description="SET when omitted or null. APPEND and SUBTRACT (list configs) are pykraft's."
    )


class AlterConfigBatchBody(_Body):
    data: list[AlterConfigEntryBody]
    validate_only: bool = False


class TopicPartitionBody(_Body):
    topic_name: Text
    partition_id: Int32


class ElectLeadersBody(_Body):
    election_type: Literal["PREFERRED", "UNCLEAN"]
    partitions: list[TopicPartitionBody] | None = Field(
        default=None, description="The partitions to elect leaders for; omitted or null means every partition."
    )


class ElectLeaderBody(_Body):
    election_type: Literal["PREFERRED", "UNCLEAN"] = "PREFERRED"


# ====================================================================== records


class ProduceResponseData(BaseModel):
    type: str | None = Field(description="BINARY, JSON or STRING, as the request gave it.")
    size: int = Field(description="Bytes of the key or value as written (0 for null).")


class ProduceResponse(BaseModel):
    """One delivery report (REST Proxy v3 ``ProduceResponse``); the answer holds one per record,
    in request order, each followed by CRLF. Only ``error_code`` and ``message`` on an error."""

    error_code: int = Field(description="200 when the record was written, else the REST error code.")
    message: str | None = None
    cluster_id: str | None = None
    topic_name: str | None = None
    partition_id: int | None = None
    offset: int | None = None
    timestamp: str | None = Field(default=None, description="The record's timestamp, ISO-8601 UTC.")
    key: ProduceResponseData | None = None
    value: ProduceResponseData | None = None


class PartitionWithOffsetsData(BaseModel):
    kind: Literal["KafkaPartitionWithOffsets"] = "KafkaPartitionWithOffsets"
    metadata: ResourceMetadata
    cluster_id: str
    topic_name: str
    partition_id: int
    earliest_offset: int = Field(description="The log start offset.")
    latest_offset: int = Field(description="The high watermark: the offset the next record gets.")


# ====================================================================== consumer groups


class ConsumerGroupData(BaseModel):
    kind: Literal["KafkaConsumerGroup"] = "KafkaConsumerGroup"
    metadata: ResourceMetadata
    cluster_id: str
    consumer_group_id: str
    is_simple: bool
    partition_assignor: str
    state: str = Field(description="EMPTY, PREPARING_REBALANCE, COMPLETING_REBALANCE, STABLE, DEAD, ...")
    type: str = Field(description="CLASSIC or CONSUMER (KIP-848).")
    is_mixed_consumer_group: bool
    coordinator: Relationship
    consumers: Relationship
    lag_summary: Relationship


class ConsumerGroupDataList(BaseModel):
    kind: Literal["KafkaConsumerGroupList"] = "KafkaConsumerGroupList"
    metadata: CollectionMetadata
    data: list[ConsumerGroupData]


class ConsumerData(BaseModel):
    kind: Literal["KafkaConsumer"] = "KafkaConsumer"
    metadata: ResourceMetadata
    cluster_id: str
    consumer_group_id: str
    consumer_id: str
    instance_id: str | None
    client_id: str
    assignments: Relationship


class ConsumerDataList(BaseModel):
    kind: Literal["KafkaConsumerList"] = "KafkaConsumerList"
    metadata: CollectionMetadata
    data: list[ConsumerData]


class ConsumerAssignmentData(BaseModel):
    kind: Literal["KafkaConsumerAssignment"] = "KafkaConsumerAssignment"
    metadata: ResourceMetadata
    cluster_id: str
    consumer_group_id: str
    consumer_id: str
    topic_name: str
    partition_id: int
    partition: Relationship
    lag: Relationship


class ConsumerAssignmentDataList(BaseModel):
    kind: Literal["KafkaConsumerAssignmentList"] = "KafkaConsumerAssignmentList"
    metadata: CollectionMetadata
    data: list[ConsumerAssignmentData]


class ConsumerLagData(BaseModel):
    kind: Literal["KafkaConsumerLag"] = "KafkaConsumerLag"
    metadata: ResourceMetadata
    cluster_id: str
    consumer_group_id: str
    topic_name: str
    partition_id: int
    current_offset: int = Field(description="The group's committed offset.")
    log_end_offset: int = Field(description="The partition's high watermark.")
    lag: int = Field(description="log_end_offset - current_offset, never below 0.")
    consumer_id: str = Field(description="The member that holds the partition, or empty.")
    instance_id: str | None
    client_id: str


class ConsumerLagDataList(BaseModel):
    kind: Literal["KafkaConsumerLagList"] = "KafkaConsumerLagList"
    metadata: CollectionMetadata
    data: list[ConsumerLagData]


class ConsumerGroupLagSummaryData(BaseModel):
    kind: Literal["KafkaConsumerGroupLagSummary"] = "KafkaConsumerGroupLagSummary"
    metadata: ResourceMetadata
    cluster_id: str
    consumer_group_id: str
    max_lag_consumer_id: str
    max_lag_instance_id: str | None
    max_lag_client_id: str
    max_lag_topic_name: str
    max_lag_partition_id: int
    max_lag: int
    total_lag: int
    max_lag_consumer: Relationship
    max_lag_partition: Relationship
