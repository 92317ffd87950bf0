"""The entry points: ``run_merge(spark, spec)`` runs one MERGE, phase by phase; ``dry_run``
plans one and reports what it would do; ``recover``, ``history``, ``start_history`` and
``table_stats`` look after a table's journal.

1. spec      validate the clause spec (no Spark needed)
2. lock      take the table's writer lock, waiting up to ``lock_timeout_s``
3. recover   finish an interrupted earlier commit; describe the target from the catalog as it
             is now (never from this session's cached relation: another session may have
             added a column, and a rewrite must never drop one)
4. plan      resolve clauses against the schemas (all config errors raise here); time
             functions are pinned to the commit time chosen here
5. source    materialize the source once, collect key statistics and, from the files'
             footer statistics (filestats), which files its keys can fall in; refuse an
             empty source that would delete every row, warn about NULL keys (guards).
             When no source row is likely to match (direct), one job reads the source and
             writes its inserts instead (5-8 at once); if some row could match after all,
             that write is discarded and the phases run as below
6. scan      find touched files among those and check cardinality in one job (skipped for
             insert-only)
7. rewrite   write rewritten touched files + inserts into the commit's staging folder
8. cdf       write the change rows into the same staging folder (with ``change_data_feed``)
9. journal   validate the entry as recovery will; check the lock, that no file the merge read
             changed and that no column appeared; add evolved columns to the catalog; then
             commit (create the planned entry), move files into place, delete replaced ones

Nothing under the table's data paths changes before step 9's commit point; any error before
it removes the staging folder and leaves the table (and its change feed) exactly as it was.
(Schema evolution's ``ALTER TABLE ... ADD COLUMNS`` is the last step before the entry: only
the catalog can tell whether it accepts a column, and a statement that fails after the
commit point would fail again on every replay.) An error after the commit point raises
:class:`MergeCommittedError`: the merge is durable and recovery completes it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.utils import AnalysisException

from . import calls, faults, feed_owner
from .cdf import ChangesTable, feed_schema, prepare_changes_table, stamp_feed
from .direct import DirectBet, DirectInsert, direct_insert, scattered_before, write_direct
from .errors import (
    CastError,
    ConcurrentMergeError,
    ConstraintViolation,
    ExecutionError,
    MergeCommittedError,
    MergeError,
    MergeSpecError,
    StorageError,
    UnreadableFileError,
    UnsupportedTableError,
    spark_reason,
)
from .feed_range import ChangesRange
from .feed_range import resolve as resolve_range
from .filestats import MAX_SKIPPING_FILES, FileSummary, indexable, within_all_ranges
from .guards import check_deletes, check_source, check_source_rows
from .journal import Entry, Journal, Recovery, Retention, Staging
from .lean_columns import lean_columns
from .lock import TableLock
from .metrics import DryRunReport, MergeMetrics, MergeResult, timed
from .notices import progress, warn
from .optimize import after_merge, clustering_columns
from .outputs import CAST_ERROR_MARK, CONSTRAINT_MARK
from .plan import MergePlan, build_plan
from .reshape import finish_parked, finish_refresh, parked_folder, reregister
from .rewrite import (
    SINGLE_TASK_ROWS,
    OnePass,
    StagedFile,
    inserts_by_statistics,
    partitions_pruned_by_spark,
    shuffled_join,
    single_task,
    task_groups,
    write_changes,
    write_missed_inserts,
)
from .scan import (
    FileStats,
    ScanResult,
    Skipping,
    clause_rows,
    find_touched_files,
    key_column_ranges,
    one_pass_applies,
    plan_skipping,
    pruned_target,
    release,
)
from .source import MaterializedSource, materialize, read_source
from .spec import DEFAULT_LOCK_TIMEOUT_S, MergeSpec, parse_spec
from .sqltext import parse_name, same_table, shorten
from .storage import FileInfo, Storage, storage_for
from .table import (
    MERGE_ROLE,
    TargetTable,
    alter_add_columns,
    catalog_columns,
    check_string_literals,
    column_ddl,
    create_changes_table,
    describe_table,
    drop_changes_table,
    load_target,
    locate_target,
    missing_columns,
    refresh_table,
    sql_name,
    table_exists,
)

logger = logging.getLogger("rowmerge")


def open_journal(spark: SparkSession, location: str) -> Journal:
    """The journal of the table at ``location``; first finishes a full refresh that stopped
    with the journal parked beside the folder (reshape.py), so no caller ever finds the
    table without its history. A session whose string literals would not mean what the
    engine writes is refused first (:func:`.table.check_string_literals`)."""
    check_string_literals(spark)
    storage = storage_for(spark)
    journal = Journal(storage, storage.qualify(location))
    finish_parked(spark, journal)
    return journal


def locate_or_finish(spark: SparkSession, name: str, role: str = MERGE_ROLE) -> str:
    """The location of the table ``name`` (locate_target; its errors name it by ``role``); if
    it is missing, first finish a full refresh that stopped between dropping it and registering
    it again (reshape.py), or say that one is running right now (ConcurrentMergeError)."""
    try:
        return locate_target(spark, name, role)
    except UnsupportedTableError as exc:
        try:
            sql_name(name)
        except ValueError:  # not a table name: locate_target said so
            raise exc from None
        check_string_literals(spark)  # finishing it writes the table's DDL
        if not finish_refresh(spark, name):
            raise exc from None
    return locate_target(spark, name, role)


def table_lock(journal: Journal, table: str, operation: str, timeout_s: float) -> TableLock:
    parked = parked_folder(journal.location)
    return TableLock(
        journal.storage,
        journal.log_dir,
        table,
        operation,
        timeout_s,
        moved_away=lambda: journal.storage.exists(parked),
    )


@dataclass(frozen=True)
class Commit:
    """What the merge commits against: the version it plans and the files it read."""

    version: int
    snapshot: dict[str, FileInfo]
    changes: ChangesTable | None
    initial: Entry | None  # version 0 to write first, for a table without a journal
    time: datetime  # the entry's timestamp, _commit_timestamp, and what current_timestamp() reads
    skipping: Skipping | None  # how footer statistics rule files out (None: they cannot)
    cluster_by: tuple[str, ...] | None = None  # the table's clustering after this version
    retention: Retention | None = None  # the table's retention after this version
    # The bet that no source row's keys lie inside the files' ranges, when the merge takes it
    # and writes the inserts as it reads the source (direct.py)
    direct: DirectBet | None = None
    # The same SQL whenever every file's range of some key is known, bet or not: the source's
    # statistics count the rows inside (numSourceRowsOutsideRanges: the evidence the next merge
    # bets on), also where no key's ranges rule a file out (a table of one file)
    bounds: str | None = None
    # Whether the merge may bet that every candidate file is touched (the one-pass write):
    # see _bets_on_candidates.
    bets: bool = True

    def file_sizes(self) -> dict[str, int]:
        """The table's files (path -> bytes) as the merge read them."""
        return {p: f.size for p, f in self.snapshot.items()}


