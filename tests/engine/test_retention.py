"""Retention of replaced files (journal/retention.py): a version that replaces files moves them
into ``_rowmerge_log/retained/<version>/`` (same path below it as below the table) instead of
deleting them; the table folder still holds exactly the current files; the policy is stored
with the table and carried from version to version; a replay or a crash mid-apply loses no
retained file."""

from __future__ import annotations

import json
import os

import pytest

from dbt.adapters.rowmerge.merge import faults, history, optimize, recover
from tests.engine.helpers import UPSERT, create_table, file_snapshot, merge, rows, source_view, table_dir

LOG = "_rowmerge_log"


def _retained(spark, t: str) -> dict[str, list[str]]:
    """version folder -> the files below it (relative paths, sorted)."""
    root = os.path.join(table_dir(spark, t), LOG, "retained")
    out: dict[str, list[str]] = {}
    if not os.path.isdir(root):
        return out
    for version in sorted(os.listdir(root)):
        base = os.path.join(root, version)
        out[version] = sorted(
            os.path.relpath(os.path.join(d, f), base)
            for d, _, names in os.walk(base)
            for f in names
            if not f.startswith(".")
        )
    return out


def _entry(spark, t: str, version: int) -> dict:
    path = os.path.join(table_dir(spark, t), LOG, f"{version:020d}.json")
    with open(path) as fh:
        return json.load(fh)


def _rel(spark, t: str, paths) -> list[str]:
    root = table_dir(spark, t)
    return sorted(os.path.relpath(p, root) for p in paths)


def _upsert(spark, db, t, name, data, **extra):
    src = source_view(spark, f"{db}_{name}", "id long, v string", data)
    return merge(spark, t, src, UPSERT, auto_compact=False, **extra)


def test_replaced_files_move_into_the_versions_retained_folder(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(1, "a"), (2, "b")], [(3, "c")]])
    before = file_snapshot(spark, t)
    replaced = [p for p in before if (1, "a") in _file_rows(spark, p)]
    _upsert(spark, db, t, "s1", [(1, "A"), (4, "d")], retain_versions=3)

    assert rows(spark, t) == [(1, "A"), (2, "b"), (3, "c"), (4, "d")]
    # the table folder holds exactly the current files; the replaced one waits in retained/1
    after = file_snapshot(spark, t)
    assert len(after) == 3 and set(replaced) - set(after) == set(replaced)
    assert _retained(spark, t) == {f"{1:020d}": _rel(spark, t, replaced)}
    kept = os.path.join(table_dir(spark, t), LOG, "retained", f"{1:020d}", _rel(spark, t, replaced)[0])
    assert _file_rows(spark, kept) == [(1, "a"), (2, "b")]
    entry = _entry(spark, t, 1)
    assert (entry["format"], entry["retention"]) == (4, {"versions": 3, "hours": 0.0})


def test_the_policy_is_stored_and_carried_until_a_run_changes_it(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(1, "a")], [(2, "b")]])
    _upsert(spark, db, t, "s1", [(1, "x")], retain_hours=24)
    _upsert(spark, db, t, "s2", [(1, "y")])  # no setting: the stored one
    assert sorted(_retained(spark, t)) == [f"{1:020d}", f"{2:020d}"]
    # off from now: what was retained goes too (test_vacuum)
    _upsert(spark, db, t, "s3", [(1, "z")], retain_versions=0, retain_hours=0)
    _upsert(spark, db, t, "s4", [(1, "w")])  # no setting: still off
    assert _retained(spark, t) == {}
    assert [_entry(spark, t, v).get("retention") for v in (1, 2, 3, 4)] == [
        {"versions": 24, "hours": 24.0},  # the setting not given: the default's
        {"versions": 24, "hours": 24.0},
        {"versions": 0, "hours": 0.0},
        {"versions": 0, "hours": 0.0},
    ]
    # an entry that keeps and deletes nothing stays in the format an older release reads
    assert [_entry(spark, t, v)["format"] for v in (1, 2, 3, 4)] == [4, 4, 4, 1]
    assert rows(spark, t) == [(1, "w"), (2, "b")]


