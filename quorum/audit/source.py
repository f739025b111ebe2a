"""`pykraft-metadata`: a PySpark data source (Spark 4's Python Data Source API) over metadata logs.

    from quorum.audit.source import register
    register(spark)
    df = spark.read.format("pykraft-metadata").load("/data/controller-1/data/__cluster_metadata-0")
    df = spark.read.format("pykraft-metadata").load([dir1, dir2, dir3])   # several copies

Each path is a copy of the metadata log: a `__cluster_metadata-0` directory, a node's
metadata log dir holding one, or a node directory (see `quorum.audit.logdirs`). The reader
plans one Spark partition per file (every segment and every snapshot of every copy; a
segment larger than 1.5 x `chunkBytes` is cut at batch boundaries into ranges of about
`chunkBytes`, one partition each) and
decodes it in the Python worker with the storage layer's `scan_batches` and the
controller's record codec, yielding one row per record (`SCHEMA`, the columns of
`quorum.audit.logdirs.ROW_FIELDS`) as Arrow record batches. A batch that fails its CRC is
one row with `valid = false`, never an exception.

Options: `path` (set by `load(path)`), `paths` (set by `load([...])`: a JSON list),
`batchRows` (rows per Arrow batch, default 8192), `chunkBytes` (default 4 MiB; 0: one
partition per file).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped,import-not-found,unused-ignore]
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from quorum.audit.logdirs import ROW_FIELDS, SourceFile, read_source_file, resolve_copies, split_points

__all__ = ["SCHEMA", "SOURCE_NAME", "MetadataLogDataSource", "arrow_schema", "register", "spark_schema"]

SOURCE_NAME = "pykraft-metadata"
DEFAULT_CHUNK_BYTES = 4 << 20  # a segment larger than 6 MiB is read in ranges of about 4 MiB

_SPARK_TYPES: dict[str, DataType] = {
    "INT": IntegerType(),
    "BIGINT": LongType(),
    "STRING": StringType(),
    "BOOLEAN": BooleanType(),
    "BINARY": BinaryType(),
    "DOUBLE": DoubleType(),
    "ARRAY<INT>": ArrayType(IntegerType()),
    "ARRAY<BIGINT>": ArrayType(LongType()),
}
_ARROW_TYPES: dict[str, pa.DataType] = {
    "INT": pa.int32(),
    "BIGINT": pa.int64(),
    "STRING": pa.string(),
    "BOOLEAN": pa.bool_(),
    "BINARY": pa.binary(),
    "DOUBLE": pa.float64(),
    "ARRAY<INT>": pa.list_(pa.int32()),
    "ARRAY<BIGINT>": pa.list_(pa.int64()),
}


def spark_schema(fields: Sequence[tuple[str, str]]) -> StructType:
    return StructType([StructField(name, _SPARK_TYPES[kind], True) for name, kind in fields])


def arrow_schema(fields: Sequence[tuple[str, str]]) -> pa.Schema:
    return pa.schema([pa.field(name, _ARROW_TYPES[kind], True) for name, kind in fields])


SCHEMA = spark_schema(ROW_FIELDS)
_ARROW_SCHEMA = arrow_schema(ROW_FIELDS)


def to_arrow(rows: Sequence[tuple[Any, ...]], schema: pa.Schema) -> pa.RecordBatch:
    """Row tuples (in the schema's column order) as one Arrow record batch."""
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in schema]
    arrays = [pa.array(col, type=f.type) for col, f in zip(columns, schema, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


class _FilePartition(InputPartition):  # type: ignore[misc,unused-ignore]
    """One file of one copy, or one byte range of it (cut at batch boundaries)."""

    def __init__(self, source: SourceFile, start: int = 0, end: int | None = None) -> None:
        super().__init__((source.path, start, end))
        self.source = source
        self.start = start
        self.end = end


class MetadataLogReader(DataSourceReader):  # type: ignore[misc,unused-ignore]
    def __init__(self, paths: list[str], batch_rows: int, chunk_bytes: int) -> None:
        self.paths = paths
        self.batch_rows = batch_rows
        self.chunk_bytes = chunk_bytes

    def partitions(self) -> list[InputPartition]:
        files = [f for copy in resolve_copies(self.paths) for f in copy.files]
        parts: list[InputPartition] = [
            _FilePartition(f, start, end) for f in files for start, end in split_points(f, self.chunk_bytes)
        ]
        # Spark needs at least one partition; an empty read is one partition with no file.
        return parts or [InputPartition(None)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        source = getattr(partition, "source", None)
        if source is None:
            return
        size = self.batch_rows
        chunk: list[tuple[Any, ...]] = []
        for row in read_source_file(source, getattr(partition, "start", 0), getattr(partition, "end", None)):
            chunk.append(row)
            if len(chunk) >= size:
                yield to_arrow(chunk, _ARROW_SCHEMA)
                chunk = []
        if chunk:
            yield to_arrow(chunk, _ARROW_SCHEMA)


class MetadataLogDataSource(DataSource):  # type: ignore[misc,unused-ignore]
    """`spark.read.format("pykraft-metadata").load(path_or_paths)`; see the module docstring."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        return SCHEMA

    def _paths(self) -> list[str]:
        options = self.options
        paths: list[str] = []
        if options.get("paths"):
            loaded = json.loads(options["paths"])
            paths.extend(str(p) for p in (loaded if isinstance(loaded, list) else [loaded]))
        if options.get("path"):
            paths.append(str(options["path"]))
        if not paths:
            raise ValueError(f"{SOURCE_NAME}: give the metadata log directories with load(path) or load([paths])")
        return paths

    def reader(self, schema: StructType) -> MetadataLogReader:
        return MetadataLogReader(
            self._paths(),
            int(self.options.get("batchRows", "8192")),
            int(self.options.get("chunkBytes", str(DEFAULT_CHUNK_BYTES))),
        )


_REGISTERED: set[int] = set()


def register(spark: SparkSession) -> None:
    """Register the data source with `spark` (once per session)."""
    key = id(spark)
    if key not in _REGISTERED:
        spark.dataSource.register(MetadataLogDataSource)
        _REGISTERED.add(key)
