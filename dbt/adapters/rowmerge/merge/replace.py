"""A full refresh as a version: ``REPLACE TABLE`` committed through the journal (DESIGN §12).

dbt's own full refresh drops the table and creates it again. For a managed table the drop
deletes the folder, journal included, so versions restarted at 0: an incremental consumer of
the change feed that remembered version 41 asked for >= 42 and silently got nothing while the
new changes sat at version 1. Here the table keeps its catalog entry and its folder; the
model's rows are written into a staging folder like a merge's, and one journal entry, under
the table's lock, replaces every current file with them. The version after the last merge is
the refresh, history and feed go on, and a crash anywhere leaves the table exactly before or
after, as for a merge (the same apply and recovery).

Its change rows are every old row as ``delete`` and every new row as ``insert``, so a
consumer that applies the feed (deletes before inserts within a version) ends with the new
table. A model may opt out (``change_data_feed_on_replace: false``): the entry then records
why it wrote no change rows, and ``table_changes`` refuses a range across it.

The catalog entry stays when the file format and partitioning stay and the table's columns
are the first columns of the model (a refresh may add columns at the end, as schema evolution
does). A refresh that drops, retypes or reorders a column, or changes the partitioning or
format, is the same kind of version, whose apply registers the table again over the same
folder (reshape.py): history and feed go on here too. The change table then keeps a dropped
column (NULL in later rows); it cannot hold a column whose type changed, so a model with a
change feed whose refresh retypes a column is rebuilt by dbt, starting a new history
(:func:`replace_problem` says why, and dbt warns).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType
from pyspark.sql.utils import AnalysisException

from . import faults, feed_owner
from .cdf import CHANGE_TYPE, ChangesTable, feed_schema, prepare_feed_table, write_feed_rows
from .errors import MergeCommittedError, StorageError, UnsupportedTableError, spark_reason
from .filestats import indexed_columns
from .journal import Journal, Retention, Staging
from .lock import TableLock
from .notices import warn
from .outputs import DELETE, INSERT, q
from .reshape import Shape, plan_shape, reregister
from .rewrite import StagedFile, staged_files
from .run import open_journal, recover_locked, storage_errors, table_lock
from .spec import DEFAULT_LOCK_TIMEOUT_S, Upkeep
from .sqltext import sql_string
from .storage import storage_for
from .table import TargetTable, add_columns, catalog_sql, column_ddl, load_target

logger = logging.getLogger("rowmerge")

OPERATION = "REPLACE TABLE"
NO_JOURNAL = "it has no rowmerge journal"  # nothing to keep: dbt rebuilds it, with no history lost


@dataclass(frozen=True)
class Replaced:
    """What a full refresh committed: its version and counts (for dbt's run line)."""

    table: str
    version: int
    rows_deleted: int
    rows_inserted: int
    files_removed: int
    files_added: int
    changes_table: str | None
    feed_rows: int  # change rows written
    opted_out: bool  # change_data_feed_on_replace: false (no change rows, by choice)

    def summary(self) -> str:
        feed = ""
        if self.changes_table:
            feed = "; no change rows (opted out)" if self.opted_out else f"; {self.feed_rows} change rows"
        return (
            f"REPLACE TABLE version {self.version}: {self.rows_inserted} rows "
            f"(replacing {self.rows_deleted}){feed}"
        )


def _plain(field: StructField) -> tuple[str, str]:
    return field.name.lower(), field.dataType.simpleString()


def replace_problem(
    spark: SparkSession,
    table_name: str,
    rows: DataFrame,
    partition_by: Sequence[str] = (),
    file_format: str = "parquet",
    change_data_feed: str | None = None,
) -> str | None:
    """Why ``table_name`` cannot be replaced by ``rows`` as its next version (None: it can).

    Read without the lock, to choose the path; :func:`replace_table` checks again under it.
    """
    try:
        target = load_target(spark, table_name)
    except UnsupportedTableError as exc:
        return str(exc)
    if not open_journal(spark, target.location).versions():
        return NO_JOURNAL
    if _shape_problem(target, rows, partition_by, file_format) is None:
        return None
    try:
        _plan_reshape(spark, target, rows, partition_by, file_format, change_data_feed, None)
    except UnsupportedTableError as exc:
        return str(exc)
    return None


def _plan_reshape(
    spark: SparkSession,
    target: TargetTable,
    rows: DataFrame,
    partition_by: Sequence[str],
    file_format: str,
    change_data_feed: str | None,
    properties: Mapping[str, str] | None,
) -> Shape:
    """The shape a refresh that cannot keep the catalog entry registers the table with;
    UnsupportedTableError saying why it cannot be registered again (dbt rebuilds it then)."""
    by_name = {f.name.lower(): f for f in rows.schema.fields}
    missing = [p for p in partition_by if p.lower() not in by_name]
    if missing:
        raise UnsupportedTableError(f"the model does not select partition column(s) {', '.join(missing)}")
    if change_data_feed:
        retyped = [
            f"{f.name} ({_plain(f)[1]} -> {_plain(by_name[f.name.lower()])[1]})"
            for f in target.schema.fields
            if f.name.lower() in by_name and _plain(f) != _plain(by_name[f.name.lower()])
        ]
        if retyped:
            raise UnsupportedTableError(
                f"column(s) {', '.join(retyped)} change type, and change table {change_data_feed} "
                "holds their earlier values in files of the old type"
            )
    parts = {p.lower() for p in partition_by}
    data = [f for f in rows.schema.fields if f.name.lower() not in parts]
    part_fields = [by_name[p.lower()] for p in partition_by]
    schema = StructType([StructField(f.name, f.dataType, True, f.metadata) for f in data + part_fields])
    return plan_shape(
        spark, target, schema, partition_by, file_format, properties, storage_for(spark).qualify
    )


def _shape_problem(
    target: TargetTable, rows: DataFrame, partition_by: Sequence[str], file_format: str
) -> str | None:
    if target.file_format != file_format.lower():
        return f"its file format changes from {target.file_format} to {file_format.lower()}"
    old_parts = [c.lower() for c in target.partition_columns]
    new_parts = [c.lower() for c in partition_by]
    if old_parts != new_parts:
        return f"its partitioning changes from {old_parts or 'none'} to {new_parts or 'none'}"
    new_by_name = {f.name.lower(): f for f in rows.schema.fields}
    missing = [p for p in new_parts if p not in new_by_name]
    if missing:
        return f"the model does not select partition column(s) {', '.join(missing)}"
    old_data = [_plain(f) for f in target.schema.fields if f.name.lower() not in old_parts]
    new_data = [_plain(f) for f in rows.schema.fields if f.name.lower() not in new_parts]
    old_part_types = [_plain(target.field(p)) for p in target.partition_columns]
    new_part_types = [_plain(new_by_name[p]) for p in new_parts]
    if new_data[: len(old_data)] != old_data or old_part_types != new_part_types:
        dropped = [n for n, _ in old_data if n not in dict(new_data)]
        if dropped:
            return f"the model no longer selects column(s) {', '.join(dropped)}"
        return "a column changes its type or position (columns may only be added at the end)"
    return None


def replace_table(
    spark: SparkSession,
    table_name: str,
    rows: DataFrame,
    *,
    partition_by: Sequence[str] = (),
    file_format: str = "parquet",
    change_data_feed: str | None = None,
    feed_on_replace: bool = True,
    lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
    table_properties: Mapping[str, str] | None = None,
    upkeep: Upkeep | None = None,
) -> Replaced:
    """Replace every row of ``table_name`` with ``rows``, committed as the next version.

    ``change_data_feed``: the model's change table (its change rows: the old rows as
    ``delete``, the new as ``insert``, unless ``feed_on_replace`` is false).
    ``table_properties``: set on the table (the model's ``tblproperties``). ``upkeep``: the
    model's retention settings, which decide (as a merge's do) whether the replaced table's
    files are kept in ``retained/``: each setting given, else the table's stored one, else
    the default, which keeps them. Raises
    UnsupportedTableError when the table cannot be replaced as a version (see
    :func:`replace_problem`), before anything is written.
    """
    target = load_target(spark, table_name)
    journal = open_journal(spark, target.location)
    journal.check_placement(target.name)
    with (
        storage_errors(f"{OPERATION} {table_name}"),
        table_lock(journal, target.name, OPERATION, lock_timeout_s) as lock,
    ):
        target = load_target(spark, table_name)
        if recover_locked(spark, journal, lock, target).rolled_forward:
            target = load_target(spark, table_name)
        journal.check_bound(target)
        versions = journal.versions()
        if not versions:
            raise UnsupportedTableError(
                f"{OPERATION} {target.name} cannot keep the table's history: {NO_JOURNAL}"
            )
        shape = None
        if _shape_problem(target, rows, partition_by, file_format):
            try:
                shape = _plan_reshape(
                    spark, target, rows, partition_by, file_format, change_data_feed, table_properties
                )
            except UnsupportedTableError as exc:
                raise UnsupportedTableError(
                    f"{OPERATION} {target.name} cannot keep the table's history: {exc}"
                ) from None
        done = _replace(
            spark, journal, lock, target, rows, versions, change_data_feed, feed_on_replace, shape, upkeep
        )
    if table_properties and shape is None:
        props = ", ".join(f"{sql_string(str(k))} = {sql_string(str(v))}" for k, v in table_properties.items())
        try:
            catalog_sql(spark, f"ALTER TABLE {target.ident} SET TBLPROPERTIES ({props})")
        except AnalysisException as exc:  # the refresh is committed; only the properties were refused
            warn(
                f"{target.name}: version {done.version} is committed, but its tblproperties were "
                f"refused: {spark_reason(exc)}"
            )
    return done


def _retention(upkeep: Upkeep | None, stored: Retention | None) -> Retention | None:
    """What the refresh's version keeps of the table it replaces: as a merge decides it, so
    a table whose only version is the first run's (which records no policy) keeps it too."""
    return (upkeep or Upkeep()).retention(stored)  # no settings given: the stored one or the default


def _fields(
    target: TargetTable, rows: DataFrame, shape: Shape | None
) -> tuple[list[StructField], list[StructField]]:
    """(the table's columns after the refresh, the columns its change rows carry)."""
    if shape is not None:
        fields = list(shape.schema.fields)
        kept = {f.name.lower() for f in fields}
        dropped = [
            StructField(f.name, f.dataType, True, f.metadata)
            for f in target.schema.fields
            if f.name.lower() not in kept
        ]
        return fields, fields + dropped  # a dropped column stays in the change table
    parts = {c.lower() for c in target.partition_columns}
    by_name = {f.name.lower(): f for f in rows.schema.fields}
    old_names = {f.name.lower() for f in target.schema.fields}
    # The table's columns in its own order (partition columns last), then the model's new ones.
    data = [f for f in target.schema.fields if f.name.lower() not in parts]
    added = [f for f in rows.schema.fields if f.name.lower() not in old_names]
    fields = [StructField(f.name, by_name[f.name.lower()].dataType, True, f.metadata) for f in data]
    fields += [StructField(f.name, f.dataType, True, f.metadata) for f in added]
    fields += [target.field(p) for p in target.partition_columns]
    return fields, fields


def _check_folder_moves(journal: Journal, staging: Staging) -> None:
    """Registering the table again parks its journal folder by a move: refuse, before
    anything is written, a filesystem that cannot move a folder (some object stores)."""
    probe = f"{staging.dir}/folder-move-probe"
    try:
        journal.storage.create_if_absent(f"{probe}/a", "")
        journal.storage.move_folder(probe, f"{probe}-moved")
    except Exception as exc:  # noqa: BLE001 - whatever the filesystem raises, the answer is no
        raise StorageError(
            f"the filesystem of {journal.location} cannot move a folder ({exc}), which registering "
            "the table again needs"
        ) from None


def _replace(
    spark: SparkSession,
    journal: Journal,
    lock: TableLock,
    target: TargetTable,
    rows: DataFrame,
    versions: list[int],
    change_data_feed: str | None,
    feed_on_replace: bool,
    shape: Shape | None,
    upkeep: Upkeep | None,
) -> Replaced:
    fields, feed_fields = _fields(target, rows, shape)
    layout = shape.target(target) if shape is not None else target  # how the new files lie
    added = [] if shape is not None else [f for f in fields if not target.has_column(f.name)]

    snapshot = journal.snapshot()
    version = journal.next_version(versions, target.name)
    newest = journal.newest(versions)
    timestamp = journal.commit_time(versions, newest)
    changes: ChangesTable | None = None
    if change_data_feed and feed_on_replace:
        changes = prepare_feed_table(spark, change_data_feed, feed_fields, target, journal.storage)
        feed_owner.check_owner(
            journal.storage, changes.location, changes.name, target.name, target.name_parts
        )
    old_rows = target.read(spark).count()

    staging = journal.stage()
    committed = False
    try:
        if shape is not None:
            _check_folder_moves(journal, staging)
        logger.info("rowmerge: %s: writing the model's rows for a full refresh", target.name)
        staged = _write_rows(rows, fields, layout, staging, journal)
        feed: list[StagedFile] = []
        if changes is not None:
            feed = _write_feed(spark, target, layout, fields, feed_fields, staging, journal, timestamp)
        faults.fault_point("staged_data")
        new_rows = sum(f.rows for f in staged)
        removed = [(path, info.size, None) for path, info in sorted(snapshot.items())]
        skipped = None
        if change_data_feed and not feed_on_replace:
            skipped = (
                f"change_data_feed_on_replace is false: the full refresh at version {version} wrote "
                "no change rows"
            )
        entry = journal.merge_entry(
            staging,
            version=version,
            timestamp=timestamp,
            target=layout,
            spec={},
            added=staged,
            removed=removed,
            new_columns=column_ddl(added),
            changes=changes,
            feed_columns=feed_schema(feed_fields),
            feed=feed,
            metrics={
                "numTargetRowsInserted": new_rows,
                "numTargetRowsDeleted": old_rows,
                "numTargetFilesAdded": len(staged),
                "numTargetFilesRemoved": len(removed),
                "numTargetChangeFilesAdded": len(feed),
            },
            operation=OPERATION,
            feed_skipped=skipped,
            catalog=shape.as_json() if shape is not None else None,
            # the table's clustering stays while its columns do (a reshape may drop one)
            cluster_by=_kept_clustering(newest.cluster_by if newest else None, fields),
            retention=_retention(upkeep, newest.retention if newest else None),
        )
        lock.check()
        journal.check(entry, target, recovering=False)
        journal.check_unchanged(entry, snapshot)
        if changes is not None:
            add_columns(spark, changes.ident, column_ddl(feed_schema(feed_fields).fields))
            feed_owner.claim(
                journal.storage, changes.location, changes.name, target.qualified_name, target.name_parts
            )
        add_columns(spark, target.ident, column_ddl(added))
        journal.commit(entry)
        committed = True
        faults.fault_point("entry")
        try:
            if shape is not None:
                layout = reregister(spark, journal, lock, entry, target)
            journal.apply(spark, entry, layout, prepared=True)
        except Exception as exc:
            raise MergeCommittedError(target.name, version, exc) from exc
    finally:
        if not committed:
            journal.discard(staging)
    feed_rows = old_rows + new_rows if changes is not None else 0
    done = Replaced(
        target.name,
        version,
        old_rows,
        new_rows,
        len(removed),
        len(staged),
        change_data_feed,
        feed_rows,
        opted_out=bool(change_data_feed) and not feed_on_replace,
    )
    logger.info("rowmerge: %s: %s", target.name, done.summary())
    return done


def _write_rows(
    rows: DataFrame, fields: list[StructField], layout: TargetTable, staging: Staging, journal: Journal
) -> list[StagedFile]:
    """Write the model's rows into the staging folder, laid out as the table's files will be."""
    out = rows.select(*[F.col(q(f.name)).cast(f.dataType).alias(f.name) for f in fields])
    writer = out.write.format(layout.file_format)
    if layout.partition_columns:
        writer = writer.partitionBy(*layout.partition_columns)
    writer.save(staging.data_dir)
    indexed = indexed_columns(fields, layout.partition_columns)
    return staged_files(layout.file_format, staging.data_dir, journal.storage, None, indexed)[0]


def _write_feed(
    spark: SparkSession,
    target: TargetTable,
    layout: TargetTable,
    fields: list[StructField],
    feed_fields: list[StructField],
    staging: Staging,
    journal: Journal,
    timestamp: datetime,
) -> list[StagedFile]:
    """Every current row as ``delete`` and every staged row as ``insert``: both read from
    files (the table's and the staged ones), so the feed is exactly what the commit swaps.
    A column one side lacks (added, or dropped by the refresh) is NULL on that side."""

    def pick(df: DataFrame, has: set[str], change: str) -> DataFrame:
        return df.select(
            *[
                (F.col(q(f.name)) if f.name.lower() in has else F.lit(None).cast(f.dataType)).alias(f.name)
                for f in feed_fields
            ],
            F.lit(change).alias(CHANGE_TYPE),
        )

    deletes = pick(target.read(spark), {f.name.lower() for f in target.schema.fields}, DELETE)
    written = (
        spark.read.format(layout.file_format)
        .schema(StructType(fields))
        .option("basePath", staging.data_dir)
        .load(staging.data_dir)
    )
    inserts = pick(written, {f.name.lower() for f in fields}, INSERT)
    return write_feed_rows(
        deletes.unionByName(inserts), feed_fields, staging.cdf_dir, journal.storage, timestamp
    )


def _kept_clustering(cluster_by: tuple[str, ...] | None, fields: list[StructField]) -> tuple[str, ...] | None:
    """The stored ``cluster_by``, if every column of it is among the new ``fields``."""
    names = {f.name.lower() for f in fields}
    return cluster_by if cluster_by and all(c.lower() in names for c in cluster_by) else None
