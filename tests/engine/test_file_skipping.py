"""Files whose footer statistics rule out every source key are never opened.

Every non-candidate file is overwritten with garbage of the same size (its mtime restored,
so the statistics index still vouches for it) before the merge: had any phase opened one,
Spark would fail to read its footer. The original bytes are restored afterwards so the end
state can be checked row by row.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ByteType,
    DataType,
    DateType,
    DecimalType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
)

from dbt.adapters.rowmerge.merge import history
from dbt.adapters.rowmerge.merge.filestats import TREE_RANGES, KeyRanges, layer_hits, within_ranges
from tests.engine.helpers import (
    UPSERT,
    create_table,
    file_snapshot,
    files_of,
    merge,
    rows,
    source_view,
    table_dir,
)


@contextmanager
def garbled(paths: list[str]) -> Iterator[None]:
    """``paths`` unreadable as Parquet but with the same size and mtime, restored on exit."""
    saved = {}
    for p in paths:
        st = os.stat(p)
        saved[p] = (Path(p).read_bytes(), st.st_mtime_ns)
        Path(p).write_bytes(b"x" * st.st_size)
        os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    try:
        yield
    finally:
        for p, (data, mtime) in saved.items():
            Path(p).write_bytes(data)
            os.utime(p, ns=(mtime, mtime))


def four_files(spark, db: str, partitioned: bool) -> str:
    t = f"{db}.events"
    files = [
        [(1, "a", 1), (2, "b", 1)],
        [(3, "c", 1), (4, "d", 1)],
        [(5, "e", 2), (6, "f", 2)],
        [(7, "g", 2)],
    ]
    create_table(spark, t, "id long, v string, p int", files, partition_by=("p",) if partitioned else ())
    return t


@pytest.mark.parametrize("partitioned", [False, True])
def test_only_files_whose_ranges_hold_a_source_key_are_read(spark, db, partitioned: bool) -> None:
    t = four_files(spark, db, partitioned)
    # The first merge records version 0 with every file's statistics (and touches file 1).
    # Without compaction: partition p=2's two small files would be packed once p=2 is cold.
    src = source_view(spark, f"{db}_s1", "id long, v string, p int", [(1, "A", 1)])
    first = merge(spark, t, src, UPSERT, auto_compact=False)
    assert first.metrics["numTargetFilesAfterSkipping"] == 1
    keep = files_of(spark, t, "id = 3")
    others = [p for p in file_snapshot(spark, t) if p not in keep]
    assert len(others) == 3
    # id 3 is in one file's range; 100 is in none (an insert).
    src = source_view(spark, f"{db}_s2", "id long, v string, p int", [(3, "C", 1), (100, "z", 2)])
    with garbled(others):
        result = merge(spark, t, src, UPSERT, auto_compact=False)
    m = result.metrics
    assert (m["numTargetFilesBeforeSkipping"], m["numTargetFilesAfterSkipping"]) == (4, 1)
    assert (m["numTargetRowsUpdated"], m["numTargetRowsInserted"], m["numTargetFilesRemoved"]) == (1, 1, 1)
    assert rows(spark, t) == [
        (1, "A", 1),
        (2, "b", 1),
        (3, "C", 1),
        (4, "d", 1),
        (5, "e", 2),
        (6, "f", 2),
        (7, "g", 2),
        (100, "z", 2),
    ]


def test_insert_only_merge_of_new_keys_opens_no_file(spark, db) -> None:
    t = four_files(spark, db, partitioned=False)
    # Version 0 (with every file's statistics) and version 1.
    merge(spark, t, source_view(spark, f"{db}_s0", "id long, v string, p int", [(1, "A", 1)]), UPSERT)
    src = source_view(spark, f"{db}_s", "id long, v string, p int", [(8, "h", 2), (4, "dup", 1)])
    insert_only = [{"when": "not_matched", "action": "insert", "values": "*"}]
    with garbled([p for p in file_snapshot(spark, t) if p not in files_of(spark, t, "id = 4")]):
        result = merge(spark, t, src, insert_only)
    assert result.metrics["numTargetFilesAfterSkipping"] == 1
    assert result.metrics["numTargetRowsInserted"] == 1  # 4 exists: not inserted again
    assert [r for r in rows(spark, t) if r[0] in (4, 8)] == [(4, "d", 1), (8, "h", 2)]


def test_entries_record_statistics_of_version_0_and_of_added_files(spark, db) -> None:
    t = four_files(spark, db, partitioned=False)
    merge(
        spark,
        t,
        source_view(spark, f"{db}_s", "id long, v string, p int", [(2, "B", 1), (9, "i", 2)]),
        UPSERT,
    )
    log = Path(table_dir(spark, t)) / "_rowmerge_log"
    v0 = json.loads((log / f"{0:020d}.json").read_text())
    assert sorted((f["stats"]["id"]["min"], f["stats"]["id"]["max"]) for f in v0["added"]) == [
        (1, 2),
        (3, 4),
        (5, 6),
        (7, 7),
    ]
    assert v0["added"][0]["stats"]["v"]["nulls"] == 0 and "p" in v0["added"][0]["stats"]
    v1 = json.loads((log / f"{1:020d}.json").read_text())
    assert sorted((f["stats"]["id"]["min"], f["stats"]["id"]["max"]) for f in v1["added"]) == [(1, 2), (9, 9)]
    assert [h["version"] for h in history(spark, t)] == [1, 0]


def test_files_the_journal_does_not_describe_are_read(spark, db) -> None:
    """A file another writer added costs a footer read; statistics an entry garbles make its
    files candidates (read, never wrongly skipped)."""
    t = four_files(spark, db, partitioned=False)
    merge(spark, t, source_view(spark, f"{db}_s0", "id long, v string, p int", [(1, "A", 1)]), UPSERT)
    spark.sql(f"INSERT INTO {t} VALUES (50, 'x', 3)")  # a file rowmerge never saw
    src = source_view(spark, f"{db}_s", "id long, v string, p int", [(50, "X", 3)])
    result = merge(spark, t, src, UPSERT)
    assert (result.metrics["numTargetRowsUpdated"], result.metrics["numTargetRowsInserted"]) == (1, 0)
    assert result.metrics["numTargetFilesAfterSkipping"] == 1
    v0 = Path(table_dir(spark, t)) / "_rowmerge_log" / f"{0:020d}.json"
    entry = json.loads(v0.read_text())
    for f in entry["added"]:
        f["stats"] = {"id": {"min": "one", "max": [2]}, "v": "garbled"}
    v0.write_text(json.dumps(entry))
    src = source_view(spark, f"{db}_s3", "id long, v string, p int", [(6, "F", 2)])
    result = merge(spark, t, src, UPSERT)
    assert (result.metrics["numTargetRowsUpdated"], result.metrics["numTargetFilesAfterSkipping"]) == (1, 1)
    assert result.metrics["numTargetRowsInserted"] == 0
    assert [r for r in rows(spark, t) if r[0] in (1, 6, 50)] == [(1, "A", 1), (6, "F", 2), (50, "X", 3)]


def test_not_matched_by_source_reads_every_file(spark, db) -> None:
    t = four_files(spark, db, partitioned=False)
    src = source_view(spark, f"{db}_s", "id long, v string, p int", [(3, "C", 1)])
    clauses = [*UPSERT, {"when": "not_matched_by_source", "action": "delete", "condition": "t.id = 7"}]
    result = merge(spark, t, src, clauses)
    assert result.metrics["numTargetFilesAfterSkipping"] == 4
    assert [r[0] for r in rows(spark, t)] == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize("partitioned", [False, True])
def test_not_matched_by_source_conditions_reach_rows_outside_the_source_key_range(
    spark, db, partitioned: bool
) -> None:
    """The scan reads only rows a clause can act on: in the source's key range (3..4), or where
    a NOT MATCHED BY SOURCE condition holds (id >= 6, or v = 'b' for the update). Rows far
    from the source's keys that a condition selects are still deleted or updated; rows that
    neither reaches (1, 5, NULL id) stay as they are."""
    t = f"{db}.events"
    files = [
        [(1, "a", 1), (2, "b", 1)],
        [(3, "c", 1), (4, "d", 1)],
        [(5, "e", 2), (6, "f", 2)],
        [(7, "g", 2), (None, "n", 2)],
    ]
    create_table(spark, t, "id long, v string, p int", files, partition_by=("p",) if partitioned else ())
    src = source_view(spark, f"{db}_s", "id long, v string, p int", [(3, "C", 1), (4, "d", 1)])
    clauses = [
        *UPSERT,
        {"when": "not_matched_by_source", "condition": "t.id >= 6", "action": "delete"},
        {"when": "not_matched_by_source", "condition": "t.v = 'b'", "action": "update", "set": {"v": "'B'"}},
    ]
    result = merge(spark, t, src, clauses)
    m = result.metrics
    assert (m["numTargetRowsMatchedUpdated"], m["numTargetRowsNotMatchedBySourceDeleted"]) == (1, 2)
    assert m["numTargetRowsNotMatchedBySourceUpdated"] == 1
    assert m["numTargetFilesAfterSkipping"] == 4  # every file is opened; row groups are skipped
    assert sorted(rows(spark, t), key=repr) == sorted(
        [(1, "a", 1), (2, "B", 1), (3, "C", 1), (4, "d", 1), (5, "e", 2), (None, "n", 2)], key=repr
    )


def _search_cases() -> list[tuple[str, DataType, list[tuple[Any, Any]], list[Any]]]:
    """(name, type, file ranges (sorted, disjoint: one layer), probe values): extremes, bounds,
    gaps, odd strings."""
    lo, hi = -(2**63), 2**63 - 1
    return [
        ("bigint", LongType(), [(lo, -6), (-5, 0), (3, 10), (20, hi)], [lo, -6, -5, 0, 1, 3, 11, 20, hi]),
        ("int", IntegerType(), [(-(2**31), 0), (1, 1), (5, 2**31 - 1)], [-(2**31), 0, 1, 2, 5, 2**31 - 1]),
        ("smallint", ShortType(), [(-(2**15), -1), (2, 2**15 - 1)], [-(2**15), 0, 1, 2, 2**15 - 1]),
        ("tinyint", ByteType(), [(-128, -1), (1, 127)], [-128, 0, 1, 127]),
        (
            "decimal",
            DecimalType(12, 3),
            [(Decimal("-5.500"), Decimal("-0.001")), (Decimal("0.000"), Decimal("1E+2"))],
            [Decimal(v) for v in ("-5.501", "-5.5", "-0.002", "0.000", "100.000", "100.001")],
        ),
        (
            "date",
            DateType(),
            [(dt.date(1, 1, 1), dt.date(1999, 12, 31)), (dt.date(2024, 2, 29), dt.date(9999, 12, 31))],
            [dt.date(1, 1, 1), dt.date(2000, 1, 1), dt.date(2024, 2, 29), dt.date(9999, 12, 31)],
        ),
        (
            "string",
            StringType(),
            [("", "a'b"), ("a\\b", "m"), ("zz\n", "é")],
            ["", "a'b", "a'c", "a\\b", "b", "m", "n", "zz\n", "é", "ë"],
        ),
    ]


@pytest.mark.parametrize("case", _search_cases(), ids=lambda c: c[0])
def test_layer_hits_find_exactly_the_files_whose_range_holds_each_key(spark, case) -> None:
    """The per-row search over file ranges agrees with a brute-force check for every key type,
    with values on, between and beyond the bounds (and NULL, which matches no file)."""
    _, dtype, bounds, probes = case
    # Two layers: the ranges as given, and one file overlapping the first two (a second layer).
    layer0 = tuple((low, high, i) for i, (low, high) in enumerate(bounds))
    layer1 = ((bounds[0][0], bounds[1][1], len(bounds)),)
    ranges = KeyRanges("k", dtype, (layer0, layer1), frozenset())
    df = spark.createDataFrame([(p,) for p in [*probes, None]], StructType([StructField("k", dtype)]))
    hits = layer_hits("k", ranges)
    found = df.select("k", *[h.alias(f"h{i}") for i, h in enumerate(hits)]).collect()
    got = {r["k"]: sorted(r[f"h{i}"] for i in range(len(hits)) if r[f"h{i}"] is not None) for r in found}
    for p in [*probes, None]:
        holding = [f for layer in (layer0, layer1) for f in layer if p is not None and f[0] <= p <= f[1]]
        expected = sorted(fid for _, _, fid in holding)
        assert got[p] == expected, p


@pytest.mark.parametrize("case", _search_cases(), ids=lambda c: c[0])
def test_within_ranges_is_true_exactly_between_the_lowest_and_the_highest_bound(spark, case) -> None:
    """The test that lets the one-pass write insert a row without a join: true from the lowest
    bound of any file to the highest of any (gaps between files included), false beyond them
    and for NULL; None once some file has no range (any value may be in it)."""
    _, dtype, bounds, probes = case
    layer0 = tuple((low, high, i) for i, (low, high) in enumerate(bounds))
    layer1 = ((bounds[0][0], bounds[1][1], len(bounds)),)
    ranges = KeyRanges("k", dtype, (layer0, layer1), frozenset())
    sql = within_ranges("k", ranges)
    assert sql is not None
    assert within_ranges("k", KeyRanges("k", dtype, (layer0,), frozenset({len(bounds) + 1}))) is None
    beyond = [p for p in probes if p < bounds[0][0] or p > bounds[-1][1]]
    df = spark.createDataFrame([(p,) for p in [*probes, None]], StructType([StructField("k", dtype)]))
    got = {r["k"]: r["inside"] for r in df.select("k", F.expr(sql).alias("inside")).collect()}
    assert got == {**{p: p not in beyond for p in probes}, None: False}


@pytest.mark.parametrize("n", [1, 2, 3, 7, TREE_RANGES, TREE_RANGES + 1])
def test_layer_search_by_tree_and_by_binary_search_find_the_same_files(spark, n) -> None:
    """A layer of up to TREE_RANGES ranges is searched by a tree of IF expressions, a larger one
    by the binary search: either way every key on a bound, inside, in a gap between two ranges
    and beyond both ends finds exactly the range holding it (ranges [10i, 10i+5], gaps between)."""
    layer = tuple((i * 10, i * 10 + 5, 100 + i) for i in range(n))
    ranges = KeyRanges("k", LongType(), (layer,), frozenset())
    (hit,) = layer_hits("k", ranges)
    assert ("transform" in str(hit)) == (n > TREE_RANGES), str(hit)[:200]
    probes = sorted({p for i in range(n) for p in (i * 10 - 1, i * 10, i * 10 + 3, i * 10 + 5, i * 10 + 6)})
    df = spark.createDataFrame([(p,) for p in [*probes, n * 10 + 100, None]], "k long")
    got = {r["k"]: r["hit"] for r in df.select("k", hit.alias("hit")).collect()}
    for p, fid in got.items():
        holding = [f for low, high, f in layer if p is not None and low <= p <= high]
        assert fid == (holding[0] if holding else None), (p, fid)


def test_layer_hits_plan_quickly_for_thousands_of_files(spark) -> None:
    """The search's size does not grow per file beyond its constant arrays: 20,000 files (the
    most skipping handles) plan and run, and the search lands on the right file."""
    n = 20_000
    layer = tuple((i * 10, i * 10 + 9, i) for i in range(n))
    ranges = KeyRanges("k", LongType(), (layer,), frozenset())
    probes = [0, 9, 10, 12_345, n * 10 - 1, n * 10, -1]
    df = spark.createDataFrame([(p,) for p in probes], "k long")
    (hit,) = layer_hits("k", ranges)
    got = {r["k"]: [r["h"]] if r["h"] is not None else [] for r in df.select("k", hit.alias("h")).collect()}
    assert got == {0: [0], 9: [0], 10: [1], 12_345: [1234], n * 10 - 1: [n - 1], n * 10: [], -1: []}
