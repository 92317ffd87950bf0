"""`--full-refresh` and dbt's `on_schema_change` with incremental_strategy='row_level_merge'."""

from __future__ import annotations

import pytest
from dbt.tests.util import run_dbt

from tests.functional.helpers import (
    column_names,
    counts,
    expect_rows,
    incremental_model,
    merge_line,
    rows,
    run_step,
    values,
)


class TestFullRefresh:
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "refreshed.sql": incremental_model(
                "unique_key='id'",
                values("id, name", "(1, 'a')", "(2, 'b')", "(3, 'c')"),
                values("id, name", "(2, 'B')", "(4, 'd')"),
                values("id, name", "(4, 'D')", "(5, 'e')"),
            )
        }

    def test_full_refresh_recreates_then_merges_again(self, project):
        run_step(1)
        expect_rows(project, "refreshed", [(1, "a"), (2, "b"), (3, "c")])

        refreshed = run_step(2, "--full-refresh")["refreshed"]
        # Exactly the model's current SELECT: no merge ran, rows 1 and 3 are gone.
        expect_rows(project, "refreshed", [(2, "B"), (4, "d")])
        assert not merge_line(refreshed).startswith("MERGE"), merge_line(refreshed)

        # The recreated table merges normally afterwards.
        merged = run_step(3)["refreshed"]
        expect_rows(project, "refreshed", [(2, "B"), (4, "D"), (5, "e")])
        assert merge_line(merged) == "MERGE 1 updated, 1 inserted, 0 deleted; 1 of 1 files rewritten"


def _osc_model(on_schema_change: str, step2: str) -> str:
    return incremental_model(
        f"unique_key='id', on_schema_change='{on_schema_change}'",
        values("id, name", "(1, 'a')", "(2, 'b')", "(3, 'c')"),
        step2,
    )


# Step 2 adds a column `extra`; row 2 changes only in the new column.
WITH_EXTRA = values("id, name, extra", "(2, 'b', 'x2')", "(3, 'C', 'x3')", "(4, 'd', 'x4')")
# Step 2 drops column `name`.
WITHOUT_NAME = values("id", "(2)", "(4)")


class TestOnSchemaChange:
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "osc_ignore.sql": _osc_model("ignore", WITH_EXTRA),
            "osc_fail.sql": _osc_model("fail", WITH_EXTRA),
            "osc_append.sql": _osc_model("append_new_columns", WITH_EXTRA),
            "osc_sync_add.sql": _osc_model("sync_all_columns", WITH_EXTRA),
            "osc_sync_drop.sql": _osc_model("sync_all_columns", WITHOUT_NAME),
            # A new column on a partitioned table: it goes before the partition column.
            "osc_append_partitioned.sql": incremental_model(
                "unique_key='id', partition_by='region', on_schema_change='append_new_columns'",
                values("id, name, region", "(1, 'a', 'eu')", "(2, 'b', 'us')"),
                values("id, name, extra, region", "(2, 'b', 'x2', 'us')", "(3, 'c', 'x3', 'eu')"),
            ),
        }

    @pytest.fixture(scope="class")
    def merged(self, project):
        first = run_step(1)
        assert all(r.status == "success" for r in first.values())
        return run_step(2, expect_pass=False)

    def test_ignore(self, project, merged):
        r = merged["osc_ignore"]
        assert r.status == "success", r.message
        assert column_names(project, "osc_ignore") == ["id", "name"]
        expect_rows(project, "osc_ignore", [(1, "a"), (2, "b"), (3, "C"), (4, "d")])
        assert counts(r) == (1, 1, 0)

    def test_fail(self, project, merged):
        r = merged["osc_fail"]
        assert r.status == "error"
        assert "The source and target schemas on this incremental model are out of sync" in r.message
        assert "Source columns not in target" in r.message and "extra" in r.message
        assert column_names(project, "osc_fail") == ["id", "name"]
        expect_rows(project, "osc_fail", [(1, "a"), (2, "b"), (3, "c")])

    def test_append_new_columns(self, project, merged):
        r = merged["osc_append"]
        assert r.status == "success", r.message
        assert column_names(project, "osc_append") == ["id", "name", "extra"]
        expect_rows(project, "osc_append", [(1, "a", None), (2, "b", "x2"), (3, "C", "x3"), (4, "d", "x4")])
        # Row 2 changed in the new column only: that is an update too.
        assert counts(r) == (2, 1, 0)

    def test_append_new_columns_partitioned(self, project, merged):
        r = merged["osc_append_partitioned"]
        assert r.status == "success", r.message
        assert column_names(project, "osc_append_partitioned") == ["id", "name", "extra", "region"]
        expect_rows(
            project,
            "osc_append_partitioned",
            [(1, "a", None, "eu"), (2, "b", "x2", "us"), (3, "c", "x3", "eu")],
        )
        assert counts(r) == (1, 1, 0)

    def test_sync_all_columns_adds_a_column(self, project, merged):
        r = merged["osc_sync_add"]
        assert r.status == "success", r.message
        assert column_names(project, "osc_sync_add") == ["id", "name", "extra"]
        expect_rows(project, "osc_sync_add", [(1, "a", None), (2, "b", "x2"), (3, "C", "x3"), (4, "d", "x4")])
        assert counts(r) == (2, 1, 0)

    def test_sync_all_columns_cannot_drop_a_column(self, project, merged):
        # dbt-spark refuses to drop columns of non-Delta/Iceberg tables; nothing changes.
        r = merged["osc_sync_drop"]
        assert r.status == "error"
        assert "Apache Spark does not support dropping columns from tables" in r.message
        assert column_names(project, "osc_sync_drop") == ["id", "name"]
        assert rows(project, "osc_sync_drop") == [(1, "a"), (2, "b"), (3, "c")]

    def test_full_refresh_takes_the_new_schema(self, project, merged):
        # After the failed run, --full-refresh rebuilds the table with the model's columns.
        run_dbt(["run", "--vars", "{step: 2}", "--full-refresh", "--select", "osc_fail"])
        assert column_names(project, "osc_fail") == ["id", "name", "extra"]
        expect_rows(project, "osc_fail", [(2, "b", "x2"), (3, "C", "x3"), (4, "d", "x4")])
