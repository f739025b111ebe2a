#!/usr/bin/env python
"""pykraft's quorum next to etcd and ZooKeeper, measured the same way in one run (issue 24).

    python tests/perf/bench_peers.py [--kills 20] [--seconds 5] [--quick] [--only pykraft,etcd,zookeeper]
                                     [--json-out FILE] [--keep]

Starts, on this machine, a 3-member etcd (Debian's `etcd-server`), a 3-server ZooKeeper
(Debian's `zookeeper`) and a 3-controller pykraft quorum (+ one broker, which only hosts
the topics whose configs the clients write), each with fsync on (etcd's WAL always fsyncs;
ZooKeeper's forceSync=yes is its default; pykraft's voters fsync), one system at a time,
and measures each alike from this process (asyncio clients, one connection per client,
each waiting for its answer before the next write):

1. sequential writes/s and p50/p99 latency from one client connected to the leader;
2. writes/s from 16 and from 64 concurrent clients connected to the leader (client i
   writes its own key: etcd puts `peer-i`, ZooKeeper sets `/peer-i`, pykraft
   IncrementalAlterConfigs SET retention.ms of topic `peer-i` on the active controller);
3. failover after kill -9 of the leader, at each system's default timeouts and at matched
   detection timeouts (a silent leader noticed after 300 ms, elections of 150-300 ms):
   from the kill (just before os.kill) to the first write acknowledged through a
   survivor (one prober per survivor, writing until one succeeds), --kills times each;
   the killed member is restarted and the ensemble healthy again before the next kill.

Peers are installed by this script's set-up with apt-get (as root) when their binaries are
missing; a peer whose package cannot be installed is skipped with the reason. Every process
it starts is stopped by pid. Not a pytest module (tests/perf/conftest.py keeps pytest away).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import datetime as dt
import json
import os
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench_common import proc_cpu_s, stop_proc  # noqa: E402

from quorum.controller.requests import (  # noqa: E402
    AlterConfigOp,
    AlterConfigOpType,
    AlterConfigsResource,
    ConfigResourceType,
    CreatableTopic,
    CreateTopicsRequest,
    CreateTopicsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from quorum.node.cluster import NodePlan, free_cluster_base, plan_cluster, start_node  # noqa: E402
from quorum.node.free_ports import free_port  # noqa: E402
from quorum.node.meta_properties import random_uuid  # noqa: E402
from quorum.node.quorum_cli import query_leader  # noqa: E402
from quorum.wire import admin_codec  # noqa: E402
from quorum.wire.transport import PeerClient  # noqa: E402

T = TypeVar("T")

MEMBERS = 3
TOPIC_ALREADY_EXISTS = 36
CONCURRENCY = (16, 64)
PROBE_EVERY_S = 0.005  # a new write attempt per survivor this often during a failover
# How long one attempt may wait for its answer. An etcd follower without a leader holds a put
# until its request timeout (about 5 s) and then fails it: only puts sent after the election
# succeed, so attempts must keep starting while older ones wait.
PROBE_TIMEOUT_S = 1.0
ZK_CLASSPATH = "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar"

# Targets (issue 24): at each timing, pykraft's median and max failover below both peers';
# pykraft's writes/s at 64 clients at least twice etcd's.
TARGET_WRITES_64_VS_ETCD = 2.0


@dataclass(frozen=True, slots=True)
class Timing:
    """One detection setting for all three systems."""

    name: str
    pykraft: dict[str, str]  # controller.quorum.* properties
    etcd: dict[str, int]  # heartbeat-interval, election-timeout (ms)
    zookeeper: dict[str, int]  # tickTime (ms), initLimit, syncLimit (ticks)

    def describe(self, system: str) -> str:
        if system == "pykraft":
            p = self.pykraft
            election, fetch = p["controller.quorum.election.timeout.ms"], p["controller.quorum.fetch.timeout.ms"]
            return f"election {election} / fetch {fetch} ms"
        if system == "etcd":
            return f"heartbeat {self.etcd['heartbeat-interval']} / election {self.etcd['election-timeout']} ms"
        z = self.zookeeper
        return f"tickTime {z['tickTime']} ms, syncLimit {z['syncLimit']} (x tick), initLimit {z['initLimit']}"


DEFAULTS = Timing(
    "defaults",
    {"controller.quorum.election.timeout.ms": "1000", "controller.quorum.fetch.timeout.ms": "2000"},
    {"heartbeat-interval": 100, "election-timeout": 1000},
    {"tickTime": 2000, "initLimit": 10, "syncLimit": 5},
)
# A silent leader is noticed after 300 ms by all three (pykraft's fetch timeout, etcd's election
# timeout, ZooKeeper's syncLimit x tickTime); elections time out after 150-300 ms.
MATCHED = Timing(
    "matched",
    {"controller.quorum.election.timeout.ms": "150", "controller.quorum.fetch.timeout.ms": "300"},
    {"heartbeat-interval": 50, "election-timeout": 300},
    {"tickTime": 150, "initLimit": 20, "syncLimit": 2},
)

_STARTED: list[subprocess.Popen[bytes]] = []


# ----------------------------------------------------------------------------- set-up


_APT_UPDATED = False


def ensure_package(binary: str, package: str) -> str | None:
    """Install `package` with apt-get if `binary` is missing. Returns None when it is there,
    else why it cannot be (the peer is then skipped)."""
    global _APT_UPDATED
    if Path(binary).exists() or shutil.which(binary):
        return None
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return f"{binary} missing, and apt-get cannot install {package} here (not root or no apt-get)"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    print(f"  installing {package} with apt-get ...", flush=True)
    if not _APT_UPDATED:
        subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True, check=False)
        _APT_UPDATED = True
    r = subprocess.run(["apt-get", "install", "-y", "-qq", package], env=env, capture_output=True, text=True)
    if r.returncode != 0 or not (Path(binary).exists() or shutil.which(binary)):
        return f"apt-get install {package} failed (exit {r.returncode}): {(r.stderr or r.stdout).strip()[-300:]}"
    return None


def launch(cmd: list[str], log_file: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    _STARTED.append(proc)
    return proc


def stop_all_started() -> None:
    for proc in _STARTED:
        stop_proc(proc)


def free_ports(n: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < n:
        p = free_port()
        if p not in ports:
            ports.append(p)
    return ports


async def wait_for(what: str, check: Callable[[], Awaitable[bool]], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if await check():
                return
        await asyncio.sleep(0.05)
    raise RuntimeError(f"timed out after {timeout_s:.0f} s waiting for {what}")


# ----------------------------------------------------------------------------- clients


class WriteFailed(Exception):
    """A write was refused or not acknowledged (no leader, not the leader, connection lost)."""


# The three systems' clients share one lean connection (`_Wire`): an asyncio.Protocol with one
# request in flight, the answer cut from the received bytes by a per-protocol function, one
# timer per connection for the timeouts (not one per request), and each write's request built
# from bytes prepared once per client. Only the answer's status is looked at (etcd: the HTTP
# status; ZooKeeper: the reply header's xid and err; pykraft: the correlation id and the
# resource's error code). A client that costs its process as little as possible per write for
# every system: with 2 cores shared by a quorum and this process, a costly client measures
# itself.

Cut = Callable[[bytearray], tuple[Any, int] | None]  # (answer, bytes used) once a whole answer is in


def cut_length_prefixed(buf: bytearray) -> tuple[bytes, int] | None:
    """A 4-byte big-endian length, then that many bytes (Kafka's and ZooKeeper's framing)."""
    if len(buf) < 4:
        return None
    end = 4 + int.from_bytes(buf[:4], "big")
    if len(buf) < end:
        return None
    return bytes(buf[4:end]), end


def cut_http(buf: bytearray) -> tuple[tuple[int, bytes], int] | None:
    """(status, body) of an HTTP/1.1 response with a Content-Length or a chunked body."""
    head_end = buf.find(b"\r\n\r\n")
    if head_end < 0:
        return None
    head = bytes(buf[:head_end]).lower()
    status = int(head[9:12])
    pos = head_end + 4
    at = head.find(b"\r\ncontent-length:")
    if at >= 0:
        line_end = head.find(b"\r\n", at + 2)
        size = int(head[at + 17 : line_end if line_end >= 0 else len(head)])
        if len(buf) < pos + size:
            return None
        return (status, bytes(buf[pos : pos + size])), pos + size
    body = b""  # chunked
    while True:
        line_end = buf.find(b"\r\n", pos)
        if line_end < 0:
            return None
        size = int(bytes(buf[pos:line_end]).split(b";")[0], 16)
        pos = line_end + 2
        if size == 0:
            if buf.find(b"\r\n", pos) < 0:
                return None
            return (status, body), buf.find(b"\r\n", pos) + 2  # no trailers from these servers
        if len(buf) < pos + size + 2:
            return None
        body += bytes(buf[pos : pos + size])
        pos += size + 2


class _Wire(asyncio.Protocol):
    """One connection with at most one request in flight (see the note above)."""

    def __init__(self, cut: Cut, timeout_s: float) -> None:
        self.cut = cut
        self.timeout_s = timeout_s
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None
        self.waiter: asyncio.Future[Any] | None = None
        self.deadline = 0.0
        self.timer: asyncio.TimerHandle | None = None
        self.lost: BaseException | None = None
        self.loop = asyncio.get_running_loop()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            got = self.cut(self.buf)
            if got is not None:
                answer, used = got
                del self.buf[:used]
                waiter.set_result(answer)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = exc or ConnectionResetError("connection closed")
        if self.timer is not None:
            self.timer.cancel()
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(self.lost)

    def _check(self) -> None:
        self.timer = None
        waiter = self.waiter
        if waiter is None or waiter.done():
            return
        if self.loop.time() >= self.deadline:
            waiter.set_exception(TimeoutError())
            self.close()
        else:
            self.timer = self.loop.call_at(self.deadline, self._check)

    def answer(self) -> asyncio.Future[Any]:
        """The next answer (perhaps already received)."""
        if self.lost is not None:
            raise self.lost
        waiter = self.waiter = self.loop.create_future()
        got = self.cut(self.buf)
        if got is not None:
            del self.buf[: got[1]]
            waiter.set_result(got[0])
            return waiter
        self.deadline = self.loop.time() + self.timeout_s
        if self.timer is None:
            self.timer = self.loop.call_at(self.deadline, self._check)
        return waiter

    def request(self, data: bytes) -> asyncio.Future[Any]:
        if self.lost is not None:
            raise self.lost
        assert self.transport is not None
        self.transport.write(data)
        return self.answer()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


async def open_wire(port: int, cut: Cut, timeout_s: float) -> _Wire:
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(timeout_s):
        _, wire = await loop.create_connection(lambda: _Wire(cut, timeout_s), "127.0.0.1", port)
    return wire


class Client:
    async def write(self, value: int) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError


class EtcdClient(Client):
    """etcd's v3 JSON gateway (POST /v3/kv/put) over one HTTP/1.1 keep-alive connection."""

    def __init__(self, port: int, key: str, timeout_s: float) -> None:
        self.port, self.timeout_s = port, timeout_s
        self.key = base64.b64encode(key.encode()).decode()
        self._wire: _Wire | None = None
        self._head = f"Host: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nContent-Length: "
        self._put_body = '{"key": "' + self.key + '", "value": "'

    async def _call(self, path: str, body: str) -> bytes:
        try:
            if self._wire is None:
                self._wire = await open_wire(self.port, cut_http, self.timeout_s)
            data = f"POST {path} HTTP/1.1\r\n{self._head}{len(body)}\r\n\r\n{body}".encode()
            status, payload = await self._wire.request(data)
        except (OSError, TimeoutError) as exc:
            await self.close()
            raise WriteFailed(f"etcd: {exc!r}") from exc
        if status != 200:
            raise WriteFailed(f"etcd {status}: {payload[:200]!r}")
        return bytes(payload)

    async def write(self, value: int) -> None:
        await self._call("/v3/kv/put", self._put_body + base64.b64encode(str(value).encode()).decode() + '"}')

    async def status(self) -> dict[str, Any]:
        answer = json.loads(await self._call("/v3/maintenance/status", "{}") or b"{}")
        assert isinstance(answer, dict)
        return answer

    async def close(self) -> None:
        wire, self._wire = self._wire, None
        if wire is not None:
            wire.close()


