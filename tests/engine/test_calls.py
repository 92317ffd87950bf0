"""A merge's round trips (calls.py, lean_columns.py): counted in its metrics, and not growing
with the table's history. An hourly model's merge must cost the same in its second year as in
its first week: the table gains a file and the journal an entry per merge, and neither may add
a py4j or catalog call; filesystem calls (journal entries read since the newest statistics
checkpoint) rise and fall with the checkpoint interval, never past it."""

from __future__ import annotations

import functools

from pyspark.sql import functions as F

from dbt.adapters.rowmerge.merge import calls, lean_columns
from dbt.adapters.rowmerge.merge.journal import checkpoint as checkpoint_module
from tests.engine.helpers import UPSERT, create_table, merge, rows, source_view

INSERT_ONLY = [{"when": "not_matched", "action": "insert", "values": "*"}]
INTERVAL = 3


def _counts(result) -> tuple[int, int, int, int]:
    m = result.metrics
    return m["numPy4jCalls"], m["numCatalogCalls"], m["numFilesystemCalls"], m["numJournalBytesRead"]


def test_a_merges_calls_do_not_grow_with_the_tables_history(spark, db, monkeypatch) -> None:
    monkeypatch.setattr(checkpoint_module, "CHECKPOINT_INTERVAL", INTERVAL)
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(k, "a"), (k + 1, "b")] for k in (0, 10, 20)])
    inserts, upserts = [], []
    for i in range(3 * INTERVAL + 1):
        src = source_view(spark, f"{db}_i{i}", "id long, v string", [(100 + i, f"n{i}")])
        inserts.append(_counts(merge(spark, t, src, INSERT_ONLY, auto_compact=False)))
    for i in range(2 * INTERVAL):
        src = source_view(spark, f"{db}_u{i}", "id long, v string", [(1, f"u{i}"), (200 + i, "x")])
        upserts.append(_counts(merge(spark, t, src, UPSERT, auto_compact=False)))
    # A file more per merge, an entry more per merge; every row where it belongs.
    assert len(rows(spark, t)) == 6 + 3 * INTERVAL + 1 + 2 * INTERVAL
    assert rows(spark, t)[1] == (1, f"u{2 * INTERVAL - 1}")

    # The first merge also writes version 0 (the table had no journal), and the first of a
    # kind may look up a JVM method the process had not used yet (once per process); after
    # them, every insert makes the same py4j and catalog calls, and so does every upsert.
    for kind in (inserts[2:], upserts[1:]):
        assert len({(py4j, catalog) for py4j, catalog, _, _ in kind}) == 1, kind
    # Filesystem calls follow the checkpoint cycle (one more entry to read per merge, until a
    # merge saves a checkpoint): the same at the same place in it, cycle after cycle.
    fs = [f for _, _, f, _ in inserts[1:]]
    assert fs[INTERVAL : 2 * INTERVAL] == fs[2 * INTERVAL : 3 * INTERVAL], inserts
    assert len(set(fs[INTERVAL:])) > 1, inserts  # (a count that cannot move proves nothing)
    # The journal's bytes read follow it too, plus the checkpoint's line for each live file
    # (this table gains one per merge; compaction bounds them): a cycle later, a few hundred
    # bytes more per merge, where reading the history would add a whole entry (~2 KB) per merge.
    read = [r for _, _, _, r in inserts[1:]]
    grown = [b - a for a, b in zip(read[INTERVAL : 2 * INTERVAL], read[2 * INTERVAL :], strict=True)]
    assert all(0 <= g <= 400 * INTERVAL for g in grown), (grown, inserts)

    # What the counts are today, with room: a regression that adds a round trip per plan node,
    # per file or per column shows here (py4j on a busy driver costs about a millisecond).
    py4j, catalog, filesystem, _ = inserts[-1]
    assert 0 < py4j <= 360 and 0 < catalog <= 10 and 0 < filesystem <= 60, inserts[-1]
    py4j, catalog, filesystem, _ = upserts[-1]
    assert 0 < py4j <= 560 and 0 < catalog <= 11 and 0 < filesystem <= 70, upserts[-1]


