"""quorum.wire.transport on real loopback sockets, under asyncio's loop and uvloop."""

from __future__ import annotations

import asyncio
import gc
import logging
import socket
import struct

import pytest

from quorum.node.free_ports import free_port
from quorum.raft.errors import ErrorCode
from quorum.raft.messages import VoteRequest, VoteResponse
from quorum.wire import (
    ApiVersionsCall,
    ApiVersionsResult,
    CloseConnection,
    ConnectionLimits,
    PeerClient,
    PeerUnavailable,
    WireError,
    close_server,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    error_response_for,
    request,
    serve,
)
from quorum.wire.transport import REQUEST_BEHIND

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def frame_for(correlation_id: int, payload: bytes = b"") -> bytes:
    """A minimal request-shaped frame: api key 0, version 0, correlation id, payload."""
    body = struct.pack(">hhi", 0, 0, correlation_id) + payload
    return struct.pack(">i", len(body)) + body


def echo_response(frame: bytes) -> bytes:
    """Response body = correlation id + the request payload."""
    body = frame[4:8] + frame[8:]
    return struct.pack(">i", len(body)) + body


async def echo(frame: bytes) -> bytes:
    return echo_response(frame)


def port_of(server: asyncio.Server) -> int:
    return int(server.sockets[0].getsockname()[1])


def test_echo_round_trip(run):
    async def main() -> None:
        server = await serve("127.0.0.1", 0, echo)
        client = PeerClient("127.0.0.1", port_of(server), connect_timeout_s=2, request_timeout_s=5)
        try:
            body = await client.send(frame_for(7, b"hello"), 7, 0, 0)
            assert body == struct.pack(">i", 7) + b"hello"
            big = bytes(range(256)) * 4000  # ~1 MB, above the stream buffer limit
            body = await client.send(frame_for(8, big), 8, 0, 0)
            assert body[4:] == big
            assert client.connected
        finally:
            await client.close()
            await close_server(server)

    run(main())


def test_codec_over_tcp(run):
    async def handler(frame: bytes) -> bytes:
        req = decode_request(frame)
        assert isinstance(req.message, VoteRequest)
        return encode_response(req, VoteResponse(ErrorCode.NONE, -1, req.message.candidate_epoch, True, True))

    async def main() -> None:
        server = await serve("127.0.0.1", 0, handler)
        client = PeerClient("127.0.0.1", port_of(server), connect_timeout_s=2, request_timeout_s=5)
        try:
            vote = VoteRequest(4, 1, 3, 100, pre_vote=True)
            frame = encode_request(
                vote, correlation_id=5, client_id="n1", cluster_id="c", source_id=1, destination_id=2
            )
            body = await client.send(frame, 5, 52, 2)
            assert decode_response(52, 2, body, request=vote) == (5, VoteResponse(ErrorCode.NONE, -1, 4, True, True))
        finally:
            await client.close()
            await close_server(server)

    run(main())


async def codec_handler(frame: bytes) -> bytes:
    """What a node's handler looks like: decode, answer, or report the error, or hang up."""
    try:
        req = decode_request(frame)
    except WireError as exc:
        response = error_response_for(exc)
        if response is None:
            raise CloseConnection(str(exc)) from exc
        return response
    if isinstance(req.message, ApiVersionsCall):
        return encode_response(req, ApiVersionsResult())
    assert isinstance(req.message, VoteRequest)
    return encode_response(req, VoteResponse(ErrorCode.NONE, -1, req.message.candidate_epoch, False))


def test_codec_errors_over_tcp(run):
    async def main() -> None:
        server = await serve("127.0.0.1", 0, codec_handler)
        client = PeerClient("127.0.0.1", port_of(server), connect_timeout_s=2, request_timeout_s=5)
        try:
            call = encode_request(
                ApiVersionsCall(), correlation_id=1, client_id="x", cluster_id=None, source_id=-1, destination_id=-1
            )
            future = bytearray(call)
            struct.pack_into(">h", future, 6, 12)  # ApiVersions v12
            body = await client.send(bytes(future), 1, 18, 12)
            assert decode_response(18, 4, body) == (1, ApiVersionsResult(error=ErrorCode.UNSUPPORTED_VERSION))
            # An unknown api key cannot be answered: the server hangs up.
            with pytest.raises(PeerUnavailable):
                await client.send(frame_for(2), 2, 0, 0)
            body = await client.send(call, 1, 18, 4)
            assert decode_response(18, 4, body) == (1, ApiVersionsResult())
        finally:
            await client.close()
            await close_server(server)

    run(main())


