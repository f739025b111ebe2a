"""asyncio TCP transport for Kafka-framed requests and responses.

A frame on the wire is a 4-byte big-endian signed length followed by that many
bytes (header + body). The server answers the requests of one connection strictly
in order: by default one at a time (Kafka mutes a connection while a request is in
flight), or, with a pipeline depth above 1, handling several concurrently; connections
are independent, within the listener's ConnectionLimits (frame size, pooled request
bytes, connection counts, idle time). The client pipelines: any number of requests may be
in flight on its single connection, matched to responses by correlation id.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import logging
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final, Protocol, cast

from quorum.wire.limits import DEFAULT_SOCKET_REQUEST_MAX_BYTES, ConnectionLimits, MemoryPool

__all__ = [
    "DEFAULT_MAX_FRAME_BYTES",
    "CloseConnection",
    "ConnectionLimits",
    "Handler",
    "MemoryPool",
    "PeerClient",
    "PeerUnavailable",
    "StreamedResponse",
    "close_server",
    "request",
    "serve",
    "server_stats",
]

log = logging.getLogger(__name__)

DEFAULT_MAX_FRAME_BYTES: Final = DEFAULT_SOCKET_REQUEST_MAX_BYTES  # Kafka's socket.request.max.bytes
_STREAM_LIMIT: Final = 1 << 20  # StreamReader buffer before it pauses the socket


class StreamedResponse(Protocol):
    """A response that writes itself (a fetch answer whose records are sent from segment
    files, `broker.kafka.spliced`): `send` writes the whole frame; the transport drains after."""

    async def send(self, writer: asyncio.StreamWriter) -> None: ...


Handler = Callable[[bytes], Awaitable[bytes | StreamedResponse | None]]
_Answer = asyncio.Future[bytes | StreamedResponse | None]  # a handler's task


async def _write_response(writer: asyncio.StreamWriter, response: bytes | StreamedResponse) -> None:
    if isinstance(response, (bytes, bytearray, memoryview)):
        writer.write(response)
    else:
        await response.send(writer)
    await writer.drain()


_COALESCE_MAX_BYTES: Final = 64 << 10  # answers up to this size are joined into one write


def _write_joined(writer: asyncio.StreamWriter, responses: list[bytes | StreamedResponse | None]) -> None:
    """Write byte answers (None: no answer, as for acks=0) in order, those up to
    `_COALESCE_MAX_BYTES` joined into one write."""
    joined: list[bytes | bytearray | memoryview] = []
    for response in responses:
        if response is None:
            continue
        assert isinstance(response, (bytes, bytearray, memoryview))
        if len(response) <= _COALESCE_MAX_BYTES:
            joined.append(response)
            continue
        if joined:
            writer.write(b"".join(joined) if len(joined) > 1 else joined[0])
            joined.clear()
        writer.write(response)
    if joined:
        writer.write(b"".join(joined) if len(joined) > 1 else joined[0])


async def _write_responses(writer: asyncio.StreamWriter, responses: list[bytes | StreamedResponse | None]) -> None:
    """Write `responses` (None: no answer, as for acks=0) in order: runs of small byte
    answers joined into one write, the others written as they are; one drain at the end."""
    run: list[bytes | StreamedResponse | None] = []
    for response in responses:
        if response is None or isinstance(response, (bytes, bytearray, memoryview)):
            run.append(response)
            continue
        _write_joined(writer, run)
        run.clear()
        await response.send(writer)
    _write_joined(writer, run)
    await writer.drain()


class PeerUnavailable(ConnectionError):
    """The peer could not be reached, closed the connection, or did not answer in time."""


class CloseConnection(Exception):
    """Raise from a server handler to close its connection quietly (e.g. a request that
    cannot be answered: Kafka closes the connection on an unknown api key)."""


class _BadFrameSize(CloseConnection):
    """A length prefix outside 0..socket.request.max.bytes (logged as a warning)."""


def _set_nodelay(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


_CLOSE_WAIT_S: Final = 1.0  # how long a closing connection may take to flush before it is aborted


async def _close_writer(writer: asyncio.StreamWriter) -> None:
    """Close a connection; abort it if its unsent bytes do not drain within `_CLOSE_WAIT_S`.

    A plain close waits until the peer has read everything queued for it: a peer that stopped
    reading (paused, or shutting down itself) would otherwise hold the task, and a node's
    shutdown, forever."""
    writer.close()
    try:
        async with asyncio.timeout(_CLOSE_WAIT_S):
            await writer.wait_closed()
    except TimeoutError:
        writer.transport.abort()
    except Exception:  # noqa: S110 - closing anyway
        pass


# --------------------------------------------------------------------------- server

_SERVER_STREAM_LIMIT: Final = 64 * 1024  # per connection: a StreamReader pauses the socket at 2x this
_READ_CHUNK: Final = 256 * 1024  # large bodies are read in chunks so that activity is seen as it comes


# The address of the client whose request is being handled (the connection's task sets it;
# the tasks it starts for requests inherit it). Kafka reports it as a group member's host.
PEER_HOST: contextvars.ContextVar[str] = contextvars.ContextVar("PEER_HOST", default="")

# Resolved when the next request arrives on the connection of the request being handled
# (pipelined serving only; None otherwise). Answers leave in request order, so a handler
# that waits by choice (a Fetch long poll) holds every answer behind it: it may answer early
# instead. librdkafka sends FindCoordinator on the connection of its Fetch long poll; held
# for the poll's 500 ms, the answer lost the race with its commit retry (100 ms), which kept
# a classic group without a coordinator after a coordinator's kill -9 (librdkafka #3645).
REQUEST_BEHIND: contextvars.ContextVar[asyncio.Future[None] | None] = contextvars.ContextVar(
    "REQUEST_BEHIND", default=None
)


class _Conn:
    """One accepted connection: its task, peer address and activity (monotonic seconds)."""

    __slots__ = ("in_flight", "ip", "last_active", "peer", "task", "writer")

    def __init__(self, writer: asyncio.StreamWriter, task: asyncio.Task[None] | None) -> None:
        self.writer = writer
        self.task = task
        self.peer = writer.get_extra_info("peername")
        self.ip: str = self.peer[0] if isinstance(self.peer, tuple) and self.peer else str(self.peer)
        self.last_active = time.monotonic()
        self.in_flight = 0  # requests read and not yet answered

    def touch(self) -> None:
        self.last_active = time.monotonic()


class _ServerState:
    """What `close_server` needs of a server: its connections and its idle sweeper."""

    def __init__(self, limits: ConnectionLimits, pool: MemoryPool) -> None:
        self.limits = limits
        self.pool = pool
        self.connections: dict[asyncio.StreamWriter, _Conn] = {}
        self.per_ip: collections.Counter[str] = collections.Counter()
        self.sweeper: asyncio.Task[None] | None = None

    async def sweep_idle(self, idle_s: float) -> None:
        """Close connections idle for `idle_s` (Kafka's connections.max.idle.ms)."""
        while True:
            await asyncio.sleep(min(1.0, idle_s / 4))
            now = time.monotonic()
            for conn in list(self.connections.values()):
                if conn.in_flight == 0 and now - conn.last_active > idle_s:
                    log.info("closing connection from %s: idle for more than %.0f ms", conn.peer, idle_s * 1000)
                    conn.writer.close()
                    if conn.task is not None:
                        conn.task.cancel()


# Per server, so that `close_server` can drop its connections: 3.11's Server.close()
# leaves accepted connections running.
_SERVERS: dict[asyncio.Server, _ServerState] = {}


async def _read_frame(
    reader: asyncio.StreamReader, conn: _Conn, limits: ConnectionLimits, pool: MemoryPool
) -> tuple[bytes, int] | None:
    """The next request frame (without prefix) and its size reserved in `pool`; None at a
    clean end of stream. The caller releases the reservation once the frame is handled."""
    try:
        prefix = await reader.readexactly(4)
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise
        return None  # the client closed the connection between requests
    conn.touch()
    size = int.from_bytes(prefix, "big", signed=True)
    if size < 0 or size > limits.socket_request_max_bytes:
        raise _BadFrameSize(f"frame size {size} outside 0..{limits.socket_request_max_bytes}")
    await pool.reserve(size)
    try:
        if size <= _READ_CHUNK:
            body = await reader.readexactly(size)
        else:
            # One buffer of the frame's size, filled in place and handed over as it is (a
            # writable frame: the produce path patches its batches there, no copy).
            buf = bytearray(size)
            view = memoryview(buf)
            got = 0
            while got < size:
                chunk = await reader.read(min(size - got, _READ_CHUNK))
                if not chunk:
                    raise asyncio.IncompleteReadError(bytes(view[:got]), size)
                view[got : got + len(chunk)] = chunk
                got += len(chunk)
                conn.touch()
            view.release()
            # Handlers take `bytes` and read frames through memoryviews; this one is a
            # bytearray so that the produce path may patch its batches in place.
            body = cast(bytes, buf)
    except BaseException:
        pool.release(size)
        raise
    conn.touch()
    return body, size


async def _serve_sequential(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    conn: _Conn,
    handler: Handler,
    limits: ConnectionLimits,
    pool: MemoryPool,
) -> None:
    """One request at a time: read, handle, answer (Kafka mutes a connection in flight)."""
    while True:
        read = await _read_frame(reader, conn, limits, pool)
        if read is None:
            return
        frame, size = read
        conn.in_flight = 1
        try:
            response = await handler(frame)
        finally:
            del frame
            pool.release(size)
            conn.in_flight = 0
        if response is not None:
            if writer.is_closing():
                return  # the peer or the server went away while we worked on it
            await _write_response(writer, response)
            conn.touch()


async def _serve_pipelined(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    conn: _Conn,
    handler: Handler,
    limits: ConnectionLimits,
    pool: MemoryPool,
    depth: int,
) -> None:
    """Up to `depth` requests in flight, handled concurrently, answered in request order.

    A handler's completion writes the answers that are ready at the head of the order, in
    its done callback: answers ready together (acks=all produces completed by one
    high-watermark move) leave in one write, one send syscall and one wake-up of the client.
    An answer that sends itself (StreamedResponse), or a write that leaves bytes in the
    transport's buffer (then drained before the slots are given back), goes through a
    writer task; while it runs, later answers wait for it."""
    loop = asyncio.get_running_loop()
    slots = asyncio.Semaphore(depth)
    order: collections.deque[_Answer] = collections.deque()  # handled, not yet answered; request order
    reading = asyncio.current_task()
    failure: list[BaseException] = []
    writing: list[asyncio.Task[None]] = []  # the writer task while it runs (at most one)
    closed = [False]  # the connection is closing: answers are no longer written
    ended: list[asyncio.Future[None]] = []  # set when the client ended its stream: resolved once all is out

    def stop(exc: BaseException | None) -> None:
        """Close the connection: a failed handler or write (`exc`), or the peer gone."""
        if closed[0]:
            return
        closed[0] = True
        if exc is not None:
            failure.append(exc)
        writer.close()
        if reading is not None:
            reading.cancel()

    def taken() -> list[bytes | StreamedResponse | None] | None:
        """The answers at the head of the order that are ready (None: the connection closes)."""
        responses: list[bytes | StreamedResponse | None] = []
        while order:
            task = order[0]
            if not task.done():
                break
            if task.cancelled():
                stop(None)
                return None
            exc = task.exception()
            if exc is not None:
                if responses:
                    break  # the answers before it leave first
                order.popleft()
                stop(exc)
                return None
            order.popleft()
            responses.append(task.result())
        return responses

    def flush() -> None:
        if writing or closed[0]:
            return
        responses = taken()
        if responses is None:
            return
        if responses:
            conn.in_flight -= len(responses)
            if writer.is_closing():
                stop(None)  # the peer or the server went away while we worked on it
                return
            if any(r is not None and not isinstance(r, (bytes, bytearray, memoryview)) for r in responses):
                writing.append(loop.create_task(write_async(responses)))
                return
            _write_joined(writer, responses)
            conn.touch()
            if writer.transport.get_write_buffer_size():
                writing.append(loop.create_task(write_async([], len(responses))))
                return
            for _ in responses:
                slots.release()
            if order and order[0].done():
                flush()  # a failure behind the answers just written
                return
        if ended and not order and not ended[0].done():
            ended[0].set_result(None)

    async def write_async(responses: list[bytes | StreamedResponse | None], written: int = 0) -> None:
        try:
            await _write_responses(writer, responses)
            conn.touch()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            writing.clear()
            stop(exc)
            return
        for _ in range(len(responses) + written):
            slots.release()
        writing.clear()
        flush()

    def on_done(size: int) -> Callable[[_Answer], None]:
        def done(task: _Answer) -> None:
            pool.release(size)
            if not closed[0] and order and order[0] is task:
                flush()

        return done

    behind: asyncio.Future[None] | None = None
    try:
        while True:
            await slots.acquire()
            read = await _read_frame(reader, conn, limits, pool)
            if read is None:
                break
            frame, size = read
            if behind is not None and not behind.done():
                behind.set_result(None)  # the previous request now has one behind it
            behind = loop.create_future()
            token = REQUEST_BEHIND.set(behind)
            task: _Answer = asyncio.ensure_future(handler(frame))  # runs in a copy of this context
            REQUEST_BEHIND.reset(token)
            del frame
            task.add_done_callback(on_done(size))
            conn.in_flight += 1
            order.append(task)
        ended.append(loop.create_future())
        flush()
        await ended[0]
    except asyncio.CancelledError:
        if failure:
            raise failure[0] from None  # a handler failed: report it as the sequential mode does
        raise
    finally:
        closed[0] = True
        for w in writing:
            w.cancel()
        for task in order:
            task.cancel()
        pending: set[asyncio.Future[Any]] = {*writing, *order}
        if pending:
            await asyncio.wait(pending)
        _retrieve_unanswered(order, conn.peer)


def _retrieve_unanswered(tasks: collections.deque[_Answer], peer: object) -> None:
    """Collect the outcome of every handler the writer never reached (the connection closed
    first; all are done by now). Their answers are dropped; a CloseConnection among them
    says nothing new, a handler bug is logged with the peer. Left alone, each failed task
    would surface as asyncio's "Task exception was never retrieved" error."""
    for task in tasks:
        if not task.done() or task.cancelled():
            continue
        exc = task.exception()
        if exc is not None and not isinstance(exc, CloseConnection):
            log.error("request handler failed after the connection from %s closed", peer, exc_info=exc)


async def serve(
    host: str | None,
    port: int,
    handler: Handler,
    *,
    limits: ConnectionLimits | None = None,
    pipeline_depth: int = 1,
    memory_pool: MemoryPool | None = None,
) -> asyncio.Server:
    """Listen on host:port; call `handler(frame)` for each request frame.

    `frame` excludes the length prefix; the handler returns the complete response frame
    (with its prefix) or None to send nothing. `limits` (default: Kafka's defaults, see
    ConnectionLimits) bound frame size, buffered bytes, connections and idleness. A bad
    length prefix, a handler exception or CloseConnection close that connection only.

    `pipeline_depth` 1 (default): a connection's requests are read and answered one at a
    time. Above 1: up to that many frames are read ahead and handled concurrently, and
    their responses written strictly in request order (a None response is skipped in
    place). Received frames count against `queued_max_request_bytes` until their handler
    returns; when the pool is full, reading stops (sockets back-pressure) until it is
    released. `memory_pool` shares one budget between servers (default: one per server).
    Stop with `close_server`.
    """
    if pipeline_depth < 1:
        raise ValueError(f"pipeline_depth must be >= 1, got {pipeline_depth}")
    limits = limits if limits is not None else ConnectionLimits()
    pool = memory_pool if memory_pool is not None else MemoryPool(limits.queued_max_request_bytes)
    state = _ServerState(limits, pool)

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = _Conn(writer, asyncio.current_task())
        peer = conn.peer
        PEER_HOST.set(conn.ip)
        if len(state.connections) >= limits.max_connections or state.per_ip[conn.ip] >= limits.max_connections_per_ip:
            log.warning(
                "refusing connection from %s: %d connections open (%d from %s); max.connections=%d, "
                "max.connections.per.ip=%d",
                peer,
                len(state.connections),
                state.per_ip[conn.ip],
                conn.ip,
                limits.max_connections,
                limits.max_connections_per_ip,
            )
            await _close_writer(writer)
            return
        state.connections[writer] = conn
        state.per_ip[conn.ip] += 1
        _set_nodelay(writer)
        try:
            if pipeline_depth == 1:
                await _serve_sequential(reader, writer, conn, handler, limits, pool)
            else:
                await _serve_pipelined(reader, writer, conn, handler, limits, pool, pipeline_depth)
        except (asyncio.IncompleteReadError, ConnectionError):
            log.debug("connection from %s lost", peer)
        except _BadFrameSize as exc:
            log.warning("closing connection from %s: %s", peer, exc)
        except CloseConnection as exc:
            log.info("closing connection from %s: %s", peer, exc)
        except Exception:
            log.exception("request handler failed; closing connection from %s", peer)
        except asyncio.CancelledError:
            # Ending normally: Python 3.11's StreamReaderProtocol logs a spurious error
            # for a cancelled connection task. Nothing awaits this task but close_server.
            log.debug("connection from %s cancelled", peer)
        finally:
            if state.connections.pop(writer, None) is not None:
                state.per_ip[conn.ip] -= 1
                if state.per_ip[conn.ip] <= 0:
                    del state.per_ip[conn.ip]
            await _close_writer(writer)

    server = await asyncio.start_server(on_connect, host, port, limit=_SERVER_STREAM_LIMIT)
    idle_s = limits.idle_s
    if idle_s is not None:
        state.sweeper = asyncio.get_running_loop().create_task(state.sweep_idle(idle_s))
    _SERVERS[server] = state
    return server


async def close_server(server: asyncio.Server, *, grace_s: float = 1.0) -> None:
    """Stop listening and close every connection the server accepted.

    Connections whose handler is still busy after `grace_s` are cancelled.
    """
    server.close()
    state = _SERVERS.pop(server, None)
    if state is not None:
        if state.sweeper is not None:
            state.sweeper.cancel()
        connections = dict(state.connections)
        for writer in connections:
            writer.close()
        current = asyncio.current_task()
        tasks = {c.task for c in connections.values() if c.task is not None and c.task is not current}
        if tasks:
            _, busy = await asyncio.wait(tasks, timeout=grace_s)
            for task in busy:
                task.cancel()
            if busy:
                await asyncio.wait(busy)
    with contextlib.suppress(Exception):
        await server.wait_closed()


def server_stats(server: asyncio.Server) -> dict[str, int]:
    """Open connections and pooled request bytes of a server (for diagnostics and tests)."""
    state = _SERVERS.get(server)
    if state is None:
        return {"connections": 0, "memory_used": 0, "memory_waiting": 0}
    return {
        "connections": len(state.connections),
        "memory_used": state.pool.used,
        "memory_waiting": state.pool.waiting,
    }


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
                async with asyncio.timeout(self.connect_timeout_s):
                    reader, writer = await asyncio.open_connection(self.host, self.port, limit=_STREAM_LIMIT)
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
        await _close_writer(conn.writer)


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
        async with asyncio.timeout(connect_timeout_s):
            reader, writer = await asyncio.open_connection(host, port)
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
