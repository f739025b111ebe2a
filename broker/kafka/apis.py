"""The api keys and version ranges the client listener advertises, and their encodings.

Only apis this package implements are advertised (ApiVersions answers from this table).
Ranges, with the reason for each bound:
- Produce 0-10: clients in use need >= 3 (record batch v2); 0-2 stay advertised because
  librdkafka before 2.11.1 checks Produce v0 for its feature flags (KAFKA-18659), but are
  answered UNSUPPORTED_VERSION per partition, as Kafka 4 does. v10 only adds KIP-951's
  current-leader hints.
- Fetch 4-12: v12 is the last version naming topics by name; librdkafka falls back to
  v12 when topic ids are not offered.
- ListOffsets 1-7 (v7: max timestamp), Metadata 0-12, OffsetForLeaderEpoch 2-4,
  ApiVersions 0-3, DeleteRecords 0-2, DescribeLogDirs 1-4, DescribeCluster 0-2.
- InitProducerId 0-5 (Kafka 3.9's range): idempotent producers (`init_producer_id`), and
  transactional ones (`txn_apis`).
- WriteTxnMarkers 0-1 (v1 flexible) and DescribeProducers 0: the partition logs' side of
  transactions (`write_txn_markers`, `describe_producers`).
- AlterConfigs 0-2: translated to IncrementalAlterConfigs for the controller (`alter_configs`).
- The admin apis forwarded to the active controller: exactly the controller's ranges
  (`quorum.wire.admin_codec.ADMIN_API_VERSIONS`), so a forwarded frame always decodes there.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Final

from quorum.wire.admin_codec import ADMIN_API_VERSIONS, AdminApiKey

__all__ = ["FIRST_FLEXIBLE", "FORWARDED", "SUPPORTED", "ApiKey", "is_flexible"]


class ApiKey(IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    OFFSET_FOR_LEADER_EPOCH = 23
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    DESCRIBE_LOG_DIRS = 35
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    OFFSET_DELETE = 47
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69


# Admin apis relayed as raw frames to the active controller.
FORWARDED: Final = frozenset(
    {
        ApiKey.CREATE_TOPICS,
        ApiKey.DELETE_TOPICS,
        ApiKey.DESCRIBE_CONFIGS,
        ApiKey.CREATE_PARTITIONS,
        ApiKey.ELECT_LEADERS,
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
    }
)

SUPPORTED: Final[dict[int, tuple[int, int]]] = {
    ApiKey.PRODUCE: (0, 10),
    ApiKey.FETCH: (4, 12),
    ApiKey.LIST_OFFSETS: (1, 7),
    ApiKey.METADATA: (0, 12),
    ApiKey.API_VERSIONS: (0, 3),
    ApiKey.DELETE_RECORDS: (0, 2),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (2, 4),
    ApiKey.DESCRIBE_LOG_DIRS: (1, 4),
    ApiKey.DESCRIBE_CLUSTER: (0, 2),
    ApiKey.ALTER_CONFIGS: (0, 2),
    # The group apis (broker.kafka.group_apis): OffsetCommit 2-9 and OffsetFetch 1-9 (v9:
    # KIP-848's member epochs; below 2/1 Kafka 4 dropped them too), FindCoordinator
    # 0-4 (v4: batched keys), JoinGroup 0-9, SyncGroup 0-5, Heartbeat 0-4, LeaveGroup 0-5,
    # DescribeGroups 0-5, ListGroups 0-4, DeleteGroups 0-2, OffsetDelete 0; KIP-848's
    # ConsumerGroupHeartbeat 0-1 (v1: the client names its member id) and ConsumerGroupDescribe 0-1.
    ApiKey.OFFSET_COMMIT: (2, 9),
    ApiKey.OFFSET_FETCH: (1, 9),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (0, 1),
    ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 1),
    ApiKey.FIND_COORDINATOR: (0, 4),
    ApiKey.JOIN_GROUP: (0, 9),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5),
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.DESCRIBE_GROUPS: (0, 5),
    ApiKey.LIST_GROUPS: (0, 4),
    ApiKey.DELETE_GROUPS: (0, 2),
    ApiKey.OFFSET_DELETE: (0, 0),
    ApiKey.TXN_OFFSET_COMMIT: (0, 4),  # the group apis: transactional offsets (v3+: member, generation)
    ApiKey.INIT_PRODUCER_ID: (0, 5),
    ApiKey.WRITE_TXN_MARKERS: (0, 1),
    ApiKey.DESCRIBE_PRODUCERS: (0, 0),
    # The transaction apis (broker.kafka.txn_apis), Kafka 3.9's ranges: AddPartitionsToTxn 0-5
    # (v4+: the inter-broker batched form, KIP-890 part 1), AddOffsetsToTxn 0-4, EndTxn 0-4,
    # DescribeTransactions 0, ListTransactions 0-1.
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 5),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 4),
    ApiKey.END_TXN: (0, 4),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
    ApiKey.LIST_TRANSACTIONS: (0, 1),
    **{int(key): ADMIN_API_VERSIONS[AdminApiKey(int(key))] for key in FORWARDED},
}

# The first flexible (KIP-482) version of each api: request header v2 / response header v1
# from there on (ApiVersions' response header stays v0 at every version, KIP-511).
FIRST_FLEXIBLE: Final[dict[int, int]] = {
    ApiKey.PRODUCE: 9,
    ApiKey.FETCH: 12,
    ApiKey.LIST_OFFSETS: 6,
    ApiKey.METADATA: 9,
    ApiKey.OFFSET_COMMIT: 8,
    ApiKey.OFFSET_FETCH: 6,
    ApiKey.FIND_COORDINATOR: 3,
    ApiKey.JOIN_GROUP: 6,
    ApiKey.HEARTBEAT: 4,
    ApiKey.LEAVE_GROUP: 4,
    ApiKey.SYNC_GROUP: 4,
    ApiKey.DESCRIBE_GROUPS: 5,
    ApiKey.LIST_GROUPS: 3,
    ApiKey.DELETE_GROUPS: 2,
    ApiKey.CONSUMER_GROUP_HEARTBEAT: 0,
    ApiKey.CONSUMER_GROUP_DESCRIBE: 0,
    ApiKey.API_VERSIONS: 3,
    ApiKey.CREATE_TOPICS: 5,
    ApiKey.DELETE_TOPICS: 4,
    ApiKey.DELETE_RECORDS: 2,
    ApiKey.INIT_PRODUCER_ID: 2,
    ApiKey.ADD_PARTITIONS_TO_TXN: 3,
    ApiKey.ADD_OFFSETS_TO_TXN: 3,
    ApiKey.END_TXN: 3,
    ApiKey.DESCRIBE_TRANSACTIONS: 0,
    ApiKey.LIST_TRANSACTIONS: 0,
    ApiKey.TXN_OFFSET_COMMIT: 3,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: 4,
    ApiKey.DESCRIBE_CONFIGS: 4,
    ApiKey.ALTER_CONFIGS: 2,
    ApiKey.DESCRIBE_LOG_DIRS: 2,
    ApiKey.CREATE_PARTITIONS: 2,
    ApiKey.ELECT_LEADERS: 2,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: 1,
    ApiKey.DESCRIBE_CLUSTER: 0,
    ApiKey.WRITE_TXN_MARKERS: 1,
    ApiKey.DESCRIBE_PRODUCERS: 0,
}


def is_flexible(api_key: int, version: int) -> bool:
    return version >= FIRST_FLEXIBLE.get(api_key, 1 << 15)
