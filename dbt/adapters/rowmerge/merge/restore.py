"""``restore``: a table's rows become exactly those of an earlier version again, as a new
RESTORE version (history shows which version it brought back).

Only the files that differ move: each file of version N that the table no longer has comes
back from the ``retained/<k>/`` folder that kept it (journal/retention.py), and each current
file that N did not have leaves — into ``retained/<this version>/`` while retention lasts, so a
restore can itself be undone. Columns added since N stay, NULL in the rows N brings back
(the table keeps its columns, as a merge never drops one).

The change feed describes exactly the rows that differ, computed over the files that move in
both directions (EXCEPT ALL), not over whole files: rows only the leaving files hold are
``delete``, rows only the returning files hold are ``insert``; with ``unique_key``, a deleted
and an inserted row of the same key are one update (``update_preimage`` / ``update_postimage``).
A consumer that applies a version's deletes (and pre-images) before its inserts (and
post-images) ends with the restored table.

Steps (hold the lock): recover; read every entry; the files of N and where each is now; the
files that move; the change rows, staged; the entry, checked as recovery will check it; the
commit point; then apply, which moves the retained files back like staged ones.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, MapType, StructType

from . import faults
from .as_of import check_retained_present, read_files, version_arguments
from .cdf import CHANGE_TYPE, feed_schema, prepare_feed_table, write_feed_rows
from .errors import MergeCommittedError, MergeSpecError, UnsupportedTableError
from .journal import Entry, Journal
from .lean_columns import lean_columns
from .lock import TableLock
from .optimize import orderable
from .outputs import (
    BINARY_COLLATION,
    DELETE,
    INSERT,
    POSTIMAGE,
    PREIMAGE,
    collated,
    holds_collated,
    holds_map_or_variant,
    q,
)
from .spec import DEFAULT_LOCK_TIMEOUT_S, lock_timeout_problems
from .table import TargetTable, load_target

logger = logging.getLogger("rowmerge")

OPERATION = "RESTORE"


@dataclass(frozen=True)
class RestoreResult:
    """What a restore did (or, as a dry run, would do)."""

    table: str
    version: int | None  # the RESTORE version committed (None: nothing to change, or a dry run)
    restored: int  # the version whose rows the table has now (or would have)
    files_removed: int
    files_restored: int
    rows_deleted: int
    rows_inserted: int
    rows_updated: int
    change_table: str | None = None
    dry_run: bool = False
    metrics: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "version": self.version,
            "restored": self.restored,
            "files_removed": self.files_removed,
            "files_restored": self.files_restored,
            "rows_deleted": self.rows_deleted,
            "rows_inserted": self.rows_inserted,
            "rows_updated": self.rows_updated,
            "change_table": self.change_table,
            "dry_run": self.dry_run,
        }

    def summary(self) -> str:
        if not (self.files_removed or self.files_restored):
            return f"{self.table}: already has the rows of version {self.restored}; nothing to restore"
        verb = "would restore" if self.dry_run else "restored"
        at = f" as version {self.version}" if self.version is not None else ""
        return (
            f"{self.table}: {verb} the rows of version {self.restored}{at}: "
            f"{self.files_restored} file(s) back, {self.files_removed} out; "
            f"{self.rows_deleted} row(s) deleted, {self.rows_inserted} inserted, {self.rows_updated} updated"
        )


def restore(
    spark: SparkSession,
    table: str,
    version: int | None = None,
    timestamp: str | datetime | None = None,
    unique_key: Sequence[str] | str | None = None,
    dry_run: bool = False,
    lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
) -> RestoreResult:
    """Make ``table``'s rows exactly those of ``version`` (or of the newest version committed at
    or before ``timestamp``) again, committed as a new version.

    ``unique_key``: the model's key; pairs a deleted and an inserted row of one key into an
    update in the change feed (without it they stay a delete and an insert). ``dry_run``:
    report the files and rows it would change, writing nothing and taking no lock.
    Raises MergeSpecError for bad arguments and JournalError for a version that cannot be
    brought back (the message names the oldest readable one); the table is left as it was.
    """
    when, keys = _arguments(version, timestamp, unique_key, lock_timeout_s)
    from .run import locate_or_finish, open_journal, recover_locked, storage_errors, table_lock

    with lean_columns(), storage_errors(f"RESTORE of {table}"):
        journal = open_journal(spark, locate_or_finish(spark, table, "RESTORE table"))
        journal.check_placement(table)
        if dry_run:
            target = load_target(spark, table)
            journal.check_bound(target)
            return _restore(spark, journal, None, target, version, when, keys)
        with table_lock(journal, table, OPERATION, lock_timeout_s) as lock:
            target = load_target(spark, table)
            if recover_locked(spark, journal, lock, target).rolled_forward:
                target = load_target(spark, table)
            journal.check_bound(target)
            return _restore(spark, journal, lock, target, version, when, keys)


def _arguments(
    version: Any, timestamp: Any, unique_key: Any, lock_timeout_s: Any
) -> tuple[datetime | None, tuple[str, ...]]:
    problems: list[str] = lock_timeout_problems(lock_timeout_s)
    when = version_arguments(version, timestamp, problems)
    keys: tuple[str, ...] = ()
    if isinstance(unique_key, str) and unique_key.strip():
        keys = (unique_key.strip(),)
    elif isinstance(unique_key, (list, tuple)) and all(isinstance(k, str) and k.strip() for k in unique_key):
        keys = tuple(k.strip() for k in unique_key)
    elif unique_key is not None:
        problems.append(f"`unique_key` must be a column name or a list of column names, got {unique_key!r}")
    if problems:
        raise MergeSpecError(problems)
    return when, keys


def _restore(
    spark: SparkSession,
    journal: Journal,
    lock: TableLock | None,
    target: TargetTable,
    version: int | None,
    when: datetime | None,
    keys: tuple[str, ...],
) -> RestoreResult:
    versions, applied = journal.listing()
    if not versions:
        raise MergeSpecError([f"{target.name} has no journal yet, so it has no earlier version to restore"])
    key_columns = _key_columns(target, keys)
    entries = journal.all_entries(versions, target.name)
    if version is None:
        assert when is not None
        version = journal.version_at(entries, when, target.name)
    wanted = journal.snapshot_of(version, entries, applied, target.name)
    newest = entries[-1]
    current = journal.snapshot_of(newest.version, entries, applied, target.name)
    current_paths = {f.path for f, _ in current.files}
    listing = journal.snapshot()
    _check_only_journal_files(target, current_paths, listing)
    back = [(f, where) for f, where in wanted.files if f.path not in current_paths]
    wanted_paths = {f.path for f, _ in wanted.files}
    out = [f for f, _ in current.files if f.path not in wanted_paths]
    change_table = _feed_table(entries, journal)
    if not back and not out:
        return RestoreResult(target.name, None, version, 0, 0, 0, 0, 0, change_table, lock is None)

    check_retained_present(journal, target, version, back)
    leaving = read_files(spark, journal, target, [(f, f.path) for f in out])
    returning = read_files(spark, journal, target, back)
    changes = _changes(leaving, returning, target.schema, key_columns)
    if lock is None:
        counts = _counts(changes)
        return RestoreResult(
            target.name, None, version, len(out), len(back), *counts, change_table, dry_run=True
        )

    number = journal.next_version(versions, target.name)
    timestamp = journal.commit_time(versions, newest)
    fields = list(target.schema.fields)
    feed_table = (
        prepare_feed_table(spark, change_table, fields, target, journal.storage) if change_table else None
    )
    staging = journal.stage()
    committed = False
    try:
        feed = []
        if feed_table is not None:
            feed = write_feed_rows(changes, fields, staging.cdf_dir, journal.storage, timestamp)
        counts = _counts(changes) if feed_table is None else _counts_of_feed(spark, feed, journal)
        faults.fault_point("restore_staged")
        metrics: dict[str, Any] = {
            "restoredVersion": version,
            "numFilesRestored": len(back),
            "numFilesRemoved": len(out),
            "numTargetRowsDeleted": counts[0],
            "numTargetRowsInserted": counts[1],
            "numTargetRowsUpdated": counts[2],
            "numTargetChangeFilesAdded": len(feed),
        }
        entry = journal.restore_entry(
            staging,
            version=number,
            timestamp=timestamp,
            target=target,
            restored=version,
            back=back,
            removed=out,
            changes=feed_table,
            feed_columns=feed_schema(fields),
            feed=feed,
            metrics=metrics,
            cluster_by=newest.cluster_by,
            retention=newest.retention,
        )
        lock.check()
        journal.check(entry, target, recovering=False)
        journal.check_unchanged(entry, listing)
        journal.commit(entry)
        committed = True
        faults.fault_point("restore_entry")
        try:
            journal.apply(spark, entry, target, steps="restore_")
        except Exception as exc:
            raise MergeCommittedError(target.name, number, exc) from exc
    finally:
        if not committed:
            journal.discard(staging)
    done = RestoreResult(
        target.name, number, version, len(out), len(back), *counts, change_table, False, metrics
    )
    logger.info("rowmerge: %s", done.summary())
    return done


def _check_only_journal_files(target: TargetTable, known: set[str], listing: Mapping[str, Any]) -> None:
    """Refuse when the table's folder and its journal disagree about the current files: a
    file another job wrote would stay (the table would not be the version restored), one it
    deleted would be missing from the rows the feed describes."""
    foreign = sorted(set(listing) - known)
    gone = sorted(known - set(listing))
    if not (foreign or gone):
        return
    shown = ", ".join((foreign + gone)[:3])
    raise UnsupportedTableError(
        f"RESTORE of {target.name} refused: its folder and its journal disagree about the current "
        f"files ({len(foreign)} file(s) the journal does not know, {len(gone)} it lists that are "
        f"missing: {shown}). Another job wrote the table's folder without row_level_merge. Rebuild "
        "the table with `dbt run --full-refresh`, or remove the foreign files, then run again. "
        "Nothing was changed."
    )


def _key_columns(target: TargetTable, keys: Sequence[str]) -> list[str]:
    """``keys`` as the table names its columns; MergeSpecError naming a wrong one."""
    out = []
    for k in keys:
        try:
            out.append(target.field(k).name)
        except KeyError:
            raise MergeSpecError(
                [
                    f"`unique_key` column {k!r} is not a column of {target.name} (its columns: "
                    f"{', '.join(target.columns)})"
                ]
            ) from None
    return out


def _feed_table(entries: Sequence[Entry], journal: Journal) -> str | None:
    """The change table the model writes now: that of the newest version that changed rows
    (a merge, a full refresh or a restore), if it wrote change rows (one a vacuum folded:
    as its base recorded)."""
    for e in reversed(entries):
        if e.operation in ("MERGE", "REPLACE TABLE", "RESTORE") and e.txn is not None:
            return e.cdf.table if e.cdf is not None else None
    base = journal.base()
    return base.feed_table if base is not None else None


def _changes(leaving: DataFrame, returning: DataFrame, schema: StructType, keys: Sequence[str]) -> DataFrame:
    """The change rows of the restore, with ``_change_type``: rows only the leaving files
    hold (delete), rows only the returning ones hold (insert); paired into updates by
    ``keys`` where each side has exactly one row of a key.

    Spark has no set operations on maps: a map column is compared as its entries sorted by key
    (``map_entries``, an array Spark can compare) and turned back into a map for the change
    rows. A table with a map nested in a struct or an array cannot be compared row by row:
    every leaving row is a delete and every returning row an insert (never paired, or an
    unchanged row would be an update), which still ends with the restored table. A string
    column of a collation other than binary is compared as binary (under UTF8_LCASE 'ABC' and
    'abc' are equal, but a restore from one to the other changes the row); one nested in a
    struct, an array or a map takes the same way as a nested map."""
    if any(
        (holds_map_or_variant(f.dataType) and not _top_map(f.dataType))
        or (holds_collated(f.dataType) and not collated(f.dataType))
        for f in schema.fields
    ):
        # (so is a variant, which no set operation takes, and a map of values that cannot be sorted)
        cols = [F.col(q(f.name)) for f in schema.fields]
        return leaving.select(*cols, F.lit(DELETE).alias(CHANGE_TYPE)).unionByName(
            returning.select(*cols, F.lit(INSERT).alias(CHANGE_TYPE))
        )
    cols = [F.col(q(f.name)) for f in schema.fields]
    as_entries, back = [], []
    for f in schema.fields:
        c = F.col(q(f.name))
        if _top_map(f.dataType):
            as_entries.append(F.array_sort(F.map_entries(c)).alias(f.name))
            back.append(F.map_from_entries(c).alias(f.name))
        elif collated(f.dataType):  # 'ABC' and 'abc' are other rows, also where they collate equal
            as_entries.append(F.collate(c, BINARY_COLLATION).alias(f.name))
            back.append(F.collate(c, f.dataType.collation).alias(f.name))  # type: ignore[attr-defined]
        else:
            as_entries.append(c)
            back.append(c)
    gone = leaving.select(*as_entries).exceptAll(returning.select(*as_entries)).select(*back)
    new = returning.select(*as_entries).exceptAll(leaving.select(*as_entries)).select(*back)
    if not keys:
        return gone.withColumn(CHANGE_TYPE, F.lit(DELETE)).unionByName(
            new.withColumn(CHANGE_TYPE, F.lit(INSERT))
        )
    key_cols = [q(k) for k in keys]
    once_gone = gone.groupBy(*key_cols).count().where("count = 1").drop("count")
    once_new = new.groupBy(*key_cols).count().where("count = 1").drop("count")
    paired = once_gone.join(once_new, on=list(keys), how="inner").withColumn("__paired", F.lit(True))

    def typed(df: DataFrame, single: str, pair: str) -> DataFrame:
        marked = df.join(paired, on=list(keys), how="left")
        change = F.when(F.col("__paired"), F.lit(pair)).otherwise(F.lit(single))
        return marked.select(*cols, change.alias(CHANGE_TYPE))

    return typed(gone, DELETE, PREIMAGE).unionByName(typed(new, INSERT, POSTIMAGE))


def _top_map(dt: DataType) -> bool:
    """A map whose keys and values hold no map and can be sorted (array_sort of its entries
    needs that): compared as its sorted entries."""
    return isinstance(dt, MapType) and orderable(dt.keyType) and orderable(dt.valueType)


def _counts(changes: DataFrame) -> tuple[int, int, int]:
    """(deleted, inserted, updated) rows of the change rows."""
    by = {r[0]: r[1] for r in changes.groupBy(CHANGE_TYPE).count().collect()}
    return by.get(DELETE, 0), by.get(INSERT, 0), by.get(POSTIMAGE, 0)


def _counts_of_feed(spark: SparkSession, feed: Sequence[Any], journal: Journal) -> tuple[int, int, int]:
    """The counts from the staged change rows (what the feed will hold), read back once."""
    if not feed:
        return 0, 0, 0
    paths = [f.path for f in feed]  # as the storage names them (see as_of.read_files)
    return _counts(spark.read.parquet(*paths))
