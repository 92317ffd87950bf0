"""Which table a journal belongs to (journal/ ``check_owner``/``check_placement``, run.py ``rebind``).

A folder's journal describes the files of one catalog table. Two tables with one LOCATION,
a table inside another's folder, or a table that holds another one would each rewrite or
count the other's files; a merge refuses all three before anything is written. Names compare
as the catalog does (``spark_catalog.db.t`` is ``db.t``, letter case aside); a table renamed
with ``ALTER TABLE ... RENAME`` is rebound explicitly.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from dbt.adapters.rowmerge.merge import (
    JournalError,
    UnsupportedTableError,
    as_of,
    history,
    optimize,
    rebind,
    restore,
    start_history,
    vacuum,
)
from tests.engine.helpers import (
    UPSERT,
    create_table,
    folder_digest,
    merge,
    rows,
    source_view,
    table_dir,
)


def _entry(folder: str, version: int) -> dict:
    with open(os.path.join(folder, "_rowmerge_log", f"{version:020d}.json")) as fh:
        return json.load(fh)


def test_binding_two_tables_on_one_folder_refuse_each_other(spark, db, tmp_path):
    """The issue's repro: merging into the narrow table would have made `v` NULL in the wide one."""
    shared = tmp_path / "shared"
    spark.sql(f"CREATE TABLE {db}.wide (id BIGINT, n STRING, v STRING) USING parquet LOCATION '{shared}'")
    spark.sql(f"INSERT INTO {db}.wide VALUES (1, 'a', 'x'), (2, 'b', 'y')")
    start_history(spark, f"{db}.wide")
    spark.sql(f"CREATE TABLE {db}.narrow (id BIGINT, n STRING) USING parquet LOCATION '{shared}'")
    src = source_view(spark, f"{db}_s", "id long, n string", [(1, "A")])
    before = folder_digest(str(shared))

    with pytest.raises(UnsupportedTableError) as raised:
        merge(spark, f"{db}.narrow", src, UPSERT)
    message = str(raised.value)
    assert f"{db}.narrow cannot use the journal in file:{shared}/_rowmerge_log" in message
    assert f"it belongs to table {db}.wide (version 0 says so)" in message
    assert "rowmerge_rebind" in message and "Nothing was changed" in message
    assert folder_digest(str(shared)) == before
    assert rows(spark, f"{db}.wide") == [(1, "a", "x"), (2, "b", "y")]

    # The wide table, whose journal it is, merges as usual.
    wide_src = source_view(spark, f"{db}_w", "id long, n string, v string", [(1, "A", "x2")])
    merge(spark, f"{db}.wide", wide_src, UPSERT)
    assert rows(spark, f"{db}.wide") == [(1, "A", "x2"), (2, "b", "y")]


def test_binding_names_compare_as_the_catalog_does(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(1, "a")]])
    start_history(spark, f"spark_catalog.{db}.T")
    src = source_view(spark, f"{db}_s", "id long, v string", [(1, "b")])
    merge(spark, t.upper(), src, UPSERT)
    merge(spark, f"`{db}`.`t`", source_view(spark, f"{db}_s2", "id long, v string", [(1, "c")]), UPSERT)
    assert rows(spark, t) == [(1, "c")]
    folder = table_dir(spark, t)
    # Every version records the catalog's name, whatever name the caller used.
    assert [_entry(folder, v)["table"] for v in (0, 1, 2)] == [t, t, t]


def test_binding_journal_with_an_unqualified_name_still_binds(spark, db):
    """A journal written by a caller that relied on the current database names only the table."""
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(1, "a")]])
    start_history(spark, t)
    path = os.path.join(table_dir(spark, t), "_rowmerge_log", f"{0:020d}.json")
    with open(path) as fh:
        entry = json.load(fh)
    entry["table"] = "T"
    with open(path, "w") as fh:
        json.dump(entry, fh)
    merge(spark, t, source_view(spark, f"{db}_s", "id long, v string", [(2, "b")]), UPSERT)
    assert rows(spark, t) == [(1, "a"), (2, "b")]


