"""Table operation OPTIMIZE: rewrite small files into fewer, bigger ones, committed through
the journal as a version of its own. No row changes, so it writes no change-feed rows.

``optimize(spark, table, ...)`` runs it on demand; :func:`after_merge` runs the bounded, tiered
form right after a merge commits, under the merge's lock (auto-compaction: never inside the
merge's own write, so an insert-only merge still replaces no file). Both:

1. list the table's files; the planner (compaction.py) picks groups of files, each in one
   partition, and how many files each becomes;
2. read the groups' rows in one job, ordered by the cluster key (the table's ``cluster_by``,
   else the merge's key) so the new files keep narrow key ranges, and write them into a
   staging folder, partitioned like the table;
3. check that the files written hold exactly as many rows as the files they replace;
4. commit an ``OPTIMIZE`` entry (added: the new files; removed: the groups' files) and apply
   it like any other: new files move in before the old ones go, so a reader of the folder
   sees some rows twice for a moment (as during a merge's apply) and never misses one.

Every step before the entry leaves the table as it was; after it, recovery finishes it.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    DataType,
    GeographyType,
    GeometryType,
    MapType,
    StringType,
    StructField,
    StructType,
    UserDefinedType,
    VariantType,
)
from pyspark.sql.utils import AnalysisException

from . import compaction, faults
from .compaction import DataFile, Group
from .errors import MergeCommittedError, MergeError, MergeSpecError, spark_reason
from .filestats import indexed_columns
from .journal import Entry, Journal, Retention
from .lean_columns import lean_columns
from .lock import TableLock
from .notices import warn
from .outputs import q
from .rewrite import partitions_pruned_by_spark, staged_files
from .spec import DEFAULT_LOCK_TIMEOUT_S, Upkeep, lock_timeout_problems, parse_upkeep
from .storage import FileInfo
from .table import TargetTable, load_target, partition_values

logger = logging.getLogger("rowmerge")

GROUP = "__rowmerge_group"
FILE_PATH = "_metadata.file_path"


class OptimizeError(MergeError):
    """An optimize that cannot run as asked (its arguments, or a table that changed under it)."""


@dataclass(frozen=True)
class OptimizeResult:
    """What an optimize did (or, as a dry run, would do)."""

    table: str
    version: int | None  # the OPTIMIZE version committed (None: nothing to do, or a dry run)
    files_before: int
    bytes_before: int
    files_removed: int
    bytes_removed: int
    files_added: int  # a dry run: the files it would write
    bytes_added: int  # a dry run: 0 (not known before writing)
    cluster_by: tuple[str, ...] = ()
    dry_run: bool = False
    metrics: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "version": self.version,
            "files_before": self.files_before,
            "bytes_before": self.bytes_before,
            "files_removed": self.files_removed,
            "bytes_removed": self.bytes_removed,
            "files_added": self.files_added,
            "bytes_added": self.bytes_added,
            "files_after": self.files_before - self.files_removed + self.files_added,
            # a dry run: None (what it would write is not known before writing)
            "bytes_after": (
                None if self.dry_run else self.bytes_before - self.bytes_removed + self.bytes_added
            ),
            "cluster_by": list(self.cluster_by),
            "dry_run": self.dry_run,
        }

    def summary(self) -> str:
        if not self.files_removed:
            said = f"{self.table}: nothing to compact ({self.files_before} file(s))"
            if self.version is not None:  # a version that only records the clustering
                order = ", ".join(self.cluster_by) or "none"
                said += f"; cluster_by ({order}) stored as version {self.version}"
            return said
        verb = "would rewrite" if self.dry_run else "rewrote"
        into = (
            f"{self.files_added} file(s)"
            if self.dry_run
            else f"{self.files_added} file(s), {_mb(self.bytes_added)}"
        )
        version = f" (version {self.version})" if self.version is not None else ""
        return (
            f"{self.table}: {verb} {self.files_removed} of {self.files_before} file(s), "
            f"{_mb(self.bytes_removed)}, into {into}{version}"
        )


@contextmanager
def timed_ms(metrics: dict[str, Any], name: str) -> Iterator[None]:
    """Add the block's wall time to ``metrics[name]`` (milliseconds)."""
    start = time.monotonic()
    try:
        yield
    finally:
        metrics[name] = metrics.get(name, 0) + int((time.monotonic() - start) * 1000)


