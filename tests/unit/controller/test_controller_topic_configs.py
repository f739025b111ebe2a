"""Topic configs: Kafka's names, types, defaults, validation messages and DescribeConfigs view."""

from __future__ import annotations

import pytest

from quorum.controller.errors import ErrorCode, InvalidConfigError
from quorum.controller.topic_configs import (
    LONG_MAX,
    TOPIC_CONFIGS,
    ConfigSource,
    ConfigSynonym,
    ConfigType,
    broker_default,
    config_def,
    default_configs,
    describe_all,
    describe_config,
    effective_config,
    effective_configs,
    format_value,
    java_double_str,
    min_isr_warning,
    parse_typed,
    parse_value,
    topic_config_names,
    validate_configs,
)

REQUIRED = [
    "cleanup.policy",
    "retention.ms",
    "retention.bytes",
    "segment.bytes",
    "segment.ms",
    "min.insync.replicas",
    "unclean.leader.election.enable",
    "max.message.bytes",
    "compression.type",
    "delete.retention.ms",
    "file.delete.delay.ms",
    "flush.messages",
    "flush.ms",
    "index.interval.bytes",
    "max.compaction.lag.ms",
    "min.compaction.lag.ms",
    "min.cleanable.dirty.ratio",
    "segment.index.bytes",
    "segment.jitter.ms",
    "message.timestamp.type",
    "message.timestamp.difference.max.ms",
    "message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms",
    "preallocate",
    "message.downconversion.enable",
]

KAFKA_DEFAULTS = {
    "cleanup.policy": ("delete",),
    "retention.ms": 604800000,
    "retention.bytes": -1,
    "segment.bytes": 1073741824,
    "segment.ms": 604800000,
    "segment.jitter.ms": 0,
    "segment.index.bytes": 10485760,
    "min.insync.replicas": 1,
    "unclean.leader.election.enable": False,
    "max.message.bytes": 1048588,
    "compression.type": "producer",
    "compression.gzip.level": -1,
    "compression.lz4.level": 9,
    "compression.zstd.level": 3,
    "delete.retention.ms": 86400000,
    "file.delete.delay.ms": 60000,
    "flush.messages": LONG_MAX,
    "flush.ms": LONG_MAX,
    "index.interval.bytes": 4096,
    "max.compaction.lag.ms": LONG_MAX,
    "min.compaction.lag.ms": 0,
    "min.cleanable.dirty.ratio": 0.5,
    "message.timestamp.type": "CreateTime",
    "message.timestamp.difference.max.ms": LONG_MAX,
    "message.timestamp.before.max.ms": LONG_MAX,
    "message.timestamp.after.max.ms": LONG_MAX,
    "preallocate": False,
    "message.downconversion.enable": True,
    "leader.replication.throttled.replicas": (),
    "follower.replication.throttled.replicas": (),
}


def error_of(configs, **kwargs) -> InvalidConfigError:
    with pytest.raises(InvalidConfigError) as e:
        validate_configs(configs, **kwargs)
    assert e.value.code == ErrorCode.INVALID_CONFIG == 40
    return e.value


# ----------------------------------------------------------------------------- definitions


def test_every_required_config_is_defined():
    assert set(REQUIRED) <= set(topic_config_names())


def test_defaults_are_kafkas_and_valid():
    assert set(KAFKA_DEFAULTS) == set(TOPIC_CONFIGS)
    for name, definition in TOPIC_CONFIGS.items():
        assert parse_value(name, definition.default) == KAFKA_DEFAULTS[name], name
        assert broker_default(name, {}) == KAFKA_DEFAULTS[name], name
        assert definition.doc and not definition.is_sensitive and not definition.read_only


def test_types():
    assert config_def("retention.ms").type is ConfigType.LONG
    assert config_def("segment.bytes").type is ConfigType.INT
    assert config_def("min.cleanable.dirty.ratio").type is ConfigType.DOUBLE
    assert config_def("cleanup.policy").type is ConfigType.LIST
    assert config_def("preallocate").type is ConfigType.BOOLEAN
    assert config_def("compression.type").type is ConfigType.STRING
    assert config_def("retention.ms").valid_values == "[-1,...]"
    assert config_def("min.cleanable.dirty.ratio").valid_values == "[0,...,1]"
    assert config_def("compression.gzip.level").valid_values == "[1,...,9] or -1"
    assert config_def("cleanup.policy").valid_values == "[compact, delete]"
    assert config_def("retention.bytes").valid_values == ""


# ----------------------------------------------------------------------------- validation paths


