"""Dry run: `dry_run: true` (config) or `--vars '{rowmerge_dry_run: true}'` plans the merge and
reports it in the run line and the adapter response, writing nothing; the real run that follows
does exactly what was reported. A first run's dry run creates nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from dbt.tests.util import run_dbt_and_capture

from tests.functional.helpers import (
    by_name,
    column_names,
    expect_rows,
    incremental_model,
    merge_line,
    ok,
    run_step,
    table_exists,
    values,
)

S = "DBT_INTERNAL_SOURCE"
FIRST = values("id, name, op", "(1, 'a', 'I')", "(2, 'b', 'I')", "(3, 'c', 'I')")
LATER = values("id, name, op", "(1, 'A', 'U')", "(2, 'b', 'D')", "(4, 'd', 'I')", "(5, 'e', 'D')")
CONFIG = f"unique_key='id', delete_condition=\"{S}.op = 'D'\""


class TestDryRun:
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "cdc.sql": incremental_model(CONFIG, FIRST, LATER),
            # always a dry run: never created
            "never.sql": incremental_model(CONFIG + ", dry_run=true", FIRST, LATER),
        }

    def test_dry_run_reports_the_merge_and_changes_nothing(self, project):
        first = run_step(1)
        ok(first, "cdc")
        never = ok(first, "never")
        assert merge_line(never) == (
            f"CREATE TABLE dry run: {project.test_schema}.never would be created with 3 rows; nothing written"
        )
        assert not table_exists(project, "never")

        results, output = run_dbt_and_capture(
            ["run", "--vars", "{step: 2, rowmerge_dry_run: true}", "--select", "cdc"]
        )
        r = ok(by_name(results), "cdc")
        line = merge_line(r)
        assert line.startswith(
            f"MERGE dry run: {project.test_schema}.cdc would update 1, insert 1, delete 1 rows; "
            "rewrite 1 of 1 files ("
        ), line
        assert line.endswith("); nothing written"), line
        report = r.adapter_response["dry_run"]
        assert [(c["action"], c["rows"]) for c in report["clauses"]] == [
            ("delete", 1),
            ("update", 1),
            ("insert", 1),
        ]
        # every clause's count is in the log too
        assert "dry run: delete_condition (when: matched, action: delete): 1 row(s)" in output
        expect_rows(project, "cdc", [(1, "a", "I"), (2, "b", "I"), (3, "c", "I")])
        # target/run shows the merge the dry run planned
        compiled = next(Path(project.project_root, "target", "run").rglob("cdc.sql")).read_text()
        assert "MERGE INTO" in compiled

        # the real run does what the dry run said
        merged = ok(run_step(2, "--select", "cdc"), "cdc")
        assert merge_line(merged).startswith("MERGE 1 updated, 1 inserted, 1 deleted; 1 of 1 files rewritten")
        assert merged.adapter_response["metrics"]["numTargetBytesRemoved"] == report["bytes_rewritten"]
        expect_rows(project, "cdc", [(1, "A", "U"), (3, "c", "I"), (4, "d", "I")])


WIDER = values("id, name, op, w", "(1, 'A', 'U', 'x')", "(4, 'd', 'I', 'y')")


class TestDryRunJudgesSchemaChanges:
    """A dry run meets on_schema_change as the real run would: 'fail' fails (and nothing is
    written either way); what append_new_columns would add is reported, not added."""

    @pytest.fixture(scope="class")
    def models(self):
        return {
            "strict.sql": incremental_model("unique_key='id', on_schema_change='fail'", FIRST, WIDER),
            "growing.sql": incremental_model(
                "unique_key='id', on_schema_change='append_new_columns'", FIRST, WIDER
            ),
        }

    def test_fail_fails_and_append_is_reported(self, project):
        run_step(1)
        dry = ["run", "--vars", "{step: 2, rowmerge_dry_run: true}"]
        results, output = run_dbt_and_capture([*dry, "--select", "strict"], expect_pass=False)
        assert by_name(results)["strict"].status == "error"
        assert "The source and target schemas on this incremental model are out of sync" in output
        assert column_names(project, "strict") == ["id", "name", "op"]
        expect_rows(project, "strict", [(1, "a", "I"), (2, "b", "I"), (3, "c", "I")])

        results, output = run_dbt_and_capture([*dry, "--select", "growing"])
        line = merge_line(ok(by_name(results), "growing"))
        assert line.endswith("; nothing written"), line
        assert (
            f"rowmerge dry run: {project.test_schema}.growing (on_schema_change=append_new_columns) "
            "would gain column(s) [w]" in output
        )
        assert column_names(project, "growing") == ["id", "name", "op"]
        expect_rows(project, "growing", [(1, "a", "I"), (2, "b", "I"), (3, "c", "I")])

        # the real runs: the same failure, and the column added
        run_step(2, "--select", "strict", expect_pass=False)
        ok(run_step(2, "--select", "growing"), "growing")
        assert column_names(project, "growing") == ["id", "name", "op", "w"]
