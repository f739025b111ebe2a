"""Partition logs: segments, indexes, checkpoints, recovery, retention (no replication)."""

from broker.log.config import LogConfig
from broker.log.errors import LogError
from broker.log.manager import LogManager
from broker.log.partition_log import AppendInfo, PartitionLog

__all__ = ["AppendInfo", "LogConfig", "LogError", "LogManager", "PartitionLog"]
