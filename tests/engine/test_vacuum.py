"""Expiry of retained files (journal/retention.py, vacuum.py): a version that commits deletes
the retained folders its table's retention no longer keeps; ``vacuum`` deletes them on demand
(with a shorter retention this once, refusing files of versions current less than an hour ago
unless forced) as a VACUUM version; every version still kept reads back and restores, one
that is gone names the oldest readable version; killed at any step, nothing kept is lost."""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest

from dbt.adapters.rowmerge.merge import (
    JournalError,
    MergeSpecError,
    UnsafeVacuumError,
    as_of,
    faults,
    history,
    recover,
    restore,
    vacuum,
)
from tests.engine.helpers import UPSERT, create_table, folder_digest, merge, rows, source_view, table_dir
from tests.sampling import long_except

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
        "numVersionsFolded": 3,
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
        UnsafeVacuumError,
        match=r"refused: it would delete the files of version\(s\) 0, 1, current less than 1 hour",
    ) as err:
        vacuum(spark, t, retain_versions=0)
    assert "`retain_versions` = 0" in str(err.value) and "force=True" in str(err.value)
    assert folder_digest(table_dir(spark, t)) == state
    # a dry run lists what it would delete, and says the vacuum itself would be refused
    dry = vacuum(spark, t, retain_versions=0, dry_run=True)
    assert (dry.expired, dry.files_deleted) == ((1, 2), 2)
    assert len([p for p in dry.files if "/retained/" in p]) == 2
    assert dry.refused is not None and "version(s) 0, 1" in dry.refused
    assert (
        dry.summary().endswith("Without force it would be " + dry.refused)
        and "would delete 2 retained file(s)" in dry.summary()
    )
    assert folder_digest(table_dir(spark, t)) == state
    assert vacuum(spark, t, retain_versions=0, dry_run=True, force=True).refused is None


def test_dry_run_lists_the_files_and_bytes_and_changes_nothing(spark, db):
    t, _ = _table_with_history(spark, db, 2, retain_versions=5)
    root = table_dir(spark, t)
    state = folder_digest(root)
    done = vacuum(spark, t, retain_versions=1, dry_run=True, force=True)
    assert (done.dry_run, done.version, done.expired, done.files_deleted) == (True, None, (1,), 1)
    retained = [p for p in done.files if "/retained/" in p]
    assert len(retained) == 1 and f"/{LOG}/retained/{1:020d}/" in retained[0]
    assert done.bytes_deleted == os.path.getsize(retained[0].split(":", 1)[-1].removeprefix("//"))
    assert "would delete 1 retained file(s)" in done.summary() and done.folded == 2
    assert folder_digest(root) == state
    # it listed exactly what the vacuum then deletes: the retained file and the journal's
    # files of the versions the base folds
    vacuum(spark, t, retain_versions=1, force=True)
    after = folder_digest(root)
    assert after is not None and state is not None
    # (a local file system's hidden checksum files go with the files they check)
    removed = state.keys() - after.keys()
    gone = {os.path.join(root, rel) for rel in removed if not os.path.basename(rel).startswith(".")}
    listed = {p.split(":", 1)[-1].removeprefix("//") for p in done.files}
    assert gone == listed and len(listed) > 1


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


VACUUM_STEPS = [
    "vacuum_base",
    "vacuum_entry",
    "vacuum_expire_0",
    "vacuum_expire_1",
    "vacuum_fold_json",
    "vacuum_fold_applied",
    "vacuum_fold_stats_json",
    "vacuum_before_applied",
    "vacuum_applied",
]


# tests/reliability/test_fault_vacuum.py kills a process after every one of these steps.
@pytest.mark.parametrize("step", long_except(VACUUM_STEPS, ["vacuum_base", "vacuum_entry", "vacuum_applied"]))
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
    # before recovery, every version a reader may still ask for reads back
    for v in (2, 3):
        assert _read(spark, t, v) == saved[v]
    recover(spark, t)
    committed = step != "vacuum_base"
    assert _kept(spark, t) == ([3] if committed else [1, 2, 3])
    top = [(h["version"], h["operation"], h["applied"]) for h in history(spark, t)]
    assert top[0] == ((4, "VACUUM", True) if committed else (3, "MERGE", True))
    assert _log_versions(spark, t) == ([2, 3, 4] if committed else [0, 1, 2, 3])
    for v in (2, 3):
        assert _read(spark, t, v) == saved[v]
    # the table merges on from either side
    src = source_view(spark, f"{db}_after", "id long, v string", [(2, "after")])
    done = merge(spark, t, src, UPSERT, auto_compact=False)
    assert done.version == (5 if committed else 4)
    assert rows(spark, t) == sorted([r for r in saved[3] if r[0] != 2] + [(2, "after")])


