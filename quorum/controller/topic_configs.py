"""Topic-level configs: Kafka's names, types, defaults, validators and DescribeConfigs view.

The definitions follow Kafka 3.9's ``LogConfig`` (the same names, types, defaults and valid
ranges, in the same order), parsed the way Kafka's ``ConfigDef`` parses strings, with Kafka's
error messages. Left out: ``message.format.version`` (ignored since 3.0, removed in 4.0) and
the tiered-storage configs (``remote.storage.enable``, ``local.retention.*``,
``remote.log.*``), which pykraft has no use for; they are unknown names here.

A topic config the topic does not set takes the broker's value: each config has broker
"synonyms" (``retention.ms`` ← ``log.retention.ms``, ``log.retention.minutes``,
``log.retention.hours``), read from the broker's config (``broker_defaults``: broker config
name → string value, as in its ``.properties``) and otherwise from the broker config's own
default.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Final, Protocol

from quorum.controller.config_entry import ConfigEntry, ConfigSource, ConfigSynonym, ConfigType
from quorum.controller.errors import InvalidConfigError
from quorum.frozen_init import fast_frozen_init

ConfigValue = bool | int | float | str | tuple[str, ...]
"""A parsed config value: BOOLEAN → bool, INT/LONG → int, DOUBLE → float, STRING → str, LIST → tuple."""

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1


# ----------------------------------------------------------------------------- Java-faithful parsing


def _java_trim(s: str) -> str:
    """Java's ``String.trim()``: strip characters up to U+0020 at both ends."""
    start, end = 0, len(s)
    while start < end and s[start] <= " ":
        start += 1
    while end > start and s[end - 1] <= " ":
        end -= 1
    return s[start:end]


_INT_RE = re.compile(r"[+-]?[0-9]+")
_DEC_FLOAT_RE = re.compile(r"[+-]?(?:NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?)")
_HEX_FLOAT_RE = re.compile(r"([+-]?)0[xX]((?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?[0-9]+)[fFdD]?")
_LIST_SPLIT_RE = re.compile(r"[ \t\n\x0b\f\r]*,[ \t\n\x0b\f\r]*")


def java_double_str(value: float) -> str:
    """Java's ``Double.toString``: "0.5", "2.0", "1.0E10", "1.0E-5", "NaN", "Infinity"."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    if 1e-3 <= abs(value) < 1e7:
        text = repr(value)
        return text if "." in text else text + ".0"
    d = Decimal(repr(value))
    digits = "".join(str(x) for x in d.as_tuple().digits).lstrip("0").rstrip("0") or "0"
    mantissa = digits[0] + "." + (digits[1:] or "0")
    return ("-" if value < 0 else "") + mantissa + "E" + str(d.adjusted())


def _java_list_str(items: Sequence[str]) -> str:
    return "[" + ", ".join(items) + "]"


def _invalid(name: str, value: object, message: str | None) -> InvalidConfigError:
    """Kafka's ``ConfigException(name, value, message)`` text, as an INVALID_CONFIG error."""
    suffix = f": {message}" if message else ""
    return InvalidConfigError(name, f"Invalid value {value} for configuration {name}{suffix}")


def _display(value: ConfigValue) -> str:
    """A parsed value as Java's ``toString`` prints it inside error messages."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return java_double_str(value)
    if isinstance(value, tuple):
        return _java_list_str(value)
    return str(value)


def parse_typed(name: str, raw: str, type_: ConfigType) -> ConfigValue:
    """Parse a config string as Kafka's ``ConfigDef.parseType`` does (no validator)."""
    if type_ is _LONG or type_ is _INT:
        if raw.isdigit() and raw.isascii():  # the common shape: [0-9]+, nothing to trim
            text = raw
        else:
            text = _java_trim(raw)
            if not _INT_RE.fullmatch(text):
                text = ""
        # More than 19 digits past the leading zeros is out of any range here; int() sees the
        # digits alone (it refuses strings of over 4,300 with a ValueError of its own).
        negative = text[:1] == "-"
        digits = text.lstrip("+-").lstrip("0")
        if not text or len(digits) > 19:
            number = LONG_MAX + 1
        else:
            number = -int(digits or "0") if negative else int(digits or "0")
        if (INT_MIN <= number <= INT_MAX) if type_ is _INT else (LONG_MIN <= number <= LONG_MAX):
            return number
        raise _invalid(name, raw, f"Not a number of type {type_.name}")
    trimmed = _java_trim(raw)
    if type_ is _BOOLEAN:
        if trimmed.lower() == "true":
            return True
        if trimmed.lower() == "false":
            return False
        raise _invalid(name, raw, "Expected value to be either true or false")
    if type_ is _STRING:
        return trimmed
    if type_ is _DOUBLE:
        if _DEC_FLOAT_RE.fullmatch(trimmed):
            body = trimmed[:-1] if trimmed[-1] in "fFdD" else trimmed
            return float(body.replace("Infinity", "inf").replace("NaN", "nan"))
        hex_match = _HEX_FLOAT_RE.fullmatch(trimmed)
        if hex_match:
            return float.fromhex(hex_match.group(1) + "0x" + hex_match.group(2))
        raise _invalid(name, raw, "Not a number of type DOUBLE")
    # LIST
    if trimmed == "":
        return ()
    return tuple(_LIST_SPLIT_RE.split(trimmed))


