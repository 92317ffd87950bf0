"""A full refresh as a version (replace.py): REPLACE TABLE under the lock, history and change
feed going on, feed rows every old row deleted and every new row inserted (or none, opted
out), commit timestamps that never go back. A refresh that changes the table's shape:
test_reshape.py."""

from __future__ import annotations

import json
import os
from datetime import datetime

import pytest

from dbt.adapters.rowmerge.merge import (
    JournalError,
    UnsupportedTableError,
    as_of,
    faults,
    history,
    recover,
    replace_problem,
    replace_table,
    restore,
    start_history,
)
from dbt.adapters.rowmerge.merge.spec import Upkeep
from tests.engine.helpers import UPSERT, create_table, merge, rows, source_view, table_dir


def _feed(spark, name: str) -> list[tuple]:
    spark.catalog.refreshTable(name)
    return sorted((r._commit_version, r._change_type, r.id, r.v) for r in spark.table(name).collect())


def _model(spark, db: str, feed: bool = True) -> tuple[str, str | None]:
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(1, "a"), (2, "b")]])
    changes = f"{db}.t__changes" if feed else None
    start_history(spark, t, "CREATE TABLE", changes)
    merge(
        spark,
        t,
        source_view(spark, f"{db}_s1", "id long, v string", [(2, "B"), (3, "c")]),
        UPSERT,
        change_data_feed={"table": changes} if feed else None,
    )
    return t, changes


def test_replace_is_the_next_version_and_its_feed_deletes_old_rows_and_inserts_new(spark, db):
    t, changes = _model(spark, db)
    new = spark.createDataFrame([(1, "a"), (4, "d")], "id long, v string")

    done = replace_table(spark, t, new, change_data_feed=changes)

    assert done.version == 2 and (done.rows_deleted, done.rows_inserted) == (3, 2)
    assert rows(spark, t) == [(1, "a"), (4, "d")]
    top = history(spark, t)[0]
    assert (top["version"], top["operation"], top["rows_inserted"], top["rows_deleted"]) == (
        2,
        "REPLACE TABLE",
        2,
        3,
    )
    assert [h["version"] for h in history(spark, t)] == [2, 1, 0]
    assert [r for r in _feed(spark, changes) if r[0] == 2] == [
        (2, "delete", 1, "a"),
        (2, "delete", 2, "B"),
        (2, "delete", 3, "c"),
        (2, "insert", 1, "a"),
        (2, "insert", 4, "d"),
    ]
    # The table merges on from the replaced version: version 3, feed included.
    merge(
        spark,
        t,
        source_view(spark, f"{db}_s2", "id long, v string", [(4, "D")]),
        UPSERT,
        change_data_feed={"table": changes},
    )
    assert rows(spark, t) == [(1, "a"), (4, "D")]
    assert [r for r in _feed(spark, changes) if r[0] == 3] == [
        (3, "update_postimage", 4, "D"),
        (3, "update_preimage", 4, "d"),
    ]


def _retained(spark, t: str) -> list[str]:
    root = os.path.join(table_dir(spark, t), "_rowmerge_log", "retained")
    return sorted(os.listdir(root)) if os.path.isdir(root) else []


def test_a_refresh_of_a_table_with_only_its_first_version_keeps_that_version(spark, db):
    # The first run records no retention policy; the refresh keeps the old table by default,
    # as a merge would (retain_versions 24), so a bad refresh can be undone.
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(1, "a"), (2, "b")]])
    start_history(spark, t, "CREATE TABLE")

    done = replace_table(spark, t, spark.createDataFrame([(9, "z")], "id long, v string"))

    assert done.version == 1 and rows(spark, t) == [(9, "z")]
    assert _retained(spark, t) == [f"{1:020d}"]
    assert sorted(tuple(r) for r in as_of(spark, t, version=0).collect()) == [(1, "a"), (2, "b")]
    restore(spark, t, version=0)
    assert rows(spark, t) == [(1, "a"), (2, "b")]