def test_binding_renamed_table_is_refused_until_rebound(spark, db):
    old, new = f"{db}.old_name", f"{db}.new_name"
    create_table(spark, old, "id long, v string", [[(1, "a"), (2, "b")], [(3, "c")]])
    start_history(spark, old, "CREATE TABLE", f"{old}__changes")
    merge(
        spark,
        old,
        source_view(spark, f"{db}_s1", "id long, v string", [(1, "A")]),
        UPSERT,
        change_data_feed={"table": f"{old}__changes"},
    )
    old_folder = table_dir(spark, old)
    spark.sql(f"ALTER TABLE {old} RENAME TO {new}")
    src = source_view(spark, f"{db}_s2", "id long, v string", [(2, "B"), (4, "D")])
    folder = table_dir(spark, new)
    before = folder_digest(folder)

    with pytest.raises(UnsupportedTableError) as raised:
        merge(spark, new, src, UPSERT, change_data_feed={"table": f"{old}__changes"})
    assert f"it belongs to table {old} (version 1 says so)" in str(raised.value)
    assert f"rowmerge_rebind --args '{{relation: {new}}}'" in str(raised.value)
    assert folder_digest(folder) == before

    done = rebind(spark, new)
    assert done == {
        "version": 2,
        "previous": old,
        "moved_from": f"file:{old_folder}",  # a managed table's folder moves with its name
        "rebound": True,
        "changes_tables": [f"{old}__changes"],
    }
    assert rebind(spark, new)["rebound"] is False  # once is enough
    newest = history(spark, new, limit=1)[0]
    assert (newest["operation"], newest["applied"]) == ("REBIND", True)
    rebound = _entry(folder, 2)
    assert (rebound["table"], rebound["reason"]) == (new, f"renamed from {old}, moved from file:{old_folder}")
    # It lists the files where they are now, with their statistics (they moved with the folder).
    assert sorted(f["path"] for f in rebound["added"]) == sorted(
        f"file:{os.path.join(folder, n)}" for n in os.listdir(folder) if n.endswith(".parquet")
    )
    assert all(f["rows"] and f["stats"] for f in rebound["added"])

    result = merge(spark, new, src, UPSERT, change_data_feed={"table": f"{old}__changes"})
    assert result.version == 3
    assert rows(spark, new) == [(1, "A"), (2, "B"), (3, "c"), (4, "D")]
    feed = spark.table(f"{old}__changes")
    assert sorted((r.id, r.v, r._change_type, r._commit_version) for r in feed.collect()) == [
        (1, "A", "update_postimage", 1),
        (1, "a", "update_preimage", 1),
        (2, "B", "update_postimage", 3),
        (2, "b", "update_preimage", 3),
        (4, "D", "insert", 3),
    ]


def test_binding_table_inside_a_journaled_table_is_refused(spark, db, tmp_path):
    outer, inner = tmp_path / "outer", tmp_path / "outer" / "inner"
    spark.sql(f"CREATE TABLE {db}.o (id BIGINT, n STRING) USING parquet LOCATION '{outer}'")
    spark.sql(f"INSERT INTO {db}.o VALUES (1, 'o')")
    start_history(spark, f"{db}.o")
    spark.sql(f"CREATE TABLE {db}.i (id BIGINT, n STRING) USING parquet LOCATION '{inner}'")
    spark.sql(f"INSERT INTO {db}.i VALUES (5, 'i')")
    before = folder_digest(str(outer))
    src = source_view(spark, f"{db}_s", "id long, n string", [(1, "A"), (5, "I")])

    with pytest.raises(UnsupportedTableError) as raised:
        merge(spark, f"{db}.i", src, UPSERT)
    assert f"{db}.i is stored at file:{inner}, inside the folder of another table" in str(raised.value)
    assert f"({outer.as_uri().replace('file://', 'file:')}/_rowmerge_log)" in str(raised.value)
    assert folder_digest(str(outer)) == before


