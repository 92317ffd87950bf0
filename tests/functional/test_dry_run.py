"""Dry run: `dry_run: true` (config) or `--vars '{rowmerge_dry_run: true}'` plans the merge and
reports it in the run line and the adapter response, writing nothing; the real run that follows
does exactly what was reported. A first run's dry run creates nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
# differs from row 1 only in the new column: an update once the column exists
ONLY_NEW_COLUMN = values("id, name, op, w", "(1, 'a', 'I', 'x')")
WITHOUT_OP = values("id, name", "(1, 'A')")
RETYPED = values("id, name, op", "(1, 5, 'U')")
UNCHANGED = [(1, "a", "I"), (2, "b", "I"), (3, "c", "I")]


def osc(mode: str, later: str) -> str:
    return incremental_model(f"unique_key='id', on_schema_change='{mode}'", FIRST, later)


class TestDryRunJudgesSchemaChanges:
    """A dry run meets on_schema_change as the real run would: it fails where the real run
    fails ('fail'; sync_all_columns dropping or retyping a column), plans the merge with the
    columns append_new_columns / sync_all_columns would add (reported, not added), and
    writes nothing either way."""

    @pytest.fixture(scope="class")
    def models(self):
        return {
            "strict.sql": osc("fail", WIDER),
            "growing.sql": osc("append_new_columns", WIDER),
            "syncadd.sql": osc("sync_all_columns", ONLY_NEW_COLUMN),
            "syncdrop.sql": osc("sync_all_columns", WITHOUT_OP),
            "retyped.sql": osc("sync_all_columns", RETYPED),
        }

    def dry(self, name: str, expect_pass: bool = True) -> tuple[Any, str]:
        args = ["run", "--vars", "{step: 2, rowmerge_dry_run: true}", "--select", name]
        results, output = run_dbt_and_capture(args, expect_pass=expect_pass)
        return by_name(results)[name], output

    def test_dry_runs_fail_and_plan_as_the_real_runs(self, project):
        run_step(1)
        models = ("strict", "growing", "syncadd", "syncdrop", "retyped")
        failed = {}
        for name in ("strict", "syncdrop", "retyped"):
            result, failed[name] = self.dry(name, expect_pass=False)
            assert result.status == "error", name
        assert "The source and target schemas on this incremental model are out of sync" in failed["strict"]
        assert (
            "Apache Spark does not support dropping columns from tables: on_schema_change='sync_all_columns' "
            f"would drop op from {project.test_schema}.syncdrop" in _one_line(failed["syncdrop"])
        )
        assert (
            "on_schema_change='sync_all_columns' would change the type of name in "
            f"{project.test_schema}.retyped, which Spark refuses" in _one_line(failed["retyped"])
        )

        grow, output = self.dry("growing")
        assert merge_line(grow).endswith("; nothing written"), merge_line(grow)
        assert (
            f"rowmerge dry run: {project.test_schema}.growing (on_schema_change=append_new_columns) "
            "would gain column(s) [w]" in output
        )
        add, output = self.dry("syncadd")
        # planned with the column: row 1 differs only there, and the real run updates it
        assert merge_line(add).startswith(
            f"MERGE dry run: {project.test_schema}.syncadd would update 1, insert 0, delete 0 rows"
        ), merge_line(add)
        assert "(on_schema_change=sync_all_columns) would gain column(s) [w]" in output
        for name in models:
            assert column_names(project, name) == ["id", "name", "op"], name
            expect_rows(project, name, UNCHANGED)

        # the real runs: the same failures, the columns added, the update the dry run counted
        real = run_step(2, expect_pass=False)
        assert {n: real[n].status for n in models} == {
            "strict": "error",
            "growing": "success",
            "syncadd": "success",
            "syncdrop": "error",
            "retyped": "error",
        }
        assert merge_line(real["syncadd"]).startswith("MERGE 1 updated, 0 inserted, 0 deleted"), merge_line(
            real["syncadd"]
        )
        assert column_names(project, "growing") == ["id", "name", "op", "w"]
        assert column_names(project, "syncadd") == ["id", "name", "op", "w"]
        assert column_names(project, "retyped") == ["id", "name", "op"]


def _one_line(text: str) -> str:
    return " ".join(text.split())
