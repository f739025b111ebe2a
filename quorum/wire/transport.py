"""asyncio TCP transport for Kafka-framed requests and responses.

A frame on the wire is a 4-byte big-endian signed length followed by that many
bytes (header + body). The server answers the requests of one connection strictly
in order. By default it handles them one at a time (Kafka mutes a connection while a
request is in flight); with `pipeline_depth` > 1 it keeps reading up to that many
requests ahead, runs their handlers concurrently and still writes the responses in
request order (a client's pipelined produce requests then wait for replication
together instead of one after another). Connections are independent. The client pipelines: any number of requests may be
in flight on its single connection, matched to responses by correlation id.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Awaitable, Callable
from typing import Final

__all__ = [
    "DEFAULT_MAX_FRAME_BYTES",
    "CloseConnection",
    "Handler",
    "PeerClient",
    "PeerUnavailable",
    "close_server",
    "request",
    "serve",
]

log = logging.getLogger(__name__)

DEFAULT_MAX_FRAME_BYTES: Final = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes
_STREAM_LIMIT: Final = 1 << 20  # StreamReader buffer before it pauses the socket

Handler = Callable[[bytes], Awaitable[bytes | None]]

# Open connections (and the tasks serving them) per server, so that `close_server` can
# drop them: 3.11's Server.close() leaves accepted connections running.
_CONNECTIONS: dict[asyncio.Server, dict[asyncio.StreamWriter, asyncio.Task[None] | None]] = {}


class PeerUnavailable(ConnectionError):
    """The peer could not be reached, closed the connection, or did not answer in time."""


class CloseConnection(Exception):
    """Raise from a server handler to close its connection quietly (e.g. a request that
    cannot be answered: Kafka closes the connection on an unknown api key)."""


def _set_nodelay(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


async def _close_writer(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(Exception):
        await writer.wait_closed()


# --------------------------------------------------------------------------- server


async def serve(
    host: str | None,
    port: int,
    handler: Handler,
    *,
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    pipeline_depth: int = 1,
) -> asyncio.Server:
    """Listen on host:port; call `handler(frame)` for each request frame.

    `frame` excludes the length prefix; the handler returns the complete response
    frame (with its prefix) or None to send nothing. A length prefix below 0 or
    above `max_frame_bytes` is logged and closes that connection; so does an
    exception from the handler. Stop with `close_server`.
    """
    connections: dict[asyncio.StreamWriter, asyncio.Task[None] | None] = {}

    async def read_frame(reader: asyncio.StreamReader, peer: object) -> bytes | None:
        try:
            prefix = await reader.readexactly(4)
        except asyncio.IncompleteReadError:
            return None  # the client closed the connection
        size = int.from_bytes(prefix, "big", signed=True)
        if size < 0 or size > max_frame_bytes:
            log.warning("closing connection from %s: frame size %d outside 0..%d", peer, size, max_frame_bytes)
            return None
        return await reader.readexactly(size)

    async def serial(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: object) -> None:
        while True:
            frame = await read_frame(reader, peer)
            if frame is None:
                return
            response = await handler(frame)
            if response is not None:
                if writer.is_closing():
                    return  # the peer or the server went away while we worked on it
                writer.write(response)
                await writer.drain()

    async def pipelined(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: object) -> None:
        # Invariant: the handler tasks of requests read but not yet answered are the one the
        # writer awaits plus those in `pending`, in request order: at most `pipeline_depth`.
        pending: asyncio.Queue[asyncio.Task[bytes | None] | None] = asyncio.Queue(maxsize=pipeline_depth - 1)

        async def write_in_order() -> None:
            while True:
                task = await pending.get()
                if task is None:
                    return
                response = await task
                if response is not None:
                    if writer.is_closing():
                        return
                    writer.write(response)
                    await writer.drain()

        writer_task = asyncio.create_task(write_in_order())
        try:
            while not writer_task.done():
                frame = await read_frame(reader, peer)
                if frame is None:
                    break
                await pending.put(asyncio.ensure_future(handler(frame)))
            if not writer_task.done():
                await pending.put(None)
            await writer_task  # answers what was read, or raises what a handler raised
        finally:
            writer_task.cancel()
            while not pending.empty():
                task = pending.get_nowait()
                if task is not None:
                    task.cancel()

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections[writer] = asyncio.current_task()
        _set_nodelay(writer)
        peer = writer.get_extra_info("peername")
        try:
            if pipeline_depth > 1:
                await pipelined(reader, writer, peer)
            else:
                await serial(reader, writer, peer)
        except (asyncio.IncompleteReadError, ConnectionError):
            log.debug("connection from %s lost", peer)
        except CloseConnection as exc:
            log.info("closing connection from %s: %s", peer, exc)
        except Exception:
            log.exception("request handler failed; closing connection from %s", peer)
        except asyncio.CancelledError:
            # Ending normally: Python 3.11's StreamReaderProtocol logs a spurious error
            # for a cancelled connection task. Nothing awaits this task but close_server.
            log.debug("connection from %s cancelled", peer)
        finally:
            connections.pop(writer, None)
            await _close_writer(writer)

    server = await asyncio.start_server(on_connect, host, port, limit=_STREAM_LIMIT)
    _CONNECTIONS[server] = connections
    return server


async def close_server(server: asyncio.Server, *, grace_s: float = 1.0) -> None:
    """Stop listening and close every connection the server accepted.

    Connections whose handler is still busy after `grace_s` are cancelled.
    """
    server.close()
    connections = _CONNECTIONS.pop(server, {})
    for writer in list(connections):
        writer.close()
    tasks = {task for task in connections.values() if task is not None and task is not asyncio.current_task()}
    if tasks:
        _, busy = await asyncio.wait(tasks, timeout=grace_s)
        for task in busy:
            task.cancel()
        if busy:
            await asyncio.wait(busy)
    with contextlib.suppress(Exception):
        await server.wait_closed()


# --------------------------------------------------------------------------- client


class _Connection:
    """One TCP connection to a peer, its in-flight requests and its reader task."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, name: str, max_frame: int) -> None:
        self.reader = reader
        self.writer = writer
        self.name = name
        self.max_frame = max_frame
        self.pending: dict[int, asyncio.Future[bytes]] = {}
        self.closed = False
        self.task = asyncio.get_running_loop().create_task(self._read_loop())

    async def _read_loop(self) -> None:
        reader = self.reader
        pending = self.pending
        try:
            while True:
                size = int.from_bytes(await reader.readexactly(4), "big", signed=True)
                if size < 4 or size > self.max_frame:
                    self.fail(PeerUnavailable(f"{self.name}: bad response frame size {size}"))
                    return
                body = await reader.readexactly(size)
                correlation_id = int.from_bytes(body[:4], "big", signed=True)
                fut = pending.pop(correlation_id, None)
                if fut is None:
                    # The sender gave up on it (cancelled); responses stay in order, so go on.
                    log.debug("%s: response to unknown correlation id %d dropped", self.name, correlation_id)
                elif not fut.done():
                    fut.set_result(body)
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as exc:
            self.fail(PeerUnavailable(f"{self.name}: connection closed ({exc!r})"))
        except asyncio.CancelledError:
            self.fail(PeerUnavailable(f"{self.name}: connection closed"))
            raise

    def fail(self, exc: PeerUnavailable) -> None:
        """Close the connection and fail every request in flight on it."""
        if self.closed:
            return
        self.closed = True
        pending, self.pending = self.pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(exc)
        self.writer.close()
        if asyncio.current_task() is not self.task:
            self.task.cancel()


