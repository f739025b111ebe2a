"""`SplicedResponse`: a response frame made of encoded bytes and segment file ranges.

A Fetch answer's header and per-partition fields are encoded in Python; its records are
`FileRange`s of segment files, sent from the file to the socket with `os.sendfile`, so no
byte of a record batch passes through a Python object (Kafka's zero-copy `FileRecords`),
except small ranges (<= `INLINE_RANGE_BYTES`): there a `pread` and one joined write cost
less than a `sendfile` call and a TCP segment each.

Sending (the transport calls `send` where it would write a bytes response; answers of a
connection are written one after the other, so nothing else writes to the socket meanwhile):
- a small frame of small ranges is read whole by the fetch handler (`inlined`) and goes
  out as any byte answer;
- encoded parts go through the stream writer (`transport.write`), joined with the small
  ranges around them (up to `INLINE_RANGE_BYTES` each, read with pread when sent) into one
  write: an answer of many small batches (a round of transaction markers: one control
  batch of 78 bytes per partition) is one send and one TCP segment, not one write per
  encoded part and one sendfile per range, each its own segment on a TCP_NODELAY socket
  and its own wake-up of the receiver. A small range read this way must be `intact`
  after the read and as long as it was made, else the connection closes (as below);
- a range is sent with `os.sendfile` on the transport's socket once the transport's
  buffer is empty (every byte written before it is then in the kernel, so the order
  holds); when the socket is full (EAGAIN) the sender waits until it is writable (a
  duplicate of the socket's descriptor is watched: the loop lets only the transport watch
  the original), then goes on. The same on asyncio's loop and uvloop (the brokers');
- at most `_CHUNK` bytes per call, and before each call the range must still be `intact`:
  a segment truncated under a response (a follower cutting a diverged tail) or a file
  that shrank (sendfile reaches its end early) closes the connection: the client sees a
  cut frame, reconnects and fetches again (Kafka: `FileRecords.writeTo` throws). A deleted
  segment's bytes stay readable: the range holds its descriptor (broker.log.file_range).

The Kafka listener is plaintext (no TLS here), so the socket is the raw TCP socket.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Final

from mypy_extensions import mypyc_attr

from broker.log.file_range import FileRange

__all__ = ["SplicedResponse", "TruncatedRange"]

log = logging.getLogger(__name__)

# Bytes sent per sendfile call: the truncation check runs between calls (bytes).
_CHUNK: Final = 4 * 1024 * 1024
# Ranges up to this size are read and joined with the encoded parts around them (bytes):
# copying them costs less than a sendfile call and a TCP segment of their own.
INLINE_RANGE_BYTES: Final = 16 * 1024
# A frame up to this size whose ranges are all small is read whole by its handler (`inlined`):
# the transport writes it as any byte answer, with no writer task (bytes).
INLINE_FRAME_BYTES: Final = 64 * 1024


# mypyc cannot compile a subclass of ConnectionError as a native class: a Python class in both builds.
@mypyc_attr(native_class=False)
class TruncatedRange(ConnectionError):
    """A file range's segment was truncated or shrank before all of it was sent."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        log.info("closing a connection in the middle of a fetch answer: %s", message)


class SplicedResponse:
    """One response frame: `parts` in order, the first starting with the frame's 4-byte
    length prefix (which counts every part's bytes)."""

    __slots__ = ("parts", "size")

    def __init__(self, parts: list[bytearray | FileRange]) -> None:
        self.parts = parts
        self.size = sum(len(p) for p in parts)  # bytes on the wire, prefix included

    def __len__(self) -> int:
        return self.size

    async def send(self, writer: asyncio.StreamWriter) -> None:
        joined: list[bytes | bytearray] = []  # written as one, before the next large range
        for part in self.parts:
            if isinstance(part, FileRange):
                if part.length <= INLINE_RANGE_BYTES:
                    joined.append(_read_small(part))
                    continue
                if joined:
                    writer.write(b"".join(joined))
                    joined.clear()
                await _send_range(writer, part)
            elif part:
                joined.append(part)
        if joined:
            writer.write(b"".join(joined))

    def inlined(self) -> bytes | None:
        """The frame's bytes, its ranges read now, when it holds at most `INLINE_FRAME_BYTES`
        and each range at most `INLINE_RANGE_BYTES` (a follower's answer of a marker round);
        None for any other frame (it sends itself). TruncatedRange as in `send`."""
        if self.size > INLINE_FRAME_BYTES:
            return None
        joined: list[bytes | bytearray] = []
        for part in self.parts:
            if isinstance(part, FileRange):
                if part.length > INLINE_RANGE_BYTES:
                    return None
                joined.append(_read_small(part))
            else:
                joined.append(part)
        return b"".join(joined)

    def to_bytes(self) -> bytes:
        """The frame's bytes (tests; the cost `send` avoids)."""
        out = bytearray()
        for part in self.parts:
            if isinstance(part, FileRange):
                data = part.pread()
                if len(data) != part.length or not part.intact:
                    raise TruncatedRange(f"{part} shrank")
                out += data
            else:
                out += part
        return bytes(out)


def _read_small(part: FileRange) -> bytes:
    """A small range's bytes, read now; TruncatedRange if its file shrank or was truncated
    since the range was made (the bytes may then be others than the range's)."""
    data = part.pread()
    if len(data) != part.length or not part.intact:
        raise TruncatedRange(f"{part}: its segment was truncated before it was sent")
    return data


async def _send_range(writer: asyncio.StreamWriter, part: FileRange) -> None:
    transport = writer.transport
    sock_fd = transport.get_extra_info("socket").fileno()
    position = part.position
    remaining = part.length
    while remaining > 0:
        if transport.is_closing():
            raise ConnectionResetError("the connection closed while a fetch answer was being sent")
        if transport.get_write_buffer_size():
            await _drained(writer)
            continue
        if not part.intact:
            raise TruncatedRange(f"{part}: its segment was truncated with {remaining} bytes unsent")
        try:
            sent = os.sendfile(sock_fd, part.fd, position, min(remaining, _CHUNK))
        except (BlockingIOError, InterruptedError):
            await _writable(sock_fd)
            continue
        if sent == 0:
            raise TruncatedRange(f"{part}: the file ends with {remaining} bytes unsent")
        position += sent
        remaining -= sent


async def _drained(writer: asyncio.StreamWriter) -> None:
    """Until the transport's buffer is empty (not only below its high-water mark)."""
    transport = writer.transport
    low, high = transport.get_write_buffer_limits()
    transport.set_write_buffer_limits(high=0, low=0)
    try:
        await writer.drain()
    finally:
        if not transport.is_closing():
            transport.set_write_buffer_limits(high=high, low=low)


async def _writable(sock_fd: int) -> None:
    """Until the socket accepts more bytes. The transport owns `sock_fd` in the loop (the
    loops refuse a second watcher on it), so a duplicate descriptor is watched instead."""
    loop = asyncio.get_running_loop()
    watched = os.dup(sock_fd)
    ready: asyncio.Future[None] = loop.create_future()

    def on_writable() -> None:
        if not ready.done():
            ready.set_result(None)

    try:
        loop.add_writer(watched, on_writable)
        await ready
    finally:
        loop.remove_writer(watched)
        os.close(watched)