def test_binding_table_holding_a_journaled_table_is_refused(spark, db, tmp_path):
    """The outer table's version 0 would have listed the inner table's files and counted its rows."""
    outer, inner = tmp_path / "outer", tmp_path / "outer" / "inner"
    spark.sql(f"CREATE TABLE {db}.i (id BIGINT, n STRING) USING parquet LOCATION '{inner}'")
    spark.sql(f"INSERT INTO {db}.i VALUES (5, 'i')")
    start_history(spark, f"{db}.i")
    spark.sql(f"CREATE TABLE {db}.o (id BIGINT, n STRING) USING parquet LOCATION '{outer}'")
    spark.sql(f"INSERT INTO {db}.o VALUES (1, 'o')")
    before = folder_digest(str(outer))
    src = source_view(spark, f"{db}_s", "id long, n string", [(1, "A")])

    with pytest.raises(UnsupportedTableError) as raised:
        merge(spark, f"{db}.o", src, UPSERT)
    assert f"holds another table's journal (file:{inner}/_rowmerge_log)" in str(raised.value)
    with pytest.raises(UnsupportedTableError, match="holds another table's journal"):
        start_history(spark, f"{db}.o")
    assert folder_digest(str(outer)) == before
    assert rows(spark, f"{db}.i") == [(5, "i")]


def test_binding_a_rebound_table_reads_and_restores_its_versions_since_the_rename(spark, db):
    """The REBIND lists the files where they are now; versions from it on read only those
    (the paths its earlier versions recorded are gone with the old folder)."""
    old, new = f"{db}.before_rename", f"{db}.after_rename"
    create_table(spark, old, "id long, v string", [[(1, "a"), (2, "b")], [(3, "c")]])
    start_history(spark, old, "CREATE TABLE")
    merge(spark, old, source_view(spark, f"{db}_r1", "id long, v string", [(1, "A")]), UPSERT)
    spark.sql(f"ALTER TABLE {old} RENAME TO {new}")
    assert rebind(spark, new)["version"] == 2
    merge(spark, new, source_view(spark, f"{db}_r2", "id long, v string", [(2, "B"), (4, "D")]), UPSERT)

    at_rebind = [(1, "A"), (2, "b"), (3, "c")]
    assert sorted(tuple(r) for r in as_of(spark, new, version=2).collect()) == at_rebind
    assert sorted(tuple(r) for r in as_of(spark, new, version=3).collect()) == rows(spark, new)
    with pytest.raises(
        JournalError, match=r"Version 1 of .* at version 2 the table was rebound \(renamed from "
    ):
        as_of(spark, new, version=1)
    restore(spark, new, version=2)
    assert rows(spark, new) == at_rebind


def _point_at_a_copy(spark, t: str, ddl: str, original: str, copy: str) -> None:
    """Copy the external table ``t``'s folder and make ``t`` (same name) the copy's, as after
    copying a warehouse: the old folder stays."""
    shutil.copytree(original, copy)
    spark.sql(f"DROP TABLE {t}")
    spark.sql(f"CREATE TABLE {t} {ddl} LOCATION '{copy}'")
    if "PARTITIONED BY" in ddl:
        spark.sql(f"ALTER TABLE {t} RECOVER PARTITIONS")


