"""Cardinality (Spark/Iceberg rule): one target row, several matching source rows."""

from __future__ import annotations

import pytest

from dbt.adapters.rowmerge.merge import CardinalityViolation, history
from tests.engine.helpers import (
    UPSERT,
    create_table,
    file_snapshot,
    kept_files,
    merge,
    rows,
    source_view,
    table_state,
)


def _target(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(1, "a"), (2, "b")], [(3, "c")]])
    return t


def test_cardinality_update_of_row_matched_twice_raises_and_changes_nothing(spark, db):
    t = _target(spark, db)
    before = table_state(spark, t)
    src = source_view(spark, f"{db}_src", "id long, v string", [(1, "x"), (1, "y"), (3, "z"), (9, "n")])
    with pytest.raises(CardinalityViolation) as info:
        merge(spark, t, src, UPSERT)
    msg = str(info.value)
    assert f"MERGE into {t} failed" in msg
    assert "1 target row(s) matched more than one source row" in msg
    assert "id=1 matched 2 source rows" in msg
    assert "Deduplicate the source" in msg
    assert info.value.offending_rows == 1
    assert info.value.samples == [("id=1", 2)]
    assert table_state(spark, t) == before
    assert history(spark, t) == []


def test_cardinality_message_counts_every_offending_row_with_samples(spark, db):
    t = _target(spark, db)
    before = table_state(spark, t)
    src = source_view(
        spark,
        f"{db}_src",
        "id long, v string",
        [(1, "x"), (1, "y"), (2, "p"), (2, "q"), (2, "r"), (3, "ok")],
    )
    with pytest.raises(CardinalityViolation) as info:
        merge(spark, t, src, [{"when": "matched", "action": "update", "set": "*"}])
    msg = str(info.value)
    assert "2 target row(s) matched more than one source row" in msg
    assert "id=1 matched 2 source rows" in msg
    assert "id=2 matched 3 source rows" in msg
    assert table_state(spark, t) == before


def test_cardinality_samples_at_most_five_keys(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(i, "v") for i in range(1, 8)]])
    before = table_state(spark, t)
    src = source_view(spark, f"{db}_src", "id long, v string", [(i, s) for i in range(1, 8) for s in "xy"])
    with pytest.raises(CardinalityViolation) as info:
        merge(spark, t, src, UPSERT)
    assert "7 target row(s) matched more than one source row" in str(info.value)
    assert info.value.offending_rows == 7
    assert len(info.value.samples) == 5
    assert all(n == 2 for _, n in info.value.samples)
    assert table_state(spark, t) == before


