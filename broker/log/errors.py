"""`LogError`: a partition log refused a request; `.code` is the Kafka error to answer."""

from __future__ import annotations

from quorum.kafka_errors import ErrorCode


class LogError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
