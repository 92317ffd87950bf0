"""The benchmark's data: a table shaped like TPC-DS ``web_returns`` and the change batches merged into it.

The table has web_returns' 24 columns, key ``(wr_order_number, wr_item_sk)``, and is clustered
by order number: row ``i`` of ``0 .. rows-1`` belongs to order ``floor(2i/5) + 1`` (orders of 3
and 2 lines), and file ``k`` of ``files`` holds one contiguous slice of rows, so each file covers
one order-number range. Every other column is a pure function of the row number (xxhash64 with
a salt per column), about 4% of each non-key column is NULL as in dsdgen's output, and returns
spread over ``DAYS`` days in load order. The same rows come out for the same ``rows`` whatever
the machine or the Spark partitioning, and files get fixed names (``part-00000.snappy.parquet``)
so that choosing files "by hash of path" picks the same files everywhere.

A ``by_date`` variant adds the partition column ``wr_returned_date`` (DATE, one of ``DAYS``
days); it holds about ``files + DAYS`` files, because each load slice writes one file per day
it covers.

Change batches (sources) are built from the base files, as Delta Lake's merge benchmark
builds them (``MergeDataLoad``): choose ``files_fraction`` of the files by hash of their path,
take ``matched_fraction`` of their rows as matches and ``not_matched_fraction`` of their rows,
with fresh random keys, as inserts. Sampling is by hash of the key, not ``rand()``, so it is
exact and repeatable. Matched rows carry changed values (see :func:`changed`). Every source is
written once as Parquet and read by all systems from the same files.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

KEY = ("wr_order_number", "wr_item_sk")
DATE_COLUMN = "wr_returned_date"  # the partition column of the by_date variant
DAYS = 30
FIRST_DATE = "2024-01-01"
FIRST_DATE_SK = 2460311  # TPC-DS date keys are Julian day numbers; this one is FIRST_DATE
NULL_ONE_IN = 25  # about 4% NULLs in each non-key column
# Inserted rows of the grid get order numbers from here on: far above every existing order, so a
# "random key" never matches a target row.
NEW_ORDER_BASE = 10**12
DEC = "decimal(7,2)"

# (name, Spark SQL type, value range for surrogate keys); key columns are never NULL.
COLUMNS: tuple[tuple[str, str, int], ...] = (
    ("wr_returned_date_sk", "int", 0),
    ("wr_returned_time_sk", "int", 86_400),
    ("wr_item_sk", "int", 18_000),
    ("wr_refunded_customer_sk", "int", 1_000_000),
    ("wr_refunded_cdemo_sk", "int", 1_920_800),
    ("wr_refunded_hdemo_sk", "int", 7_200),
    ("wr_refunded_addr_sk", "int", 500_000),
    ("wr_returning_customer_sk", "int", 1_000_000),
    ("wr_returning_cdemo_sk", "int", 1_920_800),
    ("wr_returning_hdemo_sk", "int", 7_200),
    ("wr_returning_addr_sk", "int", 500_000),
    ("wr_web_page_sk", "int", 2_000),
    ("wr_reason_sk", "int", 65),
    ("wr_order_number", "bigint", 0),
    ("wr_return_quantity", "int", 100),
    ("wr_return_amt", DEC, 0),
    ("wr_return_tax", DEC, 0),
    ("wr_return_amt_inc_tax", DEC, 0),
    ("wr_fee", DEC, 0),
    ("wr_return_ship_cost", DEC, 0),
    ("wr_refunded_cash", DEC, 0),
    ("wr_reversed_charge", DEC, 0),
    ("wr_account_credit", DEC, 0),
    ("wr_net_loss", DEC, 0),
)
COLUMN_NAMES = tuple(name for name, _, _ in COLUMNS)


@dataclass(frozen=True)
class BaseTable:
    """One generated table: its Parquet files under ``path`` (the copy every run starts from)."""

    kind: str  # "flat" | "by_date"
    path: Path
    rows: int
    files: tuple[str, ...]  # paths relative to ``path``
    bytes: int
    schema: StructType  # data columns, then the partition column (Spark's order)
    partition_columns: tuple[str, ...]

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.schema.fields)


def order_number_of(row: int) -> int:
    return row * 2 // 5 + 1


def _hash(i: Column, salt: int) -> Column:
    return F.xxhash64(i, F.lit(salt))


def _nullable(i: Column, salt: int, value: Column) -> Column:
    return F.when(F.pmod(_hash(i, 1000 + salt), F.lit(NULL_ONE_IN)) != 0, value)


def _day(i: Column, rows: int) -> Column:
    """Returns spread over DAYS days in load order; rows past ``rows`` land on the last day."""
    return F.least(F.floor(i * DAYS / F.lit(rows)), F.lit(DAYS - 1)).cast("int")


def rows_frame(
    spark: SparkSession, start: int, end: int, rows: int, partitions: int, by_date: bool
) -> DataFrame:
    """Rows ``start .. end-1`` of the table of ``rows`` rows (later rows are "new" rows)."""
    return rows_of(spark.range(start, end, 1, partitions), rows, by_date)


def rows_of(ids: DataFrame, rows: int, by_date: bool) -> DataFrame:
    """The rows numbered by ``ids``'s column ``id`` (any numbers, in any order), as
    :func:`rows_frame` makes them."""
    i = F.col("id")
    out: list[Column] = []
    for salt, (name, sql_type, span) in enumerate(COLUMNS):
        if name == "wr_order_number":
            value = (F.floor(i * 2 / 5) + 1).cast("bigint")
        elif name == "wr_item_sk":
            # Rows of one order are 1 or 2 apart, and 7919 * 1 and 7919 * 2 are not multiples of
            # 18000: the key is unique.
            value = (F.pmod(i * 7919, F.lit(18_000)) + 1).cast("int")
        elif name == "wr_returned_date_sk":
            value = _nullable(i, salt, (F.lit(FIRST_DATE_SK) + _day(i, rows)).cast("int"))
        elif sql_type == DEC:
            value = _nullable(i, salt, (F.pmod(_hash(i, salt), F.lit(1_000_000)) / 100).cast(DEC))
        else:
            value = _nullable(i, salt, (F.pmod(_hash(i, salt), F.lit(span)) + 1).cast(sql_type))
        out.append(value.alias(name))
    if by_date:
        out.append(F.date_add(F.lit(FIRST_DATE).cast("date"), _day(i, rows)).alias(DATE_COLUMN))
    return ids.select(*out)


_SPARK_PART = re.compile(r"^(part-\d+)-.*?(\.[a-z0-9]+)?\.parquet$")


def _tidy(path: Path) -> list[str]:
    """Give Spark's output files fixed names; drop _SUCCESS and checksum files."""
    names = []
    for dirpath, _dirs, filenames in os.walk(path):
        for f in filenames:
            full = Path(dirpath) / f
            m = _SPARK_PART.match(f)
            if not m:
                full.unlink()
                continue
            fixed = full.with_name(f"{m.group(1)}{m.group(2) or ''}.parquet")
            full.rename(fixed)
            names.append(str(fixed.relative_to(path)))
    return sorted(names)


