"""librdkafka settings shared by the clients of the command-line tools (and the REST node's
group admin, which is the same class)."""

from __future__ import annotations

from typing import Any, Final

# Kafka's tools log at WARN (their log4j default): librdkafka's informational lines (level 6,
# such as "Purging 1 unserved events from background queue" when a client closes under load)
# stay off stderr, where a tool prints its own errors and scripts read them.
TOOL_CLIENT_CONF: Final[dict[str, Any]] = {"log_level": 4}