def _mb(n: int) -> str:
    return f"{n / 1024 / 1024:.1f} MB"


def optimize(
    spark: SparkSession,
    table: str,
    partition_filter: str | None = None,
    cluster_by: Sequence[str] | str | None = None,
    target_file_size_mb: float | None = None,
    dry_run: bool = False,
    lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
    default_cluster_by: Sequence[str] | None = None,
) -> OptimizeResult:
    """Compact ``table``'s small files (bin-packing to ``target_file_size_mb``, default 128).

    ``cluster_by``: columns to sort rows by across the rewritten files, so their key ranges
    stop overlapping and file skipping works again; stored with the table (its journal), so
    every later compaction keeps it. None: the table's stored ``cluster_by``, if any, else
    ``default_cluster_by`` (from dbt: the model's ``unique_key``), less any partition column
    (every file holds one value of it) and not stored, as a merge's compaction sorts by its
    key.
    ``partition_filter``: a SQL condition on partition columns (only those partitions).
    ``dry_run``: report the files it would rewrite, writing nothing and taking no lock.
    """
    from .run import locate_or_finish, open_journal, recover_locked, storage_errors, table_lock

    problems: list[str] = []
    raw: dict[str, Any] = {"cluster_by": cluster_by}
    if target_file_size_mb is not None:
        raw["target_file_size_mb"] = target_file_size_mb
    upkeep = parse_upkeep(raw, problems)
    problems += lock_timeout_problems(lock_timeout_s)
    if partition_filter is not None and (
        not isinstance(partition_filter, str) or not partition_filter.strip()
    ):
        problems.append(
            f"`partition_filter` must be a SQL condition on partition columns, got {partition_filter!r}"
        )
    if problems:
        raise MergeSpecError(problems)
    fallback = tuple(c for c in default_cluster_by or () if isinstance(c, str) and c.strip())
    with lean_columns(), storage_errors(f"OPTIMIZE of {table}"):
        journal = open_journal(spark, locate_or_finish(spark, table, "OPTIMIZE table"))
        journal.check_placement(table)
        if dry_run:
            target = load_target(spark, table)
            journal.check_bound(target)
            return _optimize(spark, journal, None, target, upkeep, partition_filter, True, fallback)
        with table_lock(journal, table, "OPTIMIZE", lock_timeout_s) as lock:
            target = load_target(spark, table)
            if recover_locked(spark, journal, lock, target).rolled_forward:
                target = load_target(spark, table)
            return _optimize(spark, journal, lock, target, upkeep, partition_filter, False, fallback)


def _optimize(
    spark: SparkSession,
    journal: Journal,
    lock: TableLock | None,
    target: TargetTable,
    upkeep: Upkeep,
    partition_filter: str | None,
    dry: bool,
    fallback: Sequence[str] = (),
) -> OptimizeResult:
    versions = journal.versions()
    newest = journal.newest(versions)
    stored = newest.cluster_by if newest is not None else None
    if upkeep.cluster_by is not None:
        cluster = clustering_columns(target, upkeep.cluster_by)
    else:
        cluster = stored or _sortable(target, fallback)
    snapshot = journal.snapshot()
    files = data_files(journal, target, snapshot, cluster, versions)
    chosen = _partitions(spark, target, {f.partition for f in files}, partition_filter)
    in_scope = [f for f in files if chosen is None or f.partition in chosen]
    in_order: set[str] = set()
    if cluster:
        in_order, ranks = _in_key_order(spark, journal, target, in_scope, cluster)
        # small files of a partition in key order are packed in key order, so that no packed
        # file spans one left out (which would make the next call cluster it all again)
        in_scope = [dataclasses.replace(f, order=ranks[f.path]) if f.path in ranks else f for f in in_scope]
    groups = compaction.bin_packed(in_scope, upkeep.target_bytes, cluster=bool(cluster), in_order=in_order)
    counted = compaction.summary(groups)
    before = (len(snapshot), sum(f.size for f in snapshot.values()))
    # A cluster_by given here is the table's from now on; otherwise the stored one stays. Given
    # with nothing to rewrite (the files are in its order already, or too few), it is still
    # recorded: by an OPTIMIZE version that moves no file.
    keep = tuple(cluster) if upkeep.cluster_by is not None else stored
    reclustered = upkeep.cluster_by is not None and tuple(keep or ()) != tuple(stored or ())
    if dry or not (groups or reclustered):
        return OptimizeResult(
            target.name, None, *before, counted["files"], counted["bytes"],
            counted["outputs"] if dry else 0, 0, tuple(cluster), dry,
        )  # fmt: skip
    assert lock is not None
    if not versions:  # a table without a journal: version 0 is the table as found
        journal.write_initial(journal.initial_entry(target, "CONVERT", snapshot))
        versions = [0]
    retention = upkeep.retention(newest.retention if newest is not None else None)
    entry = compact(spark, journal, lock, target, groups, list(cluster), upkeep, snapshot, keep, retention)
    logger.info("rowmerge: optimized %s: version %d", target.name, entry.version)
    return OptimizeResult(
        target.name, entry.version, *before, len(entry.removed), sum(f.size for f in entry.removed),
        len(entry.added), sum(f.size for f in entry.added), tuple(cluster), False, dict(entry.metrics),
    )  # fmt: skip


