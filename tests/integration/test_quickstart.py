"""Kafka's quick start, step by step with pykraft's own commands: one combined node
(process.roles=broker,controller), a topic, two events written with the console producer
and read back with the console consumer."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest
from metadata_cluster import pykraft_script, run_pykraft, wait_until

from quorum.node.free_ports import free_ports

pytestmark = pytest.mark.integration


def test_quick_start(tmp_path: Path) -> None:
    kafka_port, controller_port, rest_port = free_ports(3)
    config = tmp_path / "server.properties"
    config.write_text(
        "process.roles=broker,controller\n"
        "node.id=1\n"
        f"controller.quorum.voters=1@127.0.0.1:{controller_port}\n"
        f"listeners=PLAINTEXT://127.0.0.1:{kafka_port},CONTROLLER://127.0.0.1:{controller_port}\n"
        "controller.listener.names=CONTROLLER\n"
        f"log.dirs={tmp_path / 'kraft-combined-logs'}\n"
        f"rest.listener=http://127.0.0.1:{rest_port}\n"
    )
    # Step 1: generate a cluster id and format the log directories.
    uuid = run_pykraft("storage", "random-uuid")
    assert uuid.returncode == 0
    cluster_id = uuid.stdout.strip()
    formatted = run_pykraft("storage", "format", "--config", str(config), "--cluster-id", cluster_id)
    assert formatted.returncode == 0, formatted.stderr
    assert "Formatting" in formatted.stdout
    # Step 2: start the server.
    log = (tmp_path / "server.log").open("wb")
    server = subprocess.Popen([str(pykraft_script()), "broker", "--config", str(config)], stdout=log, stderr=log)
    rest = f"http://127.0.0.1:{rest_port}"
    bootstrap = f"127.0.0.1:{kafka_port}"
    try:
        wait_until(
            "the server's REST API", lambda: run_pykraft("brokers", "list", "--rest-url", rest).returncode == 0, 60
        )

        # Step 3: create a topic, and describe it. (Right after its first start the node may
        # still be fencing itself while it catches up: then the create says all brokers are
        # fenced, and is tried again.)
        def create() -> subprocess.CompletedProcess[str] | None:
            out = run_pykraft(
                "topics", "create", "--topic", "quickstart-events", "--partitions", "1", "--replication-factor", "1",
                "--rest-url", rest,
            )  # fmt: skip
            return out if out.returncode == 0 or "fenced" not in out.stderr else None

        created = wait_until("the topic created", create, 30)
        assert created.returncode == 0, created.stderr
        assert created.stdout.strip() == "Created topic quickstart-events."
        described = run_pykraft("topics", "describe", "--topic", "quickstart-events", "--rest-url", rest)
        assert described.returncode == 0, described.stderr
        lines = described.stdout.splitlines()
        assert lines[0].startswith("Topic: quickstart-events\tTopicId: ")
        assert "PartitionCount: 1" in lines[0] and "ReplicationFactor: 1" in lines[0]
        assert lines[1].strip() == "Topic: quickstart-events\tPartition: 0\tLeader: 1\tReplicas: 1\tIsr: 1"
        # Step 4: write some events.
        produced = subprocess.run(
            [
                str(pykraft_script()),
                "console-producer",
                "--topic",
                "quickstart-events",
                "--bootstrap-server",
                bootstrap,
            ],
            input="This is my first event\nThis is my second event\n",
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert produced.returncode == 0, produced.stderr
        # Step 5: read them.
        consumed = run_pykraft(
            "console-consumer", "--topic", "quickstart-events", "--from-beginning", "--bootstrap-server", bootstrap,
            "--max-messages", "2",
        )  # fmt: skip
        assert consumed.returncode == 0, consumed.stderr
        assert consumed.stdout.splitlines() == ["This is my first event", "This is my second event"]
        assert "Processed a total of 2 messages" in consumed.stderr
        # Keys, as people use them.
        keyed = subprocess.run(
            [str(pykraft_script()), "console-producer", "--topic", "quickstart-events", "--bootstrap-server", bootstrap,
             "--property", "parse.key=true", "--property", "key.separator=:"],
            input="user1:logged in\n", capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert keyed.returncode == 0, keyed.stderr
        with_keys = run_pykraft(
            "console-consumer", "--topic", "quickstart-events", "--from-beginning", "--bootstrap-server", bootstrap,
            "--property", "print.key=true", "--property", "key.separator=:", "--max-messages", "3",
        )  # fmt: skip
        assert with_keys.stdout.splitlines() == [
            "null:This is my first event",
            "null:This is my second event",
            "user1:logged in",
        ]
        # kafka-log-dirs.sh --describe's JSON.
        dirs = run_pykraft(
            "log-dirs", "--describe", "--bootstrap-server", bootstrap, "--topic-list", "quickstart-events"
        )
        assert dirs.returncode == 0, dirs.stderr
        out = dirs.stdout.splitlines()
        assert out[0] == "Querying brokers for log directories information"
        assert out[1] == "Received log directory information from brokers 1"
        report = json.loads(out[2])
        [entry] = report["brokers"]
        [logdir] = entry["logDirs"]
        assert logdir["logDir"] == str(tmp_path / "kraft-combined-logs") and logdir["error"] is None
        [part] = logdir["partitions"]
        assert part["partition"] == "quickstart-events-0" and part["size"] > 0 and part["offsetLag"] == 0
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            assert server.wait(30) == 0
        finally:
            if server.poll() is None:
                server.kill()
            log.close()
