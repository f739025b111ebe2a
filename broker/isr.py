"""`IsrSender`: a partition leader asks the controller to change ISRs (AlterPartition).

The replica manager's `PartitionState`s decide which ISR each led partition should have
(a follower that has not caught up for `replica.lag.time.max.ms` leaves, one that reached
the high watermark joins; KIP-497's rules). This task collects every such proposal, sends
them in one AlterPartition, and marks them pending: while pending, the high watermark is
computed over the maximal ISR (current plus joining), and no second proposal is sent for
that partition. The controller's committed answer arrives as a metadata delta (the
partition's new ISR and partition epoch), which ends the pending state; an error answer
ends it too, and the next pass proposes again from fresh state.

It also reports RECOVERED for partitions led after an unclean election: the new leader's
log is the partition's truth once it leads, as in Kafka.

Runs after metadata changes and follower progress (`wake`), and every
`replica.lag.time.max.ms / 2` for shrinks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping

from broker.replica.manager import HostedPartition, ReplicaManager, now_ms
from quorum.controller.requests import AlterPartitionItem, AlterPartitionRequest, AlterPartitionResponse, IsrMember
from quorum.kafka_errors import ErrorCode
from quorum.metadata.image import BrokerRegistration, MetadataImage
from quorum.node.controller_client import ControllerClient, ControllerUnavailableError

log = logging.getLogger(__name__)

RECOVERED = 0


class IsrSender:
    def __init__(
        self,
        manager: ReplicaManager,
        client: ControllerClient,
        image: Callable[[], MetadataImage],
        broker_epoch: Callable[[], int],
        *,
        debounce_s: float = 0.02,
    ) -> None:
        self.manager = manager
        self.client = client
        self.image = image
        self.broker_epoch = broker_epoch
        self.debounce_s = debounce_s
        self._dirty = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def wake(self) -> None:
        self._dirty.set()

    def start(self) -> None:
        self._dirty.set()
        self._task = asyncio.create_task(self._run(), name=f"isr-sender-{self.manager.node_id}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    def pending_items(self) -> list[AlterPartitionItem]:
        image = self.image()
        me = image.cluster.brokers.get(self.manager.node_id)
        if me is None or me.fenced or me.epoch != self.broker_epoch():
            return []
        brokers = image.cluster.brokers
        items = []
        for hosted, isr in self.manager.isr_changes_wanted(now_ms()):
            if any(b not in hosted.state.isr and not self.manager.isr_eligible(b) for b in isr):
                # Kafka checks a joining replica against the metadata when it proposes (KIP-841):
                # a fenced or stopping broker would be refused (INELIGIBLE_REPLICA) at every pass,
                # and meanwhile the maximal ISR would hold the HW at its log end.
                continue
            reg = hosted.registration
            members = tuple(IsrMember(b, self._member_epoch(hosted, b, brokers)) for b in isr)
            items.append(
                AlterPartitionItem(
                    hosted.topic_id, hosted.partition, reg.leader_epoch, members, RECOVERED, reg.partition_epoch
                )
            )
            hosted.state.on_isr_sent(isr)
        # After an unclean election the new leader reports its log recovered.
        for hosted in self.manager.partitions.values():
            reg = hosted.registration
            if (
                hosted.state.is_leader
                and reg.leader_recovery_state != RECOVERED
                and not any(i.topic_id == hosted.topic_id and i.partition == hosted.partition for i in items)
            ):
                members = tuple(IsrMember(b, brokers[b].epoch if b in brokers else -1) for b in reg.isr)
                items.append(
                    AlterPartitionItem(
                        hosted.topic_id, hosted.partition, reg.leader_epoch, members, RECOVERED, reg.partition_epoch
                    )
                )
        return items

    def _member_epoch(self, hosted: HostedPartition, broker_id: int, brokers: Mapping[int, BrokerRegistration]) -> int:
        """The broker epoch to name an ISR member with (KIP-903): for a follower, the epoch of the
        incarnation whose fetches put it in sync (`FollowerView.broker_epoch`), so that the
        controller refuses the change if that broker has registered again since (and may have
        lost what it had fetched); for this broker and an unknown follower, the registered one."""
        view = hosted.state.follower(broker_id)
        if view is not None and view.broker_epoch >= 0:
            return view.broker_epoch
        reg = brokers.get(broker_id)
        return reg.epoch if reg is not None else -1

    async def _run(self) -> None:
        interval_s = max(self.manager.config.replica_lag_time_max_ms / 2000, 0.05)
        while True:
            # asyncio.timeout, not wait_for: 3.11's wait_for swallows a cancel that lands once the
            # event is set (a wake) and before this task resumes, and stop() then waits forever.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval_s):
                    await self._dirty.wait()
            await asyncio.sleep(self.debounce_s)
            self._dirty.clear()
            items = self.pending_items()
            if not items:
                continue
            request = AlterPartitionRequest(self.manager.node_id, self.broker_epoch(), tuple(items))
            try:
                response = await self.client.call(request, timeout_s=10.0)
            except ControllerUnavailableError as exc:
                log.info("broker %d: AlterPartition pending: %s", self.manager.node_id, exc)
                self._forget(items, None)
                self._dirty.set()
                continue
            assert isinstance(response, AlterPartitionResponse)
            failed = [r for r in response.partitions if r.error_code != 0]
            if response.error_code or failed:
                log.info(
                    "broker %d: AlterPartition errors: %s",
                    self.manager.node_id,
                    response.error_code or sorted({r.error_code for r in failed}),
                )
                codes = {(r.topic_id, r.partition): r.error_code for r in failed}
                by_code: dict[int, list[AlterPartitionItem]] = {}
                for item in items:
                    code = response.error_code or codes.get((item.topic_id, item.partition), 0)
                    if code:
                        by_code.setdefault(code, []).append(item)
                for code, forgotten in by_code.items():  # one pass over the partitions per code
                    self._forget(forgotten, code)
            else:
                log.info("broker %d: ISR changes committed for %d partitions", self.manager.node_id, len(items))

    def _forget(self, items: list[AlterPartitionItem], code: int | None) -> None:
        """The outcome of these items: an error code, or None when unknown (then resend)."""
        by_id = {(h.topic_id, h.partition): h for h in self.manager.partitions.values()}
        error = (
            None
            if code is None
            else ErrorCode(code)
            if code in ErrorCode._value2member_map_
            else ErrorCode.UNKNOWN_SERVER_ERROR
        )
        now = now_ms()
        for item in items:
            hosted = by_id.get((item.topic_id, item.partition))
            if hosted is not None:
                hosted.state.on_isr_failed(error)
                # A dropped expansion no longer holds the HW: no fetch may come to move it.
                self.manager.advance_high_watermark(hosted, now)