def _in_key_order(
    spark: SparkSession,
    journal: Journal,
    target: TargetTable,
    files: Sequence[DataFile],
    cluster: Sequence[str],
) -> tuple[set[str], dict[str, int]]:
    """The partitions of :func:`.compaction.doubtful` whose files' ranges of the whole cluster
    key do not overlap, and each of their files' place in key order; read from the files in one
    job (each file's least and greatest key, compared by Spark in the order the rewrite sorts
    by: ascending, NULL first). A partition with a file the read did not see (no rows, or a
    path that did not match) counts as out of order: clustering it again is safe, skipping it
    is not."""
    doubtful = compaction.doubtful(files, len(cluster))
    if not doubtful:
        return set(), {}
    spark_path = {f.path: journal.storage.to_spark_path(f.path) for found in doubtful.values() for f in found}
    partition_of = {spark_path[f.path]: p for p, found in doubtful.items() for f in found}
    key = F.struct(*[F.col(q(c)) for c in cluster])
    mapping = F.create_map(*[F.lit(x) for u, p in sorted(partition_of.items()) for x in (u, p)])
    in_partition = Window.partitionBy("partition").orderBy("low", "file")
    read = target.files_only(target.read(spark), list(partition_of), FILE_PATH)
    with partitions_pruned_by_spark(spark):
        found = (
            read.groupBy(F.col(FILE_PATH).alias("file"))
            .agg(F.min(key).alias("low"), F.max(key).alias("high"))
            .withColumn("partition", F.element_at(mapping, F.col("file")))
            .select(
                "file",
                F.row_number().over(in_partition).alias("rank"),
                F.coalesce(F.lag("high").over(in_partition) >= F.col("low"), F.lit(False)).alias("overlaps"),
            )
            .collect()
        )
    seen = {r["file"]: r for r in found}
    in_order = {
        p
        for p, fs in doubtful.items()
        if all(spark_path[f.path] in seen and not seen[spark_path[f.path]]["overlaps"] for f in fs)
    }
    ranks = {f.path: int(seen[spark_path[f.path]]["rank"]) for p in in_order for f in doubtful[p]}
    return in_order, ranks


def _sortable(target: TargetTable, columns: Sequence[str]) -> tuple[str, ...]:
    """The columns of ``columns`` that can order rows inside a partition, as the table names
    them (a key's partition columns left out)."""
    parts = {c.lower() for c in target.partition_columns}
    return tuple(target.field(c).name for c in columns if target.has_column(c) and c.lower() not in parts)


def clustering_columns(target: TargetTable, columns: Sequence[str]) -> tuple[str, ...]:
    """``cluster_by`` as the table names its columns; MergeSpecError naming a wrong one."""
    out, problems = [], []
    parts = {c.lower() for c in target.partition_columns}
    for c in columns:
        if not target.has_column(c):
            problems.append(
                f"`cluster_by` column {c!r} is not a column of {target.name} (its columns: "
                f"{', '.join(target.columns)})"
            )
        elif c.lower() in parts:
            problems.append(
                f"`cluster_by` column {c!r} is a partition column of {target.name}: every file holds "
                "one value of it already; cluster by columns inside the files"
            )
        elif not orderable(target.field(c).dataType):
            problems.append(
                f"`cluster_by` column {c!r} of {target.name} is of type "
                f"{target.field(c).dataType.simpleString()}, which Spark cannot sort by (maps and "
                "variants have no order); cluster by columns of other types"
            )
        else:
            out.append(target.field(c).name)
    if problems:
        raise MergeSpecError(problems)
    return tuple(out)


