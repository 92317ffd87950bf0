"""Applying a commit when the filesystem refuses a step (journal/ ``Journal.apply``).

Hadoop's ``delete`` and ``rename`` report failure by returning false, not by raising. A
replaced file that stays next to its rewritten copy duplicates rows, so apply checks every
result: a step the storage reports as not done is done only if its effect is there (an
earlier replay did it); otherwise the merge stops with ``MergeCommittedError`` naming the
file, the entry stays unapplied and recovery retries it. Where the filesystem can tell
cheaply (local files, HDFS), a file the commit cannot delete is found before the commit point
and nothing is changed.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pyspark.sql import SparkSession

from dbt.adapters.rowmerge.merge import (
    JournalError,
    MergeCommittedError,
    StorageError,
    history,
    recover,
)
from dbt.adapters.rowmerge.merge import run as run_module
from dbt.adapters.rowmerge.merge.storage import HadoopStorage
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

Refusal = Callable[[str, str], bool]  # (operation, path) -> refuse it


class RefusingStorage(HadoopStorage):
    """Hadoop's storage, except that an operation ``refuse`` picks reports failure (returns
    false) without acting, as Hadoop does when the filesystem refuses it."""

    refuse: Refusal = staticmethod(lambda op, path: False)  # type: ignore[assignment]

    def delete(self, path: str, recursive: bool = False) -> bool:
        if RefusingStorage.refuse("delete", path):
            return False
        return super().delete(path, recursive)

    def rename(self, src: str, dst: str) -> bool:
        if RefusingStorage.refuse("rename", dst):
            return False
        return super().rename(src, dst)


@pytest.fixture
def refusing(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Refusal], None]]:
    """Make the engine's storage refuse what the given predicate picks (``set`` it again to
    change or lift the refusal)."""
    monkeypatch.setattr(run_module, "storage_for", lambda spark: RefusingStorage(spark))

    def set_refusal(refuse: Refusal) -> None:
        RefusingStorage.refuse = staticmethod(refuse)  # type: ignore[assignment]

    yield set_refusal
    set_refusal(lambda op, path: False)


def _table(spark: SparkSession, db: str) -> tuple[str, str]:
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(1, "a"), (2, "b")], [(3, "c")]])
    run_module.start_history(spark, t, "CREATE TABLE", f"{t}__changes")
    return t, source_view(spark, f"{db}_s", "id long, v string", [(1, "A"), (4, "D")])


def _feed(spark: SparkSession, name: str) -> list[tuple[Any, ...]]:
    spark.catalog.refreshTable(name)
    return sorted(
        (r["id"], r["v"], r["_change_type"], r["_commit_version"]) for r in spark.table(name).collect()
    )


AFTER = [(1, "A"), (2, "b"), (3, "c"), (4, "D")]
AFTER_FEED = [(1, "A", "update_postimage", 1), (1, "a", "update_preimage", 1), (4, "D", "insert", 1)]


def _applied(spark: SparkSession, table: str) -> bool:
    return bool(history(spark, table, limit=1)[0]["applied"])


@pytest.mark.parametrize("retained", [False, True], ids=["deleted", "retained"])
def test_apply_delete_refused_stops_naming_the_file_and_recovery_finishes(spark, db, refusing, retained):
    """A replaced file is deleted (retention off) or moved into ``retained/1/`` (the default
    retention); either refused stops the apply, naming the file."""
    t, src = _table(spark, db)
    [touched] = files_of(spark, t, "id = 1")
    name = os.path.basename(touched)
    if retained:
        refusing(lambda op, path: op == "rename" and f"/_rowmerge_log/retained/{1:020d}/{name}" in path)
        problem = f"could not move file:{touched}, which version 1 replaces, to "
    else:
        refusing(lambda op, path: op == "delete" and path.endswith(name))
        problem = f"could not delete file:{touched}, which version 1 replaces"
    extra = {} if retained else {"retain_versions": 0}

    with pytest.raises(MergeCommittedError) as raised:
        merge(spark, t, src, UPSERT, change_data_feed={"table": f"{t}__changes"}, **extra)
    assert problem in str(raised.value)
    assert raised.value.version == 1
    assert not _applied(spark, t)
    # Stuck between the two: the replaced file's rows are still read next to their new versions.
    assert rows(spark, t) == sorted([*AFTER, (1, "a"), (2, "b")])

    with pytest.raises(JournalError, match="Cannot finish the interrupted commit of version 1") as again:
        recover(spark, t)
    assert problem in str(again.value)
    assert not _applied(spark, t)

    refusing(lambda op, path: False)
    assert recover(spark, t).rolled_forward == [1]
    assert rows(spark, t) == AFTER
    assert _feed(spark, f"{t}__changes") == AFTER_FEED
    assert _applied(spark, t)
    kept = os.path.join(table_dir(spark, t), "_rowmerge_log", "retained", f"{1:020d}", name)
    assert os.path.exists(kept) == retained


def test_apply_rename_refused_stops_naming_the_file_and_recovery_finishes(spark, db, refusing):
    t, src = _table(spark, db)
    refusing(lambda op, path: op == "rename" and "/_rowmerge_log/" not in path)

    with pytest.raises(MergeCommittedError, match="could not move file:.*/_rowmerge_log/staging/") as raised:
        merge(spark, t, src, UPSERT, change_data_feed={"table": f"{t}__changes"})
    assert "the storage reported the move as not done" in str(raised.value)
    assert not _applied(spark, t)
    # Nothing was moved into place, so nothing was deleted either: readers see version 0.
    assert rows(spark, t) == [(1, "a"), (2, "b"), (3, "c")]

    with pytest.raises(JournalError, match="could not move"):
        recover(spark, t)

    refusing(lambda op, path: False)
    assert recover(spark, t).rolled_forward == [1]
    assert rows(spark, t) == AFTER
    assert _feed(spark, f"{t}__changes") == AFTER_FEED


def test_apply_applied_marker_refused_leaves_the_version_for_recovery(spark, db, refusing, monkeypatch):
    t, src = _table(spark, db)
    real = RefusingStorage.create_if_absent

    def create(self: RefusingStorage, path: str, text: str) -> bool:
        if path.endswith("00000000000000000001.applied") and RefusingStorage.refuse("create", path):
            return False
        return real(self, path, text)

    monkeypatch.setattr(RefusingStorage, "create_if_absent", create)
    refusing(lambda op, path: op == "create")
    with pytest.raises(MergeCommittedError, match=r"could not create .*00000000000000000001\.applied"):
        merge(spark, t, src, UPSERT, change_data_feed={"table": f"{t}__changes"})
    assert rows(spark, t) == AFTER  # every file step is done: only the marker is missing
    assert not _applied(spark, t)

    refusing(lambda op, path: False)
    assert recover(spark, t).rolled_forward == [1]
    assert rows(spark, t) == AFTER
    assert _feed(spark, f"{t}__changes") == AFTER_FEED


def test_apply_delete_reported_false_but_done_is_accepted(spark, db, refusing):
    """A replay's delete of a file an earlier attempt removed returns false: not an error."""
    t, src = _table(spark, db)
    [touched] = files_of(spark, t, "id = 1")

    def delete_then_report_false(op: str, path: str) -> bool:
        if op == "delete" and path.endswith(os.path.basename(touched)):
            os.remove(touched)  # done, but reported as not done
            return True
        return False

    refusing(delete_then_report_false)
    assert merge(spark, t, src, UPSERT).version == 1
    assert rows(spark, t) == AFTER
    assert _applied(spark, t)