def _zk_string(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">i", len(b)) + b


def _zk_buffer(b: bytes) -> bytes:
    return struct.pack(">i", len(b)) + b


_ZK_REPLY = struct.Struct(">iqi")


class ZooKeeperClient(Client):
    """ZooKeeper's client protocol (jute over TCP): a session, then create / setData."""

    CREATE, SET_DATA = 1, 5
    NODE_EXISTS = -110

    def __init__(self, port: int, path: str, timeout_s: float) -> None:
        self.port, self.timeout_s = port, timeout_s
        self.path = path
        self._wire: _Wire | None = None
        self._xid = 0

    @property
    def path(self) -> str:
        return self._path

    @path.setter
    def path(self, path: str) -> None:
        self._path = path
        self._path_bytes = _zk_string(path)

    async def _connection(self) -> _Wire:
        if self._wire is None:
            wire = await open_wire(self.port, cut_length_prefixed, self.timeout_s)
            # ConnectRequest: protocolVersion, lastZxidSeen, timeOut, sessionId, passwd, readOnly.
            body = struct.pack(">iqiq", 0, 0, 30_000, 0) + _zk_buffer(bytes(16)) + b"\x00"
            try:
                answer = await wire.request(struct.pack(">i", len(body)) + body)
            except BaseException:
                wire.close()
                raise
            (_version, _timeout, session) = struct.unpack(">iiq", answer[:16])
            if session == 0:
                wire.close()
                raise WriteFailed("zookeeper refused the session")
            self._wire = wire
        return self._wire

    async def _request(self, op: int, body: bytes) -> int:
        try:
            wire = await self._connection()
            self._xid += 1
            xid = self._xid
            answer = await wire.request(struct.pack(">iii", len(body) + 8, xid, op) + body)
            while True:
                got, _zxid, err = _ZK_REPLY.unpack_from(answer)
                if got == xid:
                    return int(err)
                answer = await wire.answer()
        except (OSError, EOFError, TimeoutError, struct.error) as exc:
            await self.close()
            raise WriteFailed(f"zookeeper: {exc!r}") from exc

    async def create(self) -> None:
        acl = struct.pack(">i", 1) + struct.pack(">i", 31) + _zk_string("world") + _zk_string("anyone")
        err = await self._request(self.CREATE, self._path_bytes + _zk_buffer(b"0") + acl + struct.pack(">i", 0))
        if err not in (0, self.NODE_EXISTS):
            raise WriteFailed(f"zookeeper create {self.path}: error {err}")

    async def write(self, value: int) -> None:
        data = str(value).encode()
        err = await self._request(self.SET_DATA, self._path_bytes + _zk_buffer(data) + b"\xff\xff\xff\xff")
        if err != 0:
            raise WriteFailed(f"zookeeper setData {self.path}: error {err}")

    async def close(self) -> None:
        wire, self._wire = self._wire, None
        if wire is not None:
            wire.close()


