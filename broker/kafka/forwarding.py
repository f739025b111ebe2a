"""Forward a client's admin request, as raw bytes, to the active controller.

Brokers in KRaft mode relay CreateTopics, DeleteTopics, CreatePartitions, the config
apis and ElectLeaders to the active controller (Kafka's forwarding manager). The frame
is relayed as the client encoded it, so every field and version survives; only the
correlation id is rewritten (the controller connection is shared and pipelined) and
rewritten back in the answer. An answer carrying NOT_CONTROLLER (leadership moved), or
an unreachable controller, is retried with backoff until the deadline.
"""

from __future__ import annotations

import asyncio
import struct
import time
from dataclasses import fields, is_dataclass
from typing import Any, Final, Protocol

from kio.index import KioIndexError, load_response_schema

from quorum.kafka_errors import ErrorCode
from quorum.wire._reader import MalformedError, entity_reader
from quorum.wire.transport import PeerUnavailable

__all__ = ["ControllerLink", "forward_frame", "response_has_error"]

# Offsets inside a request frame *with* its length prefix: length(4) api_key(2) api_version(2) corr(4).
_REQUEST_CORRELATION_AT: Final = 8
_I32: Final = struct.Struct(">i")


class ControllerLink(Protocol):
    """What forwarding needs of `quorum.node.controller_client.ControllerClient`."""

    def leader_id(self) -> int: ...

    def next_correlation_id(self) -> int: ...

    async def send(
        self, node_id: int, frame: bytes, correlation_id: int, api_key: int, api_version: int
    ) -> bytes | bytearray: ...


def _walk_has(value: Any, code: int) -> bool:
    if isinstance(value, tuple | list):
        return any(_walk_has(v, code) for v in value)
    if is_dataclass(value) and not isinstance(value, type):
        for f in fields(value):
            item = getattr(value, f.name)
            if f.name == "error_code" and int(item) == code:
                return True
            if (isinstance(item, tuple | list) or is_dataclass(item)) and _walk_has(item, code):
                return True
    return False


def response_has_error(response: bytes | bytearray, api_key: int, api_version: int, code: int) -> bool:
    """Does any error_code of the response frame (no length prefix) equal `code`?
    An undecodable answer counts as not carrying it."""
    try:
        cls = load_response_schema(api_key, api_version)
    except (KioIndexError, ImportError, ValueError, AttributeError):
        return False
    try:
        _, pos = entity_reader(cls.__header_schema__)(response, 0)
        body, _ = entity_reader(cls)(response, pos)
    except MalformedError:
        return False
    return _walk_has(body, code)


async def forward_frame(
    link: ControllerLink,
    frame: bytes | memoryview,
    api_key: int,
    api_version: int,
    timeout_ms: int,
    *,
    retry_backoff_ms: int = 50,
) -> bytes:
    """Relay `frame` (a complete request frame, length prefix included) to the active
    controller; its answer (no length prefix) with the original correlation id.
    Raises TimeoutError when no controller answered usefully within `timeout_ms`."""
    original = bytes(frame[_REQUEST_CORRELATION_AT : _REQUEST_CORRELATION_AT + 4])
    if len(original) != 4:
        raise ValueError("frame shorter than a request header")
    relayed = bytearray(frame)
    deadline = time.monotonic() + timeout_ms / 1000
    last = "no active controller known"
    while True:
        leader = link.leader_id()
        if leader >= 0:
            correlation = link.next_correlation_id()
            _I32.pack_into(relayed, _REQUEST_CORRELATION_AT, correlation)
            try:
                async with asyncio.timeout(max(deadline - time.monotonic(), 0.001)):
                    answer = await link.send(leader, bytes(relayed), correlation, api_key, api_version)
            except (PeerUnavailable, TimeoutError, OSError) as exc:
                last = f"controller {leader}: {exc}"
            else:
                if len(answer) >= 4 and not response_has_error(
                    answer, api_key, api_version, int(ErrorCode.NOT_CONTROLLER)
                ):
                    return original + answer[4:]
                last = f"node {leader} is not the active controller"
        if time.monotonic() + retry_backoff_ms / 1000 >= deadline:
            raise TimeoutError(f"admin api {api_key} v{api_version} not forwarded: {last}")
        await asyncio.sleep(retry_backoff_ms / 1000)
