"""Random small merges for differential testing: :func:`generate` turns a seed into a :class:`Case`.

Tables are tiny (0-7 rows) over small value domains, so duplicate keys, NULL keys, new keys,
no-op updates and rows that move partitions all happen often. Every expression is typed and
written in the common subset of Spark SQL and DuckDB SQL (see :class:`~.cases.Sql`); values
stay small, so no arithmetic overflows and no cast fails on either side.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from .cases import Case, Clause, Sql, sql

VALUE_TYPES = ["INT", "BIGINT", "DECIMAL(10,2)", "STRING", "DATE", "TIMESTAMP", "BOOLEAN"]
KEY_TYPES = ["INT", "BIGINT", "STRING", "DATE"]
PARTITION_TYPES = ["INT", "STRING"]
STRINGS = ["a", "b", "B", "ab", "x", ""]
KEY_STRINGS = ["a", "b", "c"]
DAY0 = dt.date(2024, 1, 1)
TS0 = dt.datetime(2024, 1, 1, 0, 0, 0)
NUMERIC = {"INT", "BIGINT"}


def _family(t: str) -> str:
    return "INTEGER" if t in NUMERIC else t


def random_value(rng: random.Random, typ: str, null_p: float = 0.15, key: bool = False) -> Any:
    if rng.random() < null_p:
        return None
    if typ in NUMERIC:
        return rng.randint(1, 4) if key else rng.randint(-3, 9)
    if typ == "DECIMAL(10,2)":
        return Decimal(rng.randint(-500, 500)) / 100
    if typ == "STRING":
        return rng.choice(KEY_STRINGS if key else STRINGS)
    if typ == "DATE":
        return DAY0 + dt.timedelta(days=rng.randint(0, 3 if key else 5))
    if typ == "TIMESTAMP":
        return TS0 + dt.timedelta(hours=rng.randint(0, 72), seconds=rng.choice([0, 0, 1, 30]))
    if typ == "BOOLEAN":
        return rng.random() < 0.5
    raise ValueError(typ)


def literal(rng: random.Random, typ: str) -> Sql:
    v = random_value(rng, typ, null_p=0.1)
    if v is None:
        return sql(f"CAST(NULL AS {typ})")
    if typ in NUMERIC:
        return sql(str(v))
    if typ == "DECIMAL(10,2)":
        return sql(f"CAST({v} AS DECIMAL(10,2))")
    if typ == "STRING":
        return sql(f"'{v}'")
    if typ == "DATE":
        return sql(f"DATE '{v.isoformat()}'")
    if typ == "TIMESTAMP":
        return sql(f"TIMESTAMP '{v.isoformat(sep=' ')}'")
    return sql("true" if v else "false")


class Scope:
    """The columns an expression may read: ``t.*`` and/or ``s.*``, by type."""

    def __init__(
        self,
        target: list[tuple[str, str]] | None,
        source: list[tuple[str, str]] | None,
    ) -> None:
        self.cols: list[tuple[str, str]] = []  # (qualified name, type)
        for alias, schema in (("t", target), ("s", source)):
            for c, t in schema or []:
                self.cols.append((f"{alias}.{c}", t))

    def of(self, typ: str) -> list[str]:
        return [c for c, t in self.cols if _family(t) == _family(typ)]


def _wrap(fmt: str, *args: Sql) -> Sql:
    return Sql(fmt.format(*(a.spark for a in args)), fmt.format(*(a.duck for a in args)))


def value_expr(rng: random.Random, typ: str, scope: Scope, depth: int = 2) -> Sql:
    """A typed value expression over ``scope``."""
    cols = scope.of(typ)
    r = rng.random()
    if depth <= 0 or r < 0.45:
        if cols and rng.random() < 0.75:
            return sql(rng.choice(cols))
        return literal(rng, typ)

    def sub() -> Sql:
        return value_expr(rng, typ, scope, depth - 1)

    choices: list[Callable[[], Sql]] = [
        lambda: _wrap("coalesce({}, {})", sub(), sub()),
        lambda: _wrap("CASE WHEN {} THEN {} ELSE {} END", condition(rng, scope, depth - 1), sub(), sub()),
    ]
    if typ in NUMERIC:
        choices += [lambda: _wrap("({} + {})", sub(), sub()), lambda: _wrap("({} - {})", sub(), sub())]
        choices += [lambda: _wrap("abs({})", sub())]
    elif typ == "DECIMAL(10,2)":
        choices += [lambda: _wrap("({} + {})", sub(), sub()), lambda: _wrap("({} - {})", sub(), sub())]
    elif typ == "STRING":
        choices += [lambda: _wrap("({} || {})", sub(), sub()), lambda: _wrap("upper({})", sub())]
        choices += [lambda: _wrap("lower({})", sub())]
    elif typ == "DATE":
        n = rng.randint(-2, 2)
        choices += [lambda: (lambda e: Sql(f"date_add({e.spark}, {n})", f"({e.duck} + {n})"))(sub())]
    elif typ == "TIMESTAMP":
        choices += [lambda: _wrap("({} + INTERVAL 1 DAY)", sub())]
    elif typ == "BOOLEAN":
        return condition(rng, scope, depth - 1)
    return rng.choice(choices)()


def condition(rng: random.Random, scope: Scope, depth: int = 2) -> Sql:
    """A boolean expression over ``scope``: comparisons, NULL tests, <=>, AND / OR / NOT."""
    r = rng.random()
    if depth > 0 and r < 0.3:
        a, b = condition(rng, scope, depth - 1), condition(rng, scope, depth - 1)
        return _wrap("({} AND {})" if rng.random() < 0.5 else "({} OR {})", a, b)
    if depth > 0 and r < 0.4:
        return _wrap("(NOT {})", condition(rng, scope, depth - 1))
    if not scope.cols:
        return sql(rng.choice(["true", "false"]))
    col, typ = rng.choice(scope.cols)
    if typ == "BOOLEAN" and rng.random() < 0.4:
        return sql(col)
    r = rng.random()
    if r < 0.2:
        return sql(f"({col} IS {'NOT ' if rng.random() < 0.5 else ''}NULL)")
    other = value_expr(rng, typ, scope, depth=1 if depth > 0 else 0)
    if r < 0.3:
        return Sql(f"({col} <=> {other.spark})", f"({col} IS NOT DISTINCT FROM {other.duck})")
    op = rng.choice(["=", "<>", "<", "<=", ">", ">="] if typ != "BOOLEAN" else ["=", "<>"])
    return Sql(f"({col} {op} {other.spark})", f"({col} {op} {other.duck})")


def _rows(
    rng: random.Random,
    schema: list[tuple[str, str]],
    keys: list[str],
    n: int,
    unique: bool,
) -> list:
    out, seen = [], set()
    for _ in range(n * 3):
        if len(out) == n:
            break
        row = tuple(random_value(rng, t, key=c in keys, null_p=0.12 if c in keys else 0.2) for c, t in schema)
        k = tuple(v for (c, _), v in zip(schema, row, strict=True) if c in keys)
        if unique and k in seen:
            continue
        seen.add(k)
        out.append(row)
    return out


def generate(rng: random.Random, name: str = "case") -> Case:
    """One random merge."""
    nkeys = 1 if rng.random() < 0.65 else 2
    keys = [f"k{i + 1}" for i in range(nkeys)]
    schema = [(k, rng.choice(KEY_TYPES)) for k in keys]
    values = rng.sample(VALUE_TYPES, rng.randint(1, 4))
    schema += [(f"c_{t.split('(')[0].lower()}", t) for t in values]
    partition_by: list[str] = []
    if rng.random() < 0.35:
        schema.append(("p", rng.choice(PARTITION_TYPES)))
        partition_by = ["p"]

    # Source: same columns, shuffled; sometimes one value column missing or one extra column.
    source_schema = list(schema)
    value_cols = [c for c, _ in schema if c not in keys]
    if value_cols and rng.random() < 0.15:
        drop = rng.choice(value_cols)
        source_schema = [(c, t) for c, t in source_schema if c != drop]
    if rng.random() < 0.3:
        source_schema.append(("x_new", rng.choice(VALUE_TYPES)))
    source_schema = [(c, "INT" if t == "BIGINT" and rng.random() < 0.3 else t) for c, t in source_schema]
    rng.shuffle(source_schema)

    unique = rng.random() < 0.5
    target_rows = _rows(rng, schema, keys, rng.randint(0, 7), unique)
    source_rows = _rows(rng, source_schema, keys, rng.randint(0, 6), unique)
    if source_rows and target_rows and rng.random() < 0.5:  # reuse target keys for more matches
        key_idx_t = [i for i, (c, _) in enumerate(schema) if c in keys]
        key_idx_s = {c: i for i, (c, _) in enumerate(source_schema)}
        for _ in range(rng.randint(1, 3)):
            tr = rng.choice(target_rows)
            si = rng.randrange(len(source_rows))
            row = list(source_rows[si])
            for i in key_idx_t:
                row[key_idx_s[schema[i][0]]] = tr[i]
            source_rows[si] = tuple(row)
    files: list[list[tuple[Any, ...]]] = [target_rows]
    if len(target_rows) > 2 and rng.random() < 0.3:
        cut = rng.randint(1, len(target_rows) - 1)
        files = [target_rows[:cut], target_rows[cut:]]

    # on: equality (or <=>) on every key, sometimes one more conjunct.
    parts = []
    for k in keys:
        if rng.random() < 0.15:
            parts.append(Sql(f"t.{k} <=> s.{k}", f"t.{k} IS NOT DISTINCT FROM s.{k}"))
        else:
            parts.append(sql(f"t.{k} = s.{k}"))
    tgt_scope, src_scope = Scope(schema, None), Scope(None, source_schema)
    both = Scope(schema, source_schema)
    if rng.random() < 0.2:
        parts.append(condition(rng, rng.choice([tgt_scope, src_scope, both]), depth=0))
    on = Sql(" AND ".join(p.spark for p in parts), " AND ".join(p.duck for p in parts))

    clauses = _clauses(rng, schema, tgt_scope, src_scope, both)
    return Case(
        name=name,
        target_schema=schema,
        target_files=files,
        source_schema=source_schema,
        source_rows=source_rows,
        on=on,
        clauses=clauses,
        partition_by=partition_by,
        skip_unchanged_updates=rng.random() < 0.6,
        schema_evolution=rng.random() < 0.3,
    )


def _clauses(
    rng: random.Random,
    schema: list[tuple[str, str]],
    tgt_scope: Scope,
    src_scope: Scope,
    both: Scope,
) -> list[Clause]:
    n = rng.randint(1, 5)
    kinds = [rng.choice(["matched", "matched", "not_matched", "not_matched_by_source"]) for _ in range(n)]
    out: list[Clause] = []
    for i, kind in enumerate(kinds):
        last_of_kind = kind not in kinds[i + 1 :]
        scope = {"matched": both, "not_matched": src_scope, "not_matched_by_source": tgt_scope}[kind]
        cond = None if (last_of_kind and rng.random() < 0.5) else condition(rng, scope)
        if kind == "not_matched":
            action = "insert"
        else:
            action = "delete" if rng.random() < 0.35 else "update"
        assign: str | dict[str, Sql] | None = None
        if action in ("update", "insert"):
            star_ok = kind != "not_matched_by_source"
            if star_ok and rng.random() < 0.45:
                assign = "*"
            else:
                cols = rng.sample(schema, rng.randint(1, min(3, len(schema))))
                assign = {c: value_expr(rng, t, scope) for c, t in cols}
        out.append(Clause(kind, action, cond, assign))
    return out
