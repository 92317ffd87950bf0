"""A full refresh that changes the table's shape (reshape.py): the next version all the same,
registered again over the same folder, managed or external, its feed exact, and a crash at
any step finished by whoever opens the table next."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

from dbt.adapters.rowmerge.merge import (
    ConcurrentMergeError,
    UnsupportedTableError,
    faults,
    history,
    recover,
    replace_problem,
    replace_table,
    start_history,
)
from dbt.adapters.rowmerge.merge.reshape import PARKED_SUFFIX
from tests.engine.helpers import UPSERT, create_table, merge, rows, source_view, table_dir


def _feed(spark, name: str) -> list[tuple]:
    spark.catalog.refreshTable(name)
    return sorted(
        (r._commit_version, r._change_type, *(r[c] for c in ("id", "v", "w") if c in r))
        for r in spark.table(name).collect()
    )


def _model(spark, db: str, feed: bool = True, external: str | None = None) -> tuple[str, str | None]:
    t = f"{db}.t"
    if external:
        spark.sql(f"CREATE TABLE {t} (id long, v string) USING parquet LOCATION '{external}'")
        spark.sql(f"INSERT INTO {t} VALUES (1, 'a'), (2, 'b')")
    else:
        create_table(spark, t, "id long, v string", [[(1, "a"), (2, "b")]])
    spark.sql(f"ALTER TABLE {t} SET TBLPROPERTIES ('owner_team' = 'growth')")
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


def _described(spark, t: str) -> dict:
    return json.loads(spark.sql(f"DESCRIBE TABLE EXTENDED {t} AS JSON").collect()[0][0])


SHAPES = {  # the model's columns, its rows, one row a later merge inserts, partitioning, format
    "dropped column": ("id long, w int", [(1, 10), (4, 40)], (5, 50), (), "parquet"),
    "retyped column": ("id int, v string", [(1, "a"), (4, "d")], (5, "e"), (), "parquet"),
    "reordered columns": ("v string, id long", [("a", 1), ("d", 4)], ("e", 5), (), "parquet"),
    "partitioned now": ("id long, v string", [(1, "a"), (4, "d")], (5, "e"), ("v",), "parquet"),
    "orc now": ("id long, v string", [(1, "a"), (4, "d")], (5, "e"), (), "orc"),
}


@pytest.mark.parametrize("case", list(SHAPES))
def test_refresh_of_another_shape_is_the_next_version_over_the_same_folder(spark, db, case):
    schema, data, extra, parts, fmt = SHAPES[case]
    t, _ = _model(spark, db, feed=False)
    folder = table_dir(spark, t)
    new = spark.createDataFrame(data, schema)
    assert replace_problem(spark, t, new, parts, fmt) is None

    done = replace_table(spark, t, new, partition_by=parts, file_format=fmt)

    assert done.version == 2 and (done.rows_deleted, done.rows_inserted) == (3, 2)
    assert [(h["version"], h["operation"], h["applied"]) for h in history(spark, t)] == [
        (2, "REPLACE TABLE", True),
        (1, "MERGE", True),
        (0, "CREATE TABLE", True),
    ]
    info = _described(spark, t)
    assert (info["type"], info["provider"], info["partition_columns"] if parts else []) == (
        "MANAGED",
        fmt,
        list(parts),
    )
    assert info["table_properties"]["owner_team"] == "growth"
    assert table_dir(spark, t) == folder
    assert not os.path.exists(folder + PARKED_SUFFIX)
    want = spark.createDataFrame(data, schema)
    ordered = [f.name for f in want.schema if f.name not in parts] + list(parts)
    assert [f.name for f in spark.table(t).schema] == ordered
    assert [f.dataType for f in spark.table(t).schema] == [want.schema[c].dataType for c in ordered]
    assert rows(spark, t) == sorted(tuple(r) for r in want.select(*ordered).collect())
    # and it merges on, from version 3
    merge(spark, t, source_view(spark, f"{db}_s9", schema, [extra]), UPSERT)
    assert history(spark, t)[0]["version"] == 3
    after = spark.createDataFrame([*data, extra], schema).select(*ordered)
    assert rows(spark, t) == sorted(tuple(r) for r in after.collect())


def test_refresh_of_an_external_table_keeps_it_external_at_its_location(spark, db, tmp_path):
    where = str(tmp_path / "ext_t")
    t, _ = _model(spark, db, feed=False, external=where)
    done = replace_table(spark, t, spark.createDataFrame([(5, 50)], "id long, w int"))
    assert done.version == 2
    info = _described(spark, t)
    assert info["type"] == "EXTERNAL" and info["location"].rstrip("/").endswith(where)
    assert rows(spark, t) == [(5, 50)]
    assert os.path.isdir(os.path.join(where, "_rowmerge_log"))


def test_refresh_dropping_a_column_keeps_it_in_the_feed_and_a_consumer_stays_exact(spark, db):
    t, changes = _model(spark, db)
    done = replace_table(
        spark, t, spark.createDataFrame([(1, 10), (4, 40)], "id long, w int"), change_data_feed=changes
    )
    assert done.version == 2 and done.feed_rows == 5
    assert [r for r in _feed(spark, changes) if r[0] == 2] == [
        (2, "delete", 1, "a", None),
        (2, "delete", 2, "B", None),
        (2, "delete", 3, "c", None),
        (2, "insert", 1, None, 10),
        (2, "insert", 4, None, 40),
    ]
    merge(
        spark,
        t,
        source_view(spark, f"{db}_s2", "id long, w int", [(4, 41), (6, 60)]),
        UPSERT,
        change_data_feed={"table": changes},
    )
    # A consumer that started from version 0 (ids 1 and 2) and applies every version's rows
    # in order, deletes before inserts, ends with the table.
    state: dict[int, tuple] = {1: (1, None), 2: (2, None)}
    feed = _feed(spark, changes)
    for version in sorted({r[0] for r in feed}):
        for at, change, id_, _v, _w in feed:
            if at == version and change in ("delete", "update_preimage"):
                state.pop(id_)
        for at, change, id_, _v, w in feed:
            if at == version and change in ("insert", "update_postimage"):
                state[id_] = (id_, w)
    assert sorted(state.values()) == rows(spark, t) == [(1, 10), (4, 41), (6, 60)]


def test_refresh_retyping_a_column_of_a_model_with_a_change_feed_is_refused_naming_it(spark, db):
    t, changes = _model(spark, db)
    new = spark.createDataFrame([(1, 7)], "id long, v int")
    problem = replace_problem(spark, t, new, (), "parquet", changes)
    assert problem is not None and "v (string -> int)" in problem and changes in problem
    with pytest.raises(UnsupportedTableError, match=r"cannot keep the table's history: column\(s\) v"):
        replace_table(spark, t, new, change_data_feed=changes)
    assert rows(spark, t) == [(1, "a"), (2, "B"), (3, "c")]
    assert [h["version"] for h in history(spark, t)] == [1, 0]


def _refresh_killed_at(step: str, monkeypatch, spark, t: str, new, **kwargs) -> None:
    """``replace_table(spark, t, new, **kwargs)`` killed at its fault point ``step``."""

    def die(at: str) -> None:
        if at == step:
            raise SystemExit("killed")

    monkeypatch.setattr(faults, "fault_point", die)
    with pytest.raises(SystemExit):
        replace_table(spark, t, new, **kwargs)
    monkeypatch.undo()


STEPS = [
    "entry",
    "reshape_removed",
    "reshape_parked",
    "reshape_dropped",
    "reshape_created",
    "reshape_unparked",
]


@pytest.mark.parametrize("step", STEPS)
def test_refresh_killed_at_any_step_is_finished_by_the_next_open(spark, db, step, monkeypatch):
    t, changes = _model(spark, db)
    folder = table_dir(spark, t)
    new = spark.createDataFrame([(1, 10), (4, 40)], "id long, w int")
    _refresh_killed_at(step, monkeypatch, spark, t, new, partition_by=("w",), change_data_feed=changes)

    if step == "reshape_dropped":
        # the table is missing from the catalog: the next merge (or dbt's next run of the
        # model, tests/functional/test_refresh_new_shape.py) finishes the refresh first
        assert not spark.catalog.tableExists(t)
    else:
        recover(spark, t)
        assert rows(spark, t) == [(1, 10), (4, 40)]
    merge(
        spark,
        t,
        source_view(spark, f"{db}_s3", "id long, w int", [(7, 70)]),
        UPSERT,
        change_data_feed={"table": changes},
    )

    assert rows(spark, t) == [(1, 10), (4, 40), (7, 70)]
    assert _described(spark, t)["partition_columns"] == ["w"]
    assert table_dir(spark, t) == folder and not os.path.exists(folder + PARKED_SUFFIX)
    assert [(h["version"], h["applied"]) for h in history(spark, t)] == [
        (3, True),
        (2, True),
        (1, True),
        (0, True),
    ]
    assert len([r for r in _feed(spark, changes) if r[0] == 2]) == 5


def test_a_parked_journal_is_finished_before_any_other_use_of_the_table(spark, db, monkeypatch):
    """Killed with the journal parked: history (any open of the journal) finishes the refresh
    first, so no one sees the table without its versions."""
    t, _ = _model(spark, db, feed=False)
    _refresh_killed_at("reshape_created", monkeypatch, spark, t, spark.createDataFrame([(9,)], "id long"))
    assert os.path.isdir(table_dir(spark, t) + PARKED_SUFFIX)
    assert [h["version"] for h in history(spark, t)] == [2, 1, 0]
    assert not os.path.exists(table_dir(spark, t) + PARKED_SUFFIX)
    recover(spark, t)
    assert rows(spark, t) == [(9,)]


def test_history_finishes_a_refresh_stopped_while_the_table_was_missing(spark, db, monkeypatch):
    """Killed between the drop and the create: the table is missing from the catalog, and
    history (like recover) registers it again instead of saying it does not exist."""
    t, _ = _model(spark, db, feed=False)
    new = spark.createDataFrame([(9, "z")], "id long, v string")
    _refresh_killed_at("reshape_dropped", monkeypatch, spark, t, new, partition_by=("v",))
    assert not spark.catalog.tableExists(t)
    assert [h["version"] for h in history(spark, t)] == [2, 1, 0]
    assert spark.catalog.tableExists(t)
    recover(spark, t)  # as after a kill with the journal parked: the version's files move in
    assert rows(spark, t) == [(9, "z")]
    assert _described(spark, t)["partition_columns"] == ["v"]
    assert not os.path.exists(table_dir(spark, t) + PARKED_SUFFIX)


def test_a_merge_waiting_for_the_lock_through_a_refresh_merges_into_the_new_shape(spark, db, monkeypatch):
    """A merge that queued for the lock while a refresh held it sees the lock folder vanish
    while the journal is parked: it writes nothing there (its files would stand in the way of
    the table's create) and takes the lock once the refresh released it."""
    t, changes = _model(spark, db)
    folder = table_dir(spark, t)

    refresher: list[threading.Thread] = []
    seen_while_parked: list[list[str]] = []

    def pause(step: str) -> None:
        if threading.current_thread() is not refresher[0]:
            return
        if step == "staged_data":
            time.sleep(2.0)  # the merge below queues for the lock meanwhile
        if step == "reshape_parked":
            time.sleep(2.0)  # the merge polls the vanished lock folder meanwhile
            seen_while_parked.append(sorted(os.listdir(folder)) if os.path.isdir(folder) else [])

    monkeypatch.setattr(faults, "fault_point", pause)
    errors: list[BaseException] = []

    def refresh() -> None:
        try:
            replace_table(
                spark,
                t,
                spark.createDataFrame([(1, 10), (4, 40)], "id long, w int"),
                change_data_feed=changes,
            )
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    refresher.append(threading.Thread(target=refresh))
    refresher[0].start()
    time.sleep(1.0)
    merge(
        spark,
        t,
        source_view(spark, f"{db}_s5", "id long, w int", [(4, 41)]),
        UPSERT,
        change_data_feed={"table": changes},
    )
    refresher[0].join()
    assert errors == []
    assert seen_while_parked == [[]]  # nothing of the waiting merge in the table's folder
    assert [(h["version"], h["operation"]) for h in history(spark, t)][:2] == [
        (3, "MERGE"),
        (2, "REPLACE TABLE"),
    ]
    assert rows(spark, t) == [(1, 10), (4, 41)]


def test_a_merge_starting_while_the_table_is_missing_fails_naming_the_refresh(spark, db, monkeypatch):
    """Between the drop and the create the table is missing from the catalog: a merge that
    starts then says a refresh is registering the table again, and changes nothing."""
    t, _ = _model(spark, db, feed=False)

    dropped = threading.Event()
    go_on = threading.Event()

    def pause(step: str) -> None:
        if step == "reshape_dropped" and threading.current_thread() is not threading.main_thread():
            dropped.set()
            go_on.wait(60)

    monkeypatch.setattr(faults, "fault_point", pause)
    errors: list[BaseException] = []

    def refresh() -> None:
        try:
            replace_table(spark, t, spark.createDataFrame([(1, 10)], "id long, w int"))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    worker = threading.Thread(target=refresh)
    worker.start()
    try:
        assert dropped.wait(60)
        with pytest.raises(
            ConcurrentMergeError, match=r"A full refresh of .*\.t is registering the table again"
        ):
            merge(spark, t, source_view(spark, f"{db}_s6", "id long, v string", [(8, "h")]), UPSERT)
    finally:
        go_on.set()
        worker.join()
    assert errors == []
    assert rows(spark, t) == [(1, 10)]
    assert [h["version"] for h in history(spark, t)] == [2, 1, 0]
