"""Phase 8: the change data feed — the rows a merge changed, with Delta Lake's rules.

An update that acts emits ``update_preimage`` (old values) and ``update_postimage`` (new
values); a delete emits the deleted row once, also when an unconditional delete matched it
with several source rows; an insert emits ``insert``. Copied rows and rows no clause acts on
emit nothing, and with ``skip_unchanged_updates`` an update that changes no value emits
nothing. A column added by schema evolution is NULL in a pre-image and in a delete.

The feed is a companion Parquet table: the target's columns plus ``_change_type``,
``_commit_timestamp`` and ``_commit_version`` (the partition column). Its files are written
into the commit's staging folder next to the data files and moved into
``_commit_version=<v>/`` by the same journal entry, so the feed changes exactly when the
table does. ``_commit_timestamp`` is the journal entry's timestamp.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import reduce
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType
from pyspark.sql.utils import AnalysisException

from .errors import MergeSpecError, UnsupportedTableError, spark_reason
from .outputs import FILE, ROW, old_value, output_value, q
from .plan import MergePlan
from .rewrite import StagedFile, inserted_rows, single_task_join, staged_files, touched_join
from .scan import ScanResult
from .source import MaterializedSource
from .sqltext import epoch_micros
from .storage import Storage
from .table import (
    COMMIT_VERSION,
    TargetTable,
    create_changes_table,
    describe_table,
    sql_name,
    table_exists,
)

CHANGE_TYPE = "_change_type"
COMMIT_TIMESTAMP = "_commit_timestamp"
FEED_COLUMNS = (CHANGE_TYPE, COMMIT_TIMESTAMP, COMMIT_VERSION)
INSERT, PREIMAGE, POSTIMAGE, DELETE = "insert", "update_preimage", "update_postimage", "delete"


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
        if not table_exists(spark, ident):
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
    return ChangesTable(name, ident, location)


def change_rows(
    spark: SparkSession,
    plan: MergePlan,
    source: MaterializedSource,
    target: DataFrame,
    scan: ScanResult | None,
    staged_data: str,
    with_inserts: bool,
    single_task_rows: int | None = None,
) -> DataFrame | None:
    """Every change row of this merge (target columns + ``_change_type``), or None if none.

    ``scan``: the rewritten files (None: an insert-only merge, whose rows are read back from
    ``staged_data`` once written); ``with_inserts``: whether a merge with a scan inserts the
    source rows no target row matched; ``single_task_rows``: the rewritten files' rows, when
    the one-pass write joins them with the source in a single task (the feed then does too:
    one job, no broadcast).
    """
    parts: list[DataFrame] = []
    joined = None
    if scan is not None and scan.touched:
        touched = [f.path for f in scan.touched]
        if single_task_rows is not None:
            joined = single_task_join(spark, plan, source, touched, single_task_rows)
        parts.append(_touched_changes(spark, plan, source, touched, joined))
    fields = [f.name for f in plan.output_fields]
    if plan.not_matched and scan is None:
        # Insert-only: every row this merge wrote is an insert; read them back, small and exact.
        written = (
            spark.read.format(plan.target.file_format)
            .schema(StructType(plan.output_fields))
            .option("basePath", staged_data)
            .load(staged_data)
        )
        parts.append(written.select(*[F.col(q(n)) for n in fields], F.lit(INSERT).alias(CHANGE_TYPE)))
    elif plan.not_matched and scan is not None and with_inserts:
        inserts = inserted_rows(plan, source, target, scan, joined)
        parts.append(inserts.select(*[F.col(q(n)) for n in fields], F.lit(INSERT).alias(CHANGE_TYPE)))
    if not parts:
        return None
    return reduce(lambda a, b: a.unionByName(b), parts)


def _touched_changes(
    spark: SparkSession,
    plan: MergePlan,
    source: MaterializedSource,
    touched: list[str],
    joined: DataFrame | None = None,
) -> DataFrame:
    """Pre/post images of acting updates and deleted rows of the touched files (``joined``:
    their :func:`.rewrite.single_task_join`, if the merge joins them so)."""
    tj = touched_join(spark, plan, source, touched, joined=joined)
    updated, deleted = tj.acts("update"), tj.acts("delete")

    def image(kind: str, new: bool) -> Any:
        values = [
            (output_value(plan, f.name) if new else old_value(plan, f.name)).alias(f.name)
            for f in plan.output_fields
        ]
        return F.struct(*values, F.lit(kind).alias(CHANGE_TYPE))

    # NULL (no change row) where no update or delete acts. Not a filter: Spark would push it
    # below the projection that decides the clause and evaluate that decision there again.
    images = F.when(updated, F.array(image(PREIMAGE, False), image(POSTIMAGE, True))).when(
        deleted, F.array(image(DELETE, False))
    )
    out = tj.rows.select(
        F.col(f"`{plan.ta}`.`{FILE}`").alias(FILE),
        F.col(f"`{plan.ta}`.`{ROW}`").alias(ROW),
        F.explode(images).alias("c"),
    )
    out = out.select(FILE, ROW, "c.*")
    if plan.matched and not plan.spec.enforces_cardinality:
        # A lone unconditional delete may match a target row with several source rows:
        # the row is deleted once, so it is reported once.
        out = out.dropDuplicates([FILE, ROW, CHANGE_TYPE])
    return out.drop(FILE, ROW)


def write_change_feed(
    spark: SparkSession,
    plan: MergePlan,
    rows: DataFrame,
    staging: str,
    storage: Storage,
    timestamp: datetime,
) -> list[StagedFile]:
    """Write ``rows`` stamped with the commit timestamp into ``staging``; return the files."""
    return write_feed_rows(rows, plan.output_fields, staging, storage, timestamp)


def write_feed_rows(
    rows: DataFrame, fields: Sequence[StructField], staging: str, storage: Storage, timestamp: datetime
) -> list[StagedFile]:
    """Write change ``rows`` (``fields`` plus ``_change_type``) stamped with the commit
    timestamp into ``staging``; return the files."""
    out = rows.select(
        *[F.col(q(f.name)) for f in fields],
        F.col(CHANGE_TYPE),
        F.timestamp_micros(F.lit(epoch_micros(timestamp))).alias(COMMIT_TIMESTAMP),
    )
    out.write.format("parquet").save(staging)
    return staged_files("parquet", staging, storage)[0]
