"""Kafka error codes the quorum speaks, and the core's local exceptions."""

from __future__ import annotations

from enum import IntEnum


class ErrorCode(IntEnum):
    """Kafka protocol error codes (values from Kafka's Errors enum)."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    MESSAGE_TOO_LARGE = 10
    NETWORK_EXCEPTION = 13
    UNSUPPORTED_VERSION = 35
    INVALID_REQUEST = 42
    CLUSTER_AUTHORIZATION_FAILED = 31
    NOT_CONTROLLER = 41
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    SNAPSHOT_NOT_FOUND = 98
    POSITION_OUT_OF_RANGE = 99
    INCONSISTENT_VOTER_SET = 94
    INVALID_UPDATE_VERSION = 95
    INCONSISTENT_CLUSTER_ID = 104
    INVALID_RECORD_STATE = 121


class QuorumError(Exception):
    """Base class of errors raised by the quorum to its local caller."""


class NotLeaderError(QuorumError):
    """A write was proposed to a node that is not the leader.

    `leader_id` is the leader this node knows of in `epoch`, or -1.
    """

    def __init__(self, leader_id: int, epoch: int) -> None:
        super().__init__(f"not the leader (leader={leader_id}, epoch={epoch})")
        self.leader_id = leader_id
        self.epoch = epoch


class IllegalTransitionError(QuorumError):
    """The core was asked to move between two states the transition table forbids."""


class FatalQuorumError(QuorumError):
    """A condition that would break safety if the node went on (e.g. truncation below HW)."""
