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
import ctypes
import functools
import logging
import socket
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Final, Protocol, cast

from mypy_extensions import mypyc_attr

from quorum.wire.limits import DEFAULT_SOCKET_REQUEST_MAX_BYTES, ConnectionLimits, MemoryPool

__all__ = [
    "DEFAULT_MAX_FRAME_BYTES",
    "Answer",
    "CloseConnection",
    "ConnectionLimits",
    "Frame",
    "Handler",
    "MemoryPool",
    "PeerClient",
    "PeerUnavailable",
    "RequestPeer",
    "StreamedResponse",
    "close_server",
    "request",
    "serve",
    "server_stats",
]

log = logging.getLogger(__name__)

DEFAULT_MAX_FRAME_BYTES: Final = DEFAULT_SOCKET_REQUEST_MAX_BYTES  # Kafka's socket.request.max.bytes


class StreamedResponse(Protocol):
    """A response that writes itself (a fetch answer whose records are sent from segment
    files, `broker.kafka.spliced`): `send` writes the whole frame; the transport drains after."""

    async def send(self, writer: asyncio.StreamWriter) -> None: ...


Frame = bytes | bytearray
"""A received frame's body: `bytes`, or for a frame larger than one read chunk the `bytearray`
it was read into (no copy). mypy's --strict-bytes keeps the two apart, as compiled code does."""


class RequestPeer(Protocol):
    """What a caller of `PeerClient.send` needs of it: the type its users take, so that an
    in-process stand-in (tests/perf's benches drive a listener without sockets) passes a
    compiled build's run-time type checks, which a `PeerClient` parameter would not."""

    async def send(self, frame: bytes, correlation_id: int, api_key: int, api_version: int) -> Frame: ...


Answer = bytes | bytearray | StreamedResponse | None
"""A handler's answer to one request: the response frame as bytes or the bytearray it was built
in (written as it is), a StreamedResponse, or None (no answer, as for acks=0)."""
Handler = Callable[[Frame], Awaitable[Answer]]
_Answer = asyncio.Future[Answer]  # a handler's task
_Handling = Coroutine[Any, Any, Answer]  # a handler's call


_COALESCE_MAX_BYTES: Final = 64 << 10  # answers up to this size are joined into one write


def _write_joined(writer: asyncio.StreamWriter, responses: list[Answer]) -> None:
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


async def _write_responses(writer: asyncio.StreamWriter, responses: list[Answer]) -> None:
    """Write `responses` (None: no answer, as for acks=0) in order: runs of small byte
    answers joined into one write, the others written as they are; one drain at the end."""
    run: list[Answer] = []
    for response in responses:
        if response is None or isinstance(response, (bytes, bytearray, memoryview)):
            run.append(response)
            continue
        _write_joined(writer, run)
        run.clear()
        await response.send(writer)
    _write_joined(writer, run)
    await writer.drain()


# mypyc cannot compile a subclass of ConnectionError as a native class: a Python class in both builds.
@mypyc_attr(native_class=False)
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

# A connection's receive buffer (bytes): frames up to _READ_CHUNK are cut from it (it
# doubles for one that does not fit, and shrinks back once empty); larger ones are read into
# buffers of their own size. A body of up to _READ_CHUNK fits the buffer once what was cut
# before it is moved out, so the buffer only grows while reading is paused with a frame held.
_SCRATCH_BYTES: Final = 64 * 1024
_READ_CHUNK: Final = _SCRATCH_BYTES

# bytearray(n) writes n zero bytes (memset) that the frame's own bytes then overwrite: at
# saturation that memset was 8 % of a broker's CPU (perf, 2026-11-28). The C API makes one
# whose contents are undefined; every byte of it is received before the frame is handed over.
_new_bytearray = ctypes.pythonapi.PyByteArray_FromStringAndSize
_new_bytearray.restype = ctypes.py_object
_new_bytearray.argtypes = (ctypes.c_void_p, ctypes.c_ssize_t)


def unfilled_bytearray(size: int) -> bytearray:
    """A bytearray of `size` bytes whose contents are undefined (not zeroed): for a buffer
    that is written whole before it is read."""
    return cast(bytearray, _new_bytearray(None, size))


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
    """One accepted connection: when it is over, how to stop its work, its peer address and
    activity (monotonic seconds)."""

    __slots__ = ("cancel", "in_flight", "ip", "last_active", "peer", "task", "writer")

    def __init__(self, writer: asyncio.StreamWriter, task: asyncio.Future[None], cancel: Callable[[], object]) -> None:
        self.writer = writer
        self.task = task  # done when the connection is over
        self.cancel = cancel  # stops its work in progress (closing: idle, or the server's grace time is over)
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
                    conn.cancel()