# The types as module constants: a compiled module reads these without an attribute lookup
# on the enum class per comparison (parse_typed runs for every config value of every write).
_BOOLEAN: Final = ConfigType.BOOLEAN
_STRING: Final = ConfigType.STRING
_INT: Final = ConfigType.INT
_LONG: Final = ConfigType.LONG
_DOUBLE: Final = ConfigType.DOUBLE


def format_value(value: ConfigValue) -> str:
    """A parsed value as Kafka's ``ConfigDef.convertToString`` writes it (lists comma-joined)."""
    if isinstance(value, tuple):
        return ",".join(value)
    return _display(value)


# ----------------------------------------------------------------------------- validators


class Validator(Protocol):
    def ensure_valid(self, name: str, value: ConfigValue) -> None: ...

    def describe(self) -> str: ...


@dataclass(frozen=True, slots=True)
class Range:
    """Kafka's ``Range.atLeast`` / ``Range.between`` (bounds inclusive)."""

    min: int | None = None
    max: int | None = None

    def ensure_valid(self, name: str, value: ConfigValue) -> None:
        assert isinstance(value, (int, float)) and not isinstance(value, bool)
        if self.min is not None and float(value) < float(self.min):
            raise _invalid(name, _display(value), f"Value must be at least {self.min}")
        if self.max is not None and float(value) > float(self.max):
            raise _invalid(name, _display(value), f"Value must be no more than {self.max}")

    def describe(self) -> str:
        if self.min is None and self.max is None:
            return "[...]"
        if self.min is None:
            return f"[...,{self.max}]"
        if self.max is None:
            return f"[{self.min},...]"
        return f"[{self.min},...,{self.max}]"


fast_frozen_init(Range)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class ValidString:
    """One of a fixed set of strings (case-sensitive)."""

    values: tuple[str, ...]

    def ensure_valid(self, name: str, value: ConfigValue) -> None:
        assert isinstance(value, str)
        if value not in self.values:
            raise _invalid(name, value, "String must be one of: " + ", ".join(self.values))

    def describe(self) -> str:
        return "[" + ", ".join(self.values) + "]"


fast_frozen_init(ValidString)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class ValidList:
    """Every list element is one of a fixed set of strings (an empty list is allowed)."""

    values: tuple[str, ...]

    def ensure_valid(self, name: str, value: ConfigValue) -> None:
        assert isinstance(value, tuple)
        for item in value:
            ValidString(self.values).ensure_valid(name, item)

    def describe(self) -> str:
        return ValidString(self.values).describe()


fast_frozen_init(ValidList)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class LevelOrDefault:
    """A compression level in [min, max], or the library's "default level" sentinel (gzip's -1)."""

    min: int
    max: int
    default: int

    def ensure_valid(self, name: str, value: ConfigValue) -> None:
        assert isinstance(value, int)
        if value > self.max or (value < self.min and value != self.default):
            raise _invalid(name, value, f"Value must be between {self.min} and {self.max} or equal to {self.default}")

    def describe(self) -> str:
        return f"[{self.min},...,{self.max}] or {self.default}"


fast_frozen_init(LevelOrDefault)  # not a decorator: mypyc makes a decorated class a Python class


_THROTTLED_ITEM = re.compile(r"(?:[0-9]+:[0-9]+)?")


