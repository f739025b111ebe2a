"""What several benchmarks share: stopping the processes they started, reading a process's
CPU, and describing the machine a run was made on. Not collected by pytest (tests/perf/conftest.py)."""

from __future__ import annotations

import contextlib
import os
import platform
import signal
import subprocess
from pathlib import Path
from typing import Any


def proc_cpu_s(pid: int) -> float | None:
    """utime + stime of a live process (all its threads), seconds; None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def stop_proc(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout_s: float = 10.0) -> None:
    """Stop one process we started, by its pid; SIGKILL if it outlives `timeout_s`."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, sig)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def machine_info(work: Path) -> dict[str, Any]:
    """CPU, memory, platform, Python, and the file system the run's files live on."""
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    fs = ""
    with contextlib.suppress(OSError):
        best = ""
        for line in Path("/proc/mounts").read_text().splitlines():
            parts = line.split()
            if len(parts) >= 3 and str(work).startswith(parts[1]) and len(parts[1]) >= len(best):
                best, fs = parts[1], f"{parts[2]} on {parts[0]} ({parts[1]})"
    mem = ""
    with contextlib.suppress(OSError, ValueError, IndexError):
        kb = int(Path("/proc/meminfo").read_text().splitlines()[0].split()[1])
        mem = f"{kb / 1024 / 1024:.1f} GiB"
    return {
        "cpu_count": os.cpu_count(),
        "processor": platform.processor(),
        "cpu_model": model,
        "memory": mem,
        "platform": platform.platform(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "work_dir": str(work),
        "work_dir_fs": fs,
    }
