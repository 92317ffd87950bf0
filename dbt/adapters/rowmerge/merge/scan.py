"""Phase 6: find the touched files and check cardinality, in one job.

The target is read with only the columns the clauses need plus ``_metadata.file_path`` and
a row position, after pruning by the source's key range (IN-list on partition keys,
min/max elsewhere, so Parquet skips row groups) and by target-only conjuncts of ``on`` —
unless a NOT MATCHED BY SOURCE clause needs every target row. One join with the source
(broadcast when small, so the target is never shuffled) classifies each row (which clause
acts), then a two-level aggregation per target row and per file yields: the files where
some clause really acts (a no-op update does not count when ``skip_unchanged_updates`` is
on), the clause counters, and the target rows matched by more than one source row. With
not_matched clauses, the same (cached) join also yields the source rows that matched
nothing: the insert candidates, so the rewrite never reads the target again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import reduce
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from .errors import CardinalityViolation
from .filestats import MAX_SKIPPING_FILES, FileSummary, KeyRanges, candidates, indexable, key_ranges
from .outputs import (
    FILE,
    NO_ACTION,
    ROW,
    SIZE,
    SRC_ID,
    acting,
    clause_acts,
    clause_index,
    decide,
    key_sample,
    q,
    src_present,
)
from .plan import MergePlan
from .source import MaterializedSource, decode

MAX_CARDINALITY_SAMPLES = 5


def target_frame(spark: SparkSession, plan: MergePlan, files: Sequence[str] | None = None) -> DataFrame:
    """The target table with file path, row position and size of every row; ``files``: only
    the rows of those files (``_metadata.file_path`` values; see :meth:`.TargetTable.files_only`).

    The files are chosen before the row position is added: an ORC table numbers its rows with
    a non-deterministic expression, which Spark pushes no filter through, so a filter after it
    would list and read the whole table."""
    row = F.col("_metadata.row_index") if plan.target.supports_row_index else F.monotonically_increasing_id()
    table = plan.target.loaded(spark)
    if files is not None:
        table = plan.target.files_only(table, files, "_metadata.file_path")
    return table.select(
        "*",
        F.col("_metadata.file_path").alias(FILE),
        row.alias(ROW),
        F.col("_metadata.file_size").alias(SIZE),
    )


@dataclass(frozen=True)
class Skipping:
    """The table's files and, per key column with footer statistics, their ranges: what lets
    the source's keys rule files out before any is opened."""

    files: list[str]  # qualified paths; a file's id is its index here
    ranges: list[tuple[KeyRanges, str]]  # (files' ranges of a key column, the source expression)
    rows: dict[str, int] = field(default_factory=dict)  # qualified path -> rows (from the journal)

    def key_spans(self) -> dict[str, tuple[Any, Any] | None]:
        """Every file's (lowest, highest) value of the first key column that rules files out
        (None where unknown): where a rewrite may put files together (:mod:`.key_gaps`)."""
        if not self.ranges:
            return {}
        kr = self.ranges[0][0]
        spans: dict[str, tuple[Any, Any] | None] = {self.files[i]: None for i in kr.unplaced}
        for layer in kr.layers:
            spans.update((self.files[i], (low, high)) for low, high, i in layer)
        return spans

    def candidates(self, source: MaterializedSource) -> list[str]:
        """The files some source row could match (qualified paths)."""
        return [
            self.files[i] for i in candidates(source.file_hits, [r for r, _ in self.ranges], len(self.files))
        ]


def key_column_ranges(
    plan: MergePlan, summaries: Mapping[str, FileSummary | None]
) -> list[tuple[KeyRanges, str]]:
    """Per key column of ``on`` with footer statistics (not a partition column): the files'
    ranges of it (files in path order) and the source expression it equals."""
    files = sorted(summaries)
    partition_cols = {c.lower() for c in plan.target.partition_columns}
    out = []
    for tcol, sexpr in plan.key_pairs:
        f = plan.target.field(tcol)
        if tcol.lower() in partition_cols or not indexable(f):
            continue
        out.append((key_ranges(tcol, f.dataType, [summaries[p] for p in files]), sexpr))
    return out


