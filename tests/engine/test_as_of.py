"""as_of (as_of.py): every version still in retention reads back exactly the rows it had — by
version or by timestamp, partitioned or not, across added columns and a crash mid-apply — and
a version that cannot be read says which is the oldest that can."""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone

import pytest

from dbt.adapters.rowmerge.merge import JournalError, MergeSpecError, as_of, faults, optimize, restore
from tests.engine.helpers import UPSERT, create_table, merge, rows, source_view, table_dir

DELETE_MISSING = UPSERT + [{"when": "not_matched_by_source", "action": "delete", "condition": "t.id < 3"}]


def _sorted(df) -> list[tuple]:
    return sorted((tuple(r) for r in df.collect()), key=lambda t: tuple((v is not None, v) for v in t))


def _timestamp(spark, t: str, version: int) -> str:
    with open(os.path.join(table_dir(spark, t), "_rowmerge_log", f"{version:020d}.json")) as fh:
        return json.load(fh)["timestamp"]


def _merges(spark, db, t, batches, clauses=UPSERT, schema="id long, v string", **extra):
    """Merge each batch in turn; the rows after each version (version 0 first)."""
    saved = [rows(spark, t)]
    for i, batch in enumerate(batches):
        src = source_view(spark, f"{db}_b{i}", schema, batch)
        merge(spark, t, src, clauses, auto_compact=False, **extra)
        saved.append(rows(spark, t))
    return saved


def test_every_version_reads_back_its_rows(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(1, "a"), (2, "b")], [(3, "c")], [(4, "d")]])
    saved = _merges(
        spark,
        db,
        t,
        [[(1, "x"), (5, "e")], [(3, "y")], [(1, "z"), (3, "w"), (4, "q")], [(6, "f")]],
        clauses=DELETE_MISSING,
        retain_versions=10,
    )
    # one optimize in the middle of nothing: it replaces files, and they are retained too
    optimize(spark, t, target_file_size_mb=1)
    saved.append(rows(spark, t))
    for v, expected in enumerate(saved):
        assert _sorted(as_of(spark, t, version=v)) == expected, v
    assert saved[2] != saved[1] and saved[0] != saved[4]


def test_by_timestamp_the_newest_version_at_or_before_it(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(1, "a")]])
    saved = _merges(spark, db, t, [[(1, "b")], [(1, "c")]], retain_versions=5)
    ts1 = _timestamp(spark, t, 1)
    assert _sorted(as_of(spark, t, timestamp=ts1)) == saved[1]
    just_before_2 = datetime.fromisoformat(_timestamp(spark, t, 2)) - timedelta(milliseconds=1)
    assert _sorted(as_of(spark, t, timestamp=just_before_2)) == saved[1]
    assert _sorted(as_of(spark, t, timestamp=datetime.now(timezone.utc))) == saved[2]
    with pytest.raises(JournalError, match="has no version at or before 2000-01-01T00:00:00"):
        as_of(spark, t, timestamp="2000-01-01 00:00:00")


def test_a_partitioned_table_with_a_new_partition_and_an_added_column(spark, db):
    t = f"{db}.p"
    create_table(
        spark,
        t,
        "id long, v string, day string",
        [[(1, "a", "d1"), (2, "b", "d1")], [(3, "c", "d2")]],
        partition_by=["day"],
    )
    on = "t.id = s.id AND t.day = s.day"
    saved = [rows(spark, t)]
    src = source_view(spark, f"{db}_p1", "id long, v string, day string", [(1, "x", "d1"), (4, "n", "d3")])
    merge(spark, t, src, UPSERT, on=on, retain_versions=3)
    saved.append(rows(spark, t))
    # version 2 adds a column: older versions read it as NULL
    src = source_view(
        spark, f"{db}_p2", "id long, v string, day string, w int", [(3, "y", "d2", 7), (2, "z", "d1", 8)]
    )
    merge(spark, t, src, UPSERT, on=on, schema_evolution=True)
    saved.append(rows(spark, t))
    assert _sorted(as_of(spark, t, version=2)) == saved[2]
    for v in (0, 1):
        widened = sorted((i, s, None, d) for i, s, d in saved[v])
        got = _sorted(as_of(spark, t, version=v).select("id", "v", "w", "day"))
        assert got == widened, v
    assert as_of(spark, t, version=1).columns == spark.table(t).columns


def test_without_retention_the_versions_before_a_replacement_are_gone(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(1, "a")], [(2, "b")]])
    # version 2 replaces a file
    saved = _merges(spark, db, t, [[(3, "c")], [(1, "x")], [(4, "d")]], retain_versions=0)
    for v in (2, 3):
        assert _sorted(as_of(spark, t, version=v)) == saved[v]
    for v in (0, 1):
        with pytest.raises(
            JournalError,
            match=f"Version {v} of .* can no longer be read.*Every version from 2 on can be read",
        ):
            as_of(spark, t, version=v)


def test_arguments_are_checked_before_anything_is_read(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(1, "a")]])
    _merges(spark, db, t, [[(1, "b")]], retain_versions=1)
    cases = [
        ({}, "give exactly one of `version` and `timestamp`"),
        ({"version": 1, "timestamp": "2026-01-01"}, "give exactly one of `version` and `timestamp`"),
        ({"version": -1}, "`version` must be a whole number >= 0, got -1"),
        ({"version": True}, "`version` must be a whole number >= 0, got True"),
        ({"timestamp": "yesterday"}, "`timestamp`: 'yesterday' is not a timestamp"),
    ]
    for kwargs, message in cases:
        with pytest.raises(MergeSpecError, match=message.replace("(", r"\(").replace(")", r"\)")):
            as_of(spark, t, **kwargs)
    with pytest.raises(JournalError, match="has no version 7: its versions are 0 to 1"):
        as_of(spark, t, version=7)


