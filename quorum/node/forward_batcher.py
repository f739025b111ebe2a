"""`AlterConfigsBatcher`: concurrent config writes forwarded as one request.

A node that is not the active controller forwards each REST config write to it as an
IncrementalAlterConfigs request. Under many concurrent writers most of the forward's cost,
on both nodes, is per request (framing, the controller's request handling, one answer per
request), not per resource. IncrementalAlterConfigs carries any number of resources and the
controller decides each one alone: it validates each against the same image, answers each
with its own error code, and appends the records of all of them in one batch. So writes
that arrive while earlier forwards are in flight are sent together, as one request, when a
slot frees.

Invariants:
- at most `max_in_flight` forwarded requests at once; with a free slot a write is sent in
  the same loop turn it arrives (no linger: an idle node adds no delay);
- a merged request names each resource at most once (the controller would decide a repeated
  resource against the same image, and Kafka refuses repeats), holds writes of one
  `validate_only` value only, and at most `max_resources` resources; a write that does not
  fit waits for the next request;
- each caller gets the results for its own resources, in its own order, and the error of
  a request that failed as a whole; a caller's cancellation never cancels the shared
  request.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from quorum.controller.requests import (
    AlterConfigsResource,
    AlterConfigsResult,
    ConfigResourceType,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)

log = logging.getLogger(__name__)

# The forward of one request: its answer and whether an earlier attempt may have been delivered.
Forward = Callable[[IncrementalAlterConfigsRequest], Awaitable[tuple[IncrementalAlterConfigsResponse, bool]]]
ResourceKey = tuple[ConfigResourceType, str]
Outcome = tuple[IncrementalAlterConfigsResponse, bool]


def _key(resource: AlterConfigsResource) -> ResourceKey:
    return (resource.resource_type, resource.resource_name)


@dataclass(slots=True)
class _Write:
    request: IncrementalAlterConfigsRequest
    keys: tuple[ResourceKey, ...]
    future: asyncio.Future[Outcome]


class AlterConfigsBatcher:
    def __init__(self, forward: Forward, *, max_in_flight: int = 4, max_resources: int = 1000) -> None:
        self._forward = forward
        self.max_in_flight = max_in_flight
        self.max_resources = max_resources
        self._pending: list[_Write] = []
        self._in_flight = 0
        self._flush_scheduled = False
        self._tasks: set[asyncio.Task[None]] = set()
        self.requests_sent = 0  # forwarded requests, merged or not
        self.writes_sent = 0  # callers' writes they carried

    async def call(self, request: IncrementalAlterConfigsRequest) -> Outcome:
        """Forward `request` (alone or merged with concurrent writes); its own results."""
        keys = tuple(_key(r) for r in request.resources)
        loop = asyncio.get_running_loop()
        write = _Write(request, keys, loop.create_future())
        self._pending.append(write)
        if self._in_flight < self.max_in_flight and not self._flush_scheduled:
            # Writes arriving in this loop turn join the request sent at its end.
            self._flush_scheduled = True
            loop.call_soon(self._flush)
        return await write.future

    def _flush(self) -> None:
        self._flush_scheduled = False
        while self._pending and self._in_flight < self.max_in_flight:
            group = self._take_group()
            if not group:
                continue
            self._in_flight += 1
            task = asyncio.get_running_loop().create_task(self._send(group))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _take_group(self) -> list[_Write]:
        """The oldest pending writes that one request can carry (see the invariants). A write
        left behind holds back every later write to one of its resources, so that writes to
        one resource are sent in the order they came."""
        group: list[_Write] = []
        keys: set[ResourceKey] = set()
        held: set[ResourceKey] = set()  # the resources of the writes left behind
        left: list[_Write] = []
        for i, write in enumerate(self._pending):
            if write.future.done():  # its caller went away before it was sent
                continue
            solo = len(set(write.keys)) != len(write.keys)  # goes as its caller built it
            if not group:
                group.append(write)
                keys.update(write.keys)
                if solo:
                    left.extend(self._pending[i + 1 :])
                    break
                continue
            fits = (
                not solo
                and write.request.validate_only == group[0].request.validate_only
                and len(keys) + len(write.keys) <= self.max_resources
                and keys.isdisjoint(write.keys)
                and held.isdisjoint(write.keys)
            )
            if fits:
                group.append(write)
                keys.update(write.keys)
            else:
                left.append(write)
                held.update(write.keys)
        self._pending = left
        return group

    async def _send(self, group: list[_Write]) -> None:
        try:
            if len(group) == 1:
                request = group[0].request
            else:
                resources = tuple(r for w in group for r in w.request.resources)
                request = IncrementalAlterConfigsRequest(resources, validate_only=group[0].request.validate_only)
            self.requests_sent += 1
            self.writes_sent += len(group)
            try:
                response, maybe_delivered = await self._forward(request)
            except asyncio.CancelledError:
                for write in group:
                    write.future.cancel()
                raise
            except Exception as exc:  # noqa: BLE001 - every caller of the request gets its error
                for write in group:
                    if not write.future.done():
                        write.future.set_exception(exc)
                return
            if len(group) == 1:
                if not group[0].future.done():
                    group[0].future.set_result((response, maybe_delivered))
                return
            by_key: dict[ResourceKey, AlterConfigsResult] = {
                (r.resource_type, r.resource_name): r for r in response.resources
            }
            for write in group:
                if write.future.done():
                    continue
                mine = tuple(by_key[k] for k in write.keys if k in by_key)
                write.future.set_result((IncrementalAlterConfigsResponse(mine), maybe_delivered))
        finally:
            self._in_flight -= 1
            if self._pending and not self._flush_scheduled:
                self._flush_scheduled = True
                asyncio.get_running_loop().call_soon(self._flush)

    async def close(self) -> None:
        """Cancel the forwards in flight; their callers get CancelledError."""
        for write in self._pending:
            if not write.future.done():
                write.future.cancel()
        self._pending.clear()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(set(self._tasks))