def test_a_refresh_keeps_what_the_models_retention_says(spark, db):
    t, _ = _model(spark, db, feed=False)  # versions 0 (create) and 1 (a merge, default policy)
    new = spark.createDataFrame([(7, "q")], "id long, v string")

    replace_table(spark, t, new, upkeep=Upkeep(retain_versions=0, retain_hours=0))

    # Off: the old table's files are deleted, not retained, and the setting is stored.
    assert f"{2:020d}" not in _retained(spark, t)
    with pytest.raises(JournalError, match="Version 1 .* can no longer be read.*from 2 on"):
        as_of(spark, t, version=1).collect()
    assert history(spark, t)[0]["operation"] == "REPLACE TABLE"
    replace_table(spark, t, spark.createDataFrame([(8, "r")], "id long, v string"))
    assert _retained(spark, t) == []  # the stored setting (off) carries on


def test_replace_feed_applied_by_a_consumer_gives_every_change_exactly_once(spark, db):
    """A consumer that remembers the last version it applied: before the refresh, after it,
    after the next merge — it ends with exactly the table, and reads no change row twice."""
    t, changes = _model(spark, db)
    state: dict[int, str] = {}
    seen = 0
    read: list[tuple] = []

    def consume() -> None:
        nonlocal seen
        new = [r for r in _feed(spark, changes) if r[0] > seen]
        # deletes before inserts within a version; pre-images before post-images
        order = {"delete": 0, "update_preimage": 1, "insert": 2, "update_postimage": 3}
        for _version, kind, key, value in sorted(new, key=lambda r: (r[0], order[r[1]])):
            if kind in ("delete", "update_preimage"):
                del state[key]
            else:
                state[key] = value
        read.extend(new)
        seen = max([seen] + [r[0] for r in new])

    state.update({1: "a", 2: "b"})  # version 0, as dbt created it
    consume()
    replace_table(
        spark, t, spark.createDataFrame([(2, "x"), (5, "e")], "id long, v string"), change_data_feed=changes
    )
    merge(
        spark,
        t,
        source_view(spark, f"{db}_s3", "id long, v string", [(5, "E"), (6, "f")]),
        UPSERT,
        change_data_feed={"table": changes},
    )
    consume()
    assert sorted(state.items()) == sorted((k, v) for k, v in rows(spark, t))
    assert len(read) == len(set(read)) == len(_feed(spark, changes))
    assert seen == 3


def test_replace_opted_out_writes_no_change_rows_and_says_why(spark, db):
    t, changes = _model(spark, db)
    done = replace_table(
        spark,
        t,
        spark.createDataFrame([(9, "z")], "id long, v string"),
        change_data_feed=changes,
        feed_on_replace=False,
    )
    assert done.version == 2 and done.feed_rows == 0
    assert [r for r in _feed(spark, changes) if r[0] == 2] == []
    entry = json.load(open(os.path.join(table_dir(spark, t), "_rowmerge_log", f"{2:020d}.json")))
    assert entry["feed_skipped"].startswith("change_data_feed_on_replace is false")
    assert rows(spark, t) == [(9, "z")]


def test_replace_adds_new_columns_at_the_end_and_to_the_feed(spark, db):
    t, changes = _model(spark, db)
    new = spark.createDataFrame([(1, "a", 10)], "id long, v string, n int")
    assert replace_problem(spark, t, new) is None
    replace_table(spark, t, new, change_data_feed=changes)
    assert rows(spark, t) == [(1, "a", 10)]
    assert [c.name for c in spark.table(t).schema] == ["id", "v", "n"]
    spark.catalog.refreshTable(changes)
    got = sorted(
        (r._change_type, r.id, r.n) for r in spark.table(changes).where("abs(_commit_version) = 2").collect()
    )
    assert got == [("delete", 1, None), ("delete", 2, None), ("delete", 3, None), ("insert", 1, 10)]


