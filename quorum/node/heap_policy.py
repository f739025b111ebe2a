"""glibc malloc's thresholds for a node process.

A frame larger than the transport's receive buffer (a produce request, a follower's fetch
answer: up to about a megabyte each at saturation) is read into a bytearray of its own,
freed once handled. With glibc's defaults, an allocation that size is either mapped with
mmap (until the first free raises the dynamic threshold) or carved from the top of the heap,
which `free` then gives back to the kernel once more than twice that threshold is free
there. Either way the next frame lands on pages the kernel must fault in and zero before the
socket's bytes are copied onto them: 3 % of a broker's CPU at 210 MB/s of acks=all (perf,
2026-11-28). Fixed thresholds keep the freed
memory in the heap for the next frame: allocations under MMAP_THRESHOLD_BYTES come from the
heap, and the heap keeps up to TRIM_THRESHOLD_BYTES free at its top (the price: that much
resident memory a process may keep after a burst).

The environment's MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_, when set, win; on a C
library without `mallopt` (musl) nothing changes.
"""

from __future__ import annotations

import ctypes
import logging
import os
from typing import Final

__all__ = ["MMAP_THRESHOLD_BYTES", "TRIM_THRESHOLD_BYTES", "tune_allocator"]

log = logging.getLogger(__name__)

# Allocations from this size up are mapped (and unmapped when freed): frames larger than
# replica.fetch.response.max.bytes' default (10 MiB) are rare.
MMAP_THRESHOLD_BYTES: Final = 16 * 1024 * 1024
# Free memory at the heap's top beyond this is returned to the kernel.
TRIM_THRESHOLD_BYTES: Final = 64 * 1024 * 1024

# glibc's <malloc.h> parameter numbers.
_M_TRIM_THRESHOLD: Final = -1
_M_MMAP_THRESHOLD: Final = -3


def tune_allocator() -> bool:
    """Fix malloc's mmap and trim thresholds (at a node process's start); False when the C
    library has no `mallopt` or the environment sets them."""
    if "MALLOC_MMAP_THRESHOLD_" in os.environ or "MALLOC_TRIM_THRESHOLD_" in os.environ:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    # mallopt returns 1 on success, 0 on error.
    ok: bool = mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1
    ok = ok and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) == 1
    if not ok:
        log.warning("mallopt refused the mmap/trim thresholds; the C library's defaults stay")
    return ok
