"""The session's cached relation of a table across merges (table.py ``refresh_table``).

A session caches a table's relation (schema and file listing) once it reads it. A merge reads
the table afresh under its lock, whatever this or another session cached before, and after its
commit leaves the session reading the new files: these tests read with ``spark.table`` and no
``REFRESH TABLE`` of their own (the helpers' ``rows`` refreshes, so it is not used here).
"""

from __future__ import annotations

import pytest

from tests.engine.helpers import UPSERT, create_table, merge, source_view


def _read(spark, name):
    return sorted(tuple(r) for r in spark.table(name).collect())


@pytest.mark.parametrize("partitioned", [False, True], ids=["plain", "partitioned"])
def test_after_a_merge_the_session_reads_the_new_files_without_a_refresh(spark, db, partitioned):
    t = f"{db}.t"
    create_table(
        spark,
        t,
        "id long, v string, p int",
        [[(1, "a", 0), (2, "b", 0)], [(3, "c", 1)]],
        partition_by=["p"] if partitioned else [],
    )
    assert _read(spark, t) == [(1, "a", 0), (2, "b", 0), (3, "c", 1)]  # cached now
    src = source_view(spark, f"{db}_s", "id long, v string, p int", [(2, "B", 0), (4, "d", 1)])
    merge(spark, t, src, UPSERT)
    assert _read(spark, t) == [(1, "a", 0), (2, "B", 0), (3, "c", 1), (4, "d", 1)]
    merge(spark, t, source_view(spark, f"{db}_s2", "id long, v string, p int", [(1, "A", 0)]), UPSERT)
    assert _read(spark, t) == [(1, "A", 0), (2, "B", 0), (3, "c", 1), (4, "d", 1)]


@pytest.mark.parametrize("name", ["{db}.t", "spark_catalog.{db}.t"])
def test_a_merge_reads_the_files_another_session_wrote(spark, db, name):
    """This session's cached listing names files another session's merge has since replaced:
    read as cached, the merge would fail on a missing file or lose the other merge's rows."""
    t = name.format(db=db)
    create_table(spark, t, "id long, v string", [[(1, "a"), (2, "b")], [(10, "x")]])
    assert _read(spark, t) == [(1, "a"), (2, "b"), (10, "x")]
    other = spark.newSession()  # same catalog, its own relation cache
    other.createDataFrame([(1, "A"), (5, "e")], "id long, v string").createOrReplaceTempView("other_src")
    merge(other, t, "other_src", UPSERT)
    merge(spark, t, source_view(spark, f"{db}_s", "id long, v string", [(2, "B"), (10, "X")]), UPSERT)
    assert _read(spark, t) == [(1, "A"), (2, "B"), (5, "e"), (10, "X")]
    assert sorted(tuple(r) for r in other.table(t).collect()) == [(1, "A"), (2, "B"), (5, "e"), (10, "X")]


def test_data_the_session_cached_is_cached_again_from_the_new_files(spark, db):
    """``CACHE TABLE`` / ``DataFrame.cache``: a plan that reads the table must not go on
    serving the rows from before the merge."""
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(1, "a"), (2, "b")]])
    try:
        spark.table(t).cache()
        assert _read(spark, t) == [(1, "a"), (2, "b")]
        merge(spark, t, source_view(spark, f"{db}_s", "id long, v string", [(2, "B"), (3, "c")]), UPSERT)
        assert _read(spark, t) == [(1, "a"), (2, "B"), (3, "c")]
        assert spark.catalog.isCached(t)
    finally:
        spark.catalog.clearCache()


def test_a_table_in_the_current_database_by_its_bare_name(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(1, "a")]])
    before = spark.catalog.currentDatabase()
    spark.catalog.setCurrentDatabase(db)
    try:
        assert _read(spark, "t") == [(1, "a")]
        merge(spark, "t", source_view(spark, f"{db}_s", "id long, v string", [(1, "A"), (2, "b")]), UPSERT)
        assert _read(spark, "t") == [(1, "A"), (2, "b")]
    finally:
        spark.catalog.setCurrentDatabase(before)