# Per server, so that `close_server` can drop its connections: 3.11's Server.close()
# leaves accepted connections running.
_SERVERS: dict[asyncio.Server, _ServerState] = {}


class _Frames:
    """Length-prefixed frames cut from a byte stream that the event loop reads into this
    object's buffers (a BufferedProtocol's `get_buffer` / `buffer_updated`): a frame up to
    `_READ_CHUNK` from the receive buffer, copied out as `bytes`; a larger one read straight
    into an unzeroed bytearray of its own size, handed over as it is (no copy). The receive
    buffer is `_SCRATCH_BYTES`; it doubles only when it is full of bytes not yet cut (reading
    paused with a prefix untaken) and shrinks back once empty."""

    __slots__ = ("big", "big_got", "buf", "end", "start")

    def __init__(self) -> None:
        self.buf = bytearray(_SCRATCH_BYTES)  # received bytes [start, end) not yet cut into frames
        self.start = 0
        self.end = 0
        self.big: bytearray | None = None  # the large frame being read into its own buffer
        self.big_got = 0  # its bytes received so far

    def get_buffer(self) -> memoryview:
        big = self.big
        if big is not None:
            return memoryview(big)[self.big_got :]
        buf = self.buf
        if self.end == len(buf):
            kept = self.end - self.start
            if self.start:
                buf[:kept] = buf[self.start : self.end]  # same length: no resize of an exported buffer
            else:  # full of bytes not yet cut (reading paused before a prefix): twice the size
                self.buf = buf = buf + bytes(len(buf))
            self.start, self.end = 0, kept
        return memoryview(buf)[self.end :]

    def received(self, nbytes: int) -> None:
        if self.big is None:
            self.end += nbytes
        else:
            self.big_got += nbytes

    @property
    def loose(self) -> int:
        """Bytes received that no frame holds yet (part of a length prefix)."""
        return self.end - self.start

    def prefix(self) -> int | None:
        """The next frame's size, its 4-byte prefix taken (None: not all received yet)."""
        start = self.start
        if self.end - start < 4:
            return None
        self.start = start + 4
        size = int.from_bytes(self.buf[start : start + 4], "big", signed=True)
        self._settle()
        return size

    def body(self, size: int) -> bytes | bytearray | None:
        """The body of the frame whose prefix said `size`, once all of it is received (None:
        not yet; a large one is read into its own buffer meanwhile)."""
        big = self.big
        if big is not None:
            if self.big_got < len(big):
                return None
            self.big = None
            return big
        start = self.start
        have = self.end - start
        if size > _READ_CHUNK:
            frame = unfilled_bytearray(size)
            have = min(have, size)
            frame[:have] = self.buf[start : start + have]  # what came with the prefix
            self.start = start + have
            self._settle()
            if have == size:
                return frame
            self.big, self.big_got = frame, have
            return None
        if have < size:
            return None
        with memoryview(self.buf) as view:
            body = bytes(view[start : start + size])
        self.start = start + size
        self._settle()
        return body

    def _settle(self) -> None:
        if self.start == self.end:
            self.start = self.end = 0
            if len(self.buf) > _SCRATCH_BYTES:
                self.buf = bytearray(_SCRATCH_BYTES)