@dataclass(frozen=True, slots=True)
class ThrottledReplicas:
    """``*`` or a list of ``partitionId:brokerId`` pairs (Kafka's ``ThrottledReplicaListValidator``)."""

    def ensure_valid(self, name: str, value: ConfigValue) -> None:
        assert isinstance(value, tuple)
        items = [_java_trim(v) for v in value]
        if not (all(_THROTTLED_ITEM.fullmatch(i) for i in items) or "".join(items) == "*"):
            raise _invalid(
                name,
                _java_list_str(value),
                f"{name} must be the literal '*' or a list of replicas in the following format: "
                "[partitionId]:[brokerId],[partitionId]:[brokerId],...",
            )

    def describe(self) -> str:
        return "[partitionId]:[brokerId],[partitionId]:[brokerId],..."


fast_frozen_init(ThrottledReplicas)  # not a decorator: mypyc makes a decorated class a Python class


# ----------------------------------------------------------------------------- definitions


@dataclass(frozen=True, slots=True)
class BrokerSynonym:
    """A broker config a topic config falls back to; ``multiplier`` converts its unit to the topic's."""

    name: str
    type: ConfigType
    default: str | None
    """The broker config's own default (Kafka's ``KafkaConfig``), or None if it has none."""
    multiplier: int = 1


fast_frozen_init(BrokerSynonym)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class TopicConfigDef:
    name: str
    type: ConfigType
    default: str
    """Kafka's ``LogConfig`` default, as a string."""
    validator: Validator | None
    doc: str
    synonyms: tuple[BrokerSynonym, ...] = ()
    """Broker configs in priority order; the first is Kafka's ``TOPIC_CONFIG_SYNONYMS`` entry."""
    deprecated: bool = False
    is_sensitive: bool = False
    read_only: bool = False

    @property
    def valid_values(self) -> str:
        return self.validator.describe() if self.validator is not None else ""


fast_frozen_init(TopicConfigDef)  # not a decorator: mypyc makes a decorated class a Python class


_HOUR_MS = 60 * 60 * 1000
_MINUTE_MS = 60 * 1000
_LONG_MAX_S = str(LONG_MAX)


def _same(name: str, type_: ConfigType, default: str | None) -> tuple[BrokerSynonym, ...]:
    return (BrokerSynonym(name, type_, default),)


_B, _S, _I, _L, _D, _LI = (
    ConfigType.BOOLEAN,
    ConfigType.STRING,
    ConfigType.INT,
    ConfigType.LONG,
    ConfigType.DOUBLE,
    ConfigType.LIST,
)

