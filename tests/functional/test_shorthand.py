"""Every shorthand config key of the README's configuration reference, each on its own model.

All models are built by one ``dbt run`` (step 1: CTAS, the table is created) and merged by a
second one (step 2: the model's SELECT switches to the incremental batch). Each test then
checks the exact table state and the run line / adapter_response metrics of its model.
Every step-1 SELECT writes one file (REPARTITION(1)), so file counts in run lines are exact.
"""

from __future__ import annotations

import os

import pytest

from tests.functional.helpers import (
    counts,
    expect_rows,
    incremental_model,
    merge_line,
    metrics,
    ok,
    run_step,
    table_property,
    values,
)

S = "DBT_INTERNAL_SOURCE"
T = "DBT_INTERNAL_DEST"


def _cdc_model(config: str) -> str:
    """A model with a CDC batch: versions, and an `op` column only in the incremental source."""
    return incremental_model(
        config,
        values("id, name, version", "(1, 'a', 1)", "(2, 'b', 1)", "(3, 'c', 5)"),
        values(
            "id, name, version, op",
            "(1, 'A', 2, 'U')",
            "(2, 'b', 0, 'D')",
            "(3, 'C', 4, 'U')",
            "(4, 'd', 1, 'I')",
            "(5, 'e', 1, 'D')",
            "(6, 'f', 0, 'I')",
        ),
    )