def test_binding_a_table_whose_folder_was_copied_elsewhere_is_refused_until_rebound(spark, db, tmp_path):
    """A warehouse copied to a new place and the table pointed at the copy (same name): the
    journal's versions name the old folder's files. A merge, optimize, restore or as_of would
    act on those; each is refused, touching neither folder, until the move is recorded."""
    t = f"{db}.moved"
    ddl = "(id long, v string, p int) USING parquet PARTITIONED BY (p)"
    original, copy = str(tmp_path / "warehouse" / "moved"), str(tmp_path / "new_warehouse" / "moved")
    spark.sql(f"CREATE TABLE {t} {ddl} LOCATION '{original}'")
    spark.sql(f"INSERT INTO {t} VALUES (1, 'a', 1), (2, 'b', 1), (3, 'c', 2)")
    start_history(spark, t, "CREATE TABLE")
    merge(spark, t, source_view(spark, f"{db}_m1", "id long, v string, p int", [(1, "A", 1)]), UPSERT)
    _point_at_a_copy(spark, t, ddl, original, copy)
    originals, copies = folder_digest(original), folder_digest(copy)
    src = source_view(spark, f"{db}_m2", "id long, v string, p int", [(2, "B", 1), (4, "D", 2)])

    for attempt in (
        lambda: merge(spark, t, src, UPSERT),
        lambda: as_of(spark, t, version=1),
        lambda: restore(spark, t, version=0),
        lambda: optimize(spark, t),
    ):
        with pytest.raises(UnsupportedTableError) as raised:
            attempt()
        message = str(raised.value)
        assert (
            f"its journal (file:{copy}/_rowmerge_log) names files at file:{original} (version 1)" in message
        )
        assert f"rowmerge_rebind --args '{{relation: {t}}}'" in message
        assert (folder_digest(original), folder_digest(copy)) == (originals, copies)

    done = rebind(spark, t)
    assert done == {
        "version": 2,
        "previous": None,
        "moved_from": f"file:{original}",
        "rebound": True,
        "changes_tables": [],
    }
    assert _entry(copy, 2)["reason"] == f"moved from file:{original}"
    assert rebind(spark, t)["rebound"] is False
    merge(spark, t, src, UPSERT)
    after = [(1, "A", 1), (2, "B", 1), (3, "c", 2), (4, "D", 2)]
    assert rows(spark, t) == after
    assert sorted(tuple(r) for r in as_of(spark, t, version=2).collect()) == [
        (1, "A", 1),
        (2, "b", 1),
        (3, "c", 2),
    ]
    with pytest.raises(JournalError, match=r"at version 2 the table was rebound \(moved from file:"):
        as_of(spark, t, version=1)
    restore(spark, t, version=2)
    assert rows(spark, t) == [(1, "A", 1), (2, "b", 1), (3, "c", 2)]
    assert folder_digest(original) == originals  # the old folder was never touched


def test_binding_a_copied_folder_is_refused_when_the_newest_version_names_no_files(spark, db, tmp_path):
    """A VACUUM names no data file: the check looks back to the newest version that does."""
    t = f"{db}.vacuumed"
    ddl = "(id long, v string) USING parquet"
    original, copy = str(tmp_path / "warehouse" / "vacuumed"), str(tmp_path / "new_warehouse" / "vacuumed")
    spark.sql(f"CREATE TABLE {t} {ddl} LOCATION '{original}'")
    spark.sql(f"INSERT INTO {t} VALUES (1, 'a'), (2, 'b')")
    start_history(spark, t, "CREATE TABLE")
    merge(spark, t, source_view(spark, f"{db}_v1", "id long, v string", [(1, "A")]), UPSERT)
    merge(spark, t, source_view(spark, f"{db}_v2", "id long, v string", [(2, "B")]), UPSERT)
    assert vacuum(spark, t, retain_versions=1, retain_hours=0, force=True).version == 3
    assert history(spark, t, limit=1)[0]["operation"] == "VACUUM"
    _point_at_a_copy(spark, t, ddl, original, copy)
    originals, copies = folder_digest(original), folder_digest(copy)
    src = source_view(spark, f"{db}_v3", "id long, v string", [(3, "c")])
    for attempt in (lambda: merge(spark, t, src, UPSERT), lambda: optimize(spark, t)):
        with pytest.raises(UnsupportedTableError, match=f"names files at file:{original} \\(version 2\\)"):
            attempt()
        assert (folder_digest(original), folder_digest(copy)) == (originals, copies)
    assert rebind(spark, t)["version"] == 4
    merge(spark, t, src, UPSERT)
    assert rows(spark, t) == [(1, "A"), (2, "B"), (3, "c")]


def test_binding_an_empty_table_renamed_is_rebound_once(spark, db):
    """A REBIND of an empty table names no file, and still says where the files are."""
    old, new = f"{db}.empty_before", f"{db}.empty_after"
    create_table(spark, old, "id long, v string", [[(1, "a")]])
    start_history(spark, old, "CREATE TABLE")
    delete = [{"when": "matched", "action": "delete"}]
    merge(spark, old, source_view(spark, f"{db}_e1", "id long, v string", [(1, "a")]), delete)
    assert rows(spark, old) == []
    spark.sql(f"ALTER TABLE {old} RENAME TO {new}")
    assert rebind(spark, new)["version"] == 2
    assert rebind(spark, new)["rebound"] is False
    merge(spark, new, source_view(spark, f"{db}_e2", "id long, v string", [(3, "c")]), UPSERT)
    assert rows(spark, new) == [(3, "c")]