# -- found before the commit point: an immutable file --------------------------------------------


def _make_undeletable(path: str) -> Callable[[], None]:
    """Make ``path`` undeletable the way this machine allows, with a real filesystem refusal:
    the immutable attribute as root (even root cannot delete it), a read-only folder otherwise.
    Returns the undo."""
    if os.geteuid() == 0:
        done = subprocess.run(["chattr", "+i", path], capture_output=True, text=True)
        assert done.returncode == 0, f"chattr +i is needed to test as root: {done.stderr}"
        return lambda: subprocess.run(["chattr", "-i", path], check=True)
    folder = os.path.dirname(path)
    mode = os.stat(folder).st_mode
    os.chmod(folder, 0o555)
    return lambda: os.chmod(folder, mode)


def test_merge_refuses_before_committing_when_a_replaced_file_cannot_be_deleted(spark, db):
    t, src = _table(spark, db)
    [touched] = files_of(spark, t, "id = 1")
    folder = table_dir(spark, t)
    undo = _make_undeletable(touched)
    try:
        before = folder_digest(folder), folder_digest(table_dir(spark, f"{t}__changes"))
        with pytest.raises(StorageError) as raised:
            merge(spark, t, src, UPSERT, change_data_feed={"table": f"{t}__changes"})
        after = folder_digest(folder), folder_digest(table_dir(spark, f"{t}__changes"))
    finally:
        undo()
    message = str(raised.value)
    assert f"MERGE into {t} refused" in message and f"file:{touched}" in message
    assert "Nothing was changed" in message
    assert ("immutable" in message) if os.geteuid() == 0 else ("may not write" in message)
    assert after == before
    assert [v["version"] for v in history(spark, t)] == [0]

    assert merge(spark, t, src, UPSERT, change_data_feed={"table": f"{t}__changes"}).version == 1
    assert rows(spark, t) == AFTER
    assert _feed(spark, f"{t}__changes") == AFTER_FEED


def test_storage_removal_problem_on_hadoop_permission_check(spark, tmp_path):
    """HDFS answers whether a folder is writable (FileSystem.access); the same call on the local
    filesystem through Hadoop checks the folder's permission bits as HDFS would."""
    storage = HadoopStorage(spark)
    folder = tmp_path / "ro"
    folder.mkdir()
    os.chmod(folder, 0o555)
    try:
        problem = storage.access_problem(f"file:{folder}")
    finally:
        os.chmod(folder, 0o755)
    assert problem is not None and f"may not write to its folder file:{folder}" in problem
    assert storage.access_problem(f"file:{folder}") is None
