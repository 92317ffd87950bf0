"""guards.py: an empty source never empties the table unless the spec opts in; NULL keys in
the source are counted in a warning."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from dbt.adapters.rowmerge.merge import DeleteLimitError, EmptySourceError, MergeSpecError, history
from tests.engine.helpers import UPSERT, create_table, merge, rows, source_view, table_state

NMBS_DELETE = {"when": "not_matched_by_source", "action": "delete"}
NMBS_UPDATE = {"when": "not_matched_by_source", "action": "update", "set": {"v": "'gone'"}}


@contextmanager
def engine_warnings() -> Iterator[list[str]]:
    """Warnings the engine logs (its logger may not propagate: the dbt adapter forwards it)."""
    found: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno >= logging.WARNING:
                found.append(record.getMessage())

    log = logging.getLogger("rowmerge")
    handler = Collect()
    log.addHandler(handler)
    try:
        yield found
    finally:
        log.removeHandler(handler)


def _target(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(1, "a"), (2, "b")], [(3, "c")]])
    return t


@pytest.mark.parametrize(
    "clauses",
    [
        [*UPSERT, NMBS_DELETE],
        [{**NMBS_DELETE, "condition": "t.id > 1"}],
    ],
    ids=["upsert_and_delete", "conditional_delete_only"],
)
def test_empty_source_with_not_matched_by_source_delete_is_refused(spark, db, clauses):
    t = _target(spark, db)
    before = table_state(spark, t)
    src = source_view(spark, f"{db}_src", "id long, v string", [])
    with pytest.raises(EmptySourceError) as err:
        merge(spark, t, src, clauses)
    message = str(err.value)
    assert f"MERGE into {t} refused: the source is empty" in message
    assert "(when: not_matched_by_source, action: delete) deletes every target row" in message
    assert "set `allow_empty_source: true`" in message
    assert "Nothing was changed." in message
    assert table_state(spark, t) == before
    assert history(spark, t) == []


def test_empty_source_with_allow_empty_source_deletes_every_row(spark, db):
    t = _target(spark, db)
    src = source_view(spark, f"{db}_src", "id long, v string", [])
    result = merge(spark, t, src, [*UPSERT, NMBS_DELETE], allow_empty_source=True)
    assert rows(spark, t) == []
    assert result.metrics["numTargetRowsDeleted"] == 3


def test_empty_source_with_not_matched_by_source_update_runs(spark, db):
    """Only a delete can empty the table; an update keeps every row and is not refused."""
    t = _target(spark, db)
    src = source_view(spark, f"{db}_src", "id long, v string", [])
    result = merge(spark, t, src, [*UPSERT, NMBS_UPDATE])
    assert rows(spark, t) == [(1, "gone"), (2, "gone"), (3, "gone")]
    assert result.metrics["numTargetRowsNotMatchedBySourceUpdated"] == 3


def test_non_empty_source_with_not_matched_by_source_delete_runs(spark, db):
    t = _target(spark, db)
    src = source_view(spark, f"{db}_src", "id long, v string", [(2, "B")])
    merge(spark, t, src, [*UPSERT, NMBS_DELETE])
    assert rows(spark, t) == [(2, "B")]


def test_allow_empty_source_must_be_a_boolean(spark, db):
    t = _target(spark, db)
    src = source_view(spark, f"{db}_src", "id long, v string", [])
    with pytest.raises(MergeSpecError, match=r"`allow_empty_source` must be true or false, got 'yes'"):
        merge(spark, t, src, [*UPSERT, NMBS_DELETE], allow_empty_source="yes")


def test_null_keys_in_the_source_are_counted_in_a_warning(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, k string, v string", [[(1, "x", "a"), (2, "y", "b")]])
    src = source_view(
        spark,
        f"{db}_src",
        "id long, k string, v string",
        [(1, "x", "A"), (None, "x", "N1"), (3, None, "N2"), (None, None, "N3")],
    )
    with engine_warnings() as warnings:
        merge(spark, t, src, UPSERT, on="t.id = s.id AND t.k = s.k")
    assert warnings == [
        f"rowmerge: 3 source row(s) merged into {t} have a NULL in a key column (id, k): NULL equals "
        "nothing in `on`, so they match no target row; an insert clause inserts them as new rows on "
        "every run. Filter them out or coalesce the key in the model SQL."
    ]
    # MERGE semantics are unchanged: the rows are inserted.
    assert [r for r in rows(spark, t) if r[2].startswith("N")] == [
        (None, None, "N3"),
        (None, "x", "N1"),
        (3, None, "N2"),
    ]


def test_no_warning_with_null_safe_equality(spark, db):
    """`<=>` matches NULL keys, so they are not a mistake there."""
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(1, "a"), (None, "n")]])
    src = source_view(spark, f"{db}_src", "id long, v string", [(1, "A"), (None, "N")])
    with engine_warnings() as warnings:
        merge(spark, t, src, UPSERT, on="t.id <=> s.id")
    assert warnings == []
    assert rows(spark, t) == [(None, "N"), (1, "A")]


def test_max_delete_fraction_refuses_a_merge_that_deletes_more(spark, db):
    """3 rows; the source keeps only id 1: the NOT MATCHED BY SOURCE delete removes 2 (67%)."""
    t = _target(spark, db)
    before = table_state(spark, t)
    src = source_view(spark, f"{db}_src", "id long, v string", [(1, "a")])
    with pytest.raises(DeleteLimitError) as err:
        merge(spark, t, src, [*UPSERT, NMBS_DELETE], max_delete_fraction=0.5)
    assert str(err.value) == (
        f"MERGE into {t} refused: it would delete 2 of 3 rows (66.7%), more than "
        "`max_delete_fraction: 0.5` allows (50.0%). Nothing was changed. Check the source (an upstream "
        "that lost rows?) and the delete clauses; if the deletes are intended, raise max_delete_fraction "
        "for this run."
    )
    assert table_state(spark, t) == before
    assert history(spark, t) == []
    # matched deletes count too; at the limit the merge runs
    gone = source_view(spark, f"{db}_gone", "id long, v string", [(3, "c")])
    with pytest.raises(DeleteLimitError):
        merge(spark, t, gone, [{"when": "matched", "action": "delete"}], max_delete_fraction=0.3)
    result = merge(spark, t, src, [*UPSERT, NMBS_DELETE], max_delete_fraction=2 / 3)
    assert result.metrics["numTargetRowsDeleted"] == 2
    assert rows(spark, t) == [(1, "a")]
