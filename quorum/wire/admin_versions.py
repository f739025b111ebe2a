"""The controller's admin and broker-lifecycle APIs: their keys and the versions served.

Kept apart from `quorum.wire.admin_codec` so that `quorum.wire.codec` (which answers
ApiVersions with every version a node serves) needs no import of the admin codec,
which builds on it.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Final

__all__ = ["ADMIN_API_VERSIONS", "AdminApiKey"]


class AdminApiKey(IntEnum):
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DESCRIBE_CONFIGS = 32
    CREATE_PARTITIONS = 37
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION = 56
    DESCRIBE_CLUSTER = 60
    BROKER_REGISTRATION = 62
    BROKER_HEARTBEAT = 63
    UNREGISTER_BROKER = 64
    ALLOCATE_PRODUCER_IDS = 67


# (min, max) version served per api key: every version kio 0.6.5 has a schema for (a
# range wherever Kafka has more than one version; UnregisterBroker only has v0). The
# minima are Kafka 4.0's (KIP-896 removed CreateTopics v0-1, DeleteTopics v0,
# DescribeConfigs v0, AlterPartition v0-1). Negotiation picks min(client max, ours):
# librdkafka 2.x (max CreateTopics 4, DeleteTopics 4, DescribeConfigs 1,
# CreatePartitions 2, IncrementalAlterConfigs 1) and kafka-python 3.0.12 (schema maxima,
# equal to ours for the seven client apis) both land inside, and so do the broker RPCs
# of Kafka 3.9/4.0 brokers (kio's schemas are newer than theirs). BrokerHeartbeat v2
# only adds a tagged field (cordoned log dirs), so serving it costs nothing.
ADMIN_API_VERSIONS: Final[dict[int, tuple[int, int]]] = {
    AdminApiKey.CREATE_TOPICS: (2, 7),
    AdminApiKey.DELETE_TOPICS: (1, 6),
    AdminApiKey.DESCRIBE_CONFIGS: (1, 4),
    AdminApiKey.CREATE_PARTITIONS: (0, 3),
    AdminApiKey.ELECT_LEADERS: (0, 2),
    AdminApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    AdminApiKey.ALTER_PARTITION: (2, 3),
    AdminApiKey.DESCRIBE_CLUSTER: (0, 2),
    AdminApiKey.BROKER_REGISTRATION: (0, 4),
    AdminApiKey.BROKER_HEARTBEAT: (0, 2),
    AdminApiKey.UNREGISTER_BROKER: (0, 0),
    AdminApiKey.ALLOCATE_PRODUCER_IDS: (0, 0),
}