def orderable(dt: DataType) -> bool:
    """Whether Spark can sort rows by a column of type ``dt`` (as its OrderUtils.isOrderable
    says): not a map, a variant or a geometry/geography, nor an array or struct holding one."""
    if isinstance(dt, ArrayType):
        return orderable(dt.elementType)
    if isinstance(dt, StructType):
        return all(orderable(f.dataType) for f in dt.fields)
    if isinstance(dt, UserDefinedType):
        return orderable(dt.sqlType())
    return not isinstance(dt, (MapType, VariantType, GeometryType, GeographyType))


def data_files(
    journal: Journal,
    target: TargetTable,
    snapshot: dict[str, FileInfo],
    cluster: Sequence[str],
    versions: Sequence[int],
) -> list[DataFile]:
    """The table's files as the planner sees them: size, partition, age and (when the journal
    records it) the range of the first cluster column."""
    ranges: dict[str, tuple[Any, Any]] = {}
    first = cluster[0] if cluster else None
    if first is not None and versions and indexed_columns([target.field(first)], ()):
        summaries = journal.file_summaries(target, snapshot, versions)
        for path, s in summaries.items():
            r = s.columns.get(first.lower())
            if r is not None:
                ranges[path] = (r.low, r.high)
    return [
        DataFile(
            path=path,
            size=info.size,
            partition=compaction.partition_of(path, journal.location),
            order=info.mtime,
            key_range=ranges.get(path),
        )
        for path, info in sorted(snapshot.items())
    ]


def _partitions(
    spark: SparkSession, target: TargetTable, folders: set[str], condition: str | None
) -> set[str] | None:
    """The partition folders ``condition`` selects (None: no condition, every partition)."""
    if condition is None:
        return None
    if not target.partition_columns:
        raise MergeSpecError(
            [
                f"`partition_filter` ({condition}) needs a partitioned table; {target.name} has no "
                "partition columns"
            ]
        )
    rows = []
    for folder in sorted(folders):
        values = dict((k.lower(), v) for k, v in partition_values(folder)) if folder else {}
        rows.append((folder, *[values.get(c.lower()) for c in target.partition_columns]))
    cols = [target.field(c) for c in target.partition_columns]
    # The schema is given: an empty table has no folders, and the filter is still checked.
    # Only the partition columns are in scope (a misspelt column's suggestions name only
    # them); the rows the filter keeps are mapped back to their folders by their values.
    names = [f"_p{i}" for i in range(len(cols))]
    frame = spark.createDataFrame(
        [row[1:] for row in rows], StructType([StructField(n, StringType()) for n in names])
    )
    typed = frame.select(
        *[
            F.when(F.col(f"_p{i}") == "__HIVE_DEFAULT_PARTITION__", F.lit(None))
            .otherwise(F.col(f"_p{i}"))
            .cast(c.dataType)
            .alias(c.name)
            for i, c in enumerate(cols)
        ],
    )
    try:
        picked = {tuple(r) for r in typed.where(F.expr(condition)).collect()}
    except AnalysisException as exc:
        raise MergeSpecError(
            [
                f"`partition_filter` ({condition}) must be a condition on the partition columns of "
                f"{target.name} ({', '.join(target.partition_columns)}): {spark_reason(exc)}"
            ]
        ) from None
    if not picked:
        return set()
    typed_rows = typed.collect()  # in the order of rows (a local relation keeps it)
    return {str(row[0]) for row, values in zip(rows, typed_rows, strict=True) if tuple(values) in picked}