def test_valid_configs_are_returned_as_given():
    configs = {"retention.ms": " 1000 ", "cleanup.policy": "compact, delete", "preallocate": "TRUE"}
    assert validate_configs(configs) == configs
    assert validate_configs({}) == {}


def test_unknown_name():
    e = error_of({"retention.ms": "1", "foo": "1"})
    assert (e.key, e.message) == ("foo", "Unknown topic config name: foo")
    # Removed/unsupported configs are unknown too.
    assert error_of({"message.format.version": "3.0"}).message == "Unknown topic config name: message.format.version"


def test_null_values_first():
    e = error_of({"foo": None, "retention.ms": None, "segment.bytes": "x"})
    assert e.message == "Null value not supported for topic configs: foo,retention.ms"


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("retention.ms", "abc", "Invalid value abc for configuration retention.ms: Not a number of type LONG"),
        ("retention.ms", "1.5", "Invalid value 1.5 for configuration retention.ms: Not a number of type LONG"),
        (
            "retention.ms",
            "9223372036854775808",
            "Invalid value 9223372036854775808 for configuration retention.ms: Not a number of type LONG",
        ),
        ("retention.ms", "-2", "Invalid value -2 for configuration retention.ms: Value must be at least -1"),
        (
            "segment.bytes",
            "2147483648",
            "Invalid value 2147483648 for configuration segment.bytes: Not a number of type INT",
        ),
        ("segment.bytes", "13", "Invalid value 13 for configuration segment.bytes: Value must be at least 14"),
        ("segment.bytes", "", "Invalid value  for configuration segment.bytes: Not a number of type INT"),
        ("segment.ms", "0", "Invalid value 0 for configuration segment.ms: Value must be at least 1"),
        ("min.insync.replicas", "0", "Invalid value 0 for configuration min.insync.replicas: Value must be at least 1"),
        (
            "min.cleanable.dirty.ratio",
            "1.5",
            "Invalid value 1.5 for configuration min.cleanable.dirty.ratio: Value must be no more than 1",
        ),
        (
            "min.cleanable.dirty.ratio",
            "-1",
            "Invalid value -1.0 for configuration min.cleanable.dirty.ratio: Value must be at least 0",
        ),
        (
            "min.cleanable.dirty.ratio",
            "half",
            "Invalid value half for configuration min.cleanable.dirty.ratio: Not a number of type DOUBLE",
        ),
        (
            "unclean.leader.election.enable",
            "yes",
            "Invalid value yes for configuration unclean.leader.election.enable: "
            "Expected value to be either true or false",
        ),
        (
            "compression.type",
            "lz5",
            "Invalid value lz5 for configuration compression.type: String must be one of: "
            "uncompressed, zstd, lz4, snappy, gzip, producer",
        ),
        (
            "compression.type",
            "GZIP",
            "Invalid value GZIP for configuration compression.type: String must be one of: "
            "uncompressed, zstd, lz4, snappy, gzip, producer",
        ),
        (
            "message.timestamp.type",
            "createtime",
            "Invalid value createtime for configuration message.timestamp.type: "
            "String must be one of: CreateTime, LogAppendTime",
        ),
        (
            "cleanup.policy",
            "compact,foo",
            "Invalid value foo for configuration cleanup.policy: String must be one of: compact, delete",
        ),
        (
            "cleanup.policy",
            "compact,",
            "Invalid value  for configuration cleanup.policy: String must be one of: compact, delete",
        ),
        (
            "compression.gzip.level",
            "0",
            "Invalid value 0 for configuration compression.gzip.level: Value must be between 1 and 9 or equal to -1",
        ),
        (
            "compression.gzip.level",
            "10",
            "Invalid value 10 for configuration compression.gzip.level: Value must be between 1 and 9 or equal to -1",
        ),
        (
            "compression.lz4.level",
            "18",
            "Invalid value 18 for configuration compression.lz4.level: Value must be no more than 17",
        ),
        (
            "compression.zstd.level",
            "-131073",
            "Invalid value -131073 for configuration compression.zstd.level: Value must be at least -131072",
        ),
        (
            "max.compaction.lag.ms",
            "0",
            "Invalid value 0 for configuration max.compaction.lag.ms: Value must be at least 1",
        ),
        (
            "leader.replication.throttled.replicas",
            "0:1,x",
            "Invalid value [0:1, x] for configuration leader.replication.throttled.replicas: "
            "leader.replication.throttled.replicas must be the literal '*' or a list of replicas in the following "
            "format: [partitionId]:[brokerId],[partitionId]:[brokerId],...",
        ),
    ],
)
def test_bad_values(name, value, message):
    e = error_of({name: value})
    assert e.key == name
    assert e.message == message