def test_pipelined_requests_are_answered_in_order_one_at_a_time(run):
    async def main() -> None:
        seen: list[int] = []
        active = 0
        max_active = 0

        async def handler(frame: bytes) -> bytes:
            nonlocal active, max_active
            active += 1
            max_active = max(max_active, active)
            seen.append(struct.unpack_from(">i", frame, 4)[0])
            await asyncio.sleep(0)
            active -= 1
            return echo_response(frame)

        server = await serve("127.0.0.1", 0, handler)
        client = PeerClient("127.0.0.1", port_of(server), connect_timeout_s=2, request_timeout_s=10)
        try:
            ids = list(range(300))
            bodies = await asyncio.gather(*(client.send(frame_for(i, b"x%d" % i), i, 0, 0) for i in ids))
            assert [struct.unpack_from(">i", b)[0] for b in bodies] == ids
            assert [b[4:] for b in bodies] == [b"x%d" % i for i in ids]
            assert seen == ids  # one connection: processed in send order
            assert max_active == 1
        finally:
            await client.close()
            await close_server(server)

    run(main())


def test_pipelined_connection_runs_handlers_concurrently_and_answers_in_order(run):
    """pipeline_depth > 1: later requests may finish first, answers still come in request
    order, a None answer (acks=0) sends nothing, and at most `depth` run at once."""

    async def main() -> None:
        active = 0
        max_active = 0

        async def handler(frame: bytes) -> bytes | None:
            nonlocal active, max_active
            cid = struct.unpack_from(">i", frame, 4)[0]
            active += 1
            max_active = max(max_active, active)
            await asyncio.sleep(0.002 * ((7 * cid) % 5))  # out-of-order completion
            active -= 1
            return None if cid % 10 == 9 else echo_response(frame)

        server = await serve("127.0.0.1", 0, handler, pipeline_depth=8)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port_of(server))
            writer.write(b"".join(frame_for(i, b"p%d" % i) for i in range(100)))
            await writer.drain()
            got = []
            for _ in range(90):  # ids ending in 9 get no answer
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                got.append(struct.unpack_from(">i", await reader.readexactly(size))[0])
            writer.close()
            assert got == [i for i in range(100) if i % 10 != 9]
            assert 1 < max_active <= 8
        finally:
            await close_server(server)

    run(main())


def test_pipelined_answers_ready_together_leave_in_one_write(run, monkeypatch):
    """Answers completed together (acks=all produces released by one high-watermark move)
    are joined into one write: one send syscall per round, not one per answer; a request
    still in progress keeps the answers after it for a later write, in request order."""
    writes: list[int] = []
    real_write = asyncio.StreamWriter.write

    def counting_write(self: asyncio.StreamWriter, data: bytes | bytearray | memoryview) -> None:
        writes.append(len(data))
        real_write(self, data)

    async def main() -> None:
        release = asyncio.Event()
        late = asyncio.Event()

        async def handler(frame: bytes) -> bytes:
            cid = struct.unpack_from(">i", frame, 4)[0]
            await (late if cid == 8 else release).wait()
            return echo_response(frame)

        server = await serve("127.0.0.1", 0, handler, pipeline_depth=16)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port_of(server))
            writer.write(b"".join(frame_for(i, b"p%d" % i) for i in range(12)))
            await writer.drain()
            await asyncio.sleep(0.1)  # all 12 read and waiting
            monkeypatch.setattr(asyncio.StreamWriter, "write", counting_write)
            release.set()  # 0-7 and 9-11 done together; 8 holds 9-11 back
            got = []
            for _ in range(8):
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                got.append(struct.unpack_from(">i", await reader.readexactly(size))[0])
            assert len(writes) == 1, writes
            late.set()
            for _ in range(4):
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                got.append(struct.unpack_from(">i", await reader.readexactly(size))[0])
            assert got == list(range(12))
            assert len(writes) == 2, writes
            writer.close()
        finally:
            await close_server(server)

    run(main())


