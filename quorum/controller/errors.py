"""Kafka error codes the controller's decisions produce, and exceptions that carry them.

Every numeric value is Kafka's (``org.apache.kafka.common.protocol.Errors``); a unit test
checks each one against ``kio.schema.errors.ErrorCode`` by name.
"""

from __future__ import annotations

from enum import IntEnum
from typing import ClassVar


class ErrorCode(IntEnum):
    """Kafka protocol error codes used by the controller's topic and partition logic."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_TOPIC_EXCEPTION = 17
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    POLICY_VIOLATION = 44
    OPERATION_NOT_ATTEMPTED = 55
    REASSIGNMENT_IN_PROGRESS = 60
    TOPIC_DELETION_DISABLED = 73
    FENCED_LEADER_EPOCH = 74
    STALE_BROKER_EPOCH = 77
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    THROTTLING_QUOTA_EXCEEDED = 89
    INVALID_UPDATE_VERSION = 95
    UNKNOWN_TOPIC_ID = 100
    DUPLICATE_BROKER_REGISTRATION = 101
    BROKER_ID_NOT_REGISTERED = 102
    INELIGIBLE_REPLICA = 107
    NEW_LEADER_ELECTED = 108


class ControllerError(Exception):
    """A request the controller rejects; ``code`` is the Kafka error code to answer with.

    ``message`` is the text Kafka puts in the response's ``error_message``.
    """

    code: ClassVar[ErrorCode] = ErrorCode.UNKNOWN_SERVER_ERROR

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidTopicError(ControllerError):
    code = ErrorCode.INVALID_TOPIC_EXCEPTION


class TopicAlreadyExistsError(ControllerError):
    code = ErrorCode.TOPIC_ALREADY_EXISTS


class InvalidPartitionsError(ControllerError):
    code = ErrorCode.INVALID_PARTITIONS


class InvalidReplicationFactorError(ControllerError):
    code = ErrorCode.INVALID_REPLICATION_FACTOR


class InvalidReplicaAssignmentError(ControllerError):
    code = ErrorCode.INVALID_REPLICA_ASSIGNMENT


class RackAwarenessError(InvalidReplicaAssignmentError):
    """Some brokers have a rack and some do not, and rack-aware placement was required.

    Kafka raises ``AdminOperationException`` here, which is not an API exception (a ZooKeeper
    broker answered UNKNOWN_SERVER_ERROR); pykraft answers INVALID_REPLICA_ASSIGNMENT so that
    the client gets a useful code with Kafka's message.
    """


class InvalidRequestError(ControllerError):
    code = ErrorCode.INVALID_REQUEST


class UnknownTopicOrPartitionError(ControllerError):
    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


class InvalidConfigError(ControllerError):
    """A topic config was rejected; ``key`` names the offending config (or configs)."""

    code = ErrorCode.INVALID_CONFIG

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key
