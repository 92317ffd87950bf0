"""model_config: the one place config rules live (the exact messages are in
tests/functional/test_compile.py, through the real macros)."""

from __future__ import annotations

import pathlib
import re

import pytest

from dbt.adapters.rowmerge import model_config as mc
from dbt.adapters.rowmerge.merge import spec

MACROS = pathlib.Path(__file__).resolve().parents[2] / "macros" / "row_level_merge" / "clause_spec.sql"
REL = "analytics.orders"


def test_every_key_of_the_rule_table_is_compiled_by_a_macro() -> None:
    """A key with a rule but no macro reading it would be validated and then ignored."""
    text = MACROS.read_text()
    unread = [k for k in mc.KEYS if f"'{k}'" not in text]
    assert unread == []


# Config keys the macros copy into spec keys of the same name: parse_spec judges them.
SPEC_PASSTHROUGH = {
    "target_alias",
    "source_alias",
    "skip_unchanged_updates",
    "lock_timeout_s",
    "allow_empty_source",
    "max_delete_fraction",
}
# Config keys dbt itself validates (on_schema_change: incremental_validate_on_schema_change).
# dbt validates these itself (the contract: constraints are compiled from the model, see
# rowmerge_contract_constraints, and judged by the spec parser).
DBT_OWN = {"on_schema_change", "contract"}


def test_every_key_a_macro_reads_has_a_rule() -> None:
    """A key the macros read but no rule judges would be compiled unvalidated: a typo'd value
    or a clash with merge_clauses would pass silently."""
    read = set(re.findall(r"cfg\.get\('([a-z_]+)'\)", MACROS.read_text()))
    assert read, "no cfg.get('...') found: the macro's shape changed, update this test"
    assert SPEC_PASSTHROUGH <= set(spec.TOP_LEVEL_KEYS)
    assert sorted(read - set(mc.KEYS) - SPEC_PASSTHROUGH - DBT_OWN) == []


def test_shorthand_keys_are_exactly_the_clause_keys() -> None:
    assert set(mc.SHORTHAND) == {
        "delete_condition",
        "matched_condition",
        "merge_update_columns",
        "merge_exclude_columns",
        "skip_matched_step",
        "not_matched_condition",
        "skip_not_matched_step",
        "not_matched_by_source_action",
        "not_matched_by_source_condition",
        "not_matched_by_source_set",
    }


def test_column_names_are_checked_only_once_the_table_exists() -> None:
    cfg = {"unique_key": "id", "merge_update_columns": ["nope"]}
    assert mc.config_problems(cfg, REL, None) == []
    assert mc.config_problems(cfg, REL, ["id", "name"]) == [
        f"`merge_update_columns` names column 'nope', which {REL} does not have (columns: id, name)"
    ]


def test_column_lists_are_not_checked_when_the_update_is_skipped() -> None:
    cfg = {"unique_key": "id", "merge_exclude_columns": ["nope"], "skip_matched_step": True}
    assert mc.config_problems(cfg, REL, ["id"]) == []


def test_a_setting_its_clause_cannot_use_is_refused_not_dropped() -> None:
    """Each of these the macros would leave out of the spec: the user's intent, silently lost."""
    for cfg, key in (
        (
            {"not_matched_by_source_action": "delete", "not_matched_by_source_set": {"a": "1"}},
            "not_matched_by_source_set",
        ),
        ({"skip_matched_step": True, "matched_condition": "true"}, "matched_condition"),
        ({"skip_not_matched_step": True, "not_matched_condition": "true"}, "not_matched_condition"),
    ):
        problems = mc.config_problems({"unique_key": "id", **cfg}, REL)
        assert len(problems) == 1 and problems[0].startswith(f"`{key}` has no effect with "), problems
    # the config's own key is named, not the spec's (`clauses`)
    assert mc.config_problems({"unique_key": "id", "merge_clauses": []}, REL) == [
        "`merge_clauses` is an empty list: give at least one entry, or leave the key out"
    ]
    # the same settings where their clause runs are fine
    for cfg in (
        {"not_matched_by_source_action": "update", "not_matched_by_source_set": {"a": "1"}},
        {"skip_matched_step": False, "matched_condition": "true"},
        {"skip_not_matched_step": None, "not_matched_condition": "true"},
        {"skip_matched_step": True, "not_matched_condition": "true"},
    ):
        assert mc.config_problems({"unique_key": "id", **cfg}, REL) == [], cfg


def test_the_spec_is_judged_only_when_the_config_is_valid() -> None:
    bad_spec = {"target": REL, "source": "s", "on": "x", "clauses": "nope"}
    assert mc.problems(bad_spec, {"matched_condition": "true"}, REL) == [
        "`unique_key` is required for incremental_strategy='row_level_merge' (it builds the merge `on` "
        "condition; with merge_clauses too)"
    ]
    assert mc.problems(bad_spec, {"unique_key": "id"}, REL) == [
        "`clauses` must be a non-empty list of WHEN clauses"
    ]


def test_unset_keys_arrive_as_none_and_count_as_unset() -> None:
    cfg = {"unique_key": "id", "merge_clauses": None, "matched_condition": "true", "skip_matched_step": None}
    assert mc.config_problems(cfg, REL) == []


