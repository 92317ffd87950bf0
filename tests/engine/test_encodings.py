"""A merge's rewrite writes Parquet's columns without a dictionary where Spark's writer gave it
up in every file it replaces, and only there (encodings.py): beside its inserts, in its change
feed; not for tiny files, inserts that outnumber the rewritten rows, or compaction. A write that
replaces no file follows the table's largest file while it inserts no more than that holds."""

from __future__ import annotations

import os

import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F

from dbt.adapters.rowmerge.merge import optimize
from tests.engine.helpers import UPSERT, file_snapshot, merge, new_files, rows, source_view, table_dir

SCHEMA = "id long, few string, cat string, many long"
ROWS = 25_000  # more than a first page of Spark's writer (20,000 rows): its decision counts
INSERT = [{"when": "not_matched", "action": "insert", "values": "*"}]


def _frame(spark, first: int, n: int):
    """Rows ``first``..: ``few`` and ``cat`` have three and five values (Spark's writer keeps
    them in a dictionary), ``id`` and ``many`` one per row (it gives the dictionary up)."""
    i = F.col("id")
    return spark.range(first, first + n).select(
        i,
        F.concat(F.lit("k"), (i % 3).cast("string")).alias("few"),
        F.concat(F.lit("c"), (i % 5).cast("string")).alias("cat"),
        (i * 7919).alias("many"),
    )


def _table(spark, db: str, plain: list[list[str]], rows_per_file: int = ROWS) -> str:
    """A table of one Spark-written file per entry of ``plain`` (columns written without a
    dictionary, as if the writer had given it up), ids in consecutive ranges."""
    t = f"{db}.enc"
    spark.sql(f"CREATE TABLE {t} ({SCHEMA}) USING parquet")
    folder = table_dir(spark, t)
    for i, columns in enumerate(plain):
        writer = _frame(spark, i * rows_per_file, rows_per_file).coalesce(1).write.mode("append")
        writer.options(**{f"parquet.enable.dictionary#{c}": "false" for c in columns}).parquet(folder)
    spark.catalog.refreshTable(t)
    return t


def _expected(n: int, changed: dict[int, tuple[str, str, int]] | None = None) -> list[tuple]:
    changed = changed or {}
    return sorted((i, *changed.get(i, (f"k{i % 3}", f"c{i % 5}", i * 7919))) for i in range(n))


def _expected_range(first: int, n: int) -> list[tuple]:
    return [(i, f"k{i % 3}", f"c{i % 5}", i * 7919) for i in range(first, first + n)]


def _dictionary_columns(path: str) -> set[str]:
    """The columns of a Parquet file that some row group stores with a dictionary page."""
    meta = pq.ParquetFile(path).metadata
    return {
        meta.schema.column(c).name
        for c in range(meta.num_columns)
        for g in range(meta.num_row_groups)
        if meta.row_group(g).column(c).has_dictionary_page
    }


def test_a_rewrite_writes_plain_what_the_writer_gave_up_in_the_replaced_file(spark, db):
    # few: plain in the files, though Spark's writer left alone keeps its 3 values in a dictionary
    t = _table(spark, db, [["few"], ["few"]])
    before = file_snapshot(spark, t)
    src = source_view(spark, f"{db}_src", SCHEMA, [(5, "new", "c9", 1), (6, "k0", "c0", 2)])
    result = merge(spark, t, src, UPSERT)
    assert rows(spark, t) == _expected(2 * ROWS, {5: ("new", "c9", 1), 6: ("k0", "c0", 2)})
    assert result.metrics["numTargetFilesRemoved"] == 1
    (added,) = new_files(before, file_snapshot(spark, t))
    assert _dictionary_columns(added) == {"cat"}


def test_inserts_beside_a_rewrite_are_written_like_it_unless_they_outnumber_its_rows(spark, db):
    t = _table(spark, db, [["few"], ["few"]])
    before = file_snapshot(spark, t)
    # one update in the first file and new keys past every file: one file rewritten, inserts
    new = [(i, "k1", f"c{i % 5}", i) for i in range(90_000, 90_100)]
    src = source_view(spark, f"{db}_src", SCHEMA, [(5, "k2", "c1", 1), *new])
    merge(spark, t, src, UPSERT)
    assert rows(spark, t) == sorted(_expected(2 * ROWS, {5: ("k2", "c1", 1)}) + new)
    added = new_files(before, file_snapshot(spark, t))
    assert added and all(_dictionary_columns(p) == {"cat"} for p in added)
    # more inserts than rewritten rows: new rows, not the replaced file's kind; Parquet's default
    before = file_snapshot(spark, t)
    _frame(spark, 100_000, ROWS + 1000).createOrReplaceTempView(f"{db}_many")
    src = source_view(spark, f"{db}_src2", SCHEMA, [(7, "k2", "c1", 1)])
    spark.table(src).unionByName(spark.table(f"{db}_many")).createOrReplaceTempView(f"{db}_src3")
    merge(spark, t, f"{db}_src3", UPSERT)
    added = new_files(before, file_snapshot(spark, t))
    assert added and all("few" in _dictionary_columns(p) for p in added)


