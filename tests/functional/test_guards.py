"""Guards against silent data loss, through real dbt runs: `--empty` changes no table, an
empty upstream does not empty a NOT MATCHED BY SOURCE model unless it opts in, NULL keys
are reported, and a misspelled strategy names row_level_merge."""

from __future__ import annotations

from pathlib import Path

import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture

from tests.functional.helpers import by_name, expect_rows, incremental_model, merge_line, ok, run_step, values

ROWS_1 = values("id, name", "(1, 'a')", "(2, 'b')")
# An upstream that returned nothing this run.
EMPTY = "select * from (" + values("id, name", "(1, 'a')") + ") where false"

MODELS = {
    "mirror.sql": incremental_model("unique_key='id', not_matched_by_source_action='delete'", ROWS_1, EMPTY),
    "mirror_allowed.sql": incremental_model(
        "unique_key='id', not_matched_by_source_action='delete', allow_empty_source=true", ROWS_1, EMPTY
    ),
    "upsert.sql": incremental_model(
        "unique_key='id'", ROWS_1, values("id, name", "(2, 'B')", "(cast(null as int), 'n')", "(3, 'c')")
    ),
    "strict.sql": incremental_model(
        "unique_key='id'", ROWS_1, values("id, name", "(2, 'B')", "(cast(null as int), 'n')", "(3, 'c')")
    ),
}


class TestGuards:
    @pytest.fixture(scope="class")
    def models(self):
        return MODELS

    @pytest.fixture(scope="class")
    def built(self, project):
        first = run_step(1)
        assert all(r.status == "success" for r in first.values())
        return first

    @pytest.mark.parametrize("extra", [(), ("--full-refresh",)], ids=["merge", "full_refresh"])
    def test_empty_run_changes_no_table(self, project, built, extra):
        """`--empty` reads no rows: a merge would see an empty source, a rebuild an empty table."""
        results = run_step(2, "--empty", *extra)
        for name in ("mirror", "mirror_allowed", "upsert"):
            r = ok(results, name)
            assert merge_line(r) == f"MERGE skipped (--empty): {project.test_schema}.{name} not changed"
            assert r.adapter_response["rows_affected"] == 0
            expect_rows(project, name, [(1, "a"), (2, "b")])

    def test_empty_run_still_validates_the_config_against_the_table(self, project, built):
        bad = Path(project.project_root) / "models" / "bad.sql"
        try:
            # the table exists (the bad config would fail its first run too) ...
            bad.write_text(incremental_model("unique_key='id'", ROWS_1, ROWS_1))
            ok(run_step(1, "--select", "bad"), "bad")
            bad.write_text(
                incremental_model("unique_key='id', merge_update_columns=['nope']", ROWS_1, ROWS_1)
            )
            r = run_step(1, "--select", "bad", "--empty", expect_pass=False)["bad"]
            assert r.status == "error"
            assert "`merge_update_columns` names column 'nope'" in r.message
        finally:
            bad.unlink()

    def test_empty_upstream_does_not_empty_the_table(self, project, built):
        results = run_step(2, "--select", "mirror", "mirror_allowed", expect_pass=False)
        refused = results["mirror"]
        assert refused.status == "error"
        text = " ".join(refused.message.split())
        assert f"MERGE into {project.test_schema}.mirror refused: the source is empty" in text
        assert "set `allow_empty_source: true` in the model config" in text
        expect_rows(project, "mirror", [(1, "a"), (2, "b")])
        # Opted in: MERGE semantics, every row is deleted.
        allowed = ok(results, "mirror_allowed")
        assert merge_line(allowed) == "MERGE 0 updated, 0 inserted, 2 deleted; 1 of 1 files rewritten"
        expect_rows(project, "mirror_allowed", [])

    def test_null_keys_are_reported_with_their_count(self, project, built):
        results, output = run_dbt_and_capture(["run", "--vars", "{step: 2}", "--select", "upsert"])
        assert by_name(results)["upsert"].status == "success"
        line = " ".join(output.split())
        assert (
            f"1 source row(s) merged into {project.test_schema}.upsert have a NULL in a key column (id)"
            in line
        ), output
        expect_rows(project, "upsert", [(1, "a"), (2, "B"), (3, "c"), (None, "n")])

    def test_null_keys_fail_the_model_under_warn_error_before_anything_is_written(self, project, built):
        """The NULL-key warning is a dbt warning: --warn-error stops the merge where it warned."""
        results = run_dbt(
            ["--warn-error", "run", "--vars", "{step: 2}", "--select", "strict"], expect_pass=False
        )
        r = by_name(results)["strict"]
        assert r.status == "error"
        text = " ".join(r.message.split())
        assert (
            f"1 source row(s) merged into {project.test_schema}.strict have a NULL in a key column (id)"
            in text
        )
        expect_rows(project, "strict", [(1, "a"), (2, "b")])
        # ... and without --warn-error the same run merges, warning.
        ok(run_step(2, "--select", "strict"), "strict")
        expect_rows(project, "strict", [(1, "a"), (2, "B"), (3, "c"), (None, "n")])

    def test_null_keys_of_the_first_run_are_a_warning_too(self, project, built):
        path = Path(project.project_root) / "models" / "null_first.sql"
        path.write_text(
            incremental_model(
                "unique_key='id'", values("id, name", "(1, 'a')", "(cast(null as int), 'n')"), ROWS_1
            )
        )
        try:
            results, output = run_dbt_and_capture(["run", "--select", "null_first"])
            assert by_name(results)["null_first"].status == "success"
            line = " ".join(output.split())
            assert (
                f"first run of {project.test_schema}.null_first: 1 row(s) have a NULL in a key column (id)"
                in line
            ), output
            failed = run_dbt(
                ["--warn-error", "run", "--select", "null_first", "--full-refresh"], expect_pass=False
            )
            assert by_name(failed)["null_first"].status == "error"
            assert "have a NULL in a key column (id)" in " ".join(
                by_name(failed)["null_first"].message.split()
            )
        finally:
            path.unlink()


