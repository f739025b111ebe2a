"""Fixtures of the audit tests: one SparkSession (local[2]) and one real cluster scenario per
test session, and the audit of the scenario's logs, shared by every test that needs them.

The scenario (3 controllers + 3 brokers as real processes, see `audit_cluster`) runs at most
once per session, when the first test that needs it asks; only tests marked `integration`
use it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from quorum.audit.job import spark_session

    session = spark_session("local[2]", app_name="pykraft-audit-tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from audit_cluster import run_scenario

    return run_scenario(tmp_path_factory.mktemp("audit-scenario"))


@pytest.fixture(scope="session")
def scenario_audit(spark: Any, scenario: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    from audit_doctor import AUDITED

    from quorum.audit.job import run_audit

    out = tmp_path_factory.mktemp("audit-scenario-out")
    return run_audit(spark, [scenario.log_dir(n) for n in AUDITED], out, records=True)
