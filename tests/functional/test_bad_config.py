"""Invalid row_level_merge config through whole dbt runs: the wiring, and nothing changes.

Every message is tested, case by case, in ``test_compile.py`` (one run-operation). Here a
few configs of each kind go through real runs, to prove that an invalid config fails the
first run before anything is created, and fails a later run leaving the table as it was.
Every model has a good config (var `bad` false) and a bad one (var `bad` true). Three runs:

A. bad config before any table exists: every problem fails this first run (column-level
   ones against the model's columns) and no table is created, except an unknown column in a
   matched condition, which the first run leaves for the merge (the model may select that
   column only under is_incremental(); see test_first_run.py);
B. good config: every table is created;
C. bad config again, now incremental: every model fails, and its table is unchanged.
"""

from __future__ import annotations

import pytest
from dbt.tests.util import run_dbt

from tests.functional.helpers import GOOD_ROWS, PREFIX, bad_model, by_name, column_names, rows, table_exists

S = "DBT_INTERNAL_SOURCE"


# name -> (bad config, expected message; {rel} is the model's relation, {prefix} the
# common "Invalid row_level_merge config for <rel>: " start)
STATIC = {
    "unknown_when": (
        "unique_key='id', merge_clauses=[{'when': 'sometimes', 'action': 'delete'}]",
        "{prefix}merge_clauses[0]: unknown `when` 'sometimes'; use one of matched, not_matched, "
        "not_matched_by_source",
    ),
    "no_unique_key": (
        "matched_condition='true'",
        "{prefix}`unique_key` is required for incremental_strategy='row_level_merge' (it builds the "
        "merge `on` condition; with merge_clauses too)",
    ),
    "clauses_and_shorthand": (
        "unique_key='id', matched_condition='true', "
        "merge_clauses=[{'when': 'matched', 'action': 'update', 'set': '*'}]",
        "{prefix}`merge_clauses` cannot be combined with the shorthand key(s) matched_condition; "
        "write those clauses into merge_clauses instead",
    ),
    "delta_format": (
        "unique_key='id', file_format='delta'",
        "Invalid incremental strategy for file_format 'delta': row_level_merge is for plain "
        "Parquet/ORC tables. A delta table has MERGE INTO built in: use incremental_strategy='merge' "
        "(dbt-spark's own merge) for it.",
    ),
    # Not one of Spark's formats at all: still row_level_merge's own message, not dbt-spark's.
    "unknown_format": (
        "unique_key='id', file_format='foo'",
        "Invalid file_format 'foo' for incremental_strategy='row_level_merge': set file_format to "
        "'parquet' (the default) or 'orc'.",
    ),
    # dbt keeps an unknown key as custom config: a typo would silently change the merge.
    "misspelled_key": (
        f"unique_key='id', delete_conditon=\"{S}.name = 'B'\"",
        "{prefix}`delete_conditon` is not a row_level_merge config key (did you mean "
        "`delete_condition`?); as written dbt keeps it as custom config and the merge ignores it",
    ),
}

# Problems that need the columns: on the first run checked against the model's columns.
COLUMN_LEVEL = {
    # the config key the user wrote, not the merge condition compiled from it
    "unique_key_missing": (
        "unique_key='cust_id'",
        "{prefix}`unique_key` names column 'cust_id', which {rel} does not have (columns: id, name); "
        "name the key column(s) as the model's SQL selects them",
    ),
    "update_column_missing": (
        "unique_key='id', merge_update_columns=['name', 'nope']",
        "{prefix}`merge_update_columns` names column 'nope', which {rel} does not have (columns: id, name)",
    ),
    "exclude_column_missing": (
        "unique_key='id', merge_exclude_columns=['nope']",
        "{prefix}`merge_exclude_columns` names column 'nope', which {rel} does not have (columns: id, name)",
    ),
    "set_column_missing": (
        "unique_key='id', merge_clauses=[{'when': 'matched', 'action': 'update', "
        f"'set': {{'nope': '{S}.name'}}}}]",
        "{prefix}merge_clauses[0] (when: matched, action: update): `set` names column 'nope', which the "
        "target {rel} does not have (columns: id, name)",
    ),
    "condition_unresolved": (
        f"unique_key='id', matched_condition='{S}.nope > 0'",
        "{prefix}matched_condition (when: matched, action: update) condition "
        f"({S}.nope > 0) cannot be resolved",
    ),
    # A not_matched condition may reference only the source (there is no target row).
    "not_matched_cond_uses_target": (
        "unique_key='id', not_matched_condition=\"DBT_INTERNAL_DEST.name = 'x'\"",
        "{prefix}not_matched_condition (when: not_matched, action: insert) condition "
        "(DBT_INTERNAL_DEST.name = 'x') may reference only the source (DBT_INTERNAL_SOURCE); "
        "a not_matched row has no target row",
    ),
}

ALL = {**STATIC, **COLUMN_LEVEL}
# Left for the first merge (a matched clause cannot act on the first run).
DEFERRED_ON_FIRST_RUN = ("condition_unresolved",)
FIRST_RUN = sorted(set(ALL) - set(DEFERRED_ON_FIRST_RUN))


def expected_message(project, name: str) -> str:
    rel = f"{project.test_schema}.{name}"
    return ALL[name][1].format(prefix=PREFIX.format(rel=rel), rel=rel)


def _one_line(text: str) -> str:
    """dbt indents and wraps nothing in these messages, but be robust to line breaks."""
    return " ".join(text.split())


class TestBadConfig:
    @pytest.fixture(scope="class")
    def models(self):
        return {f"{name}.sql": bad_model(cfg) for name, (cfg, _) in ALL.items()}

    @pytest.fixture(scope="class")
    def runs(self, project):
        first = by_name(
            run_dbt(
                ["run", "--vars", "{bad: true}", "--exclude", *DEFERRED_ON_FIRST_RUN],
                expect_pass=False,
            )
        )
        created_on_first = {name: table_exists(project, name) for name in FIRST_RUN}
        good = by_name(run_dbt(["run"]))
        assert {n: r.status for n, r in good.items()} == {n: "success" for n in ALL}
        assert all(table_exists(project, name) for name in ALL)
        incremental = by_name(run_dbt(["run", "--vars", "{bad: true}"], expect_pass=False))
        return first, created_on_first, incremental

    @pytest.mark.parametrize("name", FIRST_RUN)
    def test_fails_on_first_run(self, project, runs, name):
        first, created_on_first, _ = runs
        r = first[name]
        assert r.status == "error", f"{name}: expected a config error, got {r.status}"
        assert _one_line(expected_message(project, name)) in _one_line(r.message), r.message
        assert not created_on_first[name], f"{name}: the table was created despite the config error"

    @pytest.mark.parametrize("name", sorted(ALL))
    def test_fails_on_incremental_run_and_changes_nothing(self, project, runs, name):
        _, _, incremental = runs
        r = incremental[name]
        assert r.status == "error", f"{name}: expected a config error, got {r.status}"
        assert _one_line(expected_message(project, name)) in _one_line(r.message), r.message
        assert column_names(project, name) == ["id", "name"]
        assert rows(project, name) == GOOD_ROWS