def run_merge(spark: SparkSession, spec: Mapping[str, Any] | MergeSpec) -> MergeResult:
    """Merge ``spec['source']`` into ``spec['target']``; see the module doc for the phases."""
    parsed = spec if isinstance(spec, MergeSpec) else parse_spec(spec)
    with storage_errors(f"MERGE into {parsed.target}"):
        return _run_merge(spark, parsed)


@contextmanager
def storage_errors(what: str) -> Iterator[None]:
    """A filesystem error (a full disk, a refused write) of the journal, the lock or the
    staging folder, before the commit point, as the MergeError it is: nothing was changed."""
    try:
        yield
    except (MergeError, MergeCommittedError):
        raise
    except OSError as exc:
        raise StorageError(
            f"{what} failed: the filesystem refused a write ({spark_reason(exc)}). Nothing was "
            "changed. Free space or fix the permissions of the table's folder, then run again."
        ) from exc


def _run_merge(spark: SparkSession, parsed: MergeSpec) -> MergeResult:
    metrics = MergeMetrics()
    with timed(metrics, "executionTimeMs"), lean_columns(), calls.counting(spark) as counts:
        journal = open_journal(spark, locate_or_finish(spark, parsed.target))
        # Before the lock, whose folder would put a journal inside the other table's folder.
        journal.check_placement(parsed.target)
        with table_lock(journal, parsed.target, "MERGE", parsed.lock_timeout_s) as lock:
            # Described only now, under the lock: a writer we waited for, or another
            # session, may have changed the schema (load_target refreshes the relation).
            target = load_target(spark, parsed.target)
            if recover_locked(spark, journal, lock, target).rolled_forward:
                target = load_target(spark, parsed.target)  # recovery may have added columns
            plan, raw_source, commit = _prepare(spark, parsed, journal, target, metrics)
            direct = _write_directly(spark, plan, raw_source, journal, commit, metrics)
            source = None if direct is not None else _materialize(spark, plan, raw_source, commit, metrics)
            try:
                if direct is not None:
                    version, entry = _commit_direct(spark, plan, journal, lock, commit, metrics, *direct)
                else:
                    assert source is not None
                    check_source(plan, source)
                    with partitions_pruned_by_spark(spark):
                        version, entry = _merge(spark, plan, source, journal, lock, commit, metrics)
            except MergeCommittedError:
                raise
            except Exception as exc:
                if not isinstance(exc, MergeError):
                    _raise_cast_error(exc, target, parsed)
                if lock.lost():
                    # Paused past its lease: the new holder's recovery removed our staging,
                    # which is what made this fail. Say so instead of the raw error.
                    lock.check()
                if _is_spark_error(exc):
                    raise ExecutionError(target.name, spark_reason(exc).rstrip(". ")) from exc
                raise
            finally:
                if source is not None:
                    source.df.unpersist()
            if entry is not None:
                _compact(spark, journal, lock, plan, commit, entry, metrics)
    metrics.record_calls(counts)
    result = MergeResult(version, metrics.as_dict(), target.name)
    logger.info("rowmerge: %s: %s (version %d)", target.name, result.summary(), version)
    return result


def _prepare(
    spark: SparkSession,
    parsed: MergeSpec,
    journal: Journal,
    target: TargetTable,
    metrics: MergeMetrics,
    dry: bool = False,
) -> tuple[MergePlan, DataFrame, Commit]:
    """Phase 4: the plan, the source as read (:func:`_materialize` checkpoints it) and what
    the merge would commit against.

    ``dry``: for :func:`dry_run`, which must write nothing (the change table is not created).
    """
    versions = journal.versions()
    snapshot = journal.snapshot()
    initial = None if versions else journal.initial_entry(target, "CONVERT", snapshot)

    newest = journal.newest(versions)
    commit_time = journal.commit_time(versions, newest)
    wanted = parsed.upkeep.cluster_by
    cluster_by = (
        clustering_columns(target, wanted) if wanted is not None else newest.cluster_by if newest else None
    )
    upkeep = parsed.upkeep
    stored = newest.retention if newest else None
    retention = upkeep.retention(stored)
    raw_source = read_source(spark, parsed.source)
    plan = build_plan(parsed, target, raw_source, target.loaded(spark), commit_time)
    feed = parsed.change_data_feed and not dry
    changes = prepare_changes_table(spark, plan, journal.storage) if feed else None
    if changes is not None:
        feed_owner.check_owner(
            journal.storage, changes.location, changes.name, target.name, target.name_parts
        )
    summaries = _summaries(plan, journal, snapshot, versions, initial, save_checkpoint=not dry)
    column_ranges = key_column_ranges(plan, summaries) if summaries is not None else []
    before = _merge_before(journal, versions, newest)
    skipping = (
        plan_skipping(plan, summaries, column_ranges, _whole_table_rows(before))
        if summaries is not None
        else None
    )
    bounds = within_all_ranges(column_ranges)
    direct = None if dry else direct_insert(spark, plan, bounds, before, raw_source)
    if scattered_before(before):
        metrics["directInsertScattered"] = 1  # carried forward (direct.py)
    version = journal.next_version(versions, target.name)
    commit = Commit(
        version,
        snapshot,
        changes,
        initial,
        commit_time,
        skipping,
        cluster_by,
        retention,
        direct,
        bounds,
        _bets_on_candidates(before),
    )
    return plan, raw_source, commit