def _log_versions(spark, t: str) -> list[int]:
    """The versions the log folder has a file for (entries, markers, checkpoints, bases)."""
    names = os.listdir(os.path.join(table_dir(spark, t), LOG))
    return sorted({int(n.split(".")[0]) for n in names if n[:1].isdigit()})


def test_vacuum_folds_old_entries_into_a_base_the_journal_starts_from(spark, db):
    from dbt.adapters.rowmerge.merge import table_stats

    t, saved = _table_with_history(spark, db, 6, retain_versions=2)
    stats = table_stats(spark, t)
    log = os.path.join(table_dir(spark, t), LOG)
    up_to_4 = [n for n in os.listdir(log) if n[:20].isdigit() and int(n[:20]) <= 4]
    folded_bytes = sum(os.path.getsize(os.path.join(log, n)) for n in up_to_4)
    done = vacuum(spark, t)
    # versions 4 to 6 stay readable: 0-4 become the base of version 4
    assert (done.version, done.oldest_readable, done.folded, done.expired) == (7, 4, 5, ())
    assert done.journal_bytes == folded_bytes > 0
    log = sorted(os.listdir(os.path.join(table_dir(spark, t), LOG)))
    assert [n for n in log if n.endswith(".json")] == [
        f"{4:020d}.base.json",
        f"{5:020d}.json",
        f"{6:020d}.json",
        f"{7:020d}.json",
    ]
    rows_of = [(h["version"], h["operation"]) for h in history(spark, t)]
    assert rows_of == [(7, "VACUUM"), (6, "MERGE"), (5, "MERGE"), (4, "BASE")]
    base = history(spark, t)[-1]
    assert base["metrics"]["foldedVersions"] == 5 and base["metrics"]["numOutputRows"] == len(saved[4])
    assert table_stats(spark, t) == {**stats, "version": 7}
    for v in (4, 5, 6):
        assert _read(spark, t, v) == saved[v]
    with pytest.raises(JournalError, match="a vacuum folded the versions before 4"):
        as_of(spark, t, version=3)
    # merges go on from the base (statistics, file skipping and the version counter), and a
    # second vacuum folds the first base into a new one
    for i in (8, 9, 10):
        src = source_view(spark, f"{db}_n{i}", "id long, v string", [(1, f"n{i}"), (100 + i, "new")])
        result = merge(spark, t, src, UPSERT, auto_compact=False)
        assert result.version == i
        assert result.metrics["numTargetFilesRemoved"] == 1  # only the file of id 1
    assert vacuum(spark, t).oldest_readable == 8
    assert [h["operation"] for h in history(spark, t)][-1] == "BASE"
    assert _read(spark, t, 8) == sorted([r for r in saved[6] if r[0] != 1] + [(1, "n8"), (108, "new")])
    assert not os.path.exists(os.path.join(table_dir(spark, t), LOG, f"{4:020d}.base.json"))


def test_vacuums_alone_do_not_move_retention_on(spark, db):
    """A vacuum changes no row and no file: run again and again on a table that no longer
    merges, it commits nothing more and every version retention keeps stays readable (were its
    own versions counted, each vacuum would fold and delete one more real version)."""
    t, saved = _table_with_history(spark, db, 6, retain_versions=2)
    assert (vacuum(spark, t).version, vacuum(spark, t).version) == (7, None)
    for _ in range(2):
        again = vacuum(spark, t)
        assert (again.version, again.oldest_readable, again.folded, again.expired) == (None, 4, 0, ())
        assert "nothing past retention to delete" in again.summary()
    assert history(spark, t)[0]["version"] == 7
    for v in (4, 5, 6):
        assert _read(spark, t, v) == saved[v]
    # a merge moves it on by one version, as every version that changes the table does
    src = source_view(spark, f"{db}_after", "id long, v string", [(1, "late")])
    assert merge(spark, t, src, UPSERT, auto_compact=False).version == 8
    assert (vacuum(spark, t).version, vacuum(spark, t).version) == (9, None)
    assert vacuum(spark, t).oldest_readable == 6
    assert _read(spark, t, 6) == saved[6]