MODELS = {
    # unique_key as a string; row 3 arrives unchanged (not counted, skip_unchanged_updates
    # defaults to true), row 2 changes, row 4 is new.
    "key_string.sql": incremental_model(
        "unique_key='id'",
        values("id, name, amount", "(1, 'a', 10)", "(2, 'b', 20)", "(3, 'c', 30)"),
        values("id, name, amount", "(2, 'B', 21)", "(3, 'c', 30)", "(4, 'd', 40)"),
    ),
    # unique_key as a list: (us, 1) matches, (us, 2) is new although id 2 exists in eu.
    "key_list.sql": incremental_model(
        "unique_key=['region', 'id']",
        values("region, id, name", "('eu', 1, 'a')", "('us', 1, 'b')", "('eu', 2, 'c')"),
        values("region, id, name", "('us', 1, 'B')", "('us', 2, 'd')"),
    ),
    # Only newer versions update; a matched row whose update does not apply is NOT inserted.
    "matched_cond.sql": incremental_model(
        f"unique_key='id', matched_condition='{S}.version > {T}.version'",
        values("id, name, version", "(1, 'a', 10)", "(2, 'b', 10)"),
        values("id, name, version", "(1, 'A', 20)", "(2, 'B', 5)", "(3, 'c', 1)"),
    ),
    # Only non-bronze rows are inserted; matched rows update whatever their tier.
    "not_matched_cond.sql": incremental_model(
        f"unique_key='id', not_matched_condition=\"{S}.tier <> 'bronze'\"",
        values("id, tier", "(1, 'gold')", "(2, 'silver')"),
        values("id, tier", "(1, 'bronze')", "(3, 'gold')", "(4, 'bronze')"),
    ),
    # Mirror: target rows missing from the source are deleted.
    "nmbs_delete.sql": incremental_model(
        "unique_key='id', not_matched_by_source_action='delete'",
        values("id, name", "(1, 'a')", "(2, 'b')", "(3, 'c')"),
        values("id, name", "(2, 'B')", "(4, 'd')"),
    ),
    # Soft delete: active rows missing from the source get is_active = false; row 3 is already
    # inactive, so the condition keeps it untouched.
    "nmbs_update.sql": incremental_model(
        "unique_key='id', not_matched_by_source_action='update', "
        f"not_matched_by_source_condition='{T}.is_active', "
        "not_matched_by_source_set={'is_active': 'false'}",
        values("id, name, is_active", "(1, 'a', true)", "(2, 'b', true)", "(3, 'c', false)"),
        values("id, name, is_active", "(2, 'B', true)", "(4, 'd', true)"),
    ),
    # Updates touch `name` only; inserts write every column.
    "update_columns.sql": incremental_model(
        "unique_key='id', merge_update_columns=['name']",
        values("id, name, amount", "(1, 'a', 10)", "(2, 'b', 20)"),
        values("id, name, amount", "(1, 'A', 11)", "(3, 'c', 30)"),
    ),
    # Updates keep `created`; inserts write it.
    "exclude_columns.sql": incremental_model(
        "unique_key='id', merge_exclude_columns=['created']",
        values("id, name, created", "(1, 'a', 2020)", "(2, 'b', 2020)"),
        values("id, name, created", "(1, 'A', 2099)", "(3, 'c', 2099)"),
    ),
    # Insert-only: matched rows stay as they are, nothing is rewritten.
    "skip_matched.sql": incremental_model(
        "unique_key='id', skip_matched_step=true",
        values("id, name", "(1, 'a')", "(2, 'b')"),
        values("id, name", "(1, 'A')", "(3, 'c')"),
    ),
    # Update-only: new keys are not inserted.
    "skip_not_matched.sql": incremental_model(
        "unique_key='id', skip_not_matched_step=true",
        values("id, name", "(1, 'a')", "(2, 'b')"),
        values("id, name", "(1, 'A')", "(3, 'c')"),
    ),
    # CDC hard delete: D deletes a matched row; an unknown D row is not inserted.
    "delete_cond.sql": incremental_model(
        f"unique_key='id', delete_condition=\"{S}.op = 'D'\"",
        values("id, name, op", "(1, 'a', 'I')", "(2, 'b', 'I')", "(3, 'c', 'I')"),
        values("id, name, op", "(1, 'A', 'U')", "(2, 'b', 'D')", "(4, 'd', 'I')", "(5, 'e', 'D')"),
    ),
    # The predicate is ANDed into `on`: (2, us) cannot match, so it is inserted again; the
    # target-only predicate also prunes the `us` partition's file.
    "predicates.sql": incremental_model(
        f"unique_key='id', partition_by='region', incremental_predicates=[\"{T}.region = 'eu'\"]",
        values("id, name, region", "(1, 'a', 'eu')", "(2, 'b', 'us')"),
        values("id, name, region", "(1, 'A', 'eu')", "(2, 'B', 'us')"),
    ),
    # Delta behaviour: an update that changes nothing still counts and rewrites its file.
    "unchanged_counted.sql": incremental_model(
        "unique_key='id', skip_unchanged_updates=false",
        values("id, name", "(1, 'a')", "(2, 'b')"),
        values("id, name", "(1, 'a')", "(2, 'B')"),
    ),
    # The same batch unchanged: nothing updated, no file rewritten.
    "unchanged_skipped.sql": incremental_model(
        "unique_key='id', skip_unchanged_updates=true",
        values("id, name", "(1, 'a')", "(2, 'b')"),
        values("id, name", "(1, 'a')", "(2, 'b')"),
    ),
    # Partitioned target: an update in `eu`, a new partition `apac`; `us` is pruned.
    "partitioned.sql": incremental_model(
        "unique_key=['region', 'id'], partition_by='region'",
        values("id, name, region", "(1, 'a', 'eu')", "(2, 'b', 'us')"),
        values("id, name, region", "(1, 'A', 'eu')", "(3, 'c', 'apac')"),
    ),
    # Only the not-matched-by-source delete is left: a pure "delete what disappeared".
    "delete_missing_only.sql": incremental_model(
        "unique_key='id', skip_matched_step=true, skip_not_matched_step=true, "
        "not_matched_by_source_action='delete'",
        values("id, name", "(1, 'a')", "(2, 'b')", "(3, 'c')"),
        values("id, name", "(2, 'X')", "(4, 'd')"),
    ),
    # delete_condition + matched_condition + not_matched_condition together; `op` exists only
    # in the incremental source (insert * ignores it). The delete comes first whatever the
    # version; an unknown D row and a row failing not_matched_condition are not inserted.
    "cdc_combined.sql": _cdc_model(
        f"unique_key='id', delete_condition=\"{S}.op = 'D'\", "
        f"matched_condition='{S}.version > {T}.version', not_matched_condition='{S}.version > 0'"
    ),
    # The same with trailing comments: the insert's condition the macros build from both keys
    # must end each comment before its closing parenthesis.
    "cdc_commented.sql": _cdc_model(
        f"unique_key='id', delete_condition=\"{S}.op = 'D' -- hard deletes\", "
        f"matched_condition='{S}.version > {T}.version', "
        f"not_matched_condition='{S}.version > 0 -- only real versions'"
    ),
    # unique_key spelled in another case than the column (Spark names are case-insensitive).
    "key_case.sql": incremental_model(
        "unique_key='ID'",
        values("id, name", "(1, 'a')", "(2, 'b')"),
        values("id, name", "(2, 'B')", "(3, 'c')"),
    ),
    # The incremental SELECT reads {{ this }}: the source is materialized once, before the
    # target's files are rewritten (copy-on-write), so every row gets exactly one '!'.
    "reads_this.sql": incremental_model(
        "unique_key='id'",
        values("id, name", "(1, 'a')", "(2, 'b')", "(3, 'c')"),
        "select id, concat(name, '!') as name from {{ this }} where id <= 2\n"
        "union all select 9 as id, 'z' as name",
    ),
    # ORC target.
    "orc_table.sql": incremental_model(
        "unique_key='id', file_format='orc'",
        values("id, name", "(1, 'a')", "(2, 'b')"),
        values("id, name", "(2, 'B')", "(3, 'c')"),
    ),
}