@pytest.mark.parametrize(("inserted", "dictionaries"), [(100, {"cat"}), (ROWS + 1000, {"few", "cat"})])
def test_an_insert_follows_the_tables_largest_file_while_it_holds_no_more_rows(
    spark, db, inserted: int, dictionaries: set[str]
):
    # few: plain in the larger file (as if the writer had given it up), a dictionary in the other
    t = _table(spark, db, [["few"]])
    _frame(spark, ROWS, 1000).coalesce(1).write.mode("append").parquet(table_dir(spark, t))
    spark.catalog.refreshTable(t)
    before = file_snapshot(spark, t)
    # new keys past every file: an upsert that inserts only, the usual path (it writes the
    # source's rows after counting them)
    _frame(spark, 100_000, inserted).createOrReplaceTempView(f"{db}_src")
    result = merge(spark, t, f"{db}_src", UPSERT)
    assert result.metrics["directInsert"] == 0
    assert result.metrics["numTargetRowsInserted"] == inserted
    assert rows(spark, t) == sorted(_expected(ROWS + 1000) + _expected_range(100_000, inserted))
    added = new_files(before, file_snapshot(spark, t))
    assert added and all(_dictionary_columns(p) == dictionaries for p in added)


def test_a_direct_insert_follows_the_largest_file_while_the_source_is_no_larger(spark, db):
    t = _table(spark, db, [["few"]])
    largest = max(file_snapshot(spark, t).values())[0]
    # a small source (its estimate is below the file's bytes), written as it is read
    before = file_snapshot(spark, t)
    _frame(spark, 100_000, 100).createOrReplaceTempView(f"{db}_small")
    result = merge(spark, t, f"{db}_small", INSERT)
    assert result.metrics["directInsert"] == 1
    (inserted,) = new_files(before, file_snapshot(spark, t))
    assert _dictionary_columns(inserted) == {"cat"}
    # a source Spark estimates larger than the file: Parquet's default
    big = _frame(spark, 200_000, 3 * ROWS)
    assert int(str(big._jdf.queryExecution().optimizedPlan().stats().sizeInBytes())) > largest
    big.createOrReplaceTempView(f"{db}_big")
    before = file_snapshot(spark, t)
    result = merge(spark, t, f"{db}_big", INSERT)
    assert result.metrics["directInsert"] == 1
    added = new_files(before, file_snapshot(spark, t))
    assert added and all(_dictionary_columns(p) == {"few", "cat"} for p in added)
    assert rows(spark, t) == sorted(
        _expected(ROWS) + _expected_range(100_000, 100) + _expected_range(200_000, 3 * ROWS)
    )


def test_a_column_some_replaced_file_keeps_in_a_dictionary_keeps_trying_one(spark, db):
    # few: plain in the first file, in a dictionary in the second; a merge that rewrites both
    # (a key in each) lets Spark's writer choose for few (its 3 values: a dictionary)
    t = _table(spark, db, [["few"], []])
    before = file_snapshot(spark, t)
    src = source_view(spark, f"{db}_src", SCHEMA, [(5, "k1", "c1", 1), (ROWS + 5, "k2", "c2", 2)])
    result = merge(spark, t, src, UPSERT)
    assert rows(spark, t) == _expected(2 * ROWS, {5: ("k1", "c1", 1), ROWS + 5: ("k2", "c2", 2)})
    assert result.metrics["numTargetFilesRemoved"] == 2
    added = new_files(before, file_snapshot(spark, t))
    assert added and all(_dictionary_columns(p) == {"few", "cat"} for p in added)


def test_a_small_file_says_nothing_of_what_the_writer_would_give_up(spark, db):
    # below a first page a file's dictionary is given up for its few rows, not its values
    t = _table(spark, db, [["few"], ["few"]], rows_per_file=1000)
    before = file_snapshot(spark, t)
    src = source_view(spark, f"{db}_src", SCHEMA, [(5, "k1", "c1", 1)])
    merge(spark, t, src, UPSERT)
    assert rows(spark, t) == _expected(2000, {5: ("k1", "c1", 1)})
    (added,) = new_files(before, file_snapshot(spark, t))
    assert _dictionary_columns(added) == {"few", "cat"}


def test_compaction_leaves_the_writer_to_choose(spark, db):
    t = _table(spark, db, [["few"]] * 3)
    before = file_snapshot(spark, t)
    result = optimize(spark, t)
    assert (result.files_removed, result.files_added) == (3, 1)
    assert rows(spark, t) == _expected(3 * ROWS)
    (compacted,) = new_files(before, file_snapshot(spark, t))
    assert _dictionary_columns(compacted) == {"few", "cat"}


def test_the_change_feed_is_written_like_the_rewrite(spark, db):
    t = _table(spark, db, [["few"], ["few"]])
    # every row of the first file updated: its change rows fill whole first pages
    updates = _frame(spark, 0, ROWS).withColumn("many", F.col("many") + 1)
    updates.createOrReplaceTempView(f"{db}_src")
    result = merge(spark, t, f"{db}_src", UPSERT, change_data_feed={"table": f"{t}__changes"})
    assert result.metrics["numTargetRowsUpdated"] == ROWS
    kinds = spark.table(f"{t}__changes").groupBy("_change_type").count().collect()
    assert sorted(map(tuple, kinds)) == [("update_postimage", ROWS), ("update_preimage", ROWS)]
    folder = os.path.join(table_dir(spark, f"{t}__changes"), "_commit_version=1")
    feed = [os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".parquet")]
    assert feed and all(_dictionary_columns(p) == {"cat", "_change_type", "_commit_timestamp"} for p in feed)
