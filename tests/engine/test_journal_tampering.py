"""Journals edited by hand or by another tool (journal/): refused before anything moves.

Recovery replays entries it did not write in this process, so what an entry or the log
folder says is checked before any file is moved or deleted: a version no change feed can
hold, a path that leaves the table through a symbolic link, a file named like an entry that
no journal wrote. Each is a MergeError naming the file, with the table left as it was.
"""

from __future__ import annotations

import json
import os

import pytest

from dbt.adapters.rowmerge.merge import JournalError, UnsupportedTableError, recover, start_history
from dbt.adapters.rowmerge.merge.journal import MAX_VERSION
from tests.engine.helpers import (
    UPSERT,
    create_table,
    files_of,
    folder_digest,
    merge,
    rows,
    source_view,
    table_dir,
)

ORIGINAL = [(1, "a"), (2, "b")]


def _table(spark, db: str, feed: bool = False) -> tuple[str, str, str]:
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(1, "a"), (2, "b")]])
    start_history(spark, t, "CREATE TABLE", f"{t}__changes" if feed else None)
    return t, table_dir(spark, t), source_view(spark, f"{db}_s", "id long, v string", [(1, "A")])


def _write_entry(folder: str, version: int, entry: dict, applied: bool) -> None:
    log = os.path.join(folder, "_rowmerge_log")
    with open(os.path.join(log, f"{version:020d}.json"), "w") as fh:
        json.dump(
            {"format": 1, "version": version, "timestamp": "2026-01-01T00:00:00.000+00:00", **entry}, fh
        )
    if applied:
        open(os.path.join(log, f"{version:020d}.applied"), "w").close()


def _fence(folder: str, version: int, table: str) -> None:
    entry = {"table": table, "operation": "FENCE", "reason": "x", "added": [], "removed": [], "metrics": {}}
    _write_entry(folder, version, entry, applied=True)


def test_tampering_fence_at_the_largest_version_stops_the_next_merge_before_committing(spark, db):
    t, folder, src = _table(spark, db, feed=True)
    _fence(folder, MAX_VERSION, t)
    before = folder_digest(folder), folder_digest(table_dir(spark, f"{t}__changes"))
    with pytest.raises(JournalError) as raised:
        merge(spark, t, src, UPSERT, change_data_feed={"table": f"{t}__changes"})
    message = str(raised.value)
    assert f"{t} cannot take another version: its journal's newest version is {MAX_VERSION}" in message
    assert f"{MAX_VERSION:020d}.json was written by hand or by another tool" in message
    assert (folder_digest(folder), folder_digest(table_dir(spark, f"{t}__changes"))) == before
    assert rows(spark, t) == ORIGINAL


def test_tampering_the_largest_version_itself_still_commits_with_its_feed(spark, db):
    t, folder, src = _table(spark, db, feed=True)
    _fence(folder, MAX_VERSION - 1, t)
    result = merge(spark, t, src, UPSERT, change_data_feed={"table": f"{t}__changes"})
    assert result.version == MAX_VERSION
    assert rows(spark, t) == [(1, "A"), (2, "b")]
    feed = spark.table(f"{t}__changes").select("id", "_change_type", "_commit_version").collect()
    assert sorted(tuple(r) for r in feed) == [
        (1, "update_postimage", MAX_VERSION),
        (1, "update_preimage", MAX_VERSION),
    ]


def test_tampering_entry_past_the_largest_version_is_a_stray(spark, db):
    t, folder, src = _table(spark, db)
    _fence(folder, MAX_VERSION + 1, t)
    before = folder_digest(folder)
    with pytest.raises(JournalError) as raised:
        merge(spark, t, src, UPSERT)
    stray = f"{MAX_VERSION + 1:020d}"
    assert (
        f"holds 2 file(s) named like journal files that rowmerge did not write: {stray}.applied, {stray}.json"
        in (str(raised.value))
    )
    assert folder_digest(folder) == before


