"""Phases 5-8 in one job, when no source row can match: the inserts written as the source is read.

The usual path checkpoints the source (a Spark job: its rows, their count and key statistics)
and then writes what the clauses decide (a second job). When the key of every source row lies
below or above all the files' ranges — new ids, new timestamps: an hourly insert — no row can
match a target row, and the merge is the rows the not_matched clauses insert. One job can then
read the source, write those inserts and observe the statistics the usual path gathers: the
row count, the rows with a NULL key, and how many rows lie inside the ranges.

It is a bet, checked by the job itself: the job writes only the rows outside the ranges and
counts the others. If some row lies inside, the write is discarded and the merge takes the
usual path, which evaluates the source anew; nothing of the first evaluation is kept, so what
commits still comes from one evaluation of the source. The bet is taken only where it is
likely to win and cheap to lose (:func:`direct_insert`):

- when the previous merge (the newest version, or the one an auto-compaction followed) counted
  every source row outside the ranges (``numSourceRowsOutsideRanges``), or, with no merge
  before it to tell (version 0, a restore), when the merge is insert-only: so a model whose
  keys fall inside the ranges (random ids) loses the bet once, not every run;
- the table's files have key ranges (file statistics), the session is classic (observed
  metrics), and Spark estimates the source's plan (its size). A source it cannot estimate (rows
  built in the driver, an RDD) carries ``spark.sql.defaultSizeInBytes``, the largest long: that
  is no estimate, and such a source takes the usual path.

A source estimated at most :data:`DIRECT_SOURCE_BYTES` goes out of one task (one file, as the
usual path writes a small insert). A larger one, into a table without partition columns, is
written by the source's own tasks, one file each, as Spark's own INSERT writes: Spark cut them
at most ``spark.sql.files.maxPartitionBytes`` of files (or sized a shuffle's). That write is
checked too: Spark estimates a scan at its files' size whatever the filter, so a source that
filters a large table may leave a few rows in each of many tasks. When the write holds more than
twice the files the usual path would write for its rows (:func:`.rewrite.files_for`), it is
thrown away as a lost bet is (``directInsertScattered``), and the merges that follow write a
large source the usual way, carrying the flag, until the merge before is not a merge (a
restore; an auto-compaction is looked through): so a scattered source costs one job, once.

A lost bet costs the job that read the source; the usual path's two jobs follow.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any
from uuid import uuid4

from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from .encodings import insert_options
from .filestats import indexed_columns
from .journal import Entry, Staging
from .outputs import INSERT, PREFIX, enforce_constraints, inserts
from .plan import MergePlan
from .rewrite import (
    ROWS_PER_INSERT_FILE,
    StagedFile,
    feed_rows,
    files_for,
    save_rows,
    spread_inserts,
    staged_files,
)
from .source import row_counts
from .storage import Storage, is_connect

# A source whose plan Spark estimates at more bytes takes the usual path: the direct write
# reads it in one task. Spark's estimate of a scan is its files' size (a filter does not lower
# it), so a source that filters a large table is never read by one task.
# (A context variable, so that tests send small sources down the large source's path.)
DIRECT_SOURCE_BYTES: ContextVar[int] = ContextVar("rowmerge_direct_source_bytes", default=64 * 1024 * 1024)


@dataclass(frozen=True)
class DirectBet:
    """The bet :func:`direct_insert` takes: ``inside`` is the SQL over the source's alias, true
    where a row's keys lie inside the files' ranges; ``source_bytes`` and ``source_rows``
    Spark's estimates of the source's size and rows (None where it has none), which also tell
    how its inserts may be written (:func:`.encodings.insert_options`)."""

    inside: str
    source_bytes: int
    source_rows: int | None = None
    spread: bool = False  # written by the source's own tasks (a large source), not one


# The most files a write spread over the source's tasks may hold, per file the usual path would
# write for its rows, for its bet to stand (see the module doc).
SPREAD_FILES_PER_FILE = 2


@dataclass(frozen=True)
class DirectInsert:
    """What the direct write found: ``staged`` is None when some source row lay inside the
    files' ranges (the write was thrown away)."""

    staged: list[StagedFile] | None
    num_rows: int
    null_key_rows: int
    inside_rows: int
    scattered: bool = False  # thrown away: spread over more files than the rows are worth


def direct_insert(
    spark: SparkSession,
    plan: MergePlan,
    inside: str | None,
    previous: Entry | None,
    raw_source: DataFrame,
) -> DirectBet | None:
    """The bet on ``inside`` (the SQL of :func:`.filestats.within_all_ranges` over every key
    column's files' ranges, None where none bounds every file) when the merge should take it
    (see the module doc), else None. ``previous``: the version of the merge this one follows
    (:func:`.run._merge_before`)."""
    if inside is None or is_connect(spark) or not plan.not_matched or plan.not_matched_by_source:
        return None
    if not _outside_before(plan, previous):
        return None
    size, rows = _estimates(raw_source)
    if size < 0 or size >= _unknown_size(spark):
        return None
    if size <= DIRECT_SOURCE_BYTES.get():
        return DirectBet(inside, size, rows)
    if plan.target.partition_columns or scattered_before(previous):
        return None
    return DirectBet(inside, size, rows, spread=True)


