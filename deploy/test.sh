#!/usr/bin/env bash
# Set up the environment (.venv from requirements.lock) and run the whole test suite:
# ruff (lint), mypy --strict on quorum/, broker/ and api/ (types), then pytest. Arguments go to pytest:
#   ./deploy/test.sh                        # everything but the opt-in slow soak tests
#   ./deploy/test.sh tests/unit/node -x     # a subset
#   ./deploy/test.sh -m integration         # only the tests that start real processes
#   ./deploy/test.sh -m slow                # the soak tests
#   ./deploy/test.sh --hypothesis-profile=long
# PYKRAFT_SKIP_LINT=1 skips ruff and mypy. The exit status is pytest's, or 1 if only lint/types failed.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=deploy/env.sh
source deploy/env.sh

setup_env
# kcat is a Kafka client used by the compatibility tests (they skip without it).
ensure_debian_package kcat
# PySpark (the metadata-log audit) runs on a JVM: Java 17 or newer.
ensure_debian_package java openjdk-17-jre-headless

static_failed=0
if [ "${PYKRAFT_SKIP_LINT:-0}" != 1 ]; then
    log "ruff check ."
    "$VENV/bin/ruff" check . || static_failed=1
    log "mypy --strict quorum broker api"
    "$VENV/bin/mypy" --strict quorum broker api || static_failed=1
fi

log "pytest $*"
set +e
"$VENV/bin/python" -m pytest "$@"
rc=$?
set -e

if [ "$rc" -eq 0 ] && [ "$static_failed" -ne 0 ]; then
    echo "error: tests passed but ruff or mypy failed (see above)" >&2
    rc=1
fi
exit "$rc"
