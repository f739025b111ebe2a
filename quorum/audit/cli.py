"""`pykraft audit` and `pykraft export`: the Spark audit of metadata log copies.

    pykraft audit --log-dir DIR [--log-dir DIR ...] --out DIR [--master URL] [--conf NAME=VALUE ...]
                  [--broker-default NAME=VALUE ...] [--no-report] [--records]
    pykraft export --log-dir DIR [--log-dir DIR ...] --out DIR [--master URL] [--conf NAME=VALUE ...]

`--log-dir` names one node's copy of the metadata log: its `__cluster_metadata-0`
directory, the metadata log dir that holds it, or the node's directory. `audit` writes
partitions_timeline.parquet, brokers_timeline.parquet, imbalance_timeline.parquet,
findings.json and report.html (and, with `--records`, records.parquet: every record decoded),
and exits 0 when there are no violations, 1 when there are (2 for bad arguments or a failed
job). `export` writes only the Parquet tables (records, partitions and brokers timelines).

With `--master` other than local, the log directories and `--out` must be paths every Spark
node can read and write (a shared file system), and the executors must run this Python
environment. Importing this module needs no Spark: pyspark is imported when a command runs.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from quorum.audit.checks import AUTO_REBALANCE, IMBALANCE_INTERVAL, IMBALANCE_PCT, MIN_ISR, UNCLEAN, AuditSettings
from quorum.audit.logdirs import AuditInputError, resolve_copies

__all__ = ["add_audit_commands", "audit_main", "export_main"]

EXIT_OK = 0
EXIT_VIOLATIONS = 1
EXIT_ERROR = 2
KNOWN_DEFAULTS = (UNCLEAN, IMBALANCE_PCT, IMBALANCE_INTERVAL, AUTO_REBALANCE, MIN_ISR)


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return key.strip(), value.strip()


def _settings(args: argparse.Namespace) -> AuditSettings:
    defaults = dict(getattr(args, "broker_default", None) or [])
    unknown = sorted(set(defaults) - set(KNOWN_DEFAULTS))
    if unknown:
        raise ValueError(f"unknown --broker-default {', '.join(unknown)} (known: {', '.join(KNOWN_DEFAULTS)})")
    settings = AuditSettings(defaults)
    settings.validate()
    return settings


def _run(args: argparse.Namespace, *, export_only: bool) -> int:
    try:
        settings = _settings(args)
        resolve_copies(args.log_dir)
    except (AuditInputError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    try:
        from quorum.audit.job import run_audit, spark_session
    except ImportError as exc:  # pragma: no cover - depends on the environment
        print(f"error: the audit needs pyspark, pyarrow and pandas ({exc})", file=sys.stderr)
        return EXIT_ERROR
    from pyspark.sql import SparkSession

    shared = SparkSession.getActiveSession() is not None  # e.g. a caller's session: leave it running
    spark = spark_session(args.master, conf=getattr(args, "conf", None) or ())
    try:
        result = run_audit(
            spark,
            args.log_dir,
            args.out,
            settings,
            export_only=export_only,
            records=bool(getattr(args, "records", False)),
            report=not getattr(args, "no_report", False),
        )
    except Exception as exc:  # noqa: BLE001 - a failed Spark job is reported, not a traceback
        print(f"error: the audit job failed: {exc}", file=sys.stderr)
        return EXIT_ERROR
    finally:
        if not shared:
            spark.stop()
    if export_only:
        for name in result.document["outputs"]:
            print(f"wrote {result.out_dir / name}")
        return EXIT_OK
    summary = result.document["summary"]
    print(
        f"audited {len(summary['copies'])} cop{'ies' if len(summary['copies']) != 1 else 'y'}, "
        f"{summary['records']} records: {summary['violations']} violation(s), {summary['warnings']} warning(s), "
        f"{summary['info']} info"
    )
    for f in result.findings:
        if f["severity"] == "violation":
            offsets = ", ".join(str(o) for o in f["offsets"][:8])
            print(f"  VIOLATION {f['check']}: {f['message']} [offsets {offsets}]")
    print(f"findings: {result.out_dir / 'findings.json'}")
    if not getattr(args, "no_report", False):
        print(f"report:   {result.out_dir / 'report.html'}")
    return result.exit_code


def audit_main(args: argparse.Namespace) -> int:
    return _run(args, export_only=False)


def export_main(args: argparse.Namespace) -> int:
    return _run(args, export_only=True)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--log-dir",
        action="append",
        required=True,
        metavar="DIR",
        help="a node's metadata log copy (its __cluster_metadata-0, metadata log dir or node dir); repeat per node",
    )
    parser.add_argument("--out", required=True, metavar="DIR", help="output directory")
    parser.add_argument(
        "--master",
        default="local[*]",
        help="Spark master URL (default local[*]): spark://HOST:7077, yarn, k8s://https://HOST:PORT",
    )
    parser.add_argument(
        "--conf",
        action="append",
        type=_key_value,
        metavar="NAME=VALUE",
        help="a Spark setting, as spark-submit --conf (e.g. spark.executor.memory=2g); repeatable",
    )


def add_audit_commands(commands: Any) -> None:
    """Add `audit` and `export` to the top-level parser's subcommands (`commands`)."""
    audit = commands.add_parser("audit", help="audit metadata log copies with Spark (findings, timelines, report)")
    _common(audit)
    audit.add_argument(
        "--broker-default",
        action="append",
        type=_key_value,
        metavar="NAME=VALUE",
        help=f"a broker config the checks use ({', '.join(KNOWN_DEFAULTS)}); repeatable",
    )
    audit.add_argument("--no-report", action="store_true", help="skip report.html")
    audit.add_argument(
        "--records",
        action="store_true",
        help="also write records.parquet (every record decoded, with its JSON), as export does",
    )
    audit.set_defaults(handler=audit_main)
    export = commands.add_parser("export", help="export metadata log copies to Parquet with Spark")
    _common(export)
    export.set_defaults(handler=export_main)