def generate(spark: SparkSession, kind: str, rows: int, files: int, path: Path) -> BaseTable:
    """Write the ``kind`` table of ``rows`` rows in ``files`` load slices under ``path``."""
    shutil.rmtree(path, ignore_errors=True)
    by_date = kind == "by_date"
    df = rows_frame(spark, 0, rows, rows, files, by_date)
    writer = df.write.format("parquet")
    if by_date:
        writer = writer.partitionBy(DATE_COLUMN)
    writer.save(str(path))
    names = _tidy(path)
    # Read back: every column nullable, as the catalog and every reader see the files.
    schema = spark.read.format("parquet").load(str(path)).schema
    size = sum((path / n).stat().st_size for n in names)
    return BaseTable(kind, path, rows, tuple(names), size, schema, (DATE_COLUMN,) if by_date else ())


def copy_table(base: BaseTable, to: Path) -> None:
    """A fresh copy of the base files (hard links: Parquet files are never changed in place,
    every system writes new files and unlinks old ones; a plain copy where links fail)."""
    shutil.rmtree(to, ignore_errors=True)
    for rel in base.files:
        dst = to / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(base.path / rel, dst)
        except OSError:
            shutil.copyfile(base.path / rel, dst)


def read_base(spark: SparkSession, base: BaseTable, files: list[str] | None = None) -> DataFrame:
    paths = [str(base.path / f) for f in (files if files is not None else base.files)]
    return spark.read.format("parquet").schema(base.schema).option("basePath", str(base.path)).load(paths)


def choose_files(base: BaseTable, fraction: float) -> list[str]:
    """``fraction`` of the files, chosen by a hash of their path (at least one file)."""
    ranked = sorted(base.files, key=lambda rel: hashlib.sha256(rel.encode()).hexdigest())
    count = len(ranked) if fraction >= 1.0 else max(1, round(fraction * len(ranked)))
    return sorted(ranked[:count])


def sample(df: DataFrame, fraction: float, salt: int) -> DataFrame:
    """Exactly the rows whose key hashes below ``fraction`` (repeatable, any partitioning)."""
    if fraction >= 1.0:
        return df
    bucket = F.pmod(F.xxhash64(*[F.col(k) for k in KEY], F.lit(salt)), F.lit(1_000_000))
    return df.where(bucket < F.lit(int(round(fraction * 1_000_000))))


