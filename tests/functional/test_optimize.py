"""Compaction from dbt: auto-compaction after a model's merge (an OPTIMIZE version right after
it), `dbt run-operation rowmerge_optimize` (following the model: its cluster_by, else the
table's stored clustering, else its unique_key less partition columns; its
target_file_size_mb), the post-hook form, and bad upkeep config or arguments refused before
anything runs."""

from __future__ import annotations

import json
import os
import re

import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture, write_file
from pyspark.sql import SparkSession

from dbt.adapters.rowmerge.merge.lock import TableLock
from dbt.adapters.rowmerge.merge.storage import storage_for
from tests.functional.helpers import incremental_model, metrics, ok, rows, run_step, table, values

STEP1 = values("id, name", "(1, 'a')", "(2, 'b')")
STEP2 = values("id, name", "(3, 'c')")
STEP3 = values("id, name", "(4, 'd')")


def _history(project, name: str) -> list[tuple[int, str, int, int]]:
    _, output = run_dbt_and_capture(
        ["run-operation", "rowmerge_history", "--args", f"{{relation: {table(project, name)}}}"]
    )
    out = []
    for line in output.splitlines():
        found = re.search(r"(\d+) \| \S+ \| ([A-Z ]+) \| \d+ \| \d+ \| \d+ \| (\d+) \| (\d+)$", line)
        if found:
            out.append((int(found[1]), found[2], int(found[3]), int(found[4])))
    return out


def _data_files(project, name: str) -> int:
    """Visible data files in the table's folder (the journal's folder aside)."""
    return sum(
        len([f for f in files if not f.startswith(("_", "."))])
        for folder, _, files in os.walk(_folder(project, name))
        if "_rowmerge_log" not in folder
    )


def _folder(project, name: str) -> str:
    described = project.run_sql(f"describe table extended {table(project, name)}", fetch="all")
    return [r[1] for r in described if r[0] == "Location"][0].removeprefix("file:")


class TestAutoCompaction:
    def test_a_merge_is_followed_by_an_optimize_version(self, project):
        config = "materialized='incremental', incremental_strategy='row_level_merge', unique_key='id', "
        write_file(
            "{{ config(" + config + "auto_compact_min_files=3) }}\n"
            "select /*+ REPARTITION(1) */ * from values "
            "({{ var('step', 1) }}, 'n{{ var('step', 1) }}') as t(id, name)\n",
            project.project_root,
            "models",
            "orders.sql",
        )
        ok(run_step(1), "orders")
        # the table as dbt created it and the first merge's file wait for a third small file;
        # a merge's own new file waits for the next merge (it holds the rows just touched)
        assert metrics(ok(run_step(2), "orders"))["compactVersion"] == 0
        assert metrics(ok(run_step(3), "orders"))["compactVersion"] == 0
        merged = ok(run_step(4), "orders")
        assert metrics(merged)["compactVersion"] == 4
        assert _history(project, "orders") == [
            (4, "OPTIMIZE", 1, 3),
            (3, "MERGE", 1, 0),
            (2, "MERGE", 1, 0),
            (1, "MERGE", 1, 0),
            (0, "CREATE TABLE", 1, 0),
        ]
        assert _data_files(project, "orders") == 2
        assert rows(project, "orders") == [(1, "n1"), (2, "n2"), (3, "n3"), (4, "n4")]


class TestOptimizeOperation:
    def test_run_operation_clusters_by_the_models_unique_key(self, project):
        config = "unique_key='id', auto_compact=false"
        write_file(
            incremental_model(config, STEP1, STEP2, STEP3), project.project_root, "models", "orders.sql"
        )
        ok(run_step(1), "orders")
        ok(run_step(2), "orders")
        ok(run_step(3), "orders")
        relation = table(project, "orders")
        _, dry = run_dbt_and_capture(
            ["run-operation", "rowmerge_optimize", "--args", f"{{relation: {relation}, dry_run: true}}"]
        )
        assert f"rowmerge_optimize {relation}: {relation}: would rewrite 3 of 3 file(s)" in dry
        assert _history(project, "orders")[0][1] == "MERGE"
        _, output = run_dbt_and_capture(
            ["run-operation", "rowmerge_optimize", "--args", f"{{relation: {relation}}}"]
        )
        assert f"rowmerge_optimize {relation}: {relation}: rewrote 3 of 3 file(s)" in output
        assert "(version 3)" in output
        assert _history(project, "orders")[0] == (3, "OPTIMIZE", 1, 3)
        assert _data_files(project, "orders") == 1
        assert rows(project, "orders") == [(1, "a"), (2, "b"), (3, "c"), (4, "d")]
        # ordered by the model's unique_key, which is not stored as the table's clustering
        # (a merge's compaction sorts by its key anyway)
        entry = _entry(project, "orders", 3)
        assert entry["metrics"]["orderedBy"] == ["id"] and "cluster_by" not in entry


def _entry(project, name: str, version: int) -> dict:
    with open(os.path.join(_folder(project, name), "_rowmerge_log", f"{version:020d}.json")) as fh:
        return json.load(fh)


PARTITIONED = (
    values("id, name, day", "(1, 'a', 'd1')", "(2, 'b', 'd1')"),
    values("id, name, day", "(3, 'c', 'd1')"),
    values("id, name, day", "(4, 'd', 'd1')"),
)


