"""One `PeerClient` per broker for the coordinator's inter-broker requests (markers to the
partition leaders, verification to the coordinators), reconnected to the broker's current
inter-broker endpoint when the metadata moves it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from quorum.wire.transport import PeerClient

__all__ = ["PeerPool"]


class PeerPool:
    def __init__(self, endpoint: Callable[[int], tuple[str, int] | None], *, request_timeout_s: float = 30.0) -> None:
        self.endpoint = endpoint
        self.request_timeout_s = request_timeout_s
        self._peers: dict[int, tuple[tuple[str, int], PeerClient]] = {}

    def peer(self, broker: int) -> PeerClient | None:
        """The client for `broker` (None: it has no inter-broker endpoint in the metadata)."""
        address = self.endpoint(broker)
        if address is None:
            return None
        known = self._peers.get(broker)
        if known is not None and known[0] == address:
            return known[1]
        if known is not None:
            asyncio.ensure_future(known[1].close())
        peer = PeerClient(address[0], address[1], connect_timeout_s=2.0, request_timeout_s=self.request_timeout_s)
        self._peers[broker] = (address, peer)
        return peer

    async def close(self) -> None:
        for _address, peer in self._peers.values():
            await peer.close()
        self._peers.clear()