def _whole_table_rows(before: Entry | None) -> int:
    """The most rows a table whose key ranges rule out no file may hold for the merge to bet that
    it touches every file (``plan_skipping``'s ``whole_table_rows``): the single-task join's
    limit, or 0 (no bet) when the merge before it left a file of the table unrewritten (a model
    that upserts keys none of which exists, say), so that such a model loses the bet once, not
    every run. A lost bet costs the one-pass job; the merge then rewrites the files that job saw a
    clause act on (see :func:`_write_one_pass`). (A merge that changed nothing commits no
    version, so it leaves no evidence either way.)"""
    if before is not None and before.operation == "MERGE":
        m = before.metrics or {}
        files = int(m.get("numTargetFilesBeforeSkipping") or 0)
        if int(m.get("numTargetFilesRemoved") or 0) < files:
            return 0
    return SINGLE_TASK_ROWS.get()


def _bets_on_candidates(before: Entry | None) -> bool:
    """Whether the merge may bet that it touches every candidate file (the one-pass write, see
    :func:`.scan.one_pass_applies`): not when the merge before it left a candidate of its own
    untouched. A model whose merges keep leaving candidates alone (a look-back re-merge of
    mostly unchanged rows, new keys that fall inside files' ranges) would otherwise write every
    candidate each run only to throw the write away; it scans first instead, and bets again
    after a merge that touched every candidate. (A merge that changed nothing commits no
    version: no evidence either way.)"""
    if before is not None and before.operation == "MERGE":
        return int((before.metrics or {}).get("numCandidateFilesUntouched") or 0) == 0
    return True


def _merge_before(journal: Journal, versions: Sequence[int], newest: Entry | None) -> Entry | None:
    """The merge the next one follows: the newest version, or, when that is a compaction (an
    auto-compaction commits right after the merge it compacts), the version before it; None
    when the journal cannot say."""
    if newest is None or newest.operation != "OPTIMIZE" or len(versions) < 2:  # noqa: PLR2004
        return newest
    try:
        return journal.read_entry(versions[-2])
    except Exception:  # noqa: BLE001 - only a hint for the bet (direct.py): no evidence
        return None


def _materialize(
    spark: SparkSession, plan: MergePlan, raw_source: DataFrame, commit: Commit, metrics: MergeMetrics
) -> MaterializedSource:
    """Phase 5: the source checkpointed, with its statistics (source.py)."""
    logger.info("rowmerge: %s: materializing the source %s", plan.target.name, plan.spec.source)
    with timed(metrics, "materializeSourceTimeMs"):
        ranges = commit.skipping.ranges if commit.skipping else ()
        source = materialize(spark, plan, raw_source, ranges, commit.bounds)
    metrics["numSourceRows"] = source.num_rows
    if source.may_match_rows is not None:
        metrics["numSourceRowsOutsideRanges"] = source.num_rows - source.may_match_rows
    return source


def _write_directly(
    spark: SparkSession,
    plan: MergePlan,
    raw_source: DataFrame,
    journal: Journal,
    commit: Commit,
    metrics: MergeMetrics,
) -> tuple[Staging, DirectInsert] | None:
    """Phases 5-7 in one job when the merge bets that no source row matches (direct.py): the
    staging folder and what the job found; None, with nothing staged, when the bet was not
    taken or lost. Never raises a Spark error: the usual path then reads the source again and
    reports the error as it would have."""
    if commit.direct is None:
        return None
    staging = journal.stage()
    kept = False
    try:
        logger.info(
            "rowmerge: %s: writing the inserts of %s as it is read", plan.target.name, plan.spec.source
        )
        with timed(metrics, "rewriteTimeMs"):
            found = write_direct(
                spark,
                plan,
                raw_source,
                commit.direct,
                staging,
                journal.storage,
                commit.changes is not None,
                commit.file_sizes(),
            )
        if found.staged is not None:
            kept = True
            return staging, found
        if found.scattered:
            metrics["directInsertScattered"] = 1
            logger.info(
                "rowmerge: %s: the source's tasks wrote too many small files; merging as usual",
                plan.target.name,
            )
        else:
            logger.info(
                "rowmerge: %s: %d source row(s) lie inside the files' ranges; merging as usual",
                plan.target.name,
                found.inside_rows,
            )
    except Exception as exc:  # noqa: BLE001 - the usual path says what is wrong
        logger.info("rowmerge: %s: the direct write failed (%s); merging as usual", plan.target.name, exc)
    finally:
        if not kept:
            journal.discard(staging)
    metrics["directInsertFallback"] = 1
    return None


def _commit_direct(
    spark: SparkSession,
    plan: MergePlan,
    journal: Journal,
    lock: TableLock,
    commit: Commit,
    metrics: MergeMetrics,
    staging: Staging,
    found: DirectInsert,
) -> tuple[int, Entry | None]:
    """Phase 9 for the inserts :func:`_write_directly` staged (no file read, none replaced)."""
    assert found.staged is not None
    metrics["numSourceRows"] = metrics["numSourceRowsOutsideRanges"] = found.num_rows
    metrics["directInsert"] = 1
    metrics["numTargetFilesBeforeSkipping"] = len(commit.snapshot)
    stage = _Staged(staging)
    try:
        # Inside: the NULL-key warning raises under dbt's --warn-error, and the staged
        # files must go with it.
        check_source_rows(plan, found.num_rows, found.null_key_rows)
        feed = _stamp_feed(spark, plan, journal, commit, staging, metrics)
        return _commit_staged(
            spark, plan, journal, lock, commit, metrics, stage, found.staged, [], {}, feed, None, []
        )
    finally:
        if not stage.committed:
            journal.discard(staging)


