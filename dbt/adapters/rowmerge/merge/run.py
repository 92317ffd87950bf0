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

from .errors import CastError, MergeError
from .journal import Journal, spec_digest, utc_now
from .metrics import MergeMetrics, MergeResult, timed
from .plan import CAST_ERROR_MARK, build_plan
from .rewrite import write_changes
from .scan import find_touched_files, pruned_target
from .source import materialize, read_source
from .spec import MergeSpec, parse_spec
from .storage import Storage
from .table import load_target

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
        spark.catalog.refreshTable(target.name)
        journal = _journal(spark, target.location)
        storage = journal.storage
        replayed = journal.recover(spark)
        if replayed:
            logger.info("rowmerge: recovered interrupted commit(s) %s of %s", replayed, target.name)
            target = load_target(spark, parsed.target)

        raw_source = read_source(spark, parsed.source)
        plan = build_plan(parsed, target, raw_source, target.read(spark))

        logger.info("rowmerge: materializing source %s", parsed.source)
        with timed(metrics, "materializeSourceTimeMs"):
            source = materialize(spark, plan, raw_source)
        metrics["numSourceRows"] = source.num_rows
        txn = journal.new_txn()
        staging = journal.staging_dir(txn)
        committed = False
        try:
            metrics["numTargetFilesBeforeSkipping"] = len(target.read(spark).inputFiles())
            pruned = pruned_target(spark, plan, source)
            scan = None
            with timed(metrics, "scanTimeMs"):
                if plan.matched or plan.not_matched_by_source:
                    logger.info(
                        "rowmerge: scanning %s files of %s",
                        metrics["numTargetFilesBeforeSkipping"],
                        target.name,
                    )
                    scan = find_touched_files(spark, plan, source, pruned)
            if scan is not None:
                metrics["numTargetFilesAfterSkipping"] = scan.files_scanned
                metrics["numTargetRowsMatchedUpdated"] = scan.matched_updated
                metrics["numTargetRowsMatchedDeleted"] = scan.matched_deleted
                metrics["numTargetRowsNotMatchedBySourceUpdated"] = scan.nmbs_updated
                metrics["numTargetRowsNotMatchedBySourceDeleted"] = scan.nmbs_deleted
            else:
                metrics["numTargetFilesAfterSkipping"] = metrics["numTargetFilesBeforeSkipping"]

            logger.info(
                "rowmerge: rewriting %d file(s)%s",
                len(scan.touched) if scan else 0,
                " and writing inserts" if plan.not_matched else "",
            )
            with timed(metrics, "rewriteTimeMs"):
                staged = write_changes(spark, plan, source, pruned, scan, staging, storage)

            written = sum(f.rows for f in staged)
            updated = metrics["numTargetRowsMatchedUpdated"] + metrics["numTargetRowsNotMatchedBySourceUpdated"]
            metrics["numTargetRowsUpdated"] = updated
            metrics["numTargetRowsDeleted"] = (
                metrics["numTargetRowsMatchedDeleted"] + metrics["numTargetRowsNotMatchedBySourceDeleted"]
            )
            inserted = scan.inserted if scan is not None else written
            metrics["numTargetRowsInserted"] = inserted
            metrics["numTargetRowsCopied"] = max(0, written - updated - inserted) if scan and scan.touched else 0
            removed = scan.touched if scan else []
            metrics["numTargetFilesAdded"] = len(staged)
            metrics["numTargetFilesRemoved"] = len(removed)
            metrics["numTargetBytesAdded"] = sum(f.size for f in staged)
            metrics["numTargetBytesRemoved"] = sum(f.size for f in removed)

            if not staged and not removed:
                logger.info("rowmerge: nothing to change in %s", target.name)
                storage.delete(staging, recursive=True)
                return MergeResult(journal.current_version(), metrics.as_dict(), target.name)

            logger.info("rowmerge: committing %d new, %d replaced file(s)", len(staged), len(removed))
            with timed(metrics, "commitTimeMs"):
                added = [
                    {"staged": f.path, "path": journal.final_path(txn, f.path), "size": f.size, "rows": f.rows}
                    for f in staged
                ]
                partitions = sorted(
                    {a["path"][len(journal.location) + 1 :].rsplit("/", 1)[0] for a in added}
                ) if target.partition_columns else []
                entry = {
                    "table": target.name,
                    "operation": "MERGE",
                    "timestamp": utc_now(),
                    "txn": txn,
                    "spec_digest": spec_digest(parsed.raw or {}),
                    "added": added,
                    "removed": [
                        {"path": storage.from_spark_path(f.path), "size": f.size, "rows": f.rows_read}
                        for f in removed
                    ],
                    "partitions": partitions,
                    "new_columns": [
                        {"name": f.name, "type": f.dataType.simpleString()} for f in plan.new_fields
                    ],
                    "metrics": metrics.as_dict(),
                }
                version = journal.commit(entry)
                committed = True
                entry["version"] = version
                journal.apply(spark, entry)
        except MergeError:
            raise
        except Exception as exc:
            text = str(exc)
            if CAST_ERROR_MARK in text:
                m = re.search(re.escape(CAST_ERROR_MARK) + r"\[(.*?)\]", text)
                raise CastError(target.name, 1, m.group(1) if m else text.splitlines()[0]) from None
            raise
        finally:
            if not committed:
                storage.delete(staging, recursive=True)
            source.df.unpersist()
    result_metrics = metrics.as_dict()
    result = MergeResult(version, result_metrics, target.name)
    logger.info("rowmerge: %s (version %d)", result.summary(), version)
    return result


def recover(spark: SparkSession, table_name: str) -> list[int]:
    """Finish or roll back an interrupted merge of ``table_name``; return replayed versions."""
    target = load_target(spark, table_name)
    return _journal(spark, target.location).recover(spark)


def history(spark: SparkSession, table_name: str, limit: int | None = None) -> list[dict[str, Any]]:
    """Committed merges of ``table_name``, newest first."""
    target = load_target(spark, table_name)
    return _journal(spark, target.location).history(limit)