def test_a_slow_request_does_not_block_other_connections(run):
    async def main() -> None:
        release = asyncio.Event()

        async def handler(frame: bytes) -> bytes:
            if frame[8:] == b"slow":
                await release.wait()
            return echo_response(frame)

        server = await serve("127.0.0.1", 0, handler)
        port = port_of(server)
        a = PeerClient("127.0.0.1", port, connect_timeout_s=2, request_timeout_s=10)
        b = PeerClient("127.0.0.1", port, connect_timeout_s=2, request_timeout_s=10)
        try:
            slow = asyncio.ensure_future(a.send(frame_for(1, b"slow"), 1, 0, 0))
            await asyncio.sleep(0.05)
            assert (await asyncio.wait_for(b.send(frame_for(2, b"fast"), 2, 0, 0), 5))[4:] == b"fast"
            assert not slow.done()
            release.set()
            assert (await slow)[4:] == b"slow"
        finally:
            await a.close()
            await b.close()
            await close_server(server)

    run(main())


async def _raw_exchange(port: int, data: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    try:
        return await asyncio.wait_for(reader.read(100), 5)
    finally:
        writer.close()


@pytest.mark.parametrize("length", [1025, 2**31 - 1, -1, -(2**31)])
def test_bad_length_prefix_closes_only_that_connection(run, length, caplog):
    async def main() -> None:
        server = await serve("127.0.0.1", 0, echo, limits=ConnectionLimits(socket_request_max_bytes=1024))
        port = port_of(server)
        good = PeerClient("127.0.0.1", port, connect_timeout_s=2, request_timeout_s=5)
        try:
            assert (await good.send(frame_for(1, b"a"), 1, 0, 0))[4:] == b"a"
            # The server reads the bad prefix and closes: EOF, no response.
            assert await _raw_exchange(port, struct.pack(">i", length) + b"junk") == b""
            # The other connection, and new ones, are still served.
            assert (await good.send(frame_for(2, b"b"), 2, 0, 0))[4:] == b"b"
            assert (await request("127.0.0.1", port, frame_for(3, b"c")))[4:] == b"c"
            # A frame of exactly the maximum is fine.
            assert (await good.send(frame_for(4, b"z" * (1024 - 8)), 4, 0, 0))[4:] == b"z" * 1016
        finally:
            await good.close()
            await close_server(server)

    run(main())
    assert "frame size" in caplog.text


def test_handler_exception_closes_only_that_connection(run):
    async def handler(frame: bytes) -> bytes | None:
        if frame[8:] == b"boom":
            raise RuntimeError("handler bug")
        if frame[8:] == b"silent":
            return None
        return echo_response(frame)

    async def main() -> None:
        server = await serve("127.0.0.1", 0, handler)
        port = port_of(server)
        a = PeerClient("127.0.0.1", port, connect_timeout_s=2, request_timeout_s=5)
        b = PeerClient("127.0.0.1", port, connect_timeout_s=2, request_timeout_s=5)
        try:
            assert (await b.send(frame_for(1, b"ok"), 1, 0, 0))[4:] == b"ok"
            with pytest.raises(PeerUnavailable):
                await a.send(frame_for(2, b"boom"), 2, 0, 0)
            assert (await b.send(frame_for(3, b"still"), 3, 0, 0))[4:] == b"still"
            # `a` reconnects on its next send.
            assert (await a.send(frame_for(4, b"again"), 4, 0, 0))[4:] == b"again"
        finally:
            await a.close()
            await b.close()
            await close_server(server)

    run(main())


def test_request_timeout_raises_and_reconnects(run):
    async def handler(frame: bytes) -> bytes | None:
        return None if frame[8:] == b"silent" else echo_response(frame)

    async def main() -> None:
        server = await serve("127.0.0.1", 0, handler)
        client = PeerClient("127.0.0.1", port_of(server), connect_timeout_s=2, request_timeout_s=0.2)
        try:
            with pytest.raises(PeerUnavailable, match="no response"):
                await client.send(frame_for(1, b"silent"), 1, 0, 0)
            assert not client.connected
            assert (await client.send(frame_for(2, b"next"), 2, 0, 0))[4:] == b"next"
        finally:
            await client.close()
            await close_server(server)

    run(main())


def test_client_survives_its_server_dying_and_coming_back(run):
    async def main() -> None:
        port = free_port()
        client = PeerClient("127.0.0.1", port, connect_timeout_s=1, request_timeout_s=5)
        try:
            with pytest.raises(PeerUnavailable, match="cannot connect"):
                await client.send(frame_for(1), 1, 0, 0)

            server = await serve("127.0.0.1", port, echo)
            assert (await client.send(frame_for(2, b"up"), 2, 0, 0))[4:] == b"up"

            # In-flight requests fail when the server dies.
            release = asyncio.Event()

            async def stuck(frame: bytes) -> bytes:
                await release.wait()
                return echo_response(frame)

            await close_server(server)
            with pytest.raises(PeerUnavailable):
                await client.send(frame_for(3), 3, 0, 0)
            with pytest.raises(PeerUnavailable):
                await client.send(frame_for(4), 4, 0, 0)  # refused while down

            server = await serve("127.0.0.1", port, stuck)
            inflight = asyncio.ensure_future(client.send(frame_for(5), 5, 0, 0))
            await asyncio.sleep(0.05)
            await close_server(server)
            with pytest.raises(PeerUnavailable):
                await inflight
            release.set()

            server = await serve("127.0.0.1", port, echo)
            assert (await client.send(frame_for(6, b"back"), 6, 0, 0))[4:] == b"back"
            await close_server(server)
        finally:
            await client.close()

    run(main())


def test_duplicate_correlation_id_is_refused(run):
    async def main() -> None:
        release = asyncio.Event()

        async def handler(frame: bytes) -> bytes:
            await release.wait()
            return echo_response(frame)

        server = await serve("127.0.0.1", 0, handler)
        client = PeerClient("127.0.0.1", port_of(server), connect_timeout_s=2, request_timeout_s=5)
        try:
            first = asyncio.ensure_future(client.send(frame_for(9), 9, 0, 0))
            await asyncio.sleep(0.02)
            with pytest.raises(ValueError):
                await client.send(frame_for(9), 9, 0, 0)
            release.set()
            assert struct.unpack_from(">i", await first)[0] == 9
        finally:
            await client.close()
            await close_server(server)

    run(main())


def test_one_shot_request_helper(run):
    async def main() -> None:
        with pytest.raises(PeerUnavailable):
            await request("127.0.0.1", free_port(), frame_for(1), connect_timeout_s=1)
        server = await serve("127.0.0.1", 0, echo)
        try:
            assert await request("127.0.0.1", port_of(server), frame_for(3, b"q")) == struct.pack(">i", 3) + b"q"
        finally:
            await close_server(server)

        async def never(frame: bytes) -> None:
            return None

        server = await serve("127.0.0.1", 0, never)
        try:
            with pytest.raises(PeerUnavailable, match="no response"):
                await request("127.0.0.1", port_of(server), frame_for(4), request_timeout_s=0.2)
        finally:
            await close_server(server)

    run(main())


def test_tcp_nodelay_is_set(run):
    async def main() -> None:
        server = await serve("127.0.0.1", 0, echo)
        client = PeerClient("127.0.0.1", port_of(server), connect_timeout_s=2, request_timeout_s=5)
        try:
            await client.send(frame_for(1), 1, 0, 0)
            conn = client._conn
            assert conn is not None
            sock = conn.writer.get_extra_info("socket")
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        finally:
            await client.close()
            await close_server(server)

    run(main())


class _Lines(logging.Handler):
    """Keeps (level, message) only: a kept LogRecord (pytest's capture keeps them) would
    keep its exception's frames, and with them the very tasks whose collection the test
    waits for."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[tuple[int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((record.levelno, record.getMessage()))


@pytest.mark.parametrize("failure", ["close", "bug"])
def test_pipelined_failures_after_the_first_are_retrieved_not_left_to_asyncio(run, failure):
    """Handlers that suspend and then fail, read ahead on one connection: the first failure
    closes the connection (CloseConnection: one INFO line with the peer); the tasks of the
    later ones are retrieved by the transport, never reported by asyncio as "Task exception
    was never retrieved". A later handler bug is still logged, with the peer."""

    async def handler(frame: bytes) -> bytes | None:
        await asyncio.sleep(0)
        if failure == "close":
            raise CloseConnection(f"bad request {frame[4:8].hex()}")
        raise RuntimeError(f"handler bug on {frame[4:8].hex()}")

    async def main() -> list[dict[str, object]]:
        unhandled: list[dict[str, object]] = []
        asyncio.get_running_loop().set_exception_handler(lambda loop, context: unhandled.append(context))
        server = await serve("127.0.0.1", 0, handler, pipeline_depth=8)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port_of(server))
            writer.write(b"".join(frame_for(corr) for corr in range(1, 5)))
            await writer.drain()
            assert await reader.read() == b""  # closed, nothing answered
            writer.close()
            await asyncio.sleep(0.05)
        finally:
            await close_server(server)
        gc.collect()  # asyncio reports an unretrieved task exception when the task is collected
        await asyncio.sleep(0)
        return unhandled

    logger = logging.getLogger("quorum.wire.transport")
    lines = _Lines()
    logger.addHandler(lines)
    old_level, old_propagate = logger.level, logger.propagate
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    try:
        unhandled = run(main())
    finally:
        logger.removeHandler(lines)
        logger.setLevel(old_level)
        logger.propagate = old_propagate
    assert [c.get("message") for c in unhandled] == []
    shown = [(level, message) for level, message in lines.lines if level >= logging.INFO]
    if failure == "close":
        assert [level for level, _ in shown] == [logging.INFO]
        assert shown[0][1].startswith("closing connection from ('127.0.0.1'")
    else:  # the failure that closed the connection, then the three read ahead
        assert [level for level, _ in shown] == [logging.ERROR] * 4
        assert all("127.0.0.1" in message for _, message in shown)