def dry_run(spark: SparkSession, spec: Mapping[str, Any] | MergeSpec) -> DryRunReport:
    """Plan the merge and report what it would do, writing nothing.

    Runs phases 1 and 4-6 as :func:`run_merge` does, so every error a merge would raise
    before writing (config, empty source, cardinality, max_delete_fraction) is raised here
    too; then counts the rows each clause would act on (one more job). Takes no lock and
    recovers nothing: it reads the table as it is, while a merge of it may be running.
    """
    metrics = MergeMetrics()
    with timed(metrics, "executionTimeMs"), lean_columns():
        parsed = spec if isinstance(spec, MergeSpec) else parse_spec(spec)
        target = load_target(spark, parsed.target)
        journal = open_journal(spark, target.location)
        journal.check_placement(target.name)
        journal.check_bound(target)
        plan, raw_source, commit = _prepare(spark, parsed, journal, target, metrics, dry=True)
        source = _materialize(spark, plan, raw_source, commit, metrics)
        scan: ScanResult | None = None
        try:
            check_source(plan, source)
            files = commit.skipping.candidates(source) if commit.skipping else None
            urls = [journal.storage.to_spark_path(p) for p in files] if files is not None else None
            pruned = pruned_target(spark, plan, source, urls)
            with partitions_pruned_by_spark(spark):
                if plan.matched or plan.not_matched_by_source:
                    with timed(metrics, "scanTimeMs"):
                        scan = find_touched_files(spark, plan, source, pruned)
                    if plan.spec.max_delete_fraction is not None:
                        check_deletes(
                            plan, scan.matched_deleted + scan.nmbs_deleted, _table_rows(spark, plan)
                        )
                rows = clause_rows(plan, source, pruned, scan)
        except Exception as exc:
            if not isinstance(exc, MergeError):
                _raise_cast_error(exc, target, parsed)
            if _is_spark_error(exc):
                raise ExecutionError(target.name, spark_reason(exc).rstrip(". ")) from exc
            raise
        finally:
            release(scan)
            source.df.unpersist()
    touched = scan.touched if scan else []
    report = DryRunReport(
        target=target.name,
        source_rows=source.num_rows,
        files=len(commit.snapshot),
        bytes=sum(f.size for f in commit.snapshot.values()),
        files_read=len(files) if files is not None else len(commit.snapshot),
        files_rewritten=len(touched),
        bytes_rewritten=sum(f.size for f in touched),
        clauses=rows,
        seconds=metrics.as_dict()["executionTimeMs"] / 1000,
    )
    logger.info("rowmerge: %s", report.summary())
    for label, _, count in report.clauses:
        # what a dry run was asked for: shown beside dbt's run line (which has the totals)
        progress(f"{target.name}: dry run: {label}: {count} row(s)")
    return report


def _summaries(
    plan: MergePlan,
    journal: Journal,
    snapshot: dict[str, FileInfo],
    versions: list[int],
    initial: Entry | None,
    save_checkpoint: bool,
) -> dict[str, FileSummary] | None:
    """Every file's statistics (from the journal), when some key column could use them to skip
    files. ``save_checkpoint``: under the merge's lock, save the statistics checkpoint that is
    due (a dry run writes nothing)."""
    target = plan.target
    if plan.not_matched_by_source or target.file_format != "parquet" or len(snapshot) > MAX_SKIPPING_FILES:
        return None
    parts = {c.lower() for c in target.partition_columns}
    if not any(t.lower() not in parts and indexable(target.field(t)) for t, _ in plan.key_pairs):
        return None
    return journal.file_summaries(target, snapshot, versions, [initial] if initial else [], save_checkpoint)


def recover_locked(spark: SparkSession, journal: Journal, lock: TableLock, target: TargetTable) -> Recovery:
    """Under the lock: fence out a holder that may still run, then recover."""
    if lock.took_over_live:
        journal.check_bound(target)  # never fence (and so bind) another table's journal
        if not journal.versions():  # keep version 0 the table as found, before the fence
            journal.write_initial(journal.initial_entry(target, "CONVERT"))
        holder = lock.took_over_from()
        version = journal.fence(target.qualified_name, f"lock taken over from {holder}")
        warn(
            f"took over the expired lock of {holder} on {target.name}; committed fence version "
            f"{version} so that writer can no longer commit"
        )

    def register_again(entry: Entry) -> TargetTable:
        return reregister(spark, journal, lock, entry, target)

    done = journal.recover(spark, target, register_again)
    if done:
        logger.info("rowmerge: recovered %s: %s", target.name, done.describe())
    return done


