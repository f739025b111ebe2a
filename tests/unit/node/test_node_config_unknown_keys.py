"""Unknown config keys: Kafka's warning at load, and no silent fall back to the default listener."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from quorum.node.config import ConfigError, load_config

BROKER = """process.roles=broker
node.id=4
controller.quorum.voters=1@127.0.0.1:19091
controller.listener.names=CONTROLLER
log.dirs={d}
"""


def write(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "server.properties"
    path.write_text(BROKER.format(d=tmp_path / "data") + extra)
    return path


def test_a_misspelled_key_is_warned_about_as_kafka_does(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = write(tmp_path, "listeners=PLAINTEXT://127.0.0.1:9999\nbroker.session.timout.ms=3000\n")
    with caplog.at_level(logging.WARNING, logger="pykraft.config"):
        config = load_config(path)
    assert config.broker_session_timeout_ms == 9000  # the typo did not set anything
    messages = [r.getMessage() for r in caplog.records if r.name == "pykraft.config"]
    assert messages == [
        "The configuration 'broker.session.timout.ms' was supplied but isn't a known config. "
        "Did you mean 'broker.session.timeout.ms'?"
    ]


def test_known_kafka_keys_and_pykraft_keys_are_not_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write(
        tmp_path,
        "listeners=PLAINTEXT://127.0.0.1:9999\nnum.network.threads=3\nmessage.max.bytes=100000\n"
        "min.insync.replicas=2\nrest.listener=http://127.0.0.1:18999\n",
    )
    with caplog.at_level(logging.WARNING, logger="pykraft.config"):
        load_config(path)
    assert [r.getMessage() for r in caplog.records if r.name == "pykraft.config"] == []


def test_a_key_unlike_any_known_one_is_warned_without_a_guess(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = write(tmp_path, "listeners=PLAINTEXT://127.0.0.1:9999\nfrobnicate=yes\n")
    with caplog.at_level(logging.WARNING, logger="pykraft.config"):
        load_config(path)
    assert [r.getMessage() for r in caplog.records if r.name == "pykraft.config"] == [
        "The configuration 'frobnicate' was supplied but isn't a known config."
    ]


def test_warn_unknown_false_is_silent(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = write(tmp_path, "listeners=PLAINTEXT://127.0.0.1:9999\nfrobnicate=yes\n")
    with caplog.at_level(logging.WARNING, logger="pykraft.config"):
        load_config(path, warn_unknown=False)
    assert not [r for r in caplog.records if r.name == "pykraft.config"]


def test_a_file_whose_only_listener_key_is_misspelled_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "listners=PLAINTEXT://127.0.0.1:9999\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert "'listners' isn't a known config" in message
    assert "PLAINTEXT://:9092" in message and str(path) in message


def test_no_listener_key_at_all_still_means_kafkas_default(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, ""))
    assert [str(x) for x in config.listeners] == ["PLAINTEXT://:9092"]


def test_a_misspelled_listener_key_next_to_a_correct_one_only_warns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write(tmp_path, "listeners=PLAINTEXT://127.0.0.1:9999\nadvertised.listners=PLAINTEXT://h:1\n")
    with caplog.at_level(logging.WARNING, logger="pykraft.config"):
        config = load_config(path)
    assert config.listeners[0].port == 9999
    assert "'advertised.listners'" in caplog.text
