"""Which config keys a node knows, and the warning for the ones it does not.

Kafka logs ``The configuration 'X' was supplied but isn't a known config.`` for every
supplied key outside its config definition, and then ignores it; pykraft does the same at
start. A key is known when pykraft interprets it (``NodeConfig``) or when it is one of
Kafka's own broker/controller keys that pykraft accepts without acting on it (listed
below), so that a real Kafka ``server.properties`` starts without noise while a typo
(``broker.session.timout.ms``, ``listners``) is reported, with the closest known key.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping

__all__ = ["KAFKA_ONLY_KEYS", "LISTENER_KEYS", "closest_key", "unknown_key_message", "unknown_keys"]

# Kafka broker/controller keys pykraft accepts and does not interpret (they land in
# NodeConfig.extra; a few, e.g. message.max.bytes, feed topic config defaults).
KAFKA_ONLY_KEYS = frozenset(
    {
        "auto.create.topics.enable",
        "background.threads",
        "broker.id",
        "compression.type",
        "connections.max.idle.ms",
        "controlled.shutdown.enable",
        "delete.topic.enable",
        "group.initial.rebalance.delay.ms",
        "log.cleanup.policy",
        "log.flush.interval.messages",
        "log.flush.interval.ms",
        "log.index.interval.bytes",
        "log.index.size.max.bytes",
        "log.retention.check.interval.ms",
        "log.roll.hours",
        "log.roll.ms",
        "log.segment.delete.delay.ms",
        "message.max.bytes",
        "metadata.log.max.snapshot.interval.ms",
        "num.io.threads",
        "num.network.threads",
        "num.recovery.threads.per.data.dir",
        "num.replica.fetchers",
        "offsets.topic.num.partitions",
        "offsets.topic.replication.factor",
        "producer.id.expiration.ms",
        "replica.fetch.max.bytes",
        "replica.fetch.wait.max.ms",
        "replica.socket.timeout.ms",
        "request.timeout.ms",
        "socket.request.max.bytes",
        "transaction.state.log.min.isr",
        "transaction.state.log.replication.factor",
        "unstable.api.versions.enable",
        "unstable.feature.versions.enable",
    }
)

# The keys that set where a node listens; a file that has none of them but has an
# unknown key resembling one is refused rather than started on the default listener.
LISTENER_KEYS = ("listeners", "advertised.listeners")


def unknown_keys(props: Iterable[str], interpreted: Iterable[str]) -> list[str]:
    """The supplied keys that are neither interpreted by pykraft nor Kafka keys it accepts, in file order."""
    known = KAFKA_ONLY_KEYS | frozenset(interpreted)
    return [key for key in props if key not in known]


def closest_key(key: str, interpreted: Iterable[str]) -> str | None:
    """The known key `key` is most likely a misspelling of, if any is close."""
    candidates = sorted(KAFKA_ONLY_KEYS | frozenset(interpreted))
    found = difflib.get_close_matches(key, candidates, n=1, cutoff=0.8)
    return found[0] if found else None


def unknown_key_message(key: str, interpreted: Iterable[str]) -> str:
    """Kafka's warning for an unknown key, plus the closest known key when there is one."""
    message = f"The configuration '{key}' was supplied but isn't a known config."
    guess = closest_key(key, interpreted)
    return message if guess is None else f"{message} Did you mean '{guess}'?"


def misspelled_listener_keys(props: Mapping[str, str], interpreted: Iterable[str]) -> list[str]:
    """Unknown keys that look like a listener key (only meaningful when no listener key is set)."""
    out = []
    for key in unknown_keys(props, interpreted):
        guess = closest_key(key, interpreted)
        if guess in LISTENER_KEYS or (guess is None and "listen" in key.lower()):
            out.append(key)
    return out