_MARK = "\x01" * 12  # stands for the value in the request template


class PykraftClient(Client):
    """IncrementalAlterConfigs (SET retention.ms of one topic) to a controller's listener."""

    def __init__(self, port: int, topic: str, timeout_s: float) -> None:
        self.port, self.topic, self.timeout_s = port, topic, timeout_s
        self.peer = PeerClient("127.0.0.1", port, connect_timeout_s=timeout_s, request_timeout_s=timeout_s)
        self._correlation = 0
        self._wire: _Wire | None = None
        # The request's bytes around the value (and its 1-byte compact length), from the codec once.
        frame, self._key, self._version = admin_codec.encode_admin_request(
            self._alter(_MARK), correlation_id=0, client_id="peers"
        )
        at = frame.index(_MARK.encode())
        assert frame[at - 1] == len(_MARK) + 1, "a compact string (flexible version) expected"
        self._head, self._tail = frame[4:8], frame[12 : at - 1]
        self._end = frame[at + len(_MARK) :]

    def _alter(self, value: str) -> IncrementalAlterConfigsRequest:
        op = AlterConfigOp("retention.ms", AlterConfigOpType.SET, value)
        return IncrementalAlterConfigsRequest((AlterConfigsResource(ConfigResourceType.TOPIC, self.topic, (op,)),))

    async def _send(self, req: Any) -> Any:
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        frame, key, version = admin_codec.encode_admin_request(req, correlation_id=self._correlation, client_id="peers")
        try:
            raw = await self.peer.send(frame, self._correlation, key, version)
        except Exception as exc:  # noqa: BLE001 - any transport failure is a failed write
            raise WriteFailed(f"pykraft: {exc!r}") from exc
        return admin_codec.decode_admin_response(key, version, raw, req)

    async def write(self, value: int) -> None:
        self._correlation = correlation = (self._correlation + 1) & 0x7FFFFFFF
        data = str(3_600_000 + value).encode()
        body = b"".join(
            (self._head, correlation.to_bytes(4, "big"), self._tail, bytes((len(data) + 1,)), data, self._end)
        )
        try:
            if self._wire is None:
                self._wire = await open_wire(self.port, cut_length_prefixed, self.timeout_s)
            raw = await self._wire.request(len(body).to_bytes(4, "big") + body)
        except (OSError, TimeoutError) as exc:
            await self.close()
            raise WriteFailed(f"pykraft: {exc!r}") from exc
        if raw[:4] != correlation.to_bytes(4, "big"):
            await self.close()
            raise WriteFailed("pykraft: an answer to another request")
        # Response header v1 (correlation id, no tagged fields), then throttle_time_ms, a
        # one-byte count of resources and the first resource's error code.
        if raw[4] != 0 or raw[9] != 2:
            resp = admin_codec.decode_admin_response(self._key, self._version, raw, self._alter(data.decode()))
            assert isinstance(resp, IncrementalAlterConfigsResponse)
            code = resp.resources[0].error_code if resp.resources else -1
        else:
            code = int.from_bytes(raw[10:12], "big", signed=True)
        if code:
            raise WriteFailed(f"pykraft IncrementalAlterConfigs: error {code}")

    async def create_topics(self, names: list[str]) -> None:
        req = CreateTopicsRequest(tuple(CreatableTopic(n, 1, 1) for n in names))
        resp = await self._send(req)
        assert isinstance(resp, CreateTopicsResponse)
        bad = [t for t in resp.topics if t.error_code not in (0, TOPIC_ALREADY_EXISTS)]
        if bad:
            raise WriteFailed(f"CreateTopics: {bad}")

    async def close(self) -> None:
        wire, self._wire = self._wire, None
        if wire is not None:
            wire.close()
        await self.peer.close()


