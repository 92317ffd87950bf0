"""Expiry of retained files (journal/retention.py, vacuum.py): a version that commits deletes
the retained folders its table's retention no longer keeps; ``vacuum`` deletes them on demand
(with a shorter retention this once, refusing files of versions current less than an hour ago
unless forced) as a VACUUM version; every version still kept reads back and restores, one
that is gone names the oldest readable version; killed at any step, nothing kept is lost."""

from __future__ import annotations

import json
import os
import time

import pytest

from dbt.adapters.rowmerge.merge import (
    JournalError,
    MergeSpecError,
    as_of,
    faults,
    history,
    recover,
    restore,
    vacuum,
)
from tests.engine.helpers import UPSERT, create_table, folder_digest, merge, rows, source_view, table_dir

LOG = "_rowmerge_log"


def _kept(spark, t: str) -> list[int]:
    """The versions whose retained folder exists."""
    root = os.path.join(table_dir(spark, t), LOG, "retained")
    return sorted(int(n) for n in os.listdir(root)) if os.path.isdir(root) else []


def _entry(spark, t: str, version: int) -> dict:
    with open(os.path.join(table_dir(spark, t), LOG, f"{version:020d}.json")) as fh:
        return json.load(fh)


def _read(spark, t: str, version: int) -> list[tuple]:
    return sorted(tuple(r) for r in as_of(spark, t, version=version).collect())


def _table_with_history(spark, db, merges: int, **retention) -> tuple[str, list[list[tuple]]]:
    """A table of three one-row files; each merge rewrites the file of id 1 (so every version
    replaces one file) and inserts a row. The rows of every version, version 0 first."""
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(1, "a")], [(2, "b")], [(3, "c")]])
    saved = [rows(spark, t)]
    for i in range(1, merges + 1):
        src = source_view(spark, f"{db}_m{i}", "id long, v string", [(1, f"v{i}"), (10 + i, "new")])
        merge(spark, t, src, UPSERT, auto_compact=False, **retention)
        saved.append(rows(spark, t))
    return t, saved


def test_a_merge_deletes_the_folders_retain_versions_no_longer_keeps(spark, db):
    t, saved = _table_with_history(spark, db, 4, retain_versions=2)
    # version 4 keeps the folders of versions 3 and 4: versions 2 to 4 read back
    assert _kept(spark, t) == [3, 4]
    assert [_entry(spark, t, v).get("expired", []) for v in (1, 2, 3, 4)] == [[], [], [1], [2]]
    for v in (2, 3, 4):
        assert _read(spark, t, v) == saved[v]
    with pytest.raises(JournalError, match="Every version from 2 on can be read"):
        as_of(spark, t, version=1)
    with pytest.raises(JournalError, match="Every version from 2 on can be read"):
        restore(spark, t, version=1)
    assert rows(spark, t) == saved[4]


def test_a_file_is_kept_while_either_setting_keeps_it(spark, db):
    # one version, but an hour: nothing a test's minute commits falls out
    t, _ = _table_with_history(spark, db, 3, retain_versions=1, retain_hours=1)
    assert _kept(spark, t) == [1, 2, 3]
    # no hours: only the newest folder (version 2 reads back)
    src = source_view(spark, f"{db}_m4", "id long, v string", [(1, "z")])
    merge(spark, t, src, UPSERT, auto_compact=False, retain_hours=0)
    assert _kept(spark, t) == [4]


def test_retain_hours_alone_keeps_what_was_replaced_less_than_that_long_ago(spark, db):
    second = 1 / 3600
    t, saved = _table_with_history(spark, db, 1, retain_versions=0, retain_hours=2 * second)
    time.sleep(2.5)  # version 0 stopped being current more than two seconds ago
    src = source_view(spark, f"{db}_m2", "id long, v string", [(1, "late")])
    merge(spark, t, src, UPSERT, auto_compact=False)
    assert _kept(spark, t) == [2]
    assert _read(spark, t, 1) == saved[1]
    with pytest.raises(JournalError, match="Every version from 1 on can be read"):
        as_of(spark, t, version=0)


def test_turning_retention_off_deletes_every_retained_folder(spark, db):
    t, saved = _table_with_history(spark, db, 2, retain_versions=5)
    assert _kept(spark, t) == [1, 2]
    src = source_view(spark, f"{db}_off", "id long, v string", [(1, "off")])
    merge(spark, t, src, UPSERT, auto_compact=False, retain_versions=0, retain_hours=0)
    assert _kept(spark, t) == []
    assert _entry(spark, t, 3)["expired"] == [1, 2]
    with pytest.raises(JournalError, match="Every version from 3 on can be read"):
        as_of(spark, t, version=2)


