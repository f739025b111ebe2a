"""`IsrExpander`: a partition leader asks the controller to take caught-up replicas back.

In Kafka the leader of a partition adds a follower to the ISR (AlterPartition)
once the follower's fetch position has reached the leader's log end, and
reports RECOVERED after an unclean election once its log is recovered. pykraft
brokers do not host partition data yet: every replica's log is empty, so a
follower has reached the leader's log end (0) as soon as it is a live member
of the cluster (registered, unfenced, not shutting down), and a leader has
nothing to recover. When partition logs land, `caught_up` becomes the
follower's fetch offset against the high watermark and nothing else changes.

It runs after each metadata update that touches this broker's partitions or
the brokers, sends one AlterPartition for all partitions that need it, and
lets the controller's answer (committed to the log) be the only source of truth.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from quorum.controller.requests import AlterPartitionItem, AlterPartitionRequest, AlterPartitionResponse, IsrMember
from quorum.metadata.delta import MetadataDelta
from quorum.metadata.image import MetadataImage
from quorum.node.controller_client import ControllerClient, ControllerUnavailableError

log = logging.getLogger(__name__)

RECOVERED = 0


class IsrExpander:
    def __init__(
        self,
        broker_id: int,
        client: ControllerClient,
        image: Callable[[], MetadataImage],
        broker_epoch: Callable[[], int],
        *,
        debounce_s: float = 0.05,
    ) -> None:
        self.broker_id = broker_id
        self.client = client
        self.image = image
        self.broker_epoch = broker_epoch
        self.debounce_s = debounce_s
        self._dirty = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def on_metadata(self, delta: MetadataDelta | None, image: MetadataImage) -> None:
        """Metadata listener: something that may need an ISR change was applied."""
        if delta is None or delta.changed_brokers or delta.changed_topics:
            self._dirty.set()

    def start(self) -> None:
        self._dirty.set()
        self._task = asyncio.create_task(self._run(), name=f"isr-expander-{self.broker_id}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):  # noqa: S110 - stopping anyway
                pass

    def caught_up(self, image: MetadataImage, replica: int) -> bool:
        b = image.cluster.brokers.get(replica)
        return b is not None and not b.fenced and not b.in_controlled_shutdown

    def pending(self, image: MetadataImage) -> list[AlterPartitionItem]:
        """The AlterPartition items this leader should send now."""
        me = image.cluster.brokers.get(self.broker_id)
        if me is None or me.fenced or me.in_controlled_shutdown or me.epoch != self.broker_epoch():
            return []
        brokers = image.cluster.brokers
        items = []
        for topic in image.topics.by_id.values():
            for partition_id, p in topic.partitions.items():
                if p.leader != self.broker_id:
                    continue
                if p.leader_recovery_state != RECOVERED:
                    # Nothing to recover in an empty log: report RECOVERED with the ISR as it is.
                    isr = p.isr
                else:
                    joining = [r for r in p.replicas if r not in p.isr and self.caught_up(image, r)]
                    if not joining:
                        continue
                    isr = (*p.isr, *joining)
                members = tuple(IsrMember(b, brokers[b].epoch if b in brokers else -1) for b in isr)
                items.append(
                    AlterPartitionItem(topic.id, partition_id, p.leader_epoch, members, RECOVERED, p.partition_epoch)
                )
        return items

    async def _run(self) -> None:
        while True:
            await self._dirty.wait()
            await asyncio.sleep(self.debounce_s)
            self._dirty.clear()
            items = self.pending(self.image())
            if not items:
                continue
            request = AlterPartitionRequest(self.broker_id, self.broker_epoch(), tuple(items))
            try:
                response = await self.client.call(request, timeout_s=10.0)
            except ControllerUnavailableError as exc:
                log.info("broker %d: AlterPartition pending: %s", self.broker_id, exc)
                self._dirty.set()
                continue
            assert isinstance(response, AlterPartitionResponse)
            failed = [r for r in response.partitions if r.error_code != 0]
            if response.error_code or failed:
                # Stale epochs resolve themselves once the newer metadata arrives (which sets dirty).
                log.info(
                    "broker %d: AlterPartition errors: %s",
                    self.broker_id,
                    response.error_code or sorted({r.error_code for r in failed}),
                )
            else:
                log.info("broker %d: ISR expanded for %d partitions", self.broker_id, len(items))
