"""`NodeContext`: what the REST API needs from the node it runs on.

Every controller and broker serves the REST API. Reads come from the node's
own metadata image; writes go to the active controller (over the Kafka
protocol from another node, or straight in on the active controller itself),
and return once committed *and* visible in this node's image, so that a read
from the same node right after a write sees it.
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
        """Run a write on the active controller; raises NotAvailableError."""
        ...

    async def describe_quorum(self) -> QuorumDescription:
        """The quorum leader's DescribeQuorum answer; raises NotAvailableError."""
        ...
