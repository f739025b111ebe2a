"""Produce copies (issue 22, item 3): a large request frame reaches its handler as the one
buffer the transport filled (writable, not copied again into bytes), and the leader's
offset assignment patches the batches in that buffer instead of copying them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from kafka.record.default_records import DefaultRecordBatchBuilder

from broker.log import LogConfig
from broker.log.validation import assign
from quorum.storage.record_batch import scan_frames
from quorum.wire.transport import close_server, serve

Run = Callable[[Coroutine[Any, Any, Any]], Any]
NOW = 1_700_000_000_000


def batch(n: int, size: int) -> bytes:
    b = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, batch_size=1 << 24)
    for i in range(n):
        b.append(i, timestamp=NOW + i, key=None, value=b"x" * size, headers=[])
    return bytes(b.build())


def test_assignment_patches_a_writable_request_in_place() -> None:
    frame = bytearray(b"head" + batch(3, 100) + batch(2, 50))
    records = memoryview(frame)[4:]
    a = assign(records, LogConfig(), next_offset=1000, leader_epoch=7, now_ms=NOW)
    assert isinstance(a.data, memoryview) and a.data.obj is frame  # no copy
    frames = scan_frames(bytes(frame[4:])).frames  # the CRCs still hold
    assert [(f.base_offset, f.leader_epoch) for f in frames] == [(1000, 7), (1003, 7)]
    # A read-only request (bytes) is copied once and left as it was.
    raw = batch(3, 100)
    b = assign(raw, LogConfig(), next_offset=5, leader_epoch=1, now_ms=NOW)
    assert isinstance(b.data, bytearray) and scan_frames(raw).frames[0].base_offset == 0
    assert scan_frames(b.data).frames[0].base_offset == 5


def test_a_large_frame_reaches_its_handler_as_the_buffer_read_from_the_socket(run: Run) -> None:
    seen: list[Any] = []

    async def handler(frame: bytes) -> bytes:
        seen.append(frame)
        return len(frame).to_bytes(4, "big") + b"\0" * len(frame)

    async def go() -> None:
        server = await serve("127.0.0.1", 0, handler)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for size in (1000, 3 * 1024 * 1024 + 17):
            body = bytes(range(256)) * (size // 256) + b"z" * (size % 256)
            writer.write(size.to_bytes(4, "big") + body)
            await writer.drain()
            got = await reader.readexactly(4 + size)
            assert len(got) == 4 + size
            assert seen[-1] == body
        writer.close()
        await close_server(server)

    run(go())
    small, large = seen
    assert isinstance(small, bytes)
    assert type(large) is bytearray  # one buffer, filled in place, handed over without a copy