def _merge(
    spark: SparkSession,
    plan: MergePlan,
    source: MaterializedSource,
    journal: Journal,
    lock: TableLock,
    commit: Commit,
    metrics: MergeMetrics,
) -> tuple[int, Entry | None]:
    """Phases 6-9; returns the committed version and its entry (the current version and None
    if nothing changed)."""
    target = plan.target
    metrics["numTargetFilesBeforeSkipping"] = len(commit.snapshot)
    files = commit.skipping.candidates(source) if commit.skipping else None
    urls = [journal.storage.to_spark_path(p) for p in files] if files is not None else None
    pruned = pruned_target(spark, plan, source, urls)
    one_pass = (
        files is not None
        and commit.skipping is not None
        and commit.bets
        and one_pass_applies(plan, source, commit.skipping, files)
    )
    scan: ScanResult | None = None
    lost: ScanResult | None = None
    staging = journal.stage()
    stage = _Staged(staging)
    try:
        # With the change feed on, the data write emits the feed's rows too (one read and
        # one join of the touched files); they get their change type and timestamp after.
        feed_dir = staging.feed_rows_dir if commit.changes is not None else None
        written = None
        if one_pass:
            assert files is not None and urls is not None and commit.skipping is not None
            logger.info(
                "rowmerge: %s: %d source rows; rewriting %d of %d files in one pass",
                target.name,
                source.num_rows,
                len(files),
                len(commit.snapshot),
            )
            pairs = sorted(zip(urls, files, strict=True))
            candidates = ScanResult(
                touched=[FileStats(u, commit.snapshot[p].size) for u, p in pairs],
                files_scanned=len(files),
            )
            candidate_rows = sum(commit.skipping.rows[p] for p in files)
            single = single_task(source, candidate_rows)
            shuffled = shuffled_join(source, single)
            groups = task_groups([u for u, _ in pairs], commit.skipping, journal.storage, shuffled)
            observed = OnePass(
                candidate_rows=candidate_rows,
                single_task=single,
                inserts_by_statistics=inserts_by_statistics(plan, source, single),
            )
            with timed(metrics, "rewriteTimeMs"):
                written, lost = _write_one_pass(
                    spark,
                    plan,
                    source,
                    pruned,
                    candidates,
                    observed,
                    commit,
                    staging,
                    journal.storage,
                    metrics,
                    feed_dir,
                    groups,
                )
            metrics["onePass" if written is not None else "onePassFallback"] = 1
            metrics["onePassSingleTask"] = int(written is not None and observed.single_task)
            if lost is not None:
                # What the thrown-away write observed is what a scan would find: rewrite
                # just the files a clause acted on (none: maybe nothing to change).
                scan = lost
                logger.info(
                    "rowmerge: %s: %d of %d candidate files touched; rewriting those",
                    target.name,
                    len(lost.touched),
                    len(files),
                )
            elif written is None:
                logger.info("rowmerge: %s: not every candidate file was touched; scanning", target.name)
        if written is not None:
            scan, staged, removed_rows = written
        else:
            # No candidate file: no target row can match (statistics rule every file out),
            # so the merge is insert-only and needs no scan.
            if scan is None and (plan.matched or plan.not_matched_by_source) and files != []:
                logger.info(
                    "rowmerge: %s: %d source rows; scanning %d of %d files",
                    target.name,
                    source.num_rows,
                    len(files) if files is not None else len(commit.snapshot),
                    len(commit.snapshot),
                )
                with timed(metrics, "scanTimeMs"):
                    scan = find_touched_files(spark, plan, source, pruned)
                if plan.not_matched_by_source:
                    # It opened every file (the journal's statistics rule none out); only the
                    # readers' row-group statistics skipped rows no clause can act on.
                    scan.files_scanned = len(commit.snapshot)
                if plan.spec.max_delete_fraction is not None:
                    deleted = scan.matched_deleted + scan.nmbs_deleted
                    check_deletes(plan, deleted, _table_rows(spark, plan))
            extra = " and writing inserts" if plan.not_matched else ""
            touched = len(scan.touched) if scan else 0
            logger.info("rowmerge: %s: rewriting %d file(s)%s", target.name, touched, extra)
            rewritten = [f.path for f in scan.touched] if scan else []
            groups = task_groups(rewritten, commit.skipping, journal.storage, shuffled_join(source))
            with timed(metrics, "rewriteTimeMs"):
                staged, removed_rows = write_changes(
                    spark,
                    plan,
                    source,
                    pruned,
                    scan,
                    staging.data_dir,
                    journal.storage,
                    feed_dir=feed_dir,
                    groups=groups,
                    table_files=commit.file_sizes(),
                )
            if lost is not None:
                # The bound the write was sized by, made exact: rows written less the rows
                # kept of the files it replaced.
                kept = sum(removed_rows.values()) - lost.matched_deleted
                lost.inserted = sum(f.rows for f in staged) - kept
        feed = _stamp_feed(spark, plan, journal, commit, staging, metrics)
        removed: list[FileStats] = scan.touched if scan else []
        if files is not None and plan.matched:
            metrics["numCandidateFilesUntouched"] = len(files) - len(removed)
        return _commit_staged(
            spark,
            plan,
            journal,
            lock,
            commit,
            metrics,
            stage,
            staged,
            removed,
            removed_rows,
            feed,
            scan,
            files,
        )
    finally:
        release(scan)
        if not stage.committed:
            journal.discard(staging)


def _stamp_feed(
    spark: SparkSession,
    plan: MergePlan,
    journal: Journal,
    commit: Commit,
    staging: Staging,
    metrics: MergeMetrics,
) -> list[StagedFile]:
    """Phase 8: with the change feed on, stamp the change rows the data write left in
    ``staging`` (its feed rows folder) into the feed's files; none without it."""
    if commit.changes is None:
        return []
    logger.info("rowmerge: %s: writing change feed rows to %s", plan.target.name, commit.changes.name)
    with timed(metrics, "rewriteTimeMs"):  # the same phase: writing the commit's files
        return stamp_feed(spark, plan, staging.feed_rows_dir, staging.cdf_dir, journal.storage, commit.time)


@dataclass
class _Staged:
    """A merge's staging folder, and whether the journal owns it yet (from the commit point:
    recovery needs its files, so it must not be discarded)."""

    staging: Staging
    committed: bool = False


def _commit_staged(
    spark: SparkSession,
    plan: MergePlan,
    journal: Journal,
    lock: TableLock,
    commit: Commit,
    metrics: MergeMetrics,
    stage: _Staged,
    staged: list[StagedFile],
    removed: list[FileStats],
    removed_rows: Mapping[str, int],
    feed: list[StagedFile],
    scan: ScanResult | None,
    files: list[str] | None,
) -> tuple[int, Entry | None]:
    """Phase 9: commit what was staged (``removed``: the touched files it replaces, with their
    rows); the current version and None if nothing changed."""
    target = plan.target
    staging = stage.staging
    _record_counts(metrics, scan, staged, removed, files)
    if not staged and not removed:
        logger.info("rowmerge: %s: nothing to change", target.name)
        return commit.version - 1, None
    faults.fault_point("staged_data")
    if commit.changes is not None:
        faults.fault_point("staged_cdf")
    metrics["numTargetChangeFilesAdded"] = len(feed)

    logger.info(
        "rowmerge: %s: committing %d new, %d replaced file(s)", target.name, len(staged), len(removed)
    )
    with timed(metrics, "commitTimeMs"):
        replaced = {journal.storage.from_spark_path(f.path): f.size for f in removed}
        entry = journal.merge_entry(
            staging,
            version=commit.version,
            timestamp=commit.time,
            target=target,
            spec=plan.spec.raw or {},
            added=staged,
            removed=[(path, size, removed_rows[path]) for path, size in replaced.items()],
            new_columns=column_ddl(plan.new_fields),
            changes=commit.changes,
            feed_columns=feed_schema(plan.output_fields),
            feed=feed,
            metrics=metrics.as_dict(),
            cluster_by=commit.cluster_by,
            retention=commit.retention,
        )
        # Everything that can fail runs before the entry exists (see the module doc).
        lock.check()
        journal.check(entry, target, recovering=False)
        journal.check_unchanged(entry, commit.snapshot)
        _check_columns_unchanged(spark, plan)
        _add_evolved_columns(spark, plan, commit.changes)
        if commit.changes is not None:
            changes = commit.changes
            feed_owner.claim(
                journal.storage, changes.location, changes.name, target.qualified_name, target.name_parts
            )
        journal.commit(entry, commit.initial)
        stage.committed = True
        faults.fault_point("entry")
        try:
            feed_entry = commit.changes.catalog_entry if commit.changes else None
            journal.apply(spark, entry, target, prepared=True, feed_entry=feed_entry)
        except Exception as exc:
            raise MergeCommittedError(target.name, entry.version, exc) from exc
    return commit.version, entry