def plan_skipping(
    plan: MergePlan,
    summaries: Mapping[str, FileSummary | None],
    column_ranges: Sequence[tuple[KeyRanges, str]] | None = None,
    whole_table_rows: int = 0,
) -> Skipping | None:
    """How ``summaries`` (qualified path -> footer summary, for every file) can skip files;
    None when they cannot: a NOT MATCHED BY SOURCE clause needs every file, or no key
    column's ranges rule a file out. ``column_ranges``: :func:`key_column_ranges`, if the
    caller has it.

    ``whole_table_rows``: a table of at most that many rows (every file's count known) whose
    ranges rule no file out — a table of one file, or keys spread over every file — gets a
    :class:`Skipping` without ranges, every file a candidate. Nothing is skipped, but the
    merge may then take the one-pass write (:func:`one_pass_applies`): one job that rewrites
    the table, instead of a scan and then a rewrite of the same rows."""
    if plan.not_matched_by_source or len(summaries) > MAX_SKIPPING_FILES:
        return None
    files = sorted(summaries)
    found = key_column_ranges(plan, summaries) if column_ranges is None else column_ranges
    ranges = [(kr, sexpr) for kr, sexpr in found if rules_out_files(kr, len(files))]
    rows = {p: s.rows for p, s in summaries.items() if s is not None}
    if ranges:
        return Skipping(files, ranges, rows)
    if files and len(rows) == len(files) and sum(rows.values()) <= whole_table_rows:
        return Skipping(files, [], rows)
    return None


def rules_out_files(kr: KeyRanges, files: int) -> bool:
    """Whether searching ``kr`` can rule out a file for a value inside the table's range.

    A value falls in at most one file per layer, plus every unplaced file: when those add up to
    every file (a column whose values spread over every file's range, such as an item id in a
    table clustered by order), the search finds all files for every row and only costs time.
    """
    return len(kr.layers) + len(kr.unplaced) < files


def one_pass_applies(
    plan: MergePlan, source: MaterializedSource, skipping: Skipping, files: list[str]
) -> bool:
    """Whether to rewrite the candidate ``files`` in one pass instead of scanning them first.

    The scan exists to find, among the candidates, the files some clause acts on, and to check
    cardinality. When statistics already narrowed the candidates to files the source's keys
    fall in, they are usually exactly the touched files, and a separate scan only adds jobs:
    the one-pass write (:func:`.rewrite.write_changes` with a :class:`.rewrite.OnePass`)
    rewrites every candidate, observes which files a clause acted on and how many joined rows
    hold a target row, and is kept only if every candidate was acted on and no target row met two
    source rows. Otherwise it is thrown away; if no row met two, the files it saw a clause act
    on are the ones a scan would find, and only they are rewritten; if one did, the scan
    decides (and tells the cardinality error). The result is the same either way. It needs
    a matched clause (insert-only merges scan nothing anyway), no NOT MATCHED BY SOURCE clause
    (it needs every file, most of them untouched), no ``max_delete_fraction`` (checked before
    anything is written), the row count of every candidate, and no more candidates than
    source rows (each touched file needs a source row of its own).
    """
    return (
        bool(plan.matched)
        and not plan.not_matched_by_source
        and plan.spec.max_delete_fraction is None
        and 0 < len(files) <= source.num_rows
        and all(f in skipping.rows for f in files)
    )


def pruned_target(
    spark: SparkSession, plan: MergePlan, source: MaterializedSource, files: list[str] | None = None
) -> DataFrame:
    """The target rows some clause could act on: rows a source row could match and, with NOT
    MATCHED BY SOURCE clauses, rows one of their conditions holds for (every row if one has
    no condition).

    ``files``: the URL-encoded paths of the only files that can hold matched rows (see
    :class:`Skipping`); Spark lists no other file to a task.

    The filter goes down to the Parquet/ORC reader, whose row-group statistics skip the
    parts of files it rules out: a mirror of the table's latest orders (NOT MATCHED BY
    SOURCE ``t.order >= ...``) reads those orders, not the table.
    """
    df = target_frame(spark, plan, files)
    nmbs = [rc.condition for rc in plan.not_matched_by_source]
    if any(c is None for c in nmbs):
        return df
    filters: list[Column] = []
    for tcol, stats in source.key_stats.items():
        col = F.col(q(tcol))
        dtype = plan.target.field(tcol).dataType
        if stats["min"] is None:  # empty source or only NULL keys: `=` matches nothing
            filters.append(F.lit(False))
        elif "values" in stats:
            filters.append(col.isin(*[decode(v, dtype) for v in stats["values"]]))
        else:
            filters.append(col.between(decode(stats["min"], dtype), decode(stats["max"], dtype)))
    aliased = df.alias(plan.ta)
    for conj in plan.target_only_conjuncts:
        filters.append(F.expr(conj))
    if not filters:
        return df
    can_match = reduce(lambda a, b: a & b, filters)
    # A NOT MATCHED BY SOURCE condition reads only the target: rows it is false or NULL for,
    # and that no source row can match, are left as they are by every clause.
    return aliased.where(reduce(lambda a, b: a | b, [c for c in nmbs if c is not None], can_match))


