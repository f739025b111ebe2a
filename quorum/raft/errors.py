"""Kafka error codes the quorum speaks, and the core's local exceptions."""

from __future__ import annotations

from quorum.kafka_errors import ErrorCode as ErrorCode  # re-exported


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
