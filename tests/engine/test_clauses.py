"""WHEN clauses: order, conditions, every action of every kind.

Every test checks the full table contents after the merge and the row counters.
"""

from __future__ import annotations

from tests.engine.helpers import (
    UPSERT,
    create_table,
    file_snapshot,
    files_of,
    kept_files,
    merge,
    rows,
    source_view,
)


def test_matched_first_applicable_clause_wins(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, name string", [[(1, "a"), (2, "b"), (3, "c"), (4, "d"), (5, "e")]])
    src = source_view(
        spark,
        f"{db}_src",
        "id long, op string, v int",
        [(1, "D", 500), (2, "U", 200), (3, "U", 5), (4, "U", -1)],
    )
    result = merge(
        spark,
        t,
        src,
        [
            # Row 1 satisfies the first two conditions: the delete (first) must win.
            {"when": "matched", "condition": "s.op = 'D'", "action": "delete"},
            # Row 2 satisfies this and the next one: 'big' must win.
            {"when": "matched", "condition": "s.v > 100", "action": "update", "set": {"name": "'big'"}},
            {"when": "matched", "condition": "s.v > 0", "action": "update", "set": {"name": "'pos'"}},
            {"when": "matched", "action": "update", "set": {"name": "concat('other', s.v)"}},
        ],
    )
    assert rows(spark, t) == [(2, "big"), (3, "pos"), (4, "other-1"), (5, "e")]
    m = result.metrics
    assert m["numTargetRowsMatchedDeleted"] == 1
    assert m["numTargetRowsMatchedUpdated"] == 3
    assert m["numTargetRowsDeleted"] == 1
    assert m["numTargetRowsUpdated"] == 3
    assert m["numTargetRowsCopied"] == 1
    assert m["numTargetRowsInserted"] == 0
    assert m["numTargetFilesRemoved"] == 1


def test_matched_update_listed_before_delete_wins(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, name string", [[(1, "a"), (2, "b"), (3, "c")]])
    src = source_view(spark, f"{db}_src", "id long, op string", [(1, "D"), (2, "D"), (3, "U")])
    result = merge(
        spark,
        t,
        src,
        [
            {"when": "matched", "condition": "t.name = 'a'", "action": "update", "set": {"name": "'kept'"}},
            {"when": "matched", "condition": "s.op = 'D'", "action": "delete"},
        ],
    )
    # Row 1 has op 'D' but the update comes first; row 3 satisfies no clause and is copied.
    assert rows(spark, t) == [(1, "kept"), (3, "c")]
    m = result.metrics
    assert (m["numTargetRowsUpdated"], m["numTargetRowsDeleted"], m["numTargetRowsCopied"]) == (1, 1, 1)


def test_not_matched_first_applicable_values_mapping_wins(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, name string, tag string", [[(1, "a", "x")]])
    before = file_snapshot(spark, t)
    src = source_view(
        spark,
        f"{db}_src",
        "id long, name string, k int",
        [(1, "dup", 1), (2, "A", 1), (3, "B", 2), (4, "C", 3), (5, "E", 0)],
    )
    result = merge(
        spark,
        t,
        src,
        [
            {
                "when": "not_matched",
                "condition": "s.k = 1",
                "action": "insert",
                "values": {"id": "s.id", "name": "'one'", "tag": "'k1'"},
            },
            {
                "when": "not_matched",
                "condition": "s.k <= 2",
                "action": "insert",
                "values": {"id": "s.id", "name": "s.name", "tag": "'le2'"},
            },
            # `tag` not listed: inserted as NULL.
            {
                "when": "not_matched",
                "action": "insert",
                "values": {"id": "s.id + 100", "name": "lower(s.name)"},
            },
        ],
    )
    assert rows(spark, t) == [
        (1, "a", "x"),
        (2, "one", "k1"),
        (3, "B", "le2"),
        (5, "E", "le2"),
        (104, "c", None),
    ]
    assert result.metrics["numTargetRowsInserted"] == 4
    assert result.metrics["numTargetFilesRemoved"] == 0
    assert kept_files(before, file_snapshot(spark, t)) == sorted(before)


def test_not_matched_condition_false_row_not_inserted(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(1, "a")]])
    src = source_view(spark, f"{db}_src", "id long, v string", [(2, "keep"), (3, "skip"), (4, None)])
    result = merge(
        spark,
        t,
        src,
        [{"when": "not_matched", "condition": "s.v <> 'skip'", "action": "insert", "values": "*"}],
    )
    # 3 fails the condition; 4's condition is NULL, which counts as false.
    assert rows(spark, t) == [(1, "a"), (2, "keep")]
    assert result.metrics["numTargetRowsInserted"] == 1
    assert result.metrics["numSourceRows"] == 3


def test_matched_delete_with_condition_keeps_other_matched_rows(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(1, "a"), (2, "b")], [(3, "c"), (4, "d")]])
    src = source_view(spark, f"{db}_src", "id long, gone boolean", [(1, True), (2, False), (4, True)])
    result = merge(spark, t, src, [{"when": "matched", "condition": "s.gone", "action": "delete"}])
    assert rows(spark, t) == [(2, "b"), (3, "c")]
    m = result.metrics
    assert m["numTargetRowsDeleted"] == 2
    assert m["numTargetRowsMatchedDeleted"] == 2
    assert m["numTargetRowsCopied"] == 2
    assert m["numTargetFilesRemoved"] == 2


