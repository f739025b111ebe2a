"""Described configs: `ConfigEntry` with its `ConfigSynonym`s, `ConfigSource`, `ConfigType`.

One family for the config rules (`topic_configs.describe_config`), DescribeConfigs on
the wire (`quorum.wire.admin_codec`) and the REST API (`api.rest.views`). The enums
hold Kafka's wire ids (DescribeConfigsResponse's ConfigSource and ConfigType) under the
names of Kafka's Admin API (`ConfigEntry.ConfigSource`, `ConfigEntry.ConfigType`), which
the REST API shows; an id this version does not know reads as UNKNOWN, as Kafka's
`forId` does.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Self

from quorum.frozen_init import fast_frozen_init

__all__ = ["ConfigEntry", "ConfigSource", "ConfigSynonym", "ConfigType"]


class _WireEnum(IntEnum):
    """An enum of Kafka wire ids whose 0 is UNKNOWN."""

    @classmethod
    def for_id(cls, value: int) -> Self:
        """The member for a wire id; an id this version does not know is UNKNOWN (0)."""
        try:
            return cls(value)
        except ValueError:
            return cls(0)


class ConfigSource(_WireEnum):
    """Where a described value comes from."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1  # the wire's TOPIC_CONFIG
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    DYNAMIC_CLIENT_METRICS_CONFIG = 7
    DYNAMIC_GROUP_CONFIG = 8


class ConfigType(_WireEnum):
    """A config's type (DescribeConfigs v3+)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class ConfigSynonym:
    """A config that stands for the described one, with its value where it is set."""

    name: str
    value: str | None  # None for sensitive values
    source: ConfigSource


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One config as DescribeConfigs (and REST ``/configs``) shows it."""

    name: str
    value: str | None  # None for sensitive values
    source: ConfigSource = ConfigSource.DEFAULT_CONFIG
    is_read_only: bool = False
    is_sensitive: bool = False
    synonyms: tuple[ConfigSynonym, ...] = ()
    config_type: ConfigType = ConfigType.UNKNOWN  # DescribeConfigs v3+
    documentation: str | None = None  # DescribeConfigs v3+

    @property
    def is_default(self) -> bool:
        """The value is the built-in default (what DescribeConfigs v0 called isDefault)."""
        return self.source == ConfigSource.DEFAULT_CONFIG