class TestOptimizeFollowsTheModel:
    def test_the_models_cluster_by_and_size_and_a_key_with_its_partition_column(self, project):
        models = {
            "clustered": (
                "unique_key='id', cluster_by='name', target_file_size_mb=2, auto_compact=false",
                (STEP1, STEP2, STEP3),
            ),
            "daily": ("unique_key=['day', 'id'], partition_by='day', auto_compact=false", PARTITIONED),
        }
        for name, (config, steps) in models.items():
            write_file(incremental_model(config, *steps), project.project_root, "models", f"{name}.sql")
        for step in (1, 2, 3):
            done = run_step(step)
            ok(done, "clustered"), ok(done, "daily")
        for name in models:
            _, output = run_dbt_and_capture(
                ["run-operation", "rowmerge_optimize", "--args", f"{{relation: {table(project, name)}}}"]
            )
            assert f"rowmerge_optimize {table(project, name)}: {table(project, name)}: rewrote 3 of" in output
        clustered = _entry(project, "clustered", 3)
        assert clustered["metrics"]["orderedBy"] == ["name"] and clustered["cluster_by"] == ["name"]
        assert clustered["metrics"]["targetFileSizeMb"] == 2
        daily = _entry(project, "daily", 3)  # ordered by the key inside each day's files
        assert daily["metrics"]["orderedBy"] == ["id"] and "cluster_by" not in daily
        assert daily["metrics"]["targetFileSizeMb"] == 128
        assert rows(project, "daily", "id, name") == [(1, "a"), (2, "b"), (3, "c"), (4, "d")]

    def test_a_dry_run_given_as_a_word(self, project):
        write_file(
            incremental_model("unique_key='id', auto_compact=false", STEP1, STEP2),
            project.project_root,
            "models",
            "orders.sql",
        )
        ok(run_step(1), "orders")
        ok(run_step(2), "orders")
        relation = table(project, "orders")
        optimize = ["run-operation", "rowmerge_optimize", "--args"]
        _, dry = run_dbt_and_capture([*optimize, f"{{relation: {relation}, dry_run: 'TRUE'}}"])
        assert "would rewrite 2 of 2 file(s)" in dry
        _, refused = run_dbt_and_capture(
            [*optimize, f"{{relation: {relation}, dry_run: 'maybe'}}"], expect_pass=False
        )
        assert "`dry_run` must be true or false, got 'maybe'" in refused
        _, done = run_dbt_and_capture([*optimize, f"{{relation: {relation}, dry_run: 'false'}}"])
        assert "rewrote 2 of 2 file(s)" in done and "(version 2)" in done


class TestOptimizePostHook:
    def test_post_hook_optimizes_after_every_run(self, project):
        config = "unique_key='id', auto_compact=false, post_hook=\"{{ rowmerge_optimize(this) }}\""
        write_file(
            incremental_model(config, STEP1, STEP2, STEP3), project.project_root, "models", "orders.sql"
        )
        ok(run_step(1), "orders")
        ok(run_step(2), "orders")
        assert [h[1] for h in _history(project, "orders")] == ["OPTIMIZE", "MERGE", "CREATE TABLE"]
        assert _data_files(project, "orders") == 1


class TestOperationsWaitAsTheModelSays:
    """A table operation run on a model's table waits for its lock as long as the model's
    lock_timeout_s says (a post-hook of a model with 0 does not wait 600 s), unless its own
    argument says otherwise; a bad one is refused by name before anything runs."""

    def test_the_models_lock_timeout_is_the_operations(self, project, spark: SparkSession):
        config = "unique_key='id', auto_compact=false, lock_timeout_s=0"
        write_file(incremental_model(config, STEP1, STEP2), project.project_root, "models", "orders.sql")
        ok(run_step(1), "orders")
        relation = table(project, "orders")
        holder = TableLock(
            storage_for(spark), "file:" + _folder(project, "orders") + "/_rowmerge_log", relation, "MERGE", 0
        )
        with holder:
            for operation, args in (
                ("rowmerge_optimize", ""),
                ("rowmerge_vacuum", ""),
                ("rowmerge_restore", ", version: 0"),
                ("rowmerge_optimize", ", lock_timeout_s: '0.5'"),
            ):
                _, refused = run_dbt_and_capture(
                    ["run-operation", operation, "--args", f"{{relation: {relation}{args}}}"],
                    expect_pass=False,
                )
                waited = "0.5" if "0.5" in args else "0"
                assert f"on {relation} gave up after waiting {waited} s" in refused, (operation, refused)
        _, refused = run_dbt_and_capture(
            ["run-operation", "rowmerge_vacuum", "--args", f"{{relation: {relation}, lock_timeout_s: -1}}"],
            expect_pass=False,
        )
        assert "`lock_timeout_s` must be a finite number of seconds >= 0, got -1" in refused
        assert [h[1] for h in _history(project, "orders")] == ["CREATE TABLE"]


class TestBadUpkeepConfig:
    @pytest.mark.parametrize(
        "bad, message",
        [
            ("target_file_size_mb=-1", "`target_file_size_mb` must be a number > 0, got -1"),
            ("auto_compact='yes'", "`auto_compact` must be true or false, got 'yes'"),
            ("optimize_every=0", "`optimize_every` must be a whole number >= 1, got 0"),
            ("cluster_by='nope'", "`cluster_by` column 'nope' is not a column of"),
        ],
    )
    def test_refused_naming_the_key_and_table_unchanged(self, project, bad, message):
        write_file(
            incremental_model("unique_key='id'", STEP1, STEP2), project.project_root, "models", "orders.sql"
        )
        ok(run_step(1), "orders")
        write_file(
            incremental_model("unique_key='id', " + bad, STEP1, STEP2),
            project.project_root,
            "models",
            "orders.sql",
        )
        failed = run_dbt(["run", "--vars", "{step: 2}"], expect_pass=False)
        assert message in re.sub(r"\s+", " ", str(failed[0].message))
        assert rows(project, "orders") == [(1, "a"), (2, "b")]
        assert [h[1] for h in _history(project, "orders")] == ["CREATE TABLE"]