class TestMisspelledStrategy:
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "typo.sql": "{{ config(materialized='incremental', incremental_strategy='row_level_merg', "
            "unique_key='id') }}\n" + ROWS_1
        }

    def test_the_error_lists_row_level_merge(self, project):
        r = by_name(run_dbt(["run"], expect_pass=False))["typo"]
        assert r.status == "error"
        assert "Invalid incremental strategy provided: row_level_merg" in r.message
        assert (
            "Expected one of: 'append', 'insert_overwrite', 'microbatch', 'merge', 'row_level_merge' "
            "(did you mean 'row_level_merge'?)" in r.message
        )


class TestMaxDeleteFraction:
    """`max_delete_fraction`: a merge that would delete more of the table fails, table unchanged."""

    @pytest.fixture(scope="class")
    def models(self):
        rows = values("id, name", "(1, 'a')", "(2, 'b')", "(3, 'c')", "(4, 'd')")
        return {
            "mirror.sql": incremental_model(
                "unique_key='id', not_matched_by_source_action='delete', max_delete_fraction=0.25",
                rows,
                values("id, name", "(1, 'a')", "(2, 'b')"),  # 2 of 4 rows would go
                values("id, name", "(1, 'a')", "(2, 'b')", "(3, 'c')"),  # 1 of 4: allowed
            )
        }

    def test_too_many_deletes_are_refused(self, project):
        ok(run_step(1), "mirror")
        refused = run_step(2, expect_pass=False)["mirror"]
        text = " ".join(refused.message.split())
        assert (
            f"MERGE into {project.test_schema}.mirror refused: it would delete 2 of 4 rows (50.0%), more "
            "than `max_delete_fraction: 0.25` allows (25.0%). Nothing was changed."
        ) in text, text
        expect_rows(project, "mirror", [(1, "a"), (2, "b"), (3, "c"), (4, "d")])
        allowed = ok(run_step(3), "mirror")
        assert merge_line(allowed).startswith("MERGE 0 updated, 0 inserted, 1 deleted")
        expect_rows(project, "mirror", [(1, "a"), (2, "b"), (3, "c")])
