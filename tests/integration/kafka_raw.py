"""One Kafka request on a fresh connection, written and read by kio: for tests that must send
exactly the bytes a client would (error codes, versions, inter-broker requests) without a
client library in the way."""

from __future__ import annotations

import io
import socket
import struct
from typing import Any


def call(port: int, api_key: int, version: int, *, host: str = "127.0.0.1", timeout_s: float = 30.0,
         **fields: Any) -> Any:  # fmt: skip
    """Send one request (fields by kio's names) to `host:port` and return kio's response object."""
    from kio.index import load_request_schema, load_response_schema
    from kio.serial import entity_writer

    from broker.kafka.apis import is_flexible
    from broker.kafka.context import make
    from quorum.wire._reader import read_request_body

    body = io.BytesIO()
    req_cls = load_request_schema(api_key, version)
    entity_writer(req_cls)(body, make(req_cls, **fields))
    flexible = is_flexible(api_key, version)
    header = struct.pack(">hhih", api_key, version, 99, 4) + b"test" + (b"\x00" if flexible else b"")
    frame = header + body.getvalue()
    with socket.create_connection((host, port), timeout=timeout_s) as s:
        s.sendall(struct.pack(">i", len(frame)) + frame)
        size = struct.unpack(">i", recv_exact(s, 4))[0]
        data = recv_exact(s, size)
    assert struct.unpack(">i", data[:4])[0] == 99, "the answer carries another correlation id"
    # ApiVersions (18) answers with a v0 header even at flexible versions.
    return read_request_body(load_response_schema(api_key, version), data, 5 if flexible and api_key != 18 else 4)


def recv_exact(s: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = s.recv(n - len(out))
        assert chunk, "connection closed"
        out += chunk
    return bytes(out)
