"""The oracle: apply a :class:`Case` with DuckDB's ``MERGE INTO`` and derive what our engine must produce.

DuckDB (>= 1.4) implements SQL MERGE independently of Spark, so agreeing with it on random
merges is evidence that the engine's clause logic, NULL handling, `on` semantics and change
feed are right. Where DuckDB's MERGE is *defined* differently from ours, this module
translates explicitly instead of comparing blindly. Each difference, and where our rule comes
from:

1. ``*`` is positional in DuckDB (``UPDATE SET *`` / ``INSERT *`` pair columns by position);
   ours resolves by name, as Spark's and Delta's do (Spark's analyzer expands
   ``UpdateStarAction`` / ``InsertStarAction`` into one ``col = source.col`` assignment per
   target column, by name; Delta documents ``UPDATE SET *`` as ``SET col1 = source.col1, ...``
   for every target column). Translation: ``*`` becomes an explicit by-name assignment list;
   extra source columns are ignored. A target column missing from the source is an error
   (our ``MergeSpecError``) unless schema evolution is on; then ``update *`` leaves it
   unchanged and ``insert *`` writes NULL (Delta's schema evolution for MERGE).

2. Schema evolution: DuckDB's MERGE never adds columns. Ours (Delta's
   ``spark.databricks.delta.schema.autoMerge.enabled``) adds source-only columns when a clause
   uses ``*``. Translation: ``ALTER TABLE ... ADD COLUMN`` before the merge (so pre-images read
   NULL in them); and because our engine adds the columns as part of a commit, a merge that
   changes nothing writes no commit and adds no column, so the oracle drops them again when
   no change row results.

3. Cardinality. DuckDB raises only when a target row is *affected* by two source rows (a
   conditional clause that does not act on the duplicates is fine; an unconditional DELETE
   matched twice is an error). Ours is the Spark/Iceberg rule: Spark's row-level MERGE
   (``RewriteMergeIntoTable``, error ``MERGE_CARDINALITY_VIOLATION``), Iceberg's Spark MERGE
   and Delta's ``DELTA_MULTIPLE_SOURCE_ROW_MATCHING_TARGET_ROW_IN_MERGE`` all check, whenever
   there is a matched clause, that no target row is matched by two or more source rows,
   whether or not a clause acts on it; the one exception is a merge whose only matched clause
   is an unconditional DELETE (no ambiguity: the row is deleted once). Translation: the
   oracle counts matches per target row itself and predicts the error; for the lone
   unconditional DELETE with duplicate matches it runs the merge without that clause and
   deletes the matched target rows afterwards (both against the pre-merge table, so inserts
   and NOT MATCHED BY SOURCE clauses see the same matches).

4. Types. DuckDB casts an assigned value implicitly (and sometimes refuses); ours casts every
   value to the target column type (Spark's store-assignment rules for table writes).
   Translation: every assigned value is wrapped in ``CAST(... AS <target type>)``. The
   generator keeps values in range, so no cast fails on either side (failing casts are
   tested in tests/engine/test_schema_and_casts.py). DuckDB spells ``STRING`` ``VARCHAR``.

5. Dialect. The same expression is carried in both dialects (:class:`~.cases.Sql`): Spark's
   ``a <=> b`` is ``a IS NOT DISTINCT FROM b`` and ``date_add(d, n)`` is ``d + n`` in DuckDB.

6. Change feed. DuckDB has none; the oracle derives ours (Delta's CDF rules) by comparing the
   target before and after through a hidden row id: a removed id is one ``delete`` (once, even
   if matched twice), an id whose values changed (null-safe) is an ``update_preimage`` /
   ``update_postimage`` pair, a new row is an ``insert``, copied rows emit nothing. With
   ``skip_unchanged_updates`` off, every row DuckDB reports as updated (``RETURNING
   merge_action``) emits a pair even if no value changed, as in Delta.

7. Storage. A Hive-style partitioned table stores a STRING partition value ``''`` as its
   default partition (``__HIVE_DEFAULT_PARTITION__``), which every reader (Spark, Hive, Trino)
   reads back as NULL; Spark's own ``INSERT`` does the same. DuckDB's table keeps ``''``.
   Translation: ``''`` in a partition column becomes NULL in the target before the merge (the
   engine's target was written by Spark and reads NULL there), in the rows after it and in the
   change feed (the feed must show what readers of the table see).

Timestamps are naive (Spark session time zone UTC, DuckDB ``TIMESTAMP``).
"""