def _expire(fut: asyncio.Future[bytes], timeout_s: float) -> None:
    if not fut.done():
        fut.set_exception(TimeoutError(f"no response within {timeout_s}s"))


class PeerClient:
    """A lazily connected, pipelining client for one peer.

    `send` writes a complete request frame and returns the response frame without
    its length prefix (header included). Any failure (refused or timed-out connect,
    closed connection, request timeout) raises PeerUnavailable; a request timeout
    also closes the connection, since the responses behind it would be stuck. The
    next `send` reconnects; pacing reconnects is the caller's business.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        connect_timeout_s: float = 5.0,
        request_timeout_s: float = 30.0,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    ) -> None:
        self.host = host
        self.port = port
        self.connect_timeout_s = connect_timeout_s
        self.request_timeout_s = request_timeout_s
        self.max_frame_bytes = max_frame_bytes
        self._name = f"{host}:{port}"
        self._conn: _Connection | None = None
        self._lock = asyncio.Lock()

    @property
    def connected(self) -> bool:
        return self._conn is not None and not self._conn.closed

    async def _connection(self) -> _Connection:
        conn = self._conn
        if conn is not None and not conn.closed:
            return conn
        async with self._lock:
            conn = self._conn
            if conn is not None and not conn.closed:
                return conn
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(self.host, self.port, limit=_STREAM_LIMIT), self.connect_timeout_s
                )
            except (OSError, TimeoutError) as exc:
                raise PeerUnavailable(f"cannot connect to {self._name}: {exc!r}") from exc
            _set_nodelay(writer)
            conn = self._conn = _Connection(reader, writer, self._name, self.max_frame_bytes)
            return conn

    async def send(self, frame: bytes, correlation_id: int, api_key: int, api_version: int) -> bytes:
        """Send one request frame (with length prefix); return the response frame body.

        `api_key`/`api_version` only label errors and logs.
        """
        conn = await self._connection()
        if correlation_id in conn.pending:
            raise ValueError(f"correlation id {correlation_id} already in flight to {self._name}")
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bytes] = loop.create_future()
        conn.pending[correlation_id] = fut
        timer = loop.call_later(self.request_timeout_s, _expire, fut, self.request_timeout_s)
        try:
            conn.writer.write(frame)
            await conn.writer.drain()
            return await fut
        except TimeoutError as exc:
            conn.fail(PeerUnavailable(f"{self._name}: request timed out"))
            raise PeerUnavailable(
                f"{self._name}: no response to api {api_key} v{api_version} (correlation id {correlation_id}) "
                f"within {self.request_timeout_s}s"
            ) from exc
        except (ConnectionError, OSError) as exc:
            if isinstance(exc, PeerUnavailable):
                raise
            conn.fail(PeerUnavailable(f"{self._name}: {exc!r}"))
            raise PeerUnavailable(f"{self._name}: send failed: {exc!r}") from exc
        finally:
            timer.cancel()
            if conn.pending.get(correlation_id) is fut:
                del conn.pending[correlation_id]

    async def close(self) -> None:
        """Close the connection (failing requests in flight); a later send reconnects."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        conn.fail(PeerUnavailable(f"{self._name}: client closed"))
        await asyncio.wait([conn.task])
        with contextlib.suppress(Exception):
            await conn.writer.wait_closed()


async def request(
    host: str,
    port: int,
    frame: bytes,
    *,
    connect_timeout_s: float = 5.0,
    request_timeout_s: float = 30.0,
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
) -> bytes:
    """One request on a fresh connection (for CLI tools): the response frame body."""
    name = f"{host}:{port}"
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), connect_timeout_s)
    except (OSError, TimeoutError) as exc:
        raise PeerUnavailable(f"cannot connect to {name}: {exc!r}") from exc
    try:
        _set_nodelay(writer)
        writer.write(frame)
        await writer.drain()
        async with asyncio.timeout(request_timeout_s):
            size = int.from_bytes(await reader.readexactly(4), "big", signed=True)
            if size < 4 or size > max_frame_bytes:
                raise PeerUnavailable(f"{name}: bad response frame size {size}")
            return await reader.readexactly(size)
    except TimeoutError as exc:
        raise PeerUnavailable(f"{name}: no response within {request_timeout_s}s") from exc
    except (asyncio.IncompleteReadError, ConnectionError, OSError) as exc:
        if isinstance(exc, PeerUnavailable):
            raise
        raise PeerUnavailable(f"{name}: connection closed ({exc!r})") from exc
    finally:
        await _close_writer(writer)
