"""Durable file writes: the one implementation of "write, fsync, rename, fsync the directory".

Used for the quorum-state file, snapshots and meta.properties. A crash at any
point leaves either the old file or the new one, never a torn mix, and no
temporary file once the write has failed.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path


def fsync_dir(directory: Path) -> None:
    """Make a directory's entries (created, renamed or removed files) durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """os.write until every byte is written (os.write may write less than asked)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:  # pragma: no cover - os.write raises rather than returning 0
            raise OSError(errno.EIO, "short write")
        view = view[written:]


def atomic_write(path: Path, data: bytes, *, tmp: Path | None = None) -> Path:
    """Replace `path` with `data` durably: write `tmp` (default `<path>.tmp`), fsync it,
    rename it over `path`, fsync the directory. Returns `path`."""
    tmp = tmp if tmp is not None else path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        try:
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # the old file is untouched
        raise
    fsync_dir(path.parent)
    return path
