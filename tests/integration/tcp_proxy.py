"""An asyncio TCP proxy in a background thread: an iptables-free network fault.

`ProxyGroup().add(target_port)` listens on a free loopback port and forwards each accepted
connection to 127.0.0.1:target_port. `cut(proxy)` stops the flow in both directions (like
an iptables DROP: bytes wait in the kernel buffers, connects are accepted and hang);
`heal(proxy)` lets them flow again, nothing lost. `break_response_to(proxy, api_key)` closes
the next connection that sends a Kafka request with that api key as soon as its answer
arrives, without relaying the answer (a connection broken after the server acted).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from quorum.node.free_ports import free_port

T = TypeVar("T")


class Proxy:
    def __init__(self, target_port: int, listen_port: int) -> None:
        self.target_port = target_port
        self.port = listen_port
        self.flowing = asyncio.Event()
        self.flowing.set()
        self.break_api_key: int | None = None
        self.broken = 0  # connections broken by break_response_to
        self.server: asyncio.Server | None = None
        self.writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._on_client, "127.0.0.1", self.port)

    async def _on_client(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        self.writers.add(c_writer)
        try:
            await self.flowing.wait()
            s_reader, s_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            c_writer.close()
            self.writers.discard(c_writer)
            return
        self.writers.add(s_writer)
        state = {"break": False}
        up = asyncio.ensure_future(self._pipe(c_reader, s_writer, state, upstream=True))
        down = asyncio.ensure_future(self._pipe(s_reader, c_writer, state, upstream=False))
        await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
        for task in (up, down):
            task.cancel()
        for w in (c_writer, s_writer):
            w.close()
            self.writers.discard(w)

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, state: dict[str, bool], *, upstream: bool
    ) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while True:
                await self.flowing.wait()
                data = await reader.read(65536)
                if not data:
                    return
                await self.flowing.wait()
                if upstream and self.break_api_key is not None and len(data) >= 6:
                    if int.from_bytes(data[4:6], "big") == self.break_api_key:
                        self.break_api_key = None
                        state["break"] = True
                if not upstream and state["break"]:
                    self.broken += 1
                    return  # drop the answer and close both sides
                writer.write(data)
                await writer.drain()

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for w in list(self.writers):
            w.close()


class ProxyGroup:
    """Proxies served by one event loop in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="tcp-proxy", daemon=True)
        self.thread.start()
        self.proxies: list[Proxy] = []

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    def add(self, target_port: int) -> Proxy:
        for _ in range(20):
            proxy = Proxy(target_port, free_port())
            try:
                self._run(self._make(proxy))
            except OSError:
                continue
            self.proxies.append(proxy)
            return proxy
        raise RuntimeError("no free port for a proxy")

    async def _make(self, proxy: Proxy) -> None:
        proxy.flowing = asyncio.Event()
        proxy.flowing.set()
        await proxy.start()

    def cut(self, proxy: Proxy) -> None:
        self.loop.call_soon_threadsafe(proxy.flowing.clear)

    def heal(self, proxy: Proxy) -> None:
        self.loop.call_soon_threadsafe(proxy.flowing.set)

    def break_response_to(self, proxy: Proxy, api_key: int) -> None:
        def arm() -> None:
            proxy.break_api_key = api_key

        self.loop.call_soon_threadsafe(arm)

    def close(self) -> None:
        async def close_all() -> None:
            for p in self.proxies:
                await p.close()

        with contextlib.suppress(Exception):
            self._run(close_all())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
