"""The first run and ``--full-refresh`` behave like a merge into an empty table.

Rows a not_matched clause would not insert (its condition fails, or a delete_condition
deletes them) are never created, ``values`` maps apply, and the config is checked against
the model's columns before the table exists: a parse error or an unknown key column fails
the first run and creates nothing. An unknown column in a matched clause is left for the
merge (the model may select it only under ``is_incremental()``).
"""

from __future__ import annotations

import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture

from tests.functional.helpers import (
    by_name,
    column_names,
    expect_rows,
    incremental_model,
    ok,
    run_step,
    table_exists,
    values,
)

S = "DBT_INTERNAL_SOURCE"
T = "DBT_INTERNAL_DEST"
ROWS = values(
    "id, qty, gone",
    "(1, 5, false)",
    "(2, 0, false)",  # fails not_matched_condition
    "(3, 7, true)",  # delete_condition holds: a merge would never insert it
    "(4, 1, false)",
)
LATER = values("id, qty, gone", "(4, 9, false)", "(5, 0, false)", "(6, 2, false)")

MODELS = {
    # shorthand: WHEN NOT MATCHED AND (qty > 0) AND NOT (gone) THEN INSERT *
    "conditional.sql": incremental_model(
        f"unique_key='id', not_matched_condition='{S}.qty > 0', delete_condition='{S}.gone'", ROWS, LATER
    ),
    # merge_clauses: two inserts with their own values; the first whose condition holds acts
    "mapped.sql": incremental_model(
        "unique_key='id', merge_clauses=["
        "{'when': 'matched', 'action': 'update', 'set': '*'}, "
        f"{{'when': 'not_matched', 'condition': '{S}.qty = 0', 'action': 'insert', "
        f"'values': {{'id': '{S}.id', 'qty': '-1'}}}}, "
        f"{{'when': 'not_matched', 'action': 'insert', 'values': {{'id': '{S}.id * 10', 'qty': '{S}.qty', "
        f"'gone': '{S}.gone'}}}}]",
        ROWS,
        LATER,
    ),
    # no insert clause at all: loaded with every row (see the test)
    "update_only.sql": incremental_model("unique_key='id', skip_not_matched_step=true", ROWS, LATER),
}

CONDITIONAL_FIRST = [(1, 5, False), (4, 1, False)]
# id 2 has qty 0: the first insert acts, its values set id and qty only (gone is NULL)
MAPPED_FIRST = [(10, 5, False), (2, -1, None), (30, 7, True), (40, 1, False)]


class TestFirstRunIsAMergeIntoAnEmptyTable:
    @pytest.fixture(scope="class")
    def models(self):
        return MODELS

    @pytest.fixture(scope="class")
    def first(self, project):
        return run_step(1)

    def test_rows_no_insert_clause_inserts_are_not_created(self, project, first):
        ok(first, "conditional")
        expect_rows(project, "conditional", CONDITIONAL_FIRST)
        assert column_names(project, "conditional") == ["id", "qty", "gone"]

    def test_values_maps_apply(self, project, first):
        ok(first, "mapped")
        expect_rows(project, "mapped", MAPPED_FIRST)

    def test_without_an_insert_clause_every_row_is_loaded(self, project, first):
        # an insert-free merge into an empty table would create an empty table that no merge
        # could ever fill: an update-only model is loaded with every row of its first run ...
        ok(first, "update_only")
        expect_rows(project, "update_only", [(1, 5, False), (2, 0, False), (3, 7, True), (4, 1, False)])
        assert column_names(project, "update_only") == ["id", "qty", "gone"]
        # ... and its merges update only: 4 changes, 5 and 6 are not inserted
        ok(run_step(2, "--select", "update_only"), "update_only")
        expect_rows(project, "update_only", [(1, 5, False), (2, 0, False), (3, 7, True), (4, 9, False)])

    def test_full_refresh_behaves_like_the_first_run(self, project, first):
        ok(run_step(2, "--select", "conditional"), "conditional")
        expect_rows(project, "conditional", [(1, 5, False), (4, 9, False), (6, 2, False)])
        ok(run_step(1, "--select", "conditional", "--full-refresh"), "conditional")
        expect_rows(project, "conditional", CONDITIONAL_FIRST)


def _first_run_error(cfg: str) -> str:
    return incremental_model(cfg, ROWS, LATER)


