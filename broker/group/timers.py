"""Deadlines keyed by name, for the sans-IO coordinator: set, cancel, and take the due ones.

A key has at most one deadline; setting it again replaces it. `due(now)` returns the keys
whose deadline is at or before `now` (ms), earliest first, and forgets them. The heap keeps
replaced and cancelled entries until they surface (lazy deletion): each `set` costs
O(log n), and the heap never holds more than the number of `set` calls since the last
compaction, which happens when stale entries outnumber live ones.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class Deadlines(Generic[K]):
    def __init__(self) -> None:
        self._at: dict[K, int] = {}
        self._heap: list[tuple[int, int, K]] = []
        self._seq = 0

    def __len__(self) -> int:
        return len(self._at)

    def __contains__(self, key: object) -> bool:
        return key in self._at

    def get(self, key: K) -> int | None:
        return self._at.get(key)

    def set(self, key: K, deadline_ms: int) -> None:
        self._at[key] = deadline_ms
        self._seq += 1
        heapq.heappush(self._heap, (deadline_ms, self._seq, key))
        if len(self._heap) > 64 and len(self._heap) > 2 * len(self._at):
            self._heap = [(at, i, k) for i, (k, at) in enumerate(self._at.items())]
            heapq.heapify(self._heap)

    def cancel(self, key: K) -> None:
        self._at.pop(key, None)

    def next_deadline(self) -> int | None:
        while self._heap:
            at, _, key = self._heap[0]
            if self._at.get(key) == at:
                return at
            heapq.heappop(self._heap)
        return None

    def due(self, now_ms: int) -> list[K]:
        out: list[K] = []
        while self._heap and self._heap[0][0] <= now_ms:
            at, _, key = heapq.heappop(self._heap)
            if self._at.get(key) == at:
                del self._at[key]
                out.append(key)
        return out
