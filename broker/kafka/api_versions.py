"""ApiVersions (18): the version ranges this listener serves (KIP-511 rules).

The response header is v0 at every version (no tagged fields), so that a client can read
it whatever version it tried. A version above ours is answered UNSUPPORTED_VERSION with a
v0-format body that still lists our ranges; the client retries with our maximum. v3+
requests name the client software; Kafka answers INVALID_REQUEST when a name or version
does not match `[a-zA-Z0-9](?:[a-zA-Z0-9\\-.]*[a-zA-Z0-9])?`. Every error body is
written in the v0 format (clients read an errored body as v0).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from broker.kafka.apis import SUPPORTED, ApiKey
from broker.kafka.wire import MalformedRequest, Reader, RequestHeader, response_writer
from quorum.kafka_errors import ErrorCode

__all__ = ["handle_api_versions"]

_SOFTWARE: Final = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


def encode_api_versions(
    correlation_id: int, version: int, error: ErrorCode, ranges: Mapping[int, tuple[int, int]]
) -> bytearray:
    w = response_writer(correlation_id, False)  # header v0 always (KIP-511)
    flexible = version >= 3
    w.i16(error)
    w.length(len(ranges), flexible, True)
    for key in sorted(ranges):
        low, high = ranges[key]
        w.i16(key)
        w.i16(low)
        w.i16(high)
        if flexible:
            w.no_tags()
    if version >= 1:
        w.i32(0)  # throttle_time_ms
    if flexible:
        w.no_tags()
    return w.frame()


def handle_api_versions(frame: memoryview, header: RequestHeader) -> bytearray:
    """Answer an ApiVersions request (the header was parsed as v1 or v2 as its version says)."""
    low, high = SUPPORTED[ApiKey.API_VERSIONS]
    version = header.api_version
    if not low <= version <= high:
        return encode_api_versions(header.correlation_id, 0, ErrorCode.UNSUPPORTED_VERSION, SUPPORTED)
    error = ErrorCode.NONE
    if version >= 3:
        r = Reader(frame, header.body_offset)
        try:
            name = r.string(True)
            software_version = r.string(True)
            r.skip_tags()
        except MalformedRequest:
            name = software_version = None
        if not (name and software_version and _SOFTWARE.fullmatch(name) and _SOFTWARE.fullmatch(software_version)):
            error = ErrorCode.INVALID_REQUEST
    if error != ErrorCode.NONE:
        # kafka-python reads an ApiVersions body with a non-zero error as v0; so send v0.
        return encode_api_versions(header.correlation_id, 0, error, SUPPORTED)
    return encode_api_versions(header.correlation_id, version, error, SUPPORTED)