_DEFS: tuple[TopicConfigDef, ...] = (
    TopicConfigDef(
        "segment.bytes",
        _I,
        "1073741824",
        Range(min=14),
        "Size in bytes at which a partition's active log segment is closed and a new one started. "
        "Retention deletes whole segments, so smaller segments mean finer-grained deletion and more files.",
        _same("log.segment.bytes", _I, "1073741824"),
    ),
    TopicConfigDef(
        "segment.ms",
        _L,
        "604800000",
        Range(min=1),
        "Age in milliseconds after which the active segment is rolled even if it is not full, so that "
        "retention and compaction can act on old data.",
        (BrokerSynonym("log.roll.ms", _L, None), BrokerSynonym("log.roll.hours", _I, "168", _HOUR_MS)),
    ),
    TopicConfigDef(
        "segment.jitter.ms",
        _L,
        "0",
        Range(min=0),
        "Largest random amount subtracted from segment.ms per segment, so that many partitions do not "
        "all roll their segments at the same moment.",
        (BrokerSynonym("log.roll.jitter.ms", _L, None), BrokerSynonym("log.roll.jitter.hours", _I, "0", _HOUR_MS)),
    ),
    TopicConfigDef(
        "segment.index.bytes",
        _I,
        "10485760",
        Range(min=4),
        "Size in bytes preallocated for each segment's offset index (and time index).",
        _same("log.index.size.max.bytes", _I, "10485760"),
    ),
    TopicConfigDef(
        "flush.messages",
        _L,
        _LONG_MAX_S,
        Range(min=1),
        "Number of messages appended to a partition after which the log is forced to disk. "
        "The default leaves flushing to the operating system and relies on replication for durability.",
        _same("log.flush.interval.messages", _L, _LONG_MAX_S),
    ),
    TopicConfigDef(
        "flush.ms",
        _L,
        _LONG_MAX_S,
        Range(min=0),
        "Time in milliseconds after which appended data is forced to disk. "
        "The default leaves flushing to the operating system.",
        (
            BrokerSynonym("log.flush.interval.ms", _L, None),
            BrokerSynonym("log.flush.scheduler.interval.ms", _L, _LONG_MAX_S),
        ),
    ),
    TopicConfigDef(
        "retention.bytes",
        _L,
        "-1",
        None,
        "Largest size in bytes a partition's log may reach before its oldest segments are deleted "
        "(with the delete cleanup policy). It applies per partition; -1 means no size limit.",
        _same("log.retention.bytes", _L, "-1"),
    ),
    TopicConfigDef(
        "retention.ms",
        _L,
        "604800000",
        Range(min=-1),
        "How long in milliseconds a segment is kept, judged by its newest record's timestamp, before it "
        "is deleted (with the delete cleanup policy); -1 means no time limit.",
        (
            BrokerSynonym("log.retention.ms", _L, None),
            BrokerSynonym("log.retention.minutes", _I, None, _MINUTE_MS),
            BrokerSynonym("log.retention.hours", _I, "168", _HOUR_MS),
        ),
    ),
    TopicConfigDef(
        "max.message.bytes",
        _I,
        "1048588",
        Range(min=0),
        "Largest record batch, after compression, that the topic accepts; larger produce requests fail "
        "with MESSAGE_TOO_LARGE. Consumers' fetch sizes must allow batches this large.",
        _same("message.max.bytes", _I, "1048588"),
    ),
    TopicConfigDef(
        "index.interval.bytes",
        _I,
        "4096",
        Range(min=0),
        "Bytes of log between two entries of the offset index: denser indexes make lookups faster "
        "and the index larger.",
        _same("log.index.interval.bytes", _I, "4096"),
    ),
    TopicConfigDef(
        "delete.retention.ms",
        _L,
        "86400000",
        Range(min=0),
        "For compacted topics, how long in milliseconds a delete marker (tombstone) is kept so that "
        "consumers reading from the start still see the deletion.",
        _same("log.cleaner.delete.retention.ms", _L, "86400000"),
    ),
    TopicConfigDef(
        "min.compaction.lag.ms",
        _L,
        "0",
        Range(min=0),
        "Shortest time in milliseconds a record stays uncompacted in the log.",
        _same("log.cleaner.min.compaction.lag.ms", _L, "0"),
    ),
    TopicConfigDef(
        "max.compaction.lag.ms",
        _L,
        _LONG_MAX_S,
        Range(min=1),
        "Longest time in milliseconds a record may stay ineligible for compaction.",
        _same("log.cleaner.max.compaction.lag.ms", _L, _LONG_MAX_S),
    ),
    TopicConfigDef(
        "file.delete.delay.ms",
        _L,
        "60000",
        Range(min=0),
        "How long in milliseconds a deleted segment's files wait before they are removed from disk.",
        _same("log.segment.delete.delay.ms", _L, "60000"),
    ),
    TopicConfigDef(
        "min.cleanable.dirty.ratio",
        _D,
        "0.5",
        Range(min=0, max=1),
        "Share of the log that must be uncompacted (dirty) before the cleaner compacts it: lower means "
        "more frequent compaction and less wasted space.",
        _same("log.cleaner.min.cleanable.ratio", _D, "0.5"),
    ),
    TopicConfigDef(
        "cleanup.policy",
        _LI,
        "delete",
        ValidList(("compact", "delete")),
        "How old segments are cleaned up: 'delete' removes them by retention time or size, 'compact' "
        "keeps the latest record per key; both may be given, comma-separated.",
        _same("log.cleanup.policy", _LI, "delete"),
    ),
    TopicConfigDef(
        "unclean.leader.election.enable",
        _B,
        "false",
        None,
        "Whether a replica outside the ISR may become leader when no in-sync replica is available, "
        "trading possible data loss for availability.",
        _same("unclean.leader.election.enable", _B, "false"),
    ),
    TopicConfigDef(
        "min.insync.replicas",
        _I,
        "1",
        Range(min=1),
        "Fewest in-sync replicas that must hold a write sent with acks=all; with fewer in the ISR the "
        "leader rejects such writes with NOT_ENOUGH_REPLICAS.",
        _same("min.insync.replicas", _I, "1"),
    ),
    TopicConfigDef(
        "compression.type",
        _S,
        "producer",
        ValidString(("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")),
        "Compression the broker stores the topic's data with: a codec name, 'uncompressed', or "
        "'producer' to keep whatever the producer sent.",
        _same("compression.type", _S, "producer"),
    ),
    TopicConfigDef(
        "compression.gzip.level",
        _I,
        "-1",
        LevelOrDefault(1, 9, -1),
        "Compression level used when compression.type is gzip.",
        _same("compression.gzip.level", _I, "-1"),
    ),
    TopicConfigDef(
        "compression.lz4.level",
        _I,
        "9",
        Range(min=1, max=17),
        "Compression level used when compression.type is lz4.",
        _same("compression.lz4.level", _I, "9"),
    ),
    TopicConfigDef(
        "compression.zstd.level",
        _I,
        "3",
        Range(min=-131072, max=22),
        "Compression level used when compression.type is zstd.",
        _same("compression.zstd.level", _I, "3"),
    ),
    TopicConfigDef(
        "preallocate",
        _B,
        "false",
        None,
        "Whether a new segment's file is allocated on disk at its full size when it is created.",
        _same("log.preallocate", _B, "false"),
    ),
    TopicConfigDef(
        "message.timestamp.type",
        _S,
        "CreateTime",
        ValidString(("CreateTime", "LogAppendTime")),
        "Which timestamp records carry: the producer's (CreateTime) or the broker's append time (LogAppendTime).",
        _same("log.message.timestamp.type", _S, "CreateTime"),
    ),
    TopicConfigDef(
        "message.timestamp.difference.max.ms",
        _L,
        _LONG_MAX_S,
        Range(min=0),
        "Deprecated (removed in Kafka 4.0): largest allowed distance between a CreateTime timestamp and "
        "the broker's clock. Use message.timestamp.before.max.ms and message.timestamp.after.max.ms.",
        _same("log.message.timestamp.difference.max.ms", _L, _LONG_MAX_S),
        deprecated=True,
    ),
    TopicConfigDef(
        "message.timestamp.before.max.ms",
        _L,
        _LONG_MAX_S,
        Range(min=0),
        "How far in milliseconds a CreateTime timestamp may lie before the broker's clock; older records are rejected.",
        _same("log.message.timestamp.before.max.ms", _L, _LONG_MAX_S),
    ),
    TopicConfigDef(
        "message.timestamp.after.max.ms",
        _L,
        _LONG_MAX_S,
        Range(min=0),
        "How far in milliseconds a CreateTime timestamp may lie after the broker's clock; records from "
        "further in the future are rejected.",
        _same("log.message.timestamp.after.max.ms", _L, _LONG_MAX_S),
    ),
    TopicConfigDef(
        "leader.replication.throttled.replicas",
        _LI,
        "",
        ThrottledReplicas(),
        "Replicas whose replication is throttled on the leader side during a reassignment: "
        "partitionId:brokerId pairs, or '*' for all.",
    ),
    TopicConfigDef(
        "follower.replication.throttled.replicas",
        _LI,
        "",
        ThrottledReplicas(),
        "Replicas whose replication is throttled on the follower side during a reassignment: "
        "partitionId:brokerId pairs, or '*' for all.",
    ),
    TopicConfigDef(
        "message.downconversion.enable",
        _B,
        "true",
        None,
        "Deprecated (removed in Kafka 4.0): whether the broker converts batches to an older format for "
        "old consumers' fetches.",
        _same("log.message.downconversion.enable", _B, "true"),
        deprecated=True,
    ),
)