# ----------------------------------------------------------------------------- systems


class System:
    """A 3-member replicated store: start, find the leader, kill and restart members, clients."""

    name = ""

    def __init__(self, root: Path, timing: Timing) -> None:
        self.root = root
        self.timing = timing
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def members(self) -> list[int]:
        return list(range(1, MEMBERS + 1))

    def start_member(self, member: int) -> None:
        raise NotImplementedError

    def start(self) -> None:
        for m in self.members:
            self.start_member(m)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            stop_proc(proc)

    def kill(self, member: int) -> None:
        os.kill(self.procs[member].pid, signal.SIGKILL)
        self.procs[member].wait(timeout=10)

    def check_alive(self) -> None:
        for m, proc in self.procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"{self.name} member {m} exited with {proc.returncode} (see {self.root})")

    async def leader(self) -> int | None:
        raise NotImplementedError

    async def healthy(self) -> bool:
        """Every member up and following one leader that commits."""
        raise NotImplementedError

    def client(self, member: int, index: int, timeout_s: float = 5.0) -> Client:
        raise NotImplementedError

    async def prepare(self, clients: int) -> None:
        """Create what the clients write to (etcd keys need nothing)."""

    async def set_observers(self, running: bool) -> bool:
        """Stop or restart the processes that follow the log without being members (pykraft's
        broker); False when the system has none (etcd and ZooKeeper as measured here)."""
        return False

    async def wait_ready(self, timeout_s: float = 90.0) -> int:
        async def ready() -> bool:
            self.check_alive()
            return await self.healthy()

        await wait_for(f"{self.name} to be healthy", ready, timeout_s)
        leader = await self.leader()
        assert leader is not None
        return leader