def test_without_a_setting_the_default_keeps_the_newest_24_versions(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(1, "a")], [(2, "b")]])
    for i in range(1, 27):
        _upsert(spark, db, t, f"s{i}", [(1, f"x{i}")])
    # version k's retained folder holds version k-1's file of id 1; 2 and up stay (26 - 24)
    assert sorted(_retained(spark, t)) == [f"{k:020d}" for k in range(3, 27)]
    assert _entry(spark, t, 1)["retention"] == {"versions": 24, "hours": 0.0}
    assert _entry(spark, t, 1)["format"] == 4


def test_a_partitioned_tables_retained_files_keep_their_partition_folders(spark, db):
    t = f"{db}.t"
    create_table(
        spark, t, "id long, v string, day string", [[(1, "a", "d1"), (2, "b", "d2")]], partition_by=["day"]
    )
    src = source_view(spark, f"{db}_p", "id long, v string, day string", [(1, "A", "d1")])
    merge(spark, t, src, UPSERT, on="t.id = s.id AND t.day = s.day", retain_versions=2)
    [(version, files)] = _retained(spark, t).items()
    assert version == f"{1:020d}" and len(files) == 1 and files[0].startswith("day=d1/")
    assert rows(spark, t) == [(1, "A", "d1"), (2, "b", "d2")]


def test_optimize_and_auto_compaction_retain_the_files_they_compact(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(i, "a")] for i in range(4)])
    result = optimize(spark, t, target_file_size_mb=1)
    assert result.version == 1
    # optimize has no retention argument: the default keeps the four files it compacted
    assert [len(f) for f in _retained(spark, t).values()] == [4]
    assert _entry(spark, t, 1)["retention"] == {"versions": 24, "hours": 0.0}
    _upsert(spark, db, t, "s1", [(100, "x")], retain_versions=5)
    src = source_view(spark, f"{db}_s2", "id long, v string", [(101, "y")])
    done = merge(spark, t, src, UPSERT, auto_compact_min_files=2)
    compacted = done.metrics["compactVersion"]
    assert compacted == 4  # the merge is 3; its compaction 4 carries the stored policy
    assert _entry(spark, t, 4)["retention"] == {"versions": 5, "hours": 0.0}
    assert len(_retained(spark, t)[f"{4:020d}"]) == _entry(spark, t, 4)["metrics"]["numFilesRemoved"]
    assert len(rows(spark, t)) == 6


def test_applying_an_entry_again_finds_its_files_retained_and_changes_nothing(spark, db):
    from dbt.adapters.rowmerge.merge.run import load_target, open_journal

    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(1, "a")], [(2, "b")]])
    _upsert(spark, db, t, "s1", [(1, "x"), (2, "y")], retain_versions=1)
    state = (rows(spark, t), file_snapshot(spark, t), _retained(spark, t))
    target = load_target(spark, t)
    journal = open_journal(spark, target.location)
    journal.apply(spark, journal.read_entry(1), target)
    assert (rows(spark, t), file_snapshot(spark, t), _retained(spark, t)) == state
    assert len(state[2][f"{1:020d}"]) == 2


class Crash(BaseException):
    """The process dying at a step."""


@pytest.mark.parametrize("step", ["delete_0", "delete_1", "before_applied"])
def test_a_crash_between_two_moves_is_finished_by_recovery(spark, db, monkeypatch, step):
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(1, "a")], [(2, "b")], [(3, "c")]])

    def die(at: str) -> None:
        if at == step:
            raise Crash(at)

    monkeypatch.setattr(faults, "fault_point", die)
    with pytest.raises(Crash):
        _upsert(spark, db, t, "s1", [(1, "x"), (2, "y")], retain_versions=2)
    monkeypatch.undo()
    recover(spark, t)
    assert rows(spark, t) == [(1, "x"), (2, "y"), (3, "c")]
    assert len(_retained(spark, t)[f"{1:020d}"]) == 2
    # the files the merge wrote and (3, 'c')'s; none of the replaced ones
    assert len(file_snapshot(spark, t)) == 1 + len(_entry(spark, t, 1)["added"])
    assert history(spark, t)[0]["applied"] is True


def _file_rows(spark, path: str) -> list[tuple]:
    return sorted(tuple(r) for r in spark.read.parquet(path).collect())