@dataclass
class FileStats:
    path: str  # as _metadata.file_path reports it (URL-encoded)
    size: int


@dataclass
class ScanResult:
    touched: list[FileStats] = field(default_factory=list)
    # Source rows that matched no target row (inserted if a not_matched clause acts):
    # decided here, or from the ids a lost one-pass bet observed (run.py), so the rewrite
    # pass never reads the target again.
    insert_source: DataFrame | None = None
    cached: DataFrame | None = None
    files_scanned: int = 0
    matched_updated: int = 0
    matched_deleted: int = 0
    nmbs_updated: int = 0
    nmbs_deleted: int = 0
    inserted: int = 0


def find_touched_files(
    spark: SparkSession, plan: MergePlan, source: MaterializedSource, target: DataFrame
) -> ScanResult:
    # Target preserved only when NOT MATCHED BY SOURCE needs unmatched target rows; the
    # source is the build side, so a small source is broadcast and the target never shuffles.
    # Source rows that match nothing are found afterwards by id (see insert_source).
    how = "left_outer" if plan.not_matched_by_source else "inner"
    joined = target.alias(plan.ta).join(source.join_side().alias(plan.sa), plan.on, how)
    decided = decide(plan, joined, ["matched", "not_matched_by_source"], acts=True)
    src = src_present(plan)
    pair = src.cast("int")
    classified = decided.select(
        F.col(f"`{plan.ta}`.`{FILE}`").alias("f"),
        # Row identity matters only for matched pairs (cardinality); unmatched target rows
        # of a file collapse into one group, which map-side aggregation makes cheap.
        F.when(src, F.col(f"`{plan.ta}`.`{ROW}`")).alias("rk"),
        F.col(f"`{plan.ta}`.`{SIZE}`").alias("size"),
        pair.alias("pair"),
        acting(plan, "matched", "update").cast("int").alias("m_upd"),
        acting(plan, "matched", "delete").cast("int").alias("m_del"),
        acting(plan, "not_matched_by_source", "update").cast("int").alias("b_upd"),
        acting(plan, "not_matched_by_source", "delete").cast("int").alias("b_del"),
        F.when(src, key_sample(plan)).alias("key"),
        F.col(f"`{plan.sa}`.`{SRC_ID}`").alias("sid"),
    )
    result = ScanResult()
    if plan.not_matched:
        # The join runs once: its narrow classification feeds both the aggregation below
        # and the ids of matched source rows (released by release()).
        classified = classified.persist(StorageLevel.MEMORY_AND_DISK)
        result.cached = classified
    per_row = classified.groupBy("f", "rk").agg(
        F.sum("pair").alias("n_src"),
        F.max("m_upd").alias("m_upd"),
        F.max("m_del").alias("m_del"),
        F.sum("b_upd").alias("b_upd"),
        F.sum("b_del").alias("b_del"),
        F.first("key", ignorenulls=True).alias("key"),
        F.first("size").alias("size"),
    )
    dup = F.col("n_src") > 1
    per_file = per_row.groupBy("f").agg(
        F.max(F.greatest("m_upd", "m_del", "b_upd", "b_del")).alias("acts"),
        F.sum("m_upd").alias("m_upd"),
        F.sum("m_del").alias("m_del"),
        F.sum("b_upd").alias("b_upd"),
        F.sum("b_del").alias("b_del"),
        F.sum(dup.cast("int")).alias("dups"),
        F.slice(F.collect_list(F.when(dup, F.struct("key", "n_src"))), 1, MAX_CARDINALITY_SAMPLES).alias(
            "dup_samples"
        ),
        F.first("size").alias("size"),
    )
    if plan.not_matched:
        # The insert candidates (source rows no target row matched) are counted in the same
        # job, as one more row of the result (f NULL).
        matched_ids = classified.where(F.col("pair") == 1).select(F.col("sid").alias(SRC_ID))
        result.insert_source = source.unmatched(matched_ids)
        candidates = decide(plan, result.insert_source.alias(plan.sa), ["not_matched"])
        inserts = candidates.where(clause_index("not_matched") != NO_ACTION).agg(
            F.count(F.lit(1)).alias("ins")
        )
        per_file = per_file.withColumn("ins", F.lit(None).cast("long")).unionByName(
            inserts.select(
                *[F.lit(None).cast(per_file.schema[c].dataType).alias(c) for c in per_file.columns], "ins"
            )
        )
    dup_rows, samples = 0, []
    try:
        collected = per_file.collect()
    except BaseException:
        release(result)
        raise
    for r in collected:
        if r["f"] is None:  # the insert count (see above); a file path is never NULL
            result.inserted = int(r["ins"] or 0)
            continue
        result.files_scanned += 1
        result.matched_updated += int(r["m_upd"] or 0)
        result.matched_deleted += int(r["m_del"] or 0)
        result.nmbs_updated += int(r["b_upd"] or 0)
        result.nmbs_deleted += int(r["b_del"] or 0)
        dup_rows += int(r["dups"] or 0)
        samples += [(s["key"], int(s["n_src"])) for s in (r["dup_samples"] or [])]
        if r["acts"]:
            result.touched.append(FileStats(r["f"], int(r["size"] or 0)))
    if plan.spec.enforces_cardinality and dup_rows:
        release(result)
        samples.sort()
        raise CardinalityViolation(plan.target.name, dup_rows, samples[:MAX_CARDINALITY_SAMPLES])
    result.touched.sort(key=lambda fs: fs.path)
    return result


