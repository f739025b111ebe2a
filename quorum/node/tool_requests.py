"""How the command-line tools (`pykraft quorum ...`, `pykraft features ...`) ask the controllers
of `--bootstrap-controller`: one request to one address with a timeout, the first address that
answers a query, and a change sent until a controller answers it for good.

A tool sends one request per connection (correlation id 1) and never holds a connection open.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from quorum.wire import codec
from quorum.wire.transport import PeerUnavailable, request

T = TypeVar("T")

Address = tuple[str, int]  # (host, port)

# One try at a change waits this long (seconds) for its answer unless the change asks the leader
# for longer (AddRaftVoter's TimeoutMs), and never past the tool's --timeout-ms; after a retriable
# answer the tool waits RETRY_PAUSE_S before asking again.
MAX_TRY_S = 15.0
RETRY_PAUSE_S = 0.2

# What becomes of a request that got no decodable answer (the address is then skipped).
_UNANSWERED_ERRORS = (PeerUnavailable, codec.WireError, TimeoutError, OSError)


@dataclass(frozen=True, slots=True)
class Unanswered:
    """No decodable answer from one address; `reason` reads "host:port: why"."""

    reason: str


def parse_bootstrap(text: str) -> list[Address]:
    """`--bootstrap-controller host:port[,host:port...]` (an IPv6 host may be bracketed)."""
    out = []
    for item in text.split(","):
        host, _, port = item.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"bad --bootstrap-controller entry {item!r}: expected host:port")
        out.append((host.strip("[]"), int(port)))
    return out


async def ask(address: Address, frame: bytes, decode: Callable[[bytes], T], timeout_s: float) -> T | Unanswered:
    """Send `frame` (with its length prefix) to `address` and decode the answer (a frame
    without its length prefix) within `timeout_s`."""
    host, port = address
    try:
        async with asyncio.timeout(timeout_s):
            raw = await request(host, port, frame, request_timeout_s=timeout_s)
        return decode(raw)
    except _UNANSWERED_ERRORS as exc:
        return Unanswered(f"{host}:{port}: {exc or type(exc).__name__}")


async def ask_raft_api(
    address: Address, call: codec.Call, *, version: int, client_id: str, timeout_s: float
) -> Any | Unanswered:
    """One request of codec.py's apis (DescribeQuorum, ApiVersions) from a tool, which is no
    quorum member: no cluster id, no source or destination node."""
    frame = codec.encode_request(
        call,
        correlation_id=1,
        client_id=client_id,
        cluster_id=None,
        source_id=-1,
        destination_id=-1,
        api_version=version,
    )
    api_key = codec.api_key_of(call)
    return await ask(address, frame, lambda raw: codec.decode_response(api_key, version, raw)[1], timeout_s)


async def first_answer(addresses: Sequence[Address], query: Callable[[Address], Awaitable[T | None]]) -> T | None:
    """What `query` finds at the first address, in order, where it finds anything."""
    for address in addresses:
        found = await query(address)
        if found is not None:
            return found
    return None


def same_frame(frame: bytes) -> Callable[[float], tuple[bytes, float]]:
    """ask_until_final's `prepare` for a change sent as the same frame every time."""
    return lambda _remaining_s: (frame, MAX_TRY_S)


async def ask_until_final(
    addresses: Sequence[Address],
    prepare: Callable[[float], tuple[bytes, float]],
    decode: Callable[[bytes], T],
    *,
    timeout_s: float,
    retriable: Callable[[T], bool],
    describe: Callable[[T], str],
    gave_up: Callable[[str], Exception],
) -> T:
    """Send a change to the controllers in turn (any of them relays it to the leader) until
    one gives an answer that is not `retriable`, and return it. `prepare(seconds left)` gives
    each try's frame and how long (seconds) to wait for its answer. An address that does not
    answer is skipped; a retriable answer (the quorum is there but not ready) starts the round
    again from the first address after RETRY_PAUSE_S. After `timeout_s` raises
    gave_up("did not complete in T s: <the last answer or failure>")."""
    deadline = time.monotonic() + timeout_s
    last = "no controller answered"
    while True:
        for address in addresses:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise gave_up(f"did not complete in {timeout_s:g} s: {last}")
            frame, wait_s = prepare(remaining)
            outcome = await ask(address, frame, decode, min(remaining, wait_s))
            if isinstance(outcome, Unanswered):
                last = outcome.reason
                continue
            if not retriable(outcome):
                return outcome
            last = describe(outcome)
            break
        await asyncio.sleep(RETRY_PAUSE_S)