def _vacuum_stopped_after_its_base(spark, t: str, monkeypatch, **arguments) -> None:
    """A vacuum of ``t`` that crashes once its base is written, before its entry commits it."""

    def die(at: str) -> None:
        if at == "vacuum_base":
            raise Crash(at)

    monkeypatch.setattr(faults, "fault_point", die)
    with pytest.raises(Crash):
        vacuum(spark, t, **arguments)
    monkeypatch.undo()


def test_a_base_no_vacuum_entry_commits_is_ignored_and_replaced(spark, db, monkeypatch):
    t, saved = _table_with_history(spark, db, 3, retain_versions=1)

    _vacuum_stopped_after_its_base(spark, t, monkeypatch)
    leftover = os.path.join(table_dir(spark, t), LOG, f"{2:020d}.base.json")
    assert os.path.exists(leftover)
    assert [h["version"] for h in history(spark, t)] == [3, 2, 1, 0]
    with open(leftover, "w") as fh:  # even damaged, it is not read as the journal's start
        fh.write("{")
    assert [h["version"] for h in history(spark, t)] == [3, 2, 1, 0]
    assert vacuum(spark, t).oldest_readable == 2
    assert [h["operation"] for h in history(spark, t)] == ["VACUUM", "MERGE", "BASE"]
    assert _read(spark, t, 2) == saved[2]


def test_a_later_vacuum_deletes_a_leftover_base_newer_than_its_own(spark, db, monkeypatch):
    t, saved = _table_with_history(spark, db, 3, retain_versions=2)

    _vacuum_stopped_after_its_base(spark, t, monkeypatch, retain_versions=1, force=True)  # folds up to 2
    log = os.path.join(table_dir(spark, t), LOG)
    assert os.path.exists(os.path.join(log, f"{2:020d}.base.json"))
    assert vacuum(spark, t).oldest_readable == 1  # the table's own retention folds up to 1
    assert sorted(n for n in os.listdir(log) if n.endswith(".base.json")) == [f"{1:020d}.base.json"]
    assert [h["operation"] for h in history(spark, t)] == ["VACUUM", "MERGE", "MERGE", "BASE"]
    assert [_read(spark, t, v) for v in (1, 2, 3)] == saved[1:4]


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


def _feed_versions(spark, t: str) -> list[int]:
    """The versions the change table has rows of (read unfiltered: see test_change_feed)."""
    spark.catalog.refreshTable(f"{t}__changes")
    return sorted({r[0] for r in spark.table(f"{t}__changes").select("_commit_version").collect()})


def test_vacuum_drops_change_feed_versions_past_change_feed_retain_versions(spark, db):
    from dbt.adapters.rowmerge.merge import changes_range

    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(1, "a")], [(2, "b")]])
    for i in range(1, 6):
        src = source_view(spark, f"{db}_f{i}", "id long, v string", [(1, f"v{i}"), (10 + i, "new")])
        merge(spark, t, src, UPSERT, auto_compact=False, change_data_feed={"table": f"{t}__changes"})
    assert _feed_versions(spark, t) == [1, 2, 3, 4, 5]
    changes = os.path.join(table_dir(spark, f"{t}__changes"))
    dry = vacuum(spark, t, change_feed_retain_versions=2, dry_run=True)
    assert (dry.feed_dropped, dry.version) == (3, None) and _feed_versions(spark, t) == [1, 2, 3, 4, 5]
    assert [p.split(":", 1)[-1].removeprefix("//") for p in dry.files if "_commit_version=" in p] == [
        os.path.join(changes, f"_commit_version={k}") for k in (1, 2, 3)
    ]
    dropped_bytes = sum(
        os.path.getsize(os.path.join(folder, n))
        for k in (1, 2, 3)
        for folder, _, names in os.walk(os.path.join(changes, f"_commit_version={k}"))
        for n in names
        if not n.startswith((".", "_"))
    )
    assert dry.feed_bytes == dropped_bytes > 0
    done = vacuum(spark, t, change_feed_retain_versions=2)
    assert (done.version, done.feed_dropped, done.feed_bytes) == (6, 3, dropped_bytes)
    assert "3 change-feed version(s)" in done.summary()
    assert _feed_versions(spark, t) == [4, 5]
    assert sorted(n for n in os.listdir(changes) if n.startswith("_commit")) == [
        "_commit_version=4",
        "_commit_version=5",
    ]
    assert history(spark, t)[0]["metrics"]["feedKeptFrom"] == 4
    # a consumer asking for dropped versions is told, not silently given less
    with pytest.raises(ValueError, match="no longer holds versions before 4: a vacuum dropped them"):
        changes_range(spark, t, start_version=2)
    assert changes_range(spark, t, start_version=4).start == 4
    # a consumer that has read everything (README's, in its quiet branch) reads from the next
    # version: nothing dropped is in that range
    assert changes_range(spark, t, start_version=7).start == 7
    # later merges feed on; a fold keeps what was dropped on record
    src = source_view(spark, f"{db}_f7", "id long, v string", [(2, "seven")])
    merge(spark, t, src, UPSERT, auto_compact=False, change_data_feed={"table": f"{t}__changes"})
    assert _feed_versions(spark, t) == [4, 5, 7]
    vacuum(spark, t, retain_versions=1, force=True)
    assert [h["operation"] for h in history(spark, t)][-1] == "BASE"
    with pytest.raises(ValueError, match="no longer holds versions before 4"):
        changes_range(spark, t, start_version=3)