@pytest.mark.parametrize("name", ["7.json", "0001.applied", "000000000000000000001.json", "12.stats.json"])
def test_tampering_stray_log_names_stop_recovery_naming_the_file(spark, db, name):
    t, folder, src = _table(spark, db)
    with open(os.path.join(folder, "_rowmerge_log", name), "w") as fh:
        fh.write("{}")
    before = folder_digest(folder)
    with pytest.raises(JournalError) as raised:
        merge(spark, t, src, UPSERT)
    message = str(raised.value)
    assert f"holds 1 file(s) named like journal files that rowmerge did not write: {name} in " in message
    assert "move them out of that folder" in message and "Nothing was changed" in message
    assert folder_digest(folder) == before
    with pytest.raises(JournalError, match=name.replace(".", r"\.")):
        recover(spark, t)


def test_tampering_unapplied_entry_deleting_through_a_symlink_touches_nothing_outside(spark, db, tmp_path):
    """The issue's repro: `sub` links to a folder outside the table; recovery deleted its file."""
    t, folder, _ = _table(spark, db)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "part-0.parquet").write_bytes(b"precious")
    os.symlink(outside, os.path.join(folder, "sub"))
    entry = {
        "table": t,
        "operation": "MERGE",
        "txn": "1-abc",
        "read_version": 0,
        "added": [],
        "removed": [{"path": f"file:{folder}/sub/part-0.parquet", "size": 8, "rows": 1}],
        "partitions": [],
        "new_columns": [],
        "cdf": None,
        "metrics": {},
    }
    _write_entry(folder, 1, entry, applied=False)
    with pytest.raises(JournalError) as raised:
        recover(spark, t)
    message = str(raised.value)
    assert f"Cannot finish version 1 of {t}: it would move or delete 1 file(s) outside" in message
    assert f"file:{folder}/sub/part-0.parquet (its folder is {outside}, outside {folder})" in message
    assert (outside / "part-0.parquet").read_bytes() == b"precious"


def test_tampering_symlinked_staging_cannot_smuggle_a_file_in(spark, db, tmp_path):
    t, folder, _ = _table(spark, db)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "part-9.parquet").write_bytes(b"not ours")
    staging = os.path.join(folder, "_rowmerge_log", "staging", "1-abc")
    os.makedirs(staging)
    os.symlink(outside, os.path.join(staging, "data"))
    entry = {
        "table": t,
        "operation": "MERGE",
        "txn": "1-abc",
        "read_version": 0,
        "added": [
            {
                "staged": f"file:{staging}/data/part-9.parquet",
                "path": f"file:{folder}/part-9.parquet",
                "size": 8,
            }
        ],
        "removed": [],
        "partitions": [],
        "new_columns": [],
        "cdf": None,
        "metrics": {},
    }
    _write_entry(folder, 1, entry, applied=False)
    with pytest.raises(JournalError, match="outside their table's folder, through a symbolic link"):
        recover(spark, t)
    assert (outside / "part-9.parquet").read_bytes() == b"not ours"
    assert not os.path.exists(os.path.join(folder, "part-9.parquet"))


def test_tampering_partition_folder_linked_out_of_the_table_is_not_rewritten(spark, db, tmp_path):
    """Not a tampered journal: a partition folder that is a link. A merge that would replace a
    file in it is refused before the commit point; the file outside stays."""
    t = f"{db}.p"
    create_table(spark, t, "id long, v string, p int", [[(1, "a", 1)], [(2, "b", 2)]], partition_by=["p"])
    folder = table_dir(spark, t)
    outside = tmp_path / "p2"
    os.rename(os.path.join(folder, "p=2"), outside)
    os.symlink(outside, os.path.join(folder, "p=2"))
    start_history(spark, t)
    [linked] = files_of(spark, t, "p = 2")
    before = {n: (outside / n).read_bytes() for n in os.listdir(outside)}
    src = source_view(spark, f"{db}_s", "id long, v string, p int", [(2, "B", 2)])
    with pytest.raises(UnsupportedTableError) as raised:
        merge(spark, t, src, UPSERT)
    message = str(raised.value)
    assert f"MERGE into {t} refused: it would replace or add" in message
    assert f"file:{linked} (its folder is {outside}, outside {folder})" in message
    assert {n: (outside / n).read_bytes() for n in os.listdir(outside)} == before
    assert rows(spark, t) == [(1, "a", 1), (2, "b", 2)]