TOPIC_CONFIGS: Mapping[str, TopicConfigDef] = {d.name: d for d in _DEFS}
"""Every topic config, in Kafka's definition order (the order values are checked in)."""
_DEFINITION_ORDER: Mapping[str, int] = {name: i for i, name in enumerate(TOPIC_CONFIGS)}


def topic_config_names() -> list[str]:
    return list(TOPIC_CONFIGS)


def config_def(name: str) -> TopicConfigDef:
    """The definition of ``name``; InvalidConfigError "Unknown topic config name: ..." if none."""
    definition = TOPIC_CONFIGS.get(name)
    if definition is None:
        raise InvalidConfigError(name, f"Unknown topic config name: {name}")
    return definition


def parse_value(name: str, raw: str) -> ConfigValue:
    """Parse and validate one topic config value (unknown name, type, then validator)."""
    definition = config_def(name)
    value = parse_typed(name, raw, definition.type)
    if definition.validator is not None:
        definition.validator.ensure_valid(name, value)
    return value


# ----------------------------------------------------------------------------- broker fallback


def _broker_layers(
    broker_defaults: Mapping[str, str] | None,
    dynamic_default_broker: Mapping[str, str] | None,
    dynamic_broker: Mapping[str, str] | None,
) -> list[tuple[ConfigSource, Mapping[str, str]]]:
    """The broker config layers in Kafka's precedence order (highest first), without built-in defaults."""
    return [
        (ConfigSource.DYNAMIC_BROKER_CONFIG, dynamic_broker or {}),
        (ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, dynamic_default_broker or {}),
        (ConfigSource.STATIC_BROKER_CONFIG, broker_defaults or {}),
    ]


