"""Which columns a rewrite writes without a dictionary, from the footers of the files it
replaces (encodings.py; no Spark needed)."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql.types import LongType, StringType, StructField

from dbt.adapters.rowmerge.merge.encodings import without_dictionary
from dbt.adapters.rowmerge.merge.storage import read_parquet_tail


def _tail(table: pa.Table, dictionary: list[str] | bool, row_group_size: int | None = None) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, use_dictionary=dictionary, row_group_size=row_group_size)
    data = buf.getvalue()
    return read_parquet_tail(len(data), lambda pos, n: data[pos : pos + n])


def _fields(*names: str) -> list[StructField]:
    return [StructField(n, LongType() if n.lower() != "s" else StringType()) for n in names]


ROWS = pa.table({"a": [1, 2, 3, 4], "b": [5, 6, 7, 8], "s": ["x", "y", "x", "y"]})


def test_the_columns_no_footer_keeps_in_a_dictionary():
    footers = [_tail(ROWS, ["a"]), _tail(ROWS, ["b"])]
    assert without_dictionary(footers, _fields("a", "b", "s")) == ["s"]
    assert without_dictionary([_tail(ROWS, ["a"])], _fields("a", "b", "s")) == ["b", "s"]
    assert without_dictionary([_tail(ROWS, True)], _fields("a", "b", "s")) == []
    assert without_dictionary([_tail(ROWS, False)], _fields("a", "b", "s")) == ["a", "b", "s"]


def test_a_dictionary_in_any_row_group_keeps_the_column_trying_one():
    # pyarrow writes a dictionary per row group; a file with one is as good as a file of them
    tail = _tail(ROWS, ["a"], row_group_size=2)
    assert pq.read_metadata(pa.BufferReader(b"PAR1" + tail)).num_row_groups == 2
    assert without_dictionary([tail], _fields("a", "b")) == ["b"]


def test_names_are_the_writes_own_and_matched_without_case():
    # a file written by another engine with lower-case names; the write spells them its way
    assert without_dictionary([_tail(ROWS, ["s"])], _fields("A", "B", "S")) == ["A", "B"]


def test_a_column_some_file_lacks_is_left_alone():
    # schema evolution: the column is new to the old file
    old = pa.table({"a": [1, 2]})
    assert without_dictionary([_tail(ROWS, False), _tail(old, False)], _fields("a", "b")) == ["a"]
    assert without_dictionary([_tail(ROWS, False)], _fields("a", "z")) == ["a"]


def test_nested_and_dotted_columns_are_left_alone():
    nested = pa.table({"a": [1, 2], "n": [{"x": 1}, {"x": 2}], "d.e": [3, 4]})
    fields = [*_fields("a"), StructField("n", LongType()), StructField("d.e", LongType())]
    assert without_dictionary([_tail(nested, False)], fields) == ["a"]


def test_an_empty_file_says_nothing():
    empty = pa.table({"a": pa.array([], pa.int64())})
    assert without_dictionary([_tail(empty, True), _tail(ROWS, False)], _fields("a")) == ["a"]
    assert without_dictionary([_tail(empty, False)], _fields("a")) == []
    assert without_dictionary([], _fields("a")) == []