def test_change_feed_retain_versions_must_be_at_least_one(spark, db):
    t, _ = _table_with_history(spark, db, 1)
    with pytest.raises(
        MergeSpecError, match="`change_feed_retain_versions` must be a whole number >= 1, got 0"
    ):
        vacuum(spark, t, change_feed_retain_versions=0)


def test_a_folded_full_refresh_without_change_rows_still_stops_a_feed_read_across_it(spark, db):
    from dbt.adapters.rowmerge.merge import changes_range, replace_table

    t = f"{db}.t"
    feed = {"table": f"{t}__changes"}
    create_table(spark, t, "id long, v string", [[(1, "a")], [(2, "b")]])
    src = source_view(spark, f"{db}_r1", "id long, v string", [(1, "x")])
    merge(spark, t, src, UPSERT, change_data_feed=feed)
    replace_table(
        spark,
        t,
        spark.createDataFrame([(9, "z")], "id long, v string"),
        change_data_feed=feed["table"],
        feed_on_replace=False,
    )
    for i in range(3, 6):
        src = source_view(spark, f"{db}_r{i}", "id long, v string", [(9, f"v{i}")])
        merge(spark, t, src, UPSERT, auto_compact=False, change_data_feed=feed)
    done = vacuum(spark, t, retain_versions=1, force=True)
    assert done.folded == 5  # versions 0-4 (the replace is version 2) are now the base
    base = history(spark, t)[-1]
    assert (base["operation"], base["version"], base["metrics"]["feedSkippedVersions"]) == ("BASE", 4, [2])
    with pytest.raises(ValueError, match="version 2 of .* is a full refresh .* that wrote no change rows"):
        changes_range(spark, t, start_version=1)
    assert changes_range(spark, t, start_version=3).start == 3


def test_vacuum_drops_feed_versions_where_the_catalog_has_the_change_table_now(spark, db, tmp_path):
    """The change table moved (copied, then its location set to the copy): the versions are
    dropped from the copy, and the folder the entries wrote to is left alone."""
    t, changes = f"{db}.t", f"{db}.t__changes"
    create_table(spark, t, "id long, v string", [[(1, "a")]])
    for i in range(1, 4):
        src = source_view(spark, f"{db}_m{i}", "id long, v string", [(1, f"v{i}")])
        merge(spark, t, src, UPSERT, auto_compact=False, change_data_feed={"table": changes})
    old, new = table_dir(spark, changes), str(tmp_path / "moved" / "t__changes")
    shutil.copytree(old, new)
    spark.sql(f"ALTER TABLE {changes} SET LOCATION '{new}'")
    for k in (1, 2, 3):
        spark.sql(
            f"ALTER TABLE {changes} PARTITION (_commit_version={k}) SET LOCATION '{new}/_commit_version={k}'"
        )
    before = folder_digest(old)

    done = vacuum(spark, t, change_feed_retain_versions=1)
    assert done.feed_dropped == 2
    assert sorted(n for n in os.listdir(new) if n.startswith("_commit")) == ["_commit_version=3"]
    assert _feed_versions(spark, t) == [3]
    assert folder_digest(old) == before
