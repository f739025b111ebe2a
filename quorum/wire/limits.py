"""Resource limits of a Kafka-protocol listener, with Kafka's config names.

``ConnectionLimits`` is what ``transport.serve`` enforces; ``MemoryPool`` is the shared
budget of request bytes (Kafka's ``queued.max.request.bytes`` memory pool).
"""

from __future__ import annotations

import asyncio
import collections
from dataclasses import dataclass
from typing import Final, Protocol

__all__ = [
    "DEFAULT_QUEUED_MAX_REQUEST_BYTES",
    "DEFAULT_SOCKET_BUFFER_BYTES",
    "DEFAULT_SOCKET_REQUEST_MAX_BYTES",
    "UNBOUNDED",
    "UNMETERED_FRAME_BYTES",
    "ConnectionLimits",
    "MemoryPool",
]

DEFAULT_SOCKET_REQUEST_MAX_BYTES: Final = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes
# Kafka's queued.max.request.bytes defaults to -1 (unbounded); pykraft bounds it by default
# to two maximum-size requests so that a node's memory stays bounded (-1 still means unbounded).
DEFAULT_QUEUED_MAX_REQUEST_BYTES: Final = 2 * DEFAULT_SOCKET_REQUEST_MAX_BYTES
# Kafka's socket.receive.buffer.bytes and socket.send.buffer.bytes: a listener's sockets get
# SO_RCVBUF / SO_SNDBUF of this many bytes; -1, pykraft's default, leaves the OS's autotuned
# buffers. Kafka's default is 102,400. Measured on this broker (tests/perf/README.md, data
# plane): 102,400 holds a pipelining client back (librdkafka without idempotence keeps up to
# 1,000,000 requests in flight, and its batches grow while its requests wait unsent: plain
# producers as fast as idempotent ones at saturation), but a follower catching up after a
# restart is fed through the small send buffer (coordinator failover median 3.2 -> 5.9 s)
# and, with the CPUs saturated by requests, p50 at moderate load doubled.
DEFAULT_SOCKET_BUFFER_BYTES: Final = -1
UNBOUNDED: Final = 2**31 - 1  # Kafka's Int.MaxValue default of max.connections(.per.ip)
# Frames up to this size never wait for the pool (they are still counted): quorum traffic,
# heartbeats and admin requests stay answered while large frames wait for memory. Their
# cost is bounded per connection, so by max.connections and connections.max.idle.ms.
UNMETERED_FRAME_BYTES: Final = 64 * 1024


