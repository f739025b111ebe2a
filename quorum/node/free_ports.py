"""Free loopback ports for local clusters started side by side (tests, benchmarks).

Every port handed out lies below the kernel's ephemeral range
(`/proc/sys/net/ipv4/ip_local_port_range`). A port inside that range can be taken as the
source port of any outgoing connection between the moment it was found free and the
moment a node binds it, or while a node is down before its restart; below the range only
another explicit bind can take it.
"""

from __future__ import annotations

import contextlib
import random
import socket
from collections.abc import Callable
from pathlib import Path

LOW = 10_000  # lowest port handed out (well above the well-known and registered defaults)
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_FALLBACK_EPHEMERAL_LOW = 32_768  # Linux's default when the range cannot be read
_ATTEMPTS = 500


def ephemeral_low() -> int:
    """The first port of the kernel's ephemeral (automatic source port) range."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int(_EPHEMERAL_RANGE.read_text().split()[0])
    return _FALLBACK_EPHEMERAL_LOW


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    """Can `port` be bound on `host` right now?"""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_ports_for(layout: Callable[[int], list[int]]) -> int:
    """A random base B whose ports `layout(B)` are distinct, free and all in
    [LOW, ephemeral_low()); B itself is drawn from that interval."""
    high = ephemeral_low()
    rng = random.Random()  # noqa: S311 - not security
    for _ in range(_ATTEMPTS):
        base = rng.randrange(LOW, high)
        ports = layout(base)
        if len(set(ports)) == len(ports) and all(LOW <= p < high for p in ports) and all(map(port_free, ports)):
            return base
    raise RuntimeError(f"no free ports found below the ephemeral range ({LOW}..{high})")


def free_ports(count: int) -> list[int]:
    """`count` consecutive free ports below the ephemeral range."""
    base = free_ports_for(lambda b: list(range(b, b + count)))
    return list(range(base, base + count))


def free_port() -> int:
    """One free port below the ephemeral range."""
    return free_ports(1)[0]