from __future__ import annotations

from typing import Any

import duckdb

from .cases import SPARK_TO_DUCK, Case, Clause, Outcome, Sql

RID = "__oracle_rid"


class OracleError(Exception):
    """DuckDB failed where the translation expects it to succeed: an oracle bug, not an engine one."""


def duck_type(spark_type: str) -> str:
    return SPARK_TO_DUCK[spark_type.upper()]


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def enforces_cardinality(clauses: list[Clause]) -> bool:
    """Spark/Iceberg rule: any matched clause, unless it is a lone unconditional delete."""
    matched = [c for c in clauses if c.when == "matched"]
    if not matched:
        return False
    return not (len(matched) == 1 and matched[0].action == "delete" and matched[0].condition is None)


def _missing_for_star(case: Case) -> list[str]:
    """Target columns a ``*`` clause needs from the source but the source lacks (error without evolution)."""
    if case.schema_evolution or not any(c.assign == "*" for c in case.clauses):
        return []
    have = set(case.source_columns)
    return [c for c in case.target_columns if c not in have]


def _assignments(case: Case, clause: Clause, types: dict[str, str]) -> dict[str, str]:
    """Column -> DuckDB expression (cast to the column type), ``*`` expanded by name."""
    if clause.assign == "*":
        src = set(case.source_columns)
        out = {}
        for col in types:
            if col in src:
                out[col] = f"s.{_q(col)}"
            elif clause.action == "insert":
                out[col] = "NULL"
            # update *: a column the source lacks (schema evolution) stays unchanged
        return {c: f"CAST({e} AS {duck_type(types[c])})" for c, e in out.items()}
    assert isinstance(clause.assign, dict)
    return {c: f"CAST(({e.duck}) AS {duck_type(types[c])})" for c, e in clause.assign.items()}


def _when(clause: Clause, case: Case, types: dict[str, str]) -> str:
    head = {
        "matched": "WHEN MATCHED",
        "not_matched": "WHEN NOT MATCHED BY TARGET",
        "not_matched_by_source": "WHEN NOT MATCHED BY SOURCE",
    }[clause.when]
    if clause.condition is not None:
        head += f" AND ({clause.condition.duck})"
    if clause.action == "delete":
        return f"{head} THEN DELETE"
    values = _assignments(case, clause, types)
    if clause.action == "update":
        if not values:  # update * that assigns nothing: acts, changes nothing
            values = {next(iter(types)): _q(next(iter(types)))}
        sets = ", ".join(f"{_q(c)} = {e}" for c, e in values.items())
        return f"{head} THEN UPDATE SET {sets}"
    cols = ", ".join(_q(c) for c in values)
    vals = ", ".join(values.values())
    return f"{head} THEN INSERT ({cols}) VALUES ({vals})"


def _fetch(con: duckdb.DuckDBPyConnection, columns: list[str]) -> list[tuple[Any, ...]]:
    cols = ", ".join(_q(c) for c in [RID, *columns])
    return con.execute(f"SELECT {cols} FROM tgt").fetchall()


def _hive_partition_values(rows: list[tuple[Any, ...]], part: list[int]) -> list[tuple[Any, ...]]:
    return [tuple(None if i in part and v == "" else v for i, v in enumerate(r)) for r in rows]


def merge_sql(case: Case, on: Sql, clauses: list[Clause], types: dict[str, str]) -> str:
    whens = "\n  ".join(_when(c, case, types) for c in clauses)
    head = f"MERGE INTO tgt AS t USING src AS s ON ({on.duck})"
    return f"{head}\n  {whens}\n  RETURNING merge_action, {_q(RID)}"


def apply(case: Case, con: duckdb.DuckDBPyConnection | None = None) -> Outcome:
    """Run ``case`` in DuckDB (a fresh in-memory database unless ``con`` is given)."""
    own = con is None
    con = con or duckdb.connect()
    try:
        return _apply(case, con)
    finally:
        if own:
            con.close()


