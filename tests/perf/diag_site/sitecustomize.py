"""Loaded by Python at start-up when this directory is on PYTHONPATH (diag_commit_latency.py
puts it there for the node processes it starts, and only for those)."""

import os

if os.environ.get("PYKRAFT_DIAG_OUT"):
    import pykraft_diag_hooks  # noqa: F401 - installs the hooks

if os.environ.get("PYKRAFT_PRODUCE_DIAG_OUT"):
    import pykraft_produce_hooks  # noqa: F401 - installs the broker's produce hooks (diag_produce_latency.py)

if os.environ.get("PYKRAFT_TXN_DIAG_OUT"):
    import pykraft_txn_hooks  # noqa: F401 - installs the transaction hooks (diag_txn_latency.py)
