"""A server connection (quorum.wire.transport) cuts the same frames from the byte stream
whatever their sizes and however the stream is split across reads: frames smaller than the
receive buffer, frames that make it grow, frames read into buffers of their own
(> _READ_CHUNK), the prefix or the body split anywhere, reading paused at the pipeline depth
or by the memory pool (depth 1 included: one request at a time), and the peer's end of stream
right after the last frame."""

from __future__ import annotations

import asyncio
import hashlib
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quorum.wire import ConnectionLimits, PeerClient, close_server, serve
from quorum.wire.transport import _READ_CHUNK, _SCRATCH_BYTES

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

# Sizes around every boundary of the reader, and anything up to two scratch buffers.
_EDGES = [0, 1, 3, 4, 5, _SCRATCH_BYTES - 5, _SCRATCH_BYTES - 4, _SCRATCH_BYTES, _SCRATCH_BYTES + 1,
          _READ_CHUNK - 1, _READ_CHUNK, _READ_CHUNK + 1, 3 * _READ_CHUNK + 7]  # fmt: skip
frame_sizes = st.lists(
    st.sampled_from(_EDGES) | st.integers(0, 2 * _SCRATCH_BYTES) | st.integers(_READ_CHUNK, 3 * _READ_CHUNK),
    min_size=1,
    max_size=10,
)
# Cut points of the concatenated stream: each chunk is one write (and often one read).
chunkings = st.lists(st.integers(1, 3 * _READ_CHUNK), min_size=0, max_size=25)


def _payload(i: int, size: int) -> bytes:
    return (bytes([i % 251]) * size)[:size]


async def _answer(frame: bytes) -> bytes:
    """The frame's length and digest."""
    assert isinstance(frame, (bytes, bytearray))
    body = struct.pack(">i", len(frame)) + hashlib.sha256(frame).digest()
    # Large frames stay in flight a while, so that with the small pool later ones wait for it.
    await asyncio.sleep(0.003 if len(frame) > _READ_CHUNK else 0)
    return struct.pack(">i", len(body)) + body


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow], deadline=None)
@given(sizes=frame_sizes, cuts=chunkings, depth=st.sampled_from([1, 2, 3, 64]), small_pool=st.booleans())
def test_frames_are_cut_the_same_from_any_chunking(run, sizes, cuts, depth, small_pool):
    frames = [_payload(i, n) for i, n in enumerate(sizes)]
    stream = b"".join(struct.pack(">i", len(f)) + f for f in frames)
    bounds = sorted({c % (len(stream) + 1) for c in cuts} | {0, len(stream)})
    chunks = [stream[a:b] for a, b in zip(bounds, bounds[1:], strict=False) if b > a]
    # A pool that holds one of the largest frames at a time: later ones wait for it (reading pauses).
    small = max(_EDGES)
    limits = ConnectionLimits(socket_request_max_bytes=small, queued_max_request_bytes=small) if small_pool else None

    async def main() -> None:
        server = await serve("127.0.0.1", 0, _answer, pipeline_depth=depth, limits=limits)
        try:
            port = server.sockets[0].getsockname()[1]
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            for chunk in chunks:
                writer.write(chunk)
                await writer.drain()
                await asyncio.sleep(0)
            writer.write_eof()
            got = []
            for _ in frames:
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                got.append(await reader.readexactly(size))
            assert await reader.read() == b""  # the server closes once every frame is answered
            writer.close()
            want = [struct.pack(">i", len(f)) + hashlib.sha256(f).digest() for f in frames]
            assert got == want
        finally:
            await close_server(server)

    run(main())


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow], deadline=None)
@given(sizes=frame_sizes, cuts=chunkings)
def test_a_peer_client_cuts_responses_the_same_from_any_chunking(run, sizes, cuts):
    """The client side (PeerClient): responses of every size, the stream split anywhere;
    each send gets its own response's body."""
    bodies = [struct.pack(">i", i) + _payload(i, n) for i, n in enumerate(sizes)]
    stream = b"".join(struct.pack(">i", len(b)) + b for b in bodies)
    bounds = sorted({c % (len(stream) + 1) for c in cuts} | {0, len(stream)})
    chunks = [stream[a:b] for a, b in zip(bounds, bounds[1:], strict=False) if b > a]

    async def main() -> None:
        asked = asyncio.Event()
        requests = 0

        async def peer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal requests
            while requests < len(bodies):
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                await reader.readexactly(size)
                requests += 1
            asked.set()
            for chunk in chunks:
                writer.write(chunk)
                await writer.drain()
                await asyncio.sleep(0)
            await reader.read()  # until the client closes
            writer.close()

        server = await asyncio.start_server(peer, "127.0.0.1", 0)
        client = PeerClient("127.0.0.1", server.sockets[0].getsockname()[1], request_timeout_s=30)
        try:
            sends = [asyncio.ensure_future(client.send(struct.pack(">ii", 4, i), i, 0, 0)) for i in range(len(bodies))]
            got = await asyncio.gather(*sends)
            assert asked.is_set()
            assert [bytes(g) for g in got] == bodies
        finally:
            await client.close()
            server.close()
            await server.wait_closed()

    run(main())