def _compact(
    spark: SparkSession,
    journal: Journal,
    lock: TableLock,
    plan: MergePlan,
    commit: Commit,
    entry: Entry,
    metrics: MergeMetrics,
) -> None:
    """Phase 10 (optimize.py): compact small files as a version of its own, right after the
    merge's, under its lock. The table's files after the merge are known from the listing
    it read and its entry, so deciding costs no listing."""
    upkeep = plan.spec.upkeep
    if not upkeep.auto_compact and not upkeep.optimize_every:
        return
    removed = {f.path for f in entry.removed}
    now_ms = int(commit.time.timestamp() * 1000)
    files = {p: info for p, info in commit.snapshot.items() if p not in removed}
    files.update({f.path: FileInfo(f.path, f.size, now_ms) for f in entry.added})
    keys = [t for t, _ in plan.key_pairs]
    with timed(metrics, "compactTimeMs"):
        done = after_merge(spark, journal, lock, plan.target, upkeep, keys, files, entry)
    if done is not None:
        metrics["compactVersion"] = done.version
        metrics["numCompactedFilesRemoved"] = len(done.removed)
        metrics["numCompactedFilesAdded"] = len(done.added)


def _write_one_pass(
    spark: SparkSession,
    plan: MergePlan,
    source: MaterializedSource,
    pruned: DataFrame,
    candidates: ScanResult,
    observed: OnePass,
    commit: Commit,
    staging: Staging,
    storage: Storage,
    metrics: MergeMetrics,
    feed_dir: str | None = None,
    groups: list[list[str]] | None = None,
) -> tuple[tuple[ScanResult, list[StagedFile], dict[str, int]] | None, ScanResult | None]:
    """Rewrite every candidate file (``candidates.touched``) and write the inserts in one job,
    observing what the clauses did (``observed``, which also says how many rows the candidates
    hold and how to join them; see :func:`.scan.one_pass_applies`).

    Returns (what was written, None) if every candidate was acted on and every target row met
    at most one source row. Otherwise nothing is left staged, and: if every target row met at
    most one source row, (None, what a scan would have found) — the files a clause acted on,
    the rows it updated and deleted, and at most how many rows the inserts are, made exact
    by the caller once it wrote them — for no cardinality rule can fail; if some row met two,
    (None, None): the scan must decide, and tell the error. Inserts taken from statistics
    that left some out are completed by a second write
    (:func:`.rewrite.write_missed_inserts`)."""
    staged, removed_rows = write_changes(
        spark, plan, source, pruned, candidates, staging.data_dir, storage, observed, feed_dir, groups
    )
    joined, updated, deleted, acted = observed.result()
    paths = {f.path for f in candidates.touched}
    if acted != paths or joined != observed.candidate_rows:
        storage.delete(staging.data_dir, recursive=True)
        if feed_dir is not None:
            storage.delete(feed_dir, recursive=True)
        if joined != observed.candidate_rows or not acted <= paths or plan.target_only_conjuncts:
            # (A target-only condition in `on` may rule out whole partitions of candidates,
            # which the scan then never opens: it alone counts the files it read.)
            return None, None
        # The write's rows are the candidates' rows it kept and the inserts it found; with
        # inserts taken from statistics, the source rows inside the ranges that matched
        # nothing may be inserts too.
        inserts = sum(f.rows for f in staged) - (joined - deleted)
        if observed.inserts_by_statistics:
            inserts += (source.may_match_rows or 0) - observed.matched_sources()
        return None, ScanResult(
            touched=[f for f in candidates.touched if f.path in acted],
            # With the ids of the source rows that matched a candidate observed, the inserts
            # need no second read of the candidates (else an anti-join with them finds them).
            insert_source=(
                source.without_ids(spark, observed.matched_ids())
                if plan.not_matched and observed.inserts_by_statistics
                else None
            ),
            files_scanned=candidates.files_scanned,
            matched_updated=updated,
            matched_deleted=deleted,
            inserted=max(0, inserts) if plan.not_matched else 0,
        )
    if observed.inserts_by_statistics:
        missed = (source.may_match_rows or 0) - observed.matched_sources()
        metrics["onePassInsertsByStatistics"] = 1
        if missed:
            # Some source rows with keys inside a candidate's range matched nothing there:
            # the inserts among them were not written yet.
            metrics["onePassInsertsRechecked"] = 1
            staged += write_missed_inserts(
                spark,
                plan,
                source,
                observed.matched_ids(),
                missed,
                staging.data_dir,
                storage,
                feed_dir,
                staged,
                groups,
            )
    candidates.matched_updated, candidates.matched_deleted = updated, deleted
    candidates.inserted = sum(f.rows for f in staged) - (joined - deleted)
    return (candidates, staged, removed_rows), None


