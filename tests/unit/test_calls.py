"""calls: what a count includes (its own thread, threads that join it, nested counts) and what
it leaves out (other threads, the operations a storage operation is built from)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from dbt.adapters.rowmerge.merge import calls
from dbt.adapters.rowmerge.merge.storage_arrow import ArrowStorage


def test_a_storage_operation_counts_once_whatever_it_is_built_from(tmp_path: Path) -> None:
    storage = ArrowStorage()
    path = f"file:{tmp_path}/entry.json"
    with calls.counting(None) as counts:
        assert storage.create_if_absent(path, "{}")  # built from writes and renames
        assert storage.exists(path)  # built from status
        assert storage.read_text(path) == "{}"
        storage.delete(path)
    assert (counts.py4j, counts.catalog, counts.filesystem, counts.journal_bytes) == (0, 0, 4, 2)


def test_outside_a_count_nothing_is_counted(tmp_path: Path) -> None:
    storage = ArrowStorage()
    storage.write_text(f"file:{tmp_path}/x", "x")
    calls.catalog_call()
    with calls.counting(None) as counts:
        pass
    assert (counts.catalog, counts.filesystem) == (0, 0)


def test_threads_that_join_the_count_add_to_it_and_others_do_not(tmp_path: Path) -> None:
    storage = ArrowStorage()
    paths = [f"file:{tmp_path}/{i}" for i in range(6)]
    for p in paths:
        storage.write_text(p, "x")
    with calls.counting(None) as counts:
        with ThreadPoolExecutor(3) as pool:
            list(pool.map(calls.joined(storage.read_text), paths))  # 6 counted
            list(pool.map(storage.read_text, paths))  # a pool's threads start without the count
        other = threading.Thread(target=lambda: storage.read_text(paths[0]))
        other.start()
        other.join()
    assert counts.filesystem == 6


def test_a_nested_count_adds_to_the_one_around_it() -> None:
    with calls.counting(None) as outer:
        calls.catalog_call()
        with calls.counting(None) as inner:
            calls.catalog_call()
            calls.catalog_call()
        calls.catalog_call()
    assert (inner.catalog, outer.catalog) == (2, 4)
