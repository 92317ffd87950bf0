"""A catalogue of malformed and hostile inputs to ``run_merge``, each rejected with the right MergeError.

Every rejection names the offending key, clause or column and leaves the target and its change feed
byte for byte as they were; inputs the engine accepts on purpose produce exactly the expected rows.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

import pytest
from pyspark.sql import SparkSession

from dbt.adapters.rowmerge.merge import (
    CardinalityViolation,
    CastError,
    JournalError,
    MergeError,
    MergeSpecError,
    UnreadableFileError,
    UnsupportedTableError,
    run_merge,
    start_history,
)
from tests.engine.helpers import create_table, rows, source_view

# -- the shared target ---------------------------------------------------------------------------

DDL = "id long, v string, n int"
TARGET_FILES = [[(1, "a", 1), (2, "b", 2), (3, "c", 3)]]
SOURCE_ROWS = [(1, "A", 10), (4, "D", 40)]
# Source views besides {db}_src (same rows unless said otherwise).
EXTRA_SOURCES: dict[str, tuple[str, list[tuple[Any, ...]]]] = {
    "nocol": ("id long, v string", [(1, "A"), (4, "D")]),
    "reserved": ("id long, v string, n int, __rowmerge_x int", [(1, "A", 10, 0)]),
    "struct": ("id long, v string, n struct<a:int>", [(1, "A", (10,))]),
    "dup": (DDL, [(1, "A", 10), (1, "B", 11)]),
    "badcast": ("id long, v string, n string", [(1, "A", "abc")]),
    "twice": ("id long, v string, n int, N int", [(1, "A", 10, 11)]),
    "part": (DDL, [(1, "A", 1), (4, "D", 2)]),
    "nested": (
        "id long, n int, k struct<a:int,c:string>, arr array<int>, m map<string,int>, "
        "mi map<int,string>, ks array<struct<a:int,b:string>>",
        [(1, 10, (1, "x"), [1], {"a": 1}, {1: "x"}, [(1, "x")])],
    ),
}

UPDATE_ALL = {"when": "matched", "action": "update", "set": "*"}
INSERT_ALL = {"when": "not_matched", "action": "insert", "values": "*"}
DELETE = {"when": "matched", "action": "delete"}
NMBS_DELETE = {"when": "not_matched_by_source", "action": "delete"}

# Every key of the spec, valid; a case overrides some of them. "{db}" is the module's database.
BASE: dict[str, Any] = {
    "version": 1,
    "target": "{db}.t",
    "source": "{db}_src",
    "target_alias": "t",
    "source_alias": "s",
    "on": "t.id = s.id",
    "clauses": [UPDATE_ALL, INSERT_ALL],
    "skip_unchanged_updates": True,
    "change_data_feed": {"table": "{db}.t__changes"},
    "schema_evolution": False,
    "lock_timeout_s": 30,
}
MAX_MESSAGE = 2_000  # characters: a message quotes a long expression shortened, not whole
DROP = object()  # as an override value: remove the key from the spec
SHARED = ("t", "t__changes")  # folders (managed tables of the module database) a case must not change


@dataclass(frozen=True)
class Whole:
    """A spec used as it is instead of overriding BASE (for specs that are not mappings, or sparse)."""

    spec: Any


@dataclass(frozen=True)
class BadInput:
    id: str
    spec: Mapping[Any, Any] | Whole  # overrides of BASE (DROP removes a key), or Whole
    raises: type[MergeError]
    fragments: tuple[str, ...]  # all in one problem (MergeSpecError) or in the message
    problems: int | None = 1  # len(exc.problems) for a MergeSpecError; None: not checked
    watch: tuple[str, ...] = SHARED
    setup: Callable[[SparkSession, str], None] | None = None
    max_s: float | None = None  # the rejection must come this fast (no Spark parser recursion)


def case(
    id: str,
    spec: Mapping[Any, Any] | Whole,
    raises: type[MergeError],
    *fragments: str,
    problems: int | None = 1,
    watch: tuple[str, ...] = SHARED,
    setup: Callable[[SparkSession, str], None] | None = None,
    max_s: float | None = None,
) -> Any:
    assert fragments, id
    item = BadInput(id, spec, raises, fragments, problems, watch, setup, max_s)
    return pytest.param(item, id=id)


def clauses(*items: Any) -> dict[str, Any]:
    return {"clauses": list(items)}


def update(set_: Any, condition: Any = None, when: str = "matched") -> dict[str, Any]:
    out: dict[str, Any] = {"when": when, "action": "update", "set": set_}
    if condition is not None:
        out["condition"] = condition
    return out


def insert(values: Any, condition: Any = None) -> dict[str, Any]:
    out: dict[str, Any] = {"when": "not_matched", "action": "insert", "values": values}
    if condition is not None:
        out["condition"] = condition
    return out


def c0(action: str = "update", when: str = "matched") -> str:
    """How plan-level messages name clause 0."""
    return f"clauses[0] (when: {when}, action: {action})"


def nested(inner: str, depth: int) -> str:
    return "(" * depth + inner + ")" * depth


def long_text(head: str, tail: str, size: int) -> str:
    """``head`` followed by copies of ``tail`` up to at least ``size`` characters."""
    return head + tail * ((size - len(head)) // len(tail) + 1)


# -- set-up of the few cases that need their own object -----------------------------------------


def _view(spark: SparkSession, db: str) -> None:
    spark.sql(f"CREATE VIEW IF NOT EXISTS {db}.vw AS SELECT * FROM {db}.t")


def _csv(spark: SparkSession, db: str) -> None:
    spark.sql(f"CREATE TABLE {db}.csv_t (id BIGINT, v STRING, n INT) USING csv")
    spark.sql(f"INSERT INTO {db}.csv_t VALUES (1, 'a', 1)")


def _plain(spark: SparkSession, db: str) -> None:
    create_table(spark, f"{db}.plain", DDL, [[(1, "a", 1)]])


def _stream(spark: SparkSession, db: str) -> None:
    rate = spark.readStream.format("rate").load()
    rate.selectExpr("value AS id", "'x' AS v", "1 AS n").createOrReplaceTempView(f"{db}_src_stream")


def _change_type_target(spark: SparkSession, db: str) -> None:
    create_table(spark, f"{db}.ct", "id long, v string, _change_type string", [[(1, "a", "x")]])
    start_history(spark, f"{db}.ct")


# -- the catalogue -------------------------------------------------------------------------------

NAME = "is not a valid table name"
CDF_SHAPE = "`change_data_feed` must be null or a mapping with one key, `table`"
CDF_KEY = "`change_data_feed` table '"
CDF_NAME = "is not a valid name for a new table"
NOT_FEED = "exists but is not a change feed"

SPEC_SHAPE = [
    case("spec-list", Whole([BASE]), MergeSpecError, "the spec must be a mapping, got list"),
    case("spec-string", Whole("target: {db}.t"), MergeSpecError, "the spec must be a mapping, got str"),
    case("spec-none", Whole(None), MergeSpecError, "the spec must be a mapping, got NoneType"),
    case("spec-empty", Whole({}), MergeSpecError, "`target` is required", problems=4),
    case("key-unknown", {"tagret": "{db}.t"}, MergeSpecError, "unknown spec key(s) tagret", "expected"),
    case("key-int", {1: "x"}, MergeSpecError, "unknown spec key(s) 1;"),
    case("key-none", {None: "x"}, MergeSpecError, "unknown spec key(s) None;"),
    case("key-tuple", {("on",): "x"}, MergeSpecError, "unknown spec key(s) ('on',)"),
    case("version-2", {"version": 2}, MergeSpecError, "`version` must be 1, got 2"),
    case("version-str", {"version": "1"}, MergeSpecError, "`version` must be 1, got '1'"),
    case("version-true", {"version": True}, MergeSpecError, "`version` must be 1, got True"),
    case("version-float", {"version": 1.5}, MergeSpecError, "`version` must be 1, got 1.5"),
    case("target-missing", {"target": DROP}, MergeSpecError, "`target` is required"),
    case("target-empty", {"target": ""}, MergeSpecError, "`target` is required and must be a non-empty"),
    case("target-blank", {"target": "   "}, MergeSpecError, "`target` is required"),
    case("target-int", {"target": 42}, MergeSpecError, "`target` is required"),
    case("source-missing", {"source": DROP}, MergeSpecError, "`source` is required"),
    case("source-list", {"source": ["{db}_src"]}, MergeSpecError, "`source` is required"),
    case("on-missing", {"on": DROP}, MergeSpecError, "`on` is required", "unique_key"),
    case("on-empty", {"on": ""}, MergeSpecError, "`on` is required"),
    case("on-true", {"on": True}, MergeSpecError, "`on` is required"),
    case("alias-space", {"target_alias": "t x"}, MergeSpecError, "`target_alias` must be a plain identifier"),
    case("alias-dot", {"source_alias": "s.x"}, MergeSpecError, "`source_alias` must be a plain identifier"),
    case(
        "alias-int", {"source_alias": 5}, MergeSpecError, "`source_alias` must be a plain identifier, got 5"
    ),
    case("alias-zero", {"target_alias": 0}, MergeSpecError, "`target_alias` must be a plain identifier"),
    case(
        "alias-digits",
        {"target_alias": "1", "on": "1.id = s.id"},
        MergeSpecError,
        "`target_alias` must be a plain identifier, got '1'",
    ),
    case(
        "alias-equal-case",
        {"target_alias": "x", "source_alias": "X", "on": "x.id = X.id"},
        MergeSpecError,
        "`target_alias` and `source_alias` must differ",
    ),
]

NAMES = [
    case("target-sql", {"target": "select * from {db}.t"}, MergeSpecError, "`target` ('select", NAME),
    case("target-comment", {"target": "{db}.t -- nightly"}, MergeSpecError, "`target` ('{db}.t --", NAME),
    case("target-semicolon", {"target": "{db}.t; drop table {db}.t"}, MergeSpecError, "`target`", NAME),
    case("target-open-quote", {"target": "{db}.`t"}, MergeSpecError, "`target`", "back-quote is not closed"),
    case("target-4-parts", {"target": "c.x.{db}.t"}, MergeSpecError, "`target`", "it has 4 parts"),
    case("target-empty-part", {"target": "{db}..t"}, MergeSpecError, "`target` ('{db}..t')", NAME),
    case("target-empty-quoted", {"target": "{db}.``"}, MergeSpecError, "`target`", "empty part"),
    case("source-sql", {"source": "select * from {db}_src"}, MergeSpecError, "`source`", "temporary view"),
    case("source-semicolon", {"source": "{db}_src;"}, MergeSpecError, "`source` ('{db}_src;')", NAME),
    case("source-open-quote", {"source": "`{db}_src"}, MergeSpecError, "`source`", "not closed"),
    case("source-4-parts", {"source": "a.b.c.{db}_src"}, MergeSpecError, "`source`", "4 parts"),
    case(
        "cdf-comment",
        {"change_data_feed": {"table": "{db}.t__changes -- x"}},
        MergeSpecError,
        CDF_KEY,
        CDF_NAME,
    ),
    case("cdf-dashes", {"change_data_feed": {"table": "{db}.t--changes"}}, MergeSpecError, CDF_KEY, CDF_NAME),
    case(
        "cdf-parent",
        {"change_data_feed": {"table": "../t__changes"}},
        MergeSpecError,
        CDF_KEY,
        "'../t",
        CDF_NAME,
    ),
    case("cdf-space", {"change_data_feed": {"table": "{db}.my changes"}}, MergeSpecError, CDF_KEY, CDF_NAME),
    case("cdf-slash", {"change_data_feed": {"table": "{db}/t__changes"}}, MergeSpecError, CDF_KEY, CDF_NAME),
    case(
        "cdf-quoted-slash",
        {"change_data_feed": {"table": "{db}.`a/b`"}},
        MergeSpecError,
        CDF_KEY,
        "'a/b'",
        CDF_NAME,
    ),
    case(
        "cdf-quoted-parent",
        {"change_data_feed": {"table": "{db}.`..`"}},
        MergeSpecError,
        CDF_KEY,
        "'..'",
        CDF_NAME,
    ),
    case("cdf-empty-name", {"change_data_feed": {"table": ""}}, MergeSpecError, CDF_SHAPE),
    case("cdf-int-name", {"change_data_feed": {"table": 5}}, MergeSpecError, CDF_SHAPE),
    case("cdf-string", {"change_data_feed": "{db}.t__changes"}, MergeSpecError, CDF_SHAPE, "got '"),
    case("cdf-list", {"change_data_feed": ["{db}.t__changes"]}, MergeSpecError, CDF_SHAPE, "got ["),
    case("cdf-true", {"change_data_feed": True}, MergeSpecError, CDF_SHAPE, "got True"),
    case(
        "cdf-extra-key",
        {"change_data_feed": {"table": "{db}.t__changes", "mode": "append"}},
        MergeSpecError,
        CDF_SHAPE,
        "'mode'",
    ),
    case(
        "cdf-wrong-key", {"change_data_feed": {"tbl": "{db}.t__changes"}}, MergeSpecError, CDF_SHAPE, "'tbl'"
    ),
]

FLAGS = [
    case(
        "skip-yes", {"skip_unchanged_updates": "yes"}, MergeSpecError, "`skip_unchanged_updates` must be true"
    ),
    case("skip-one", {"skip_unchanged_updates": 1}, MergeSpecError, "`skip_unchanged_updates`", "got 1"),
    case("skip-none", {"skip_unchanged_updates": None}, MergeSpecError, "`skip_unchanged_updates`", "None"),
    case("evolution-yes", {"schema_evolution": "yes"}, MergeSpecError, "`schema_evolution` must be true"),
    case("evolution-one", {"schema_evolution": 1}, MergeSpecError, "`schema_evolution`", "got 1"),
    case("evolution-none", {"schema_evolution": None}, MergeSpecError, "`schema_evolution`", "got None"),
    case("timeout-negative", {"lock_timeout_s": -1}, MergeSpecError, "`lock_timeout_s` must be a finite"),
    case("timeout-nan", {"lock_timeout_s": float("nan")}, MergeSpecError, "`lock_timeout_s`", "got nan"),
    case("timeout-inf", {"lock_timeout_s": float("inf")}, MergeSpecError, "`lock_timeout_s`", "got inf"),
    case("timeout-true", {"lock_timeout_s": True}, MergeSpecError, "`lock_timeout_s`", "got True"),
    case("timeout-str", {"lock_timeout_s": "10"}, MergeSpecError, "`lock_timeout_s`", "got '10'"),
    case("timeout-none", {"lock_timeout_s": None}, MergeSpecError, "`lock_timeout_s`", "got None"),
]

NOT_LAST = "only the last {0} clause may omit `condition`"
CLAUSE_SHAPES = [
    case("clauses-missing", {"clauses": DROP}, MergeSpecError, "`clauses` must be a non-empty list"),
    case("clauses-empty", {"clauses": []}, MergeSpecError, "`clauses` must be a non-empty list"),
    case("clauses-dict", {"clauses": UPDATE_ALL}, MergeSpecError, "`clauses` must be a non-empty list"),
    case("clauses-string", {"clauses": "matched"}, MergeSpecError, "`clauses` must be a non-empty list"),
    case("clause-string", clauses("update all"), MergeSpecError, "clauses[0]: each clause must be a mapping"),
    case(
        "clause-none", clauses(UPDATE_ALL, None), MergeSpecError, "clauses[1]: each clause must be a mapping"
    ),
    case(
        "clause-key-unknown",
        clauses({**DELETE, "where": "x"}),
        MergeSpecError,
        "clauses[0]: unknown key(s) where",
    ),
    case("clause-key-int", clauses({**DELETE, 3: "x"}), MergeSpecError, "clauses[0]: unknown key(s) 3;"),
    case(
        "clause-key-upper",
        clauses({"WHEN": "matched", "action": "delete"}),
        MergeSpecError,
        "clauses[0]: unknown key(s) WHEN",
        problems=2,  # and: no `when`
    ),
    case(
        "when-unknown",
        clauses({**DELETE, "when": "matches"}),
        MergeSpecError,
        "clauses[0]: unknown `when` 'matches'",
    ),
    case("when-missing", clauses({"action": "delete"}), MergeSpecError, "clauses[0]: unknown `when` None"),
    case("when-int", clauses({**DELETE, "when": 1}), MergeSpecError, "clauses[0]: unknown `when` 1"),
    case(
        "action-unknown",
        clauses({**DELETE, "action": "upsert"}),
        MergeSpecError,
        "clauses[0] (when: matched): unknown `action` 'upsert'; use one of update, delete",
    ),
    case(
        "action-missing",
        clauses({"when": "matched"}),
        MergeSpecError,
        "clauses[0] (when: matched): unknown `action`",
    ),
    case(
        "action-origin",
        clauses({**DELETE, "action": "merge", "origin": "merge_clauses[3]"}),
        MergeSpecError,
        "merge_clauses[3] (when: matched): unknown `action` 'merge'",
    ),
    case(
        "insert-under-matched",
        clauses({"when": "matched", "action": "insert", "values": "*"}),
        MergeSpecError,
        "clauses[0] (when: matched): action 'insert' is not allowed here",
    ),
    case(
        "update-under-not-matched",
        clauses(UPDATE_ALL, {"when": "not_matched", "action": "update", "set": "*"}),
        MergeSpecError,
        "clauses[1] (when: not_matched): action 'update' is not allowed here",
    ),
    case(
        "delete-under-not-matched",
        clauses({"when": "not_matched", "action": "delete"}),
        MergeSpecError,
        "clauses[0] (when: not_matched): action 'delete' is not allowed here",
    ),
    case(
        "delete-with-set",
        clauses({**DELETE, "set": "*"}),
        MergeSpecError,
        "clauses[0]",
        "a delete takes no `set`",
    ),
    case(
        "delete-with-values",
        clauses({**NMBS_DELETE, "values": "*"}),
        MergeSpecError,
        "clauses[0] (when: not_matched_by_source): a delete takes no `values`",
    ),
    case(
        "update-without-set",
        clauses({"when": "matched", "action": "update"}),
        MergeSpecError,
        "clauses[0] (when: matched): an update needs `set`",
    ),
    case(
        "insert-without-values",
        clauses({"when": "not_matched", "action": "insert"}),
        MergeSpecError,
        "clauses[0] (when: not_matched): an insert needs `values`",
    ),
    case(
        "update-with-values",
        clauses({"when": "matched", "action": "update", "values": "*"}),
        MergeSpecError,
        "clauses[0] (when: matched): `values` is for insert; an update takes `set`",
        problems=2,  # and: no `set`
    ),
    case(
        "insert-with-set",
        clauses({"when": "not_matched", "action": "insert", "set": "*"}),
        MergeSpecError,
        "clauses[0] (when: not_matched): `set` is for update; an insert takes `values`",
        problems=2,  # and: no `values`
    ),
    case("set-list", clauses(update(["v"])), MergeSpecError, 'clauses[0] (when: matched): `set` must be "*"'),
    case(
        "set-empty",
        clauses(update({})),
        MergeSpecError,
        "clauses[0] (when: matched): `set` must be",
        "got {}",
    ),
    case("set-star-word", clauses(update("all")), MergeSpecError, '`set` must be "*" or a mapping', "'all'"),
    case(
        "set-empty-column",
        clauses(update({"": "s.v"})),
        MergeSpecError,
        "clauses[0] (when: matched): `set` column names must be non-empty strings, got ''",
    ),
    case(
        "set-int-column", clauses(update({1: "s.v"})), MergeSpecError, "`set` column names must be", "got 1"
    ),
    case(
        "set-list-value",
        clauses(update({"v": ["s.v"]})),
        MergeSpecError,
        "clauses[0] (when: matched): `set` value for column 'v' must be a SQL expression string",
    ),
    case("set-empty-value", clauses(update({"v": ""})), MergeSpecError, "`set` value for column 'v' must be"),
    case("set-nan-value", clauses(update({"n": float("nan")})), MergeSpecError, "`set` value for column 'n'"),
    case(
        "set-none-value", clauses(update({"v": None})), MergeSpecError, "`set` value for column 'v' must be"
    ),
    case(
        "values-dict-value",
        clauses(insert({"id": "s.id", "v": {"sql": "s.v"}})),
        MergeSpecError,
        "clauses[0] (when: not_matched): `values` value for column 'v' must be a SQL expression",
    ),
    case(
        "condition-list",
        clauses(update("*", ["s.n > 0"])),
        MergeSpecError,
        "clauses[0] (when: matched): `condition` must be a SQL boolean expression string",
    ),
    case(
        "condition-dict", clauses(update("*", {"n": 1})), MergeSpecError, "clauses[0]", "`condition` must be"
    ),
    case("condition-empty", clauses(update("*", "")), MergeSpecError, "clauses[0]", "`condition` must be"),
    case("condition-int", clauses(update("*", 1)), MergeSpecError, "clauses[0]", "`condition` must be"),
    case(
        "not-last-matched",
        clauses(UPDATE_ALL, {**DELETE, "condition": "s.n > 5"}),
        MergeSpecError,
        "clauses[0] (when: matched): " + NOT_LAST.format("matched"),
    ),
    case(
        "not-last-not-matched",
        clauses(INSERT_ALL, insert("*", "s.n > 5")),
        MergeSpecError,
        "clauses[0] (when: not_matched): " + NOT_LAST.format("not_matched"),
    ),
    case(
        "not-last-nmbs",
        clauses(NMBS_DELETE, {**NMBS_DELETE, "condition": "t.n > 1"}),
        MergeSpecError,
        "clauses[0] (when: not_matched_by_source): " + NOT_LAST.format("not_matched_by_source"),
    ),
]

WIDE = long_text("s.n > 0", " or s.n > 0", 200_000)
TOO_LONG = "characters long (at most 100000)"
TOO_DEEP = "nests parentheses 3000 deep (at most 200)"
EXPRESSIONS = [
    case(
        "set-unknown-column",
        clauses(update({"nope": "s.v"})),
        MergeSpecError,
        c0() + ": `set` names column 'nope', which the target {db}.t does not have",
    ),
    case(
        "values-unknown-column",
        clauses(insert({"id": "s.id", "zz": "1"})),
        MergeSpecError,
        c0("insert", "not_matched") + ": `values` names column 'zz'",
    ),
    case(
        "set-column-twice",
        clauses(update({"v": "s.v", "V": "upper(s.v)"})),
        MergeSpecError,
        c0() + ": column 'V' is assigned twice in `set`",
    ),
    case(
        "condition-unresolvable",
        clauses(update("*", "s.missing = 1")),
        MergeSpecError,
        c0() + " condition (s.missing = 1) cannot be resolved",
        "missing",
    ),
    case(
        "condition-syntax",
        clauses(update("*", "n = = 5")),
        MergeSpecError,
        c0() + " condition (n = = 5)",
        "Syntax",
    ),
    case(
        "condition-open-paren", clauses(update("*", "(")), MergeSpecError, c0() + " condition (()", "Syntax"
    ),
    case(
        "value-syntax",
        clauses(update({"v": "s.v +"})),
        MergeSpecError,
        c0() + " `set` for 'v' (s.v +)",
        "Syntax",
    ),
    case(
        "value-statement",
        clauses(update({"v": "s.v; drop table {db}.t"})),
        MergeSpecError,
        c0() + " `set` for 'v' (s.v; drop table {db}.t)",
    ),
    case(
        "condition-int-typed",
        clauses(update("*", "s.n + 1")),
        MergeSpecError,
        c0() + " condition (s.n + 1) must be a boolean expression, got int",
    ),
    case(
        "condition-rand",
        clauses(update("*", "rand() > 0.5")),
        MergeSpecError,
        c0() + " condition (rand() > 0.5) is non-deterministic",
    ),
    case(
        "value-uuid",
        clauses(update({"v": "uuid()"})),
        MergeSpecError,
        c0() + " `set` for 'v' (uuid()) is non-deterministic",
    ),
    case(
        "on-rand",
        {"on": "t.id = s.id and rand() < 2"},
        MergeSpecError,
        "`on` (t.id = s.id and rand() < 2) is non-deterministic",
    ),
    case(
        "not-matched-condition-target",
        clauses(insert("*", "t.n > 0")),
        MergeSpecError,
        c0("insert", "not_matched") + " condition (t.n > 0) may reference only the source (s)",
    ),
    case(
        "not-matched-values-target",
        clauses(insert({"id": "s.id", "v": "t.v"})),
        MergeSpecError,
        c0("insert", "not_matched") + " `values` for 'v' (t.v) may reference only the source (s)",
    ),
    case(
        "nmbs-condition-source",
        clauses({**NMBS_DELETE, "condition": "s.n > 0"}),
        MergeSpecError,
        c0("delete", "not_matched_by_source") + " condition (s.n > 0) may reference only the target (t)",
    ),
    case(
        "nmbs-set-source",
        clauses(update({"v": "concat(t.v, s.v)"}, when="not_matched_by_source")),
        MergeSpecError,
        c0("update", "not_matched_by_source")
        + " `set` for 'v' (concat(t.v, s.v)) may reference only the target",
    ),
    case(
        "nmbs-set-star",
        clauses(update("*", when="not_matched_by_source")),
        MergeSpecError,
        c0("update", "not_matched_by_source") + ": `set: *` needs a source row",
        problems=None,
    ),
    case(
        "star-source-lacks-column",
        {"source": "{db}_src_nocol"},
        MergeSpecError,
        c0() + ": `set: *` needs source column 'n'",
        problems=2,  # the insert * too
    ),
    case(
        "source-reserved-prefix",
        {"source": "{db}_src_reserved"},
        MergeSpecError,
        "source column(s) __rowmerge_x use the reserved prefix __rowmerge_",
    ),
    case(
        "value-struct-into-int",
        clauses(update({"n": "named_struct('a', s.n)"})),
        MergeSpecError,
        c0()
        + ": value (named_struct('a', s.n)) of type struct<a:int> cannot be cast to column 'n' of type int",
    ),
    case(
        "value-array-into-int",
        clauses(insert({"id": "s.id", "n": "array(s.n)"})),
        MergeSpecError,
        "value (array(s.n)) of type array<int> cannot be cast to column 'n' of type int",
    ),
    case(
        "star-struct-into-int",
        {"source": "{db}_src_struct"},
        MergeSpecError,
        c0() + ": value (s.n) of type struct<a:int> cannot be cast to column 'n' of type int",
        problems=2,  # the insert * too
    ),
    case(
        "set-sum",
        clauses(update({"n": "sum(s.n)"})),
        MergeSpecError,
        c0() + " `set` for 'n' (sum(s.n)) uses an aggregate",
    ),
    case(
        "values-count",
        clauses(insert({"id": "s.id", "n": "count(*)"})),
        MergeSpecError,
        "`values` for 'n' (count(*)) uses an aggregate function",
    ),
    case(
        "condition-sum",
        clauses(update("*", "sum(s.n) > 0")),
        MergeSpecError,
        c0() + " condition (sum(s.n) > 0) uses an aggregate function",
    ),
    case(
        "set-window",
        clauses(update({"n": "count(*) over ()"})),
        MergeSpecError,
        c0() + " `set` for 'n' (count(*) over ()) uses a window function",
    ),
    case(
        "values-row-number",
        clauses(insert({"id": "s.id", "n": "row_number() over (order by s.id)"})),
        MergeSpecError,
        "`values` for 'n' (row_number() over (order by s.id)) uses a window function",
    ),
    case(
        "condition-window",
        clauses(update("*", "row_number() over (order by s.id) = 1")),
        MergeSpecError,
        c0() + " condition (row_number() over (order by s.id) = 1) uses a window function",
    ),
    case(
        "set-explode",
        clauses(update({"n": "explode(array(1, 2))"})),
        MergeSpecError,
        c0() + " `set` for 'n' (explode(array(1, 2))) uses a generator",
    ),
    case(
        "condition-explode",
        clauses(update("*", "explode(array(true, false))")),
        MergeSpecError,
        c0() + " condition (explode(array(true, false))) uses a generator",
    ),
    case(
        "set-current-time",
        clauses(update({"v": "cast(current_time() as string)"})),
        MergeSpecError,
        c0() + " `set` for 'v' (cast(current_time() as string))",
        "current_time() would take a different value",
    ),
    case(
        "condition-current-time",
        clauses(update("*", "current_time is not null")),
        MergeSpecError,
        c0() + " condition (current_time is not null)",
        "current_time would take a different value",
    ),
    case(
        "on-current-time",
        {"on": "t.id = s.id and current_time() is not null"},
        MergeSpecError,
        "`on` (t.id = s.id and current_time() is not null)",
        "current_time() would take a different value",
    ),
    case(
        "condition-deep-parens",
        clauses(update("*", nested("s.n > 0", 3000))),
        MergeSpecError,
        "clauses[0] (when: matched): `condition` " + TOO_DEEP,
        max_s=2.0,
    ),
    case(
        "on-deep-parens",
        {"on": nested("t.id = s.id", 3000)},
        MergeSpecError,
        "`on` ((((",
        TOO_DEEP,
        max_s=2.0,
    ),
    case(
        "value-deep-parens",
        clauses(update({"n": nested("s.n", 3000)})),
        MergeSpecError,
        "clauses[0] (when: matched): `set` value for column 'n' " + TOO_DEEP,
        max_s=2.0,
    ),
    case(
        "condition-200k",
        clauses(update("*", WIDE)),
        MergeSpecError,
        "clauses[0] (when: matched): `condition` is 200",
        TOO_LONG,
        max_s=2.0,
    ),
    case(
        "on-200k", {"on": "t.id = s.id and (" + WIDE + ")"}, MergeSpecError, "`on` (t.id", TOO_LONG, max_s=2.0
    ),
    case(
        "value-200k",
        clauses(insert({"id": "s.id", "v": "'" + "x" * 200_000 + "'"})),
        MergeSpecError,
        "clauses[0] (when: not_matched): `values` value for column 'v' is 200002",
        TOO_LONG,
        max_s=2.0,
    ),
    case(
        "condition-not-chain",
        clauses(update("*", "not " * 20_000 + "true")),
        MergeSpecError,
        c0() + " condition (not not",
        max_s=10.0,
    ),
    case(
        "value-plus-chain",
        clauses(update({"n": "+".join(["1"] * 30_000)})),
        MergeSpecError,
        c0() + " `set` for 'n' (1+1+1",
        max_s=10.0,
    ),
    case(
        "on-not-chain",
        {"on": "not " * 20_000 + "t.id = s.id"},
        MergeSpecError,
        "`on` (not not",
        max_s=10.0,
    ),
    case(
        "value-ambiguous",
        clauses(update({"v": "v"})),
        MergeSpecError,
        c0() + " `set` for 'v' (v) cannot be resolved",
        "AMBIGUOUS_REFERENCE",
    ),
    case("value-nul-char", clauses(update({"v": "s.v\x00"})), MergeSpecError, c0() + " `set` for 'v' (s.v"),
    case(
        "condition-exists-subquery",
        clauses(update("*", "exists (select 1 from {db}.t x where x.id = s.id)")),
        MergeSpecError,
        c0() + " condition (exists (select 1",
    ),
    case(
        "on-unresolvable",
        {"on": "t.id = s.nope"},
        MergeSpecError,
        "`on` (t.id = s.nope) cannot be resolved",
        "nope",
    ),
    case("on-int-typed", {"on": "t.id + s.id"}, MergeSpecError, "`on` (t.id + s.id)", 'expected "BOOLEAN"'),
    case(
        "on-unknown-alias",
        {"on": "x.id = s.id"},
        MergeSpecError,
        "`on` (x.id = s.id) cannot be resolved",
        "x",
    ),
    case(
        "on-syntax",
        {"on": "t.id = = s.id"},
        MergeSpecError,
        "`on` (t.id = = s.id) cannot be resolved",
        "Syntax",
    ),
    case("on-aggregate", {"on": "t.id = max(s.id)"}, MergeSpecError, "`on` (t.id = max(s.id))"),
]

TABLES = [
    case(
        "target-missing-table",
        {"target": "{db}.nope"},
        UnsupportedTableError,
        "MERGE target {db}.nope does not exist",
    ),
    case(
        "target-missing-db",
        {"target": "{db}_nodb.t"},
        UnsupportedTableError,
        "MERGE target {db}_nodb.t does not",
    ),
    case(
        "target-view",
        {"target": "{db}.vw"},
        UnsupportedTableError,
        "MERGE target {db}.vw is a view",
        setup=_view,
    ),
    case(
        "target-temp-view", {"target": "{db}_src"}, UnsupportedTableError, "MERGE target {db}_src is a view"
    ),
    case(
        "target-csv",
        {"target": "{db}.csv_t", "change_data_feed": None},
        UnsupportedTableError,
        "MERGE target {db}.csv_t has format 'csv'",
        watch=("csv_t",),
        setup=_csv,
    ),
    case(
        "cdf-plain-table",
        {"change_data_feed": {"table": "{db}.plain"}},
        UnsupportedTableError,
        "change_data_feed table {db}.plain " + NOT_FEED,
        watch=(*SHARED, "plain"),
        setup=_plain,
    ),
    case(
        "cdf-is-target",
        {"change_data_feed": {"table": "{db}.t"}},
        UnsupportedTableError,
        "change_data_feed table {db}.t " + NOT_FEED,
    ),
    case(
        "cdf-is-view",
        {"change_data_feed": {"table": "{db}.vw"}},
        UnsupportedTableError,
        "change_data_feed table {db}.vw " + NOT_FEED,
        setup=_view,
    ),
    case(
        "cdf-missing-db",
        {"change_data_feed": {"table": "{db}_nodb.changes"}},
        UnsupportedTableError,
        "change_data_feed table {db}_nodb.changes",
    ),
    case(
        "target-change-type-column",
        {
            "target": "{db}.ct",
            "change_data_feed": {"table": "{db}.ct__changes"},
            **clauses(update({"v": "s.v"})),
        },
        MergeSpecError,
        "change_data_feed: the target has a column named _change_type",
        watch=("ct", "ct__changes"),
        setup=_change_type_target,
    ),
    case(
        "cdf-missing-catalog",
        {"change_data_feed": {"table": "nocat.{db}.changes"}},
        UnsupportedTableError,
        "change_data_feed table nocat.{db}.changes",
    ),
    case(
        "source-duplicate-column",
        {"source": "{db}_src_twice"},
        MergeSpecError,
        "source",
        "N",
        problems=None,
    ),
    case(
        "source-streaming",
        {"source": "{db}_src_stream"},
        UnsupportedTableError,
        "MERGE source {db}_src_stream",
        setup=_stream,
    ),
    case(
        "source-missing-view",
        {"source": "{db}_nope"},
        UnsupportedTableError,
        "MERGE source {db}_nope cannot be read",
        "`source`",
    ),
]

RUNTIME = [
    case(
        "cast-update",
        {"source": "{db}_src_badcast"},
        CastError,
        "MERGE into {db}.t failed",
        "column 'n' (int), value 'abc'",
    ),
    case(
        "cardinality-update",
        {"source": "{db}_src_dup"},
        CardinalityViolation,
        "1 target row(s) matched more than one source row",
        "id=1 matched 2 source rows",
    ),
]

# -- nested types (issue 28) -------------------------------------------------------------------


def _nested_target(spark: SparkSession, db: str) -> None:
    """{db}.nt: a target with struct, array, map and VARIANT columns (created once, version 0
    recorded, so a rejected merge leaves its folder as it was)."""
    if spark.catalog.tableExists(f"{db}.nt"):
        return
    spark.sql(
        f"CREATE TABLE {db}.nt (id BIGINT, n INT, k STRUCT<a: INT, b: STRING>, arr ARRAY<INT>, "
        "m MAP<STRING, INT>, mi MAP<INT, STRING>, ks ARRAY<STRUCT<a: INT, b: STRING>>, j VARIANT) "
        "USING parquet"
    )
    spark.sql(
        f"INSERT INTO {db}.nt VALUES (1, 1, named_struct('a', 1, 'b', 'x'), array(1), map('a', 1), "
        """map(1, 'x'), array(named_struct('a', 1, 'b', 'x')), parse_json('{"a": 1}'))"""
    )
    start_history(spark, f"{db}.nt")


# The nested target, without a change feed ({db}.t__changes records {db}.t as its target).
NT = {"target": "{db}.nt", "change_data_feed": None}
NT_WATCH = (*SHARED, "nt")
STRUCT_K = "column 'k' has struct fields (a, b) but the value has"

NESTED_TYPES = [
    case(
        "nested-struct-field-missing",
        {**NT, **clauses(update({"k": "named_struct('a', s.n)"}))},
        MergeSpecError,
        c0() + f": value (named_struct('a', s.n)): {STRUCT_K} (a): missing b",
        "Struct fields are matched by name, in any order",
        watch=NT_WATCH,
        setup=_nested_target,
    ),
    case(
        "nested-struct-field-extra",
        {**NT, **clauses(update({"k": "named_struct('a', s.n, 'b', s.v, 'c', 1)"}))},
        MergeSpecError,
        f"{STRUCT_K} (a, b, c): not in the column: c",
        watch=NT_WATCH,
        setup=_nested_target,
    ),
    case(
        "nested-struct-field-renamed",
        {**NT, **clauses(update({"k": "named_struct('a', s.n, 'x', s.v)"}))},
        MergeSpecError,
        f"{STRUCT_K} (a, x): missing b; not in the column: x",
        watch=NT_WATCH,
        setup=_nested_target,
    ),
    case(
        "nested-struct-field-case-twins",
        {**NT, **clauses(update({"k": "named_struct('a', 1, 'b', 'x', 'B', 'y')"}))},
        MergeSpecError,
        f"{STRUCT_K} (a, b, B): names that differ only in letter case: B, b",
        watch=NT_WATCH,
        setup=_nested_target,
    ),
    case(
        "nested-struct-in-array-fields",
        {**NT, **clauses(insert({"id": "s.id", "ks": "array(named_struct('a', s.n, 'c', s.v))"}))},
        MergeSpecError,
        "clauses[0] (when: not_matched, action: insert): value (array(named_struct('a', s.n, 'c', s.v))): "
        "column 'ks' element has struct fields (a, b) but the value has (a, c): missing b; not in the "
        "column: c",
        watch=NT_WATCH,
        setup=_nested_target,
    ),
    case(
        "nested-star-struct-other-fields",
        {**NT, "source": "{db}_src_nested", "clauses": [UPDATE_ALL]},
        MergeSpecError,
        c0() + f": value (s.k): {STRUCT_K} (a, c): missing b; not in the column: c",
        problems=2,  # and `j`, which the source lacks
        watch=NT_WATCH,
        setup=_nested_target,
    ),
    case(
        "nested-struct-field-uncastable",
        {**NT, **clauses(update({"k": "named_struct('b', 'x', 'a', array(1))"}))},
        MergeSpecError,
        "cannot be cast to column 'k' of type struct<a:int,b:string> (column 'k' field 'a': array<int> "
        "cannot be cast to int)",
        watch=NT_WATCH,
        setup=_nested_target,
    ),
    case(
        "nested-cast-struct-field",
        {**NT, **clauses(update({"k": "named_struct('a', s.v, 'b', 'q')"}))},
        CastError,
        "MERGE into {db}.nt failed",
        "column 'k' field 'a' (int), value 'A' from named_struct('a', s.v, 'b', 'q')",
        watch=NT_WATCH,
        setup=_nested_target,
    ),
    case(
        "nested-cast-array-element",
        {**NT, **clauses(update({"arr": "array(s.v)"}))},
        CastError,
        "column 'arr' element (int), value 'A' from array(s.v)",
        watch=NT_WATCH,
        setup=_nested_target,
    ),
    case(
        "nested-cast-map-value",
        {**NT, **clauses(update({"m": "map('x', s.v)"}))},
        CastError,
        "column 'm' value (int), value 'A' from map('x', s.v)",
        watch=NT_WATCH,
        setup=_nested_target,
    ),
    case(
        "nested-cast-map-key",
        {**NT, **clauses(update({"mi": "map(s.v, 'x')"}))},
        CastError,
        "column 'mi' key (int), value 'A' from map(s.v, 'x')",
        watch=NT_WATCH,
        setup=_nested_target,
    ),
    case(
        "nested-cast-map-keys-collide",
        {**NT, **clauses(update({"mi": "map('1', 'x', '01', 'y')"}))},
        CastError,
        "column 'mi' key (int): two keys cast to the same key, value '{1 -> x, 01 -> y}'",
        watch=NT_WATCH,
        setup=_nested_target,
    ),
    case(
        "nested-cast-struct-in-array-insert",
        {**NT, **clauses(insert({"id": "s.id", "ks": "array(named_struct('b', s.v, 'a', s.v))"}))},
        CastError,
        "column 'ks' element field 'a' (int), value 'D'",
        watch=NT_WATCH,
        setup=_nested_target,
    ),
    case(
        "variant-compared-in-on",
        {**NT, "on": "t.id = s.id AND t.j = parse_json('1')"},
        MergeSpecError,
        "`on` (t.id = s.id AND t.j = parse_json('1')) cannot be resolved",
        "VARIANT",
        watch=NT_WATCH,
        setup=_nested_target,
    ),
    case(
        "variant-compared-in-condition",
        {**NT, **clauses(update({"n": "s.n"}, "t.j <> parse_json('1')"))},
        MergeSpecError,
        c0() + " condition (t.j <> parse_json('1')) cannot be resolved",
        "VARIANT",
        watch=NT_WATCH,
        setup=_nested_target,
    ),
    case(
        "variant-that-is-no-int",
        {**NT, **clauses(update({"n": "parse_json('\"x\"')"}))},
        CastError,
        "column 'n' (int), value 'x' from parse_json('\"x\"')",
        watch=NT_WATCH,
        setup=_nested_target,
    ),
    case(
        "variant-into-struct-field",
        {**NT, **clauses(update({"k": "named_struct('a', parse_json('[1]'), 'b', 'x')"}))},
        CastError,
        "column 'k' field 'a' (int), value '[1]'",
        watch=NT_WATCH,
        setup=_nested_target,
    ),
    case(
        "variant-from-map-with-int-keys",
        {**NT, **clauses(update({"j": "map(1, s.v)"}))},
        MergeSpecError,
        c0() + ": value (map(1, s.v)) of type map<int,string> cannot be cast to column 'j' of type variant",
        watch=NT_WATCH,
        setup=_nested_target,
    ),
]


# -- places, foreign files and tampered journals (issue 28) -------------------------------------
#
# Each setup builds its own tables in the module's database (named after the case); the case
# watches their folders. External locations live inside the database's folder, so a watched
# name is a folder there either way.


def _db_folder(spark: SparkSession, db: str) -> str:
    described = spark.sql(f"DESCRIBE DATABASE EXTENDED {db}").collect()
    return urlparse(next(r[1] for r in described if r[0] == "Location")).path


def _external(
    spark: SparkSession, db: str, name: str, folder: str, ddl: str = "id BIGINT, v STRING, n INT"
) -> None:
    spark.sql(f"CREATE TABLE {db}.{name} ({ddl}) USING parquet LOCATION '{_db_folder(spark, db)}/{folder}'")


def _journaled(spark: SparkSession, db: str, name: str, changes: str | None = None) -> str:
    """A managed table ``name`` like the shared target, version 0 written; its folder."""
    create_table(spark, f"{db}.{name}", DDL, TARGET_FILES)
    start_history(spark, f"{db}.{name}", "CREATE TABLE", f"{db}.{changes}" if changes else None)
    return os.path.join(_db_folder(spark, db), name)


def _log(folder: str) -> str:
    return os.path.join(folder, "_rowmerge_log")


def _put(path: str, data: bytes | str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(data.encode() if isinstance(data, str) else data)


def _entry_json(version: int, table: str, **extra: Any) -> str:
    base: dict[str, Any] = {
        "format": 1,
        "version": version,
        "table": table,
        "operation": "MERGE",
        "timestamp": "2026-01-01T00:00:00.000+00:00",
        "txn": "1-abc",
        "read_version": version - 1,
        "added": [],
        "removed": [],
        "partitions": [],
        "new_columns": [],
        "cdf": None,
        "metrics": {},
    }
    return json.dumps({**base, **extra})


def _shared_wide_first(spark: SparkSession, db: str) -> None:
    _external(spark, db, "sh_wide", "sh_loc", "id BIGINT, v STRING, n INT, w STRING")
    spark.sql(f"INSERT INTO {db}.sh_wide VALUES (1, 'a', 1, 'keep')")
    start_history(spark, f"{db}.sh_wide")
    _external(spark, db, "sh_narrow", "sh_loc")


def _shared_narrow_first(spark: SparkSession, db: str) -> None:
    _external(spark, db, "sn_narrow", "sn_loc")
    spark.sql(f"INSERT INTO {db}.sn_narrow VALUES (1, 'a', 1)")
    start_history(spark, f"{db}.sn_narrow")
    _external(spark, db, "sn_wide", "sn_loc", "id BIGINT, v STRING, n INT, w STRING")


def _shared_same_columns(spark: SparkSession, db: str) -> None:
    """Even with the same columns, a second name on one folder is another table."""
    _external(spark, db, "ss_one", "ss_loc")
    spark.sql(f"INSERT INTO {db}.ss_one VALUES (1, 'a', 1)")
    start_history(spark, f"{db}.ss_one")
    _external(spark, db, "ss_two", "ss_loc")


def _nested_in(depth: int) -> Callable[[SparkSession, str], None]:
    def setup(spark: SparkSession, db: str) -> None:
        outer = f"ni{depth}_out"
        _external(spark, db, f"ni{depth}_outer", outer)
        spark.sql(f"INSERT INTO {db}.ni{depth}_outer VALUES (1, 'o', 1)")
        start_history(spark, f"{db}.ni{depth}_outer")
        inner = "/".join([outer, *["deeper"] * (depth - 1), "inner"])
        _external(spark, db, f"ni{depth}_inner", inner)
        spark.sql(f"INSERT INTO {db}.ni{depth}_inner VALUES (1, 'i', 1)")

    return setup


def _holding(depth: int) -> Callable[[SparkSession, str], None]:
    def setup(spark: SparkSession, db: str) -> None:
        outer = f"nh{depth}_out"
        inner = "/".join([outer, *["deeper"] * (depth - 1), "inner"])
        _external(spark, db, f"nh{depth}_inner", inner)
        spark.sql(f"INSERT INTO {db}.nh{depth}_inner VALUES (1, 'i', 1)")
        start_history(spark, f"{db}.nh{depth}_inner")
        _external(spark, db, f"nh{depth}_outer", outer)
        spark.sql(f"INSERT INTO {db}.nh{depth}_outer VALUES (1, 'o', 1)")

    return setup


def _renamed(spark: SparkSession, db: str) -> None:
    _journaled(spark, db, "rn_old")
    spark.sql(f"ALTER TABLE {db}.rn_old RENAME TO {db}.rn_new")


def _journal_names_other(spark: SparkSession, db: str) -> None:
    """The newest entry names another table (a journal copied along with the files)."""
    folder = _journaled(spark, db, "jo")
    _put(os.path.join(_log(folder), f"{1:020d}.json"), _entry_json(1, f"{db}.elsewhere", operation="FENCE"))
    _put(os.path.join(_log(folder), f"{1:020d}.applied"), "")


def _feed_taken(spark: SparkSession, db: str) -> None:
    _journaled(spark, db, "ft_owner", changes="ft_changes")
    _journaled(spark, db, "ft_other")


def _feed_owner_file(table: str, content: str) -> Callable[[SparkSession, str], None]:
    def setup(spark: SparkSession, db: str) -> None:
        _journaled(spark, db, table, changes=f"{table}_changes")
        _put(os.path.join(_db_folder(spark, db), f"{table}_changes", "_rowmerge_feed.json"), content)

    return setup


def _stray(table: str, rel: str, data: bytes | str, fmt: str = "parquet", journal: bool = True) -> Any:
    def setup(spark: SparkSession, db: str) -> None:
        partitioned = rel.startswith("n=")
        create_table(
            spark, f"{db}.{table}", DDL, TARGET_FILES, partition_by=["n"] if partitioned else [], fmt=fmt
        )
        if journal:
            start_history(spark, f"{db}.{table}")
        _put(os.path.join(_db_folder(spark, db), table, rel), data)

    return setup


def _orc_bytes(spark: SparkSession) -> bytes:
    """A real ORC file (what another engine may leave in a Parquet table's folder)."""
    folder = os.path.join(_db_folder(spark, "default"), f"orc_{uuid.uuid4().hex}")
    spark.createDataFrame([(1, "a", 1)], DDL).coalesce(1).write.orc(folder)
    [name] = [n for n in os.listdir(folder) if n.endswith(".orc")]
    with open(os.path.join(folder, name), "rb") as fh:
        data = fh.read()
    import shutil

    shutil.rmtree(folder)
    return data


def _stray_orc(spark: SparkSession, db: str) -> None:
    _stray("sx_orc", "part-99999-from-hive.orc", _orc_bytes(spark))(spark, db)


def _tampered(table: str, files: Callable[[str, str], dict[str, bytes | str]]) -> Any:
    """A journaled table ``table`` whose log folder gets ``files(folder, db)`` (name -> content)."""

    def setup(spark: SparkSession, db: str) -> None:
        folder = _journaled(spark, db, table)
        for name, data in files(folder, db).items():
            _put(os.path.join(folder, name), data)

    return setup


MAX_V = 2**63 - 1
LOG = "_rowmerge_log/"


def _v(version: int, suffix: str = ".json") -> str:
    return f"{LOG}{version:020d}{suffix}"


def _linked_out(spark: SparkSession, db: str) -> None:
    """An unapplied entry removing a file in `sub`, a link to a folder outside the table."""
    folder = _journaled(spark, db, "sl")
    outside = os.path.join(_db_folder(spark, db), "sl_outside")
    _put(os.path.join(outside, "part-0.parquet"), b"precious")
    os.symlink(outside, os.path.join(folder, "sub"))
    removed = [{"path": f"file:{folder}/sub/part-0.parquet", "size": 8, "rows": 1}]
    _put(os.path.join(folder, _v(1)), _entry_json(1, f"{db}.sl", removed=removed))


def _linked_staging(spark: SparkSession, db: str) -> None:
    folder = _journaled(spark, db, "sg")
    outside = os.path.join(_db_folder(spark, db), "sg_outside")
    _put(os.path.join(outside, "part-9.parquet"), b"not ours")
    staging = os.path.join(_log(folder), "staging", "1-abc")
    os.makedirs(staging)
    os.symlink(outside, os.path.join(staging, "data"))
    added = [
        {"staged": f"file:{staging}/data/part-9.parquet", "path": f"file:{folder}/part-9.parquet", "size": 8}
    ]
    _put(os.path.join(folder, _v(1)), _entry_json(1, f"{db}.sg", added=added))


def _symlinked_partition(spark: SparkSession, db: str) -> None:
    """Not tampering: a partition folder that is a link out of the table."""
    create_table(spark, f"{db}.sp", DDL, [[(1, "a", 1)], [(2, "b", 2)]], partition_by=["n"])
    folder = os.path.join(_db_folder(spark, db), "sp")
    outside = os.path.join(_db_folder(spark, db), "sp_outside")
    os.rename(os.path.join(folder, "n=1"), outside)
    os.symlink(outside, os.path.join(folder, "n=1"))
    start_history(spark, f"{db}.sp")


TAMPERED = "cannot be trusted: version 1's entry"
STRAY = "named like journal files that rowmerge did not write"
UNREADABLE = "is in a table's folder but cannot be read as"
OTHER_JOURNAL = "cannot use the journal in"


PLACES_FILES_JOURNALS = [
    # two tables on one folder, tables inside tables, renames
    case(
        "shared-location-narrow-into-wide",
        {"target": "{db}.sh_narrow", "change_data_feed": None},
        UnsupportedTableError,
        "{db}.sh_narrow " + OTHER_JOURNAL,
        "it belongs to table {db}.sh_wide",
        watch=("sh_loc",),
        setup=_shared_wide_first,
    ),
    case(
        "shared-location-wide-into-narrow",
        {"target": "{db}.sn_wide", "change_data_feed": None, **clauses(update({"v": "s.v"}))},
        UnsupportedTableError,
        "it belongs to table {db}.sn_narrow",
        watch=("sn_loc",),
        setup=_shared_narrow_first,
    ),
    case(
        "shared-location-same-columns",
        {"target": "{db}.ss_two", "change_data_feed": None},
        UnsupportedTableError,
        "it belongs to table {db}.ss_one",
        "Give each table its own location",
        watch=("ss_loc",),
        setup=_shared_same_columns,
    ),
    case(
        "nested-inside-journaled",
        {"target": "{db}.ni1_inner", "change_data_feed": None},
        UnsupportedTableError,
        "{db}.ni1_inner is stored at",
        "inside the folder of another table that has a journal",
        watch=("ni1_out",),
        setup=_nested_in(1),
    ),
    case(
        "nested-inside-journaled-deep",
        {"target": "{db}.ni3_inner", "change_data_feed": None},
        UnsupportedTableError,
        "ni3_out/deeper/deeper/inner, inside the folder of another table",
        watch=("ni3_out",),
        setup=_nested_in(3),
    ),
    case(
        "nested-holding-journaled",
        {"target": "{db}.nh1_outer", "change_data_feed": None},
        UnsupportedTableError,
        "holds another table's journal",
        "nh1_out/inner/_rowmerge_log",
        watch=("nh1_out",),
        setup=_holding(1),
    ),
    case(
        "nested-holding-journaled-deep",
        {"target": "{db}.nh3_outer", "change_data_feed": None},
        UnsupportedTableError,
        "holds another table's journal",
        "nh3_out/deeper/deeper/inner/_rowmerge_log",
        watch=("nh3_out",),
        setup=_holding(3),
    ),
    case(
        "renamed-table-not-rebound",
        {"target": "{db}.rn_new", "change_data_feed": None},
        UnsupportedTableError,
        "it belongs to table {db}.rn_old",
        "rowmerge_rebind --args '{relation: {db}.rn_new}'",
        watch=("rn_new",),
        setup=_renamed,
    ),
    case(
        "journal-names-another-table",
        {"target": "{db}.jo", "change_data_feed": None},
        UnsupportedTableError,
        "it belongs to table {db}.elsewhere (version 1 says so)",
        watch=("jo",),
        setup=_journal_names_other,
    ),
    case(
        "cdf-of-another-target",
        {"target": "{db}.ft_other", "change_data_feed": {"table": "{db}.ft_changes"}},
        UnsupportedTableError,
        "change_data_feed table {db}.ft_changes already holds the change feed of {db}.ft_owner",
        watch=("ft_other", "ft_changes", "ft_owner"),
        setup=_feed_taken,
    ),
    case(
        "cdf-owner-not-json",
        {"target": "{db}.fo_a", "change_data_feed": {"table": "{db}.fo_a_changes"}},
        UnsupportedTableError,
        "_rowmerge_feed.json, which records the table whose change feed it holds, is damaged",
        "it is not JSON",
        watch=("fo_a", "fo_a_changes"),
        setup=_feed_owner_file("fo_a", "{oops"),
    ),
    case(
        "cdf-owner-no-target",
        {"target": "{db}.fo_b", "change_data_feed": {"table": "{db}.fo_b_changes"}},
        UnsupportedTableError,
        "is damaged (it does not name a target)",
        watch=("fo_b", "fo_b_changes"),
        setup=_feed_owner_file("fo_b", '{"format": 1, "target": ""}'),
    ),
    case(
        "symlinked-partition-folder",
        {"target": "{db}.sp", "source": "{db}_src_part", "change_data_feed": None},
        UnsupportedTableError,
        "MERGE into {db}.sp refused: it would replace or add",
        "sp_outside, outside",
        watch=("sp", "sp_outside"),
        setup=_symlinked_partition,
    ),
    # foreign files in the table's folder
    case(
        "stray-csv",
        {"target": "{db}.sx_csv", "change_data_feed": None},
        UnreadableFileError,
        "sx_csv/notes.csv " + UNREADABLE + " parquet data",
        watch=("sx_csv",),
        setup=_stray("sx_csv", "notes.csv", "a,b\n1,2\n"),
    ),
    case(
        "stray-csv-first-merge",
        {"target": "{db}.sx_first", "change_data_feed": None},
        UnreadableFileError,
        "sx_first/notes.csv " + UNREADABLE,
        watch=("sx_first",),
        setup=_stray("sx_first", "notes.csv", "a,b\n1,2\n", journal=False),
    ),
    case(
        "stray-in-partition-folder",
        {"target": "{db}.sx_part", "source": "{db}_src_part", "change_data_feed": None},
        UnreadableFileError,
        "sx_part/n=1/README " + UNREADABLE,
        watch=("sx_part",),
        setup=_stray("sx_part", "n=1/README", "see the wiki"),
    ),
    case(
        "stray-truncated-parquet",
        {"target": "{db}.sx_trunc", "change_data_feed": None},
        UnreadableFileError,
        "sx_trunc/part-99999-copy.snappy.parquet " + UNREADABLE,
        watch=("sx_trunc",),
        setup=_stray("sx_trunc", "part-99999-copy.snappy.parquet", b"PAR1\x00\x00\x00"),
    ),
    case(
        "stray-json-data",
        {"target": "{db}.sx_json", "change_data_feed": None},
        UnreadableFileError,
        "sx_json/part-00000.json " + UNREADABLE,
        watch=("sx_json",),
        setup=_stray("sx_json", "part-00000.json", '{"id": 1}\n'),
    ),
    case(
        "stray-orc-in-parquet-table",
        {"target": "{db}.sx_orc", "change_data_feed": None},
        UnreadableFileError,
        "sx_orc/part-99999-from-hive.orc " + UNREADABLE,
        watch=("sx_orc",),
        setup=_stray_orc,
    ),
    case(
        "stray-csv-in-orc-table",
        {"target": "{db}.sx_orct", "change_data_feed": None},
        UnreadableFileError,
        "sx_orct/notes.csv " + UNREADABLE + " orc data",
        watch=("sx_orct",),
        setup=_stray("sx_orct", "notes.csv", "a,b\n1,2\n", fmt="orc"),
    ),
    # tampered journals
    case(
        "journal-fence-at-largest-version",
        {"target": "{db}.jm", "change_data_feed": None},
        JournalError,
        "{db}.jm cannot take another version: its journal's newest version is " + str(MAX_V),
        watch=("jm",),
        setup=_tampered(
            "jm",
            lambda folder, db: {
                _v(MAX_V): _entry_json(MAX_V, f"{db}.jm", operation="FENCE", reason="x"),
                _v(MAX_V, ".applied"): "",
            },
        ),
    ),
    case(
        "journal-entry-past-largest-version",
        {"target": "{db}.jp", "change_data_feed": None},
        JournalError,
        STRAY,
        f"{MAX_V + 1:020d}.json",
        watch=("jp",),
        setup=_tampered("jp", lambda folder, db: {_v(MAX_V + 1): _entry_json(1, f"{db}.jp")}),
    ),
    case(
        "journal-stray-short-entry",
        {"target": "{db}.js", "change_data_feed": None},
        JournalError,
        STRAY + ": 7.json in",
        watch=("js",),
        setup=_tampered("js", lambda folder, db: {LOG + "7.json": "{}"}),
    ),
    case(
        "journal-stray-short-applied",
        {"target": "{db}.ja", "change_data_feed": None},
        JournalError,
        STRAY + ": 1.applied in",
        watch=("ja",),
        setup=_tampered("ja", lambda folder, db: {LOG + "1.applied": ""}),
    ),
    case(
        "journal-stray-21-digits",
        {"target": "{db}.j21", "change_data_feed": None},
        JournalError,
        STRAY + ": 000000000000000000001.json",
        watch=("j21",),
        setup=_tampered("j21", lambda folder, db: {LOG + "000000000000000000001.json": _entry_json(1, "x")}),
    ),
    case(
        "journal-stray-checkpoint-name",
        {"target": "{db}.jc", "change_data_feed": None},
        JournalError,
        STRAY + ": 20.stats.json",
        watch=("jc",),
        setup=_tampered("jc", lambda folder, db: {LOG + "20.stats.json": "{}"}),
    ),
    case(
        "journal-entry-not-json",
        {"target": "{db}.jn", "change_data_feed": None},
        JournalError,
        TAMPERED,
        "is not valid JSON",
        watch=("jn",),
        setup=_tampered("jn", lambda folder, db: {_v(1): "{not json"}),
    ),
    case(
        "journal-entry-version-mismatch",
        {"target": "{db}.jv", "change_data_feed": None},
        JournalError,
        TAMPERED,
        "says it is version 2, but its file is version 1",
        watch=("jv",),
        setup=_tampered("jv", lambda folder, db: {_v(1): _entry_json(2, f"{db}.jv")}),
    ),
    case(
        "journal-entry-newer-format",
        {"target": "{db}.jf", "change_data_feed": None},
        JournalError,
        "cannot be read by this release",
        "entry format 5",
        watch=("jf",),
        setup=_tampered("jf", lambda folder, db: {_v(1): _entry_json(1, f"{db}.jf", format=5)}),
    ),
    case(
        "journal-removes-file-of-another-folder",
        {"target": "{db}.jr", "change_data_feed": None},
        JournalError,
        TAMPERED,
        "which is not a data file of the table",
        watch=("jr", "t"),
        setup=_tampered(
            "jr",
            lambda folder, db: {
                _v(1): _entry_json(
                    1,
                    f"{db}.jr",
                    removed=[{"path": f"file:{os.path.dirname(folder)}/t/part-00000.parquet", "size": 1}],
                )
            },
        ),
    ),
    case(
        "journal-adds-with-dot-dot",
        {"target": "{db}.jd", "change_data_feed": None},
        JournalError,
        TAMPERED,
        "adds added[0]",
        watch=("jd", "t"),
        setup=_tampered(
            "jd",
            lambda folder, db: {
                _v(1): _entry_json(
                    1,
                    f"{db}.jd",
                    added=[
                        {
                            "staged": f"file:{folder}/_rowmerge_log/staging/1-abc/data/x.parquet",
                            "path": f"file:{folder}/../t/x.parquet",
                            "size": 1,
                        }
                    ],
                )
            },
        ),
    ),
    case(
        "journal-unapplied-entry-deletes-through-symlink",
        {"target": "{db}.sl", "change_data_feed": None},
        JournalError,
        "Cannot finish version 1 of {db}.sl: it would move or delete 1 file(s) outside",
        "sl/sub/part-0.parquet",
        watch=("sl", "sl_outside"),
        setup=_linked_out,
    ),
    case(
        "journal-staging-through-symlink",
        {"target": "{db}.sg", "change_data_feed": None},
        JournalError,
        "outside their table's folder, through a symbolic link",
        "staging/1-abc/data/part-9.parquet",
        watch=("sg", "sg_outside"),
        setup=_linked_staging,
    ),
]

# Slow cases first, so that pytest-xdist spreads them over its workers.
CATALOGUE = (
    RUNTIME + PLACES_FILES_JOURNALS + TABLES + EXPRESSIONS + SPEC_SHAPE + NAMES + FLAGS + CLAUSE_SHAPES
)


# -- machinery -----------------------------------------------------------------------------------


def fill(value: Any, db: str) -> Any:
    """``value`` with "{db}" replaced in every string (keys included), containers rebuilt."""
    if isinstance(value, str):
        return value.replace("{db}", db)
    if isinstance(value, Mapping):
        return {fill(k, db): fill(v, db) for k, v in value.items()}
    if isinstance(value, list):
        return [fill(v, db) for v in value]
    return value


def build_spec(item: BadInput, db: str) -> Any:
    if isinstance(item.spec, Whole):
        return fill(item.spec.spec, db)
    spec = dict(BASE)
    for key, value in item.spec.items():
        if value is DROP:
            spec.pop(key, None)
        else:
            spec[key] = value
    return fill(spec, db)


def folder_state(root: str) -> dict[str, str] | None:
    """Every file under ``root`` (relative path -> sha256), except the writer lease; None if no folder."""
    if not os.path.exists(root):
        return None
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        if rel == "_rowmerge_log":
            dirnames[:] = [d for d in dirnames if d != "lock"]
        for name in filenames:
            with open(os.path.join(dirpath, name), "rb") as fh:
                out[os.path.join(rel, name)] = hashlib.sha256(fh.read()).hexdigest()
    return out


def changed_files(
    before: dict[str, dict[str, str] | None], after: dict[str, dict[str, str] | None]
) -> dict[str, list[str]]:
    """Per folder: the files added, removed or rewritten."""
    out = {}
    for table, old in before.items():
        new, old = after[table] or {}, old or {}
        diff = sorted(p for p in set(old) | set(new) if old.get(p) != new.get(p))
        if diff or (before[table] is None) != (after[table] is None):
            out[table] = diff or ["(folder created or removed)"]
    return out


@dataclass(frozen=True)
class Env:
    db: str
    folder: str  # the database's folder; a managed table's folder is <folder>/<table>

    def states(self, tables: tuple[str, ...]) -> dict[str, dict[str, str] | None]:
        return {t: folder_state(os.path.join(self.folder, t)) for t in tables}


@pytest.fixture(scope="module")
def env(spark: SparkSession) -> Iterator[Env]:
    """A database with the shared target {db}.t (version 0, empty change table) and the sources."""
    db = "bad_" + uuid.uuid4().hex[:10]
    spark.sql(f"CREATE DATABASE {db}")
    described = spark.sql(f"DESCRIBE DATABASE EXTENDED {db}").collect()
    location = next(r[1] for r in described if r[0] == "Location")
    create_table(spark, f"{db}.t", DDL, TARGET_FILES)
    start_history(spark, f"{db}.t", "CREATE TABLE", f"{db}.t__changes")
    source_view(spark, f"{db}_src", DDL, SOURCE_ROWS)
    for suffix, (ddl, data) in EXTRA_SOURCES.items():
        source_view(spark, f"{db}_src_{suffix}", ddl, data)
    yield Env(db, urlparse(location).path)
    # SHOW TABLES, not spark.catalog.listTables(): Spark cannot decode the latter's rows when
    # it evaluates interpreted (tests/conftest.py: TEST_SQL_CONF)
    for row in spark.sql("SHOW TABLES").collect():
        if row.isTemporary and row.tableName.startswith(db):
            spark.catalog.dropTempView(row.tableName)
    spark.sql(f"DROP DATABASE IF EXISTS {db} CASCADE")


# -- inputs accepted on purpose ------------------------------------------------------------------


def _changes(spark: SparkSession, name: str) -> list[tuple[Any, ...]]:
    """Every change row of the feed table ``name`` without its timestamp, sorted."""
    spark.catalog.refreshTable(name)
    data = [tuple(r) for r in spark.table(name).drop("_commit_timestamp").collect()]
    return sorted(data, key=lambda r: tuple((v is not None, str(v)) for v in r))


def test_run_merge_accepts_boolean_conditions_literal_values_and_keys_in_odd_case(
    spark: SparkSession, env: Env
) -> None:
    t = f"{env.db}.acc_case"
    create_table(spark, t, DDL, [[(1, "a", 1), (2, "b", 2), (3, "c", 3)]])
    start_history(spark, t, "CREATE TABLE", f"{t}__changes")
    src = source_view(spark, f"{env.db}_acc_case_src", DDL, [(1, "A", 10), (4, "D", 40)])
    run_merge(
        spark,
        {
            "target": t.upper(),
            "source": src.upper(),
            "target_alias": "Tgt",
            "source_alias": "SRC",
            "on": "tgt.ID = Src.Id",
            "clauses": [
                {"when": " Matched ", "condition": False, "action": "DELETE"},
                {
                    "when": "MATCHED",
                    "condition": True,
                    "action": "Update",
                    "set": {"V": "SRC.V", "N": "src.n + TGT.N"},
                },
                {
                    "when": "NOT MATCHED BY TARGET",
                    "condition": True,
                    "action": "Insert",
                    "values": {"ID": "Src.ID", "v": True, "N": 0},
                },
                {"when": "Not Matched By Source", "condition": "TGT.n > 2", "action": "Delete"},
                {"when": "not matched by source", "condition": True, "action": "UPDATE", "set": {"n": -1}},
            ],
            "change_data_feed": {"table": f"{t}__CHANGES".upper()},
        },
    )
    assert rows(spark, t) == [(1, "A", 11), (2, "b", -1), (4, "true", 0)]
    assert _changes(spark, f"{t}__changes") == [
        (1, "A", 11, "update_postimage", 1),
        (1, "a", 1, "update_preimage", 1),
        (2, "b", -1, "update_postimage", 1),
        (2, "b", 2, "update_preimage", 1),
        (3, "c", 3, "delete", 1),
        (4, "true", 0, "insert", 1),
    ]


def test_run_merge_accepts_back_quoted_names_and_map_columns(spark: SparkSession, env: Env) -> None:
    """Reserved words as table names; a temp view and columns with a space, a dot and a back-quote."""
    t, changes = f"{env.db}.`select`", f"{env.db}.`from`"
    spark.sql(
        f"CREATE TABLE {t} (id BIGINT, `my col` STRING, `a.b` INT, `x``y` MAP<STRING, INT>) USING parquet"
    )
    spark.sql(f"INSERT INTO {t} VALUES (1, 'one', 1, map('k', 1, 'j', 2)), (2, 'two', 2, map('k', 2))")
    start_history(spark, t, "CREATE TABLE", changes)
    src = f"`{env.db} odd src-1`"
    ddl = "id long, `my col` string, `a.b` int, `x``y` map<string,int>"
    # Row 1 is the same row with its map's keys in another order: the update changes nothing.
    data = [(1, "one", 1, {"j": 2, "k": 1}), (2, "zwei", 2, {"k": 3}), (3, "drei", 3, {})]
    spark.createDataFrame(data, ddl).createOrReplaceTempView(src)
    result = run_merge(
        spark,
        {
            "target": t,
            "source": src,
            "target_alias": "t",
            "source_alias": "s",
            "on": "t.id = s.id",
            "clauses": [
                update({"my col": "s.`my col`", "a.b": "s.`a.b` * t.`a.b` / t.`a.b`", "x`y": "s.`x``y`"}),
                INSERT_ALL,
            ],
            "change_data_feed": {"table": changes},
        },
    )
    assert rows(spark, t) == [(1, "one", 1, {"k": 1, "j": 2}), (2, "zwei", 2, {"k": 3}), (3, "drei", 3, {})]
    assert (result.metrics["numTargetRowsUpdated"], result.metrics["numTargetRowsInserted"]) == (1, 1)
    assert _changes(spark, changes) == [
        (2, "two", 2, {"k": 2}, "update_preimage", 1),
        (2, "zwei", 2, {"k": 3}, "update_postimage", 1),
        (3, "drei", 3, {}, "insert", 1),
    ]


# -- rejections ----------------------------------------------------------------------------------


def violations(item: BadInput, db: str, error: Exception, elapsed: float) -> list[str]:
    """What is wrong with how ``run_merge`` rejected ``item`` (empty: rejected as it should be)."""
    out = []
    if type(error) is not item.raises:
        out.append(f"raised {type(error).__module__}.{type(error).__name__}, not {item.raises.__name__}")
    fragments = [fill(f, db) for f in item.fragments]
    messages = error.problems if isinstance(error, MergeSpecError) else [str(error)]
    if not any(all(f in m for f in fragments) for m in messages):
        out.append(f"no message contains all of {fragments}")
    if isinstance(error, MergeSpecError) and item.problems is not None and len(messages) != item.problems:
        out.append(f"{len(messages)} problems, expected {item.problems}")
    too_long = [len(m) for m in messages if len(m) > MAX_MESSAGE]
    if too_long:
        out.append(f"message(s) of {too_long} characters (at most {MAX_MESSAGE})")
    if item.max_s is not None and elapsed > item.max_s:
        out.append(f"rejected after {elapsed:.1f} s (at most {item.max_s} s)")
    return out


@pytest.mark.parametrize("item", CATALOGUE)
def test_run_merge_rejects_bad_input_and_changes_nothing(
    spark: SparkSession, env: Env, item: BadInput
) -> None:
    if item.setup is not None:
        item.setup(spark, env.db)
    spec = build_spec(item, env.db)
    before = env.states(item.watch)
    started = time.monotonic()
    try:
        run_merge(spark, spec)
    except Exception as exc:
        error: Exception = exc
    else:
        pytest.fail(f"{item.id}: run_merge accepted the input")
    elapsed = time.monotonic() - started
    wrong = violations(item, env.db, error, elapsed)
    after = env.states(item.watch)
    if after != before:
        wrong.append(f"files changed: {changed_files(before, after)}")
    shown = [m[:600] for m in (error.problems if isinstance(error, MergeSpecError) else [str(error)])]
    assert not wrong, {"violations": wrong, "messages": shown}


def test_catalogue_has_at_least_160_distinct_cases() -> None:
    ids = [p.values[0].id for p in CATALOGUE]
    assert len(ids) == len(set(ids))
    assert len(ids) >= 160
