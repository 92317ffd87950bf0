"""The entry points: ``run_merge(spark, spec)`` runs one MERGE, phase by phase; ``recover``,
``history`` and ``start_history`` look after a table's journal.

1. spec      validate the clause spec (no Spark needed)
2. lock      take the table's writer lock, waiting up to ``lock_timeout_s``
3. recover   finish (or roll back) an interrupted earlier commit; describe the target as it is now
4. plan      resolve clauses against the schemas (all config errors raise here)
5. source    materialize the source once, collect key statistics
6. scan      find touched files and check cardinality in one job (skipped for insert-only)
7. rewrite   write rewritten touched files + inserts into the commit's staging folder
8. cdf       write the change rows into the same staging folder (with ``change_data_feed``)
9. journal   commit (create the planned entry), then move files into place and delete replaced ones

Nothing under the table's data paths changes before step 9's commit point; any error before
it removes the staging folder and leaves the table (and its change feed) exactly as it was.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pyspark.sql import SparkSession

from .cdf import (
    COMMIT_VERSION,
    ChangesTable,
    change_rows,
    create_changes_table,
    drop_changes_table,
    feed_schema,
    prepare_changes_table,
    write_change_feed,
)
from .errors import CastError
from .journal import (
    CDF_DIR,
    DATA_DIR,
    ENTRY_FORMAT,
    Journal,
    Recovery,
    fault_point,
    iso,
    new_txn,
    spec_digest,
    utc_now,
)
from .lock import TableLock
from .metrics import MergeMetrics, MergeResult, timed
from .plan import CAST_ERROR_MARK, MergePlan, build_plan
from .rewrite import StagedFile, write_changes
from .scan import FileStats, ScanResult, find_touched_files, pruned_target, release
from .source import MaterializedSource, materialize, read_source
from .spec import DEFAULT_LOCK_TIMEOUT_S, MergeSpec, parse_spec
from .storage import FileInfo, storage_for
from .table import TargetTable, load_target, table_files

logger = logging.getLogger("rowmerge")


def _journal(spark: SparkSession, location: str) -> Journal:
    storage = storage_for(spark)
    return Journal(storage, storage.qualify(location))


def _lock(journal: Journal, table: str, operation: str, timeout_s: float) -> TableLock:
    return TableLock(journal.storage, journal.log_dir, table, operation, timeout_s)


@dataclass(frozen=True)
class Commit:
    """What the merge commits against: the version it plans and the files it read."""

    version: int
    snapshot: dict[str, FileInfo]
    changes: ChangesTable | None
    initial: dict[str, Any] | None  # version 0 to write first, for a table without a journal


def run_merge(spark: SparkSession, spec: Mapping[str, Any] | MergeSpec) -> MergeResult:
    """Merge ``spec['source']`` into ``spec['target']``; see the module doc for the phases."""
    metrics = MergeMetrics()
    with timed(metrics, "executionTimeMs"):
        parsed = spec if isinstance(spec, MergeSpec) else parse_spec(spec)
        journal = _journal(spark, load_target(spark, parsed.target).location)
        with _lock(journal, parsed.target, "MERGE", parsed.lock_timeout_s) as lock:
            _recover(spark, journal, lock, parsed.target)
            # Described only now: a writer we waited for may have changed the schema.
            target = load_target(spark, parsed.target)
            spark.catalog.refreshTable(target.name)
            versions = journal.versions()
            snapshot = journal.snapshot()
            initial = None if versions else _initial_entry(spark, target, journal, "CONVERT", snapshot)

            raw_source = read_source(spark, parsed.source)
            plan = build_plan(parsed, target, raw_source, target.read(spark))
            changes = prepare_changes_table(spark, plan, journal.storage) if parsed.change_data_feed else None

            logger.info("rowmerge: materializing source %s", parsed.source)
            with timed(metrics, "materializeSourceTimeMs"):
                source = materialize(spark, plan, raw_source)
            metrics["numSourceRows"] = source.num_rows
            commit = Commit((versions[-1] if versions else 0) + 1, snapshot, changes, initial)
            try:
                version = _merge(spark, plan, source, journal, lock, commit, metrics)
            except Exception as exc:
                _raise_cast_error(exc, target)
                raise
            finally:
                source.df.unpersist()
    result = MergeResult(version, metrics.as_dict(), target.name)
    logger.info("rowmerge: %s (version %d)", result.summary(), version)
    return result


def _recover(spark: SparkSession, journal: Journal, lock: TableLock, table: str) -> Recovery:
    """Under the lock: fence out a holder that may still run, then recover."""
    if lock.took_over is not None and lock.took_over_live:
        if not journal.versions():  # keep version 0 the table as found, before the fence
            target = load_target(spark, table)
            journal.write_initial(_initial_entry(spark, target, journal, "CONVERT", journal.snapshot()))
        version = journal.fence(table, f"lock taken over from {lock.took_over.describe()}")
        logger.warning(
            "rowmerge: took over the expired lock of %s on %s; committed fence version %d so that "
            "writer can no longer commit",
            lock.took_over.describe(),
            table,
            version,
        )
    done = journal.recover(spark, table)
    if done:
        logger.info("rowmerge: recovered %s: %s", table, done.describe())
    return done


def _merge(
    spark: SparkSession,
    plan: MergePlan,
    source: MaterializedSource,
    journal: Journal,
    lock: TableLock,
    commit: Commit,
    metrics: MergeMetrics,
) -> int:
    """Phases 6-9; returns the committed version (the current one if nothing changed)."""
    target = plan.target
    metrics["numTargetFilesBeforeSkipping"] = len(target.read(spark).inputFiles())
    pruned = pruned_target(spark, plan, source)
    scan: ScanResult | None = None
    if plan.matched or plan.not_matched_by_source:
        logger.info("rowmerge: scanning %d files of %s", metrics["numTargetFilesBeforeSkipping"], target.name)
        with timed(metrics, "scanTimeMs"):
            scan = find_touched_files(spark, plan, source, pruned)
    removed: list[FileStats] = scan.touched if scan else []

    txn = new_txn()
    staging = journal.staging_dir(txn)
    data_dir = f"{staging}/{DATA_DIR}"
    committed = False
    try:
        extra = " and writing inserts" if plan.not_matched else ""
        logger.info("rowmerge: rewriting %d file(s)%s", len(removed), extra)
        with timed(metrics, "rewriteTimeMs"):
            staged, removed_rows = write_changes(spark, plan, source, pruned, scan, data_dir, journal.storage)
        _record_counts(metrics, scan, staged, removed)
        if not staged and not removed:
            logger.info("rowmerge: nothing to change in %s", target.name)
            return commit.version - 1
        fault_point("staged_data")

        timestamp = utc_now()
        feed: list[StagedFile] = []
        if commit.changes is not None:
            logger.info("rowmerge: writing change feed rows for %s", commit.changes.name)
            with timed(metrics, "rewriteTimeMs"):  # the same phase: writing the commit's files
                rows = change_rows(spark, plan, source, pruned, scan, data_dir)
                if rows is not None:
                    feed = write_change_feed(
                        spark, plan, rows, f"{staging}/{CDF_DIR}", journal.storage, timestamp
                    )
            fault_point("staged_cdf")
        metrics["numTargetChangeFilesAdded"] = len(feed)

        logger.info("rowmerge: committing %d new, %d replaced file(s)", len(staged), len(removed))
        with timed(metrics, "commitTimeMs"):
            entry = _entry(
                plan, journal, txn, commit, timestamp, data_dir, staged, removed, removed_rows, feed, metrics
            )
            lock.check()
            journal.commit(entry, commit.snapshot, commit.initial)
            committed = True
            fault_point("entry")
            journal.apply(spark, entry, target.name)
        return commit.version
    finally:
        release(scan)
        if not committed:
            journal.storage.delete(staging, recursive=True)


def _record_counts(
    metrics: MergeMetrics, scan: ScanResult | None, staged: list[StagedFile], removed: list[FileStats]
) -> None:
    written = sum(f.rows for f in staged)
    if scan is not None:
        metrics["numTargetFilesAfterSkipping"] = scan.files_scanned
        metrics["numTargetRowsMatchedUpdated"] = scan.matched_updated
        metrics["numTargetRowsMatchedDeleted"] = scan.matched_deleted
        metrics["numTargetRowsNotMatchedBySourceUpdated"] = scan.nmbs_updated
        metrics["numTargetRowsNotMatchedBySourceDeleted"] = scan.nmbs_deleted
        inserted = scan.inserted
    else:  # insert-only: no scan; every written row is an insert
        metrics["numTargetFilesAfterSkipping"] = metrics["numTargetFilesBeforeSkipping"]
        inserted = written
    updated = scan.matched_updated + scan.nmbs_updated if scan else 0
    metrics["numTargetRowsUpdated"] = updated
    metrics["numTargetRowsDeleted"] = scan.matched_deleted + scan.nmbs_deleted if scan else 0
    metrics["numTargetRowsInserted"] = inserted
    # Rows written = rewritten (copied + updated) + inserted.
    metrics["numTargetRowsCopied"] = max(0, written - updated - inserted) if removed else 0
    metrics["numTargetFilesAdded"] = len(staged)
    metrics["numTargetFilesRemoved"] = len(removed)
    metrics["numTargetBytesAdded"] = sum(f.size for f in staged)
    metrics["numTargetBytesRemoved"] = sum(f.size for f in removed)


def _entry(
    plan: MergePlan,
    journal: Journal,
    txn: str,
    commit: Commit,
    timestamp: datetime,
    data_dir: str,
    staged: list[StagedFile],
    removed: list[FileStats],
    removed_rows: dict[str, int],
    feed: list[StagedFile],
    metrics: MergeMetrics,
) -> dict[str, Any]:
    """The journal entry: everything recovery needs to finish the commit on its own."""
    storage = journal.storage
    added = [
        {"staged": f.path, "path": journal.final_path(data_dir, f.path), "size": f.size, "rows": f.rows}
        for f in staged
    ]
    partitions: list[str] = []
    if plan.target.partition_columns:
        rels = {str(a["path"])[len(journal.location) + 1 :] for a in added}
        partitions = sorted({rel.rsplit("/", 1)[0] for rel in rels})
    cdf = None
    if commit.changes is not None and feed:
        partition = f"{COMMIT_VERSION}={commit.version}"
        cdf = {
            "table": commit.changes.name,
            "location": commit.changes.location,
            "partition": partition,
            "columns": feed_schema(plan.output_fields).jsonValue(),
            "files": [
                {
                    "staged": f.path,
                    "path": f"{commit.changes.location}/{partition}/{f.path.rsplit('/', 1)[1]}",
                    "size": f.size,
                    "rows": f.rows,
                }
                for f in feed
            ],
        }
    return {
        "format": ENTRY_FORMAT,
        "version": commit.version,
        "table": plan.target.name,
        "operation": "MERGE",
        "timestamp": iso(timestamp),
        "txn": txn,
        "read_version": commit.version - 1,
        "spec_digest": spec_digest(plan.spec.raw or {}),
        "added": added,
        "removed": [
            {"path": path, "size": size, "rows": removed_rows[path]}
            for path, size in sorted((storage.from_spark_path(f.path), f.size) for f in removed)
        ],
        "partitions": partitions,
        "new_columns": [{"name": f.name, "type": f.dataType.simpleString()} for f in plan.new_fields],
        "cdf": cdf,
        "metrics": metrics.as_dict(),
    }


def _initial_entry(
    spark: SparkSession,
    target: TargetTable,
    journal: Journal,
    operation: str,
    snapshot: Mapping[str, FileInfo],
) -> dict[str, Any]:
    """Version 0: the table's files as dbt created them (or as the first merge found them)."""
    files = table_files(target, journal.storage, snapshot)
    return {
        "format": ENTRY_FORMAT,
        "version": 0,
        "table": target.name,
        "operation": operation,
        "timestamp": iso(utc_now()),
        "added": files,
        "removed": [],
        "metrics": {
            "numFiles": len(files),
            "numOutputRows": sum(f["rows"] or 0 for f in files),
            "numOutputBytes": sum(f["size"] for f in files),
        },
    }