class _WriteFlow:
    """The transport's write flow control, as a StreamWriter over this protocol awaits it:
    `drain` (`_drain_helper`) waits while the transport's buffer is over its high-water
    mark (`pause_writing` .. `resume_writing`) and fails once the connection is lost. Not an
    `asyncio.Protocol` (uvloop reads a Protocol with `data_received`, never `get_buffer`)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._flow_loop = loop
        self._write_paused = False
        self._connection_gone = False
        self._drain_waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._wake_drainers(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self._connection_gone = True
        self._wake_drainers(exc if exc is not None else ConnectionResetError("connection lost"))

    def _wake_drainers(self, exc: BaseException | None) -> None:
        for waiter in self._drain_waiters:
            if not waiter.done():
                if exc is None:
                    waiter.set_result(None)
                else:
                    waiter.set_exception(exc)

    async def _drain_helper(self) -> None:
        if self._connection_gone:
            raise ConnectionResetError("connection lost")
        if not self._write_paused:
            return
        waiter = self._flow_loop.create_future()
        self._drain_waiters.append(waiter)
        try:
            await waiter
        finally:
            self._drain_waiters.remove(waiter)


class _Connected(_WriteFlow, asyncio.BufferedProtocol):
    """One accepted connection served with up to `depth` requests in flight (`serve`; depth
    1: one at a time, the next frame read once the answer is written).

    The socket is read into buffers of ours (`get_buffer` / `buffer_updated`): small frames
    are cut from a receive buffer (one copy out of it each, as `bytes`); a frame over
    `_READ_CHUNK` is read straight into a bytearray of its own size, which becomes the frame
    as it is (writable: the produce path patches its batches there), with no copy. Each
    frame starts its handler task at once (in a copy of the connection's context, with its
    REQUEST_BEHIND above depth 1). A handler's completion writes the answers ready at the head of the
    order, in its done callback:
    answers ready together (acks=all produces completed by one high-watermark move) leave in
    one write, one send and one wake-up of the client. An answer that sends itself
    (StreamedResponse), or a write that left bytes in the transport's buffer (drained before
    their slots are given back), goes through a writer task; later answers wait for it.
    Reading pauses while `depth` requests are unanswered or a frame waits for the pool."""

    def __init__(
        self,
        state: _ServerState,
        handler: Handler,
        depth: int,
        loop: asyncio.AbstractEventLoop,
        request_behind: bool = True,
    ) -> None:
        super().__init__(loop)
        self.state = state
        self.handler = handler
        self.depth = depth
        # REQUEST_BEHIND for the handlers (pipelined serving only; off: never set, None).
        self.request_behind = request_behind and depth > 1
        self.loop = loop
        self.frames = _Frames()
        self.size = -1  # body bytes of the frame being received (prefix read, pool reserved); -1: between frames
        self.held = 0  # pool bytes reserved for the frame being received
        self.order: collections.deque[_Answer] = collections.deque()  # started, not answered; request order
        self.slots = 0  # requests started whose answers are not written (and drained) yet
        self.writing: asyncio.Task[None] | None = None
        self.reserving: asyncio.Task[None] | None = None  # waiting for the pool
        self.behind: asyncio.Future[None] | None = None
        self.paused = False
        self.ended = False  # the peer ended its stream
        self.closed = False  # nothing more is read or answered
        self.lost = False
        self.finished: asyncio.Future[None] = loop.create_future()  # closed and every handler done
        self.close_waiter: asyncio.Future[None] = loop.create_future()
        self.abort_timer: asyncio.TimerHandle | None = None
        self.registered = False

    # ------------------------------------------------------------------ connection

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.writer = asyncio.StreamWriter(self.transport, self, None, self.loop)
        conn = self.conn = _Conn(self.writer, self.finished, self.cancel_handlers)
        state = self.state
        limits = state.limits
        if len(state.connections) >= limits.max_connections or state.per_ip[conn.ip] >= limits.max_connections_per_ip:
            log.warning(
                "refusing connection from %s: %d connections open (%d from %s); max.connections=%d, "
                "max.connections.per.ip=%d",
                conn.peer,
                len(state.connections),
                state.per_ip[conn.ip],
                conn.ip,
                limits.max_connections,
                limits.max_connections_per_ip,
            )
            self.closed = True
            self.transport.close()
            self._maybe_finish()
            return
        state.connections[self.writer] = conn
        state.per_ip[conn.ip] += 1
        self.registered = True
        _set_nodelay(self.writer)
        self.context = contextvars.copy_context()
        self.context.run(PEER_HOST.set, conn.ip)

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self.lost = True
        if not self.close_waiter.done():
            self.close_waiter.set_result(None)
        if self.abort_timer is not None:
            self.abort_timer.cancel()
        if not self.closed:
            # The peer went away (exc), or the server closed the connection (idle sweep,
            # close_server: that one gives handlers in flight their grace time).
            if exc is not None:
                log.debug("connection from %s lost", self.conn.peer)
                self._close(None, cancel=True)
            else:
                self._close(None, cancel=False)
        self._maybe_finish()

    def eof_received(self) -> bool:
        if self.closed:
            return False
        self.ended = True
        self._read_frames()
        return not self.closed  # the answers in flight are still written

    def _get_close_waiter(self, stream: asyncio.StreamWriter) -> asyncio.Future[None]:
        return self.close_waiter

    def cancel_handlers(self) -> None:
        """Cancel the handlers still running (the connection is closing)."""
        for task in self.order:
            task.cancel()
        if self.writing is not None:
            self.writing.cancel()

    def _close(self, exc: BaseException | None, *, cancel: bool) -> None:
        """Stop reading and answering; `exc` is why (logged as the serving loop did)."""
        if self.closed:
            return
        self.closed = True
        peer = self.conn.peer
        if exc is None:
            pass
        elif isinstance(exc, ConnectionError):
            log.debug("connection from %s lost", peer)
        elif isinstance(exc, _BadFrameSize):
            log.warning("closing connection from %s: %s", peer, exc)
        elif isinstance(exc, CloseConnection):
            log.info("closing connection from %s: %s", peer, exc)
        else:
            log.error("request handler failed; closing connection from %s", peer, exc_info=exc)
        if self.reserving is not None:
            self.reserving.cancel()
            self.reserving = None
        if self.held:
            self.state.pool.release(self.held)
            self.held = 0
        if cancel:
            self.cancel_handlers()
        if not self.lost:
            self.transport.close()
            self.abort_timer = self.loop.call_later(_CLOSE_WAIT_S, self.transport.abort)

    def _maybe_finish(self) -> None:
        if not self.closed or self.finished.done():
            return
        if any(not task.done() for task in self.order) or (self.writing is not None and not self.writing.done()):
            return
        if self.registered:
            self.registered = False
            state = self.state
            if state.connections.pop(self.writer, None) is not None:
                state.per_ip[self.conn.ip] -= 1
                if state.per_ip[self.conn.ip] <= 0:
                    del state.per_ip[self.conn.ip]
        _retrieve_unanswered(self.order, self.conn.peer)
        self.order.clear()
        self.finished.set_result(None)

    def _maybe_end(self) -> None:
        """After the peer's end of stream: close once every frame read is answered."""
        if self.ended and not self.closed and not self.order and self.writing is None and self.size < 0:
            self._close(None, cancel=False)
            self._maybe_finish()

    # ------------------------------------------------------------------ reading

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.frames.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        if self.closed:
            return
        self.conn.touch()
        self.frames.received(nbytes)
        self._read_frames()

    def _read_frames(self) -> None:
        frames = self.frames
        pool = self.state.pool
        while not self.closed and self.reserving is None:
            if self.size < 0:
                if self.slots >= self.depth:
                    self._pause()
                    return
                size = frames.prefix()
                if size is None:
                    if self.ended:
                        self._ended(frames.loose)
                    return
                limit = self.state.limits.socket_request_max_bytes
                if size < 0 or size > limit:
                    self._close(_BadFrameSize(f"frame size {size} outside 0..{limit}"), cancel=True)
                    return
                self.size = size
                if not pool.try_reserve(size):
                    self._pause()
                    self.reserving = self.loop.create_task(self._reserve(size))
                    return
                self.held = size
            body = frames.body(self.size)
            if body is None:
                if self.ended:
                    self._ended(-1)
                return
            size = self.size
            self.size = -1
            self.held = 0
            self._start(body, size)

    def _ended(self, left: int) -> None:
        """The peer's stream ended with `left` bytes of a frame's prefix unread (-1: its body)."""
        if left:
            log.debug("connection from %s lost", self.conn.peer)  # in the middle of a frame
            self._close(None, cancel=True)
        else:
            self._maybe_end()

    async def _reserve(self, size: int) -> None:
        await self.state.pool.reserve(size)
        self.reserving = None
        if self.closed:
            self.state.pool.release(size)
            return
        self.held = size
        self._resume()

    def _pause(self) -> None:
        if not self.paused:
            self.paused = True
            self.transport.pause_reading()

    def _resume(self) -> None:
        if self.paused and not self.closed and self.reserving is None and self.slots < self.depth:
            self.paused = False
            self.transport.resume_reading()
            self._read_frames()

    def _start(self, frame: Frame, size: int) -> None:
        context = self.context.copy()
        if self.request_behind:  # at depth 1 nothing is read behind a request in flight: no REQUEST_BEHIND
            behind = self.behind
            if behind is not None and not behind.done():
                behind.set_result(None)  # the previous request now has one behind it
            behind = self.behind = self.loop.create_future()
            context.run(REQUEST_BEHIND.set, behind)
        handling = self.handler(frame)
        # A handler that decided at once may answer with a future of its own (a controller
        # write, resolved by its commit): no task to run it.
        task: _Answer = (
            handling
            if isinstance(handling, asyncio.Future)
            else self.loop.create_task(cast(_Handling, handling), context=context)
        )
        task.add_done_callback(functools.partial(self._done, size))
        self.conn.in_flight += 1
        self.slots += 1
        self.order.append(task)

    def _done(self, size: int, task: _Answer) -> None:
        self.state.pool.release(size)
        if self.closed:
            self._maybe_finish()
        elif self.order and self.order[0] is task:
            self._flush()

    # ------------------------------------------------------------------ answering

    def _taken(self) -> list[Answer] | None:
        """The answers at the head of the order that are ready (None: the connection closes)."""
        order = self.order
        responses: list[Answer] = []
        while order:
            task = order[0]
            if not task.done():
                break
            if task.cancelled():
                self._close(None, cancel=True)
                return None
            exc = task.exception()
            if exc is not None:
                if responses:
                    break  # the answers before it leave first
                order.popleft()
                self._close(exc, cancel=True)
                return None
            order.popleft()
            responses.append(task.result())
        return responses

    def _flush(self) -> None:
        if self.writing is not None or self.closed:
            return
        responses = self._taken()
        if responses is None:
            return
        if responses:
            self.conn.in_flight -= len(responses)
            writer = self.writer
            if writer.is_closing():
                self._close(None, cancel=True)  # the server closed it while we worked on it
                return
            if len(responses) == 1 and type(responses[0]) is bytes:
                self.transport.write(responses[0])  # the common case: StreamWriter.write's own call
            elif any(r is not None and not isinstance(r, (bytes, bytearray, memoryview)) for r in responses):
                self._write_in_task(responses, 0)
                return
            else:
                _write_joined(writer, responses)
            self.conn.touch()
            if self.transport.get_write_buffer_size():
                self._write_in_task([], len(responses))
                return
            self._written(len(responses))
            if self.order and self.order[0].done():
                self._flush()  # a failure behind the answers just written
                return
        self._maybe_end()

    def _written(self, n: int) -> None:
        self.slots -= n
        if self.paused:
            self._resume()

    async def _write_async(self, responses: list[Answer], written: int) -> None:
        try:
            await _write_responses(self.writer, responses)
            self.conn.touch()
        except Exception as exc:
            self._close(exc, cancel=True)
            return
        self.writing = None
        self._written(len(responses) + written)
        self._flush()

    def _write_in_task(self, responses: list[Answer], written: int) -> None:
        self.writing = self.loop.create_task(self._write_async(responses, written))
        self.writing.add_done_callback(self._writer_done)

    def _writer_done(self, task: asyncio.Task[None]) -> None:
        if self.closed:
            self._maybe_finish()


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
    request_behind: bool = True,
) -> asyncio.Server:
    """Listen on host:port; call `handler(frame)` for each request frame.

    `frame` excludes the length prefix; the handler returns the complete response frame
    (with its prefix) or None to send nothing. `limits` (default: Kafka's defaults, see
    ConnectionLimits) bound frame size, buffered bytes, connections and idleness. A bad
    length prefix, a handler exception or CloseConnection close that connection only.

    `pipeline_depth` 1 (default): a connection's requests are read and answered one at a
    time (Kafka mutes a connection with a request in flight). Above 1: up to that many
    frames are read ahead and handled concurrently, and their responses written strictly in
    request order (a None response is skipped in place). Received frames count against
    `queued_max_request_bytes` until their handler returns; when the pool is full, reading
    stops (sockets back-pressure) until it is released. `memory_pool` shares one budget
    between servers (default: one per server). `request_behind` False: the handlers never
    read REQUEST_BEHIND (it stays None; no future per request for it).
    Stop with `close_server`.
    """
    if pipeline_depth < 1:
        raise ValueError(f"pipeline_depth must be >= 1, got {pipeline_depth}")
    limits = limits if limits is not None else ConnectionLimits()
    pool = memory_pool if memory_pool is not None else MemoryPool(limits.queued_max_request_bytes)
    state = _ServerState(limits, pool)

    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: _Connected(state, handler, pipeline_depth, loop, request_behind), host, port
    )
    _set_buffer_sizes(server, limits)
    idle_s = limits.idle_s
    if idle_s is not None:
        state.sweeper = asyncio.get_running_loop().create_task(state.sweep_idle(idle_s))
    _SERVERS[server] = state
    return server


