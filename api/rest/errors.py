"""REST errors: the v3 error body and the Kafka error code → HTTP mapping.

Every error answer is ``{"error_code": <int>, "message": <str|null>}`` (the REST Proxy v3
``Error`` schema). ``error_code`` is the REST code, not Kafka's: either one of the fixed
REST Proxy codes (40002, 40403, 50003, ...) or, for errors that are not Kafka's, the HTTP
status itself (404 unknown cluster/broker/config, 422 schema error, 400 bad JSON).

Kafka error codes map the way the REST Proxy's exception mapper does
(``reference/kafka-ecosystem.md`` §1.5), with one deliberate change: a non-retriable Kafka
error that the mapper does not name (INVALID_REPLICA_ASSIGNMENT, REASSIGNMENT_IN_PROGRESS,
...) is a rejection of the request, so it answers 400/40002 rather than the mapper's
500/50002 (no input may produce a 5xx). The full table is ``KAFKA_ERROR_MAP`` plus the
rules in `kafka_error`.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode as KioErrorCode

from quorum.kafka_errors import DEFAULT_MESSAGES

# ---------------------------------------------------------------- REST Proxy codes

BAD_REQUEST = 40002  # KAFKA_BAD_REQUEST
AUTHENTICATION_FAILED = 40101
AUTHORIZATION_FAILED = 40301
TOPIC_NOT_FOUND = 40401
PARTITION_NOT_FOUND = 40402
UNKNOWN_TOPIC_OR_PARTITION = 40403
LEADER_NOT_AVAILABLE = 40404
TOO_MANY_REQUESTS = 42901
KAFKA_ERROR = 50002
KAFKA_RETRIABLE_ERROR = 50003
BROKER_NOT_AVAILABLE = 50302


class ApiError(Exception):
    """An error answer: HTTP ``status`` with body ``{"error_code": code, "message": message}``."""

    def __init__(self, status: int, code: int, message: str | None) -> None:
        super().__init__(status, code, message)
        self.status = status
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return f"{self.status} {self.code}: {self.message}"

    def body(self) -> dict[str, object]:
        return {"error_code": self.code, "message": self.message}


def not_found(message: str, code: int = 404) -> ApiError:
    return ApiError(404, code, message)


def bad_request(message: str) -> ApiError:
    """A request Kafka would reject (400/40002)."""
    return ApiError(400, BAD_REQUEST, message)


# ---------------------------------------------------------------- Kafka error codes

# Kafka's standard messages, shared with the protocol layer.
KAFKA_DEFAULT_MESSAGES = DEFAULT_MESSAGES

# Codes the REST Proxy's exception mapper names explicitly: Kafka code -> (HTTP status, REST code).
KAFKA_ERROR_MAP: dict[int, tuple[int, int]] = {
    -1: (400, BAD_REQUEST),  # UNKNOWN_SERVER_ERROR (UnknownServerException)
    3: (404, UNKNOWN_TOPIC_OR_PARTITION),  # UNKNOWN_TOPIC_OR_PARTITION
    5: (404, LEADER_NOT_AVAILABLE),  # LEADER_NOT_AVAILABLE
    8: (503, BROKER_NOT_AVAILABLE),  # BROKER_NOT_AVAILABLE
    10: (413, 413),  # MESSAGE_TOO_LARGE (RecordTooLargeException)
    17: (400, BAD_REQUEST),  # INVALID_TOPIC_EXCEPTION
    35: (400, BAD_REQUEST),  # UNSUPPORTED_VERSION
    36: (400, BAD_REQUEST),  # TOPIC_ALREADY_EXISTS
    37: (400, BAD_REQUEST),  # INVALID_PARTITIONS
    38: (400, BAD_REQUEST),  # INVALID_REPLICATION_FACTOR
    40: (400, BAD_REQUEST),  # INVALID_CONFIG
    42: (400, BAD_REQUEST),  # INVALID_REQUEST
    44: (400, BAD_REQUEST),  # POLICY_VIOLATION
    54: (400, BAD_REQUEST),  # SECURITY_DISABLED
    73: (400, BAD_REQUEST),  # TOPIC_DELETION_DISABLED
    89: (429, TOO_MANY_REQUESTS),  # THROTTLING_QUOTA_EXCEEDED
    100: (404, UNKNOWN_TOPIC_OR_PARTITION),  # UNKNOWN_TOPIC_ID
}


def kafka_error_name(code: int) -> str:
    """Kafka's name for an error code ("TOPIC_ALREADY_EXISTS"), or "UNKNOWN_ERROR_<n>"."""
    try:
        return KioErrorCode(code).name.upper()
    except ValueError:
        return f"UNKNOWN_ERROR_{code}"


def kafka_error_is_retriable(code: int) -> bool:
    try:
        return bool(KioErrorCode(code).retriable)
    except ValueError:
        return False


def kafka_error_http(code: int) -> tuple[int, int]:
    """(HTTP status, REST error code) for a non-zero Kafka error code.

    1. the codes in `KAFKA_ERROR_MAP` (the REST Proxy's named exceptions);
    2. ``*_AUTHORIZATION_FAILED`` → 403/40301, ``*AUTHENTICATION_FAILED`` → 401/40101;
    3. any other retriable Kafka error → 500/50003 (the mapper's RetriableException rule);
    4. any other error Kafka defines → 400/40002 (a rejected request; the mapper says 500/50002);
    5. a code Kafka does not define → 500/50002.
    """
    mapped = KAFKA_ERROR_MAP.get(code)
    if mapped is not None:
        return mapped
    try:
        known = KioErrorCode(code)
    except ValueError:
        return 500, KAFKA_ERROR
    name = known.name.upper()
    if name.endswith("_AUTHORIZATION_FAILED"):
        return 403, AUTHORIZATION_FAILED
    if name.endswith("AUTHENTICATION_FAILED"):
        return 401, AUTHENTICATION_FAILED
    if known.retriable:
        return 500, KAFKA_RETRIABLE_ERROR
    return 400, BAD_REQUEST


def kafka_error(code: int, message: str | None = None) -> ApiError:
    """The REST error for a non-zero Kafka error code and the controller's message."""
    status, rest_code = kafka_error_http(code)
    text = message or KAFKA_DEFAULT_MESSAGES.get(code) or f"{kafka_error_name(code)} (Kafka error code {code})."
    return ApiError(status, rest_code, text)
