"""One change table per target (feed_owner.py).

Both targets of a shared change table would write ``_commit_version`` 1, 2, ... and each
feed would return the other's rows. The change table records its target in a hidden file;
any other target is refused before anything is written.
"""

from __future__ import annotations

import json
import os

import pytest

from dbt.adapters.rowmerge.merge import UnsupportedTableError, start_history
from dbt.adapters.rowmerge.merge.feed_owner import OWNER_FILE
from tests.engine.helpers import UPSERT, create_table, folder_digest, merge, rows, source_view, table_dir


def _feed(spark, name: str) -> list[tuple]:
    spark.catalog.refreshTable(name)
    return sorted((r.id, r.v, r._change_type, r._commit_version) for r in spark.table(name).collect())


def _targets(spark, db: str) -> tuple[str, str, str]:
    a, b = f"{db}.a", f"{db}.b"
    create_table(spark, a, "id long, v string", [[(1, "a")]])
    create_table(spark, b, "id long, v string", [[(1, "b")]])
    start_history(spark, a, "CREATE TABLE", f"{db}.shared")
    start_history(spark, b)
    return a, b, source_view(spark, f"{db}_s", "id long, v string", [(1, "X")])


def test_feed_owner_second_target_is_refused_and_nothing_changes(spark, db):
    a, b, src = _targets(spark, db)
    feed = {"table": f"{db}.shared"}
    merge(spark, a, src, UPSERT, change_data_feed=feed)
    before = folder_digest(table_dir(spark, b)), folder_digest(table_dir(spark, f"{db}.shared"))

    with pytest.raises(UnsupportedTableError) as raised:
        merge(spark, b, src, UPSERT, change_data_feed=feed)
    message = str(raised.value)
    assert f"change_data_feed table {db}.shared already holds the change feed of {a}" in message
    assert f"so {b} cannot write its changes there" in message
    assert "Nothing was changed" in message
    assert (folder_digest(table_dir(spark, b)), folder_digest(table_dir(spark, f"{db}.shared"))) == before
    assert rows(spark, b) == [(1, "b")]
    assert _feed(spark, f"{db}.shared") == [(1, "X", "update_postimage", 1), (1, "a", "update_preimage", 1)]


def test_feed_owner_recorded_by_dbt_and_by_the_first_merge(spark, db):
    a, b, src = _targets(spark, db)
    location = table_dir(spark, f"{db}.shared")
    with open(os.path.join(location, OWNER_FILE)) as fh:
        assert json.load(fh) == {"format": 1, "target": a}  # start_history recorded it

    # A change table from before owners were recorded: the first merge that writes to it claims it.
    os.remove(os.path.join(location, OWNER_FILE))
    merge(spark, b, src, UPSERT, change_data_feed={"table": f"{db}.shared"})
    with open(os.path.join(location, OWNER_FILE)) as fh:
        assert json.load(fh) == {"format": 1, "target": b}
    with pytest.raises(UnsupportedTableError, match=f"holds the change feed of {b}"):
        merge(spark, a, src, UPSERT, change_data_feed={"table": f"{db}.shared"})
    # The owner file is hidden from every reader of the change table.
    assert _feed(spark, f"{db}.shared") == [(1, "X", "update_postimage", 1), (1, "b", "update_preimage", 1)]


def test_feed_owner_full_refresh_of_another_target_does_not_take_the_feed(spark, db):
    a, b, src = _targets(spark, db)
    merge(spark, a, src, UPSERT, change_data_feed={"table": f"{db}.shared"})
    before = folder_digest(table_dir(spark, f"{db}.shared"))
    with pytest.raises(UnsupportedTableError, match=f"already holds the change feed of {a}"):
        start_history(spark, b, "REPLACE TABLE", f"{db}.shared")
    assert folder_digest(table_dir(spark, f"{db}.shared")) == before
    # ... while the owner's own full refresh starts its feed again.
    start_history(spark, a, "REPLACE TABLE", f"{db}.shared")
    assert _feed(spark, f"{db}.shared") == []


def test_feed_owner_damaged_record_is_refused_naming_the_file(spark, db):
    a, _, src = _targets(spark, db)
    location = table_dir(spark, f"{db}.shared")
    with open(os.path.join(location, OWNER_FILE), "w") as fh:
        fh.write("{not json")
    with pytest.raises(UnsupportedTableError) as raised:
        merge(spark, a, src, UPSERT, change_data_feed={"table": f"{db}.shared"})
    assert f"{OWNER_FILE}, which records the table whose change feed it holds, is damaged" in str(
        raised.value
    )
    assert rows(spark, a) == [(1, "a")]
