"""The target table as the engine sees it: location, file format, columns, partitioning.

Read once from the catalog at the start of a merge; every later phase uses this snapshot.
Only plain file tables qualify: Parquet or ORC data-source tables (what dbt-spark creates)
and Hive-serde tables stored as Parquet/ORC.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructField, StructType
from pyspark.sql.utils import AnalysisException

from .errors import UnsupportedTableError
from .storage import FileInfo, Storage

SUPPORTED_FORMATS = ("parquet", "orc")
HIVE_DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"
LAKEHOUSE_FORMATS = ("delta", "iceberg", "hudi")


@dataclass(frozen=True)
class TargetTable:
    name: str
    location: str
    file_format: str  # parquet | orc
    schema: StructType  # data columns, then partition columns (Spark's order)
    partition_columns: tuple[str, ...]

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.schema.fields)

    def field(self, name: str) -> StructField:
        lowered = name.lower()
        for f in self.schema.fields:
            if f.name.lower() == lowered:
                return f
        raise KeyError(name)

    def has_column(self, name: str) -> bool:
        return any(f.name.lower() == name.lower() for f in self.schema.fields)

    @property
    def supports_row_index(self) -> bool:
        return self.file_format == "parquet"

    def read(self, spark: SparkSession) -> DataFrame:
        return spark.table(self.name)


@dataclass(frozen=True)
class Description:
    """What ``DESCRIBE TABLE EXTENDED`` says: the detail fields and the partition columns."""

    info: dict[str, str]
    partition_columns: tuple[str, ...]


def describe_table(spark: SparkSession, name: str) -> Description:
    """One ``DESCRIBE TABLE EXTENDED`` (raises AnalysisException if there is no such table).

    The partition columns come from its "# Partition Information" section, which saves the
    much slower ``spark.catalog.listColumns``.
    """
    rows = spark.sql(f"DESCRIBE TABLE EXTENDED {name}").collect()
    info: dict[str, str] = {}
    partition_columns: list[str] = []
    section = ""
    for r in rows:
        key = (r[0] or "").strip()
        if key.startswith("#"):
            section = key if key != "# col_name" else section
            continue
        if not key:
            section = "" if section == "# Partition Information" else section
            continue
        if section == "# Partition Information":
            partition_columns.append(str(r[0]))
        elif section.startswith("# Detailed Table Information"):
            info[key] = (r[1] or "").strip()
    return Description(info, tuple(partition_columns))


def load_target(spark: SparkSession, name: str) -> TargetTable:
    """Describe ``name``; raise UnsupportedTableError with the fix if it cannot be merged into."""
    try:
        described = describe_table(spark, name)
    except AnalysisException as exc:
        raise UnsupportedTableError(
            f"MERGE target {name} does not exist or cannot be read: {exc}. Create it first "
            "(dbt does this on the first run) or check the `target` name."
        ) from None
    info = described.info
    table_type = info.get("Type", "").upper()
    if table_type == "VIEW":
        raise UnsupportedTableError(
            f"MERGE target {name} is a view; row_level_merge rewrites table files. "
            "Materialize the model as an incremental table."
        )
    provider = info.get("Provider", "").lower()
    serde = info.get("Serde Library", "").lower()
    if provider in SUPPORTED_FORMATS:
        file_format = provider
    elif provider == "hive" and ("parquet" in serde or "orc" in serde):
        file_format = "parquet" if "parquet" in serde else "orc"
    elif provider in LAKEHOUSE_FORMATS:
        raise UnsupportedTableError(
            f"MERGE target {name} is a {provider} table; use dbt-spark's own "
            "incremental_strategy='merge' for it. row_level_merge is for plain Parquet/ORC tables."
        )
    else:
        raise UnsupportedTableError(
            f"MERGE target {name} has format {provider or 'unknown'!r} "
            f"(serde {serde or 'none'}); row_level_merge supports only Parquet and ORC tables "
            "(file_format='parquet' or 'orc')."
        )
    location = info.get("Location")
    if not location:
        raise UnsupportedTableError(f"MERGE target {name} has no Location in the catalog.")
    partition_columns = described.partition_columns
    schema = spark.table(name).schema
    return TargetTable(
        name=name,
        location=location.rstrip("/"),
        file_format=file_format,
        schema=schema,
        partition_columns=partition_columns,
    )


def table_files(target: TargetTable, storage: Storage, files: Mapping[str, FileInfo]) -> list[dict[str, Any]]:
    """Path, size and row count of every file in ``files`` (qualified path -> FileInfo)."""
    rows = storage.count_rows({path: info.size for path, info in files.items()}, target.file_format)
    return [{"path": path, "size": info.size, "rows": rows[path]} for path, info in sorted(files.items())]


def _sql_string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def add_columns(spark: SparkSession, table: str, columns: list[Mapping[str, str]]) -> None:
    """Add the columns ``table`` does not have yet (schema evolution, replayed safely)."""
    existing = {f.name.lower() for f in spark.table(table).schema.fields}
    missing = [c for c in columns if c["name"].lower() not in existing]
    if missing:
        cols = ", ".join(f"`{c['name']}` {c['type']}" for c in missing)
        spark.sql(f"ALTER TABLE {table} ADD COLUMNS ({cols})")


def register_partitions(spark: SparkSession, table: str, partitions: list[str]) -> None:
    """Add partition directories a merge created to the catalog (no-op if already there)."""
    if not partitions:
        return
    if any(HIVE_DEFAULT_PARTITION in p for p in partitions):
        spark.sql(f"ALTER TABLE {table} RECOVER PARTITIONS")
        return
    specs = []
    for rel in partitions:
        kvs = [seg.split("=", 1) for seg in rel.strip("/").split("/")]
        specs.append(
            "PARTITION (" + ", ".join(f"`{unquote(k)}` = {_sql_string(unquote(v))}" for k, v in kvs) + ")"
        )
    # One statement per batch keeps the metastore round trips low.
    for i in range(0, len(specs), 100):
        spark.sql(f"ALTER TABLE {table} ADD IF NOT EXISTS {' '.join(specs[i : i + 100])}")