def test_vacuum_with_a_shorter_retention_commits_a_vacuum_version(spark, db):
    t, saved = _table_with_history(spark, db, 3, retain_versions=5)
    assert _kept(spark, t) == [1, 2, 3]
    done = vacuum(spark, t, retain_versions=1, force=True)
    assert (done.version, done.expired, done.files_deleted, done.oldest_readable) == (4, (1, 2), 2, 2)
    assert done.bytes_deleted > 0
    assert _kept(spark, t) == [3]
    top = history(spark, t)[0]
    assert (top["operation"], top["applied"], top["files_added"], top["files_removed"]) == (
        "VACUUM",
        True,
        0,
        0,
    )
    assert top["metrics"] == {
        "numVersionsExpired": 2,
        "numFilesDeleted": 2,
        "numBytesDeleted": done.bytes_deleted,
    }
    # this once: the stored retention is the table's still
    assert _entry(spark, t, 4)["retention"] == {"versions": 5, "hours": 0.0}
    assert rows(spark, t) == saved[3]
    assert _read(spark, t, 2) == saved[2]
    with pytest.raises(JournalError, match="Every version from 2 on can be read"):
        as_of(spark, t, version=1)
    # a kept version still restores, and the table merges on
    restore(spark, t, version=2)
    assert rows(spark, t) == saved[2]
    src = source_view(spark, f"{db}_after", "id long, v string", [(2, "after")])
    merge(spark, t, src, UPSERT, auto_compact=False)
    assert rows(spark, t) == sorted([r for r in saved[2] if r[0] != 2] + [(2, "after")])


def test_vacuum_refuses_files_of_versions_current_within_the_hour_unless_forced(spark, db):
    t, _ = _table_with_history(spark, db, 2, retain_versions=5)
    state = folder_digest(table_dir(spark, t))
    with pytest.raises(
        MergeSpecError,
        match=r"refused: it would delete the files of version\(s\) 0, 1, current less than 1 hour",
    ) as err:
        vacuum(spark, t, retain_versions=0)
    assert "`retain_versions` = 0" in str(err.value) and "force=True" in str(err.value)
    assert folder_digest(table_dir(spark, t)) == state


def test_dry_run_lists_the_files_and_bytes_and_changes_nothing(spark, db):
    t, _ = _table_with_history(spark, db, 2, retain_versions=5)
    state = folder_digest(table_dir(spark, t))
    done = vacuum(spark, t, retain_versions=1, dry_run=True, force=True)
    assert (done.dry_run, done.version, done.expired, done.files_deleted) == (True, None, (1,), 1)
    assert len(done.files) == 1 and f"/{LOG}/retained/{1:020d}/" in done.files[0]
    assert done.bytes_deleted == os.path.getsize(done.files[0].split(":", 1)[-1].removeprefix("//"))
    assert "would delete 1 retained file(s)" in done.summary()
    assert folder_digest(table_dir(spark, t)) == state


def test_nothing_past_retention_commits_nothing(spark, db):
    t, _ = _table_with_history(spark, db, 2, retain_versions=5)
    done = vacuum(spark, t)
    assert (done.version, done.expired, done.oldest_readable) == (None, (), 0)
    assert "nothing past retention" in done.summary()
    assert history(spark, t)[0]["version"] == 2


def test_bad_arguments_are_named(spark, db):
    t, _ = _table_with_history(spark, db, 1, retain_versions=5)
    state = folder_digest(table_dir(spark, t))
    with pytest.raises(MergeSpecError) as err:
        vacuum(spark, t, retain_versions=-1, retain_hours="a day", force="yes")
    text = str(err.value)
    assert "`retain_versions` must be a whole number >= 0, got -1" in text
    assert "`retain_hours` must be a number >= 0, got 'a day'" in text
    assert "`force` must be true or false, got 'yes'" in text
    assert folder_digest(table_dir(spark, t)) == state


class Crash(BaseException):
    """The process dying at a step."""


@pytest.mark.parametrize(
    "step", ["vacuum_entry", "vacuum_expire_0", "vacuum_expire_1", "vacuum_before_applied", "vacuum_applied"]
)
def test_killed_at_any_step_vacuum_is_finished_by_recovery(spark, db, monkeypatch, step):
    t, saved = _table_with_history(spark, db, 3, retain_versions=5)

    def die(at: str) -> None:
        if at == step:
            raise Crash(at)

    monkeypatch.setattr(faults, "fault_point", die)
    with pytest.raises(Crash):
        vacuum(spark, t, retain_versions=1, force=True)
    monkeypatch.undo()
    assert rows(spark, t) == saved[3]  # a vacuum changes no row at any step
    recover(spark, t)
    assert _kept(spark, t) == [3]
    assert [(h["version"], h["operation"], h["applied"]) for h in history(spark, t)][0] == (4, "VACUUM", True)
    assert _read(spark, t, 2) == saved[2]


@pytest.mark.parametrize("step", ["expire_0", "before_applied"])
def test_a_merge_killed_while_it_expires_is_finished_by_recovery(spark, db, monkeypatch, step):
    t, saved = _table_with_history(spark, db, 2, retain_versions=1)
    assert _kept(spark, t) == [2]

    def die(at: str) -> None:
        if at == step:
            raise Crash(at)

    monkeypatch.setattr(faults, "fault_point", die)
    src = source_view(spark, f"{db}_m3", "id long, v string", [(1, "three")])
    with pytest.raises(Crash):
        merge(spark, t, src, UPSERT, auto_compact=False)
    monkeypatch.undo()
    recover(spark, t)
    assert _kept(spark, t) == [3]
    assert rows(spark, t) == sorted([r for r in saved[2] if r[0] != 1] + [(1, "three")])
    assert _read(spark, t, 2) == saved[2]
