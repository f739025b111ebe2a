"""`LogError`: a partition log refused a request; `.code` is the Kafka error to answer."""

from __future__ import annotations

from quorum.kafka_errors import ErrorCode


class LogError(Exception):
    """`record_errors`: (index of the record in its batch, why) of each record that made the
    batch be refused, as Produce v8+ answers them (KIP-467); empty when the batch as a whole is."""

    def __init__(self, code: ErrorCode, message: str, record_errors: tuple[tuple[int, str], ...] = ()) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.record_errors = record_errors
