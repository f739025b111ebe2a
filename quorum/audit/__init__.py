"""The Spark audit of the metadata log (see DESIGN.md, "The Spark audit").

    logdirs   find the log copies (`__cluster_metadata-0` dirs) and decode their segment and
              snapshot files into rows (one per record; a bad batch is one invalid row)
    checks    the checks, as plain Python over one copy's rows in log order: per-copy log
              checks, cross-copy agreement, and the semantic replay (MetadataDelta) that
              emits the partition and broker timelines and the semantic findings
    source    the PySpark data source `pykraft-metadata` (Spark's Python Data Source API)
    job       the Spark job: read, export Parquet, per-copy log checks as window functions,
              agreement as a join on offset, the replay per copy with mapInArrow
    baseline  the same checks as one plain Python loop (for the benchmark and cross-checks)
    report    findings.json and report.html with plots
    cli       `pykraft audit` and `pykraft export`

pyspark (and pyarrow, pandas, matplotlib) are imported only by `source`, `job` and
`report`, and only when used: importing this package or `cli` needs none of them.
"""
