"""Kafka's protocol error codes: the one enum every part of pykraft answers with.

The values are Kafka's (``org.apache.kafka.common.protocol.Errors``); unit tests check
each name and number against ``kio.schema.errors.ErrorCode``.
"""

from __future__ import annotations

from enum import IntEnum


class ErrorCode(IntEnum):
    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    TOPIC_AUTHORIZATION_FAILED = 29
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    LOG_DIR_NOT_FOUND = 57
    UNKNOWN_PRODUCER_ID = 59
    REASSIGNMENT_IN_PROGRESS = 60
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    TOPIC_DELETION_DISABLED = 73
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    THROTTLING_QUOTA_EXCEEDED = 89
    PRODUCER_FENCED = 90
    INCONSISTENT_VOTER_SET = 94
    INVALID_UPDATE_VERSION = 95
    SNAPSHOT_NOT_FOUND = 98
    POSITION_OUT_OF_RANGE = 99
    UNKNOWN_TOPIC_ID = 100
    DUPLICATE_BROKER_REGISTRATION = 101
    BROKER_ID_NOT_REGISTERED = 102
    INCONSISTENT_CLUSTER_ID = 104
    TRANSACTIONAL_ID_NOT_FOUND = 105
    INELIGIBLE_REPLICA = 107
    NEW_LEADER_ELECTED = 108
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    UNSUPPORTED_ENDPOINT_TYPE = 115
    TRANSACTION_ABORTABLE = 120
    INVALID_RECORD_STATE = 121
    INVALID_VOTER_KEY = 125
    DUPLICATE_VOTER = 126
    VOTER_NOT_FOUND = 127
    INVALID_REGULAR_EXPRESSION = 128


# Kafka's standard messages (``Errors.java``) for the codes an admin call commonly returns;
# used when the controller sent no message of its own.
DEFAULT_MESSAGES: dict[int, str] = {
    -1: "The server experienced an unexpected error when processing the request.",
    2: "This message has failed its CRC checksum, exceeds the valid size, or is otherwise corrupt.",
    3: "This server does not host this topic-partition.",
    5: "There is no leader for this topic-partition as we are in the middle of a leadership election.",
    7: "The request timed out.",
    8: "The broker is not available.",
    10: "The request included a message larger than the max message size the server will accept.",
    14: "The coordinator is loading and hence can't process requests.",
    15: "The coordinator is not available.",
    16: "This is not the correct coordinator.",
    17: "The request attempted to perform an operation on an invalid topic.",
    19: "Messages are rejected since there are fewer in-sync replicas than required.",
    20: "Messages are written to the log, but to fewer in-sync replicas than required.",
    22: "Specified group generation id is not valid.",
    24: "The configured groupId is invalid.",
    25: "The coordinator is not aware of this member.",
    27: "The group is rebalancing, so a rejoin is needed.",
    30: "Group authorization failed.",
    32: "The timestamp of the message is out of acceptable range.",
    35: "The version of API is not supported.",
    36: "Topic with this name already exists.",
    37: "Number of partitions is below 1.",
    38: "Replication-factor is invalid.",
    39: "Replica assignment is invalid.",
    40: "Configuration is invalid.",
    41: "This is not the correct controller for this cluster.",
    42: (
        "This most likely occurs because of a request being malformed by the client library or the "
        "message was sent to an incompatible broker. See the broker logs for more details."
    ),
    44: "Request parameters do not satisfy the configured policy.",
    55: "The broker did not attempt to execute this operation.",
    60: "A partition reassignment is in progress.",
    68: "The group is not empty.",
    69: "The group id does not exist.",
    73: "Topic deletion is disabled.",
    80: "The preferred leader was not available.",
    83: "Eligible topic partition leaders are not available.",
    84: "Leader election not needed for topic partition.",
    86: "Deleting offsets of a topic is forbidden while the consumer group is actively subscribed to it.",
    87: "This record has failed the validation on broker and hence will be rejected.",
    89: "The throttling quota has been exceeded.",
    100: "This server does not host this topic ID.",
    101: "This broker ID is already in use.",
    102: "The given broker ID was not registered.",
    104: "The clusterId in the request does not match that found on the server.",
}


def default_message(code: int) -> str | None:
    """Kafka's standard message for an error code, if pykraft lists it."""
    return DEFAULT_MESSAGES.get(code)
