"""The broker's open file descriptor limit (RLIMIT_NOFILE).

At start the broker raises its soft limit to the hard one (a process may, without
privileges) and logs both. It then compares the limit with what its partitions need, as
Elasticsearch's bootstrap checks do, and warns with one clear line when the limit is lower:
a partition log holds `FDS_PER_SEGMENT` descriptor per segment, and the process needs
`CONNECTION_RESERVE` more for client and replica connections, the metadata log, the REST
listener and the event loop. Running out is not retried: an EMFILE in a log operation is a
storage error like any other and takes the log dir offline (`broker.log.dir_failure`).

`DescriptorBudget` is the sans-IO rule (what is needed, when to warn); `raise_soft_limit`
does the system call.
"""

from __future__ import annotations

import logging
import resource
from dataclasses import dataclass

log = logging.getLogger(__name__)

FDS_PER_SEGMENT = 1  # a segment's .log file; its indexes are mapped, their descriptors closed
CONNECTION_RESERVE = 1024  # sockets, the metadata log, REST, epoll and the like (descriptors)


@dataclass(frozen=True, slots=True)
class NofileLimit:
    before: int  # the soft limit found at start (descriptors; -1: unlimited)
    soft: int  # the soft limit now
    hard: int


def raise_soft_limit() -> NofileLimit:
    """Set the soft RLIMIT_NOFILE to the hard limit; an unlimited hard limit is capped at the
    kernel's per-process maximum (fs.nr_open), which setrlimit requires."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:
        try:
            with open("/proc/sys/fs/nr_open", encoding="ascii") as f:
                target = int(f.read())
        except (OSError, ValueError):
            target = soft
    if target != soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (OSError, ValueError) as exc:
            log.warning("could not raise the open file descriptor limit from %d to %d: %s", soft, target, exc)
            target = soft
    return NofileLimit(soft, target, hard)


def descriptors_needed(segments: int) -> int:
    """Descriptors a broker holding `segments` log segments needs (an estimate)."""
    return segments * FDS_PER_SEGMENT + CONNECTION_RESERVE


class DescriptorBudget:
    """Warns once when the segments hosted need more descriptors than the limit, and again
    only after the need fell below it and rose above it once more."""

    def __init__(self, node_id: int, limit: int) -> None:
        self.node_id = node_id
        self.limit = limit
        self._over = False

    def check(self, segments: int) -> str | None:
        """The warning to log for `segments` hosted segments, or None."""
        needed = descriptors_needed(segments)
        over = self.limit != resource.RLIM_INFINITY and needed > self.limit
        warn = over and not self._over
        self._over = over
        if not warn:
            return None
        return (
            f"broker {self.node_id}: the open file descriptor limit (RLIMIT_NOFILE) {self.limit} is too low for "
            f"the {segments} log segments hosted here: they need about {needed} ({FDS_PER_SEGMENT} per segment "
            f"+ {CONNECTION_RESERVE} for connections and the rest). Raise it (ulimit -n, systemd LimitNOFILE=): "
            f"a log operation that runs out of descriptors (EMFILE) takes its log dir offline"
        )