def test_cardinality_sample_names_every_key_column(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, k string, v string", [[(1, "x", "a"), (1, "y", "b")]])
    before = table_state(spark, t)
    src = source_view(spark, f"{db}_src", "id long, k string, v string", [(1, "y", "p"), (1, "y", "q")])
    with pytest.raises(CardinalityViolation) as info:
        merge(spark, t, src, UPSERT, on="t.id = s.id AND t.k = s.k")
    msg = str(info.value)
    assert "1 target row(s)" in msg
    assert "id=1" in msg and "k=y" in msg and "matched 2 source rows" in msg
    assert table_state(spark, t) == before


def test_cardinality_applies_even_when_matched_condition_is_false(spark, db):
    t = _target(spark, db)
    before = table_state(spark, t)
    src = source_view(spark, f"{db}_src", "id long, v string", [(1, "x"), (1, "y")])
    with pytest.raises(CardinalityViolation):
        merge(
            spark, t, src, [{"when": "matched", "condition": "s.v = 'never'", "action": "update", "set": "*"}]
        )
    assert table_state(spark, t) == before


def test_cardinality_conditional_delete_raises(spark, db):
    t = _target(spark, db)
    before = table_state(spark, t)
    src = source_view(spark, f"{db}_src", "id long, v string", [(1, "x"), (1, "y")])
    with pytest.raises(CardinalityViolation) as info:
        merge(spark, t, src, [{"when": "matched", "condition": "s.v <> 'keep'", "action": "delete"}])
    assert "id=1 matched 2 source rows" in str(info.value)
    assert table_state(spark, t) == before


def test_cardinality_lone_unconditional_delete_deletes_row_once(spark, db):
    t = _target(spark, db)
    src = source_view(spark, f"{db}_src", "id long, v string", [(1, "x"), (1, "y"), (2, "z")])
    result = merge(spark, t, src, [{"when": "matched", "action": "delete"}])
    assert rows(spark, t) == [(3, "c")]
    m = result.metrics
    assert (m["numTargetRowsDeleted"], m["numTargetRowsMatchedDeleted"]) == (2, 2)
    assert (m["numTargetRowsCopied"], m["numTargetFilesRemoved"]) == (0, 1)


def test_cardinality_lone_unconditional_delete_with_insert_no_error(spark, db):
    t = _target(spark, db)
    src = source_view(spark, f"{db}_src", "id long, v string", [(1, "x"), (1, "y"), (9, "p"), (9, "q")])
    result = merge(
        spark,
        t,
        src,
        [
            {"when": "matched", "action": "delete"},
            {"when": "not_matched", "action": "insert", "values": "*"},
        ],
    )
    assert rows(spark, t) == [(2, "b"), (3, "c"), (9, "p"), (9, "q")]
    m = result.metrics
    assert (m["numTargetRowsDeleted"], m["numTargetRowsInserted"], m["numTargetRowsCopied"]) == (1, 2, 1)


def test_cardinality_insert_only_merge_has_no_check(spark, db):
    t = _target(spark, db)
    before = file_snapshot(spark, t)
    src = source_view(spark, f"{db}_src", "id long, v string", [(1, "x"), (1, "y"), (5, "p"), (5, "q")])
    result = merge(spark, t, src, [{"when": "not_matched", "action": "insert", "values": "*"}])
    assert rows(spark, t) == [(1, "a"), (2, "b"), (3, "c"), (5, "p"), (5, "q")]
    assert result.metrics["numTargetRowsInserted"] == 2
    assert result.metrics["numTargetFilesRemoved"] == 0
    assert kept_files(before, file_snapshot(spark, t)) == sorted(before)


def test_cardinality_not_matched_by_source_only_merge_has_no_check(spark, db):
    t = _target(spark, db)
    src = source_view(spark, f"{db}_src", "id long, v string", [(1, "x"), (1, "y"), (2, "z"), (2, "w")])
    result = merge(
        spark, t, src, [{"when": "not_matched_by_source", "action": "update", "set": {"v": "'gone'"}}]
    )
    # Rows 1 and 2 are matched (twice each) and copied exactly once; row 3 is updated.
    assert rows(spark, t) == [(1, "a"), (2, "b"), (3, "gone")]
    m = result.metrics
    assert m["numTargetRowsNotMatchedBySourceUpdated"] == 1
    assert m["numTargetFilesRemoved"] == 1


def test_cardinality_not_matched_by_source_delete_keeps_multiply_matched_row_once(spark, db):
    t = _target(spark, db)
    src = source_view(spark, f"{db}_src", "id long, v string", [(1, "x"), (1, "y")])
    result = merge(spark, t, src, [{"when": "not_matched_by_source", "action": "delete"}])
    assert rows(spark, t) == [(1, "a")]
    m = result.metrics
    assert (m["numTargetRowsDeleted"], m["numTargetRowsCopied"], m["numTargetFilesRemoved"]) == (2, 1, 2)


def test_cardinality_duplicate_unmatched_source_keys_are_all_inserted_by_upsert(spark, db):
    t = _target(spark, db)
    src = source_view(spark, f"{db}_src", "id long, v string", [(1, "A"), (5, "x"), (5, "y")])
    result = merge(spark, t, src, UPSERT)
    assert rows(spark, t) == [(1, "A"), (2, "b"), (3, "c"), (5, "x"), (5, "y")]
    m = result.metrics
    assert (m["numTargetRowsUpdated"], m["numTargetRowsInserted"]) == (1, 2)


def test_cardinality_sample_with_null_safe_on_names_key_column(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "v string, id long", [[("a", None), ("b", 2)]])
    before = table_state(spark, t)
    src = source_view(spark, f"{db}_src", "v string, id long", [("x", None), ("y", None)])
    with pytest.raises(CardinalityViolation) as info:
        merge(spark, t, src, UPSERT, on="t.id <=> s.id")
    # The sample shows the key of the offending row, not some other column.
    assert "id=NULL matched 2 source rows" in str(info.value)
    assert table_state(spark, t) == before