def test_matched_cdc_op_column_delete_update_insert(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(1, "a"), (2, "b")], [(3, "c")]])
    before = file_snapshot(spark, t)
    file_of_3 = files_of(spark, t, "id = 3")
    src = source_view(
        spark,
        f"{db}_src",
        "op string, id long, v string",
        [("D", 1, None), ("U", 2, "B"), ("I", 5, "e"), ("D", 6, None), ("U", 3, "c")],
    )
    result = merge(
        spark,
        t,
        src,
        [
            {"when": "matched", "condition": "s.op = 'D'", "action": "delete"},
            {"when": "matched", "action": "update", "set": "*"},
            {"when": "not_matched", "condition": "s.op <> 'D'", "action": "insert", "values": "*"},
        ],
    )
    # 6 is a delete of a row that does not exist: not inserted. 3's update changes nothing.
    assert rows(spark, t) == [(2, "B"), (3, "c"), (5, "e")]
    m = result.metrics
    assert m["numSourceRows"] == 5
    assert (m["numTargetRowsDeleted"], m["numTargetRowsUpdated"], m["numTargetRowsInserted"]) == (1, 1, 1)
    assert m["numTargetRowsCopied"] == 0
    assert m["numTargetFilesRemoved"] == 1
    assert kept_files(before, file_snapshot(spark, t)) == file_of_3


def test_matched_condition_false_source_row_is_not_inserted(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, v int", [[(1, 10), (2, 20)]])
    src = source_view(spark, f"{db}_src", "id long, v int", [(1, 5), (2, 25), (3, 30)])
    result = merge(
        spark,
        t,
        src,
        [
            {"when": "matched", "condition": "s.v > t.v", "action": "update", "set": "*"},
            {"when": "not_matched", "action": "insert", "values": "*"},
        ],
    )
    # Source row 1 matched target row 1 (its clause did not act): it is not "not matched".
    assert rows(spark, t) == [(1, 10), (2, 25), (3, 30)]
    m = result.metrics
    assert (m["numTargetRowsUpdated"], m["numTargetRowsInserted"], m["numTargetRowsCopied"]) == (1, 1, 1)


def test_matched_update_sets_only_listed_columns_from_both_sides(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, qty int, note string", [[(1, 5, "x"), (2, 7, "y")]])
    src = source_view(spark, f"{db}_src", "id long, qty int", [(1, 3), (2, -7)])
    result = merge(
        spark,
        t,
        src,
        [{"when": "matched", "action": "update", "set": {"qty": "t.qty + s.qty", "note": "upper(t.note)"}}],
    )
    assert rows(spark, t) == [(1, 8, "X"), (2, 0, "Y")]
    assert result.metrics["numTargetRowsUpdated"] == 2


def test_matched_update_changes_key_column(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(1, "a"), (2, "b")], [(3, "c")]])
    src = source_view(spark, f"{db}_src", "id long, new_id long", [(1, 10), (3, 30)])
    result = merge(spark, t, src, [{"when": "matched", "action": "update", "set": {"id": "s.new_id"}}])
    assert rows(spark, t) == [(2, "b"), (10, "a"), (30, "c")]
    assert result.metrics["numTargetRowsUpdated"] == 2
    assert result.metrics["numTargetRowsCopied"] == 1