class TestShorthandConfig:
    @pytest.fixture(scope="class")
    def models(self):
        return MODELS

    @pytest.fixture(scope="class")
    def merged(self, project):
        first = run_step(1)
        assert all(r.status == "success" for r in first.values()), {
            n: r.message for n, r in first.items() if r.status != "success"
        }
        assert len(first) == len(MODELS)
        return run_step(2)

    def test_unique_key_string(self, project, merged):
        expect_rows(project, "key_string", [(1, "a", 10), (2, "B", 21), (3, "c", 30), (4, "d", 40)])
        r = ok(merged, "key_string")
        assert merge_line(r) == "MERGE 1 updated, 1 inserted, 0 deleted; 1 of 1 files rewritten"
        m = metrics(r)
        assert m["numSourceRows"] == 3
        assert m["numTargetRowsMatchedUpdated"] == 1
        assert m["numTargetFilesRemoved"] == 1
        assert m["numTargetRowsCopied"] == 2  # rows 1 and 3 copied into the rewritten file
        assert r.adapter_response["code"] == "MERGE"
        assert r.adapter_response["rows_affected"] == 2
        spec = r.adapter_response["spec"]
        assert spec["on"] == f"{T}.`id` = {S}.`id`"

    def test_unique_key_list(self, project, merged):
        expect_rows(project, "key_list", [("eu", 1, "a"), ("us", 1, "B"), ("eu", 2, "c"), ("us", 2, "d")])
        assert counts(ok(merged, "key_list")) == (1, 1, 0)
        assert ok(merged, "key_list").adapter_response["spec"]["on"] == (
            f"{T}.`region` = {S}.`region` AND {T}.`id` = {S}.`id`"
        )

    def test_matched_condition(self, project, merged):
        expect_rows(project, "matched_cond", [(1, "A", 20), (2, "b", 10), (3, "c", 1)])
        assert merge_line(ok(merged, "matched_cond")) == (
            "MERGE 1 updated, 1 inserted, 0 deleted; 1 of 1 files rewritten"
        )

    def test_not_matched_condition(self, project, merged):
        expect_rows(project, "not_matched_cond", [(1, "bronze"), (2, "silver"), (3, "gold")])
        assert counts(ok(merged, "not_matched_cond")) == (1, 1, 0)

    def test_not_matched_by_source_delete(self, project, merged):
        expect_rows(project, "nmbs_delete", [(2, "B"), (4, "d")])
        r = ok(merged, "nmbs_delete")
        assert merge_line(r) == "MERGE 1 updated, 1 inserted, 2 deleted; 1 of 1 files rewritten"
        m = metrics(r)
        assert m["numTargetRowsNotMatchedBySourceDeleted"] == 2
        assert m["numTargetRowsMatchedDeleted"] == 0

    def test_not_matched_by_source_update(self, project, merged):
        expect_rows(
            project, "nmbs_update", [(1, "a", False), (2, "B", True), (3, "c", False), (4, "d", True)]
        )
        r = ok(merged, "nmbs_update")
        assert counts(r) == (2, 1, 0)
        m = metrics(r)
        assert m["numTargetRowsNotMatchedBySourceUpdated"] == 1
        assert m["numTargetRowsMatchedUpdated"] == 1

    def test_merge_update_columns(self, project, merged):
        expect_rows(project, "update_columns", [(1, "A", 10), (2, "b", 20), (3, "c", 30)])
        assert counts(ok(merged, "update_columns")) == (1, 1, 0)

    def test_merge_exclude_columns(self, project, merged):
        expect_rows(project, "exclude_columns", [(1, "A", 2020), (2, "b", 2020), (3, "c", 2099)])
        assert counts(ok(merged, "exclude_columns")) == (1, 1, 0)

    def test_skip_matched_step(self, project, merged):
        expect_rows(project, "skip_matched", [(1, "a"), (2, "b"), (3, "c")])
        # Insert-only merges rewrite nothing.
        assert merge_line(ok(merged, "skip_matched")) == (
            "MERGE 0 updated, 1 inserted, 0 deleted; 0 of 1 files rewritten"
        )

    def test_skip_not_matched_step(self, project, merged):
        expect_rows(project, "skip_not_matched", [(1, "A"), (2, "b")])
        assert merge_line(ok(merged, "skip_not_matched")) == (
            "MERGE 1 updated, 0 inserted, 0 deleted; 1 of 1 files rewritten"
        )

    def test_delete_condition(self, project, merged):
        expect_rows(project, "delete_cond", [(1, "A", "U"), (3, "c", "I"), (4, "d", "I")])
        r = ok(merged, "delete_cond")
        assert merge_line(r) == "MERGE 1 updated, 1 inserted, 1 deleted; 1 of 1 files rewritten"
        assert metrics(r)["numTargetRowsMatchedDeleted"] == 1

    def test_incremental_predicates(self, project, merged):
        expect_rows(project, "predicates", [(1, "A", "eu"), (2, "b", "us"), (2, "B", "us")])
        r = ok(merged, "predicates")
        assert counts(r) == (1, 1, 0)
        assert r.adapter_response["spec"]["on"] == f"{T}.`id` = {S}.`id` AND ({T}.region = 'eu')"
        m = metrics(r)
        assert m["numTargetFilesBeforeSkipping"] == 2
        assert m["numTargetFilesAfterSkipping"] == 1
        assert m["numTargetFilesRemoved"] == 1

    def test_skip_both_steps_with_not_matched_by_source_delete(self, project, merged):
        expect_rows(project, "delete_missing_only", [(2, "b")])
        r = ok(merged, "delete_missing_only")
        assert merge_line(r) == "MERGE 0 updated, 0 inserted, 2 deleted; 1 of 1 files rewritten"
        assert [(c["when"], c["action"]) for c in r.adapter_response["spec"]["clauses"]] == [
            ("not_matched_by_source", "delete")
        ]

    def test_delete_matched_and_not_matched_conditions_together(self, project, merged):
        expect_rows(project, "cdc_combined", [(1, "A", 2), (3, "c", 5), (4, "d", 1)])
        r = ok(merged, "cdc_combined")
        assert counts(r) == (1, 1, 1)
        clauses = r.adapter_response["spec"]["clauses"]
        assert [(c["when"], c["action"], c.get("condition")) for c in clauses] == [
            ("matched", "delete", f"{S}.op = 'D'"),
            ("matched", "update", f"{S}.version > {T}.version"),
            ("not_matched", "insert", f"({S}.version > 0) AND NOT ({S}.op = 'D')"),
        ]

    def test_conditions_ending_in_comments(self, project, merged):
        expect_rows(project, "cdc_commented", [(1, "A", 2), (3, "c", 5), (4, "d", 1)])
        assert counts(ok(merged, "cdc_commented")) == (1, 1, 1)

    def test_unique_key_in_another_case(self, project, merged):
        expect_rows(project, "key_case", [(1, "a"), (2, "B"), (3, "c")])
        assert counts(ok(merged, "key_case")) == (1, 1, 0)

    def test_source_reading_this_is_materialized_once(self, project, merged):
        expect_rows(project, "reads_this", [(1, "a!"), (2, "b!"), (3, "c"), (9, "z")])
        assert merge_line(ok(merged, "reads_this")) == (
            "MERGE 2 updated, 1 inserted, 0 deleted; 1 of 1 files rewritten"
        )

    def test_skip_unchanged_updates_false(self, project, merged):
        expect_rows(project, "unchanged_counted", [(1, "a"), (2, "B")])
        assert merge_line(ok(merged, "unchanged_counted")) == (
            "MERGE 2 updated, 0 inserted, 0 deleted; 1 of 1 files rewritten"
        )

    def test_skip_unchanged_updates_true(self, project, merged):
        expect_rows(project, "unchanged_skipped", [(1, "a"), (2, "b")])
        r = ok(merged, "unchanged_skipped")
        assert merge_line(r) == "MERGE 0 updated, 0 inserted, 0 deleted; 0 of 1 files rewritten"
        assert metrics(r)["numTargetFilesAdded"] == 0

    def test_partition_by(self, project, merged):
        expect_rows(project, "partitioned", [(1, "A", "eu"), (2, "b", "us"), (3, "c", "apac")])
        r = ok(merged, "partitioned")
        assert merge_line(r) == "MERGE 1 updated, 1 inserted, 0 deleted; 1 of 2 files rewritten"
        assert metrics(r)["numTargetFilesAfterSkipping"] == 1
        # The new partition is registered in the catalog.
        parts = sorted(
            p[0] for p in project.run_sql(f"show partitions {project.test_schema}.partitioned", fetch="all")
        )
        assert parts == ["region=apac", "region=eu", "region=us"]
        # Rows of the new partition are found through partition pruning too.
        found = project.run_sql(
            f"select id, name from {project.test_schema}.partitioned where region = 'apac'", fetch="all"
        )
        assert [tuple(x) for x in found] == [(3, "c")]

    def test_file_format_orc(self, project, merged):
        expect_rows(project, "orc_table", [(1, "a"), (2, "B"), (3, "c")])
        assert merge_line(ok(merged, "orc_table")) == (
            "MERGE 1 updated, 1 inserted, 0 deleted; 1 of 1 files rewritten"
        )
        assert (table_property(project, "orc_table", "Provider") or "").lower() == "orc"
        # Every data file (the rewritten one and the new ones) is ORC.
        location = (table_property(project, "orc_table", "Location") or "").removeprefix("file:")
        data_files = [
            f
            for f in os.listdir(location)
            if not f.startswith(("_", ".")) and os.path.isfile(os.path.join(location, f))
        ]
        assert data_files and all(f.endswith(".orc") for f in data_files), data_files
