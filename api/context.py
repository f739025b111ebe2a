"""`NodeContext`: what the REST API needs from the node it runs on.

Every controller and broker serves the REST API. Reads come from the node's
own metadata image; writes go to the active controller (over the Kafka
protocol from another node, or straight in on the active controller itself)
and return once committed. A read first settles: it waits until the node's
image holds every write answered on this node before the read began, so that a
read from the same node right after a write sees it (Raft's read-after-write,
paid by the reads that follow writes rather than by every write).
"""

from __future__ import annotations

from typing import Protocol

from quorum.controller.requests import AdminRequest, AdminResponse
from quorum.metadata.image import MetadataImage
from quorum.raft.describe import QuorumDescription


class NotAvailableError(Exception):
    """No active controller could be reached (or the quorum has no leader)."""


class NodeContext(Protocol):
    @property
    def node_id(self) -> int: ...

    @property
    def cluster_id(self) -> str: ...

    @property
    def roles(self) -> frozenset[str]:
        """{"controller"} or {"broker"} (or both)."""
        ...

    def image(self) -> MetadataImage:
        """The latest committed metadata image this node has applied."""
        ...

    def broker_defaults(self) -> dict[str, str]:
        """Broker-level config values that topic config defaults come from
        (e.g. log.retention.ms, min.insync.replicas, num.partitions)."""
        ...

    async def admin(self, request: AdminRequest) -> AdminResponse:
        """Run a write on the active controller; its answer once committed (this node's
        image may not hold it yet: see `settle`). Raises NotAvailableError."""
        ...

    async def settle(self) -> None:
        """Return once this node's image holds every write this node answered before the
        call (at once when there is none; without waiting further when no quorum leader
        answers)."""
        ...

    async def describe_quorum(self) -> QuorumDescription:
        """The quorum leader's DescribeQuorum answer; raises NotAvailableError."""
        ...