def test_not_matched_by_source_conditional_update_sets_flag(spark, db):
    t = f"{db}.t"
    create_table(
        spark,
        t,
        "id long, v string, active boolean",
        [[(1, "a", True), (2, "b", True), (3, "c", False)], [(4, "d", True)], [(5, "e", False)]],
    )
    before = file_snapshot(spark, t)
    src = source_view(spark, f"{db}_src", "id long, v string", [(1, "A"), (5, "e")])
    result = merge(
        spark,
        t,
        src,
        [
            {"when": "matched", "action": "update", "set": {"v": "s.v"}},
            {
                "when": "not_matched_by_source",
                "condition": "t.active",
                "action": "update",
                "set": {"active": "false"},
            },
        ],
    )
    assert rows(spark, t) == [
        (1, "A", True),
        (2, "b", False),
        (3, "c", False),
        (4, "d", False),
        (5, "e", False),
    ]
    m = result.metrics
    assert m["numTargetRowsMatchedUpdated"] == 1
    assert m["numTargetRowsNotMatchedBySourceUpdated"] == 2
    assert m["numTargetRowsUpdated"] == 3
    assert m["numTargetRowsCopied"] == 1
    assert m["numTargetFilesRemoved"] == 2
    # File 3 (row 5): matched, but the update writes the value it already has.
    assert len(kept_files(before, file_snapshot(spark, t))) == 1


def test_not_matched_by_source_delete_with_upsert(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(1, "a"), (2, "b")], [(3, "c")], [(4, "d")]])
    src = source_view(spark, f"{db}_src", "id long, v string", [(1, "A"), (3, "C"), (9, "z")])
    result = merge(spark, t, src, [*UPSERT, {"when": "not_matched_by_source", "action": "delete"}])
    assert rows(spark, t) == [(1, "A"), (3, "C"), (9, "z")]
    m = result.metrics
    assert m["numTargetRowsNotMatchedBySourceDeleted"] == 2
    assert m["numTargetRowsDeleted"] == 2
    assert m["numTargetRowsMatchedUpdated"] == 2
    assert m["numTargetRowsInserted"] == 1
    assert m["numTargetRowsCopied"] == 0
    assert m["numTargetFilesRemoved"] == 3


def test_not_matched_by_source_clauses_first_applicable_wins(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(1, "a"), (2, "b"), (3, "c")]])
    src = source_view(spark, f"{db}_src", "id long, v string", [(1, "a")])
    result = merge(
        spark,
        t,
        src,
        [
            {"when": "matched", "action": "update", "set": "*"},
            {"when": "not_matched_by_source", "condition": "t.v = 'b'", "action": "delete"},
            {"when": "not_matched_by_source", "action": "update", "set": {"v": "upper(t.v)"}},
        ],
    )
    assert rows(spark, t) == [(1, "a"), (3, "C")]
    m = result.metrics
    assert m["numTargetRowsNotMatchedBySourceDeleted"] == 1
    assert m["numTargetRowsNotMatchedBySourceUpdated"] == 1
    assert m["numTargetRowsMatchedUpdated"] == 0  # row 1's update is a no-op
    assert m["numTargetRowsCopied"] == 1


def test_not_matched_by_source_delete_removes_rows_failing_target_only_on_predicate(spark, db):
    t = f"{db}.t"
    create_table(
        spark,
        t,
        "id long, region string, v string",
        [[(1, "eu", "a"), (2, "us", "b"), (3, "eu", "c")], [(4, "us", "d")]],
    )
    src = source_view(spark, f"{db}_src", "id long, v string", [(1, "A"), (2, "B")])
    result = merge(
        spark,
        t,
        src,
        [
            {"when": "matched", "action": "update", "set": {"v": "s.v"}},
            {"when": "not_matched_by_source", "action": "delete"},
        ],
        on="t.id = s.id AND t.region = 'eu'",
    )
    # Rows 2 and 4 fail `t.region = 'eu'`: no source row matches them, so they are
    # NOT MATCHED BY SOURCE and the unconditional delete removes them (SQL semantics).
    assert rows(spark, t) == [(1, "eu", "A")]
    m = result.metrics
    assert m["numTargetRowsMatchedUpdated"] == 1
    assert m["numTargetRowsNotMatchedBySourceDeleted"] == 3
    assert m["numTargetRowsDeleted"] == 3
    assert m["numTargetFilesRemoved"] == 2


