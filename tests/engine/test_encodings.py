"""Rewrites write Parquet's columns with a dictionary only where the files they replace had one
(encodings.py): the merge's rewrite, its inserts beside it, and compaction."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq

from dbt.adapters.rowmerge.merge import optimize
from tests.engine.helpers import UPSERT, file_snapshot, merge, new_files, rows, source_view, table_dir

SCHEMA = "id long, few string, cat string, many long"


def _file(folder: str, name: str, ids: range, dictionary: list[str]) -> None:
    """A Parquet file of ``ids`` written with a dictionary for the ``dictionary`` columns only.
    ``few`` and ``cat`` have three and five values (Spark's writer, left alone, keeps them in a
    dictionary), ``id`` and ``many`` one per row (it gives the dictionary up)."""
    table = pa.table(
        {
            "id": pa.array(list(ids), pa.int64()),
            "few": pa.array([f"k{i % 3}" for i in ids], pa.string()),
            "cat": pa.array([f"c{i % 5}" for i in ids], pa.string()),
            "many": pa.array([i * 7919 for i in ids], pa.int64()),
        }
    )
    pq.write_table(table, os.path.join(folder, name), use_dictionary=dictionary)


def _table(spark, db: str, dictionaries: list[list[str]], rows_per_file: int = 1000) -> str:
    """A table of one file per entry of ``dictionaries`` (the columns it keeps in a dictionary),
    ids in consecutive ranges."""
    t = f"{db}.enc"
    spark.sql(f"CREATE TABLE {t} ({SCHEMA}) USING parquet")
    folder = table_dir(spark, t)
    for i, dictionary in enumerate(dictionaries):
        ids = range(i * rows_per_file, (i + 1) * rows_per_file)
        _file(folder, f"part-{i:05d}-given.parquet", ids, dictionary)
    spark.catalog.refreshTable(t)
    return t


def _dictionary_columns(path: str) -> set[str]:
    """The columns of a Parquet file that some row group stores with a dictionary page."""
    meta = pq.ParquetFile(path).metadata
    return {
        meta.schema.column(c).name
        for c in range(meta.num_columns)
        for g in range(meta.num_row_groups)
        if meta.row_group(g).column(c).has_dictionary_page
    }


def _expected(n: int, changed: dict[int, tuple[str, str, int]]) -> list[tuple]:
    return sorted((i, *changed.get(i, (f"k{i % 3}", f"c{i % 5}", i * 7919))) for i in range(n))


def test_a_rewrite_writes_plain_the_columns_the_replaced_file_wrote_plain(spark, db):
    # few: plain in the files, though Spark's writer left alone keeps its 3 values in a dictionary
    t = _table(spark, db, [["cat"], ["cat"]])
    before = file_snapshot(spark, t)
    src = source_view(spark, f"{db}_src", SCHEMA, [(5, "new", "c9", 1), (6, "k0", "c0", 2)])
    result = merge(spark, t, src, UPSERT)
    assert rows(spark, t) == _expected(2000, {5: ("new", "c9", 1), 6: ("k0", "c0", 2)})
    assert result.metrics["numTargetFilesRemoved"] == 1
    added = new_files(before, file_snapshot(spark, t))
    assert len(added) == 1
    assert _dictionary_columns(added[0]) == {"cat"}


def test_inserts_beside_a_rewrite_are_written_like_it_and_alone_as_parquet_chooses(spark, db):
    t = _table(spark, db, [["cat"], ["cat"]])
    before = file_snapshot(spark, t)
    # one update in the first file and new keys past every file: one file rewritten, inserts
    new = [(i, "k1", f"c{i % 5}", i) for i in range(5000, 5100)]
    src = source_view(spark, f"{db}_src", SCHEMA, [(5, "k2", "c1", 1), *new])
    merge(spark, t, src, UPSERT)
    assert rows(spark, t) == sorted(_expected(2000, {5: ("k2", "c1", 1)}) + new)
    added = new_files(before, file_snapshot(spark, t))
    assert added and all(_dictionary_columns(p) == {"cat"} for p in added)
    # an insert-only merge replaces no file: Parquet's default (a dictionary for few and cat)
    before = file_snapshot(spark, t)
    more = [(i, "k0", f"c{i % 5}", i) for i in range(9000, 9050)]
    src = source_view(spark, f"{db}_src2", SCHEMA, more)
    merge(spark, t, src, [{"when": "not_matched", "action": "insert", "values": "*"}])
    (inserted,) = new_files(before, file_snapshot(spark, t))
    assert _dictionary_columns(inserted) == {"few", "cat"}


def test_a_column_some_replaced_file_keeps_in_a_dictionary_keeps_trying_one(spark, db):
    # few: plain in the first file, in a dictionary in the second; a merge that rewrites both
    # (a key in each) lets Spark's writer choose for few (its 3 values: a dictionary)
    t = _table(spark, db, [["cat"], ["few", "cat"]])
    before = file_snapshot(spark, t)
    src = source_view(spark, f"{db}_src", SCHEMA, [(5, "k1", "c1", 1), (1500, "k2", "c2", 2)])
    result = merge(spark, t, src, UPSERT)
    assert rows(spark, t) == _expected(2000, {5: ("k1", "c1", 1), 1500: ("k2", "c2", 2)})
    assert result.metrics["numTargetFilesRemoved"] == 2
    added = new_files(before, file_snapshot(spark, t))
    assert added and all(_dictionary_columns(p) == {"few", "cat"} for p in added)


def test_compaction_writes_plain_the_columns_every_small_file_wrote_plain(spark, db):
    t = _table(spark, db, [["cat"]] * 4, rows_per_file=200)
    before = file_snapshot(spark, t)
    result = optimize(spark, t)
    assert (result.files_removed, result.files_added) == (4, 1)
    assert rows(spark, t) == _expected(800, {})
    (compacted,) = new_files(before, file_snapshot(spark, t))
    assert _dictionary_columns(compacted) == {"cat"}