BAD = {
    "parse_error": (
        "unique_key='id', delete_condition='qty = = 5'",
        "delete_condition (when: matched, action: delete) condition (qty = = 5) cannot be resolved: "
        "[PARSE_SYNTAX_ERROR] Syntax error at or near '='",
    ),
    "unknown_key": (
        "unique_key='nope'",
        "`unique_key` names column 'nope', which",
    ),
    "insert_reads_the_target": (
        f"unique_key='id', not_matched_condition='{T}.qty > 0'",
        f"not_matched_condition (when: not_matched, action: insert) condition ({T}.qty > 0) may reference "
        f"only the source ({S})",
    ),
    "unknown_update_column": (
        "unique_key='id', merge_update_columns=['nope']",
        "`merge_update_columns` names column 'nope'",
    ),
}


class TestFirstRunChecksTheConfig:
    @pytest.fixture(scope="class")
    def models(self):
        models = {f"{name}.sql": _first_run_error(cfg) for name, (cfg, _) in BAD.items()}
        # matched_condition reads a column the model selects only on incremental runs
        models["incremental_only_column.sql"] = (
            "{{ config(materialized='incremental', incremental_strategy='row_level_merge', "
            f"unique_key='id', matched_condition='{S}.version = 2') }}}}\n"
            "select id, {% if is_incremental() %}qty + 1 as qty, gone, 2 as version"
            "{% else %}qty, gone{% endif %} from (" + ROWS + ")"
        )
        return models

    @pytest.fixture(scope="class")
    def first(self, project):
        return run_step(1, expect_pass=False)

    @pytest.mark.parametrize("name", sorted(BAD))
    def test_fails_and_creates_nothing(self, project, first, name):
        r = first[name]
        assert r.status == "error", f"{name}: {r.status}"
        message = " ".join(r.message.split())
        assert f"Invalid row_level_merge config for {project.test_schema}.{name}" in message, message
        assert BAD[name][1] in message, message
        assert not table_exists(project, name)

    def test_a_column_selected_only_on_incremental_runs_is_left_for_the_merge(self, project, first):
        ok(first, "incremental_only_column")
        expect_rows(
            project, "incremental_only_column", [(1, 5, False), (2, 0, False), (3, 7, True), (4, 1, False)]
        )
        # The merge resolves it: every row matches and is updated.
        results = by_name(run_dbt(["run", "--select", "incremental_only_column"]))
        assert ok(results, "incremental_only_column").adapter_response["metrics"]["numTargetRowsUpdated"] == 4
        expect_rows(
            project, "incremental_only_column", [(1, 6, False), (2, 1, False), (3, 8, True), (4, 2, False)]
        )


class TestAnInsertClauseReadingALaterColumn:
    """The model selects `op` only on incremental runs, and delete_condition (so the insert
    clause: AND NOT (op = 'D')) reads it: the first run cannot evaluate the insert clause, so
    it creates the table from every row, as dbt does, and says so; merges apply the clause."""

    @pytest.fixture(scope="class")
    def models(self):
        return {
            "cdc.sql": (
                "{{ config(materialized='incremental', incremental_strategy='row_level_merge', "
                f"unique_key='id', delete_condition=\"{S}.op = 'D'\") }}}}\n"
                "select id, qty, gone{% if is_incremental() %}, case when gone then 'D' else 'U' end as op"
                "{% endif %} from ({% if is_incremental() %}" + LATER + "{% else %}" + ROWS + "{% endif %})"
            )
        }

    def test_first_run_keeps_every_row_with_a_warning_and_merges_apply_the_clause(self, project):
        results, output = run_dbt_and_capture(["run"])
        ok(by_name(results), "cdc")
        text = " ".join(output.split())
        assert (
            f"first run of {project.test_schema}.cdc: the table is created from every row of the model"
            in text
        )
        assert "reads `DBT_INTERNAL_SOURCE`.`op`, which the model does not select on this run" in text
        expect_rows(project, "cdc", [(1, 5, False), (2, 0, False), (3, 7, True), (4, 1, False)])
        merged = ok(by_name(run_dbt(["run"])), "cdc")
        assert merged.adapter_response["metrics"]["numTargetRowsInserted"] == 2
        expect_rows(
            project,
            "cdc",
            [(1, 5, False), (2, 0, False), (3, 7, True), (4, 9, False), (5, 0, False), (6, 2, False)],
        )