def changed(df: DataFrame) -> DataFrame:
    """Matched rows as a change batch carries them: new amounts (never equal to the old ones).

    Delta's ``MergeDataLoad`` copies matched rows unchanged; an update that changes nothing
    cannot show a lost update in the result hash, and this engine skips it by default
    (``skip_unchanged_updates``), so every benchmark update changes its row.
    """
    return (
        df.withColumn("wr_return_amt", (F.coalesce(F.col("wr_return_amt"), F.lit(0)) + 1).cast(DEC))
        .withColumn("wr_net_loss", (F.coalesce(F.col("wr_net_loss"), F.lit(0)) + F.lit(0.5)).cast(DEC))
        .withColumn("wr_return_quantity", F.coalesce(F.col("wr_return_quantity"), F.lit(0)) + 1)
    )


def with_new_keys(df: DataFrame, salt: int) -> DataFrame:
    """Fresh random keys (as the grid's inserts): order numbers above every existing one."""
    h = F.xxhash64(*[F.col(k) for k in KEY], F.lit(salt))
    order = (F.lit(NEW_ORDER_BASE) + F.pmod(h, F.lit(2**40))).cast("bigint")
    item = (F.pmod(F.xxhash64(*[F.col(k) for k in KEY], F.lit(salt + 1)), F.lit(2**31 - 1))).cast("int")
    return df.withColumn("wr_order_number", order).withColumn("wr_item_sk", item)


# --- change batches --------------------------------------------------------------------------
# Each builder returns the source rows as a DataFrame with the table's columns (plus `op` for
# CDC batches); run.py writes it once as Parquet.

SourceBuilder = Callable[[SparkSession, BaseTable], DataFrame]


def grid_source(files_fraction: float, matched: float, not_matched: float) -> SourceBuilder:
    """Delta's MergeDataLoad: files by hash of path, then matches and inserts from their rows."""

    def build(spark: SparkSession, base: BaseTable) -> DataFrame:
        rows = read_base(spark, base, choose_files(base, files_fraction))
        parts = []
        if matched > 0:
            parts.append(changed(sample(rows, matched, salt=11)))
        if not_matched > 0:
            parts.append(with_new_keys(sample(rows, not_matched, salt=12), salt=13))
        out = parts[0]
        for p in parts[1:]:
            out = out.unionByName(p)
        return out

    return build


def new_rows(spark: SparkSession, base: BaseTable, count: int) -> DataFrame:
    """The next ``count`` rows after the table's last: new orders, as a load appends them."""
    by_date = base.kind == "by_date"
    return rows_frame(spark, base.rows, base.rows + count, base.rows, 1, by_date)