def compact(
    spark: SparkSession,
    journal: Journal,
    lock: TableLock,
    target: TargetTable,
    groups: Sequence[Group],
    keys: Sequence[str],
    upkeep: Upkeep,
    snapshot: dict[str, FileInfo],
    cluster_by: Sequence[str] | None,
    retention: Retention | None,
) -> Entry:
    """Rewrite ``groups`` and commit them as an OPTIMIZE version (hold the lock); steps 2-4 of
    the module doc. ``keys``: what rows are ordered by; ``cluster_by``, ``retention``: the
    table's clustering and retention to record (None: none)."""
    metrics: dict[str, Any] = {"numTargetRowsInserted": 0}
    staging = journal.stage()
    committed = False
    try:
        with timed_ms(metrics, "rewriteTimeMs"):
            if groups:  # none: the version only records a new cluster_by
                with partitions_pruned_by_spark(spark):
                    _write(spark, journal, target, groups, keys, staging.data_dir)
            removed = {f.path: f.size for g in groups for f in g.files}
            fields = indexed_columns(target.schema.fields, target.partition_columns)
            # ``removed``'s paths as the storage names them (the snapshot's), not Spark's
            # URL-encoded `_metadata.file_path` form: a partition value with a space or a ':'
            # (every timestamp) is encoded there, and the storage would not find the file.
            staged, counts = staged_files(
                target.file_format, staging.data_dir, journal.storage, removed, fields
            )
        rows_in = sum(counts.values())
        rows_out = sum(f.rows for f in staged)
        if rows_in != rows_out:
            raise OptimizeError(
                f"OPTIMIZE of {target.name} stopped: the files it wrote hold {rows_out} rows, the "
                f"{len(removed)} files they replace {rows_in}. Nothing was changed. Was the table "
                "written by another job while it ran? Run it again."
            )
        faults.fault_point("compact_staged")
        versions = journal.versions()
        newest = journal.newest(versions)
        version = journal.next_version(versions, target.name)
        metrics.update(
            numFilesRemoved=len(removed),
            numFilesAdded=len(staged),
            numBytesRemoved=sum(removed.values()),
            numBytesAdded=sum(f.size for f in staged),
            numRowsRewritten=rows_out,
            numGroups=len(groups),
            numFilesBefore=len(snapshot),
            numBytesBefore=sum(f.size for f in snapshot.values()),
        )
        metrics.update(
            numFilesAfter=metrics["numFilesBefore"] - len(removed) + len(staged),
            numBytesAfter=metrics["numBytesBefore"] - metrics["numBytesRemoved"] + metrics["numBytesAdded"],
        )
        metrics["targetFileSizeMb"] = upkeep.target_file_size_mb
        if keys:
            metrics["orderedBy"] = list(keys)
        with timed_ms(metrics, "commitTimeMs"):
            entry = journal.merge_entry(
                staging,
                version=version,
                timestamp=journal.commit_time(versions, newest),
                target=target,
                spec={"operation": "OPTIMIZE", "keys": list(keys), "target_mb": upkeep.target_file_size_mb},
                added=staged,
                removed=[(p, s, counts[journal.storage.qualify(p)]) for p, s in removed.items()],
                new_columns=(),
                changes=None,
                feed_columns=None,
                feed=(),
                metrics=metrics,
                operation="OPTIMIZE",
                cluster_by=cluster_by,
                retention=retention,
            )
            lock.check()
            journal.check(entry, target, recovering=False)
            journal.check_unchanged(entry, {p: snapshot[p] for p in removed})
            journal.commit(entry)
            committed = True
            faults.fault_point("compact_entry")
            try:
                journal.apply(spark, entry, target, prepared=True, steps="compact_")
            except Exception as exc:
                raise MergeCommittedError(target.name, entry.version, exc) from exc
        return entry
    finally:
        if not committed:
            journal.discard(staging)


def _write(
    spark: SparkSession,
    journal: Journal,
    target: TargetTable,
    groups: Sequence[Group],
    keys: Sequence[str],
    staging: str,
) -> None:
    """Write the rows of ``groups`` into ``staging`` in one job: each group into its number of
    files, rows ordered by ``keys`` (else as they were), partitioned like the table."""
    group_of: dict[str, int] = {}
    for i, g in enumerate(groups):
        for f in g.files:
            group_of[journal.storage.to_spark_path(f.path)] = i
    path = F.col(FILE_PATH)
    rows: DataFrame = target.files_only(target.read(spark), list(group_of), FILE_PATH)
    mapping = F.create_map(*[x for u, i in sorted(group_of.items()) for x in (F.lit(u), F.lit(i))])
    rows = rows.withColumn(GROUP, F.element_at(mapping, path))
    order: list[Column] = [F.col(GROUP), *[F.col(q(k)) for k in keys]]
    if not keys:  # keep the rows' order: file by file, as they were
        order += [path, F.col("_metadata.row_index")] if target.supports_row_index else [path]
    # One task per output file: a range split on (group, key) keeps each group's rows
    # together and, for a group of several files, gives each file its own key range.
    total = sum(g.outputs for g in groups)
    out = rows.repartitionByRange(total, *order).sortWithinPartitions(*order).drop(GROUP)
    writer = out.write.format(target.file_format)
    if target.partition_columns:
        writer = writer.partitionBy(*target.partition_columns)
    writer.save(staging)