def _table_rows(spark: SparkSession, plan: MergePlan) -> int:
    """Rows of the target now (one job; Parquet and ORC answer a count from file metadata)."""
    return plan.target.loaded(spark).count()


def _record_counts(
    metrics: MergeMetrics,
    scan: ScanResult | None,
    staged: list[StagedFile],
    removed: list[FileStats],
    candidates: list[str] | None,
) -> None:
    """``candidates``: the files statistics left to read (None: every file)."""
    written = sum(f.rows for f in staged)
    if scan is not None:
        metrics["numTargetFilesAfterSkipping"] = scan.files_scanned
        metrics["numTargetRowsMatchedUpdated"] = scan.matched_updated
        metrics["numTargetRowsMatchedDeleted"] = scan.matched_deleted
        metrics["numTargetRowsNotMatchedBySourceUpdated"] = scan.nmbs_updated
        metrics["numTargetRowsNotMatchedBySourceDeleted"] = scan.nmbs_deleted
        inserted = scan.inserted
    else:  # insert-only: no scan; every written row is an insert; its anti-join read the candidates
        before = metrics["numTargetFilesBeforeSkipping"]
        metrics["numTargetFilesAfterSkipping"] = len(candidates) if candidates is not None else before
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


def _check_columns_unchanged(spark: SparkSession, plan: MergePlan) -> None:
    """Abort if the table gained a column while the merge ran: its rewrite would drop it."""
    written = {f.name.lower() for f in plan.output_fields}
    added = [c for c in catalog_columns(spark, plan.target) if c.lower() not in written]
    if added:
        raise ConcurrentMergeError(
            f"MERGE into {plan.target.name} aborted: column(s) {', '.join(added)} were added to the "
            "table while the merge ran, and the rewritten files would not have them. Nothing was "
            "changed; run the model again."
        )


def _add_evolved_columns(spark: SparkSession, plan: MergePlan, changes: ChangesTable | None) -> None:
    """Give the change table every column its rows carry, and the target its evolved ones.

    Runs just before the commit point: only the catalog can tell whether it accepts a
    column (a Hive metastore refuses some nested names on a table it stores in Hive's own
    format), and a refusal here fails the merge instead of every replay after the commit.
    """
    if changes is not None:
        # The change table's columns were read under the lock when the merge prepared it.
        feed = column_ddl(feed_schema(plan.output_fields).fields)
        _add_columns_or_fail(spark, plan, changes.ident, changes.name, feed, changes.columns)
    _add_columns_or_fail(spark, plan, plan.target.ident, plan.target.name, column_ddl(plan.new_fields))


def _add_columns_or_fail(
    spark: SparkSession,
    plan: MergePlan,
    ident: str,
    name: str,
    columns: list[tuple[str, str]],
    known: Sequence[str] | None = None,
) -> None:
    columns = missing_columns(spark, ident, columns, known)
    try:
        alter_add_columns(spark, ident, columns)
    except Exception as exc:
        raise UnsupportedTableError(
            f"MERGE into {plan.target.name} cannot add column(s) {', '.join(n for n, _ in columns)} "
            f"to {name}: the catalog refused ({spark_reason(exc)}). Nothing was changed. Rename the "
            "column(s) or their nested fields in the model SQL (letters, digits and underscores are "
            "accepted everywhere), or turn schema evolution off."
        ) from None


# Our cast check as Spark reports it when it fires (the marker alone also appears in plan
# text, which an unrelated error may quote).
_RAISED_CAST = re.compile(
    r"\[USER_RAISED_EXCEPTION\]\s*" + re.escape(CAST_ERROR_MARK) + r"\[(.*)\]\s*SQLSTATE"
)
_RAISED_CONSTRAINT = re.compile(
    r"\[USER_RAISED_EXCEPTION\]\s*" + re.escape(CONSTRAINT_MARK) + r"\[(\d+)\|(.*)\]\s*SQLSTATE"
)


# A task that could not read one of the table's files (a stray file, or a damaged one).
_FAILED_READ = re.compile(r"\[FAILED_READ_FILE[.\w]*\][^\n]*?reading file (\S+?)\.?(?:\s|$)")
_CAUSED_BY = re.compile(r"^Caused by: (.*)$", re.M)


def _is_spark_error(exc: BaseException) -> bool:
    """An error Spark raised while running the merge's jobs (not a bug of this engine)."""
    return isinstance(exc, (PySparkException, Py4JJavaError))


def _raise_cast_error(exc: Exception, target: TargetTable, spec: MergeSpec) -> None:
    """Spark reports our cast and constraint checks as a job failure, and a file of the table it
    cannot read as a task failure naming the file; surface them as our errors."""
    found = _RAISED_CAST.search(str(exc))
    if found:
        raise CastError(target.name, 1, found.group(1)) from None
    found = _RAISED_CONSTRAINT.search(str(exc))
    if found:
        constraint = spec.constraints[int(found.group(1))]
        raise ConstraintViolation(target.name, constraint.label, found.group(2)) from None
    found = _FAILED_READ.search(str(exc))
    if found:
        causes = _CAUSED_BY.findall(str(exc))
        reason = f"Spark: {shorten(causes[-1].strip(), 300)}" if causes else "Spark could not read it"
        raise UnreadableFileError(found.group(1), target.file_format, reason) from None


def recover(spark: SparkSession, table_name: str, lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S) -> Recovery:
    """Finish or roll back an interrupted merge of ``table_name`` (waits for a running merge)."""
    journal = open_journal(spark, locate_or_finish(spark, table_name, "RECOVER table"))
    with table_lock(journal, table_name, "RECOVER", lock_timeout_s) as lock:
        return recover_locked(spark, journal, lock, load_target(spark, table_name))