def broker_default(
    name: str,
    broker_defaults: Mapping[str, str] | None = None,
    *,
    dynamic_default_broker: Mapping[str, str] | None = None,
    dynamic_broker: Mapping[str, str] | None = None,
) -> ConfigValue:
    """The value a topic gets for ``name`` when it does not set it: the broker's, as Kafka derives it.

    The first broker synonym that is set (dynamic per-broker, then dynamic cluster default, then
    static) or has a built-in default wins, converted to the topic config's unit: so
    ``log.retention.ms`` beats ``log.retention.minutes`` beats ``log.retention.hours`` (default
    168 h). A negative retention time means -1 (no limit), as in Kafka.
    """
    definition = config_def(name)
    layers = _broker_layers(broker_defaults, dynamic_default_broker, dynamic_broker)
    for synonym in definition.synonyms:
        raw = next((layer[synonym.name] for _, layer in layers if synonym.name in layer), synonym.default)
        if raw is None:
            continue
        value = parse_typed(synonym.name, raw, synonym.type)
        if synonym.multiplier != 1:
            assert isinstance(value, int) and not isinstance(value, bool)
            value *= synonym.multiplier
        if name == "retention.ms" and isinstance(value, int) and value < 0:
            value = -1
        return value
    return parse_typed(name, definition.default, definition.type)


def default_configs(
    broker_defaults: Mapping[str, str] | None = None,
    *,
    dynamic_default_broker: Mapping[str, str] | None = None,
    dynamic_broker: Mapping[str, str] | None = None,
) -> dict[str, ConfigValue]:
    """Every topic config's parsed value for a topic that overrides none: the broker's
    (`broker_default`), in definition order."""
    return {
        name: broker_default(
            name, broker_defaults, dynamic_default_broker=dynamic_default_broker, dynamic_broker=dynamic_broker
        )
        for name in TOPIC_CONFIGS
    }


def effective_config(
    name: str,
    explicit: Mapping[str, str],
    broker_defaults: Mapping[str, str] | None = None,
    *,
    dynamic_default_broker: Mapping[str, str] | None = None,
    dynamic_broker: Mapping[str, str] | None = None,
) -> ConfigValue:
    """One topic config's parsed value for a topic with ``explicit`` overrides: its own value,
    else the broker's (`broker_default`). `effective_configs` gives them all."""
    raw = explicit.get(name)
    if raw is not None:
        return parse_value(name, raw)
    return broker_default(
        name, broker_defaults, dynamic_default_broker=dynamic_default_broker, dynamic_broker=dynamic_broker
    )


def effective_configs(
    explicit: Mapping[str, str],
    broker_defaults: Mapping[str, str] | None = None,
    *,
    dynamic_default_broker: Mapping[str, str] | None = None,
    dynamic_broker: Mapping[str, str] | None = None,
    defaults: Mapping[str, ConfigValue] | None = None,
) -> dict[str, ConfigValue]:
    """Every topic config's parsed value for a topic with ``explicit`` overrides (a broker's
    LogConfig), in definition order; names that are no topic config are ignored.

    ``defaults``: `default_configs` of the same broker layers, when the caller keeps it (a
    broker resolving many topics against its static config parses its defaults once).
    """
    if defaults is None:
        defaults = default_configs(
            broker_defaults, dynamic_default_broker=dynamic_default_broker, dynamic_broker=dynamic_broker
        )
    result = dict(defaults)
    result.update(topic_overrides(explicit))
    return result


def topic_overrides(explicit: Mapping[str, str]) -> dict[str, ConfigValue]:
    """The parsed values of a topic's ``explicit`` overrides that are topic configs (the part of
    `effective_configs` that is the topic's own; names that are no topic config are ignored)."""
    return {name: parse_value(name, raw) for name, raw in explicit.items() if name in TOPIC_CONFIGS}


