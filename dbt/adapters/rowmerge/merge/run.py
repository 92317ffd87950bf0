"""The entry point: ``run_merge(spark, spec)`` runs one MERGE, phase by phase.

1. spec      validate the clause spec (no Spark needed)
2. target    describe the target table; recover an interrupted earlier merge
3. plan      resolve clauses against the schemas (all config errors raise here)
4. source    materialize the source once, collect key statistics
5. scan      find touched files and check cardinality in one job (skipped for insert-only)
6. rewrite   write rewritten touched files + inserts into the commit's staging folder
7. journal   commit (create the entry), then move files into place and delete replaced ones

Nothing under the table's data paths changes before step 7's commit point; any error
before it removes the staging folder and leaves the table exactly as it was.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

from pyspark.sql import SparkSession

from .errors import CastError
from .journal import Journal, spec_digest, utc_now
from .metrics import MergeMetrics, MergeResult, timed
from .plan import CAST_ERROR_MARK, MergePlan, build_plan
from .rewrite import StagedFile, write_changes
from .scan import FileStats, ScanResult, find_touched_files, pruned_target, release
from .source import MaterializedSource, materialize, read_source
from .spec import MergeSpec, parse_spec
from .storage import Storage
from .table import TargetTable, load_target

logger = logging.getLogger("rowmerge")


def _journal(spark: SparkSession, location: str) -> Journal:
    storage = Storage(spark)
    return Journal(storage, storage.qualify(location))


def run_merge(spark: SparkSession, spec: Mapping[str, Any] | MergeSpec) -> MergeResult:
    """Merge ``spec['source']`` into ``spec['target']``; see the module doc for the phases."""
    metrics = MergeMetrics()
    with timed(metrics, "executionTimeMs"):
        parsed = spec if isinstance(spec, MergeSpec) else parse_spec(spec)
        target = load_target(spark, parsed.target)
        journal = _journal(spark, target.location)
        replayed = journal.recover(spark)
        if replayed:
            logger.info("rowmerge: recovered interrupted commit(s) %s of %s", replayed, target.name)
            target = load_target(spark, parsed.target)
        spark.catalog.refreshTable(target.name)

        raw_source = read_source(spark, parsed.source)
        plan = build_plan(parsed, target, raw_source, target.read(spark))

        logger.info("rowmerge: materializing source %s", parsed.source)
        with timed(metrics, "materializeSourceTimeMs"):
            source = materialize(spark, plan, raw_source)
        metrics["numSourceRows"] = source.num_rows
        try:
            version = _merge(spark, plan, source, journal, metrics)
        except Exception as exc:
            _raise_cast_error(exc, target)
            raise
        finally:
            source.df.unpersist()
    result = MergeResult(version, metrics.as_dict(), target.name)
    logger.info("rowmerge: %s (version %d)", result.summary(), version)
    return result


def _merge(
    spark: SparkSession,
    plan: MergePlan,
    source: MaterializedSource,
    journal: Journal,
    metrics: MergeMetrics,
) -> int:
    """Phases 5-7; returns the committed version (the current one if nothing changed)."""
    target = plan.target
    metrics["numTargetFilesBeforeSkipping"] = len(target.read(spark).inputFiles())
    pruned = pruned_target(spark, plan, source)
    scan: ScanResult | None = None
    if plan.matched or plan.not_matched_by_source:
        logger.info("rowmerge: scanning %d files of %s", metrics["numTargetFilesBeforeSkipping"], target.name)
        with timed(metrics, "scanTimeMs"):
            scan = find_touched_files(spark, plan, source, pruned)
    removed: list[FileStats] = scan.touched if scan else []

    txn = journal.new_txn()
    staging = journal.staging_dir(txn)
    committed = False
    try:
        extra = " and writing inserts" if plan.not_matched else ""
        logger.info("rowmerge: rewriting %d file(s)%s", len(removed), extra)
        with timed(metrics, "rewriteTimeMs"):
            staged = write_changes(spark, plan, source, pruned, scan, staging, journal.storage)
        _record_counts(metrics, scan, staged, removed)
        if not staged and not removed:
            logger.info("rowmerge: nothing to change in %s", target.name)
            return journal.current_version()

        logger.info("rowmerge: committing %d new, %d replaced file(s)", len(staged), len(removed))
        with timed(metrics, "commitTimeMs"):
            entry = _entry(plan, journal, txn, staged, removed, metrics)
            entry["version"] = journal.commit(entry)
            committed = True
            journal.apply(spark, entry)
        return int(entry["version"])
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
    staged: list[StagedFile],
    removed: list[FileStats],
    metrics: MergeMetrics,
) -> dict[str, Any]:
    """The journal entry: everything recovery needs to finish the commit on its own."""
    storage = journal.storage
    added = [
        {"staged": f.path, "path": journal.final_path(txn, f.path), "size": f.size, "rows": f.rows}
        for f in staged
    ]
    partitions: list[str] = []
    if plan.target.partition_columns:
        rels = {str(a["path"])[len(journal.location) + 1 :] for a in added}
        partitions = sorted({rel.rsplit("/", 1)[0] for rel in rels})
    return {
        "table": plan.target.name,
        "operation": "MERGE",
        "timestamp": utc_now(),
        "txn": txn,
        "spec_digest": spec_digest(plan.spec.raw or {}),
        "added": added,
        "removed": [
            {"path": storage.from_spark_path(f.path), "size": f.size, "rows": f.rows_read} for f in removed
        ],
        "partitions": partitions,
        "new_columns": [{"name": f.name, "type": f.dataType.simpleString()} for f in plan.new_fields],
        "metrics": metrics.as_dict(),
    }


def _raise_cast_error(exc: Exception, target: TargetTable) -> None:
    """Spark reports our cast check as a job failure; surface it as a CastError."""
    text = str(exc)
    if CAST_ERROR_MARK in text:
        found = re.search(re.escape(CAST_ERROR_MARK) + r"\[(.*?)\]", text)
        raise CastError(target.name, 1, found.group(1) if found else text.splitlines()[0]) from None


def recover(spark: SparkSession, table_name: str) -> list[int]:
    """Finish or roll back an interrupted merge of ``table_name``; return replayed versions."""
    target = load_target(spark, table_name)
    return _journal(spark, target.location).recover(spark)


def history(spark: SparkSession, table_name: str, limit: int | None = None) -> list[dict[str, Any]]:
    """Committed merges of ``table_name``, newest first."""
    target = load_target(spark, table_name)
    return _journal(spark, target.location).history(limit)