def test_the_change_feed_asks_the_catalog_twice_per_merge(spark, db) -> None:
    """With the change feed a merge asks the metastore two more things: the change table's
    entry, under the lock (its location, partitioning and columns), and to add the version's
    partition, with that same entry (not a second request for it)."""
    counts: dict[str, list[int]] = {"plain": [], "feed": []}
    for kind in counts:
        t = f"{db}.{kind}"
        create_table(spark, t, "id long, v string", [[(0, "a"), (1, "b")], [(10, "c")]])
        feed = {"change_data_feed": {"table": f"{db}.{kind}_changes"}} if kind == "feed" else {}
        for i in range(3):
            src = source_view(spark, f"{db}_{kind}{i}", "id long, v string", [(1, f"u{i}"), (20 + i, "x")])
            counts[kind].append(
                merge(spark, t, src, UPSERT, auto_compact=False, **feed).metrics["numCatalogCalls"]
            )
    # the first feed merge also creates the change table (a statement, then its entry)
    assert [f - p for f, p in zip(counts["feed"][1:], counts["plain"][1:], strict=True)] == [2, 2], counts
    # ...and every version's rows are there, in the partition the commit registered
    spark.catalog.refreshTable(f"{db}.feed_changes")
    found = sorted(
        (r[4], r[2], r[0], r[1]) for r in spark.table(f"{db}.feed_changes").collect()
    )  # (_commit_version, _change_type, id, v)
    assert found == sorted(
        row
        for i in range(3)
        for row in (
            (i + 1, "update_preimage", 1, "b" if i == 0 else f"u{i - 1}"),
            (i + 1, "update_postimage", 1, f"u{i}"),
            (i + 1, "insert", 20 + i, "x"),
        )
    )
    assert len(spark.sql(f"SHOW PARTITIONS {db}.feed_changes").collect()) == 3


def test_inside_lean_columns_a_function_call_is_one_round_trip(spark) -> None:
    jvm = spark.sparkContext._jvm
    with lean_columns.lean_columns():
        F.lit(0), F.col("z")  # the process remembers lit and col, if it had not yet
        with calls.counting(spark) as counts:
            F.lit(1)
            F.col("a")  # looked up through `functions`, as a column name is
        assert counts.py4j == 2
    assert not {name for name in lean_columns.REMEMBERED_CLASSES if name in vars(jvm)}


def test_py4j_counting_survives_another_wrapper_of_the_client(spark) -> None:
    """A profiler or benchmark that wraps py4j's send_command over ours (and puts back what it
    found afterwards) neither hides the merge's calls nor makes them count twice."""
    client = spark.sparkContext._gateway._gateway_client
    with lean_columns.lean_columns():
        F.lit(0)
        with calls.counting(spark) as before:
            F.lit(1)
        found = client.send_command
        client.send_command = functools.partial(found)  # someone else's wrapper, outermost now
        try:
            with calls.counting(spark) as wrapped:
                F.lit(2)
        finally:
            client.send_command = found
    assert (before.py4j, wrapped.py4j) == (1, 1)


def test_a_wide_upsert_builds_each_columns_expression_in_one_call(spark, db) -> None:
    """Which clause acts, each column's new value, an update's "changed anything" test and the
    inserted values are each one SQL expression where the spec gives them as text (outputs.py),
    not a Column per clause and part: this 24-column upsert made 646 py4j calls, 916 with the
    parts built as Columns."""
    names = [f"c{i}" for i in range(24)]
    schema = ", ".join(f"{n} long" for n in ["id", *names])
    t = f"{db}.wide"
    create_table(spark, t, schema, [[tuple(range(k, k + 25)) for k in (0, 1, 2)]])
    clauses = [
        {"when": "matched", "condition": "s.c0 <> t.c0", "action": "update", "set": "*"},
        {"when": "not_matched", "action": "insert", "values": "*"},
    ]
    counts = []
    for i in range(2):
        values = [tuple([1, *range(100 + i, 124 + i)]), tuple([10 + i, *range(24)])]
        src = source_view(spark, f"{db}_w{i}", schema, values)
        result = merge(spark, t, src, clauses, auto_compact=False)
        counts.append(_counts(result)[0])
    assert rows(spark, t)[1] == (1, *range(101, 125))
    assert len(rows(spark, t)) == 5
    assert 0 < counts[-1] <= 760, counts
