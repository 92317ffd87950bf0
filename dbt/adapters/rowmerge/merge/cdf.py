"""Phase 8: the change data feed — the rows a merge changed, with Delta Lake's rules.

An update that acts emits ``update_preimage`` (old values) and ``update_postimage`` (new
values); a delete emits the deleted row once, also when an unconditional delete matched it
with several source rows; an insert emits ``insert``. Copied rows and rows no clause acts on
emit nothing, and with ``skip_unchanged_updates`` an update that changes no value emits
nothing. A column added by schema evolution is NULL in a pre-image and in a delete.

The feed is a companion Parquet table: the target's columns plus ``_change_type``,
``_commit_timestamp`` and ``_commit_version`` (the partition column). A merge's change rows
come out of the job that writes its data files (:func:`.rewrite.feed_rows`), so the touched
files are read and joined with the source once; :func:`stamp_feed` then reads back only the
change rows, adds their change type and timestamp, and writes the feed's files into the
commit's staging folder next to the data files. The same journal entry moves them into
``_commit_version=<v>/``, so the feed changes exactly when the table does.
``_commit_timestamp`` is the journal entry's timestamp.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType
from pyspark.sql.utils import AnalysisException

from .encodings import options_like
from .errors import MergeSpecError, UnsupportedTableError, spark_reason
from .outputs import q
from .plan import MergePlan
from .rewrite import DATA, KIND, StagedFile, staged_files
from .sqltext import epoch_micros
from .storage import Storage
from .table import (
    COMMIT_VERSION,
    TargetTable,
    create_changes_table,
    describe_table,
    sql_name,
)

CHANGE_TYPE = "_change_type"
COMMIT_TIMESTAMP = "_commit_timestamp"
FEED_COLUMNS = (CHANGE_TYPE, COMMIT_TIMESTAMP, COMMIT_VERSION)


def feed_schema(fields: list[StructField]) -> StructType:
    """The feed table's columns for a target with data columns ``fields``."""
    return StructType(
        [StructField(f.name, f.dataType, True, f.metadata) for f in fields]
        + [
            StructField(CHANGE_TYPE, StringType(), True),
            StructField(COMMIT_TIMESTAMP, TimestampType(), True),
            StructField(COMMIT_VERSION, LongType(), True),
        ]
    )


@dataclass(frozen=True)
class ChangesTable:
    """Where this merge's change rows go."""

    name: str  # as the spec gave it
    ident: str  # back-quoted
    location: str  # qualified
    # its columns as the catalog had them under the merge's lock (what schema evolution adds to)
    columns: tuple[str, ...] = ()
    # its catalog entry as read then (Description.catalog_entry): the commit registers its
    # version's partition with it
    catalog_entry: Any = field(default=None, compare=False, repr=False)


def prepare_changes_table(spark: SparkSession, plan: MergePlan, storage: Storage) -> ChangesTable:
    """Check (and create, if missing) the feed table before the merge writes anything to it."""
    cdf = plan.spec.change_data_feed
    assert cdf is not None
    return prepare_feed_table(spark, str(cdf["table"]), plan.output_fields, plan.target, storage)


