"""Which columns a rewrite writes without a dictionary, from the footers of the files it
replaces (encodings.py; no Spark needed). The footers here are pyarrow's; the tests that read
them as parquet-mr's decisions say so (``as_parquet_mr``), and Spark's own are in
tests/engine/test_encodings.py."""

from __future__ import annotations

import io
import os

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql.types import LongType, StringType, StructField

from dbt.adapters.rowmerge.merge import encodings
from dbt.adapters.rowmerge.merge.encodings import insert_options, options_like, without_dictionary
from dbt.adapters.rowmerge.merge.storage import read_parquet_tail


def _tail(table: pa.Table, dictionary: list[str] | bool, row_group_size: int | None = None) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, use_dictionary=dictionary, row_group_size=row_group_size)
    data = buf.getvalue()
    return read_parquet_tail(len(data), lambda pos, n: data[pos : pos + n])


def _fields(*names: str) -> list[StructField]:
    return [StructField(n, LongType() if n.lower() != "s" else StringType()) for n in names]


ROWS = pa.table({"a": [1, 2, 3, 4], "b": [5, 6, 7, 8], "s": ["x", "y", "x", "y"]})


@pytest.fixture
def as_parquet_mr(monkeypatch):
    """pyarrow's footers read as parquet-mr's, with a first page of 2 rows."""
    monkeypatch.setattr(encodings, "WRITERS", ("parquet-cpp-arrow",))
    monkeypatch.setattr(encodings, "FIRST_PAGE_ROWS", 2)


def test_the_columns_the_writer_gave_up_in_every_footer(as_parquet_mr):
    footers = [_tail(ROWS, ["a"]), _tail(ROWS, ["b"])]
    assert without_dictionary(footers, _fields("a", "b", "s")) == ["s"]
    assert without_dictionary([_tail(ROWS, ["a"])], _fields("a", "b", "s")) == ["b", "s"]
    assert without_dictionary([_tail(ROWS, True)], _fields("a", "b", "s")) == []
    assert without_dictionary([_tail(ROWS, False)], _fields("a", "b", "s")) == ["a", "b", "s"]


def test_a_dictionary_in_any_row_group_keeps_the_column_trying_one(as_parquet_mr):
    tail = _tail(ROWS, ["a"], row_group_size=2)
    assert pq.read_metadata(pa.BufferReader(b"PAR1" + tail)).num_row_groups == 2
    assert without_dictionary([tail], _fields("a", "b")) == ["b"]


def test_only_a_whole_first_page_of_parquet_mr_decides(monkeypatch):
    plain = _tail(ROWS, False)
    # another writer's footer says nothing (pyarrow's, unpatched)
    assert without_dictionary([plain], _fields("a", "b")) == []
    monkeypatch.setattr(encodings, "WRITERS", ("parquet-cpp-arrow",))
    monkeypatch.setattr(encodings, "FIRST_PAGE_ROWS", 5)
    # 4 rows: less than a first page, its dictionary given up for its few rows
    assert without_dictionary([plain], _fields("a", "b")) == []
    big = pa.table({"a": list(range(10)), "b": list(range(10))})
    assert without_dictionary([plain, _tail(big, False)], _fields("a", "b")) == ["a", "b"]
    # a whole page in one file, a dictionary in a small one: trying
    assert without_dictionary([_tail(ROWS, ["a"]), _tail(big, False)], _fields("a", "b")) == ["b"]


def test_duckdb_files_say_nothing(tmp_path):
    # DuckDB gives a dictionary up by its own rule (some 50,000 distinct values a row group)
    path = os.path.join(tmp_path, "d.parquet")
    duckdb.sql(f"COPY (SELECT range AS a, range % 3 AS b FROM range(30000)) TO '{path}' (FORMAT parquet)")
    data = open(path, "rb").read()
    tail = read_parquet_tail(len(data), lambda pos, n: data[pos : pos + n])
    assert without_dictionary([tail], _fields("a", "b")) == []


def test_names_are_the_writes_own_and_matched_without_case(as_parquet_mr):
    # a file written by another engine with lower-case names; the write spells them its way
    assert without_dictionary([_tail(ROWS, ["s"])], _fields("A", "B", "S")) == ["A", "B"]


def test_a_column_some_file_lacks_is_left_alone(as_parquet_mr):
    # schema evolution: the column is new to the old file
    old = pa.table({"a": [1, 2]})
    assert without_dictionary([_tail(ROWS, False), _tail(old, False)], _fields("a", "b")) == ["a"]
    assert without_dictionary([_tail(ROWS, False)], _fields("a", "z")) == ["a"]


def test_nested_and_dotted_columns_are_left_alone(as_parquet_mr):
    nested = pa.table({"a": [1, 2], "n": [{"x": 1}, {"x": 2}], "d.e": [3, 4]})
    fields = [*_fields("a"), StructField("n", LongType()), StructField("d.e", LongType())]
    assert without_dictionary([_tail(nested, False)], fields) == ["a"]


