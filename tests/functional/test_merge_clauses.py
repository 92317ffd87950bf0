"""`merge_clauses`: conditions, several clauses of a kind (first applicable
clause wins), explicit SET/VALUES mappings, custom aliases, and the cardinality rule."""

from __future__ import annotations

import pytest

from tests.functional.helpers import (
    counts,
    expect_rows,
    incremental_model,
    merge_line,
    metrics,
    rows,
    run_step,
    values,
)

S = "DBT_INTERNAL_SOURCE"
T = "DBT_INTERNAL_DEST"

CDC_CLAUSES = f"""[
    {{'when': 'matched', 'condition': "{S}.op = 'D'", 'action': 'delete'}},
    {{'when': 'matched', 'condition': "{S}.op = 'A'", 'action': 'update',
      'set': {{'name': "concat({T}.name, '_archived')", 'op': "'A'"}}}},
    {{'when': 'matched', 'action': 'update', 'set': '*'}},
    {{'when': 'not_matched', 'condition': "{S}.op = 'I'", 'action': 'insert', 'values': '*'}},
    {{'when': 'not_matched', 'condition': "{S}.op = 'U'", 'action': 'insert',
      'values': {{'id': '{S}.id', 'name': "concat({S}.name, '_late')", 'op': "'I'"}}}},
    {{'when': 'not_matched_by_source', 'condition': '{T}.id > 100', 'action': 'delete'}},
    {{'when': 'not_matched_by_source', 'action': 'update', 'set': {{'op': "'gone'"}}}}
]"""

MODELS = {
    "cdc.sql": incremental_model(
        f"unique_key='id', merge_clauses={CDC_CLAUSES}",
        values(
            "id, name, op",
            "(1, 'a', 'I')",
            "(2, 'b', 'I')",
            "(3, 'c', 'I')",
            "(4, 'd', 'I')",
            "(101, 'x', 'I')",
            "(102, 'y', 'I')",
        ),
        values(
            "id, name, op",
            "(1, 'A', 'U')",  # matched: not D, not A -> third clause, update *
            "(2, 'b2', 'D')",  # matched: first clause, delete
            "(3, 'c2', 'A')",  # matched: second clause wins over the unconditional update
            "(5, 'e', 'I')",  # not matched: insert *
            "(6, 'f', 'U')",  # not matched: second insert clause, explicit values
            "(7, 'g', 'D')",  # not matched: no insert clause applies, nothing happens
        ),
    ),
    # Custom aliases; only larger amounts update, and only the amount column.
    "aliased.sql": incremental_model(
        "unique_key='id', source_alias='s', target_alias='t', merge_clauses=["
        "{'when': 'matched', 'condition': 's.amount > t.amount', 'action': 'update',"
        " 'set': {'amount': 's.amount'}},"
        "{'when': 'not_matched', 'action': 'insert', 'values': '*'}]",
        values("id, name, amount", "(1, 'a', 10)", "(2, 'b', 20)"),
        values("id, name, amount", "(1, 'A', 15)", "(2, 'B', 5)", "(3, 'c', 30)"),
    ),
    # A lone unconditional matched delete may match several source rows: deleted once.
    "dup_delete.sql": incremental_model(
        "unique_key='id', merge_clauses=[{'when': 'matched', 'action': 'delete'}]",
        values("id, name", "(1, 'a')", "(2, 'b')", "(3, 'c')"),
        values("id, name", "(1, 'x')", "(1, 'y')", "(3, 'z')"),
    ),
    # An update may not: the merge fails and changes nothing.
    "dup_update.sql": incremental_model(
        "unique_key='id', merge_clauses=[{'when': 'matched', 'action': 'update', 'set': '*'},"
        " {'when': 'not_matched', 'action': 'insert', 'values': '*'}]",
        values("id, name", "(1, 'a')", "(2, 'b')"),
        values("id, name", "(1, 'x')", "(1, 'y')", "(2, 'B')", "(3, 'c')"),
    ),
}


class TestMergeClauses:
    @pytest.fixture(scope="class")
    def models(self):
        return MODELS

    @pytest.fixture(scope="class")
    def merged(self, project):
        first = run_step(1)
        assert {n: r.status for n, r in first.items()} == {n[:-4]: "success" for n in MODELS}
        before = {"dup_update": rows(project, "dup_update")}
        return run_step(2, expect_pass=False), before

    def test_several_clauses_of_each_kind(self, project, merged):
        results, _ = merged
        expect_rows(
            project,
            "cdc",
            [(1, "A", "U"), (3, "c_archived", "A"), (4, "d", "gone"), (5, "e", "I"), (6, "f_late", "I")],
        )
        r = results["cdc"]
        assert r.status == "success", r.message
        assert merge_line(r) == "MERGE 3 updated, 2 inserted, 3 deleted; 1 of 1 files rewritten"
        m = metrics(r)
        assert m["numSourceRows"] == 6
        assert m["numTargetRowsMatchedUpdated"] == 2
        assert m["numTargetRowsMatchedDeleted"] == 1
        assert m["numTargetRowsNotMatchedBySourceUpdated"] == 1
        assert m["numTargetRowsNotMatchedBySourceDeleted"] == 2
        # The compiled spec keeps the user's clauses in order, each naming where it came from.
        clauses = r.adapter_response["spec"]["clauses"]
        assert [(c["when"], c["action"]) for c in clauses] == [
            ("matched", "delete"),
            ("matched", "update"),
            ("matched", "update"),
            ("not_matched", "insert"),
            ("not_matched", "insert"),
            ("not_matched_by_source", "delete"),
            ("not_matched_by_source", "update"),
        ]
        assert [c["origin"] for c in clauses] == [f"merge_clauses[{i}]" for i in range(7)]

    def test_custom_aliases(self, project, merged):
        results, _ = merged
        expect_rows(project, "aliased", [(1, "a", 15), (2, "b", 20), (3, "c", 30)])
        r = results["aliased"]
        assert r.status == "success", r.message
        assert counts(r) == (1, 1, 0)
        spec = r.adapter_response["spec"]
        assert spec["on"] == "t.`id` = s.`id`"
        assert (spec["target_alias"], spec["source_alias"]) == ("t", "s")

    def test_lone_unconditional_delete_allows_duplicate_matches(self, project, merged):
        results, _ = merged
        r = results["dup_delete"]
        assert r.status == "success", r.message
        expect_rows(project, "dup_delete", [(2, "b")])
        assert merge_line(r) == "MERGE 0 updated, 0 inserted, 2 deleted; 1 of 1 files rewritten"

    def test_cardinality_violation_fails_and_changes_nothing(self, project, merged):
        results, before = merged
        r = results["dup_update"]
        assert r.status == "error"
        assert (
            f"MERGE into {project.test_schema}.dup_update failed: 1 target row(s) matched more than "
            "one source row" in r.message
        ), r.message
        assert "matched 2 source rows" in r.message
        assert "Deduplicate the source on the merge key" in r.message
        assert rows(project, "dup_update") == before["dup_update"] == [(1, "a"), (2, "b")]
