"""`ControllerClient`: reach the active controller over the Kafka protocol.

The active controller is the Raft leader; every node (controllers and the
brokers that observe the metadata log) knows the leader's id from its own
RaftNode and the voters' addresses from `controller.quorum.voters`. A request
answered NOT_CONTROLLER, or one that cannot be sent, is retried (leadership
may be moving) until the deadline; a pending request is abandoned at the deadline
and resent as soon as another leader is known.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import fields, is_dataclass

from quorum.node.raft_node import RaftNode
from quorum.raft.errors import ErrorCode
from quorum.wire import admin_codec, codec
from quorum.wire.transport import PeerClient, PeerUnavailable

log = logging.getLogger(__name__)

LEADER_POLL_S = 0.05  # how often a pending request checks whether the leader moved


class ControllerUnavailableError(Exception):
    """No active controller answered before the deadline."""


def _has_error(value: object, code: int) -> bool:
    """Does any error_code field of a (nested) response equal `code`?"""
    if isinstance(value, tuple | list):
        return any(_has_error(v, code) for v in value)
    if is_dataclass(value) and not isinstance(value, type):
        for f in fields(value):
            item = getattr(value, f.name)
            if f.name == "error_code" and item == code:
                return True
            if isinstance(item, tuple | list) or (is_dataclass(item) and not isinstance(item, type)):
                if _has_error(item, code):
                    return True
    return False


class ControllerClient:
    def __init__(self, node: RaftNode, *, client_id: str, retry_backoff_ms: int = 50, connections: int = 8) -> None:
        self.node = node
        self.client_id = client_id
        self.retry_backoff_s = retry_backoff_ms / 1000
        # A controller handles up to CONTROLLER_PIPELINE_DEPTH requests per connection at once
        # (answered in order); a few connections spread the bytes and the head-of-line waits.
        self.connections = connections
        self._peers: dict[int, list[PeerClient]] = {}
        self._busy: dict[PeerClient, int] = {}
        # One more connection per controller for requests that are answered at once (the
        # read-your-writes DescribeQuorum): the controller answers a connection's requests
        # in order, so on a write connection such a request would wait for the commit of
        # every write sent before it.
        self._control: dict[int, PeerClient] = {}
        self._correlation = 0

    def _new_peer(self, node_id: int) -> PeerClient | None:
        address = self.node.voters.get(node_id)
        if address is None:
            return None
        return PeerClient(address.host, address.port, connect_timeout_s=2.0, request_timeout_s=30.0)

    def _peer(self, node_id: int) -> PeerClient | None:
        """The least busy connection to `node_id` (opened lazily, up to `connections`)."""
        pool = self._peers.setdefault(node_id, [])
        idle = [p for p in pool if self._busy.get(p, 0) == 0]
        if idle:
            return idle[0]
        if len(pool) < self.connections:
            peer = self._new_peer(node_id)
            if peer is not None:
                pool.append(peer)
            return peer
        return min(pool, key=lambda p: self._busy.get(p, 0))

    def _control_peer(self, node_id: int) -> PeerClient | None:
        peer = self._control.get(node_id)
        if peer is None:
            peer = self._new_peer(node_id)
            if peer is not None:
                self._control[node_id] = peer
        return peer

    async def send(
        self, node_id: int, frame: bytes, correlation_id: int, api_key: int, api_version: int, *, control: bool = False
    ) -> bytes | bytearray:
        """Send one framed request to `node_id`; its raw answer. Over a pooled write
        connection, or with `control` over the connection kept for requests the controller
        answers without waiting for a commit (never queued behind writes)."""
        peer = self._control_peer(node_id) if control else self._peer(node_id)
        if peer is None:
            raise PeerUnavailable(f"node {node_id} is not a controller")
        self._busy[peer] = self._busy.get(peer, 0) + 1
        try:
            return await peer.send(frame, correlation_id, api_key, api_version)
        finally:
            self._busy[peer] -= 1

    def next_correlation_id(self) -> int:
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        return self._correlation

    def leader_id(self) -> int:
        core = self.node.core
        return core.leader_id if core is not None else -1

    async def call(self, request: admin_codec.AdminCall, timeout_s: float = 30.0) -> admin_codec.AdminReply:
        """Send `request` to the active controller; its answer, within `timeout_s` (see `call_tracked`)."""
        reply, _ = await self.call_tracked(request, timeout_s)
        return reply

    async def call_tracked(
        self, request: admin_codec.AdminCall, timeout_s: float = 30.0
    ) -> tuple[admin_codec.AdminReply, bool]:
        """Send `request` to the active controller; (its answer, whether an earlier attempt
        may have been delivered), within `timeout_s`. When the second item is True the
        answer may be to a resend of a request that already took effect (e.g.
        TOPIC_ALREADY_EXISTS for the topic the first attempt created).

        Invariants: no attempt outlives the deadline (a request stuck on a hung or
        cut-off controller's connection is abandoned at it), and an attempt is abandoned
        and resent as soon as this node learns of another leader (Kafka's brokers resend
        to the controller the metadata names). Abandoned requests may still take effect
        on the old controller; the caller's request must tolerate a resend.
        """
        deadline = time.monotonic() + timeout_s
        last_error = "no quorum leader known"
        maybe_delivered = False  # an attempt was written and never answered
        while (remaining := deadline - time.monotonic()) > 0:
            leader = self.leader_id()
            if leader < 0 or leader not in self.node.voters:
                await asyncio.sleep(min(self.retry_backoff_s, remaining))
                continue
            correlation = self.next_correlation_id()
            frame, api_key, api_version = admin_codec.encode_admin_request(
                request, correlation_id=correlation, client_id=self.client_id
            )
            attempt = asyncio.ensure_future(self.send(leader, frame, correlation, api_key, api_version))
            try:
                raw = await self._await_attempt(attempt, leader, deadline)
                if raw is None:
                    maybe_delivered = True
                    last_error = f"controller {leader}: no answer before the deadline or a leader change"
                    continue
                response = admin_codec.decode_admin_response(api_key, api_version, raw, request)
            except (PeerUnavailable, codec.WireError, TimeoutError, OSError) as exc:
                maybe_delivered = True  # (conservative: a refused connect delivered nothing)
                last_error = f"controller {leader}: {exc}"
                await asyncio.sleep(min(self.retry_backoff_s, max(0.0, deadline - time.monotonic())))
                continue
            if _has_error(response, int(ErrorCode.NOT_CONTROLLER)):
                last_error = f"node {leader} is not the active controller"
                await asyncio.sleep(min(self.retry_backoff_s, max(0.0, deadline - time.monotonic())))
                continue
            return response, maybe_delivered
        raise ControllerUnavailableError(last_error)

    async def ask_leader(
        self, leader: int, frame: bytes, correlation_id: int, api_key: int, api_version: int, timeout_s: float
    ) -> bytes | bytearray | None:
        """Send one framed request to the quorum leader `leader` over the control connection;
        its raw answer, or None if none came within `timeout_s` or before this node learned of
        another leader (no resend: for requests whose answer is only worth having from that
        leader, and that the leader answers at once)."""
        attempt = asyncio.ensure_future(self.send(leader, frame, correlation_id, api_key, api_version, control=True))
        return await self._await_attempt(attempt, leader, time.monotonic() + timeout_s)

    async def _await_attempt(
        self, attempt: asyncio.Future[bytes | bytearray], leader: int, deadline: float
    ) -> bytes | bytearray | None:
        """The attempt's answer; None (the attempt cancelled) at the deadline or once this
        node knows a leader other than `leader`."""
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                done, _ = await asyncio.wait({attempt}, timeout=min(LEADER_POLL_S, remaining))
                if done:
                    return attempt.result()
                now_leader = self.leader_id()
                if now_leader >= 0 and now_leader != leader:
                    log.info("%s: controller %d replaced by %d; resending", self.client_id, leader, now_leader)
                    break
        finally:
            if not attempt.done():
                attempt.cancel()
                await asyncio.wait({attempt})  # its connection bookkeeping ends before we resend
        return None

    async def close(self) -> None:
        for pool in self._peers.values():
            for peer in pool:
                await peer.close()
        for peer in self._control.values():
            await peer.close()
        self._peers.clear()
        self._control.clear()
        self._busy.clear()
