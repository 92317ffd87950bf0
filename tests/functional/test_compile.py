"""What the macros compile each config key into, and every config error's exact text.

One ``dbt run-operation`` compiles every case below through the real macros
(``rowmerge_compile_spec``) and the adapter's one validation call
(``adapter.rowmerge_config_error``), with no table and no merge: the whole module costs one
dbt invocation. ``test_bad_config.py`` keeps a handful of full runs that prove the wiring
(an error on the first run creates nothing; an error later changes nothing).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from dbt.tests.util import run_dbt_and_capture

T = "DBT_INTERNAL_DEST"
S = "DBT_INTERNAL_SOURCE"
REL = "analytics.orders"
PREFIX = f"Invalid row_level_merge config for {REL}: "
COLUMNS = ["id", "name", "amount"]

# A test-only macro: compile each case and ask the validator about it, without raising.
COMPILE_CASES = """
{% macro compile_cases(cases) %}
  {%- set out = {} -%}
  {%- set rel = api.Relation.create(schema='analytics', identifier='orders') -%}
  {%- for name, case in cases.items() -%}
    {%- set spec = rowmerge_compile_spec(case.config, rel, 'orders__dbt_tmp', case.get('columns')) -%}
    {%- set error = adapter.rowmerge_config_error(spec, case.config, rel.render(), case.get('columns')) -%}
    {%- do out.update({name: {'spec': spec, 'error': error}}) -%}
  {%- endfor -%}
  {{ log('COMPILED ' ~ tojson(out), info=True) }}
{% endmacro %}
"""

# table_changes' bounds are checked when the model reading them compiles.
CHANGES_OF = """
{% macro changes_of(start, end=none) %}
  {%- set rel = api.Relation.create(schema='analytics', identifier='orders') -%}
  {{ log('CHANGES ' ~ table_changes(rel, start, end), info=True) }}
{% endmacro %}
"""


def on(*keys: str) -> str:
    return " AND ".join(f"{T}.`{k}` = {S}.`{k}`" for k in keys)


UPDATE = {"when": "matched", "action": "update", "set": "*", "origin": "the default matched update"}
DELETE_OP_D = {
    "when": "matched",
    "condition": f"{S}.op = 'D'",
    "action": "delete",
    "origin": "delete_condition",
}
INSERT = {
    "when": "not_matched",
    "action": "insert",
    "values": "*",
    "origin": "the default not-matched insert",
}

# name -> (config, columns or None, expected {spec key: value} subset)
COMPILES: dict[str, tuple[dict[str, Any], list[str] | None, dict[str, Any]]] = {
    "key_string": (
        {"unique_key": "id"},
        None,
        {
            "version": 1,
            "target": REL,
            "source": "orders__dbt_tmp",
            "target_alias": T,
            "source_alias": S,
            "on": on("id"),
            "on_origin": "`unique_key` (id)",
            "clauses": [UPDATE, INSERT],
            "skip_unchanged_updates": True,
            "change_data_feed": None,
            "schema_evolution": False,
        },
    ),
    "key_list": (
        {"unique_key": ["region", "id"]},
        None,
        {"on": on("region", "id"), "on_origin": "`unique_key` (region, id)"},
    ),
    "matched_condition": (
        {"unique_key": "id", "matched_condition": f"{S}.v > {T}.v"},
        None,
        {"clauses": [{**UPDATE, "condition": f"{S}.v > {T}.v", "origin": "matched_condition"}, INSERT]},
    ),
    "not_matched_condition": (
        {"unique_key": "id", "not_matched_condition": f"{S}.tier <> 'bronze'"},
        None,
        {
            "clauses": [
                UPDATE,
                {**INSERT, "condition": f"{S}.tier <> 'bronze'", "origin": "not_matched_condition"},
            ]
        },
    ),
    "delete_condition": (
        {"unique_key": "id", "delete_condition": f"{S}.op = 'D'"},
        None,
        {
            "clauses": [
                DELETE_OP_D,
                UPDATE,
                {**INSERT, "condition": f"NOT ({S}.op = 'D')"},
            ]
        },
    ),
    "delete_and_not_matched_condition": (
        {"unique_key": "id", "delete_condition": f"{S}.op = 'D'", "not_matched_condition": f"{S}.v > 0"},
        None,
        {
            "clauses": [
                DELETE_OP_D,
                UPDATE,
                {
                    **INSERT,
                    "condition": f"({S}.v > 0) AND NOT ({S}.op = 'D')",
                    "origin": "not_matched_condition",
                },
            ]
        },
    ),
    "delete_and_not_matched_condition_ending_in_comments": (
        {
            "unique_key": "id",
            "delete_condition": f"{S}.op = 'D' -- hard deletes",
            "not_matched_condition": f"{S}.v > 0 -- in C:\\",
        },
        None,
        {
            "clauses": [
                {**DELETE_OP_D, "condition": f"{S}.op = 'D' -- hard deletes"},
                UPDATE,
                {
                    **INSERT,
                    "condition": f"({S}.v > 0 -- in C:\\\n\n) AND NOT ({S}.op = 'D' -- hard deletes\n\n)",
                    "origin": "not_matched_condition",
                },
            ]
        },
    ),
    "merge_update_columns": (
        {"unique_key": "id", "merge_update_columns": ["name"]},
        COLUMNS,
        {"clauses": [{**UPDATE, "set": {"name": f"{S}.`name`"}, "origin": "merge_update_columns"}, INSERT]},
    ),
    "merge_exclude_columns": (
        {"unique_key": "id", "merge_exclude_columns": ["AMOUNT"]},
        COLUMNS,
        {
            "clauses": [
                {
                    **UPDATE,
                    "set": {"id": f"{S}.`id`", "name": f"{S}.`name`"},
                    "origin": "merge_exclude_columns",
                },
                INSERT,
            ]
        },
    ),
    # Before the table exists its columns are unknown: `*` (checked again at the merge).
    "merge_exclude_columns_first_run": (
        {"unique_key": "id", "merge_exclude_columns": ["amount"]},
        None,
        {"clauses": [{**UPDATE, "origin": "merge_exclude_columns"}, INSERT]},
    ),
    "skip_matched_step": ({"unique_key": "id", "skip_matched_step": True}, None, {"clauses": [INSERT]}),
    "skip_not_matched_step": (
        {"unique_key": "id", "skip_not_matched_step": True},
        None,
        {"clauses": [UPDATE]},
    ),
    "nmbs_delete": (
        {"unique_key": "id", "not_matched_by_source_action": "delete"},
        None,
        {
            "clauses": [
                UPDATE,
                INSERT,
                {
                    "when": "not_matched_by_source",
                    "action": "delete",
                    "origin": "not_matched_by_source_action",
                },
            ]
        },
    ),
    "nmbs_update": (
        {
            "unique_key": "id",
            "not_matched_by_source_action": "update",
            "not_matched_by_source_condition": f"{T}.active",
            "not_matched_by_source_set": {"active": "false"},
        },
        None,
        {
            "clauses": [
                UPDATE,
                INSERT,
                {
                    "when": "not_matched_by_source",
                    "action": "update",
                    "condition": f"{T}.active",
                    "set": {"active": "false"},
                    "origin": "not_matched_by_source_condition",
                },
            ]
        },
    ),
    "delete_missing_only": (
        {
            "unique_key": "id",
            "skip_matched_step": True,
            "skip_not_matched_step": True,
            "not_matched_by_source_action": "delete",
        },
        None,
        {
            "clauses": [
                {
                    "when": "not_matched_by_source",
                    "action": "delete",
                    "origin": "not_matched_by_source_action",
                }
            ]
        },
    ),
    "incremental_predicates": (
        {"unique_key": "id", "incremental_predicates": [f"{T}.region = 'eu'", f"{T}.y > 1"]},
        None,
        {"on": f"{on('id')} AND ({T}.region = 'eu') AND ({T}.y > 1)"},
    ),
    "incremental_predicates_ending_in_a_comment": (
        {"unique_key": "id", "incremental_predicates": [f"{T}.region = 'eu' -- EU only", f"{T}.y > 1"]},
        None,
        {"on": f"{on('id')} AND ({T}.region = 'eu' -- EU only\n\n) AND ({T}.y > 1)"},
    ),
    "predicates_older_name": (
        {"unique_key": "id", "predicates": [f"{T}.region = 'eu'"]},
        None,
        {"on": f"{on('id')} AND ({T}.region = 'eu')"},
    ),
    "predicates_both_equal": (
        {"unique_key": "id", "predicates": [f"{T}.r = 1"], "incremental_predicates": [f"{T}.r = 1"]},
        None,
        {"on": f"{on('id')} AND ({T}.r = 1)"},
    ),
    "merge_clauses": (
        {
            "unique_key": "id",
            "merge_clauses": [
                {"when": "matched", "condition": f"{S}.op = 'D'", "action": "delete"},
                {"when": "not_matched", "action": "insert", "values": {"id": f"{S}.id"}},
            ],
        },
        None,
        {
            "clauses": [
                {
                    "when": "matched",
                    "condition": f"{S}.op = 'D'",
                    "action": "delete",
                    "origin": "merge_clauses[0]",
                },
                {
                    "when": "not_matched",
                    "action": "insert",
                    "values": {"id": f"{S}.id"},
                    "origin": "merge_clauses[1]",
                },
            ]
        },
    ),
    "change_data_feed_true": (
        {"unique_key": "id", "change_data_feed": True},
        None,
        {"change_data_feed": {"table": "analytics.orders__changes"}},
    ),
    "change_data_feed_name": (
        {"unique_key": "id", "change_data_feed": " order_changes "},
        None,
        {"change_data_feed": {"table": "analytics.order_changes"}},
    ),
    "change_data_feed_qualified": (
        {"unique_key": "id", "change_data_feed": "audit.order_changes"},
        None,
        {"change_data_feed": {"table": "audit.order_changes"}},
    ),
    "change_data_feed_false": (
        {"unique_key": "id", "change_data_feed": False},
        None,
        {"change_data_feed": None},
    ),
    "aliases": (
        {"unique_key": "id", "target_alias": "t", "source_alias": "s", "merge_update_columns": ["name"]},
        COLUMNS,
        {
            "target_alias": "t",
            "source_alias": "s",
            "on": "t.`id` = s.`id`",
            "clauses": [{**UPDATE, "set": {"name": "s.`name`"}, "origin": "merge_update_columns"}, INSERT],
        },
    ),
    "switches": (
        {
            "unique_key": "id",
            "skip_unchanged_updates": False,
            "lock_timeout_s": 5,
            "on_schema_change": "append_new_columns",
        },
        None,
        {"skip_unchanged_updates": False, "lock_timeout_s": 5, "schema_evolution": True},
    ),
}

# name -> (config, columns or None, the exact error after PREFIX)
ERRORS: dict[str, tuple[dict[str, Any], list[str] | None, str]] = {
    "unknown_when": (
        {"unique_key": "id", "merge_clauses": [{"when": "sometimes", "action": "delete"}]},
        None,
        "merge_clauses[0]: unknown `when` 'sometimes'; use one of matched, not_matched, "
        "not_matched_by_source",
    ),
    "unknown_action": (
        {"unique_key": "id", "merge_clauses": [{"when": "matched", "action": "upsert", "set": "*"}]},
        None,
        "merge_clauses[0] (when: matched): unknown `action` 'upsert'; use one of update, delete",
    ),
    "set_on_insert": (
        {
            "unique_key": "id",
            "merge_clauses": [
                {"when": "matched", "action": "update", "set": "*"},
                {"when": "not_matched", "action": "insert", "set": "*", "values": "*"},
            ],
        },
        None,
        "merge_clauses[1] (when: not_matched): `set` is for update; an insert takes `values`",
    ),
    "values_on_update": (
        {
            "unique_key": "id",
            "merge_clauses": [{"when": "matched", "action": "update", "set": "*", "values": "*"}],
        },
        None,
        "merge_clauses[0] (when: matched): `values` is for insert; an update takes `set`",
    ),
    "insert_under_matched": (
        {"unique_key": "id", "merge_clauses": [{"when": "matched", "action": "insert", "values": "*"}]},
        None,
        "merge_clauses[0] (when: matched): action 'insert' is not allowed here; when: matched allows update "
        "or delete (insert is only for when: not_matched)",
    ),
    "unconditional_not_last": (
        {
            "unique_key": "id",
            "merge_clauses": [
                {"when": "matched", "action": "update", "set": "*"},
                {"when": "matched", "condition": f"{S}.name = 'x'", "action": "delete"},
            ],
        },
        None,
        "merge_clauses[0] (when: matched): only the last matched clause may omit `condition`; a clause "
        "after it could never act. Add a condition or move it last",
    ),
    "update_and_exclude": (
        {"unique_key": "id", "merge_update_columns": ["name"], "merge_exclude_columns": ["id"]},
        None,
        "`merge_update_columns` and `merge_exclude_columns` cannot both be set; use one",
    ),
    "no_unique_key": (
        {"matched_condition": "true"},
        None,
        "`unique_key` is required for incremental_strategy='row_level_merge' (it builds the merge `on` "
        "condition; with merge_clauses too)",
    ),
    "no_unique_key_clauses": (
        {"merge_clauses": [{"when": "matched", "action": "update", "set": "*"}]},
        None,
        "`unique_key` is required for incremental_strategy='row_level_merge' (it builds the merge `on` "
        "condition; with merge_clauses too)",
    ),
    "unique_key_not_a_name": (
        {"unique_key": 5},
        None,
        "`unique_key` must be a column name or a list of column names, got 5",
    ),
    "bad_nmbs_action": (
        {"unique_key": "id", "not_matched_by_source_action": "archive"},
        None,
        "`not_matched_by_source_action` must be 'delete' or 'update', got 'archive'",
    ),
    "nmbs_update_without_set": (
        {"unique_key": "id", "not_matched_by_source_action": "update"},
        None,
        "`not_matched_by_source_action`='update' needs `not_matched_by_source_set` (a mapping of target "
        "column to SQL expression)",
    ),
    "nmbs_condition_without_action": (
        {"unique_key": "id", "not_matched_by_source_condition": f"{T}.active"},
        None,
        "`not_matched_by_source_condition` has no effect without `not_matched_by_source_action` "
        "('delete' or 'update')",
    ),
    "empty_merge_clauses": (
        {"unique_key": "id", "merge_clauses": []},
        None,
        "`merge_clauses` is an empty list: give at least one entry, or leave the key out",
    ),
    "nmbs_set_with_delete": (
        {
            "unique_key": "id",
            "not_matched_by_source_action": "delete",
            "not_matched_by_source_set": {"active": "false"},
        },
        None,
        "`not_matched_by_source_set` has no effect with `not_matched_by_source_action`='delete' (a deleted "
        "row takes no values); remove it, or set the action to 'update'",
    ),
    "matched_condition_with_skip": (
        {"unique_key": "id", "skip_matched_step": True, "matched_condition": f"{S}.name <> {T}.name"},
        None,
        "`matched_condition` has no effect with `skip_matched_step`: true (that clause is not run); remove "
        "one of them",
    ),
    "not_matched_condition_with_skip": (
        {"unique_key": "id", "skip_not_matched_step": True, "not_matched_condition": f"{S}.name <> 'x'"},
        None,
        "`not_matched_condition` has no effect with `skip_not_matched_step`: true (that clause is not run); "
        "remove one of them",
    ),
    "skip_both_steps": (
        {"unique_key": "id", "skip_matched_step": True, "skip_not_matched_step": True},
        None,
        "`skip_matched_step` and `skip_not_matched_step` together leave no clause to run",
    ),
    "skip_step_not_bool": (
        {"unique_key": "id", "skip_matched_step": "false"},
        None,
        "`skip_matched_step` must be true or false, got 'false'",
    ),
    "clauses_and_shorthand": (
        {
            "unique_key": "id",
            "matched_condition": "true",
            "merge_clauses": [{"when": "matched", "action": "update", "set": "*"}],
        },
        None,
        "`merge_clauses` cannot be combined with the shorthand key(s) matched_condition; write those "
        "clauses into merge_clauses instead",
    ),
    "merge_clauses_not_a_list": (
        {"unique_key": "id", "merge_clauses": {"when": "matched", "action": "delete"}},
        None,
        "`merge_clauses` must be a list, got {'when': 'matched', 'action': 'delete'}",
    ),
    "update_columns_not_a_list": (
        {"unique_key": "id", "merge_update_columns": "name"},
        None,
        "`merge_update_columns` must be a list of strings, got 'name'",
    ),
    "predicates_not_a_list": (
        {"unique_key": "id", "incremental_predicates": f"{T}.r = 1"},
        None,
        f"`incremental_predicates` must be a list of strings, got '{T}.r = 1'",
    ),
    "predicates_both_differ": (
        {"unique_key": "id", "predicates": [f"{T}.r = 1"], "incremental_predicates": [f"{T}.r = 2"]},
        None,
        "`predicates` and `incremental_predicates` are both set, to different lists; they are one "
        "setting (`predicates` is its older name): keep incremental_predicates",
    ),
    "change_data_feed_bad": (
        {"unique_key": "id", "change_data_feed": 3},
        None,
        "`change_data_feed` must be true, false or the name of the change table, got 3",
    ),
    "delta_format": (
        {"unique_key": "id", "file_format": "delta"},
        None,
        "Invalid incremental strategy for file_format 'delta': row_level_merge is for plain Parquet/ORC "
        "tables. A delta table has MERGE INTO built in: use incremental_strategy='merge' (dbt-spark's own "
        "merge) for it.",
    ),
    "csv_format": (
        {"unique_key": "id", "file_format": "csv"},
        None,
        "Invalid file_format 'csv' for incremental_strategy='row_level_merge': set file_format to "
        "'parquet' (the default) or 'orc'.",
    ),
    "update_column_missing": (
        {"unique_key": "id", "merge_update_columns": ["name", "nope"]},
        COLUMNS,
        f"`merge_update_columns` names column 'nope', which {REL} does not have (columns: id, name, amount)",
    ),
    "exclude_column_missing": (
        {"unique_key": "id", "merge_exclude_columns": ["nope"]},
        COLUMNS,
        f"`merge_exclude_columns` names column 'nope', which {REL} does not have (columns: id, name, amount)",
    ),
    "exclude_every_column": (
        {"unique_key": "id", "merge_exclude_columns": ["ID", "name", "amount"]},
        COLUMNS,
        "`merge_exclude_columns` excludes every column; use skip_matched_step instead",
    ),
    "bad_alias": (
        {"unique_key": "id", "target_alias": "my target"},
        None,
        "`target_alias` must be a plain identifier, got 'my target'",
    ),
    "empty_alias": (  # '' is a value, not "unset": it is judged, never replaced by the default
        {"unique_key": "id", "source_alias": ""},
        None,
        "`source_alias` must be a plain identifier, got ''",
    ),
    "lock_timeout_negative": (
        {"unique_key": "id", "lock_timeout_s": -1},
        None,
        "`lock_timeout_s` must be a finite number of seconds >= 0, got -1",
    ),
}

# Several problems at once: listed together, one per line.
MANY = (
    {"merge_update_columns": ["a"], "merge_exclude_columns": ["b"]},
    None,
    f"Invalid row_level_merge config for {REL} (2 problems):\n"
    "  - `unique_key` is required for incremental_strategy='row_level_merge' (it builds the merge `on` "
    "condition; with merge_clauses too)\n"
    "  - `merge_update_columns` and `merge_exclude_columns` cannot both be set; use one",
)


class TestCompile:
    @pytest.fixture(scope="class")
    def macros(self) -> dict[str, str]:
        return {"compile_cases.sql": COMPILE_CASES, "changes_of.sql": CHANGES_OF}

    @pytest.fixture(scope="class")
    def compiled(self, project: Any) -> dict[str, dict[str, Any]]:
        cases = {
            name: {"config": cfg, "columns": cols}
            for name, (cfg, cols, _) in {**COMPILES, **ERRORS, "many": MANY}.items()
        }
        _, out = run_dbt_and_capture(
            ["run-operation", "compile_cases", "--args", json.dumps({"cases": cases})]
        )
        line = next(ln for ln in out.splitlines() if "COMPILED " in ln)
        return json.loads(line.split("COMPILED ", 1)[1])

    @pytest.mark.parametrize("name", sorted(COMPILES))
    def test_compiles(self, compiled: dict[str, dict[str, Any]], name: str) -> None:
        _, _, expected = COMPILES[name]
        got = compiled[name]
        assert got["error"] is None, got["error"]
        assert {k: got["spec"].get(k) for k in expected} == expected

    @pytest.mark.parametrize("name", sorted(ERRORS))
    def test_error_message(self, compiled: dict[str, dict[str, Any]], name: str) -> None:
        assert compiled[name]["error"] == PREFIX + ERRORS[name][2]

    def test_several_problems_are_listed_together(self, compiled: dict[str, dict[str, Any]]) -> None:
        assert compiled["many"]["error"] == MANY[2]

    def test_the_user_facing_operation_prints_the_validated_spec(self, project: Any) -> None:
        args = {
            "config": {"unique_key": "id", "delete_condition": f"{S}.op = 'D'"},
            "relation": "mart.orders",
        }
        _, out = run_dbt_and_capture(["run-operation", "rowmerge_compile", "--args", json.dumps(args)])
        line = next(ln for ln in out.splitlines() if '"clauses"' in ln)
        spec = json.loads(line[line.index("{") :])
        assert spec["target"] == "mart.orders" and spec["on"] == on("id")
        assert [c["action"] for c in spec["clauses"]] == ["delete", "update", "insert"]
        bad = {"config": {"unique_key": "id", "skip_matched_step": "yes"}, "relation": "mart.orders"}
        _, out = run_dbt_and_capture(
            ["run-operation", "rowmerge_compile", "--args", json.dumps(bad)], expect_pass=False
        )
        expected = "Invalid row_level_merge config for mart.orders: `skip_matched_step` must be true or false"
        assert f"{expected}, got 'yes'" in out

    def test_table_changes_checks_its_version_bounds(self, project: Any) -> None:
        _, out = run_dbt_and_capture(["run-operation", "changes_of", "--args", "{start: 2, end: 5}"])
        assert "from analytics.orders__changes" in out and "abs(_commit_version) <= 5" in out
        _, out = run_dbt_and_capture(
            ["run-operation", "changes_of", "--args", "{start: -1}"], expect_pass=False
        )
        assert (
            "table_changes(analytics.orders): start_version must be a version number >= 0 "
            "(see `dbt run-operation rowmerge_history`), got -1" in " ".join(out.split())
        )