# ----------------------------------------------------------------------------- validation


# name -> (the broker defaults it was derived from, a copy; the value): every config write
# validates against the same few static defaults, whose derivation costs more than the check.
_STATIC_DEFAULTS: dict[str, tuple[dict[str, str], ConfigValue]] = {}


def _static_default(name: str, broker_defaults: Mapping[str, str] | None) -> ConfigValue:
    """`broker_default(name, broker_defaults)`, remembered for the last broker defaults seen."""
    current = broker_defaults or {}
    known = _STATIC_DEFAULTS.get(name)
    if known is not None and known[0] == current:
        return known[1]
    layer = dict(current)
    value = broker_default(name, layer)
    _STATIC_DEFAULTS[name] = (layer, value)
    return value


_STATIC_LAG_DEFAULTS: list[tuple[dict[str, str], ConfigValue, ConfigValue]] = []


def _static_lag_defaults(broker_defaults: Mapping[str, str] | None) -> tuple[ConfigValue, ConfigValue]:
    """`_static_default` of min.compaction.lag.ms, then of max.compaction.lag.ms (a write that
    sets neither needs both): remembered together, one comparison of the broker defaults."""
    current = broker_defaults or {}
    if _STATIC_LAG_DEFAULTS:
        layer, min_lag, max_lag = _STATIC_LAG_DEFAULTS[0]
        if layer == current:
            return min_lag, max_lag
    min_lag = _static_default("min.compaction.lag.ms", broker_defaults)
    max_lag = _static_default("max.compaction.lag.ms", broker_defaults)
    _STATIC_LAG_DEFAULTS[:] = [(dict(current), min_lag, max_lag)]
    return min_lag, max_lag