def _as_created(journal: Journal) -> frozenset[str]:
    """The files of version 0 (the table as dbt created it, or as the first merge found it):
    auto-compaction never starts a run for them, it only folds them into runs that files
    merges wrote have filled (compaction.tiered's ``idle``). They are the table's own layout,
    not small files a merge left behind; rewriting them all at a table's first merge would make
    that merge pay for a whole table's worth of writing."""
    try:
        return journal.created_paths()
    except Exception:  # noqa: BLE001 - unreadable: recovery judges entries; treat them all alike
        return frozenset()


# A partition the last few versions before a merge wrote, and the merge did not, has settled
# (compaction.settled). Four versions: the previous merge and its compaction, with room for a
# merge that wrote elsewhere in between, or one whose settling did not fit the bounds.
SETTLE_VERSIONS = 4
# A cold partition's files below this fraction of the target size are tidied (see _settled):
# the aging benchmark's (and the issue's) small files.
COLD_SMALL_FRACTION = 0.25


def _settled(
    journal: Journal, entry: Entry, files: Sequence[DataFile], target_bytes: int
) -> tuple[frozenset[str], frozenset[str]]:
    """Partitions the versions just before ``entry`` added files to and ``entry`` did not;
    and the cold ones: those none of those versions nor ``entry`` wrote that hold two or more
    files below a quarter of the target size (one of them is packed per merge, the cheapest
    that fits the merge's bounds: :func:`_one_cold`).

    Only a partition whose ``files`` bin-packing would pack could be settled, so the entries
    are read only when one exists outside what ``entry`` wrote: after most merges of an hourly
    model (its finished days already settled) that is no partition, and no read.

    Cold partitions are the table's own layout where no merge writes: a table created with
    several small files per day (the aging benchmark's base, 16 files straddling 31 days,
    left 15 days in two files of 4.5 and 0.7 MB, which sit in different tiers and would never
    be joined; a plain reader paid for each) is tidied a partition at a time, each merge paying
    for one partition's small files at most, never for the table it found."""

    def written(e: Entry) -> set[str]:
        return {compaction.partition_of(f.path, journal.location) for f in e.added}

    packed = compaction.bin_packed(files, target_bytes, cluster=False)
    packable = {g.partition for g in packed} - written(entry)
    if not packable:
        return frozenset(), frozenset()
    recent: set[str] = set()
    for version in range(max(1, entry.version - SETTLE_VERSIONS), entry.version):
        try:
            recent |= written(journal.read_entry(version))
        except Exception:  # noqa: BLE001 - unreadable or folded: recovery judges entries
            continue
    small = _cold_small(files, target_bytes, packable - recent)
    cold = {g.partition for g in compaction.bin_packed(small, target_bytes, cluster=False)}
    return frozenset(recent & packable), frozenset(cold)


def _cold_small(files: Sequence[DataFile], target_bytes: int, partitions: Collection[str]) -> list[DataFile]:
    """The files of ``partitions`` below a quarter of the target size: what a cold partition
    packs (:func:`_settled`)."""
    return [f for f in files if f.partition in partitions and f.size < target_bytes * COLD_SMALL_FRACTION]


def _one_cold(
    files: Sequence[DataFile], cold: Collection[str], target_bytes: int, max_files: int, max_bytes: int
) -> list[Group]:
    """The groups packing the small files of one cold partition: of those whose small files fit
    ``max_files`` and ``max_bytes`` (what the merge's settling left of its bounds), the one with
    the fewest bytes of them. One too big for the bounds is never chosen, so it cannot hold up
    the others; it waits for ``optimize``."""
    by_partition: dict[str, list[Group]] = {}
    for g in compaction.bin_packed(_cold_small(files, target_bytes, cold), target_bytes, cluster=False):
        by_partition.setdefault(g.partition, []).append(g)
    fitting = [
        (sum(g.size for g in groups), partition, groups)
        for partition, groups in by_partition.items()
        if sum(len(g.files) for g in groups) <= max_files and sum(g.size for g in groups) <= max_bytes
    ]
    return min(fitting, key=lambda c: c[:2])[2] if fitting else []


