"""Pieces shared by the in-process broker benchmarks (`bench_produce_cpu.py`,
`bench_replication_round.py`): a broker's real `ReplicaManager` over its own log dir,
following a metadata image in which broker 1 leads every partition of topic `t`
(replicas 1, 2, 3); and the callgrind switch for instruction counts."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

from broker.log import LogManager
from broker.replica.manager import ReplicaManager
from quorum.metadata.delta import MetadataDelta
from quorum.metadata.image import EMPTY, MetadataImage
from quorum.metadata.records import (
    BrokerRegistrationChangeRecord,
    MetadataRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
)
from quorum.node.config import NodeConfig, config_from_properties

TOPIC_ID = uuid.UUID(int=7)


def callgrind(state: str) -> None:
    """Under `valgrind --tool=callgrind --instr-atstart=no` with BENCH_CALLGRIND=1: count the
    instructions of the measured rounds only (a count does not move with the machine's load)."""
    if os.environ.get("BENCH_CALLGRIND"):
        subprocess.run(["callgrind_control", "-i", state, str(os.getpid())], check=True, capture_output=True)


class InProcessBroker:
    """Broker `node_id`'s replica manager over `log_dir`; `partitions` partitions of `t` led
    by broker 1 with ISR `isr`, min.insync.replicas `min_isr`."""

    def __init__(
        self, log_dir: Path, node_id: int, partitions: int, isr: tuple[int, ...] = (1, 2, 3), min_isr: int = 2
    ) -> None:
        self.config: NodeConfig = config_from_properties({
            "process.roles": "broker", "node.id": str(node_id), "controller.quorum.voters": "9@127.0.0.1:1",
            "listeners": "PLAINTEXT://127.0.0.1:2", "controller.listener.names": "CONTROLLER", "log.dirs": str(log_dir),
        })  # fmt: skip
        self.image: MetadataImage = EMPTY
        self.logs = LogManager([log_dir], {})
        self.logs.load()
        self.manager = ReplicaManager(
            self.config, self.logs, image=lambda: self.image, min_insync_replicas=lambda topic: min_isr,
            on_follow=lambda h: None, on_unfollow=lambda h: None, on_isr_change_wanted=lambda: None,
        )  # fmt: skip
        recs: list[MetadataRecord] = []
        for b in (1, 2, 3):
            recs.append(RegisterBrokerRecord(broker_id=b, incarnation_id=uuid.UUID(int=b), broker_epoch=10 + b))
            recs.append(BrokerRegistrationChangeRecord(broker_id=b, broker_epoch=10 + b, fenced=-1))
        recs.append(TopicRecord(name="t", topic_id=TOPIC_ID))
        recs += [
            PartitionRecord(partition_id=p, topic_id=TOPIC_ID, replicas=(1, 2, 3), isr=isr, leader=1,
                            leader_epoch=0, partition_epoch=0)
            for p in range(partitions)
        ]  # fmt: skip
        delta = MetadataDelta(self.image)
        for i, r in enumerate(recs):
            delta.replay(r, i + 1, 1)
        self.image = delta.apply()
        self.manager.on_metadata(delta, self.image)