def validate_configs(
    configs: Mapping[str, str | None],
    *,
    broker_defaults: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Validate a topic's configs as the KRaft controller does; return them (values as given).

    ``configs`` is the full set of overrides the topic would have (for AlterConfigs: the
    existing ones with the change applied). Checks, in Kafka's order:

    1. null values: "Null value not supported for topic configs: a,b";
    2. unknown names: "Unknown topic config name: foo";
    3. each value's type and validator, in Kafka's definition order: "Invalid value abc for
       configuration retention.ms: Not a number of type LONG", "... Value must be at least -1";
    4. ``min.compaction.lag.ms`` must not exceed ``max.compaction.lag.ms`` (unset ones take the
       broker's value): "conflict topic config setting min.compaction.lag.ms (X) >
       max.compaction.lag.ms (Y)".

    Raises InvalidConfigError (INVALID_CONFIG) whose ``key`` names the offending config.
    """
    nulls: list[str] = []
    values: dict[str, str] = {}
    for k, v in configs.items():
        if v is None:
            nulls.append(k)
        else:
            values[k] = v
    if nulls:
        raise InvalidConfigError(",".join(nulls), "Null value not supported for topic configs: " + ",".join(nulls))
    for key in values:
        if key not in TOPIC_CONFIGS:
            config_def(key)  # raises: unknown name
    parsed: dict[str, ConfigValue] = {}
    for name in sorted(values, key=_DEFINITION_ORDER.__getitem__) if len(values) > 1 else values:
        parsed[name] = parse_value(name, values[name])
    min_lag = parsed.get("min.compaction.lag.ms")
    max_lag = parsed.get("max.compaction.lag.ms")
    if min_lag is None and max_lag is None:
        min_lag, max_lag = _static_lag_defaults(broker_defaults)
    if min_lag is None:
        min_lag = _static_default("min.compaction.lag.ms", broker_defaults)
    if max_lag is None:
        max_lag = _static_default("max.compaction.lag.ms", broker_defaults)
    assert isinstance(min_lag, int) and isinstance(max_lag, int)
    if min_lag > max_lag:
        raise InvalidConfigError(
            "min.compaction.lag.ms",
            f"conflict topic config setting min.compaction.lag.ms ({min_lag}) > max.compaction.lag.ms ({max_lag})",
        )
    return values


def min_isr_warning(min_insync_replicas: int, replication_factor: int) -> str | None:
    """Advice (never an error) when min.insync.replicas exceeds the replication factor.

    Kafka performs no such check at CreateTopics or AlterConfigs: the topic is created, and
    acks=all writes to it fail with NOT_ENOUGH_REPLICAS. pykraft's API may show this warning.
    """
    if min_insync_replicas > replication_factor:
        return (
            f"min.insync.replicas ({min_insync_replicas}) is larger than the replication factor "
            f"({replication_factor}): produce requests with acks=all will fail with NOT_ENOUGH_REPLICAS."
        )
    return None


# ----------------------------------------------------------------------------- describe


def _broker_synonym_names(primary: str) -> list[str]:
    """Kafka's ``brokerConfigSynonyms``: the broker configs that stand for one another."""
    groups = (
        ("log.roll.ms", "log.roll.hours"),
        ("log.roll.jitter.ms", "log.roll.jitter.hours"),
        ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    )
    for group in groups:
        if primary in group:
            return list(group)
    if primary == "log.flush.interval.ms":
        return ["log.flush.interval.ms", "log.flush.scheduler.interval.ms"]
    return [primary]


def _builtin_broker_defaults(definition: TopicConfigDef) -> dict[str, str]:
    return {s.name: s.default for s in definition.synonyms if s.default is not None}


def describe_config(
    name: str,
    explicit: Mapping[str, str],
    broker_defaults: Mapping[str, str] | None = None,
    *,
    dynamic_default_broker: Mapping[str, str] | None = None,
    dynamic_broker: Mapping[str, str] | None = None,
    include_synonyms: bool = True,
) -> ConfigEntry:
    """Describe one topic config the way a Kafka broker answers DescribeConfigs.

    The value is the topic's own (normalized as Kafka prints it: "TRUE" → "true") or the
    broker-derived one. Synonyms list the topic override (DYNAMIC_TOPIC_CONFIG), then the
    broker configs that are set (dynamic, then STATIC_BROKER_CONFIG) and the broker configs'
    built-in defaults (DEFAULT_CONFIG), starting from the primary broker synonym: like Kafka,
    a leading lower-priority synonym is dropped, so ``retention.ms`` backed only by
    ``log.retention.hours`` shows no synonyms. The source is the first synonym's, or
    DEFAULT_CONFIG.
    """
    definition = config_def(name)
    if name in explicit:
        value_str: str | None = format_value(parse_value(name, explicit[name]))
    else:
        value_str = format_value(
            broker_default(
                name, broker_defaults, dynamic_default_broker=dynamic_default_broker, dynamic_broker=dynamic_broker
            )
        )
    if definition.is_sensitive:
        value_str = None
    synonyms: list[ConfigSynonym] = []
    if definition.synonyms:
        primary = definition.synonyms[0].name
        names = _broker_synonym_names(primary)
        layers = [
            *_broker_layers(broker_defaults, dynamic_default_broker, dynamic_broker),
            (ConfigSource.DEFAULT_CONFIG, _builtin_broker_defaults(definition)),
        ]
        for source, layer in layers:
            for broker_name in names:
                if broker_name in layer:
                    shown = None if definition.is_sensitive else layer[broker_name]
                    synonyms.append(ConfigSynonym(broker_name, shown, source))
        while synonyms and synonyms[0].name != primary:
            synonyms.pop(0)
    if name in explicit:
        synonyms.insert(0, ConfigSynonym(name, value_str, ConfigSource.DYNAMIC_TOPIC_CONFIG))
    source = synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG
    return ConfigEntry(
        name=name,
        value=value_str,
        source=source,
        is_read_only=definition.read_only,
        is_sensitive=definition.is_sensitive,
        synonyms=tuple(synonyms) if include_synonyms else (),
        config_type=definition.type,
        documentation=definition.doc,
    )


def describe_all(
    explicit: Mapping[str, str],
    broker_defaults: Mapping[str, str] | None = None,
    *,
    names: Iterable[str] | None = None,
    dynamic_default_broker: Mapping[str, str] | None = None,
    dynamic_broker: Mapping[str, str] | None = None,
    include_synonyms: bool = True,
) -> list[ConfigEntry]:
    """Describe every topic config (or only ``names`` that exist; unknown ones are skipped, as in
    Kafka), sorted by name."""
    wanted = sorted(TOPIC_CONFIGS) if names is None else sorted({n for n in names if n in TOPIC_CONFIGS})
    return [
        describe_config(
            n,
            explicit,
            broker_defaults,
            dynamic_default_broker=dynamic_default_broker,
            dynamic_broker=dynamic_broker,
            include_synonyms=include_synonyms,
        )
        for n in wanted
    ]