def test_only_values_fill_a_first_page(as_parquet_mr):
    # a column added since: NULL in the old rows; too few values to decide anything
    sparse = pa.table({"a": [1, 2, 3, 4], "n": pa.array([None, None, None, 5], pa.int64())})
    assert without_dictionary([_tail(sparse, False)], _fields("a", "n")) == ["a"]
    filled = pa.table({"a": [1, 2, 3, 4], "n": pa.array([None, None, 6, 5], pa.int64())})
    assert without_dictionary([_tail(filled, False)], _fields("a", "n")) == ["a", "n"]


def test_an_empty_file_says_nothing(as_parquet_mr):
    empty = pa.table({"a": pa.array([], pa.int64())})
    assert without_dictionary([_tail(empty, True), _tail(ROWS, False)], _fields("a")) == ["a"]
    assert without_dictionary([_tail(empty, False)], _fields("a")) == []
    assert without_dictionary([], _fields("a")) == []


class _Tails:
    """A storage that holds the tails of named files (or fails to read them)."""

    def __init__(self, tails: dict[str, bytes] | None) -> None:
        self.tails = tails
        self.read: list[str] = []

    def qualify(self, path: str) -> str:
        return path

    def parquet_tail(self, path: str, size: int) -> bytes:
        self.read.append(path)
        if self.tails is None:
            raise ValueError("no Parquet magic at the end of the file")
        return self.tails[path]

    def parquet_tails(self, sizes):
        return {p: self.parquet_tail(p, sizes[p]) for p in sizes}


def test_the_options_name_each_column_and_come_only_for_parquet(as_parquet_mr):
    storage = _Tails({"f1": _tail(ROWS, ["a"]), "f2": _tail(ROWS, ["a"])})
    fields = _fields("a", "b", "s")
    options = options_like(storage, {"f1": 10, "f2": 10}, "parquet", fields)  # type: ignore[arg-type]
    assert options == {"parquet.enable.dictionary#b": "false", "parquet.enable.dictionary#s": "false"}
    assert options_like(storage, {"f1": 10}, "orc", fields) == {}  # type: ignore[arg-type]
    assert options_like(storage, {}, "parquet", fields) == {}  # type: ignore[arg-type]
    # a footer that cannot be read: Parquet's default, never a failed write
    assert options_like(_Tails(None), {"f1": 10}, "parquet", fields) == {}  # type: ignore[arg-type]


def test_tails_read_already_are_not_read_again(as_parquet_mr):
    storage = _Tails({"f1": _tail(ROWS, ["a"]), "f2": _tail(ROWS, True)})
    fields = _fields("a", "b", "s")
    tails = {"f1": storage.tails["f1"]}  # type: ignore[index]
    # only the files asked about count, from the tails given
    assert options_like(storage, {"f1": 10}, "parquet", fields, tails) == {  # type: ignore[arg-type]
        "parquet.enable.dictionary#b": "false",
        "parquet.enable.dictionary#s": "false",
    }
    assert storage.read == []
    # a file whose tail was not kept (pyarrow could not read it): no evidence, no options
    assert options_like(storage, {"f1": 10, "f2": 10}, "parquet", fields, tails) == {}  # type: ignore[arg-type]


def test_an_insert_follows_the_tables_largest_file_while_it_holds_no_more(as_parquet_mr):
    big = pa.table({"a": list(range(6)), "b": list(range(6)), "s": ["x"] * 6})
    storage = _Tails({"small": _tail(ROWS, False), "large": _tail(big, ["s"])})
    files = {"small": 100, "large": 300}
    fields = _fields("a", "b", "s")
    plain = {"parquet.enable.dictionary#a": "false", "parquet.enable.dictionary#b": "false"}
    # the largest file's decisions, one footer read; by rows counted, or the source's estimate
    assert insert_options(storage, files, "parquet", fields, rows=6) == plain  # type: ignore[arg-type]
    assert storage.read == ["large"]
    assert insert_options(storage, files, "parquet", fields, source_bytes=300) == plain  # type: ignore[arg-type]
    # rows, where known, decide; the bytes are only what is known without them
    assert insert_options(storage, files, "parquet", fields, rows=6, source_bytes=10**9) == plain  # type: ignore[arg-type]
    assert insert_options(storage, files, "parquet", fields, rows=7, source_bytes=1) == {}  # type: ignore[arg-type]
    # more rows or bytes than it holds, or a size not known: Parquet's default
    assert insert_options(storage, files, "parquet", fields, rows=7) == {}  # type: ignore[arg-type]
    assert insert_options(storage, files, "parquet", fields, source_bytes=301) == {}  # type: ignore[arg-type]
    assert insert_options(storage, files, "parquet", fields, source_bytes=-1) == {}  # type: ignore[arg-type]
    assert insert_options(storage, files, "parquet", fields) == {}  # type: ignore[arg-type]
    # ORC, an empty table, an unreadable footer: Parquet's default, never a failed write
    assert insert_options(storage, files, "orc", fields, rows=1) == {}  # type: ignore[arg-type]
    assert insert_options(storage, {}, "parquet", fields, rows=1) == {}  # type: ignore[arg-type]
    assert insert_options(_Tails(None), files, "parquet", fields, rows=1) == {}  # type: ignore[arg-type]