def history(spark: SparkSession, table_name: str, limit: int | None = None) -> list[dict[str, Any]]:
    """Committed versions of ``table_name``, newest first; ``limit``: at most that many."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        wanted = "a whole number >= 1 (left out: every version)"
        raise MergeSpecError([f"`limit` must be {wanted}, got {limit!r}"])
    # a full refresh stopped while its table was missing from the catalog is finished first,
    # as by any engine call on the table
    return open_journal(spark, locate_or_finish(spark, table_name, "HISTORY of table")).history(limit)


def changes_range(
    spark: SparkSession,
    table_name: str,
    start_version: int | None = None,
    end_version: int | None = None,
    start_ts: Any = None,
    end_ts: Any = None,
) -> ChangesRange:
    """The change-feed versions of ``table_name`` a ``table_changes`` read covers, checked
    against its journal (see feed_range.py); unchecked for a table without one."""
    try:
        rows = history(spark, table_name)
    except (MergeError, AnalysisException):
        rows = []
    return resolve_range(table_name, rows, start_version, end_version, start_ts, end_ts)


def rebind(
    spark: SparkSession, table_name: str, lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S
) -> dict[str, Any]:
    """Make the journal in ``table_name``'s folder (and its change tables) ``table_name``'s,
    after the table was renamed, or its folder moved or copied to where the table now is: a
    merge refuses a journal another table name wrote, or one whose files are in another folder.

    Commits a ``REBIND`` version that records the new name and lists the table's files as
    they are now (the files moved with their folder, so paths and statistics recorded under
    the old ones no longer apply; versions before it cannot be read). Also reassigns each
    change table the journal wrote to that still names the old table. Nothing happens if the
    journal already names the table and its folder.
    """
    target = load_target(spark, table_name, "REBIND table")
    journal = open_journal(spark, target.location)
    journal.check_placement(target.name)
    with (
        storage_errors(f"Rebinding {table_name}"),
        table_lock(journal, target.name, "REBIND", lock_timeout_s),
    ):
        target = load_target(spark, table_name)
        versions, applied = journal.listing()
        if not versions:
            return {
                "version": None,
                "previous": None,
                "moved_from": None,
                "rebound": False,
                "changes_tables": [],
            }
        newest = journal.entry(versions[-1], target.name)
        renamed = not same_table(newest.table, target.name_parts)
        relocated = journal.moved(versions, newest, target)
        folder = relocated[1] if relocated is not None else None
        if not renamed and folder is None:
            return {
                "version": newest.version,
                "previous": None,
                "moved_from": None,
                "rebound": False,
                "changes_tables": [],
            }
        pending = sorted(set(versions) - set(applied))
        if pending:
            raise UnsupportedTableError(
                f"{target.name} cannot be rebound: its version {pending[0]} was committed but its "
                "files were not all moved into place when the table was renamed or its folder "
                "moved. Finish it where it "
                "was written first — give the table back its old name or place, run "
                f"`dbt run-operation rowmerge_recover --args '{{relation: ...}}'` there, then rename "
                "or move it again and rebind. Nothing was changed."
            )
        reasons = [f"renamed from {newest.table}"] if renamed else []
        reasons += [f"moved from {folder}"] if folder is not None else []
        version = journal.rebind(target, ", ".join(reasons))
        moved = []
        for name in journal.feed_tables():
            try:
                location = journal.storage.qualify(describe_table(spark, sql_name(name)).location)
            except AnalysisException:
                continue  # dropped since: recovery or the next merge recreates it
            owner = feed_owner.read_owner(journal.storage, location, name)
            if renamed and owner is not None and same_table(owner, parse_name(newest.table)):
                feed_owner.reassign(journal.storage, location, target.qualified_name)
                moved.append(name)
    logger.info("rowmerge: %s: rebound, %s (version %d)", target.name, ", ".join(reasons), version)
    return {
        "version": version,
        "previous": newest.table if renamed else None,
        "moved_from": folder,
        "rebound": True,
        "changes_tables": moved,
    }


def table_stats(spark: SparkSession, table_name: str) -> dict[str, int] | None:
    """Rows and bytes of ``table_name`` now, from its journal, without opening a data file:
    rows folded from every version's counts (version 0 counts the rows it was built with),
    bytes from the listing of its data files. None for a table without a readable journal
    (Spark's own statistics, if any, then stand)."""
    target = load_target(spark, table_name)
    journal = open_journal(spark, target.location)
    versions = journal.history()
    if not versions or any(v["operation"] == "UNREADABLE" for v in versions):
        return None
    rows = sum(int(v["rows_inserted"]) - int(v["rows_deleted"]) for v in versions)
    try:
        size = sum(f.size for f in journal.snapshot().values())
    except MergeError:  # its folder holds another table: no size of its own to tell
        return None
    return {"version": int(versions[0]["version"]), "rows": rows, "bytes": size}


def _check_feed_owner(spark: SparkSession, storage: Storage, changes: str, target: TargetTable) -> None:
    """Refuse to replace a change table that holds another target's feed."""
    ident = sql_name(changes)
    if table_exists(spark, ident):
        location = storage.qualify(describe_table(spark, ident).location)
        feed_owner.check_owner(storage, location, changes, target.name, target.name_parts)


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
    journal = open_journal(spark, target.location)
    journal.check_placement(target.name)
    with (
        storage_errors(f"{operation} {table_name}"),
        table_lock(journal, target.name, operation, lock_timeout_s),
    ):
        # Everything that can refuse the table runs before its old history is forgotten.
        refresh_table(spark, target.ident)
        entry = journal.initial_entry(target, operation)
        if change_data_feed:
            _check_feed_owner(spark, journal.storage, change_data_feed, target)
        forgotten = journal.reset()
        journal.write_initial(entry)
        changes_removed = 0
        if change_data_feed:
            changes_removed = drop_changes_table(spark, change_data_feed)
            create_changes_table(spark, change_data_feed, feed_schema(list(target.schema.fields)))
            location = describe_table(spark, sql_name(change_data_feed)).location
            feed_owner.reassign(journal.storage, journal.storage.qualify(location), target.qualified_name)
    return {
        "version": 0,
        "operation": operation,
        "files": entry.metrics["numFiles"],
        "rows": entry.metrics["numOutputRows"],
        "versions_forgotten": forgotten,
        "changes_table": change_data_feed,
        "changes_rows_removed": changes_removed,
    }