def scattered_before(entry: Entry | None) -> bool:
    """Whether the previous merge's version ``entry`` threw a write spread over the source's tasks
    away as scattered, or did not try one because the merge before it had (``directInsertScattered``:
    the flag a merge carries forward, see the module doc)."""
    if entry is None or entry.operation != "MERGE":
        return False
    return int((entry.metrics or {}).get("directInsertScattered") or 0) == 1


def _outside_before(plan: MergePlan, entry: Entry | None) -> bool:
    """Whether the previous merge's version ``entry`` says the merge's keys likely lie outside the
    ranges: every source row of that merge did; without a merge to tell, an insert-only merge
    assumes so."""
    if entry is None or entry.operation != "MERGE":
        return not plan.matched
    m = entry.metrics or {}
    rows = int(m.get("numSourceRows") or 0)
    return rows > 0 and int(m.get("numSourceRowsOutsideRanges") or 0) == rows


def _unknown_size(spark: SparkSession) -> int:
    """The size Spark gives a plan it cannot estimate (``spark.sql.defaultSizeInBytes``, the
    largest long unless set): rows built in the driver, an RDD. Such a source takes the usual
    path; it is no evidence of a large one, and its tasks' count says nothing of its rows."""
    try:
        return int(str(spark._jsparkSession.sessionState().conf().defaultSizeInBytes()))
    except Exception:  # noqa: BLE001 - the default
        return 2**63 - 1


def _estimates(df: DataFrame) -> tuple[int, int | None]:
    """Spark's estimates of the size of ``df``'s rows and of their number (its optimized plan's
    statistics): (-1, None) if it cannot say; the rows are None where only the size is known
    (a scan of files: their bytes)."""
    try:
        stats = df._jdf.queryExecution().optimizedPlan().stats()
        size = int(str(stats.sizeInBytes()))
    except Exception:  # noqa: BLE001 - no estimate: take the usual path
        return -1, None
    try:
        count = stats.rowCount()
        return size, int(str(count.get())) if count.isDefined() else None
    except Exception:  # noqa: BLE001 - the size alone
        return size, None


def write_direct(
    spark: SparkSession,
    plan: MergePlan,
    raw_source: DataFrame,
    bet: DirectBet,
    staging: Staging,
    storage: Storage,
    feed: bool,
    table_files: Mapping[str, int],
) -> DirectInsert:
    """Read ``raw_source`` once: write into ``staging`` the inserts of its rows outside the
    files' ranges (``bet.inside``: :func:`.filestats.within_all_ranges`), and count its rows,
    those with a NULL key and those inside. The caller discards the write when any row was
    inside. With ``feed`` the same job writes the inserts' change rows, as the usual path does
    (:func:`.rewrite.feed_rows`), for :func:`.cdf.stamp_feed` to stamp. ``table_files``: the
    table's files (path -> bytes), whose encodings the inserts follow when the source is no
    larger than the largest of them (:func:`.encodings.insert_options`)."""
    inside = bet.inside
    aliased = raw_source.alias(plan.sa)
    observed = Observation(f"{PREFIX}direct_{uuid4().hex}")
    outside = aliased.observe(observed, *row_counts(plan, inside)).where(~F.expr(inside)).alias(plan.sa)
    written = enforce_constraints(plan, inserts(plan, outside))
    if bet.spread:
        # One file per task of the source, as it is read (see the module doc).
        rows, cap = feed_rows(written, INSERT) if feed else written, None
    else:
        rows, cap = spread_inserts(plan, written, 0, feed), ROWS_PER_INSERT_FILE
    feed_dir = staging.feed_rows_dir if feed else None
    fmt = plan.target.file_format
    options = insert_options(
        storage, table_files, fmt, plan.output_fields, rows=bet.source_rows, source_bytes=bet.source_bytes
    )
    listed = save_rows(spark, plan, rows, staging.data_dir, feed_dir, cap, options=options)
    row: dict[str, Any] = observed.get
    found = int(row["may_match"])
    staged = None
    scattered = False
    if found == 0:
        fields = indexed_columns(plan.output_fields, list(plan.target.partition_columns))
        staged = staged_files(plan.target.file_format, listed, storage, fields=fields)[0]
        worth = files_for(sum(f.rows for f in staged))
        if bet.spread and len(staged) > SPREAD_FILES_PER_FILE * worth:
            staged, scattered = None, True
    return DirectInsert(
        staged=staged,
        num_rows=int(row["n"]),
        null_key_rows=int(row["null_keys"]) if plan.key_pairs else 0,
        inside_rows=found,
        scattered=scattered,
    )