class Etcd(System):
    name = "etcd"

    def __init__(self, root: Path, timing: Timing) -> None:
        super().__init__(root, timing)
        ports = free_ports(2 * MEMBERS)
        self.client_ports = {m: ports[m - 1] for m in self.members}
        self.peer_ports = {m: ports[MEMBERS + m - 1] for m in self.members}

    def start_member(self, member: int) -> None:
        cluster = ",".join(f"m{m}=http://127.0.0.1:{self.peer_ports[m]}" for m in self.members)
        cmd = [
            "etcd",
            "--name",
            f"m{member}",
            "--data-dir",
            str(self.root / f"m{member}"),
            "--listen-client-urls",
            f"http://127.0.0.1:{self.client_ports[member]}",
            "--advertise-client-urls",
            f"http://127.0.0.1:{self.client_ports[member]}",
            "--listen-peer-urls",
            f"http://127.0.0.1:{self.peer_ports[member]}",
            "--initial-advertise-peer-urls",
            f"http://127.0.0.1:{self.peer_ports[member]}",
            "--initial-cluster",
            cluster,
            "--initial-cluster-state",
            "new",
            "--initial-cluster-token",
            f"bench-peers-{self.root.name}",
            "--heartbeat-interval",
            str(self.timing.etcd["heartbeat-interval"]),
            "--election-timeout",
            str(self.timing.etcd["election-timeout"]),
            "--logger",
            "zap",
            "--log-level",
            "warn",
        ]
        self.procs[member] = launch(cmd, self.root / f"m{member}.log")

    async def _status(self, member: int) -> dict[str, Any]:
        c = EtcdClient(self.client_ports[member], "", 1.0)
        try:
            return await c.status()
        finally:
            await c.close()

    async def leader(self) -> int | None:
        for m in self.members:
            with contextlib.suppress(Exception):
                s = await self._status(m)
                if s.get("leader") and s["leader"] == s["header"]["member_id"]:
                    return m
        return None

    async def healthy(self) -> bool:
        leaders = set()
        for m in self.members:
            s = await self._status(m)
            leaders.add(s.get("leader"))
        if len(leaders) != 1 or None in leaders:
            return False
        leader = await self.leader()
        if leader is None:
            return False
        c = self.client(leader, 0, 2.0)
        try:
            await c.write(0)
        finally:
            await c.close()
        return True

    def client(self, member: int, index: int, timeout_s: float = 5.0) -> Client:
        return EtcdClient(self.client_ports[member], f"peer-{index}", timeout_s)


class ZooKeeper(System):
    name = "zookeeper"

    def __init__(self, root: Path, timing: Timing) -> None:
        super().__init__(root, timing)
        ports = free_ports(3 * MEMBERS)
        self.client_ports = {m: ports[m - 1] for m in self.members}
        self.quorum_ports = {m: ports[MEMBERS + m - 1] for m in self.members}
        self.election_ports = {m: ports[2 * MEMBERS + m - 1] for m in self.members}

    def start_member(self, member: int) -> None:
        data = self.root / f"s{member}"
        data.mkdir(parents=True, exist_ok=True)
        (data / "myid").write_text(f"{member}\n")
        z = self.timing.zookeeper
        lines = [
            f"tickTime={z['tickTime']}",
            f"initLimit={z['initLimit']}",
            f"syncLimit={z['syncLimit']}",
            f"dataDir={data}",
            f"clientPort={self.client_ports[member]}",
            "clientPortAddress=127.0.0.1",
            "forceSync=yes",  # the default, said out loud: the transaction log is fsynced
            "maxClientCnxns=0",
            "admin.enableServer=false",
            "4lw.commands.whitelist=srvr,ruok",
        ]
        for m in self.members:
            lines.append(f"server.{m}=127.0.0.1:{self.quorum_ports[m]}:{self.election_ports[m]}")
        cfg = data / "zoo.cfg"
        cfg.write_text("\n".join(lines) + "\n")
        cmd = [
            "java",
            "-Xmx256m",
            "-XX:+UseSerialGC",
            f"-Dzookeeper.log.dir={data}",
            "-Dzookeeper.root.logger=WARN,CONSOLE",
            "-cp",
            ZK_CLASSPATH,
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            str(cfg),
        ]
        self.procs[member] = launch(cmd, self.root / f"s{member}.log")

    async def _four_letter(self, member: int, word: bytes) -> str:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.client_ports[member])
        try:
            writer.write(word)
            async with asyncio.timeout(1.0):
                await writer.drain()
                return (await reader.read()).decode(errors="replace")
        finally:
            writer.close()

    async def _mode(self, member: int) -> str | None:
        with contextlib.suppress(Exception):
            for line in (await self._four_letter(member, b"srvr")).splitlines():
                if line.startswith("Mode:"):
                    return line.split(":", 1)[1].strip()
        return None

    async def leader(self) -> int | None:
        for m in self.members:
            if await self._mode(m) == "leader":
                return m
        return None

    async def healthy(self) -> bool:
        modes = [await self._mode(m) for m in self.members]
        if sorted(str(x) for x in modes) != ["follower", "follower", "leader"]:
            return False
        leader = modes.index("leader") + 1
        c = ZooKeeperClient(self.client_ports[leader], "/peer-0", 2.0)
        try:
            await c.create()
            await c.write(0)
        finally:
            await c.close()
        return True

    def client(self, member: int, index: int, timeout_s: float = 5.0) -> Client:
        return ZooKeeperClient(self.client_ports[member], f"/peer-{index}", timeout_s)

    async def prepare(self, clients: int) -> None:
        leader = await self.leader()
        assert leader is not None
        c = ZooKeeperClient(self.client_ports[leader], "/", 5.0)
        try:
            for i in range(clients):
                c.path = f"/peer-{i}"
                await c.create()
        finally:
            await c.close()