def recent_upsert_source(updated: float, among_newest: float, inserted: float) -> SourceBuilder:
    """``updated`` of the table's rows, all among the newest ``among_newest``, plus new rows."""

    def build(spark: SparkSession, base: BaseTable) -> DataFrame:
        n_upd = max(1, round(base.rows * updated))
        window = max(n_upd, round(base.rows * among_newest))
        start = base.rows - window
        step = max(1, window // n_upd)
        recent = rows_frame(spark, start, base.rows, base.rows, 1, base.kind == "by_date")
        picked = _every(recent, start, step, n_upd)
        out = changed(picked)
        if inserted > 0:
            out = out.unionByName(new_rows(spark, base, max(1, round(base.rows * inserted))))
        return out

    return build


def _every(df: DataFrame, start: int, step: int, limit: int) -> DataFrame:
    """Every ``step``-th row of ``df`` (rows ``start ..``), at most ``limit`` of them.

    Row numbers are recovered from the order number and item (row ``i`` has order
    ``floor(2i/5)+1`` and item ``(7919 i mod 18000) + 1``), so no helper column is needed.
    """
    i = _row_number()
    return df.where((F.pmod(i - F.lit(start), F.lit(step)) == 0) & (i < F.lit(start + step * limit)))


def _row_number() -> Column:
    """Row number of a base row, from its order number and item (see :func:`rows_frame`)."""
    first = F.ceil((F.col("wr_order_number") - 1) * 5 / 2).cast("bigint")  # first row of the order
    candidates = [first + k for k in range(3)]
    item = F.col("wr_item_sk")
    expr = F.lit(None).cast("bigint")
    for c in reversed(candidates):
        expr = F.when((F.pmod(c * 7919, F.lit(18_000)) + 1) == item, c).otherwise(expr)
    return expr


def scattered_source(every: int) -> SourceBuilder:
    """One row in ``every`` updated, spread evenly over the whole table (touches every file)."""

    def build(spark: SparkSession, base: BaseTable) -> DataFrame:
        return changed(read_base(spark, base).where(F.pmod(_row_number(), F.lit(every)) == 7 % every))

    return build


def insert_only_source(fraction: float) -> SourceBuilder:
    def build(spark: SparkSession, base: BaseTable) -> DataFrame:
        return new_rows(spark, base, max(1, round(base.rows * fraction)))

    return build


def small_upsert_source(updates: int, inserts: int, among_newest: int = 1000) -> SourceBuilder:
    """The hourly batch: ``updates`` changed rows among the newest ones plus ``inserts`` new rows."""

    def build(spark: SparkSession, base: BaseTable) -> DataFrame:
        window = min(base.rows, max(among_newest, updates))
        start = base.rows - window
        recent = rows_frame(spark, start, base.rows, base.rows, 1, base.kind == "by_date")
        return changed(_every(recent, start, max(1, window // updates), updates)).unionByName(
            new_rows(spark, base, inserts)
        )

    return build


def cdc_source(
    files_fraction: float, updated: float, deleted: float, inserted: float, missing_deletes: float
) -> SourceBuilder:
    """A CDC batch with an ``op`` column from the grid's files: U (changed rows), D (deleted
    rows), I (new keys), and D for keys the table never had (must not be inserted)."""

    def build(spark: SparkSession, base: BaseTable) -> DataFrame:
        rows = read_base(spark, base, choose_files(base, files_fraction))
        # Disjoint buckets of one hash: a key is updated or deleted, never both.
        bucket = F.pmod(F.xxhash64(*[F.col(k) for k in KEY], F.lit(21)), F.lit(1_000_000))
        cut_u = int(round(updated * 1_000_000))
        cut_d = cut_u + int(round(deleted * 1_000_000))
        upd = changed(rows.where(bucket < cut_u)).withColumn("op", F.lit("U"))
        dele = rows.where((bucket >= cut_u) & (bucket < cut_d)).withColumn("op", F.lit("D"))
        ins = with_new_keys(sample(rows, inserted, salt=22), salt=23).withColumn("op", F.lit("I"))
        ghost = with_new_keys(sample(rows, missing_deletes, salt=24), salt=25).withColumn("op", F.lit("D"))
        return upd.unionByName(dele).unionByName(ins).unionByName(ghost)

    return build


def mirror_window_start(base: BaseTable, window: float) -> int:
    """The first order number of the newest ``window`` of the table (the mirrored slice)."""
    return order_number_of(base.rows - max(1, round(base.rows * window)))


def mirror_source(window: float, updated: float, dropped: float, inserted: float) -> SourceBuilder:
    """A full snapshot of the newest ``window`` of orders, as an upstream system has them now:
    ``updated`` of its rows changed, ``dropped`` gone (to delete), plus new orders."""

    def build(spark: SparkSession, base: BaseTable) -> DataFrame:
        first = mirror_window_start(base, window)
        rows = read_base(spark, base).where(F.col("wr_order_number") >= first)
        bucket = F.pmod(F.xxhash64(*[F.col(k) for k in KEY], F.lit(31)), F.lit(1_000_000))
        cut_u = int(round(updated * 1_000_000))
        cut_d = cut_u + int(round(dropped * 1_000_000))
        kept = changed(rows.where(bucket < cut_u)).unionByName(rows.where(bucket >= cut_d))
        return kept.unionByName(new_rows(spark, base, max(1, round(base.rows * inserted))))

    return build


def partitioned_cdc_source(
    days: int, updated_one_in: int, deleted_one_in: int, inserted: float
) -> SourceBuilder:
    """by_date table: in the last ``days`` days, one row in ``updated_one_in`` changed (op U),
    one in ``deleted_one_in`` deleted (op D); new rows on the last day (op I)."""

    def build(spark: SparkSession, base: BaseTable) -> DataFrame:
        last = F.date_add(F.lit(FIRST_DATE).cast("date"), DAYS - days)
        recent = read_base(spark, base).where(F.col(DATE_COLUMN) >= last)
        i = _row_number()
        upd = changed(recent.where(F.pmod(i, F.lit(updated_one_in)) == 0)).withColumn("op", F.lit("U"))
        dele = recent.where(F.pmod(i, F.lit(updated_one_in)) != 0).where(
            F.pmod(i, F.lit(deleted_one_in)) == 1
        )
        new = new_rows(spark, base, max(1, round(base.rows * inserted))).withColumn("op", F.lit("I"))
        return upd.unionByName(dele.withColumn("op", F.lit("D"))).unionByName(new)

    return build


def write_source(spark: SparkSession, build: SourceBuilder, base: BaseTable, path: Path) -> int:
    """Write the change batch once as Parquet (every system reads these files); its row count."""
    shutil.rmtree(path, ignore_errors=True)
    build(spark, base).write.format("parquet").save(str(path))
    return spark.read.format("parquet").load(str(path)).count()