def _set_buffer_sizes(server: asyncio.Server, limits: ConnectionLimits) -> None:
    """SO_RCVBUF / SO_SNDBUF on the listening sockets (Kafka's socket.receive.buffer.bytes
    and socket.send.buffer.bytes): Linux gives accepted connections the listener's sizes,
    and a size set before the handshake also bounds the receive window it advertises."""
    # Any: typeshed says a tuple, uvloop's Server gives a list (mypyc checks the declared type).
    sockets: Any = cast(Any, server).sockets
    for sock in sockets:
        for option, size in ((socket.SO_RCVBUF, limits.socket_receive_buffer_bytes),
                             (socket.SO_SNDBUF, limits.socket_send_buffer_bytes)):  # fmt: skip
            if size > 0:
                sock.setsockopt(socket.SOL_SOCKET, option, size)


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
        by_task = {c.task: c for c in connections.values()}
        if by_task:
            _, busy = await asyncio.wait(by_task, timeout=grace_s)
            for task in busy:
                by_task[task].cancel()
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


class _Connection(_WriteFlow, asyncio.BufferedProtocol):
    """One TCP connection to a peer: its requests in flight, each answered by the response
    frame with its correlation id, cut from what the connection reads (`_Frames`: a large
    response, such as a fetch answer, is read straight into a buffer of its own)."""

    def __init__(self, name: str, max_frame: int, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        self.name = name
        self.max_frame = max_frame
        self.loop = loop
        self.pending: dict[int, asyncio.Future[Frame]] = {}
        self.closed = False
        self.frames = _Frames()
        self.size = -1  # body bytes of the response being received; -1: between frames
        self.gone: asyncio.Future[None] = loop.create_future()  # the connection is lost

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.writer = asyncio.StreamWriter(self.transport, self, None, self.loop)

    def _get_close_waiter(self, stream: asyncio.StreamWriter) -> asyncio.Future[None]:
        return self.gone

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.frames.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        if self.closed:
            return
        frames = self.frames
        frames.received(nbytes)
        pending = self.pending
        while True:
            if self.size < 0:
                size = frames.prefix()
                if size is None:
                    return
                if size < 4 or size > self.max_frame:
                    self.fail(PeerUnavailable(f"{self.name}: bad response frame size {size}"))
                    return
                self.size = size
            body = frames.body(self.size)
            if body is None:
                return
            self.size = -1
            correlation_id = int.from_bytes(body[:4], "big", signed=True)
            fut = pending.pop(correlation_id, None)
            if fut is None:
                # The sender gave up on it (cancelled); responses stay in order, so go on.
                log.debug("%s: response to unknown correlation id %d dropped", self.name, correlation_id)
            elif not fut.done():
                fut.set_result(body)

    def eof_received(self) -> bool:
        self.fail(PeerUnavailable(f"{self.name}: connection closed by the peer"))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self.fail(PeerUnavailable(f"{self.name}: connection closed ({exc!r})"))
        if not self.gone.done():
            self.gone.set_result(None)

    def fail(self, exc: PeerUnavailable) -> None:
        """Close the connection and fail every request in flight on it."""
        if self.closed:
            return
        self.closed = True
        pending, self.pending = self.pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(exc)
        self.transport.close()


def _expire(fut: asyncio.Future[Frame], timeout_s: float) -> None:
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
                    conn = await self._open()
            except (OSError, TimeoutError) as exc:
                raise PeerUnavailable(f"cannot connect to {self._name}: {exc!r}") from exc
            _set_nodelay(conn.writer)
            self._conn = conn
            return conn

    async def _open(self, **where: Any) -> _Connection:
        """A new connection to the peer (`where`: create_connection's arguments instead)."""
        loop = asyncio.get_running_loop()
        address = where or {"host": self.host, "port": self.port}
        _, conn = await loop.create_connection(lambda: _Connection(self._name, self.max_frame_bytes, loop), **address)
        return conn

    async def send(self, frame: bytes, correlation_id: int, api_key: int, api_version: int) -> Frame:
        """Send one request frame (with length prefix); return the response frame body.

        `api_key`/`api_version` only label errors and logs.
        """
        conn = await self._connection()
        if correlation_id in conn.pending:
            raise ValueError(f"correlation id {correlation_id} already in flight to {self._name}")
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Frame] = loop.create_future()
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