def _apply(case: Case, con: duckdb.DuckDBPyConnection) -> Outcome:
    base_cols = case.target_columns
    part = [i for i, c in enumerate(base_cols) if c in case.partition_by]
    original = _hive_partition_values(case.target_rows, part)  # difference 7
    missing = _missing_for_star(case)
    if missing:
        return Outcome("spec", base_cols, original, [], f"`*` needs source column(s) {missing}")

    evolved = case.evolved_columns()
    types = dict(case.target_schema) | dict(evolved)
    columns = list(types)

    con.execute("DROP TABLE IF EXISTS tgt")
    con.execute("DROP TABLE IF EXISTS src")
    tdef = ", ".join(f"{_q(c)} {duck_type(t)}" for c, t in case.target_schema)
    con.execute(f"CREATE TABLE tgt ({_q(RID)} BIGINT, {tdef})")
    sdef = ", ".join(f"{_q(c)} {duck_type(t)}" for c, t in case.source_schema)
    con.execute(f"CREATE TABLE src ({sdef})")
    if original:
        marks = ", ".join("?" for _ in range(len(base_cols) + 1))
        con.executemany(f"INSERT INTO tgt VALUES ({marks})", [(i, *r) for i, r in enumerate(original, 1)])
    if case.source_rows:
        marks = ", ".join("?" for _ in case.source_columns)
        con.executemany(f"INSERT INTO src VALUES ({marks})", [tuple(r) for r in case.source_rows])
    for c, t in evolved:
        con.execute(f"ALTER TABLE tgt ADD COLUMN {_q(c)} {duck_type(t)}")

    dup_rows = con.execute(
        f"SELECT count(*) FROM (SELECT t.{_q(RID)} FROM tgt AS t JOIN src AS s ON ({case.on.duck}) "
        f"GROUP BY t.{_q(RID)} HAVING count(*) > 1)"
    ).fetchone()[0]
    if dup_rows and enforces_cardinality(case.clauses):
        return Outcome("cardinality", base_cols, original, [], f"{dup_rows} target row(s) matched 2+ rows")

    before = {r[0]: r[1:] for r in _fetch(con, columns)}
    clauses = list(case.clauses)
    delete_after = dup_rows > 0 and any(c.when == "matched" for c in clauses)
    if delete_after:  # difference 3: lone unconditional delete, some target row matched twice
        clauses = [c for c in clauses if c.when != "matched"]
        con.execute(
            f"CREATE OR REPLACE TEMP TABLE matched_ids AS SELECT DISTINCT t.{_q(RID)} AS id "
            f"FROM tgt AS t JOIN src AS s ON ({case.on.duck})"
        )
    statement = merge_sql(case, case.on, clauses, types) if clauses else ""
    updated: set[Any] = set()
    try:
        if clauses:
            for action, rid in con.execute(statement).fetchall():
                if action == "UPDATE":
                    updated.add(rid)
        if delete_after:
            con.execute(f"DELETE FROM tgt WHERE {_q(RID)} IN (SELECT id FROM matched_ids)")
            statement += "\n-- then: DELETE FROM tgt WHERE rid IN (target rows matched by the source)"
    except duckdb.Error as exc:
        raise OracleError(f"DuckDB rejected the translated merge: {exc}\n{statement}") from exc
    # Difference 7: a '' written to a partition column lands in the default partition (NULL),
    # before the change feed is derived, so a no-op there is a no-op here too.
    stored = [i + 1 for i, c in enumerate(columns) if c in case.partition_by]
    after_rows = _hive_partition_values(_fetch(con, columns), stored)

    changes: list[tuple[Any, ...]] = []
    after_ids = set()
    for rid, *vals in after_rows:
        if rid is None:
            changes.append((*vals, "insert"))
            continue
        after_ids.add(rid)
        old = before[rid]
        if tuple(vals) != old or (rid in updated and not case.skip_unchanged_updates):
            changes.append((*old, "update_preimage"))
            changes.append((*vals, "update_postimage"))
    for rid, old in before.items():
        if rid not in after_ids:
            changes.append((*old, "delete"))

    final = [tuple(r[1:]) for r in after_rows]
    if evolved and not changes:  # difference 2: no commit, no new column
        n = len(base_cols)
        return Outcome(None, base_cols, [r[:n] for r in final], [], statement)
    return Outcome(None, columns, final, changes, statement)