def test_a_table_without_a_journal_has_only_version_0(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(1, "a")]])
    assert _sorted(as_of(spark, t, version=0)) == [(1, "a")]
    with pytest.raises(MergeSpecError, match="has no journal yet"):
        as_of(spark, t, version=1)


class Crash(BaseException):
    pass


def test_while_the_newest_version_is_not_applied_older_ones_still_read(spark, db, monkeypatch):
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(1, "a")], [(2, "b")]])
    saved = _merges(spark, db, t, [[(1, "x")]], retain_versions=5)

    def die(at: str) -> None:
        if at == "registered":  # the new file moved in, the replaced one not yet out
            raise Crash(at)

    monkeypatch.setattr(faults, "fault_point", die)
    src = source_view(spark, f"{db}_late", "id long, v string", [(2, "y")])
    with pytest.raises(Crash):
        merge(spark, t, src, UPSERT, auto_compact=False)
    monkeypatch.undo()
    for v, expected in enumerate(saved):
        assert _sorted(as_of(spark, t, version=v)) == expected
    assert _sorted(as_of(spark, t, version=2)) == [(1, "x"), (2, "y")]


# Partition values whose folder names Spark escapes (day=2026-01-01 10%3A00) and whose
# `_metadata.file_path` URL-encodes them once more: the files are read by the folder's own path.
ESCAPED = ("2026-01-01 10:00", "a b/c%d")


def test_partition_values_the_folders_escape_read_back_and_restore(spark, db):
    t = f"{db}.p"
    batches = [[(1, "a", h), (2, "b", h)] for h in ESCAPED]
    create_table(spark, t, "id long, v string, hour string", batches, partition_by=["hour"])
    saved = [rows(spark, t)]
    src = source_view(
        spark, f"{db}_e1", "id long, v string, hour string", [(1, "x", ESCAPED[0]), (3, "n", ESCAPED[1])]
    )
    merge(spark, t, src, UPSERT, on="t.id = s.id AND t.hour = s.hour", retain_versions=5, auto_compact=False)
    saved.append(rows(spark, t))
    assert saved[1] != saved[0]
    for v, expected in enumerate(saved):
        assert _sorted(as_of(spark, t, version=v)) == expected, v
    assert restore(spark, t, version=0).version == 2
    assert rows(spark, t) == saved[0]
    assert _sorted(as_of(spark, t, version=1)) == saved[1]


def test_a_table_whose_location_has_a_space(spark, db, tmp_path):
    t = f"{db}.spaced"
    spark.sql(f"CREATE TABLE {t} (id long, v string) USING parquet LOCATION '{tmp_path}/with space/t'")
    spark.sql(f"INSERT INTO {t} VALUES (1, 'a'), (2, 'b')")
    saved = [rows(spark, t)]
    src = source_view(spark, f"{db}_s1", "id long, v string", [(1, "x")])
    merge(spark, t, src, UPSERT, retain_versions=5)
    saved.append(rows(spark, t))
    assert [_sorted(as_of(spark, t, version=v)) for v in (0, 1)] == saved
    restore(spark, t, version=0)
    assert rows(spark, t) == saved[0]


def test_a_missing_table_is_named_by_the_operation_not_as_a_merge_target(spark, db):
    from dbt.adapters.rowmerge.merge import UnsupportedTableError, history, recover, vacuum

    missing = f"{db}.nope"
    calls = {
        "AS OF read of table": lambda: as_of(spark, missing, version=0),
        "RESTORE table": lambda: restore(spark, missing, version=0),
        "VACUUM table": lambda: vacuum(spark, missing),
        "OPTIMIZE table": lambda: optimize(spark, missing),
        "RECOVER table": lambda: recover(spark, missing),
        "HISTORY of table": lambda: history(spark, missing),
    }
    for role, call in calls.items():
        with pytest.raises(UnsupportedTableError) as info:
            call()
        said = str(info.value)
        assert said.startswith(f"{role} {missing} does not exist or cannot be read: "), said
        assert said.endswith("Check the table's name.") and "MERGE" not in said, said


def test_a_retained_file_deleted_by_hand_is_named_not_a_spark_error(spark, db):
    import glob

    from tests.engine.helpers import folder_digest

    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(1, "a")], [(2, "b")]])
    src = source_view(spark, f"{db}_h1", "id long, v string", [(1, "x")])
    merge(spark, t, src, UPSERT, retain_versions=5, auto_compact=False)
    retained = glob.glob(os.path.join(table_dir(spark, t), "_rowmerge_log", "retained", "*", "*.parquet"))
    assert len(retained) == 1
    os.remove(retained[0])
    before = folder_digest(table_dir(spark, t))
    for call in (lambda: as_of(spark, t, version=0), lambda: restore(spark, t, version=0)):
        with pytest.raises(JournalError) as info:
            call()
        said = str(info.value)
        assert said.startswith(f"Version 0 of {t} cannot be read: its file part-") and "is not there" in said
    assert folder_digest(table_dir(spark, t)) == before
    assert _sorted(as_of(spark, t, version=1)) == [(1, "x"), (2, "b")]
