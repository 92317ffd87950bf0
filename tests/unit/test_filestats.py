"""Footer statistics: what is read from a footer, how files are laid out for the per-row
search, and that anything doubtful means "read the file" (no Spark needed)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql.types import (
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from dbt.adapters.rowmerge.merge.filestats import (
    MAX_LAYERS,
    ColumnRange,
    FileSummary,
    candidates,
    indexed_columns,
    key_ranges,
    parse_summary,
    summarize_footer,
)
from dbt.adapters.rowmerge.merge.storage import read_parquet_tail

FIELDS = [
    StructField("id", LongType()),
    StructField("name", StringType()),
    StructField("day", DateType()),
    StructField("amount", DecimalType(10, 2)),
    StructField("score", DoubleType()),
    StructField("flag", BooleanType()),
    StructField("ts", TimestampType()),
    StructField("nested", StructType([StructField("id", LongType())])),
]


def footer_of(path: Path) -> bytes:
    data = path.read_bytes()
    return read_parquet_tail(len(data), lambda pos, n: data[pos : pos + n])


def write(path: Path, table: pa.Table, **kwargs) -> bytes:
    pq.write_table(table, path, **kwargs)
    return footer_of(path)


def sample_table() -> pa.Table:
    return pa.table(
        {
            "id": pa.array([5, 3, None, 9], pa.int64()),
            "Name": ["m", "b", None, "é"],  # upper case in the file: Spark matches names case-insensitively
            "day": [dt.date(2024, 1, 2), dt.date(2023, 12, 31), None, dt.date(2024, 3, 1)],
            "amount": pa.array(
                [Decimal("1.50"), Decimal("-2.00"), None, Decimal("10.25")], pa.decimal128(10, 2)
            ),
            "score": [1.0, 2.0, 3.0, 4.0],
            "flag": [True, False, True, False],
            "ts": pa.array([dt.datetime(2024, 1, 1)] * 4, pa.timestamp("us")),
            "nested": [{"id": 1}, {"id": 2}, {"id": 3}, {"id": 4}],
        }
    )


def test_footer_gives_rows_and_exact_ranges_of_indexable_columns(tmp_path: Path) -> None:
    footer = write(tmp_path / "a.parquet", sample_table(), row_group_size=2)
    s = summarize_footer(footer, FIELDS)
    assert s.rows == 4
    assert s.columns == {
        "id": ColumnRange(3, 9, 1),
        "name": ColumnRange("b", "é", 1),
        "day": ColumnRange(dt.date(2023, 12, 31), dt.date(2024, 3, 1), 1),
        "amount": ColumnRange(Decimal("-2.00"), Decimal("10.25"), 1),
    }  # no ranges for double, boolean, timestamp or nested columns


def test_a_row_group_of_only_nulls_does_not_widen_or_void_the_range(tmp_path: Path) -> None:
    table = pa.table({"id": pa.array([None, None, 7, 8], pa.int64())})
    s = summarize_footer(write(tmp_path / "n.parquet", table, row_group_size=2), FIELDS[:1])
    assert s.columns == {"id": ColumnRange(7, 8, 2)}


def test_a_file_without_statistics_gets_no_range(tmp_path: Path) -> None:
    footer = write(tmp_path / "s.parquet", sample_table(), write_statistics=False)
    s = summarize_footer(footer, FIELDS)
    assert (s.rows, s.columns) == (4, {})


def test_a_column_of_only_nulls_gets_no_range(tmp_path: Path) -> None:
    table = pa.table({"id": pa.array([None, None], pa.int64())})
    assert summarize_footer(write(tmp_path / "z.parquet", table), FIELDS[:1]).columns == {}


def test_tail_rejects_what_is_not_parquet() -> None:
    data = b"x" * 100
    with pytest.raises(ValueError, match="magic"):
        read_parquet_tail(len(data), lambda pos, n: data[pos : pos + n])
    with pytest.raises(ValueError, match="at least 12 bytes"):
        read_parquet_tail(4, lambda pos, n: b"PAR1")


def test_summary_round_trips_through_json_and_ignores_what_it_cannot_read(tmp_path: Path) -> None:
    s = summarize_footer(write(tmp_path / "a.parquet", sample_table()), FIELDS)
    assert parse_summary(s.rows, s.to_json(), FIELDS) == s
    raw = s.to_json()
    raw["id"] = {"min": "3", "max": 9, "nulls": 1}  # a string for a long column
    raw["day"] = {"min": "2024-13-01", "max": "2024-01-01"}  # not a date
    raw["name"] = {"min": "z", "max": "a"}  # min above max
    assert set(parse_summary(s.rows, raw, FIELDS).columns) == {"amount"}
    assert parse_summary(None, raw, FIELDS) is None
    assert parse_summary(4, {"id": {"min": [2], "max": {"x": 3}}}, FIELDS).columns == {}
    assert parse_summary(4, ["not", "a", "mapping"], FIELDS) is None


def test_indexed_columns_are_data_columns_of_exact_types() -> None:
    fields = [*FIELDS, StructField("p", IntegerType())]
    assert [f.name for f in indexed_columns(fields, ["P"])] == ["id", "name", "day", "amount"]
    char = StructField("code", StringType(), metadata={"__CHAR_VARCHAR_TYPE_STRING": "char(3)"})
    assert indexed_columns([char], []) == []


def summary(low: int, high: int) -> FileSummary:
    return FileSummary(10, {"id": ColumnRange(low, high, 0)})


def test_clustered_files_fit_one_layer_and_overlaps_open_more() -> None:
    files = [summary(0, 9), summary(10, 19), summary(20, 29), None]
    kr = key_ranges("id", LongType(), files)
    assert [[fid for _, _, fid in layer] for layer in kr.layers] == [[0, 1, 2]]
    assert kr.unplaced == {3}  # no statistics: always a candidate
    shared_bound = key_ranges("id", LongType(), [summary(0, 10), summary(10, 20)])
    assert len(shared_bound.layers) == 2  # 10 is in both files: they cannot share a layer


def test_files_beyond_the_last_layer_are_always_candidates() -> None:
    same = [summary(0, 100) for _ in range(MAX_LAYERS + 3)]
    kr = key_ranges("id", LongType(), same)
    assert len(kr.layers) == MAX_LAYERS
    assert kr.unplaced == {MAX_LAYERS, MAX_LAYERS + 1, MAX_LAYERS + 2}


def test_candidates_must_match_on_every_key_column() -> None:
    a = key_ranges(
        "a", LongType(), [FileSummary(1, {"a": ColumnRange(i * 2, i * 2 + 1, 0)}) for i in range(3)]
    )
    b = key_ranges("b", LongType(), [FileSummary(1, {"b": ColumnRange(0, 1, 0)}), None, None])
    # b's statistics exist only for file 0, so files 1 and 2 are unplaced for b.
    assert candidates([[0, 1], [0]], [a, b], 3) == [0, 1]
    assert candidates([[], []], [a, b], 3) == []
    assert candidates([[2], []], [a, b], 3) == [2]
