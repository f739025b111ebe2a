#!/usr/bin/env bash
# Set up the environment (.venv from requirements.lock) and start a local cluster in the
# background: 3 controllers + 3 brokers (or `--combined N` combined nodes), data under ${PYKRAFT_DATA:-./data/local}.
# Stop it with: .venv/bin/pykraft cluster down --dir data/local
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=deploy/env.sh
source deploy/env.sh

setup_env
exec "$VENV/bin/pykraft" cluster up --dir "${PYKRAFT_DATA:-./data/local}" --controllers 3 --brokers 3 "$@"