def test_a_pipelined_handler_learns_when_a_request_arrives_behind_it(run):
    """REQUEST_BEHIND: a handler's future is resolved when the connection's next request is
    read (a long poll then answers early, since answers leave in request order), not before;
    the last request's stays open; sequential serving has none."""
    seen: dict[int, asyncio.Future[None] | None] = {}

    async def main() -> None:
        async def handler(frame: bytes) -> bytes:
            cid = struct.unpack_from(">i", frame, 4)[0]
            behind = REQUEST_BEHIND.get()
            seen[cid] = behind
            if cid == 0 and behind is not None:
                await asyncio.wait_for(asyncio.shield(behind), 5)  # a long poll that yields
            return echo_response(frame)

        server = await serve("127.0.0.1", 0, handler, pipeline_depth=4)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port_of(server))
            writer.write(frame_for(0, b"poll"))
            await writer.drain()
            await asyncio.sleep(0.2)
            assert 0 in seen and seen[0] is not None and not seen[0].done(), "resolved with nothing behind"
            writer.write(frame_for(1, b"next"))
            await writer.drain()
            got = []
            for _ in range(2):
                size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 2))[0]
                got.append(struct.unpack_from(">i", await reader.readexactly(size))[0])
            assert got == [0, 1]
            assert seen[0].done() and seen[1] is not None and not seen[1].done()
            writer.close()
        finally:
            await close_server(server)
        seen.clear()
        server = await serve("127.0.0.1", 0, handler)  # pipeline_depth 1
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port_of(server))
            writer.write(frame_for(5, b"alone"))
            await writer.drain()
            size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 2))[0]
            await reader.readexactly(size)
            assert seen == {5: None}
            writer.close()
        finally:
            await close_server(server)

    run(main())
