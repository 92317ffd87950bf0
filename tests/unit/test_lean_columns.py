"""lean_columns: call-site recording is off and JVM function lookups are remembered inside merges;
both are restored after."""

from __future__ import annotations

import threading

from pyspark.errors import utils

from dbt.adapters.rowmerge.merge.lean_columns import lean_columns


def test_recording_is_off_inside_and_restored_after() -> None:
    before = utils._enable_debugging_cache
    with lean_columns():
        assert utils._enable_debugging_cache is False
        assert utils.is_debugging_enabled() is False
    assert utils._enable_debugging_cache is before


def test_restored_on_error() -> None:
    before = utils._enable_debugging_cache
    try:
        with lean_columns():
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert utils._enable_debugging_cache is before


def test_overlapping_merges_restore_the_value_only_when_the_last_one_ends() -> None:
    """Two dbt threads: the first to finish must not turn recording back on under the other,
    and the last to finish restores the user's value (not the other's False)."""
    before = utils._enable_debugging_cache
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen: list[object] = []

    def first() -> None:
        with lean_columns():
            first_in.set()
            second_in.wait(5)
        first_out.set()

    def second() -> None:
        first_in.wait(5)
        with lean_columns():
            second_in.set()
            first_out.wait(5)
            seen.append(utils._enable_debugging_cache)

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert seen == [False]
    assert utils._enable_debugging_cache is before
