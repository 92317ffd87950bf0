"""Run a :class:`Case` through the engine (real Spark tables) and compare with the oracle.

:func:`run_engine` creates the target (one Parquet file per listed file, per partition), a
source temp view, runs ``run_merge`` with the change feed on and reads back the table and its
feed. :func:`check` returns the differences from the oracle's outcome, and :func:`reproduction`
prints everything needed to replay a mismatch by hand.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import duckdb
from pyspark.sql import SparkSession

from dbt.adapters.rowmerge.merge import CardinalityViolation, MergeSpecError, run_merge

from . import oracle
from .cases import Case, Outcome, project, sort_rows

# Timestamps are naive on both sides: Python must convert them in UTC, as the session does.
os.environ["TZ"] = "UTC"
time.tzset()


def _ddl(schema: list[tuple[str, str]]) -> str:
    return ", ".join(f"`{c}` {t}" for c, t in schema)


def create_target(spark: SparkSession, case: Case, name: str) -> None:
    """The target with one data file per entry of ``case.target_files`` (per partition value)."""
    ddl = _ddl(case.target_schema)
    order = [c for c in case.target_columns if c not in case.partition_by] + case.partition_by
    for i, rows in enumerate(case.target_files):
        df = spark.createDataFrame(list(rows), ddl).coalesce(1)
        if i == 0:
            writer = df.write.format("parquet")
            if case.partition_by:
                writer = writer.partitionBy(*case.partition_by)
            writer.saveAsTable(name)
        else:
            df.select(*order).write.insertInto(name)


def run_engine(spark: SparkSession, case: Case, db: str, tag: str) -> Outcome:
    """Run ``case`` with the engine on fresh tables ``{db}.{tag}`` and read the result back."""
    target, source, changes = f"{db}.{tag}", f"{db}_{tag}_src", f"{db}.{tag}__changes"
    create_target(spark, case, target)
    spark.createDataFrame(list(case.source_rows), _ddl(case.source_schema)).createOrReplaceTempView(source)
    error, detail = None, ""
    try:
        run_merge(spark, case.spec(target, source, changes))
    except CardinalityViolation as exc:
        error, detail = "cardinality", str(exc)
    except MergeSpecError as exc:
        error, detail = "spec", str(exc)
    except Exception as exc:  # anything else is a mismatch, shown with its type
        error, detail = f"{type(exc).__name__}", str(exc)[:2000]
    spark.catalog.refreshTable(target)
    table = spark.table(target)
    columns = [f.name.lower() for f in table.schema.fields]
    rows = [r.asDict() for r in table.collect()]
    feed: list[dict[str, Any]] = []
    if spark.catalog.tableExists(changes):
        spark.catalog.refreshTable(changes)
        feed = [r.asDict() for r in spark.table(changes).collect()]
    spark.catalog.dropTempView(source)
    ordered = _column_order(case, columns)
    change_rows = [(*project([r], ordered)[0], r["_change_type"]) for r in feed]
    versions = sorted({r["_commit_version"] for r in feed})
    if versions not in ([], [1]):
        detail += f"\nchange rows carry _commit_version {versions}, expected only 1"
        error = error or "bad_commit_version"
    return Outcome(error, ordered, project(rows, ordered), change_rows, detail)


def _column_order(case: Case, columns: list[str]) -> list[str]:
    """The engine's columns in the oracle's order: target columns as declared, then evolved ones."""
    declared = [c for c in case.target_columns if c in columns]
    return declared + [c for c in columns if c not in declared]


def compare(expected: Outcome, actual: Outcome) -> list[str]:
    """Differences between the oracle's and the engine's outcome (empty: they agree)."""
    problems = []
    if expected.error != actual.error:
        problems.append(f"outcome: oracle {expected.error or 'success'}, engine {actual.error or 'success'}")
    if expected.columns != actual.columns:
        problems.append(f"columns: oracle {expected.columns}, engine {actual.columns}")
    exp, act = expected.sorted(), actual.sorted()
    if exp.rows != act.rows:
        problems.append(_multiset_diff("rows", exp.rows, act.rows))
    if exp.changes != act.changes:
        problems.append(_multiset_diff("change feed", exp.changes, act.changes))
    return problems


def _multiset_diff(what: str, exp: list[tuple[Any, ...]], act: list[tuple[Any, ...]]) -> str:
    missing, extra = list(exp), []
    for r in act:
        if r in missing:
            missing.remove(r)
        else:
            extra.append(r)
    return f"{what}: only in oracle {missing}; only in engine {extra}"


def check(
    spark: SparkSession, case: Case, db: str, tag: str, con: duckdb.DuckDBPyConnection | None = None
) -> tuple[list[str], Outcome, Outcome]:
    """Run both sides; returns (differences, oracle outcome, engine outcome)."""
    expected = oracle.apply(case, con)
    actual = run_engine(spark, case, db, tag)
    return compare(expected, actual), expected, actual


def reproduction(case: Case, problems: list[str], expected: Outcome, actual: Outcome) -> str:
    """A self-contained description of a mismatch: spec, rows, both outcomes, a regression stub."""
    spec = case.spec("db.target", "source_view", "db.target__changes")
    lines = [
        f"=== MISMATCH {case.name}",
        *[f"  {p}" for p in problems],
        "spec (Spark SQL):",
        json.dumps(spec, indent=2),
        f"target schema: {case.target_schema}  partitioned by {case.partition_by}",
        f"target files: {case.target_files!r}",
        f"source schema: {case.source_schema}",
        f"source rows: {case.source_rows!r}",
        f"oracle SQL (DuckDB):\n{expected.detail}",
        f"oracle: {expected.error or 'success'} columns={expected.columns}",
        f"  rows={sort_rows(expected.rows)!r}",
        f"  changes={sort_rows(expected.changes)!r}",
        f"engine: {actual.error or 'success'} columns={actual.columns} {actual.detail[:500]}",
        f"  rows={sort_rows(actual.rows)!r}",
        f"  changes={sort_rows(actual.changes)!r}",
        "regression case (tests/differential/test_regressions.py):",
        case.to_python(),
    ]
    return "\n".join(lines)