class Pykraft(System):
    name = "pykraft"

    def __init__(self, root: Path, timing: Timing) -> None:
        super().__init__(root, timing)
        self.base = free_cluster_base(MEMBERS, 1)
        self.plans: dict[int, NodePlan] = {}
        for plan in plan_cluster(root, MEMBERS, self.base, 1):
            plan.properties.update(timing.pykraft)
            self.plans[plan.node_id] = plan
        self.cluster_id = random_uuid()
        self.broker = MEMBERS + 1
        self._topics_ready = False

    def port(self, member: int) -> int:
        return int(self.plans[member].properties["listeners"].rsplit(":", 1)[1])

    def start(self) -> None:
        super().start()
        self.start_member(self.broker)  # hosts the topics; takes no part in the quorum

    def start_member(self, member: int) -> None:
        self.procs[member] = start_node(self.plans[member], self.cluster_id)
        _STARTED.append(self.procs[member])

    async def set_observers(self, running: bool) -> bool:
        """The broker hosts the clients' topics and fetches the metadata log as an observer; it
        is no member of the quorum. Stopped (SIGTERM: a controlled shutdown), the topics stay
        and their configs can still be written; restarted, it catches up before this returns."""
        if not running:
            proc = self.procs.pop(self.broker, None)
            if proc is not None:
                await asyncio.to_thread(stop_proc, proc)
            return True
        if self.broker in self.procs:
            return True
        self.start_member(self.broker)
        addresses = [("127.0.0.1", self.port(m)) for m in self.members]

        async def caught_up() -> bool:
            self.check_alive()
            d = await asyncio.to_thread(query_leader, addresses, 0.5)
            if d is None or d.high_watermark < 0:
                return False
            ends = [o.log_end_offset for o in d.observers if o.replica_id == self.broker]
            return bool(ends) and d.high_watermark - ends[0] <= 100

        await wait_for("pykraft's broker to catch up", caught_up, 60)
        return True

    def check_alive(self) -> None:
        super().check_alive()

    async def leader(self) -> int | None:
        addresses = [("127.0.0.1", self.port(m)) for m in self.members]
        d = await asyncio.to_thread(query_leader, addresses, 0.5)
        return d.leader_id if d is not None and d.high_watermark >= 0 else None

    async def healthy(self) -> bool:
        addresses = [("127.0.0.1", self.port(m)) for m in self.members]
        d = await asyncio.to_thread(query_leader, addresses, 0.5)
        if d is None or d.high_watermark < 0:
            return False
        now = time.time() * 1000
        for v in d.voters:
            if v.replica_id != d.leader_id and (v.last_fetch_ms < 0 or now - v.last_fetch_ms > 1000):
                return False
            if d.high_watermark - v.log_end_offset > 100:
                return False
        if self._topics_ready:
            c = self.client(d.leader_id, 0, 2.0)
            try:
                await c.write(0)
            finally:
                await c.close()
        return True

    def client(self, member: int, index: int, timeout_s: float = 5.0) -> Client:
        return PykraftClient(self.port(member), f"peer-{index}", timeout_s)

    async def prepare(self, clients: int) -> None:
        async def created() -> bool:
            leader = await self.leader()
            if leader is None:
                return False
            c = PykraftClient(self.port(leader), "", 10.0)
            try:
                await c.create_topics([f"peer-{i}" for i in range(clients)])
            finally:
                await c.close()
            return True

        await wait_for("pykraft topics (the broker registered)", created, 60)
        self._topics_ready = True


# ----------------------------------------------------------------------------- measurements


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


async def run_clients(system: System, leader: int, clients: int, seconds: float, warmup_s: float) -> dict[str, Any]:
    """`clients` connections to the leader, each writing its own key back to back."""
    conns = [system.client(leader, i) for i in range(clients)]
    latencies: list[float] = []
    errors: dict[str, int] = {}
    start = time.perf_counter()
    measure_from = start + warmup_s
    stop_at = measure_from + seconds

    async def one(c: Client, i: int) -> None:
        n = 0
        while True:
            t0 = time.perf_counter()
            if t0 >= stop_at:
                return
            n += 1
            try:
                await c.write(i * 1_000_000 + n)
            except Exception as exc:  # noqa: BLE001 - counted
                errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
                await asyncio.sleep(0.05)
                continue
            t1 = time.perf_counter()
            if t0 >= measure_from and t1 <= stop_at:
                latencies.append((t1 - t0) * 1000)

    cpu0 = time.process_time()
    servers0 = {m: proc_cpu_s(p.pid) for m, p in system.procs.items()}
    t_start = time.perf_counter()
    try:
        await asyncio.gather(*(one(c, i) for i, c in enumerate(conns)))
    finally:
        servers1 = {m: proc_cpu_s(p.pid) for m, p in system.procs.items()}
        wall = time.perf_counter() - t_start
        for c in conns:
            await c.close()
    # Each server process's CPU over the whole window (warm-up included), in cores; with the
    # writes/s, the CPU a write costs each member (the leader, the followers, pykraft's broker).
    server_cores = {
        str(m): round((after - before) / wall, 2)
        for m, before in servers0.items()
        if before is not None and (after := servers1.get(m)) is not None
    }
    return {
        "clients": clients,
        "seconds": seconds,
        "writes": len(latencies),
        "writes_per_s": round(len(latencies) / seconds, 1),
        "p50_ms": round(pct(latencies, 0.5), 2) if latencies else None,
        "p99_ms": round(pct(latencies, 0.99), 2) if latencies else None,
        "errors": errors,
        "client_cpu_s": round(time.process_time() - cpu0, 2),
        "leader": leader,
        "server_cores": server_cores,
    }


