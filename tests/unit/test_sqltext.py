"""SQL text the engine builds: names, types, expression limits, pinned time functions (sqltext.py)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from pyspark.ml.linalg import VectorUDT
from pyspark.sql.types import (
    ArrayType,
    IntegerType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from dbt.adapters.rowmerge.merge.sqltext import (
    UnpinnableTime,
    check_path_safe,
    expression_problem,
    has_udt,
    lists_several,
    names_result,
    null_sql,
    operand,
    parse_name,
    pin_time,
    quote_name,
    sql_type,
)

AT = datetime(2026, 11, 23, 14, 5, 6, 789000, tzinfo=timezone.utc)
MICROS = 1795442706789000
TS = f"timestamp_micros({MICROS})"


@pytest.mark.parametrize(
    "text, parts",
    [
        ("db.t", ("db", "t")),
        ("  t ", ("t",)),
        ("spark_catalog.db.t_1", ("spark_catalog", "db", "t_1")),
        ("`db`.`my table`", ("db", "my table")),
        ("db.`x``y`", ("db", "x`y")),
        ("db.`a.b`", ("db", "a.b")),
        ("db.`c -- feed`", ("db", "c -- feed")),
    ],
)
def test_sqltext_parse_name_accepts_plain_and_back_quoted_parts(text, parts):
    assert parse_name(text) == parts


@pytest.mark.parametrize(
    "text, why",
    [
        ("db.t -- nightly", "unexpected ' -- nightly'"),
        ("db.t; drop table db.t", "unexpected '; drop table db.t'"),
        ("select * from t", "unexpected ' * from t'"),
        ("db.`t", "a back-quote is not closed"),
        ("db..t", "unexpected '.t'"),
        ("a.b.c.d", "it has 4 parts"),
        ("db.``", "it has an empty part"),
        ("", "it is empty"),
        ("db.t)", "unexpected ')'"),
    ],
)
def test_sqltext_parse_name_rejects_anything_else(text, why):
    with pytest.raises(ValueError, match=__import__("re").escape(why)):
        parse_name(text)


def test_sqltext_quote_name_round_trips():
    for parts in [("db", "t"), ("db", "x`y"), ("c", "d", "a b")]:
        assert parse_name(quote_name(parts)) == parts


def test_sqltext_path_safe_names():
    check_path_safe(("db", "orders__changes", "Überschrift"))
    for bad in ("../x", "a/b", "a b", ".", "a\\b"):
        with pytest.raises(ValueError, match="may hold only letters, digits and underscores"):
            check_path_safe(("db", bad))


def test_sqltext_sql_type_quotes_nested_names():
    dtype = StructType(
        [
            StructField("a b", IntegerType()),
            StructField(
                "c`d", ArrayType(MapType(StringType(), StructType([StructField("e,f", IntegerType())])))
            ),
        ]
    )
    assert sql_type(dtype) == "STRUCT<`a b`: int, `c``d`: ARRAY<MAP<string, STRUCT<`e,f`: int>>>>"


def test_sqltext_sql_type_spells_timestamps_whatever_the_session_reads_timestamp_as():
    # spark.sql.timestampType=TIMESTAMP_NTZ makes the bare word mean TIMESTAMP_NTZ.
    assert sql_type(TimestampType()) == "TIMESTAMP_LTZ"
    assert sql_type(TimestampNTZType()) == "timestamp_ntz"
    assert sql_type(ArrayType(TimestampType())) == "ARRAY<TIMESTAMP_LTZ>"


def test_sqltext_null_sql_has_no_spelling_for_user_defined_types():
    assert null_sql(IntegerType()) == "CAST(NULL AS int)"
    assert null_sql(MapType(StringType(), TimestampType())) == "CAST(NULL AS MAP<string, TIMESTAMP_LTZ>)"
    for dtype in (VectorUDT(), ArrayType(VectorUDT()), StructType([StructField("v", VectorUDT())])):
        assert has_udt(dtype) and null_sql(dtype) is None
    assert not has_udt(StructType([StructField("v", MapType(StringType(), ArrayType(IntegerType())))]))


@pytest.mark.parametrize(
    "text, named",
    [
        ("s.v AS v", True),
        ("s.v as `v w`", True),
        ("s.a + s.b AS (x, y)", True),
        ("CAST(s.v AS int)", False),
        ("try_cast(s.v AS int) + CAST(s.w AS bigint)", False),
        ("'x AS y'", False),  # inside a string
        ("`as`", False),  # a column named as
        ("s.v -- cast AS int", False),  # inside a comment
        ("s.has_as", False),
        ("s.as", False),  # a field named as
        ("s. /* x */ as + 1", False),
    ],
)
def test_sqltext_names_result_finds_as_outside_parentheses(text, named):
    assert names_result(text) is named


@pytest.mark.parametrize(
    "text, several",
    [
        ("s.a, s.b", True),
        ("s.v,", True),
        ("named_struct('a', s.a, 'b', s.b)", False),
        ("s.v IN (1, 2)", False),
        ("'a, b'", False),
        ("s.v -- a, b", False),
        ("transform(s.xs, (x, i) -> x + i)", False),
        ("s.raw::map<string,int>", False),  # a type's commas are its own
        ("s.p::struct<a:int,b:array<map<string,int>>>", False),
        ("s.p::struct<a:int,b:string>, s.q", True),
        ("s.a < s.b, s.c > 1", True),
    ],
)
def test_sqltext_lists_several_finds_a_comma_outside_parentheses(text, several):
    assert lists_several(text) is several


def test_sqltext_operand_ends_a_trailing_comment_before_the_closing_parenthesis():
    assert operand("s.v + 1") == "(s.v + 1)"
    assert operand("s.v -- the new value") == "(s.v -- the new value\n\n)"
    # A backslash before a line break carries Spark's comment on to the next line.
    assert operand("s.v -- in C:\\") == "(s.v -- in C:\\\n\n)"
    assert operand("s.v /* a */") == "(s.v /* a */)"


def test_sqltext_expression_limits():
    assert expression_problem("(" * 200 + "1" + ")" * 200) is None
    assert expression_problem("(" * 201 + "1" + ")" * 201) == "nests parentheses 201 deep (at most 200)"
    assert expression_problem("'" + "(" * 500 + "'") is None  # inside a string: not nesting
    assert expression_problem("x" * 100_001) == "is 100001 characters long (at most 100000)"


@pytest.mark.parametrize(
    "text, pinned",
    [
        ("current_timestamp()", TS),
        ("CURRENT_TIMESTAMP ( )", TS),
        ("now() - interval 1 day", f"{TS} - interval 1 day"),
        ("current_timestamp", TS),
        ("current_date", f"CAST({TS} AS DATE)"),
        ("curdate()", f"CAST({TS} AS DATE)"),
        ("localtimestamp()", f"CAST({TS} AS TIMESTAMP_NTZ)"),
        ("unix_timestamp()", "CAST(1795442706 AS BIGINT)"),
        ("unix_timestamp(t.at)", "unix_timestamp(t.at)"),
        ("'current_timestamp()'", "'current_timestamp()'"),
        ("`now`", "`now`"),
        ("t.now", "t.now"),
        ("s.current_date", "s.current_date"),
        ("now", "now"),  # a column: Spark has no bare now
        ("x -- current_timestamp()\n", "x -- current_timestamp()\n"),
        ("/* now() */ 1", "/* now() */ 1"),
        ("coalesce(t.at, current_timestamp())", f"coalesce(t.at, {TS})"),
        # Spark 4.2's qualified names of built-in functions are calls too; a field is not.
        ("t.at < builtin.now() - interval 1 day", f"t.at < {TS} - interval 1 day"),
        ("SYSTEM . BUILTIN . current_timestamp ( )", TS),
        ("`builtin`.current_date()", f"CAST({TS} AS DATE)"),
        ("x.builtin.now()", "x.builtin.now()"),
        ("a.system.builtin.now()", "a.system.builtin.now()"),
        ("builtin.current_date", "builtin.current_date"),
        ("x -- current_timestamp() \\\n now()\n", "x -- current_timestamp() \\\n now()\n"),
    ],
)
def test_sqltext_pin_time_replaces_only_real_calls(text, pinned):
    assert pin_time(text, AT) == pinned


def test_sqltext_pin_time_leaves_a_column_named_like_a_bare_function():
    assert pin_time("current_date > 1", AT, columns=["CURRENT_DATE"]) == "current_date > 1"
    assert pin_time("current_date() > 1", AT, columns=["current_date"]).startswith("CAST(")


@pytest.mark.parametrize(
    "text", ["current_time()", "current_time(3)", "current_time", "builtin.current_time()"]
)
def test_sqltext_pin_time_refuses_current_time(text):
    with pytest.raises(UnpinnableTime, match="would take a different value in each pass of the merge"):
        pin_time(text, AT)
