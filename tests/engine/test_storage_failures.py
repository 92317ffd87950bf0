"""What the filesystem holds or refuses, reported as MergeErrors naming the file (storage.py).

A stray file in a table's folder (``notes.csv``) is read as table data by every engine; a full
disk refuses the journal entry. Neither may surface as a raw pyarrow, py4j or OS error, and a
failed write leaves no temporary file behind.
"""

from __future__ import annotations

import os
import resource
import signal
from collections.abc import Iterator

import pytest

from dbt.adapters.rowmerge.merge import StorageError, UnreadableFileError, history, start_history
from dbt.adapters.rowmerge.merge import storage as storage_module
from tests.engine.helpers import UPSERT, create_table, folder_digest, merge, rows, source_view, table_dir

NOTES = b"a,b\n1,2\n"


@pytest.mark.parametrize(
    ("fmt", "journal", "partitioned"),
    [("parquet", True, False), ("parquet", False, False), ("orc", True, False), ("parquet", True, True)],
    ids=["parquet", "parquet-first-merge", "orc", "parquet-partition-folder"],
)
def test_storage_stray_file_in_the_table_folder_is_named(spark, db, fmt, journal, partitioned):
    t = f"{db}.t"
    parts = ["p"] if partitioned else []
    ddl = "id long, v string" + (", p int" if partitioned else "")
    data = [[(1, "a", 1), (2, "b", 1)]] if partitioned else [[(1, "a"), (2, "b")]]
    create_table(spark, t, ddl, data, partition_by=parts, fmt=fmt)
    if journal:
        start_history(spark, t)
    folder = table_dir(spark, t)
    stray = os.path.join(folder, "p=1" if partitioned else "", "notes.csv")
    with open(stray, "wb") as fh:
        fh.write(NOTES)
    before = folder_digest(folder)
    src = source_view(spark, f"{db}_s", ddl, [(1, "A", 1)] if partitioned else [(1, "A")])

    with pytest.raises(UnreadableFileError) as raised:
        merge(spark, t, src, UPSERT)
    message = str(raised.value)
    assert raised.value.path.endswith(stray) and stray in message
    assert f"is in a table's folder but cannot be read as {fmt} data" in message
    assert "move it out of the folder (or rename it to start with _ or ." in message
    assert folder_digest(folder) == before

    os.rename(stray, os.path.join(os.path.dirname(stray), "_notes.csv"))  # the fix the message names
    merge(spark, t, src, UPSERT)
    assert rows(spark, t) == ([(1, "A", 1), (2, "b", 1)] if partitioned else [(1, "A"), (2, "b")])


@pytest.fixture
def small_files() -> Iterator[None]:
    """Writes of this process beyond a few bytes fail (EFBIG), as on a full disk."""
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # fail the write, do not kill us
    yield
    signal.signal(signal.SIGXFSZ, previous)


def _failing_writes(limit: int, match: str) -> object:
    """create_local_if_absent that fails part-way through writing files whose path has ``match``."""
    real = storage_module.create_local_if_absent

    def create(path: str, text: str) -> bool:
        if match not in path:
            return real(path, text)
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
        try:
            return real(path, text)
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))

    return create


def _leftovers(folder: str) -> list[str]:
    return sorted(n for _, _, names in os.walk(folder) for n in names if n.endswith(".tmp"))


@pytest.mark.parametrize(
    ("match", "what"),
    [
        ("_rowmerge_log/00000000000000000001.json", "its journal entry"),
        ("_rowmerge_log/00000000000000000001.json", "first merge"),
    ],
    ids=["entry", "entry-and-version-0"],
)
def test_storage_full_disk_while_committing_changes_nothing(spark, db, small_files, monkeypatch, match, what):
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(1, "a"), (2, "b")]])
    if what == "its journal entry":
        start_history(spark, t, "CREATE TABLE", f"{t}__changes")
    folder = table_dir(spark, t)
    before = folder_digest(folder)
    src = source_view(spark, f"{db}_s", "id long, v string", [(1, "A"), (3, "C")])
    monkeypatch.setattr(storage_module, "create_local_if_absent", _failing_writes(64, match))

    with pytest.raises(StorageError) as raised:
        merge(spark, t, src, UPSERT)
    message = str(raised.value)
    assert f"its journal entry file:{folder}/{match} could not be written" in message
    assert "File too large" in message and "Nothing was changed" in message
    assert _leftovers(folder) == []
    after = folder_digest(folder)
    if what == "first merge":  # version 0 (the table as found) may be written first: it changes no row
        after = {k: v for k, v in (after or {}).items() if "00000000000000000000" not in k}
    assert after == before
    assert rows(spark, t) == [(1, "a"), (2, "b")]

    monkeypatch.undo()
    merge(spark, t, src, UPSERT)
    assert rows(spark, t) == [(1, "A"), (2, "b"), (3, "C")]
    assert [v["version"] for v in history(spark, t)] == [1, 0]


def test_storage_full_disk_while_taking_the_lock_changes_nothing(spark, db, small_files, monkeypatch):
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(1, "a")]])
    start_history(spark, t)
    folder = table_dir(spark, t)
    before = folder_digest(folder)
    monkeypatch.setattr(storage_module, "create_local_if_absent", _failing_writes(16, "/_rowmerge_log/lock/"))
    with pytest.raises(StorageError, match=f"MERGE into {t} failed: the filesystem refused a write"):
        merge(spark, t, source_view(spark, f"{db}_s", "id long, v string", [(1, "A")]), UPSERT)
    assert _leftovers(folder) == []
    assert folder_digest(folder) == before