async def first_write_through(system: System, survivors: list[int], t0: float, limit_s: float) -> tuple[float, int]:
    """(ms from t0, member) of the first write acknowledged through any survivor.

    Every PROBE_EVERY_S, each survivor gets a new write attempt on a new connection, while
    earlier ones may still wait (for at most PROBE_TIMEOUT_S): the first acknowledgement
    wins, whichever attempt it answers."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[tuple[float, int]] = loop.create_future()
    attempts: set[asyncio.Task[None]] = set()

    async def attempt(member: int, n: int) -> None:
        c = system.client(member, 0, timeout_s=PROBE_TIMEOUT_S)
        try:
            await c.write(n)
            if not done.done():
                done.set_result(((time.perf_counter() - t0) * 1000, member))
        except Exception:  # noqa: BLE001, S110 - no leader yet, or not the leader: a later attempt will do
            pass
        finally:
            await c.close()

    async def probe(member: int) -> None:
        n = 0
        while not done.done():
            n += 1
            task = asyncio.create_task(attempt(member, n))
            attempts.add(task)
            task.add_done_callback(attempts.discard)
            await asyncio.sleep(PROBE_EVERY_S)

    probes = [asyncio.create_task(probe(m)) for m in survivors]
    try:
        async with asyncio.timeout(limit_s):
            return await done
    finally:
        for t in [*probes, *attempts]:
            t.cancel()
        await asyncio.gather(*probes, *attempts, return_exceptions=True)


async def run_failovers(system: System, kills: int) -> dict[str, Any]:
    runs: list[dict[str, Any]] = []
    for i in range(kills):
        leader = await system.wait_ready()
        survivors = [m for m in system.members if m != leader]
        await asyncio.sleep(0.5)  # a steady state: heartbeats/fetches flowing
        t0 = time.perf_counter()
        system.kill(leader)
        try:
            ms, via = await first_write_through(system, survivors, t0, 60)
        except TimeoutError:
            ms, via = float("nan"), -1
        new = await system.leader()
        runs.append({"killed": leader, "failover_ms": round(ms, 1), "written_via": via, "new_leader": new})
        print(f"    {system.name} kill -9 #{i + 1}: leader {leader} -> {new}: {ms:.0f} ms", flush=True)
        system.start_member(leader)
    await system.wait_ready()
    values = [r["failover_ms"] for r in runs if r["failover_ms"] == r["failover_ms"]]
    return {
        "kills": kills,
        "timeouts": kills - len(values),
        "median_ms": round(statistics.median(values), 1) if values else None,
        "max_ms": round(max(values), 1) if values else None,
        "min_ms": round(min(values), 1) if values else None,
        "runs": runs,
    }


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


async def bench_system(
    kind: type[System], work: Path, timing: Timing, kills: int, seconds: float, throughput: bool
) -> dict[str, Any]:
    system = kind(work / f"{kind.name}-{timing.name}", timing)
    out: dict[str, Any] = {"timing": timing.describe(kind.name), "load_before": load_average()}
    print(f"  {kind.name} at {timing.name} ({timing.describe(kind.name)}) in {system.root} ...", flush=True)
    try:
        system.start()
        await system.wait_ready()
        clients = max(CONCURRENCY)
        await system.prepare(clients)
        # The members alone take the writes, as etcd's and ZooKeeper's do; then, where the
        # system has observers (pykraft's broker), 64 clients once more with them following.
        # A failover-only run keeps them up throughout.
        observed = throughput and await system.set_observers(False)
        leader = await system.wait_ready()
        if throughput:
            out["sequential"] = await run_clients(system, leader, 1, seconds, 1.0)
            print(f"    sequential: {out['sequential']}", flush=True)
            for n in CONCURRENCY:
                leader = await system.wait_ready()
                out[f"clients_{n}"] = await run_clients(system, leader, n, seconds, 1.0)
                print(f"    {n} clients: {out[f'clients_{n}']}", flush=True)
        if observed:
            await system.set_observers(True)
            n = max(CONCURRENCY)
            leader = await system.wait_ready()
            out[f"clients_{n}_observed"] = await run_clients(system, leader, n, seconds, 1.0)
            print(f"    {n} clients, the broker following the log: {out[f'clients_{n}_observed']}", flush=True)
        out["kill9"] = await run_failovers(system, kills)
        out["load_after"] = load_average()
    finally:
        system.stop()
    return out


# ----------------------------------------------------------------------------- report


def verdicts(result: dict[str, Any]) -> list[str]:
    lines = []
    systems = result["systems"]
    if "pykraft" not in systems:
        return lines
    for timing in ("defaults", "matched"):
        ours = systems["pykraft"].get(timing, {}).get("kill9")
        if not ours or ours["median_ms"] is None:
            continue
        for peer in ("etcd", "zookeeper"):
            theirs = systems.get(peer, {}).get(timing, {}).get("kill9")
            if not theirs or theirs["median_ms"] is None:
                continue
            ok = ours["median_ms"] < theirs["median_ms"] and ours["max_ms"] < theirs["max_ms"]
            lines.append(
                f"failover at {timing}: pykraft median/max {ours['median_ms']:.0f}/{ours['max_ms']:.0f} ms "
                f"vs {peer} {theirs['median_ms']:.0f}/{theirs['max_ms']:.0f} ms: {'PASS' if ok else 'MISS'}"
            )
    ours64 = systems["pykraft"].get("defaults", {}).get("clients_64")
    etcd64 = systems.get("etcd", {}).get("defaults", {}).get("clients_64")
    if ours64 and etcd64 and etcd64["writes_per_s"]:
        ratio = ours64["writes_per_s"] / etcd64["writes_per_s"]
        lines.append(
            f"writes/s at 64 clients: pykraft {ours64['writes_per_s']:,.0f} vs etcd {etcd64['writes_per_s']:,.0f} "
            f"= {ratio:.2f}x (target >= {TARGET_WRITES_64_VS_ETCD:.0f}x): "
            f"{'PASS' if ratio >= TARGET_WRITES_64_VS_ETCD else 'MISS'}"
        )
        observed = systems["pykraft"].get("defaults", {}).get("clients_64_observed")
        if observed:
            lines.append(
                f"  (with pykraft's broker following the log: {observed['writes_per_s']:,.0f} writes/s "
                f"= {observed['writes_per_s'] / etcd64['writes_per_s']:.2f}x etcd's)"
            )
    return lines


def render(result: dict[str, Any]) -> str:
    out = [f"bench_peers {result['started']} ({result['machine']}), load before {result['load_before']}"]
    for name, why in result["skipped"].items():
        out.append(f"  {name}: SKIPPED: {why}")
    header = (
        f"{'system':<10} {'seq w/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'16 cl w/s':>10} {'64 cl w/s':>10} "
        f"{'64 + observer':>13}"
    )
    out += ["", header, "-" * len(header)]
    for name, by_timing in result["systems"].items():
        d = by_timing.get("defaults", {})
        seq = d.get("sequential") or {}
        c16 = d.get("clients_16") or {}
        c64 = d.get("clients_64") or {}
        c64o = d.get("clients_64_observed") or {}

        def f(x: Any, fmt: str = ",.0f") -> str:
            return "-" if x is None else format(x, fmt)

        out.append(
            f"{name:<10} {f(seq.get('writes_per_s')):>8} {f(seq.get('p50_ms'), '.2f'):>7} "
            f"{f(seq.get('p99_ms'), '.2f'):>7} {f(c16.get('writes_per_s')):>10} {f(c64.get('writes_per_s')):>10} "
            f"{f(c64o.get('writes_per_s')):>13}"
        )
    header = f"{'system':<10} {'timing':<9} {'settings':<48} {'kills':>5} {'median ms':>9} {'max ms':>7}"
    out += ["", "failover after kill -9 of the leader (kill -> first write acknowledged through a survivor)"]
    out += [header, "-" * len(header)]
    for name, by_timing in result["systems"].items():
        for timing in ("defaults", "matched"):
            r = by_timing.get(timing)
            if not r or "kill9" not in r:
                continue
            k = r["kill9"]
            med = "-" if k["median_ms"] is None else f"{k['median_ms']:,.0f}"
            mx = "-" if k["max_ms"] is None else f"{k['max_ms']:,.0f}"
            out.append(f"{name:<10} {timing:<9} {r['timing']:<48} {k['kills']:>5} {med:>9} {mx:>7}")
    out += ["", *verdicts(result)]
    return "\n".join(out)


def machine() -> str:
    cpus = os.cpu_count()
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"{cpus} CPUs {model}".strip()


async def main_async(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    wanted = [s.strip() for s in args.only.split(",") if s.strip()]
    kinds: list[type[System]] = [k for k in (Pykraft, Etcd, ZooKeeper) if k.name in wanted]
    result: dict[str, Any] = {
        "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "load_before": load_average(),
        "skipped": {},
        "systems": {},
    }
    needs = {"etcd": ("etcd", "etcd-server"), "zookeeper": ("/usr/share/java/zookeeper.jar", "zookeeper")}
    for kind in kinds:
        if kind.name in needs:
            binary, package = needs[kind.name]
            why = ensure_package(binary, package)
            if why is None and kind.name == "zookeeper" and not shutil.which("java"):
                why = ensure_package("java", "default-jre-headless")
            if why is not None:
                print(f"  {kind.name}: SKIPPED: {why}", flush=True)
                result["skipped"][kind.name] = why
                continue
        for timing in (DEFAULTS, MATCHED):
            by = result["systems"].setdefault(kind.name, {})
            by[timing.name] = await bench_system(
                kind, work, timing, args.kills, args.seconds, throughput=timing is DEFAULTS
            )
    result["load_after"] = load_average()
    return result


def run_loop(main: Coroutine[Any, Any, T]) -> T:
    """Run the benchmark on uvloop when installed (the servers' own event loop), for all three systems alike."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=20, help="kill -9s per system and timing (>= 20 for the record)")
    ap.add_argument("--seconds", type=float, default=5.0, help="length of each throughput measurement")
    ap.add_argument("--quick", action="store_true", help="3 kills, 2 s measurements: a smoke run")
    ap.add_argument("--only", default="pykraft,etcd,zookeeper")
    ap.add_argument("--json-out")
    ap.add_argument("--keep", action="store_true", help="keep the data directories")
    ap.add_argument("--dir", help="work directory (default: a new temp dir)")
    args = ap.parse_args(argv)
    if args.quick:
        args.kills, args.seconds = 3, 2.0
    work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="pykraft-bench-peers-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        result = run_loop(main_async(args, work))
    finally:
        stop_all_started()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print()
    print(render(result))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