@pytest.mark.parametrize(
    ("name", "value", "parsed"),
    [
        ("retention.ms", "-1", -1),
        ("retention.ms", " +42\t", 42),
        ("retention.bytes", "-5", -5),
        ("unclean.leader.election.enable", " True ", True),
        ("preallocate", "FALSE", False),
        ("cleanup.policy", "compact , delete", ("compact", "delete")),
        ("cleanup.policy", "delete,compact", ("delete", "compact")),
        ("cleanup.policy", "", ()),
        ("compression.type", " zstd ", "zstd"),
        ("min.cleanable.dirty.ratio", "0", 0.0),
        ("min.cleanable.dirty.ratio", "1", 1.0),
        ("min.cleanable.dirty.ratio", ".25", 0.25),
        ("min.cleanable.dirty.ratio", "5e-1", 0.5),
        ("min.cleanable.dirty.ratio", "0.75d", 0.75),
        ("min.cleanable.dirty.ratio", "0x1p-1", 0.5),
        ("compression.gzip.level", "-1", -1),
        ("compression.gzip.level", "9", 9),
        ("compression.zstd.level", "-131072", -131072),
        ("leader.replication.throttled.replicas", "*", ("*",)),
        ("follower.replication.throttled.replicas", "0:1, 1:2", ("0:1", "1:2")),
        ("flush.messages", "9223372036854775807", LONG_MAX),
    ],
)
def test_good_values_parse_as_kafka_does(name, value, parsed):
    assert parse_value(name, value) == parsed
    validate_configs({name: value})


def test_numbers_of_any_length_get_kafkas_answer():
    """Out of range however long (Python's int() refuses strings of over 4,300 digits with a
    ValueError of its own: that must not reach the caller); leading zeros count for nothing,
    as in Java's Long.parseLong."""
    for huge in ("9" * 5000, "-" + "9" * 5000, "1" * 20):
        with pytest.raises(InvalidConfigError, match="Not a number of type LONG"):
            parse_value("retention.ms", huge)
        with pytest.raises(InvalidConfigError, match="Not a number of type INT"):
            parse_value("segment.bytes", huge)
    assert parse_value("retention.ms", "0" * 5000 + "42") == 42
    assert parse_value("retention.ms", " +" + "0" * 30 + "9223372036854775807\t") == 9223372036854775807
    assert parse_value("segment.bytes", "0" * 30 + "2147483647") == 2147483647


def test_python_only_number_syntax_is_rejected():
    for bad in ("1_000", "١٢", "0x10", "1e3"):
        with pytest.raises(InvalidConfigError, match="Not a number of type LONG"):
            parse_value("retention.ms", bad)
    for bad in ("1_0.5", "inf", "nan", "0.5 0.5"):
        with pytest.raises(InvalidConfigError, match="Not a number of type DOUBLE"):
            parse_value("min.cleanable.dirty.ratio", bad)


def test_first_bad_value_in_kafkas_definition_order():
    # Both are bad; segment.bytes is defined before retention.ms in Kafka's LogConfig.
    e = error_of({"retention.ms": "x", "segment.bytes": "x"})
    assert e.key == "segment.bytes"


