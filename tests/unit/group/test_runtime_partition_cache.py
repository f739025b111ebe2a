"""The runtime's cache of group ids' coordinator partitions (`broker.group.runtime._partition_of`):
the answers of `coordinator_partition`, for any partition count, in bounded memory."""

from __future__ import annotations

from broker.group import runtime
from broker.group.records import coordinator_partition


def test_the_cache_answers_as_coordinator_partition_for_each_partition_count() -> None:
    for count in (50, 7, 50, 1):
        assert runtime._partition_of("grp", count) == coordinator_partition("grp", count)
    long_id = "x" * (runtime._CACHED_GROUP_ID_CHARS + 1)
    assert runtime._partition_of(long_id, 50) == coordinator_partition(long_id, 50)
    assert long_id not in runtime._partitions  # computed each time, never kept


def test_the_cache_is_bounded() -> None:
    for i in range(runtime._PARTITION_CACHE_SIZE + 10):
        assert runtime._partition_of(f"g{i}", 50) == coordinator_partition(f"g{i}", 50)
    assert 0 < len(runtime._partitions) <= runtime._PARTITION_CACHE_SIZE
