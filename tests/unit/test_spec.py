"""spec.parse_spec: every static rule of the clause spec, with the exact messages users see."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from dbt.adapters.rowmerge.merge.errors import MergeSpecError
from dbt.adapters.rowmerge.merge.spec import merge_sql, parse_spec, static_problems

BASE: dict[str, Any] = {
    "version": 1,
    "target": "analytics.orders",
    "source": "orders__dbt_tmp",
    "on": "DBT_INTERNAL_DEST.id = DBT_INTERNAL_SOURCE.id",
    "clauses": [
        {"when": "matched", "condition": "DBT_INTERNAL_SOURCE.op = 'D'", "action": "delete"},
        {"when": "matched", "action": "update", "set": "*"},
        {
            "when": "not_matched",
            "condition": "DBT_INTERNAL_SOURCE.op <> 'D'",
            "action": "insert",
            "values": "*",
        },
        {
            "when": "not_matched_by_source",
            "condition": "DBT_INTERNAL_DEST.active",
            "action": "update",
            "set": {"active": "false"},
        },
    ],
}


def spec(**changes: Any) -> dict[str, Any]:
    out = copy.deepcopy(BASE)
    out.update(changes)
    return out


def problems_of(raw: dict[str, Any]) -> list[str]:
    with pytest.raises(MergeSpecError) as info:
        parse_spec(raw)
    assert static_problems(raw) == info.value.problems
    return info.value.problems


def test_parse_spec_resolves_design_example() -> None:
    parsed = parse_spec(BASE)
    assert parsed.target == "analytics.orders"
    assert parsed.target_alias == "DBT_INTERNAL_DEST"
    assert parsed.source_alias == "DBT_INTERNAL_SOURCE"
    assert [(c.when, c.action) for c in parsed.clauses] == [
        ("matched", "delete"),
        ("matched", "update"),
        ("not_matched", "insert"),
        ("not_matched_by_source", "update"),
    ]
    assert parsed.matched[1].star and parsed.not_matched[0].star
    assert parsed.not_matched_by_source[0].assignments == (("active", "false"),)
    assert parsed.skip_unchanged_updates is True
    assert parsed.schema_evolution is False
    assert parsed.lock_timeout_s == 600.0
    assert parsed.enforces_cardinality is True


def test_parse_spec_accepts_when_aliases_and_bool_values() -> None:
    parsed = parse_spec(
        spec(
            clauses=[
                {"when": "not_matched_by_target", "action": "insert", "values": {"id": 1, "flag": True}},
            ]
        )
    )
    assert parsed.clauses[0].when == "not_matched"
    assert parsed.clauses[0].assignments == (("id", "1"), ("flag", "true"))


@pytest.mark.parametrize(
    ("clauses", "expected"),
    [
        ([{"when": "matched", "action": "delete"}], False),
        ([{"when": "matched", "action": "delete", "condition": "x"}], True),
        ([{"when": "not_matched", "action": "insert", "values": "*"}], False),
        ([{"when": "matched", "action": "update", "set": "*"}], True),
    ],
)
def test_parse_spec_cardinality_rule(clauses: list[dict[str, Any]], expected: bool) -> None:
    assert parse_spec(spec(clauses=clauses)).enforces_cardinality is expected


@pytest.mark.parametrize(
    ("clause", "message"),
    [
        (
            {"when": "sometimes", "action": "delete"},
            "clauses[0]: unknown `when` 'sometimes'; use one of matched, not_matched, not_matched_by_source",
        ),
        (
            {"when": "matched", "action": "merge"},
            "clauses[0] (when: matched): unknown `action` 'merge'; use one of update, delete",
        ),
        (
            {"when": "matched", "action": "insert", "values": "*"},
            "clauses[0] (when: matched): action 'insert' is not allowed here; when: matched allows "
            "update or delete (insert is only for when: not_matched)",
        ),
        (
            {"when": "not_matched", "action": "update", "set": "*"},
            "clauses[0] (when: not_matched): action 'update' is not allowed here; when: not_matched "
            "allows insert",
        ),
        (
            {"when": "matched", "action": "update"},
            'clauses[0] (when: matched): an update needs `set` ("*" or a column mapping)',
        ),
        (
            {"when": "not_matched", "action": "insert"},
            'clauses[0] (when: not_matched): an insert needs `values` ("*" or a column mapping)',
        ),
        (
            {"when": "matched", "action": "delete", "set": "*"},
            "clauses[0] (when: matched): a delete takes no `set`",
        ),
        (
            {"when": "matched", "action": "update", "set": []},
            'clauses[0] (when: matched): `set` must be "*" or a mapping of target column to SQL '
            "expression, got []",
        ),
        (
            {"when": "matched", "action": "update", "set": {"a": ""}},
            "clauses[0] (when: matched): `set` value for column 'a' must be a SQL expression string",
        ),
        (
            {"when": "matched", "action": "delete", "colour": "red"},
            "clauses[0]: unknown key(s) colour; a clause has when, action, condition, set (update) or "
            "values (insert)",
        ),
        (
            {"when": "matched", "action": "delete", "condition": 3},
            "clauses[0] (when: matched): `condition` must be a SQL boolean expression string",
        ),
    ],
)
def test_parse_spec_rejects_bad_clause(clause: dict[str, Any], message: str) -> None:
    assert problems_of(spec(clauses=[clause])) == [message]


def test_parse_spec_set_on_insert_and_values_on_update() -> None:
    problems = problems_of(
        spec(
            clauses=[
                {"when": "matched", "action": "update", "set": "*", "values": "*"},
                {"when": "not_matched", "action": "insert", "values": "*", "set": "*"},
            ]
        )
    )
    assert problems == [
        "clauses[0] (when: matched): `values` is for insert; an update takes `set`",
        "clauses[1] (when: not_matched): `set` is for update; an insert takes `values`",
    ]


def test_parse_spec_unconditional_clause_must_be_last_of_its_kind() -> None:
    problems = problems_of(
        spec(
            clauses=[
                {"when": "matched", "action": "update", "set": "*"},
                {"when": "matched", "action": "delete", "condition": "s.op = 'D'"},
                {"when": "not_matched", "action": "insert", "values": "*"},
            ]
        )
    )
    assert problems == [
        "clauses[0] (when: matched): only the last matched clause may omit `condition`; a clause "
        "after it could never act. Add a condition or move it last"
    ]


def test_parse_spec_collects_every_problem_at_once() -> None:
    raw = spec(version=2, target="", clauses=[], extra=1, skip_unchanged_updates="yes")
    problems = problems_of(raw)
    assert problems == [
        "unknown spec key(s) extra; expected some of allow_empty_source, auto_compact, "
        "auto_compact_max_files, auto_compact_max_mb, auto_compact_min_files, change_data_feed, "
        "change_feed_retain_versions, clauses, cluster_by, constraints, lock_timeout_s, "
        "max_delete_fraction, on, on_origin, "
        "optimize_every, retain_hours, retain_versions, schema_evolution, skip_unchanged_updates, "
        "source, source_alias, target, target_alias, target_file_size_mb, version",
        "`version` must be 1, got 2",
        "`target` is required and must be a non-empty string",
        "`skip_unchanged_updates` must be true or false, got 'yes'",
        "`clauses` must be a non-empty list of WHEN clauses",
    ]
    with pytest.raises(MergeSpecError, match=r"Invalid row_level_merge configuration \(5 problems\)"):
        parse_spec(raw)


def test_parse_spec_requires_on_with_hint() -> None:
    assert problems_of(spec(on=" ")) == [
        "`on` is required and must be a non-empty string (set `unique_key`, or write `on` in "
        "merge_clauses config)"
    ]


def test_parse_spec_aliases_must_differ_and_be_identifiers() -> None:
    assert problems_of(spec(target_alias="x", source_alias="X")) == [
        "`target_alias` and `source_alias` must differ"
    ]
    assert problems_of(spec(source_alias="a b")) == ["`source_alias` must be a plain identifier, got 'a b'"]


def test_parse_spec_change_data_feed_and_lock_timeout_types() -> None:
    assert problems_of(spec(change_data_feed={"tbl": "x"}, lock_timeout_s=-1)) == [
        "`lock_timeout_s` must be a finite number of seconds >= 0, got -1",
        "`change_data_feed` must be null or a mapping with one key, `table` (the change table's "
        "name), got {'tbl': 'x'}",
    ]
    assert problems_of(spec(change_data_feed={"table": "a.b", "extra": 1})) == [
        "`change_data_feed` must be null or a mapping with one key, `table` (the change table's "
        "name), got {'table': 'a.b', 'extra': 1}",
    ]


def test_parse_spec_change_data_feed_table_is_kept() -> None:
    parsed = parse_spec(spec(change_data_feed={"table": "db.t__changes"}, lock_timeout_s=5))
    assert (parsed.change_data_feed, parsed.lock_timeout_s) == ({"table": "db.t__changes"}, 5.0)


def test_parse_spec_rejects_non_mapping() -> None:
    with pytest.raises(MergeSpecError, match="the spec must be a mapping, got list"):
        parse_spec([])  # type: ignore[arg-type]


def test_merge_spec_error_single_problem_message() -> None:
    err = MergeSpecError(["`on` is required"])
    assert str(err) == "Invalid row_level_merge configuration: `on` is required"


def test_parse_spec_messages_name_the_clause_origin() -> None:
    problems = problems_of(
        spec(
            clauses=[
                {"when": "matched", "action": "update", "origin": "matched_condition"},
                {"when": "matched", "action": "upsert", "origin": "merge_clauses[1]"},
            ]
        )
    )
    assert problems == [
        'matched_condition (when: matched): an update needs `set` ("*" or a column mapping)',
        "merge_clauses[1] (when: matched): unknown `action` 'upsert'; use one of update, delete",
    ]
    parsed = parse_spec(
        spec(
            clauses=[{"when": "matched", "action": "delete", "origin": "delete_condition", "condition": "x"}]
        )
    )
    assert parsed.clauses[0].label == "delete_condition (when: matched, action: delete)"


def test_merge_sql_reads_like_the_merge_statement() -> None:
    d, m, n, b = BASE["clauses"]
    bump = {"n": "DBT_INTERNAL_SOURCE.n + 1", "odd`name": "1"}
    raw = spec(
        clauses=[
            d,
            {"when": "matched", "condition": "DBT_INTERNAL_SOURCE.n > 0", "action": "update", "set": bump},
            m,
            n,
            {"when": "not_matched", "action": "insert", "values": {"id": "s.id"}, "origin": "x"},
            b,
            {"when": "not_matched_by_source", "action": "delete"},
        ]
    )
    assert merge_sql(parse_spec(raw)) == (
        "MERGE INTO analytics.orders AS DBT_INTERNAL_DEST\n"
        "USING orders__dbt_tmp AS DBT_INTERNAL_SOURCE\n"
        "ON DBT_INTERNAL_DEST.id = DBT_INTERNAL_SOURCE.id\n"
        "WHEN MATCHED AND (DBT_INTERNAL_SOURCE.op = 'D') THEN DELETE  -- clauses[0]\n"
        "WHEN MATCHED AND (DBT_INTERNAL_SOURCE.n > 0) THEN UPDATE SET `n` = DBT_INTERNAL_SOURCE.n + 1, "
        "`odd``name` = 1  -- clauses[1]\n"
        "WHEN MATCHED THEN UPDATE SET *  -- clauses[2]\n"
        "WHEN NOT MATCHED AND (DBT_INTERNAL_SOURCE.op <> 'D') THEN INSERT *  -- clauses[3]\n"
        "WHEN NOT MATCHED THEN INSERT (`id`) VALUES (s.id)  -- x\n"
        "WHEN NOT MATCHED BY SOURCE AND (DBT_INTERNAL_DEST.active) THEN UPDATE SET `active` = false"
        "  -- clauses[5]\n"
        "WHEN NOT MATCHED BY SOURCE THEN DELETE  -- clauses[6]"
    )


def test_parse_spec_constraints() -> None:
    parsed = parse_spec(
        spec(
            constraints=[
                {"type": "not_null", "column": " id "},
                {"type": "check", "expression": "qty >= 0", "name": "qty_ok"},
                {"type": "check", "expression": "qty < 10", "name": None},
            ]
        )
    )
    assert [c.label for c in parsed.constraints] == [
        "not_null(id)",
        "check qty_ok (qty >= 0)",
        "check (qty < 10)",
    ]
    assert parse_spec(spec()).constraints == ()


def test_parse_spec_rejects_bad_constraints() -> None:
    assert problems_of(spec(constraints="id not null")) == [
        "`constraints` must be a list of constraints, got 'id not null'"
    ]
    assert problems_of(
        spec(
            constraints=[
                "x",
                {"type": "not_null"},
                {"type": "check", "expression": " "},
                {"type": "unique", "column": "id"},
                {"type": "not_null", "column": "id", "columns": ["id"]},
            ]
        )
    ) == [
        "constraints[0]: each constraint must be a mapping, got 'x'",
        "constraints[1]: a not_null constraint needs `column`, got None",
        "constraints[2]: a check constraint needs `expression` (SQL over the table's columns), got ' '",
        "constraints[3]: unknown `type` 'unique'; the engine enforces not_null, check",
        "constraints[4]: unknown key(s) columns; a constraint has type, column, expression, name",
    ]


def test_max_delete_fraction() -> None:
    assert parse_spec(spec()).max_delete_fraction is None
    assert parse_spec(spec(max_delete_fraction=0.25)).max_delete_fraction == 0.25
    assert parse_spec(spec(max_delete_fraction=0)).max_delete_fraction == 0.0
    for bad in (1.5, -0.1, True, "10%", float("nan")):
        assert problems_of(spec(max_delete_fraction=bad)) == [
            f"`max_delete_fraction` must be a number from 0 to 1 (0.1: at most 10% of the rows), got {bad!r}"
        ], bad


def test_upkeep_defaults_and_values() -> None:
    from dbt.adapters.rowmerge.merge.spec import Upkeep

    assert parse_spec(spec()).upkeep == Upkeep()
    assert Upkeep().target_bytes == 128 * 1024 * 1024 and Upkeep().auto_compact is True
    parsed = parse_spec(
        spec(
            auto_compact=False,
            target_file_size_mb=0.5,
            cluster_by="id",
            optimize_every=24,
            auto_compact_min_files=4,
            auto_compact_max_files=10,
            auto_compact_max_mb=64,
            retain_versions=0,
            retain_hours=36,
        )
    ).upkeep
    assert parsed == Upkeep(False, 0.5, ("id",), 24, 4, 10, 64.0, 0, 36.0)
    assert (Upkeep().retain_versions, Upkeep().retain_hours) == (None, None)  # the table's, else default
    assert parse_spec(spec(cluster_by=[" a ", "b"])).upkeep.cluster_by == ("a", "b")


def test_upkeep_retention_takes_each_setting_given_else_the_stored_one_else_the_default() -> None:
    from dbt.adapters.rowmerge.merge.journal import DEFAULT_RETENTION, Retention
    from dbt.adapters.rowmerge.merge.spec import Upkeep

    stored = Retention(5, 2.0, 3)
    assert Upkeep().retention(None) == DEFAULT_RETENTION  # nothing ever chosen: the default
    assert Upkeep().retention(stored) == stored  # nothing given: the table's
    assert Upkeep(retain_versions=0).retention(stored) == Retention(0, 2.0, 3)
    assert Upkeep(retain_hours=0, feed_retain_versions=7).retention(stored) == Retention(5, 0.0, 7)
    assert Upkeep(retain_hours=36).retention(None) == Retention(DEFAULT_RETENTION.versions, 36.0, None)
    off = parse_spec(spec(retain_versions=0, retain_hours=0)).upkeep
    assert off.retention(stored) == Retention(0, 0.0, 3)


@pytest.mark.parametrize(
    "key, value, problem",
    [
        ("auto_compact", "yes", "`auto_compact` must be true or false, got 'yes'"),
        ("target_file_size_mb", 0, "`target_file_size_mb` must be a number > 0, got 0"),
        ("target_file_size_mb", float("inf"), "`target_file_size_mb` must be a number > 0, got inf"),
        ("target_file_size_mb", True, "`target_file_size_mb` must be a number > 0, got True"),
        ("optimize_every", 0, "`optimize_every` must be a whole number >= 1, got 0"),
        ("optimize_every", 2.5, "`optimize_every` must be a whole number >= 1, got 2.5"),
        ("auto_compact_min_files", 1, "`auto_compact_min_files` must be a whole number >= 2, got 1"),
        ("auto_compact_max_files", "9", "`auto_compact_max_files` must be a whole number >= 2, got '9'"),
        ("auto_compact_max_mb", -1, "`auto_compact_max_mb` must be a number > 0, got -1"),
        ("cluster_by", 3, "`cluster_by` must be a column name or a list of column names, got 3"),
        (
            "cluster_by",
            ["a", ""],
            "`cluster_by` must be a column name or a list of column names, got ['a', '']",
        ),
        ("cluster_by", ["a", "A"], "`cluster_by` names a column twice: ['a', 'A']"),
        ("retain_versions", -1, "`retain_versions` must be a whole number >= 0, got -1"),
        ("retain_versions", 2.5, "`retain_versions` must be a whole number >= 0, got 2.5"),
        ("retain_versions", "7", "`retain_versions` must be a whole number >= 0, got '7'"),
        ("retain_hours", -0.5, "`retain_hours` must be a number >= 0, got -0.5"),
        ("retain_hours", float("inf"), "`retain_hours` must be a number >= 0, got inf"),
        ("retain_hours", True, "`retain_hours` must be a number >= 0, got True"),
    ],
)
def test_upkeep_problems_name_the_key(key: str, value: Any, problem: str) -> None:
    assert problems_of(spec(**{key: value})) == [problem]


def test_upkeep_tiers_that_could_never_merge_are_refused() -> None:
    """A tier merges min_files files at once and a merge compacts at most max_files: with
    min_files above max_files compaction would silently never run."""
    assert problems_of(spec(auto_compact_min_files=10, auto_compact_max_files=4)) == [
        "`auto_compact_min_files` (10) must not exceed `auto_compact_max_files` (4): a size tier merges "
        "`auto_compact_min_files` files at once, and a merge compacts at most `auto_compact_max_files`, "
        "so no size tier would ever be compacted"
    ]
    assert problems_of(spec(auto_compact_min_files=100))[0].startswith("`auto_compact_min_files` (100)")
    # a bad value of the other key is named alone, not compared as its default
    assert problems_of(spec(auto_compact_min_files=100, auto_compact_max_files="x")) == [
        "`auto_compact_max_files` must be a whole number >= 2, got 'x'"
    ]
    assert parse_spec(spec(auto_compact_min_files=4, auto_compact_max_files=4)).upkeep.min_files == 4


def test_a_target_size_below_a_byte_is_one_byte() -> None:
    from dbt.adapters.rowmerge.merge.spec import Upkeep

    assert Upkeep(target_file_size_mb=1e-9).target_bytes == 1


@pytest.mark.parametrize("value", [-1, float("nan"), float("inf"), True, "10", None])
def test_table_operations_refuse_a_bad_lock_timeout_before_touching_the_table(value: object) -> None:
    """optimize, restore and vacuum judge lock_timeout_s as a merge's spec does, before any
    Spark or filesystem call (here there is no session at all)."""
    from dbt.adapters.rowmerge.merge import MergeSpecError, optimize, restore, vacuum

    for call in (
        lambda: optimize(None, "db.t", lock_timeout_s=value),  # type: ignore[arg-type]
        lambda: restore(None, "db.t", version=0, lock_timeout_s=value),  # type: ignore[arg-type]
        lambda: vacuum(None, "db.t", lock_timeout_s=value),  # type: ignore[arg-type]
    ):
        with pytest.raises(MergeSpecError) as info:
            call()
        assert f"`lock_timeout_s` must be a finite number of seconds >= 0, got {value!r}" in str(info.value)