def test_not_matched_inserts_source_row_whose_target_fails_target_only_on_predicate(spark, db):
    t = f"{db}.t"
    create_table(
        spark,
        t,
        "id long, region string, v string",
        [[(1, "eu", "a"), (2, "us", "b"), (3, "eu", "c")], [(4, "us", "d")]],
    )
    before = file_snapshot(spark, t)
    src = source_view(spark, f"{db}_src", "id long, v string", [(1, "A"), (2, "B"), (5, "E")])
    result = merge(
        spark,
        t,
        src,
        [
            {"when": "matched", "action": "update", "set": {"v": "s.v"}},
            {
                "when": "not_matched",
                "action": "insert",
                "values": {"id": "s.id", "region": "'new'", "v": "s.v"},
            },
        ],
        on="t.id = s.id AND t.region = 'eu'",
    )
    assert rows(spark, t) == [
        (1, "eu", "A"),
        (2, "new", "B"),
        (2, "us", "b"),
        (3, "eu", "c"),
        (4, "us", "d"),
        (5, "new", "E"),
    ]
    m = result.metrics
    assert (m["numTargetRowsUpdated"], m["numTargetRowsInserted"], m["numTargetRowsCopied"]) == (1, 2, 2)
    assert m["numTargetFilesRemoved"] == 1
    assert len(kept_files(before, file_snapshot(spark, t))) == 1


def test_all_three_clause_kinds_in_one_merge(spark, db):
    t = f"{db}.t"
    create_table(
        spark,
        t,
        "id long, v string, active boolean",
        [[(1, "a", True), (2, "b", True)], [(3, "c", True), (4, "d", False)]],
    )
    src = source_view(
        spark, f"{db}_src", "id long, v string, active boolean", [(1, "A", True), (7, "g", True)]
    )
    result = merge(
        spark,
        t,
        src,
        [
            *UPSERT,
            {"when": "not_matched_by_source", "condition": "t.id = 4", "action": "delete"},
            {"when": "not_matched_by_source", "action": "update", "set": {"active": "false"}},
        ],
    )
    assert rows(spark, t) == [(1, "A", True), (2, "b", False), (3, "c", False), (7, "g", True)]
    m = result.metrics
    assert m["numTargetRowsMatchedUpdated"] == 1
    assert m["numTargetRowsNotMatchedBySourceUpdated"] == 2
    assert m["numTargetRowsNotMatchedBySourceDeleted"] == 1
    assert m["numTargetRowsInserted"] == 1
    assert m["numTargetRowsUpdated"] == 3
    assert m["numTargetRowsDeleted"] == 1
    assert m["numTargetRowsCopied"] == 0