@pytest.mark.parametrize(
    ("start", "end", "problem"),
    [
        (0, None, None),
        (3, 5, None),
        (None, None, "start_version (or start_ts) is required"),
        (
            -1,
            None,
            "start_version must be a version number >= 0 (see `dbt run-operation rowmerge_history`), got -1",
        ),
        (
            1,
            True,
            "end_version must be a version number >= 0 (see `dbt run-operation rowmerge_history`), got True",
        ),
        (
            "2",
            None,
            "start_version must be a version number >= 0 (see `dbt run-operation rowmerge_history`), got '2'",
        ),
    ],
)
def test_table_changes_bounds(start: object, end: object, problem: str | None) -> None:
    assert mc.version_range_problem(start, end) == problem


def test_error_message_formats() -> None:
    assert mc.error_message(REL, ["a"]) == f"Invalid row_level_merge config for {REL}: a"
    assert (
        mc.error_message(REL, ["a", "b"])
        == f"Invalid row_level_merge config for {REL} (2 problems):\n  - a\n  - b"
    )


@pytest.mark.parametrize(
    ("typo", "meant"),
    [
        ("delete_conditon", "delete_condition"),
        ("unique_keys", "unique_key"),
        ("merge_clause", "merge_clauses"),
        ("change_data_feeds", "change_data_feed"),
        ("not_matched_by_source_actions", "not_matched_by_source_action"),
        ("lock_timeout", "lock_timeout_s"),
        ("allow_empty_sources", "allow_empty_source"),
        ("target_file_size", "target_file_size_mb"),
        ("auto_compaction", "auto_compact"),
        ("optimise_every", "optimize_every"),
    ],
)
def test_a_key_that_looks_like_ours_fails_with_did_you_mean(typo: str, meant: str) -> None:
    config = {"unique_key": "id", typo: "x"}
    assert mc.misspelled_keys(config) == [
        f"`{typo}` is not a row_level_merge config key (did you mean `{meant}`?); as written dbt keeps it "
        "as custom config and the merge ignores it"
    ]
    assert mc.misspelled_keys(config)[0] in mc.config_problems(config, REL)


def test_dbt_keys_and_unrelated_custom_keys_are_not_misspellings() -> None:
    config = {
        "unique_key": "id",
        "incremental_strategy": "row_level_merge",
        "incremental_predicates": ["t.x > 1"],
        "on_schema_change": "fail",
        "file_format": "parquet",
        "partition_by": ["d"],
        "materialized": "incremental",
        "tags": ["x"],
        "owner_team": "finance",  # a user's own key, like nothing of ours
    }
    assert mc.misspelled_keys(config) == []


def test_an_unknown_strategy_lists_row_level_merge_and_the_closest() -> None:
    valid = ["append", "insert_overwrite", "microbatch", "merge", "row_level_merge"]
    assert mc.strategy_problem("row_level_merge", valid) is None
    assert mc.strategy_problem("row_level_merg", valid) == (
        "Invalid incremental strategy provided: row_level_merg\n    Expected one of: 'append', "
        "'insert_overwrite', 'microbatch', 'merge', 'row_level_merge' (did you mean 'row_level_merge'?)\n"
        "    (dbt could not find an incremental strategy macro with the name "
        '"get_incremental_row_level_merg_sql")'
    )
    assert mc.strategy_problem("upsert_everything", valid) == (
        "Invalid incremental strategy provided: upsert_everything\n    Expected one of: 'append', "
        "'insert_overwrite', 'microbatch', 'merge', 'row_level_merge'\n"
        "    (dbt could not find an incremental strategy macro with the name "
        '"get_incremental_upsert_everything_sql")'
    )


def test_without_a_unique_key_the_plain_merge_appends_and_clauses_are_refused() -> None:
    """No unique_key ('' and [] too): `on` is FALSE and every row is inserted, as in dbt's merge;
    a clause that could then never act, or act on every row, needs the key."""
    for key in (None, "", []):
        assert mc.config_problems({"unique_key": key}, REL) == [], key
    required = (
        "`unique_key` is required for incremental_strategy='row_level_merge' (it builds the merge `on` "
        "condition; with merge_clauses too)"
    )
    for cfg in (
        {"not_matched_by_source_action": "delete"},
        {"merge_clauses": [{"when": "not_matched", "action": "insert", "values": "*"}]},
        {"unique_key": "", "delete_condition": "true"},
    ):
        assert required in mc.config_problems(cfg, REL), cfg


def test_unique_key_must_name_a_column() -> None:
    found = mc.config_problems({"unique_key": ["id", "cust_id"]}, REL, ["id", "name"])
    assert found == [
        f"`unique_key` names column 'cust_id', which {REL} does not have (columns: id, name); name the "
        "key column(s) as the model's SQL selects them"
    ]
    assert mc.config_problems({"unique_key": "`ID`"}, REL, ["id", "name"]) == []


def test_a_run_operation_names_arguments_it_does_not_take() -> None:
    known = ["relation", "version", "timestamp", "unique_key", "dry_run"]
    assert mc.unknown_arguments("rowmerge_restore", ["relation", "version"], known) is None
    assert mc.unknown_arguments("rowmerge_restore", ["versoin", "zzz"], known) == (
        "rowmerge_restore takes no argument `versoin` (did you mean `version`?), `zzz`; its arguments "
        "are `relation`, `version`, `timestamp`, `unique_key`, `dry_run`"
    )
    assert mc.error_message("db.t", ["a"], "rowmerge_vacuum arguments") == (
        "Invalid rowmerge_vacuum arguments for db.t: a"
    )
