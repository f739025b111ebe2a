"""`MappedFile`: a shared, writable memory map of a file that holds no file descriptor.

Python's `mmap.mmap` (before 3.13's `trackfd=False`) keeps a duplicate of the descriptor
it maps for as long as the map lives, so every mapped index would cost a descriptor. This
maps through libc's `mmap(2)` instead: the file is opened, mapped and closed, and the
mapping alone keeps its pages reachable (POSIX: closing the descriptor does not unmap).

Invariants: `buf` is valid only until `close()`, which unmaps and sets it to None; every
user goes through `buf` and checks it (a use after `close()` is an AssertionError, never
an access to unmapped memory). Writes through `buf` land in the page cache; `fsync` of
any descriptor of the file (or `flush()`, msync) makes them durable.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
from pathlib import Path

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.restype = ctypes.c_int
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.msync.restype = ctypes.c_int
_libc.msync.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_MAP_FAILED = ctypes.c_void_p(-1).value
_MS_SYNC = 4  # Linux's value (asm-generic/mman-common.h)


def _check(result: int, what: str, path: Path) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what} {path}: {os.strerror(err)}")


class MappedFile:
    def __init__(self, path: Path, length: int, *, truncate: bool = False) -> None:
        """Size `path` to `length` bytes (creating it; emptying it first when `truncate`)
        and map all of it. A length of 0 maps nothing (`buf` is None)."""
        self.path = path
        self.length = length
        self.buf: ctypes.Array[ctypes.c_char] | None = None
        self._addr: int | None = None
        fd = os.open(path, os.O_RDWR | os.O_CREAT | (os.O_TRUNC if truncate else 0), 0o644)
        try:
            if os.fstat(fd).st_size != length:
                os.ftruncate(fd, length)
            if length:
                addr = _libc.mmap(None, length, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED, fd, 0)
                if addr is None or addr == _MAP_FAILED:
                    err = ctypes.get_errno()
                    raise OSError(err, f"mmap {path}: {os.strerror(err)}")
                self._addr = addr
                self.buf = (ctypes.c_char * length).from_address(addr)
        finally:
            os.close(fd)

    def flush(self) -> None:
        if self._addr is not None:
            _check(_libc.msync(self._addr, self.length, _MS_SYNC), "msync", self.path)

    def close(self) -> None:
        if self._addr is not None:
            addr, self._addr, self.buf = self._addr, None, None
            _check(_libc.munmap(addr, self.length), "munmap", self.path)
