"""Statistics checkpoints (journal/): a merge folds file statistics from the newest valid
checkpoint and the entries after it, never from every entry of a long history, and a
checkpoint it cannot trust (damaged, or folded from another journal's entries) only costs
reading the entries again: file skipping stays exact.

The interval is 2 here (20 in the product), so a few merges cross several checkpoints.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dbt.adapters.rowmerge.merge import dry_run, start_history
from dbt.adapters.rowmerge.merge import journal as journal_module
from dbt.adapters.rowmerge.merge.journal import checkpoint as checkpoint_module
from dbt.adapters.rowmerge.merge.storage import STORAGE_CONF
from tests.engine.helpers import UPSERT, file_snapshot, files_of, merge, rows, session_conf, source_view
from tests.engine.test_file_skipping import four_files, garbled
from tests.engine.test_journal import log_dir

SCHEMA = "id long, v string, p int"
ORIGINAL = [(1, "a", 1), (2, "b", 1), (3, "c", 1), (4, "d", 1), (5, "e", 2), (6, "f", 2), (7, "g", 2)]


@pytest.fixture(autouse=True, params=["hadoop", "arrow"])
def storage_kind(spark, request, monkeypatch) -> Iterator[str]:
    """On both storages (session mode's Hadoop, and pyarrow.fs as a Connect client uses)."""
    monkeypatch.setattr(checkpoint_module, "CHECKPOINT_INTERVAL", 2)
    with session_conf(spark, {STORAGE_CONF: request.param}):
        yield request.param


def checkpoint(spark, t: str, version: int) -> Path:
    return log_dir(spark, t) / f"{version:020d}.stats.json"


def checkpoints(spark, t: str) -> list[str]:
    return sorted(p.name for p in log_dir(spark, t).glob("*.stats.json"))


def folded(spark, t: str, upto: int) -> dict[str, dict[str, Any]]:
    """What entries 0..upto leave in place (path -> the file's entry), read by hand."""
    out: dict[str, dict[str, Any]] = {}
    for v in range(upto + 1):
        e = json.loads((log_dir(spark, t) / f"{v:020d}.json").read_text())
        for f in e["removed"]:
            out.pop(f["path"], None)
        for f in e["added"]:
            out[f["path"]] = {k: f[k] for k in ("path", "size", "rows", "stats")}
    return out


def upsert(spark, db: str, t: str, name: str, data: list[tuple[Any, ...]]):
    return merge(spark, t, source_view(spark, f"{db}_{name}", SCHEMA, data), UPSERT)


def update_version(spark, db: str, t: str, version: int) -> None:
    """One merge that commits ``version`` (it rewrites the file of id 7)."""
    result = upsert(spark, db, t, f"v{version}", [(7, f"g{version}", 2)])
    assert result.version == version


@pytest.fixture
def parsed_versions(monkeypatch) -> list[int]:
    """The versions whose entries are parsed (each read of an entry ends in Entry.parse)."""
    seen: list[int] = []
    parse = journal_module.Entry.parse

    def spy(text: str, version: int) -> journal_module.Entry:
        seen.append(version)
        return parse(text, version)

    monkeypatch.setattr(journal_module.Entry, "parse", staticmethod(spy))
    return seen


def test_merges_save_checkpoints_and_fold_from_the_newest(spark, db, parsed_versions) -> None:
    t = four_files(spark, db, partitioned=False)
    for v in (1, 2):
        update_version(spark, db, t, v)
    assert checkpoints(spark, t) == []  # version 2's merge read versions 0 and 1
    update_version(spark, db, t, 3)  # read 0..2: checkpoint 2 is due
    assert checkpoints(spark, t) == [f"{2:020d}.stats.json"]
    saved = json.loads(checkpoint(spark, t, 2).read_text())
    assert saved["format"] == 1 and saved["version"] == 2
    entry_2 = (log_dir(spark, t) / f"{2:020d}.json").read_bytes()
    assert saved["entry_sha256"] == hashlib.sha256(entry_2).hexdigest()
    assert {f["path"]: f for f in saved["files"]} == folded(spark, t, 2)

    # Versions 0 and 1 are never read again: the fold starts at checkpoint 2. The files
    # without key 3 are unreadable, so statistics from the checkpoint must rule them out.
    parsed_versions.clear()
    keep = files_of(spark, t, "id = 3")
    with garbled([p for p in file_snapshot(spark, t) if p not in keep]):
        result = upsert(spark, db, t, "s4", [(3, "C", 1), (100, "z", 2)])
    assert result.version == 4
    assert result.metrics["numTargetFilesAfterSkipping"] == 1
    assert 0 not in parsed_versions and 1 not in parsed_versions and 3 in parsed_versions
    assert rows(spark, t) == [*ORIGINAL[:2], (3, "C", 1), *ORIGINAL[3:6], (7, "g3", 2), (100, "z", 2)]
    update_version(spark, db, t, 5)  # read 0..4: checkpoint 4 is due
    assert checkpoints(spark, t) == [f"{2:020d}.stats.json", f"{4:020d}.stats.json"]
    saved = json.loads(checkpoint(spark, t, 4).read_text())
    assert {f["path"]: f for f in saved["files"]} == folded(spark, t, 4)


def _forge(path: Path, sha: str | None = None) -> None:
    """Make the checkpoint at ``path`` claim that no file holds any id (and, with ``sha``,
    that it was folded up to another entry)."""
    saved = json.loads(path.read_text())
    for f in saved["files"]:
        f["stats"]["id"] = {**f["stats"]["id"], "min": 1000, "max": 1000}
    if sha is not None:
        saved["entry_sha256"] = sha
    path.write_text(json.dumps(saved))


def test_a_checkpoint_folded_from_another_journal_is_not_used(spark, db) -> None:
    """A checkpoint names the entry it was folded up to: after a full refresh, or any edit,
    that entry differs and the checkpoint is ignored; had the merge used its statistics here,
    every file would be ruled out and id 3 inserted a second time."""
    t = four_files(spark, db, partitioned=False)
    for v in (1, 2, 3):
        update_version(spark, db, t, v)
    _forge(checkpoint(spark, t, 2), sha=hashlib.sha256(b"another journal's version 2").hexdigest())
    result = upsert(spark, db, t, "s", [(3, "C", 1)])
    assert (result.metrics["numTargetRowsUpdated"], result.metrics["numTargetRowsInserted"]) == (1, 0)
    assert result.metrics["numTargetFilesAfterSkipping"] == 1
    assert [r for r in rows(spark, t) if r[0] == 3] == [(3, "C", 1)]
    # The stale checkpoint was replaced by the fold of this journal's entries.
    saved = json.loads(checkpoint(spark, t, 2).read_text())
    entry_2 = (log_dir(spark, t) / f"{2:020d}.json").read_bytes()
    assert saved["entry_sha256"] == hashlib.sha256(entry_2).hexdigest()
    assert {f["path"]: f for f in saved["files"]} == folded(spark, t, 2)


@pytest.mark.parametrize("damage", ["not json", "[1, 2]", '{"format": 99, "version": 2}', ""])
def test_a_damaged_checkpoint_is_ignored_and_replaced(spark, db, damage: str) -> None:
    t = four_files(spark, db, partitioned=False)
    for v in (1, 2, 3):
        update_version(spark, db, t, v)
    checkpoint(spark, t, 2).write_text(damage)
    result = upsert(spark, db, t, "s", [(5, "E", 2)])
    assert (result.metrics["numTargetRowsUpdated"], result.metrics["numTargetFilesAfterSkipping"]) == (1, 1)
    assert [r for r in rows(spark, t) if r[0] == 5] == [(5, "E", 2)]
    assert {f["path"]: f for f in json.loads(checkpoint(spark, t, 2).read_text())["files"]} == folded(
        spark, t, 2
    )


def test_an_unreadable_entry_is_never_folded_into_a_checkpoint(spark, db) -> None:
    """An entry that cannot be read costs the footers of its files; a checkpoint saved over the
    gap would carry the gap forward, so none is saved."""
    t = four_files(spark, db, partitioned=False)
    for v in (1, 2):
        update_version(spark, db, t, v)
    (log_dir(spark, t) / f"{1:020d}.json").write_text("garbled")  # applied: recovery never reads it
    result = upsert(spark, db, t, "s", [(2, "B", 1)])
    assert (result.version, result.metrics["numTargetRowsUpdated"]) == (3, 1)
    assert result.metrics["numTargetFilesAfterSkipping"] == 1
    assert checkpoints(spark, t) == []


def test_a_dry_run_saves_no_checkpoint(spark, db) -> None:
    t = four_files(spark, db, partitioned=False)
    for v in (1, 2):
        update_version(spark, db, t, v)
    spec = {
        "version": 1,
        "target": t,
        "source": source_view(spark, f"{db}_s", SCHEMA, [(1, "A", 1)]),
        "target_alias": "t",
        "source_alias": "s",
        "on": "t.id = s.id",
        "clauses": UPSERT,
    }
    report = dry_run(spark, spec)
    assert report.files_read == 1
    assert checkpoints(spark, t) == []


def test_a_full_refresh_removes_the_checkpoints(spark, db) -> None:
    t = four_files(spark, db, partitioned=False)
    for v in (1, 2, 3):
        update_version(spark, db, t, v)
    assert checkpoints(spark, t) == [f"{2:020d}.stats.json"]
    start_history(spark, t, "REPLACE TABLE")
    assert checkpoints(spark, t) == []
    assert sorted(p.name for p in log_dir(spark, t).glob("*.json")) == [f"{0:020d}.json"]
    assert rows(spark, t) == sorted([*ORIGINAL[:6], (7, "g3", 2)])
