"""The controller's error codes are Kafka's (checked against kio's generated ErrorCode)."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode as KioErrorCode

from quorum.controller.errors import (
    ControllerError,
    ErrorCode,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    RackAwarenessError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)


@pytest.mark.parametrize("code", list(ErrorCode))
def test_codes_match_kafka(code):
    assert KioErrorCode[code.name.lower()].value == code.value


def test_the_codes_the_brief_asked_to_check():
    assert ErrorCode.INVALID_UPDATE_VERSION == 95
    assert ErrorCode.INELIGIBLE_REPLICA == 107
    assert ErrorCode.ELECTION_NOT_NEEDED == 84
    assert ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE == 80
    assert ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE == 83


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (InvalidTopicError, ErrorCode.INVALID_TOPIC_EXCEPTION),
        (TopicAlreadyExistsError, ErrorCode.TOPIC_ALREADY_EXISTS),
        (InvalidPartitionsError, ErrorCode.INVALID_PARTITIONS),
        (InvalidReplicationFactorError, ErrorCode.INVALID_REPLICATION_FACTOR),
        (InvalidReplicaAssignmentError, ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        (RackAwarenessError, ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        (InvalidRequestError, ErrorCode.INVALID_REQUEST),
        (UnknownTopicOrPartitionError, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        (ControllerError, ErrorCode.UNKNOWN_SERVER_ERROR),
    ],
)
def test_exceptions_carry_codes_and_messages(error, code):
    e = error("why")
    assert e.code == code
    assert e.message == "why" == str(e)
    assert isinstance(e, ControllerError)


def test_invalid_config_error_names_the_key():
    e = InvalidConfigError("retention.ms", "bad")
    assert (e.code, e.key, e.message) == (ErrorCode.INVALID_CONFIG, "retention.ms", "bad")
