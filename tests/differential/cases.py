"""A differential case: one merge described once, run by the engine (Spark) and by the oracle (DuckDB).

Expressions are :class:`Sql` pairs: the same expression written in Spark SQL and in DuckDB
SQL. The generator writes only the common subset of both dialects, so the two texts differ
only where the dialects do (``<=>`` is ``IS NOT DISTINCT FROM`` in DuckDB, ``date_add(d, n)``
is ``d + n``). Hand-written cases use :func:`sql` for text that is the same in both.

An :class:`Outcome` is what a merge produced, in a form both sides can be compared on: the
error kind (or None), the final rows and the change-feed rows, columns by name.
"""

from __future__ import annotations

import decimal
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

# Column types the generator uses, as Spark DDL; DuckDB spells STRING as VARCHAR.
SPARK_TO_DUCK = {
    "INT": "INTEGER",
    "BIGINT": "BIGINT",
    "DECIMAL(10,2)": "DECIMAL(10,2)",
    "STRING": "VARCHAR",
    "DATE": "DATE",
    "TIMESTAMP": "TIMESTAMP",
    "BOOLEAN": "BOOLEAN",
}

ALIASES = {"target_alias": "t", "source_alias": "s"}


@dataclass(frozen=True)
class Sql:
    """One expression in both dialects."""

    spark: str
    duck: str


def sql(text: str) -> Sql:
    """An expression written the same way in Spark SQL and DuckDB SQL."""
    return Sql(text, text)


@dataclass
class Clause:
    when: str  # matched | not_matched | not_matched_by_source
    action: str  # update | delete | insert
    condition: Sql | None = None
    assign: str | dict[str, Sql] | None = None  # "*" or column -> expression (update/insert)

    def spec(self) -> dict[str, Any]:
        out: dict[str, Any] = {"when": self.when, "action": self.action}
        if self.condition is not None:
            out["condition"] = self.condition.spark
        if self.action in ("update", "insert"):
            key = "set" if self.action == "update" else "values"
            assert self.assign is not None
            out[key] = (
                "*" if self.assign == "*" else {c: e.spark for c, e in self.assign.items()}  # type: ignore[union-attr]
            )
        return out


@dataclass
class Case:
    """Target (schema, files of rows, partition columns), source, `on` and clauses; names are lower case."""

    name: str
    target_schema: list[tuple[str, str]]
    target_files: list[list[tuple[Any, ...]]]
    source_schema: list[tuple[str, str]]
    source_rows: list[tuple[Any, ...]]
    on: Sql
    clauses: list[Clause]
    partition_by: list[str] = field(default_factory=list)
    skip_unchanged_updates: bool = True
    schema_evolution: bool = False

    @property
    def target_columns(self) -> list[str]:
        return [c for c, _ in self.target_schema]

    @property
    def source_columns(self) -> list[str]:
        return [c for c, _ in self.source_schema]

    @property
    def target_rows(self) -> list[tuple[Any, ...]]:
        return [r for f in self.target_files for r in f]

    def evolved_columns(self) -> list[tuple[str, str]]:
        """Source columns schema evolution would add (only if some clause uses ``*``)."""
        if not (self.schema_evolution and any(c.assign == "*" for c in self.clauses)):
            return []
        have = set(self.target_columns)
        return [(c, t) for c, t in self.source_schema if c not in have]

    def spec(self, target: str, source: str, changes: str) -> dict[str, Any]:
        return {
            "version": 1,
            "target": target,
            "source": source,
            **ALIASES,
            "on": self.on.spark,
            "clauses": [c.spec() for c in self.clauses],
            "skip_unchanged_updates": self.skip_unchanged_updates,
            "change_data_feed": {"table": changes},
            "schema_evolution": self.schema_evolution,
            # MERGE semantics as the oracle has them: an empty source with a NOT MATCHED BY
            # SOURCE delete empties the table (the guard refusing it is tested in test_guards).
            "allow_empty_source": True,
        }

    def to_python(self) -> str:
        """Python source rebuilding this case (with ``import datetime``, ``from decimal import Decimal``)."""
        return repr(self)


@dataclass
class Outcome:
    """What a merge produced: ``error`` (None, "cardinality", "spec") plus rows by column name."""

    error: str | None
    columns: list[str]
    rows: list[tuple[Any, ...]]
    changes: list[tuple[Any, ...]]  # row values + _change_type
    detail: str = ""  # the error text or the SQL that ran (for reproductions)

    def sorted(self) -> Outcome:
        return Outcome(self.error, self.columns, sort_rows(self.rows), sort_rows(self.changes), self.detail)


def canonical(value: Any) -> Any:
    """A value both sides represent alike: decimals without trailing zeros."""
    if isinstance(value, decimal.Decimal):
        return value.normalize()
    return value


def sort_rows(rows: Sequence[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Rows in a fixed order (NULL first), values canonical, so two multisets compare with ==."""
    data = [tuple(canonical(v) for v in r) for r in rows]
    return sorted(data, key=lambda r: tuple((v is not None, type(v).__name__, str(v)) for v in r))


def project(records: Sequence[dict[str, Any]], columns: Sequence[str]) -> list[tuple[Any, ...]]:
    """Dict rows (any column order, any letter case) as tuples in ``columns`` order."""
    out = []
    for rec in records:
        lower = {k.lower(): v for k, v in rec.items()}
        out.append(tuple(lower.get(c) for c in columns))
    return out
