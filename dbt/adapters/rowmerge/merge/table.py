"""The target table as the engine sees it: location, file format, columns, partitioning.

Read once from the catalog at the start of a merge; every later phase uses this snapshot.
Only plain file tables qualify: Parquet or ORC data-source tables (what dbt-spark creates)
and Hive-serde tables stored as Parquet/ORC.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructField, StructType
from pyspark.sql.utils import AnalysisException

from .errors import UnsupportedTableError

SUPPORTED_FORMATS = ("parquet", "orc")
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


def load_target(spark: SparkSession, name: str) -> TargetTable:
    """Describe ``name``; raise UnsupportedTableError with the fix if it cannot be merged into."""
    try:
        rows = spark.sql(f"DESCRIBE TABLE EXTENDED {name}").collect()
    except AnalysisException as exc:
        raise UnsupportedTableError(
            f"MERGE target {name} does not exist or cannot be read: {exc}. Create it first "
            "(dbt does this on the first run) or check the `target` name."
        ) from None
    info: dict[str, str] = {}
    in_detail = False
    for r in rows:
        key = (r[0] or "").strip()
        if key.startswith("# Detailed Table Information"):
            in_detail = True
            continue
        if in_detail and key:
            info[key] = (r[1] or "").strip()
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
    cols = spark.catalog.listColumns(name)
    partition_columns = tuple(c.name for c in cols if c.isPartition)
    schema = spark.table(name).schema
    return TargetTable(
        name=name,
        location=location.rstrip("/"),
        file_format=file_format,
        schema=schema,
        partition_columns=partition_columns,
    )