def test_binding_a_copied_folder_is_refused_when_the_version_before_is_an_empty_rebind(spark, db, tmp_path):
    """A version naming only another folder's files is a move when the version that placed
    the files before it names none here either — an empty table's REBIND names none at all.
    (One naming this folder's files before it makes the newer one an edited entry:
    test_bad_inputs' journal-removes-file-of-another-folder.)"""
    old, t = f"{db}.empty_then_copied", f"{db}.copied_after_rename"
    ddl = "(id long, v string) USING parquet"
    original, copy = str(tmp_path / "warehouse" / "kept"), str(tmp_path / "new_warehouse" / "kept")
    spark.sql(f"CREATE TABLE {old} {ddl} LOCATION '{original}'")
    start_history(spark, old, "CREATE TABLE")
    spark.sql(f"ALTER TABLE {old} RENAME TO {t}")
    assert rebind(spark, t)["version"] == 1
    merge(spark, t, source_view(spark, f"{db}_c1", "id long, v string", [(1, "a")]), UPSERT)
    _point_at_a_copy(spark, t, ddl, original, copy)
    originals, copies = folder_digest(original), folder_digest(copy)
    src = source_view(spark, f"{db}_c2", "id long, v string", [(2, "b")])
    with pytest.raises(UnsupportedTableError, match=f"names files at file:{original} \\(version 2\\)"):
        merge(spark, t, src, UPSERT)
    assert (folder_digest(original), folder_digest(copy)) == (originals, copies)
    assert rebind(spark, t)["moved_from"] == f"file:{original}"
    merge(spark, t, src, UPSERT)
    assert rows(spark, t) == [(1, "a"), (2, "b")]


def test_binding_a_folder_moved_back_after_a_rebind_is_refused_again(spark, db, tmp_path):
    """A → B (rebound there), then B's folder copied back to A's place and the table pointed at
    it: the REBIND names B's files and the version before it A's — a move, not an edited entry
    (only an unapplied write is left to recovery's judgement)."""
    t = f"{db}.round_trip"
    ddl = "(id long, v string) USING parquet"
    a, b = str(tmp_path / "a" / "round_trip"), str(tmp_path / "b" / "round_trip")
    spark.sql(f"CREATE TABLE {t} {ddl} LOCATION '{a}'")
    spark.sql(f"INSERT INTO {t} VALUES (1, 'a'), (2, 'b')")
    start_history(spark, t, "CREATE TABLE")
    merge(spark, t, source_view(spark, f"{db}_r1", "id long, v string", [(1, "A")]), UPSERT)
    _point_at_a_copy(spark, t, ddl, a, b)
    assert rebind(spark, t)["moved_from"] == f"file:{a}"
    shutil.rmtree(a)
    _point_at_a_copy(spark, t, ddl, b, a)
    folders = folder_digest(a), folder_digest(b)
    src = source_view(spark, f"{db}_r2", "id long, v string", [(2, "B"), (3, "C")])
    for attempt in (lambda: merge(spark, t, src, UPSERT), lambda: as_of(spark, t, version=2)):
        with pytest.raises(UnsupportedTableError, match=f"names files at file:{b} \\(version 2\\)"):
            attempt()
        assert (folder_digest(a), folder_digest(b)) == folders
    assert rebind(spark, t) == {
        "version": 3,
        "previous": None,
        "moved_from": f"file:{b}",
        "rebound": True,
        "changes_tables": [],
    }
    merge(spark, t, src, UPSERT)
    assert rows(spark, t) == [(1, "A"), (2, "B"), (3, "C")]
    assert sorted(tuple(r) for r in as_of(spark, t, version=3).collect()) == [(1, "A"), (2, "b")]
    assert folder_digest(b) == folders[1]
