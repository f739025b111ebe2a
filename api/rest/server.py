"""Run the REST app with uvicorn inside the node's own asyncio loop.

``handle = await serve_rest(ctx, host, port)`` binds the listening socket itself (so a
port in use raises ``OSError`` here, instead of uvicorn's ``sys.exit`` inside a task),
starts ``uvicorn.Server.serve`` as a task of the running loop, waits until it accepts
connections and returns a `RestServer`; ``await handle.stop()`` shuts it down. uvicorn
is told not to install signal handlers: the node owns SIGINT/SIGTERM. Port 0 picks a
free port (see ``handle.port``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Generator

import uvicorn
from fastapi import FastAPI
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from api.context import NodeContext
from api.rest.app import create_app

log = logging.getLogger(__name__)

_START_TIMEOUT_S = 10.0
_GRACEFUL_SHUTDOWN_S = 5
# Confluent REST Proxy's idle.timeout.ms default: an idle connection, or one whose request
# head or body stalls, is closed after this long without a byte.
DEFAULT_IDLE_TIMEOUT_S = 30.0


class _TimedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol (the C HTTP/1.1 parser), plus: a connection that is not
    waiting for the app to answer (no request yet, a half-sent head, a stalled body, or
    between requests) and has received nothing for `idle_timeout_s` is closed. uvicorn alone
    closes only after a response (keep-alive) and never a connection that sends part of a
    request and stops."""

    idle_timeout_s = DEFAULT_IDLE_TIMEOUT_S

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._last_rx = self.loop.time()
        self._idle_timer: asyncio.TimerHandle | None = None
        self._arm_idle_timer(self.idle_timeout_s)

    def _arm_idle_timer(self, delay: float) -> None:
        self._idle_timer = self.loop.call_later(max(delay, 0.01), self._check_idle)

    def _check_idle(self) -> None:
        if self.transport.is_closing():
            return
        cycle = self.cycle
        # No request yet / between requests, or a request whose body is still arriving.
        waiting_for_client = cycle is None or cycle.response_complete or cycle.more_body
        quiet = self.loop.time() - self._last_rx
        if waiting_for_client and quiet >= self.idle_timeout_s:
            log.info("closing REST connection from %s: nothing received for %.1f s", self.client, quiet)
            self.transport.close()
            return
        self._arm_idle_timer(self.idle_timeout_s - quiet if waiting_for_client else self.idle_timeout_s)

    def data_received(self, data: bytes) -> None:
        self._last_rx = self.loop.time()
        super().data_received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        super().connection_lost(exc)


def _protocol_with_timeout(idle_timeout_s: float) -> type[HttpToolsProtocol]:
    return type("RestHttpProtocol", (_TimedHttpProtocol,), {"idle_timeout_s": idle_timeout_s})


class _EmbeddedServer(uvicorn.Server):
    """A uvicorn server that leaves the process's signal handlers alone."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET
    if host and host not in ("0.0.0.0", "localhost"):  # noqa: S104 - the caller's chosen address
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        if infos:
            family = infos[0][0]
    bind_host = host.strip("[]") if host else "0.0.0.0"  # noqa: S104 - "" means every interface
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((bind_host, port))
        sock.listen(128)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


class RestServer:
    """A running REST server: its bound address, and `stop()`."""

    def __init__(self, app: FastAPI, server: uvicorn.Server, sock: socket.socket, task: asyncio.Task[None]) -> None:
        self.app = app
        self.server = server
        self.task = task
        self._sock = sock
        address = sock.getsockname()
        self.host: str = address[0]
        self.port: int = address[1]

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def running(self) -> bool:
        return self.server.started and not self.task.done()

    async def stop(self, timeout_s: float = 10.0) -> None:
        """Stop accepting, let in-flight requests finish (bounded), wait for the task, then let
        the records producer deliver what it holds (bounded)."""
        self.server.should_exit = True
        try:
            async with asyncio.timeout(timeout_s):
                await asyncio.shield(self.task)
        except TimeoutError:
            self.server.force_exit = True
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        finally:
            self._sock.close()
            producer = getattr(self.app.state, "record_producer", None)
            if producer is not None:
                await producer.close()


async def _run(server: uvicorn.Server, sock: socket.socket) -> None:
    try:
        await server.serve(sockets=[sock])
    except SystemExit as exc:  # uvicorn exits on startup failure; never let that stop the node's loop
        log.error("REST server exited during startup (code %s)", exc.code)
    except Exception:
        log.exception("REST server failed")


async def serve_rest(
    ctx: NodeContext, host: str, port: int, *, idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S
) -> RestServer:
    """Start serving `create_app(ctx)` on host:port in the running loop; return the handle.

    Connections not waiting for an answer are closed after `idle_timeout_s` without a byte.
    """
    app = create_app(ctx)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        http=_protocol_with_timeout(idle_timeout_s),
        timeout_keep_alive=max(1, int(min(idle_timeout_s, 5))),
        loop="none",
        lifespan="off",
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=_GRACEFUL_SHUTDOWN_S,
    )
    server = _EmbeddedServer(config)
    sock = _bind(host, port)
    task = asyncio.get_running_loop().create_task(_run(server, sock), name=f"rest-server-{host}:{port}")
    handle = RestServer(app, server, sock, task)
    deadline = asyncio.get_running_loop().time() + _START_TIMEOUT_S
    while not server.started:
        if task.done() or asyncio.get_running_loop().time() > deadline:
            await handle.stop(timeout_s=1.0)
            raise RuntimeError(f"the REST server on {host}:{port} did not start")
        await asyncio.sleep(0.01)
    return handle