def release(result: ScanResult | None) -> None:
    """Drop the cached classification once the rewrite no longer needs it."""
    if result is not None and result.cached is not None:
        result.cached.unpersist()
        result.cached = None


def clause_rows(
    plan: MergePlan, source: MaterializedSource, target: DataFrame, scan: ScanResult | None
) -> list[tuple[str, str, int]]:
    """For a dry run: (label, action, rows) of every clause, in spec order — the target rows
    each matched / not_matched_by_source clause would act on (a target row matched by several
    source rows counts once, as the merge counts it) and the source rows each not_matched
    clause would insert. One job per side; the merge itself never runs this."""
    counts: dict[int, int] = {}  # id(clause) -> rows
    if plan.matched or plan.not_matched_by_source:
        how = "left_outer" if plan.not_matched_by_source else "inner"
        joined = target.alias(plan.ta).join(source.join_side().alias(plan.sa), plan.on, how)
        decided = decide(plan, joined, ["matched", "not_matched_by_source"], acts=True)
        kinds = [("matched", plan.matched), ("not_matched_by_source", plan.not_matched_by_source)]
        flags = {
            f"c{id(rc)}": F.coalesce((clause_index(kind) == rc.index) & clause_acts(kind), F.lit(False)).cast(
                "int"
            )
            for kind, clauses in kinds
            for rc in clauses
        }
        per_row = decided.groupBy(F.col(q(plan.ta, FILE)), F.col(q(plan.ta, ROW))).agg(
            *[F.max(flag).alias(name) for name, flag in flags.items()]
        )
        totals = per_row.agg(*[F.sum(name).alias(name) for name in flags]).collect()[0]
        counts.update({int(name[1:]): int(totals[name] or 0) for name in flags})
    if plan.not_matched:
        if scan is not None and scan.insert_source is not None:
            candidates = scan.insert_source.alias(plan.sa)
        else:  # insert-only: no scan ran; the source rows no target row matches
            candidates = source.df.alias(plan.sa).join(target.alias(plan.ta), plan.on, "left_anti")
        nm_idx = clause_index("not_matched")
        totals = (
            decide(plan, candidates, ["not_matched"])
            .agg(*[F.sum((nm_idx == rc.index).cast("int")).alias(f"c{id(rc)}") for rc in plan.not_matched])
            .collect()[0]
        )
        counts.update({id(rc): int(totals[f"c{id(rc)}"] or 0) for rc in plan.not_matched})
    resolved = {id(rc.clause): rc for rc in [*plan.matched, *plan.not_matched, *plan.not_matched_by_source]}
    out = []
    for clause in plan.spec.clauses:
        rc = resolved[id(clause)]
        out.append((clause.label, clause.action, counts.get(id(rc), 0)))
    return out
