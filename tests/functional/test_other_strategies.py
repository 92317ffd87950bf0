"""Under adapter type `rowmerge`, everything that is not row_level_merge behaves as in dbt-spark."""

from __future__ import annotations

import pytest
from dbt.tests.util import check_relations_equal, relation_from_name, run_dbt

from tests.functional.helpers import (
    by_name,
    expect_rows,
    incremental_model,
    run_step,
    table_exists,
    table_property,
    values,
)


def spark_incremental(config: str, step1: str, step2: str) -> str:
    # incremental_model() sets row_level_merge; a later keyword would be a duplicate.
    return incremental_model("", step1, step2).replace(
        "incremental_strategy='row_level_merge', ", config + ", "
    )


class TestOtherIncrementalStrategies:
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "appended.sql": spark_incremental(
                "incremental_strategy='append', file_format='parquet'",
                values("id, name", "(1, 'a')", "(2, 'b')"),
                values("id, name", "(2, 'B')", "(3, 'c')"),
            ),
            "overwritten.sql": spark_incremental(
                "incremental_strategy='insert_overwrite', file_format='parquet', partition_by='region'",
                values("id, name, region", "(1, 'a', 'eu')", "(2, 'b', 'us')", "(3, 'c', 'eu')"),
                values("id, name, region", "(4, 'd', 'eu')"),
            ),
            "spark_merge.sql": spark_incremental(
                "incremental_strategy='merge', file_format='parquet', unique_key='id'",
                values("id, name", "(1, 'a')"),
                values("id, name", "(1, 'A')"),
            ),
        }

    @pytest.fixture(scope="class")
    def runs(self, project):
        first = run_step(1, expect_pass=False)
        merge_created = table_exists(project, "spark_merge")
        second = run_step(2, "--exclude", "spark_merge")
        return first, merge_created, second

    def test_append(self, project, runs):
        first, _, second = runs
        assert first["appended"].status == second["appended"].status == "success"
        expect_rows(project, "appended", [(1, "a"), (2, "b"), (2, "B"), (3, "c")])
        assert (table_property(project, "appended", "Provider") or "").lower() == "parquet"

    def test_insert_overwrite_replaces_only_the_batch_partitions(self, project, runs):
        first, _, second = runs
        assert first["overwritten"].status == second["overwritten"].status == "success"
        expect_rows(project, "overwritten", [(4, "d", "eu"), (2, "b", "us")])

    def test_spark_merge_needs_a_table_format(self, project, runs):
        first, merge_created, _ = runs
        r = first["spark_merge"]
        assert r.status == "error"
        assert "Invalid incremental strategy provided: merge" in r.message
        assert (
            "You can only choose this strategy when file_format is set to 'delta' or 'iceberg' or 'hudi'"
            in r.message
        )
        assert not merge_created


SEED_CSV = """id,name
1,a
2,b
3,c
"""


class TestTableViewSeed:
    @pytest.fixture(scope="class")
    def seeds(self):
        return {"people.csv": SEED_CSV}

    @pytest.fixture(scope="class")
    def models(self):
        return {
            "people_table.sql": "{{ config(materialized='table', file_format='parquet') }}\n"
            "select * from {{ ref('people') }}",
            "people_view.sql": "{{ config(materialized='view') }}\nselect * from {{ ref('people_table') }}",
        }

    def test_seed_table_view(self, project):
        seeded = run_dbt(["seed"])
        assert [r.status for r in seeded] == ["success"]
        results = by_name(run_dbt(["run"]))
        assert {n: r.status for n, r in results.items()} == {
            "people_table": "success",
            "people_view": "success",
        }
        expect_rows(project, "people", [(1, "a"), (2, "b"), (3, "c")])
        check_relations_equal(project.adapter, ["people", "people_table", "people_view"])
        assert (table_property(project, "people_table", "Provider") or "").lower() == "parquet"
        assert table_property(project, "people_view", "Type") == "VIEW"
        relation = relation_from_name(project.adapter, "people_view")
        assert relation.identifier == "people_view"
        # A second run rebuilds both (table replaced, view recreated) with the same rows.
        run_dbt(["run"])
        check_relations_equal(project.adapter, ["people", "people_table", "people_view"])
