"""Phase 3: find the touched files and check cardinality, in one job.

The target is read with only the columns the clauses need plus ``_metadata.file_path`` and
a row position, after pruning by the source's key range (IN-list on partition keys,
min/max elsewhere, so Parquet skips row groups) and by target-only conjuncts of ``on`` —
unless a NOT MATCHED BY SOURCE clause needs every target row. One join with the source
classifies each row (which clause acts), then a two-level aggregation per target row and
per file yields: the files where some clause really acts (a no-op update does not count
when ``skip_unchanged_updates`` is on), the clause counters, and the target rows matched
by more than one source row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import reduce

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from .errors import CardinalityViolation
from .plan import FILE, ROW, SIZE, SRC_ID, TGT_PRESENT, MergePlan, ResolvedClause
from .source import MaterializedSource

MAX_CARDINALITY_SAMPLES = 5


def target_frame(spark: SparkSession, plan: MergePlan) -> DataFrame:
    """The target table with file path, row position and size of every row."""
    row = F.col("_metadata.row_index") if plan.target.supports_row_index else F.monotonically_increasing_id()
    return plan.target.read(spark).select(
        "*",
        F.col("_metadata.file_path").alias(FILE),
        row.alias(ROW),
        F.col("_metadata.file_size").alias(SIZE),
        F.lit(True).alias(TGT_PRESENT),
    )


def pruned_target(spark: SparkSession, plan: MergePlan, source: MaterializedSource) -> DataFrame:
    """The target rows any source row could match (all rows if NOT MATCHED BY SOURCE acts)."""
    df = target_frame(spark, plan)
    if plan.not_matched_by_source:
        return df
    filters: list[Column] = []
    for tcol, stats in source.key_stats.items():
        col = F.col(f"`{tcol}`")
        if stats["min"] is None:  # empty source or only NULL keys: `=` matches nothing
            filters.append(F.lit(False))
        elif "values" in stats:
            filters.append(col.isin(*[F.lit(v) for v in stats["values"]]))
        else:
            filters.append(col.between(F.lit(stats["min"]), F.lit(stats["max"])))
    aliased = df.alias(plan.ta)
    for conj in plan.target_only_conjuncts:
        filters.append(F.expr(conj))
    if not filters:
        return df
    return aliased.where(reduce(lambda a, b: a & b, filters))


@dataclass
class FileStats:
    path: str
    size: int
    rows_read: int


@dataclass
class ScanResult:
    touched: list[FileStats] = field(default_factory=list)
    # Ids of the source rows to insert (matched no target row, a not_matched clause acts):
    # decided here so the rewrite pass never reads the target again.
    insert_ids: DataFrame | None = None
    cached: DataFrame | None = None
    files_scanned: int = 0
    matched_updated: int = 0
    matched_deleted: int = 0
    nmbs_updated: int = 0
    nmbs_deleted: int = 0
    inserted: int = 0


def _acting(clauses: list[ResolvedClause], idx: Column, action: str, plan: MergePlan) -> Column:
    parts = []
    for rc in clauses:
        if rc.action != action:
            continue
        cond = idx == rc.index
        if action == "update" and plan.spec.skip_unchanged_updates:
            cond = cond & plan.changed(rc)
        parts.append(cond)
    if not parts:
        return F.lit(False)
    return F.coalesce(reduce(lambda a, b: a | b, parts), F.lit(False))


def join_type(plan: MergePlan) -> str:
    """Matched-only merges never need an outer join."""
    if plan.not_matched and plan.not_matched_by_source:
        return "full_outer"
    if plan.not_matched:
        return "left_outer"  # source preserved
    if plan.not_matched_by_source:
        return "right_outer"  # target preserved
    return "inner"


def find_touched_files(
    spark: SparkSession, plan: MergePlan, source: MaterializedSource, target: DataFrame
) -> ScanResult:
    src, tgt = plan.src_present(), plan.tgt_present()
    joined = source.df.alias(plan.sa).join(target.alias(plan.ta), plan.on, join_type(plan))
    m_idx = F.when(src & tgt, plan.action_index(plan.matched))
    nm_idx = F.when(src & ~tgt, plan.action_index(plan.not_matched))
    b_idx = F.when(~src & tgt, plan.action_index(plan.not_matched_by_source))
    m_upd = _acting(plan.matched, m_idx, "update", plan)
    m_del = _acting(plan.matched, m_idx, "delete", plan)
    b_upd = _acting(plan.not_matched_by_source, b_idx, "update", plan)
    b_del = _acting(plan.not_matched_by_source, b_idx, "delete", plan)
    ins = F.coalesce(nm_idx >= 0, F.lit(False)) if plan.not_matched else F.lit(False)
    classified = joined.select(
        F.col(f"`{plan.ta}`.`{FILE}`").alias("f"),
        F.col(f"`{plan.ta}`.`{ROW}`").alias("r"),
        F.col(f"`{plan.ta}`.`{SIZE}`").alias("size"),
        (src & tgt).cast("int").alias("pair"),
        m_upd.cast("int").alias("m_upd"),
        m_del.cast("int").alias("m_del"),
        b_upd.cast("int").alias("b_upd"),
        b_del.cast("int").alias("b_del"),
        ins.cast("int").alias("ins"),
        F.when(tgt, plan.key_sample()).alias("key"),
        F.col(f"`{plan.sa}`.`{SRC_ID}`").alias("sid"),
    )
    result = ScanResult()
    if plan.not_matched:
        # The join runs once: its narrow classification feeds both the aggregation below
        # and the choice of rows to insert (released by release()).
        classified = classified.persist(StorageLevel.MEMORY_AND_DISK)
        result.cached = classified
        result.insert_ids = classified.where(F.col("f").isNull() & (F.col("ins") == 1)).select("sid")
    per_row = classified.groupBy("f", "r").agg(
        F.sum("pair").alias("n_src"),
        F.max("m_upd").alias("m_upd"),
        F.max("m_del").alias("m_del"),
        F.max("b_upd").alias("b_upd"),
        F.max("b_del").alias("b_del"),
        F.sum("ins").alias("ins"),
        F.first("key").alias("key"),
        F.first("size").alias("size"),
    )
    dup = F.col("n_src") > 1
    per_file = per_row.groupBy("f").agg(
        F.count(F.lit(1)).alias("rows"),
        F.max(F.greatest("m_upd", "m_del", "b_upd", "b_del")).alias("acts"),
        F.sum("m_upd").alias("m_upd"),
        F.sum("m_del").alias("m_del"),
        F.sum("b_upd").alias("b_upd"),
        F.sum("b_del").alias("b_del"),
        F.sum("ins").alias("ins"),
        F.sum(dup.cast("int")).alias("dups"),
        F.slice(F.collect_list(F.when(dup, F.struct("key", "n_src"))), 1, MAX_CARDINALITY_SAMPLES).alias(
            "dup_samples"
        ),
        F.first("size").alias("size"),
    )
    dup_rows, samples = 0, []
    try:
        collected = per_file.collect()
    except BaseException:
        release(result)
        raise
    for r in collected:
        result.inserted += int(r["ins"] or 0)
        if r["f"] is None:
            continue
        result.files_scanned += 1
        result.matched_updated += int(r["m_upd"] or 0)
        result.matched_deleted += int(r["m_del"] or 0)
        result.nmbs_updated += int(r["b_upd"] or 0)
        result.nmbs_deleted += int(r["b_del"] or 0)
        dup_rows += int(r["dups"] or 0)
        samples += [(s["key"], int(s["n_src"])) for s in (r["dup_samples"] or [])]
        if r["acts"]:
            result.touched.append(FileStats(r["f"], int(r["size"] or 0), int(r["rows"])))
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
