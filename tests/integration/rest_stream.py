"""A full-duplex client of the streamed produce endpoint, for tests and the benchmark.

`stream_records(url, records)` opens one HTTP/1.1 connection, sends the records as one
chunked request body (concatenated JSON, several records per chunk) from a thread, and
reads the chunked answer on the calling thread at the same time, as a streaming client
must (the server holds a bounded number of records waiting for their reports). It returns
the reports in order and the seconds from the first byte sent to the last report read.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any
from urllib.parse import urlsplit

import h11


def encode_records(records: Iterable[dict[str, Any]], per_chunk: int = 64) -> Iterator[bytes]:
    """The records as concatenated JSON, `per_chunk` to a chunk."""
    batch: list[str] = []
    for record in records:
        batch.append(json.dumps(record, separators=(",", ":")))
        if len(batch) >= per_chunk:
            yield "".join(batch).encode()
            batch.clear()
    if batch:
        yield "".join(batch).encode()


def stream_records(
    url: str, chunks: Iterable[bytes], *, timeout: float = 120.0
) -> tuple[int, list[dict[str, Any]], float]:
    """POST the chunks to `url` as one chunked body; (status, reports, seconds)."""
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    head = (
        f"POST {target} HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    ).encode()
    send_error: list[BaseException] = []

    def sender() -> None:
        try:
            sock.sendall(head)
            for chunk in chunks:
                if chunk:
                    sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            sock.sendall(b"0\r\n\r\n")
        except OSError as exc:  # the server may answer and close early on a bad body
            send_error.append(exc)

    started = time.perf_counter()
    thread = threading.Thread(target=sender, daemon=True)
    thread.start()
    conn = h11.Connection(h11.CLIENT)
    # h11 tracks our side too: tell it a request went out (the thread writes the bytes).
    conn.send(
        h11.Request(method="POST", target=target, headers=[("Host", parts.netloc), ("Transfer-Encoding", "chunked")])
    )
    status = 0
    decoder = json.JSONDecoder()
    text = ""
    reports: list[dict[str, Any]] = []
    try:
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = sock.recv(1 << 20)
                conn.receive_data(data)
                continue
            if isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.Data):
                text += bytes(event.data).decode()
                pos = 0
                while True:
                    while pos < len(text) and text[pos] in " \t\r\n":
                        pos += 1
                    if pos == len(text):
                        break
                    try:
                        value, pos = decoder.raw_decode(text, pos)
                    except json.JSONDecodeError:
                        break
                    reports.append(value)
                text = text[pos:]
            elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                break
    finally:
        elapsed = time.perf_counter() - started
        sock.close()
        thread.join(timeout=5)
    if text.strip():
        reports.append(json.loads(text))
    return status, reports, elapsed