class _LimitsSource(Protocol):
    """The NodeConfig fields the limits come from (structural, so wire need not import node)."""

    @property
    def socket_request_max_bytes(self) -> int: ...
    @property
    def queued_max_request_bytes(self) -> int: ...
    @property
    def max_connections(self) -> int: ...
    @property
    def max_connections_per_ip(self) -> int: ...
    @property
    def connections_max_idle_ms(self) -> int: ...
    @property
    def socket_receive_buffer_bytes(self) -> int: ...
    @property
    def socket_send_buffer_bytes(self) -> int: ...


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """Limits of one listener (Kafka's broker config names, ``_`` for ``.``).

    socket_request_max_bytes: largest request frame (bytes, excluding the 4-byte prefix);
        a larger length prefix closes the connection.
    queued_max_request_bytes: bytes of request frames being received or handled, across
        all connections of the server (-1: unbounded). Over it, connections stop being
        read until handlers release memory; none is closed for it.
    max_connections / max_connections_per_ip: open connections; an accepted connection
        over either limit is closed at once.
    connections_max_idle_ms: a connection with no request in flight and no byte read or
        written for this long is closed (-1: never).
    socket_receive_buffer_bytes / socket_send_buffer_bytes: SO_RCVBUF / SO_SNDBUF of the
        listening sockets, which accepted connections inherit (bytes; -1: the OS default).
    """

    socket_request_max_bytes: int = DEFAULT_SOCKET_REQUEST_MAX_BYTES
    queued_max_request_bytes: int = DEFAULT_QUEUED_MAX_REQUEST_BYTES
    max_connections: int = UNBOUNDED
    max_connections_per_ip: int = UNBOUNDED
    connections_max_idle_ms: int = 600_000
    socket_receive_buffer_bytes: int = DEFAULT_SOCKET_BUFFER_BYTES
    socket_send_buffer_bytes: int = DEFAULT_SOCKET_BUFFER_BYTES

    def __post_init__(self) -> None:
        if self.socket_request_max_bytes < 1:
            raise ValueError(f"socket.request.max.bytes must be >= 1, got {self.socket_request_max_bytes}")
        q = self.queued_max_request_bytes
        if q != -1 and q < self.socket_request_max_bytes:
            raise ValueError(
                f"queued.max.request.bytes ({q}) must be -1 or at least socket.request.max.bytes "
                f"({self.socket_request_max_bytes})"
            )
        if self.max_connections < 0 or self.max_connections_per_ip < 0:
            raise ValueError("max.connections and max.connections.per.ip must be >= 0")
        if self.connections_max_idle_ms == 0 or self.connections_max_idle_ms < -1:
            raise ValueError(f"connections.max.idle.ms must be -1 or > 0, got {self.connections_max_idle_ms}")
        for key, size in (("socket.receive.buffer.bytes", self.socket_receive_buffer_bytes),
                          ("socket.send.buffer.bytes", self.socket_send_buffer_bytes)):  # fmt: skip
            if size == 0 or size < -1:
                raise ValueError(f"{key} must be -1 or > 0, got {size}")

    @classmethod
    def from_config(cls, config: _LimitsSource) -> ConnectionLimits:
        """The limits a node's configuration (``NodeConfig``) sets."""
        return cls(
            socket_request_max_bytes=config.socket_request_max_bytes,
            queued_max_request_bytes=config.queued_max_request_bytes,
            max_connections=config.max_connections,
            max_connections_per_ip=config.max_connections_per_ip,
            connections_max_idle_ms=config.connections_max_idle_ms,
            socket_receive_buffer_bytes=config.socket_receive_buffer_bytes,
            socket_send_buffer_bytes=config.socket_send_buffer_bytes,
        )

    @property
    def idle_s(self) -> float | None:
        return None if self.connections_max_idle_ms < 0 else self.connections_max_idle_ms / 1000


class MemoryPool:
    """A budget of request bytes shared by connections (single event loop).

    ``reserve(n)`` waits (FIFO) until ``used + n <= capacity``, or the pool is empty (so a
    frame of any allowed size can always proceed alone); frames of at most
    ``UNMETERED_FRAME_BYTES`` never wait. Every reservation is returned with ``release(n)``.
    Invariant: ``used`` == the sum of reservations not yet released.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity  # bytes; -1 = unbounded
        self.used = 0
        self._waiters: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()

    def _fits(self, n: int) -> bool:
        return self.capacity < 0 or n <= UNMETERED_FRAME_BYTES or self.used == 0 or self.used + n <= self.capacity

    @property
    def waiting(self) -> int:
        """Reservations waiting for memory."""
        return len(self._waiters)

    def try_reserve(self, n: int) -> bool:
        """Reserve `n` at once if `reserve` would not wait; whether it did."""
        if n <= UNMETERED_FRAME_BYTES or (not self._waiters and self._fits(n)):
            self.used += n
            return True
        return False

    async def reserve(self, n: int) -> None:
        if self.try_reserve(n):
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (n, fut)
        self._waiters.append(entry)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release(n)  # granted just as we were cancelled
            else:
                self._waiters.remove(entry)
                self._grant()
            raise

    def release(self, n: int) -> None:
        self.used -= n
        assert self.used >= 0, "released more than reserved"
        self._grant()

    def _grant(self) -> None:
        while self._waiters:
            n, fut = self._waiters[0]
            if fut.done():
                self._waiters.popleft()
                continue
            if not self._fits(n):
                return
            self._waiters.popleft()
            self.used += n
            fut.set_result(None)
