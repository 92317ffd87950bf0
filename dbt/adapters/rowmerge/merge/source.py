"""Phase 5: materialize the source exactly once, before the target is read.

A model's SQL often reads ``{{ this }}``; evaluating it again after files were rewritten
would see a different table. ``localCheckpoint`` runs the source plan once and cuts its
lineage, so no later job can silently re-evaluate it. The job that checkpoints it also counts
the rows and collects the key statistics the scan uses to prune the target (observed, so the
phase is one Spark job).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import reduce
from typing import Any
from uuid import uuid4

from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    DataType,
    DateType,
    LongType,
    NumericType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)
from pyspark.sql.utils import AnalysisException

from .errors import UnsupportedTableError, spark_reason
from .filestats import KeyRanges, layer_hits, within_all_ranges
from .lean_columns import jvm_class
from .outputs import PREFIX, SRC_ID, SRC_PRESENT
from .plan import MergePlan
from .storage import is_connect
from .table import read_table, sql_name

# A partition key with at most this many distinct source values is pruned with IN (...);
# more values fall back to a min/max range.
MAX_IN_LIST_VALUES = 1000
# A source estimated at up to this many bytes is broadcast (see _broadcast_threshold).
SOURCE_BROADCAST_BYTES = 64 * 1024 * 1024
# False: no source is broadcast, as with Spark's threshold at -1 (tests send small merges down
# the path of a source too large to broadcast: the shuffled join's rewrite).
SOURCE_BROADCAST: ContextVar[bool] = ContextVar("rowmerge_source_broadcast", default=True)


@dataclass
class MaterializedSource:
    df: DataFrame  # checkpointed, with SRC_PRESENT and SRC_ID
    num_rows: int
    key_stats: dict[str, dict[str, Any]] = field(default_factory=dict)  # target col -> stats
    broadcastable: bool = False  # small enough to ship to every task instead of shuffling
    # Per (KeyRanges, source expression) handed to materialize: the ids of the files some
    # source row's key falls in (see filestats.layer_hits).
    file_hits: list[list[int]] = field(default_factory=list)
    # Rows with a NULL in some `=` key of `on`: they can match no target row (see guards).
    null_key_rows: int = 0
    # SQL over the source's alias: true where a row's keys lie inside the files' ranges (only
    # such a row can match a target row), and how many rows it holds for; None when no key's
    # ranges bound every file.
    may_match: str | None = None
    may_match_rows: int | None = None

    def join_side(self) -> DataFrame:
        """The source as the build side of a join (broadcast when small)."""
        return F.broadcast(self.df) if self.broadcastable else self.df

    def unmatched(self, matched_ids: DataFrame) -> DataFrame:
        """The source rows whose ``SRC_ID`` is not among ``matched_ids``.

        The ids are at most as many as the source's rows: broadcast them when the source is
        small enough to broadcast, so the anti-join shuffles nothing (with adaptive execution
        each shuffle is a job of its own, and a small merge pays for jobs, not rows).
        """
        ids = F.broadcast(matched_ids) if self.broadcastable else matched_ids
        return self.df.join(ids, SRC_ID, "left_anti")

    def without_ids(self, spark: SparkSession, matched: Collection[int]) -> DataFrame:
        """The source rows whose ``SRC_ID`` is not among ``matched``, ids the driver holds (a
        write observed them: see :class:`.rewrite.OnePass`)."""
        if not matched:
            return self.df
        schema = StructType([StructField(SRC_ID, LongType(), False)])
        # Plain longs: no check of each row against the schema (a Python call per id).
        return self.unmatched(spark.createDataFrame([(i,) for i in matched], schema, verifySchema=False))


def _prunable(dtype: DataType) -> bool:
    return isinstance(
        dtype, (NumericType, StringType, DateType, TimestampType, TimestampNTZType, BooleanType)
    )


def encode(col: Column, dtype: DataType) -> Column:
    """A key statistic as a driver-safe value that :func:`decode` turns back exactly.

    Raw Python values would not round-trip: a naive datetime is read back in the driver's
    time zone. Instants travel as epoch microseconds, everything else as Spark's own text.
    """
    if isinstance(dtype, TimestampType):
        return F.unix_micros(col)
    return col.cast("string")


def decode(value: Any, dtype: DataType) -> Column:
    if isinstance(dtype, TimestampType):
        return F.timestamp_micros(F.lit(value))
    return F.lit(value).cast(dtype)


def estimated_bytes(schema: StructType, rows: int) -> int:
    """Rough in-memory size: fixed widths for primitives, 32 bytes for anything else."""
    widths = {
        "ByteType": 1,
        "BooleanType": 1,
        "ShortType": 2,
        "IntegerType": 4,
        "FloatType": 4,
        "DateType": 4,
        "LongType": 8,
        "DoubleType": 8,
        "TimestampType": 8,
        "TimestampNTZType": 8,
        "DecimalType": 16,
    }
    row = sum(widths.get(type(f.dataType).__name__, 32) for f in schema.fields) + 8
    return row * rows


def _broadcast_threshold(spark: SparkSession) -> int:
    """How large a source is still broadcast: Spark's own threshold, raised for the source.

    Shipping the source to every task means the target is never shuffled, and the target is
    the big side: a source of up to 1/16 of the driver's heap (at most
    SOURCE_BROADCAST_BYTES) is worth it. Broadcasting turned off (-1) stays off.
    """
    if not SOURCE_BROADCAST.get():
        return -1
    raw = str(spark.conf.get("spark.sql.autoBroadcastJoinThreshold", "10485760b"))
    try:
        jvm: Any = spark._jvm  # type: ignore[attr-defined]
        threshold = int(jvm_class(jvm, "org.apache.spark.network.util.JavaUtils").byteStringAsBytes(raw))
        heap = int(jvm_class(jvm, "java.lang.Runtime").getRuntime().maxMemory())
    except Exception:  # Spark Connect or an odd value: be conservative
        return -1
    if threshold < 0:
        return threshold
    return max(threshold, min(SOURCE_BROADCAST_BYTES, heap // 16))


def read_source(spark: SparkSession, name: str) -> DataFrame:
    """The source relation (its name was validated by the spec)."""
    try:
        df = read_table(spark, sql_name(name))
        df.schema  # noqa: B018 -- resolved now (Spark Connect resolves lazily)
    except AnalysisException as exc:
        raise UnsupportedTableError(
            f"MERGE source {name} cannot be read: {spark_reason(exc)}. Check the `source` name (dbt passes "
            "the model's temporary view; a Python caller creates one with createOrReplaceTempView)."
        ) from None
    if df.isStreaming:
        raise UnsupportedTableError(
            f"MERGE source {name} is a streaming relation; a merge reads a batch source once. Merge "
            "each micro-batch from foreachBatch instead (its DataFrame is a batch source)."
        )
    return df


def row_counts(plan: MergePlan, may_match: str | None) -> list[Column]:
    """Aggregates of the source's rows (aliased as the source) that a merge observes as it reads
    them: ``n`` rows; ``null_keys``, rows with a NULL in some `=` key of `on` (with key pairs);
    ``may_match``, rows for which the SQL ``may_match`` holds (when given)."""
    aggs = [F.count(F.lit(1)).alias("n")]
    if plan.key_pairs:
        any_null = reduce(lambda a, b: a | b, [F.expr(e).isNull() for _, e in plan.key_pairs])
        aggs.append(F.count(F.when(any_null, F.lit(1))).alias("null_keys"))
    if may_match is not None:
        aggs.append(F.count(F.when(F.expr(may_match), F.lit(1))).alias("may_match"))
    return aggs


def materialize(
    spark: SparkSession,
    plan: MergePlan,
    source: DataFrame,
    ranges: Sequence[tuple[KeyRanges, str]] = (),
    bounds: str | None = None,
) -> MaterializedSource:
    """Checkpoint ``source`` and gather its row count and per-key pruning statistics.

    ``ranges``: (the target files' ranges of a key column, the source expression it equals);
    the same job finds the files each one's values fall in, so skipping costs no extra job.
    ``bounds``: where ``ranges`` is empty (no key's ranges rule a file out, as in a table of
    one file), SQL of :func:`.filestats.within_all_ranges` over every key's ranges, so the
    rows inside them are counted all the same.
    """
    df = source.withColumn(SRC_PRESENT, F.lit(True)).withColumn(SRC_ID, F.monotonically_increasing_id())
    aliased = df.alias(plan.sa)
    # Between the lowest and the highest bound of each key's ranges: a row outside matches
    # nothing, and the one-pass write inserts such rows without a join (see
    # rewrite.inserts_by_statistics). A plain comparison, not the search below: per row, as a
    # column, that search's code made the job's compiled loop too big for the JVM to compile.
    may_match = within_all_ranges(ranges) if ranges else bounds
    aggs = row_counts(plan, may_match)
    partition_cols = {c.lower() for c in plan.target.partition_columns}
    prunable = [
        (i, t, e) for i, (t, e) in enumerate(plan.key_pairs) if _prunable(plan.target.field(t).dataType)
    ]
    for i, tcol, sexpr in prunable:
        dtype = plan.target.field(tcol).dataType
        value = F.expr(sexpr)
        aggs += [encode(F.min(value), dtype).alias(f"min{i}"), encode(F.max(value), dtype).alias(f"max{i}")]
        if tcol.lower() in partition_cols:
            distinct = F.collect_set(encode(value, dtype))
            aggs.append(F.slice(distinct, 1, MAX_IN_LIST_VALUES + 1).alias(f"set{i}"))
    # Per key column (j) and layer of its files' ranges (k): the files some source key falls in.
    hit_columns: list[list[str]] = []
    for j, (kr, sexpr) in enumerate(ranges):
        hit_columns.append([f"files{j}_{k}" for k in range(len(kr.layers))])
        aggs += [
            F.collect_set(hit).alias(name)
            for hit, name in zip(layer_hits(sexpr, kr), hit_columns[j], strict=True)
        ]
    if is_connect(spark):
        # Lazy: the statistics job below is the first to compute it, and checkpoints every
        # partition as it goes (one query instead of a count and then the statistics).
        df = df.localCheckpoint(eager=False)
        row = df.alias(plan.sa).agg(*aggs).collect()[0].asDict()
    else:
        # The statistics are observed while the checkpoint is computed: each task folds its
        # rows and the driver merges the tasks' results, so the whole phase is one job (an
        # aggregation would add a shuffle, and with adaptive execution a job of its own).
        observed = Observation(f"{PREFIX}source_{uuid4().hex}")
        df = aliased.observe(observed, *aggs).localCheckpoint(eager=True)
        row = observed.get
    stats: dict[str, dict[str, Any]] = {}
    for i, tcol, _ in prunable:
        entry: dict[str, Any] = {"min": row[f"min{i}"], "max": row[f"max{i}"]}
        if row.get(f"set{i}") is not None:
            values = list(row[f"set{i}"])
            if len(values) <= MAX_IN_LIST_VALUES:
                entry["values"] = values
        stats[tcol] = entry
    num_rows = int(row["n"])
    threshold = _broadcast_threshold(spark)
    return MaterializedSource(
        df=df,
        num_rows=num_rows,
        key_stats=stats,
        broadcastable=0 <= estimated_bytes(source.schema, num_rows) <= threshold,
        file_hits=[sorted({fid for name in names for fid in row[name] or ()}) for names in hit_columns],
        null_key_rows=int(row["null_keys"]) if plan.key_pairs else 0,
        may_match=may_match,
        may_match_rows=int(row["may_match"]) if may_match is not None else None,
    )