def after_merge(
    spark: SparkSession,
    journal: Journal,
    lock: TableLock,
    target: TargetTable,
    upkeep: Upkeep,
    keys: Sequence[str],
    files: dict[str, FileInfo],
    entry: Entry,
) -> Entry | None:
    """Auto-compaction: right after the merge ``entry`` committed, under its lock, compact what
    the tiered policy finds ready among the files merges wrote (compaction.tiered; version 0's
    files only fill runs) and, in a partitioned table, the small files of partitions the writes
    moved away from (compaction.settled), or every small file when the version is a multiple
    of ``optimize_every``. ``files``: the table's files after the merge. A failure
    before its own commit point leaves the table as the merge left it and only warns.

    The files the merge itself just wrote are left out of the tiered step: they hold the rows
    it touched, which are the rows the next merge is likeliest to touch again. Compacted with
    colder files (the aging benchmark's recent-updates shape: a rewritten 10 MB file holding
    the newest keys, merged with seven of the table's own into 76 MB), they would make every
    later merge rewrite the whole compacted file — 7.5 s a merge instead of 2.3 s. They join a
    run after a merge that leaves them alone."""
    every = upkeep.optimize_every
    whole = every is not None and entry.version % every == 0
    if not whole and not upkeep.auto_compact:
        return None
    cluster = list(entry.cluster_by or ()) or list(keys)
    just_written = frozenset() if whole else frozenset(f.path for f in entry.added)

    ranges: dict[str, Any] = {}  # the cluster key's range of each file, once there is work

    def every_file(found: dict[str, FileInfo]) -> list[DataFile]:
        return [
            DataFile(p, info.size, compaction.partition_of(p, journal.location), info.mtime, ranges.get(p))
            for p, info in sorted(found.items())
        ]

    def movable(found: dict[str, FileInfo]) -> list[DataFile]:
        return [f for f in every_file(found) if f.path not in just_written]

    settling, cold = (
        (frozenset(), frozenset())
        if whole or not target.partition_columns
        else _settled(journal, entry, movable(files), upkeep.target_bytes)
    )

    def plan(found: dict[str, FileInfo], idle: frozenset[str] = frozenset()) -> list[Group]:
        listed = movable(found)
        if whole:
            return compaction.bin_packed(listed, upkeep.target_bytes, cluster=False)
        max_bytes = int(upkeep.max_mb * 1024 * 1024)
        settle = compaction.settled(listed, settling, upkeep.target_bytes, upkeep.max_files, max_bytes)
        settle += _one_cold(
            listed,
            cold,
            upkeep.target_bytes,
            upkeep.max_files - sum(len(g.files) for g in settle),
            max_bytes - sum(g.size for g in settle),
        )
        packed = {g.partition for g in settle}
        return settle + compaction.tiered(
            [f for f in listed if f.partition not in packed],
            upkeep.target_bytes,
            upkeep.min_files,
            upkeep.max_files - sum(len(g.files) for g in settle),
            max_bytes - sum(g.size for g in settle),
            idle,
            every_file(found),
        )

    # Decided from the files the merge knows (no listing); once there is work, planned again
    # with the table's own files idle, then from a listing, whose sizes and times the commit
    # checks its input against.
    if not plan(files):
        return None
    idle = frozenset() if whole else _as_created(journal)
    if idle and not plan(files, idle):
        return None
    listing = journal.snapshot()
    if not whole:
        # Runs in key order, none taking in another file's range (compaction.tiered): the
        # ranges come from the journal's statistics, read only now that there is work.
        ranges.update(
            (f.path, f.key_range) for f in data_files(journal, target, listing, cluster, journal.versions())
        )
    groups = plan(listing, idle)
    if not groups:
        return None
    logger.info(
        "rowmerge: %s: compacting %d small file(s) in %d group(s)",
        target.name,
        sum(len(g.files) for g in groups),
        len(groups),
    )
    try:
        return compact(
            spark, journal, lock, target, groups, cluster, upkeep, listing, entry.cluster_by, entry.retention
        )
    except MergeCommittedError:
        raise
    except Exception as exc:  # noqa: BLE001 - the merge is committed; the files wait
        reason = str(exc).splitlines()[0] if str(exc) else repr(exc)
        warn(
            f"{target.name}: compacting small files after the merge failed, so they stay as they are "
            f"until a later merge or optimize compacts them ({reason})"
        )
        return None
