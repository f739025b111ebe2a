"""How a fetch answer's record bytes get from a cached segment file to a socket, per MB:
`os.sendfile` through `SplicedResponse` (the broker's path), `pread` + `transport.write`
(the former path), and memoryviews over an mmap + `writelines` (the alternative the issue
names). One process sends 400 ranges of 1 MiB on uvloop to a sink in another process over
loopback; CPU is this process's utime+stime (the sink's reads are not counted).

    PYTHONPATH=. .venv/bin/python tests/perf/bench_fetch_send.py [--ranges 400]

Not collected by pytest (tests/perf/conftest.py).
"""

from __future__ import annotations

import argparse
import asyncio
import mmap
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import uvloop

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from broker.kafka.spliced import SplicedResponse  # noqa: E402
from broker.log.file_range import FileRange, SegmentFile  # noqa: E402

SIZE = 1 << 20  # bytes per range
SINK = """import socket
s = socket.create_server(("127.0.0.1", 0))
print(s.getsockname()[1], flush=True)
c, _ = s.accept()
n = 0
while d := c.recv(1 << 20):
    n += len(d)
print(n, flush=True)
"""


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def send_all(mode: str, path: Path, ranges: int, port: int) -> tuple[float, float, float]:
    """(CPU s, wall s, MB) of sending `ranges` 1 MiB ranges with `mode` to the sink at `port`."""
    fd = os.open(path, os.O_RDONLY)
    file = SegmentFile(fd)
    mapped = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
    _reader, writer = await asyncio.open_connection("127.0.0.1", port)
    c0, t0 = cpu_s(), time.monotonic()
    for i in range(ranges):
        position = (i % 7) * SIZE
        if mode == "sendfile":
            await SplicedResponse([bytearray(b"head"), FileRange(file, position, SIZE)]).send(writer)
        elif mode == "pread":
            writer.write(bytearray(b"head") + os.pread(fd, SIZE, position))
        else:
            writer.writelines([b"head", memoryview(mapped)[position : position + SIZE]])
        await writer.drain()
    writer.close()
    await writer.wait_closed()
    c1, t1 = cpu_s(), time.monotonic()
    mapped.close()
    file.close()
    return c1 - c0, t1 - t0, ranges * SIZE / 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranges", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="pykraft-bench-send-") as work:
        path = Path(work) / "00000000000000000000.log"
        path.write_bytes(os.urandom(8 * SIZE))  # written now: in the page cache
        print(f"load average {' / '.join(Path('/proc/loadavg').read_text().split()[:3])}")
        for _ in range(args.rounds):
            for mode in ("sendfile", "pread", "mmap"):
                sink = subprocess.Popen([sys.executable, "-c", SINK], stdout=subprocess.PIPE, text=True)  # noqa: S603
                assert sink.stdout is not None
                port = int(sink.stdout.readline())
                cpu, wall, mb = uvloop.run(send_all(mode, path, args.ranges, port))
                got = int(sink.stdout.readline())
                sink.wait()
                assert got == args.ranges * (SIZE + 4), got
                print(f"{mode:9s} {cpu * 1000 / mb:6.3f} ms CPU per MB sent, {mb / wall:7.1f} MB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