def _raise_cast_error(exc: Exception, target: TargetTable) -> None:
    """Spark reports our cast check as a job failure; surface it as a CastError."""
    text = str(exc)
    if CAST_ERROR_MARK in text:
        found = re.search(re.escape(CAST_ERROR_MARK) + r"\[(.*?)\]", text)
        raise CastError(target.name, 1, found.group(1) if found else text.splitlines()[0]) from None


def recover(spark: SparkSession, table_name: str, lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S) -> Recovery:
    """Finish or roll back an interrupted merge of ``table_name`` (waits for a running merge)."""
    target = load_target(spark, table_name)
    journal = _journal(spark, target.location)
    with _lock(journal, target.name, "RECOVER", lock_timeout_s) as lock:
        return _recover(spark, journal, lock, target.name)


def history(spark: SparkSession, table_name: str, limit: int | None = None) -> list[dict[str, Any]]:
    """Committed versions of ``table_name``, newest first."""
    target = load_target(spark, table_name)
    return _journal(spark, target.location).history(limit)


def start_history(
    spark: SparkSession,
    table_name: str,
    operation: str = "CREATE TABLE",
    change_data_feed: str | None = None,
    lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
) -> dict[str, Any]:
    """Record ``table_name`` as just (re)built: version 0, and an empty change feed.

    dbt calls this after creating the table on a first run or ``--full-refresh``: any earlier
    versions are forgotten and the change table, if ``change_data_feed`` names one, is
    recreated empty with the table's columns.
    """
    target = load_target(spark, table_name)
    journal = _journal(spark, target.location)
    with _lock(journal, target.name, operation, lock_timeout_s):
        forgotten = journal.reset()
        spark.catalog.refreshTable(target.name)
        entry = _initial_entry(spark, target, journal, operation, journal.snapshot())
        journal.write_initial(entry)
        changes_removed = 0
        if change_data_feed:
            changes_removed = drop_changes_table(spark, change_data_feed)
            create_changes_table(spark, change_data_feed, feed_schema(list(target.schema.fields)))
    return {
        "version": 0,
        "operation": operation,
        "files": entry["metrics"]["numFiles"],
        "rows": entry["metrics"]["numOutputRows"],
        "versions_forgotten": forgotten,
        "changes_table": change_data_feed,
        "changes_rows_removed": changes_removed,
    }