def prepare_feed_table(
    spark: SparkSession, name: str, fields: Sequence[StructField], target: TargetTable, storage: Storage
) -> ChangesTable:
    """Check (and create, if missing) change table ``name`` for rows of ``target`` with
    columns ``fields`` (the merge's or the full refresh's), before anything is written to it."""
    clashes = [f.name for f in fields if f.name.lower() in FEED_COLUMNS]
    if clashes:
        raise MergeSpecError(
            [
                f"change_data_feed: the target has a column named {c}, which the change feed uses "
                "for itself; rename that column or turn change_data_feed off"
                for c in clashes
            ]
        )
    ident = sql_name(name)
    try:
        try:  # one catalog request when it exists, as it does for every merge but the first
            described = describe_table(spark, ident)
        except AnalysisException:
            create_changes_table(spark, name, feed_schema(list(target.schema.fields)))
            described = describe_table(spark, ident)
    except AnalysisException as exc:
        raise UnsupportedTableError(
            f"change_data_feed table {name} cannot be created or read: {spark_reason(exc)}. Name a "
            "table in an existing schema (database) of the session's catalog, or create that schema "
            "first."
        ) from None
    provider = described.provider
    partitioning = list(described.partition_columns)
    if provider != "parquet" or partitioning != [COMMIT_VERSION]:
        raise UnsupportedTableError(
            f"change_data_feed table {name} exists but is not a change feed (a Parquet table "
            f"partitioned by {COMMIT_VERSION}; found {provider or 'unknown'} partitioned by "
            f"{partitioning or 'nothing'}). Drop it or name another table in change_data_feed."
        )
    location = storage.qualify(described.location.rstrip("/"))
    target_location = storage.qualify(target.location)
    if not storage.same_filesystem(location, target_location):
        raise UnsupportedTableError(
            f"change_data_feed table {name} is stored at {location}, on another filesystem than "
            f"{target.name} ({target_location}). A commit moves both tables' files by rename, "
            "which cannot cross filesystems; keep the change table in the target's schema."
        )
    if (
        location == target_location
        or location.startswith(target_location + "/")
        or (target_location.startswith(location + "/"))
    ):
        raise UnsupportedTableError(
            f"change_data_feed table {name} is stored at {location}, inside or around the target's "
            f"folder {target_location}: each table would read the other's files. Name another "
            "table in change_data_feed."
        )
    return ChangesTable(name, ident, location, described.columns, described.catalog_entry)


def stamp_feed(
    spark: SparkSession, plan: MergePlan, rows_dir: str, staging: str, storage: Storage, timestamp: datetime
) -> list[StagedFile]:
    """Write the change rows the data write left in ``rows_dir`` (a folder per change type:
    :func:`.rewrite.feed_rows`) into ``staging``, stamped with their change type and the
    commit timestamp; return the files.

    Only the change rows are read here, not the touched files: a merge that rewrites three
    files of a 10M-row table to update 500 rows reads back 1,000 change rows.
    """
    prefix = f"{KIND}="
    kinds = sorted(n for n in storage.list_names(rows_dir) if n.startswith(prefix) and n != prefix + DATA)
    if not kinds:
        return []
    schema = StructType([*plan.output_fields, StructField(KIND, StringType(), True)])
    rows = (
        spark.read.format(plan.target.file_format)
        .schema(schema)
        .option("basePath", rows_dir)
        .load([f"{rows_dir}/{k}" for k in kinds])
    )
    # Written with the encodings the data write chose for them (encodings.py).
    written = {f.path: f.size for k in kinds for f in storage.list_data_files(f"{rows_dir}/{k}")}
    options = options_like(storage, written, plan.target.file_format, plan.output_fields)
    # The change rows stay where they are (the table's new files are staged beside them):
    # the staging folder goes once the commit is applied.
    return write_feed_rows(
        rows.withColumnRenamed(KIND, CHANGE_TYPE), plan.output_fields, staging, storage, timestamp, options
    )


def write_feed_rows(
    rows: DataFrame,
    fields: Sequence[StructField],
    staging: str,
    storage: Storage,
    timestamp: datetime,
    options: Mapping[str, str] | None = None,
) -> list[StagedFile]:
    """Write change ``rows`` (``fields`` plus ``_change_type``) stamped with the commit
    timestamp into ``staging`` with the writer's ``options``; return the files."""
    # As text: one round trip, not one per column.
    out = rows.selectExpr(
        *[q(f.name) for f in fields],
        q(CHANGE_TYPE),
        f"timestamp_micros({epoch_micros(timestamp)}L) AS {q(COMMIT_TIMESTAMP)}",
    )
    out.write.format("parquet").options(**dict(options or {})).save(staging)
    return staged_files("parquet", staging, storage)[0]