def test_replace_partitioned_table_keeps_its_partitions(spark, db):
    t = f"{db}.p"
    create_table(
        spark, t, "id long, v string, d string", [[(1, "a", "x")], [(2, "b", "y")]], partition_by=["d"]
    )
    start_history(spark, t)
    new = spark.createDataFrame([(3, "c", "y"), (4, "d", "z")], "id long, v string, d string")
    done = replace_table(spark, t, new, partition_by=["d"])
    assert done.version == 1
    assert rows(spark, t) == [(3, "c", "y"), (4, "d", "z")]
    root = table_dir(spark, t)
    assert {"d=y", "d=z"} <= set(os.listdir(root))
    # d=x lost its only row: no data file is left there (the folder may stay, as after a merge)
    assert [f for f in os.listdir(os.path.join(root, "d=x")) if not f.startswith((".", "_"))] == []


def test_replace_is_refused_naming_why_when_the_model_lacks_a_partition_column(spark, db):
    """The other shapes are registered again (test_reshape.py); a model that does not select
    the partition column it names cannot be written at all."""
    t, _ = _model(spark, db, feed=False)
    new = spark.createDataFrame([(1, "a")], "id long, v string")
    assert replace_problem(spark, t, new, ("d",)) == "the model does not select partition column(s) d"
    with pytest.raises(
        UnsupportedTableError, match=r"cannot keep the table's history: the model does not select"
    ):
        replace_table(spark, t, new, partition_by=("d",))
    assert rows(spark, t) == [(1, "a"), (2, "B"), (3, "c")]
    assert [h["version"] for h in history(spark, t)] == [1, 0]


def test_replace_problem_of_a_table_without_journal(spark, db):
    t = f"{db}.plain"
    create_table(spark, t, "id long", [[(1,)]])
    assert replace_problem(spark, t, spark.createDataFrame([], "id long")) == "it has no rowmerge journal"


def test_replace_killed_after_its_entry_is_finished_by_recovery(spark, db, monkeypatch):
    """The same protocol as a merge: a crash after the commit point is rolled forward."""
    t, changes = _model(spark, db)

    def die(step: str) -> None:
        if step == "entry":
            raise SystemExit("killed")

    monkeypatch.setattr(faults, "fault_point", die)
    with pytest.raises(SystemExit):
        replace_table(
            spark, t, spark.createDataFrame([(7, "g")], "id long, v string"), change_data_feed=changes
        )
    monkeypatch.undo()
    assert history(spark, t)[0]["applied"] is False
    recover(spark, t)
    assert rows(spark, t) == [(7, "g")]
    assert [r for r in _feed(spark, changes) if r[0] == 2] == [
        (2, "delete", 1, "a"),
        (2, "delete", 2, "B"),
        (2, "delete", 3, "c"),
        (2, "insert", 7, "g"),
    ]


def test_commit_timestamps_never_go_back(spark, db):
    """A journal whose newest version is stamped in the future (a clock set back since): the
    next commits are stamped after it, one millisecond apart."""
    t, _ = _model(spark, db, feed=False)
    log = os.path.join(table_dir(spark, t), "_rowmerge_log")
    path = os.path.join(log, f"{1:020d}.json")
    entry = json.load(open(path))
    entry["timestamp"] = "2999-01-01T00:00:00.000+00:00"
    with open(path, "w") as fh:
        json.dump(entry, fh)
    merge(spark, t, source_view(spark, f"{db}_s4", "id long, v string", [(8, "h")]), UPSERT)
    replace_table(spark, t, spark.createDataFrame([(9, "i")], "id long, v string"))
    stamps = [datetime.fromisoformat(h["timestamp"]) for h in reversed(history(spark, t))]
    assert stamps == sorted(stamps)
    assert [h["timestamp"] for h in history(spark, t)][:2] == [
        "2999-01-01T00:00:00.002+00:00",
        "2999-01-01T00:00:00.001+00:00",
    ]