def test_matched_update_set_accepts_python_literal_values(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, n int, flag boolean, x double", [[(1, 5, True, 1.5), (2, 6, True, 2.5)]])
    src = source_view(spark, f"{db}_src", "id long", [(1,)])
    merge(spark, t, src, [{"when": "matched", "action": "update", "set": {"n": 0, "flag": False, "x": 0.25}}])
    assert rows(spark, t) == [(1, 0, False, 0.25), (2, 6, True, 2.5)]


def _commented(clauses: list[dict]) -> list[dict]:
    """``clauses`` with a trailing ``--`` comment on every condition and value, as a YAML block
    or a dbt config line may end one."""
    out = []
    for c in clauses:
        c = dict(c)
        if "condition" in c:
            # Ending in a backslash: Spark's lexer carries such a comment over a line break.
            c["condition"] = f"{c['condition']} -- why this clause acts: see C:\\"
        for key in ("set", "values"):
            if isinstance(c.get(key), dict):
                c[key] = {col: f"{text} -- from the source" for col, text in c[key].items()}
        out.append(c)
    return out


COMMENTED_CDC = [
    {"when": "matched", "condition": "s.op = 'D'", "action": "delete"},
    {
        "when": "matched",
        "condition": "s.op = 'U'",
        "action": "update",
        "set": {"v": "upper(s.v)", "n": "t.n + 1"},
    },
    {"when": "matched", "action": "update", "set": {"v": "s.v"}},
    {
        "when": "not_matched",
        "condition": "s.op = 'I'",
        "action": "insert",
        "values": {"id": "s.id", "v": "s.v"},
    },
    {"when": "not_matched", "action": "insert", "values": {"id": "s.id", "v": "'late'", "n": "0"}},
    {"when": "not_matched_by_source", "condition": "t.n > 2", "action": "update", "set": {"v": "'stale'"}},
]


def test_conditions_and_values_ending_in_a_comment_merge_as_without_it(spark, db):
    """Each user expression is built into larger ones (a CASE per column, the no-op test):
    a ``--`` comment at its end must not run on over what the engine writes after it."""
    results = {}
    for name, clauses in (("plain", COMMENTED_CDC), ("commented", _commented(COMMENTED_CDC))):
        t = f"{db}.{name}"
        create_table(spark, t, "id long, v string, n int", [[(1, "a", 1), (2, "b", 2)], [(3, "c", 3)]])
        src = source_view(
            spark,
            f"{db}_src_{name}",
            "op string, id long, v string",
            [("D", 1, None), ("U", 2, "bb"), ("I", 5, "e"), ("X", 6, "f")],
        )
        result = merge(spark, t, src, clauses, change_data_feed={"table": f"{t}__changes"})
        feed = sorted(
            (r["id"], r["_change_type"], r["v"], r["n"]) for r in spark.table(f"{t}__changes").collect()
        )
        results[name] = (rows(spark, t), feed, result.metrics["numTargetRowsUpdated"])
    assert results["commented"] == results["plain"]
    assert results["plain"][0] == [(2, "BB", 3), (3, "stale", 3), (5, "e", None), (6, "late", 0)]
    assert results["plain"][2] == 2


def _shorthand_cdc(delete_condition: str, not_matched_condition: str, brk: str) -> list[dict]:
    """The clauses the macros compile from unique_key, delete_condition and
    not_matched_condition: the insert's condition is both, the delete's negated, each in
    parentheses that ``brk`` (line breaks after a comment) closes on a line of their own."""
    return [
        {"when": "matched", "condition": delete_condition, "action": "delete"},
        {"when": "matched", "action": "update", "set": {"v": "s.v"}},
        {
            "when": "not_matched",
            "condition": f"({not_matched_condition}{brk}) AND NOT ({delete_condition}{brk})",
            "action": "insert",
            "values": {"id": "s.id", "v": "s.v"},
        },
    ]


def test_shorthand_conditions_ending_in_comments_merge_as_without_them(spark, db):
    """delete_condition and not_matched_condition with trailing comments (one ending in a
    backslash), in the insert's condition exactly as the macros build it (test_compile holds
    the macros to that text): it merges as the same config without comments."""
    results = {}
    plain = _shorthand_cdc("s.op = 'D'", "s.v <> 'skip'", "")
    commented = _shorthand_cdc("s.op = 'D' -- hard deletes", "s.v <> 'skip' -- in C:\\", "\n\n")
    for name, clauses in (("plain", plain), ("commented", commented)):
        t = f"{db}.short_{name}"
        create_table(spark, t, "id long, v string", [[(1, "a"), (2, "b"), (3, "c")]])
        src = source_view(
            spark,
            f"{db}_short_src_{name}",
            "op string, id long, v string",
            [("D", 1, None), ("U", 2, "bb"), ("I", 5, "e"), ("D", 7, "x"), ("I", 8, "skip")],
        )
        merge(spark, t, src, clauses)
        results[name] = rows(spark, t)
    assert results["commented"] == results["plain"] == [(2, "bb"), (3, "c"), (5, "e")]