def test_compaction_lag_conflict():
    e = error_of({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"})
    assert e.message == "conflict topic config setting min.compaction.lag.ms (10) > max.compaction.lag.ms (5)"
    validate_configs({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "10"})
    # An unset bound is the broker's.
    e = error_of({"min.compaction.lag.ms": "10"}, broker_defaults={"log.cleaner.max.compaction.lag.ms": "7"})
    assert e.message == "conflict topic config setting min.compaction.lag.ms (10) > max.compaction.lag.ms (7)"
    e = error_of({"max.compaction.lag.ms": "3"}, broker_defaults={"log.cleaner.min.compaction.lag.ms": "4"})
    assert e.message == "conflict topic config setting min.compaction.lag.ms (4) > max.compaction.lag.ms (3)"


def test_parse_typed_boolean_keeps_the_raw_value_in_the_message():
    with pytest.raises(InvalidConfigError, match=r"^Invalid value  nope  for configuration x: Expected"):
        parse_typed("x", " nope ", ConfigType.BOOLEAN)


# ----------------------------------------------------------------------------- broker defaults


@pytest.mark.parametrize(
    ("broker", "expected"),
    [
        ({}, 604800000),
        ({"log.retention.hours": "1"}, 3600000),
        ({"log.retention.minutes": "2", "log.retention.hours": "1"}, 120000),
        ({"log.retention.ms": "5", "log.retention.minutes": "2"}, 5),
        ({"log.retention.ms": "-7"}, -1),
        ({"log.retention.hours": "-1"}, -1),
    ],
)
def test_retention_ms_from_broker_synonyms(broker, expected):
    assert broker_default("retention.ms", broker) == expected


def test_other_broker_derived_defaults():
    assert broker_default("segment.ms", {"log.roll.hours": "2"}) == 7200000
    assert broker_default("segment.ms", {"log.roll.ms": "99", "log.roll.hours": "2"}) == 99
    assert broker_default("segment.jitter.ms", {"log.roll.jitter.hours": "1"}) == 3600000
    assert broker_default("flush.ms", {"log.flush.scheduler.interval.ms": "1000"}) == 1000
    assert broker_default("flush.ms", {"log.flush.interval.ms": "5", "log.flush.scheduler.interval.ms": "1"}) == 5
    assert broker_default("max.message.bytes", {"message.max.bytes": "2000000"}) == 2000000
    assert broker_default("min.insync.replicas", {"min.insync.replicas": "2"}) == 2
    assert broker_default("unclean.leader.election.enable", {"unclean.leader.election.enable": "true"}) is True
    assert broker_default("cleanup.policy", {"log.cleanup.policy": "compact"}) == ("compact",)
    assert broker_default("min.cleanable.dirty.ratio", {"log.cleaner.min.cleanable.ratio": "0.1"}) == 0.1
    # Dynamic broker configs beat static ones, the per-broker one beats the cluster default.
    assert (
        broker_default(
            "retention.bytes", {"log.retention.bytes": "1"}, dynamic_default_broker={"log.retention.bytes": "2"}
        )
        == 2
    )
    assert (
        broker_default(
            "retention.bytes",
            {"log.retention.bytes": "1"},
            dynamic_default_broker={"log.retention.bytes": "2"},
            dynamic_broker={"log.retention.bytes": "3"},
        )
        == 3
    )


def test_bad_broker_value_names_the_broker_config():
    with pytest.raises(InvalidConfigError) as e:
        broker_default("retention.ms", {"log.retention.hours": "week"})
    assert e.value.key == "log.retention.hours"
    assert e.value.message == "Invalid value week for configuration log.retention.hours: Not a number of type INT"


def test_effective_configs():
    values = effective_configs({"retention.ms": "10", "cleanup.policy": "compact"}, {"min.insync.replicas": "2"})
    assert set(values) == set(TOPIC_CONFIGS)
    assert values["retention.ms"] == 10
    assert values["cleanup.policy"] == ("compact",)
    assert values["min.insync.replicas"] == 2
    assert values["segment.bytes"] == 1073741824


def test_effective_configs_over_kept_defaults_match_a_full_resolution():
    broker = {"log.retention.hours": "1", "min.insync.replicas": "2", "log.segment.bytes": "4096"}
    kept = default_configs(broker)
    assert list(kept) == list(TOPIC_CONFIGS)  # definition order
    assert kept["retention.ms"] == 3_600_000 and kept["min.insync.replicas"] == 2
    for explicit in ({}, {"retention.ms": "10"}, {"segment.bytes": "20000", "cleanup.policy": "compact,delete"}):
        full = effective_configs(explicit, broker)
        assert effective_configs(explicit, defaults=kept) == full
        assert {name: effective_config(name, explicit, broker) for name in TOPIC_CONFIGS} == full
        assert list(full) == list(TOPIC_CONFIGS)
    assert kept["retention.ms"] == 3_600_000  # the kept defaults are not changed by a resolution
    with pytest.raises(InvalidConfigError, match="Not a number of type LONG"):
        effective_configs({"retention.ms": "soon"}, defaults=kept)


def test_unknown_name_for_single_lookups():
    for call in (lambda: config_def("nope"), lambda: broker_default("nope"), lambda: describe_config("nope", {})):
        with pytest.raises(InvalidConfigError, match="^Unknown topic config name: nope$"):
            call()


# ----------------------------------------------------------------------------- describe


def test_describe_default_value():
    entry = describe_config("segment.bytes", {}, {})
    assert entry.value == "1073741824"
    assert entry.source is ConfigSource.DEFAULT_CONFIG
    assert entry.is_default and not entry.is_read_only and not entry.is_sensitive
    assert entry.synonyms == (ConfigSynonym("log.segment.bytes", "1073741824", ConfigSource.DEFAULT_CONFIG),)
    assert entry.config_type is ConfigType.INT
    assert entry.documentation == config_def("segment.bytes").doc


def test_describe_explicit_topic_value_is_normalized():
    entry = describe_config("unclean.leader.election.enable", {"unclean.leader.election.enable": " TRUE"}, {})
    assert entry.value == "true"
    assert entry.source is ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert not entry.is_default
    assert entry.synonyms == (
        ConfigSynonym("unclean.leader.election.enable", "true", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        ConfigSynonym("unclean.leader.election.enable", "false", ConfigSource.DEFAULT_CONFIG),
    )
    assert describe_config("cleanup.policy", {"cleanup.policy": "compact , delete"}).value == "compact,delete"
    assert describe_config("min.cleanable.dirty.ratio", {"min.cleanable.dirty.ratio": "0.50"}).value == "0.5"


def test_describe_static_broker_value():
    entry = describe_config("retention.ms", {}, {"log.retention.ms": "1000", "log.retention.hours": "5"})
    assert entry.value == "1000"
    assert entry.source is ConfigSource.STATIC_BROKER_CONFIG
    assert entry.synonyms == (
        ConfigSynonym("log.retention.ms", "1000", ConfigSource.STATIC_BROKER_CONFIG),
        ConfigSynonym("log.retention.hours", "5", ConfigSource.STATIC_BROKER_CONFIG),
        ConfigSynonym("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG),
    )


def test_describe_drops_leading_lower_priority_synonyms_like_kafka():
    # Only log.retention.hours is set: Kafka lists synonyms from log.retention.ms on, so none,
    # and the source is DEFAULT_CONFIG, while the value is the broker-derived one.
    entry = describe_config("retention.ms", {}, {"log.retention.hours": "1"})
    assert entry.value == "3600000"
    assert entry.source is ConfigSource.DEFAULT_CONFIG
    assert entry.synonyms == ()
    assert describe_config("retention.ms", {}).synonyms == ()


def test_describe_dynamic_layers_and_topic_override():
    entry = describe_config(
        "retention.bytes",
        {"retention.bytes": "10"},
        {"log.retention.bytes": "1"},
        dynamic_default_broker={"log.retention.bytes": "2"},
        dynamic_broker={"log.retention.bytes": "3"},
    )
    assert entry.value == "10"
    assert [(s.source, s.value) for s in entry.synonyms] == [
        (ConfigSource.DYNAMIC_TOPIC_CONFIG, "10"),
        (ConfigSource.DYNAMIC_BROKER_CONFIG, "3"),
        (ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, "2"),
        (ConfigSource.STATIC_BROKER_CONFIG, "1"),
        (ConfigSource.DEFAULT_CONFIG, "-1"),
    ]
    assert describe_config("retention.bytes", {}, {}, dynamic_broker={"log.retention.bytes": "3"}).source is (
        ConfigSource.DYNAMIC_BROKER_CONFIG
    )


def test_describe_without_synonyms_and_topic_only_configs():
    entry = describe_config("retention.ms", {"retention.ms": "1"}, include_synonyms=False)
    assert entry.synonyms == () and entry.source is ConfigSource.DYNAMIC_TOPIC_CONFIG
    throttled = describe_config("leader.replication.throttled.replicas", {})
    assert (throttled.value, throttled.source, throttled.synonyms) == ("", ConfigSource.DEFAULT_CONFIG, ())


def test_describe_all():
    entries = describe_all({"retention.ms": "1"}, {})
    assert [e.name for e in entries] == sorted(TOPIC_CONFIGS)
    assert {e.name: e.value for e in entries}["retention.ms"] == "1"
    assert [e.name for e in describe_all({}, names=["segment.ms", "nope", "cleanup.policy"])] == [
        "cleanup.policy",
        "segment.ms",
    ]


def test_format_and_java_double_strings():
    assert format_value(("compact", "delete")) == "compact,delete"
    assert format_value(True) == "true"
    assert format_value(LONG_MAX) == "9223372036854775807"
    assert java_double_str(0.5) == "0.5"
    assert java_double_str(2.0) == "2.0"
    assert java_double_str(1e10) == "1.0E10"
    assert java_double_str(1.5e-5) == "1.5E-5"
    assert java_double_str(123456789.125) == "1.23456789125E8"
    assert java_double_str(0.001) == "0.001"
    assert java_double_str(-0.0) == "-0.0"
    assert java_double_str(float("inf")) == "Infinity"
    assert java_double_str(float("-inf")) == "-Infinity"
    assert java_double_str(float("nan")) == "NaN"


def test_min_isr_above_replication_factor_is_only_a_warning():
    # Kafka accepts it (acks=all writes then fail with NOT_ENOUGH_REPLICAS).
    validate_configs({"min.insync.replicas": "5"})
    assert min_isr_warning(2, 3) is None
    assert min_isr_warning(3, 3) is None
    warning = min_isr_warning(4, 3)
    assert warning is not None and "NOT_ENOUGH_REPLICAS" in warning
