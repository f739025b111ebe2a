"""Kafka error codes the controller's decisions produce, and exceptions that carry them.

Every numeric value is Kafka's (``org.apache.kafka.common.protocol.Errors``); a unit test
checks each one against ``kio.schema.errors.ErrorCode`` by name.
"""

from __future__ import annotations

from typing import ClassVar

from quorum.kafka_errors import ErrorCode as ErrorCode  # re-exported


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
