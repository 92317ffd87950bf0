"""An inspectable merge: after a merge run, ``target/run/<model>.sql`` holds the MERGE INTO
text and the clause spec that ran (not the first run's ``create table``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.functional.helpers import incremental_model, ok, run_step, values

MODEL = incremental_model(
    "unique_key='id', delete_condition=\"DBT_INTERNAL_SOURCE.name = 'x'\"",
    values("id, name", "(1, 'a')"),
    values("id, name", "(1, 'x')", "(2, 'b')"),
)


class TestRunFileShowsTheMerge:
    @pytest.fixture(scope="class")
    def models(self):
        return {"orders.sql": MODEL}

    def test_run_file(self, project):
        ok(run_step(1), "orders")
        [run_file] = (Path(project.project_root) / "target" / "run").rglob("orders.sql")
        assert "create" in run_file.read_text().lower()  # the first run built the table
        ok(run_step(2), "orders")
        text = run_file.read_text()
        rel = f"{project.test_schema}.orders"
        assert (
            f"MERGE INTO {rel} AS DBT_INTERNAL_DEST\n"
            f"USING orders__dbt_tmp AS DBT_INTERNAL_SOURCE\n"
            "ON DBT_INTERNAL_DEST.`id` = DBT_INTERNAL_SOURCE.`id`\n"
            "WHEN MATCHED AND (DBT_INTERNAL_SOURCE.name = 'x') THEN DELETE  -- delete_condition\n"
        ) in text, text
        assert '"on": "DBT_INTERNAL_DEST.`id` = DBT_INTERNAL_SOURCE.`id`"' in text


class TestDebugShowsTheSession:
    def test_debug(self, project, spark_root):
        import pyspark
        from dbt.tests.util import run_dbt_and_capture

        _, output = run_dbt_and_capture(["debug"])
        # Each console line is "<colour reset>HH:MM:SS  <text>"; keep the text.
        lines = [re.sub(r"^(\x1b\[0m)?\d\d:\d\d:\d\d\s+", "", ln).strip() for ln in output.splitlines()]
        assert "method: session" in lines
        assert f"spark_version: {pyspark.__version__}" in lines
        assert any(ln.startswith("master: local") for ln in lines), output
        assert any(ln.startswith("warehouse: ") and str(spark_root) in ln for ln in lines), output
        assert any(ln.startswith("metastore: jdbc:derby:") for ln in lines), output
        assert not any(ln.startswith(("host:", "port:", "cluster:")) for ln in lines), output
