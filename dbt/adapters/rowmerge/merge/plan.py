"""Phase 4: resolve the validated spec against the schemas into Spark column expressions.

Decides, per clause, the condition and the new value of every output column (``*``
resolved by name, every value cast to the target type, struct fields matched by name at any
depth), and what the ``on`` condition lets the scan prune. Every problem that needs the
schemas — unknown columns, a not_matched clause reading the target, a non-boolean or
non-deterministic condition, an aggregate or window function, a subquery, struct fields
that do not match the column's, an impossible cast — is collected and raised once here,
before any data is read. What the resolved plan computes on each joined row (which clause
acts, the values it writes) is built by :mod:`.outputs`.

Scan, rewrite and change feed evaluate these expressions in separate Spark jobs, so every
expression must give the same value in each: non-deterministic ones are rejected, and
``current_timestamp()`` and its relatives are pinned to the merge's commit time. The source
itself may be non-deterministic (a column computed by ``uuid()``): it is materialized once,
so only the expressions of ``on`` and of the clauses are checked, not the plans they read.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    MapType,
    NullType,
    StructField,
    StructType,
)
from pyspark.sql.utils import AnalysisException

from . import plan_connect
from .errors import MergeSpecError, spark_reason
from .lean_columns import jvm_class
from .outputs import PREFIX, as_stored, char_limit, checked_cast, field_mismatches, match_fields, q
from .spec import Clause, Constraint, MergeSpec
from .sqltext import UnpinnableTime, operand, pin_time, shorten
from .table import TargetTable


@dataclass
class ResolvedClause:
    """A clause with Spark expressions: condition and new values (output column -> value)."""

    clause: Clause
    index: int  # position among clauses of the same kind
    condition: Column | None
    values: dict[str, Column] = field(default_factory=dict)  # missing column = keep old value
    # The same as SQL text where it is the text resolved (no cast, no partition-value rule
    # around it): :mod:`.outputs` builds one expression from text where a Column per part
    # would cost a py4j round trip each.
    condition_sql: str | None = None
    values_sql: dict[str, str] = field(default_factory=dict)

    @property
    def action(self) -> str:
        return self.clause.action


@dataclass
class MergePlan:
    """Every clause resolved against the schemas; what the later phases read (see :mod:`.outputs`)."""

    spec: MergeSpec
    target: TargetTable
    output_fields: list[StructField]  # data columns (+ evolved ones), then partition columns
    new_fields: list[StructField]  # added by schema evolution
    on: Column
    matched: list[ResolvedClause]
    not_matched: list[ResolvedClause]
    not_matched_by_source: list[ResolvedClause]
    key_pairs: list[tuple[str, str]]  # (target column, source expression) of `=` conjuncts in on
    target_only_conjuncts: list[str]  # conjuncts of on that read only the target
    on_target_columns: list[str]  # target columns `on` reads (for error samples)
    # (constraint, true where a written row violates it), over the output column names
    constraints: list[tuple[Constraint, Column]] = field(default_factory=list)
    # first run only: (clause kind, expression, Spark's reason) of expressions left unresolved,
    # because they read a column the model does not select yet (see build_plan)
    deferred: list[tuple[str, str, str]] = field(default_factory=list)
    # output expressions built once per merge and shared by its phases (see outputs._built)
    memo: dict[tuple[Any, ...], Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def ta(self) -> str:
        return self.spec.target_alias

    @property
    def sa(self) -> str:
        return self.spec.source_alias


def build_plan(
    spec: MergeSpec,
    target: TargetTable,
    source: DataFrame,
    target_df: DataFrame,
    commit_time: datetime,
    first_run: bool = False,
) -> MergePlan:
    """Resolve every clause against the schemas; raise MergeSpecError listing all problems.

    Time functions in every expression read ``commit_time`` (see the module doc); messages
    quote the expressions as the user wrote them. A broken ``on`` stops resolution at once
    (every clause resolves over its join); other problems are collected, then raised together.
    ``first_run``: the target is the empty table dbt is about to create (:mod:`.initial`);
    an expression that reads an unknown column is left for the merge and listed in
    ``MergePlan.deferred`` (the model may select that column only on incremental runs).
    """
    new_fields = _evolved_fields(spec, target, source)
    r = _Resolution(
        spec=spec,
        target=target,
        source=source,
        commit_time=commit_time,
        column_names=[*source.columns, *target_df.columns],
        output_fields=_output_fields(target, new_fields),
        case_sensitive=_case_sensitive(source.sparkSession),
    )
    _check_source_names(r)
    s_ctx, t_ctx = source.alias(spec.source_alias), target_df.alias(spec.target_alias)
    on_text, on_col, joined = _resolve_on(r, s_ctx, t_ctx)
    resolved = _resolve_clauses(r, _clause_scopes(spec, s_ctx, t_ctx, joined, first_run))
    on_info = analyze_on(
        source.sparkSession, on_text, spec.target_alias, spec.source_alias, target, s_ctx, t_ctx
    )
    constraints = _resolve_constraints(r)
    if r.problems:
        raise MergeSpecError(r.problems)
    return MergePlan(
        spec=spec,
        target=target,
        output_fields=r.output_fields,
        new_fields=new_fields,
        on=on_col,
        matched=resolved["matched"],
        not_matched=resolved["not_matched"],
        not_matched_by_source=resolved["not_matched_by_source"],
        key_pairs=on_info.key_pairs,
        target_only_conjuncts=on_info.target_only,
        on_target_columns=on_info.target_columns,
        constraints=constraints,
        deferred=r.deferred,
    )


# -- the steps of build_plan, in order ------------------------------------------------------


@dataclass
class _Resolution:
    """What every resolution step reads, and the problems found so far (in the order found)."""

    spec: MergeSpec
    target: TargetTable
    source: DataFrame
    commit_time: datetime
    column_names: list[str]  # source and target columns: a bare name that is a column is not a call
    output_fields: list[StructField]
    case_sensitive: bool = False  # spark.sql.caseSensitive: how names (struct fields too) match
    problems: list[str] = field(default_factory=list)
    deferred: list[tuple[str, str, str]] = field(default_factory=list)
    # (kind of clause, pinned text) -> column and type, for expressions checked in one batch
    checked: dict[tuple[str, str], tuple[Column, DataType]] = field(default_factory=dict)
    casts: list[_Cast] = field(default_factory=list)  # casts whose analysis is pending
    # id() of a resolved Column -> it and the SQL text it was built from (see ResolvedClause);
    # holding the Column keeps its id from being reused by another
    texts: dict[int, tuple[Column, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class _Cast:
    """A checked cast to analyse with the others of its frame (see :func:`_check_casts`);
    its problem, if Spark cannot cast it, goes at ``position`` of the problems."""

    frame: DataFrame
    checked: Column
    position: int
    problem: Callable[[], str]


@dataclass(frozen=True)
class _Scope:
    """Where the expressions of one kind of clause resolve.

    ``frame`` is the source, the target or their join; ``base_nodes`` its own plan nodes (an
    expression that adds an aggregate or window node is not row by row); ``hint`` names
    what the clause may read when that is one side only, and ``joined`` tells a reference to
    the other side from an unknown column. ``defer_unknown``: an unknown column is not a
    problem yet (first run; see :func:`build_plan`).
    """

    frame: DataFrame
    base_nodes: list[str]
    hint: str | None
    joined: DataFrame
    defer_unknown: bool = False
    kind: str = ""  # matched, not_matched or not_matched_by_source


def _evolved_fields(spec: MergeSpec, target: TargetTable, source: DataFrame) -> list[StructField]:
    """Source columns the target lacks: added (nullable) with schema evolution, if a clause uses ``*``."""
    if not (spec.schema_evolution and any(c.star for c in spec.clauses)):
        return []
    tgt_lower = {f.name.lower() for f in target.schema.fields}
    return [
        StructField(f.name, f.dataType, True)
        for f in source.schema.fields
        if f.name.lower() not in tgt_lower and not f.name.lower().startswith(PREFIX)
    ]


def _output_fields(target: TargetTable, new_fields: list[StructField]) -> list[StructField]:
    """The columns a merge writes: data columns, evolved ones, then partition columns (file layout order)."""
    part_lower = {p.lower() for p in target.partition_columns}
    data_fields = [f for f in target.schema.fields if f.name.lower() not in part_lower]
    part_fields = [f for f in target.schema.fields if f.name.lower() in part_lower]
    return data_fields + new_fields + part_fields


def _check_source_names(r: _Resolution) -> None:
    """Source column names the merge cannot use: the engine's own prefix, and case twins under ``*``."""
    source = r.source
    reserved = [c for c in source.columns if c.lower().startswith(PREFIX)]
    if reserved:
        r.problems.append(f"source column(s) {', '.join(reserved)} use the reserved prefix {PREFIX}")
    by_lower: dict[str, list[str]] = {}
    for c in source.columns:
        by_lower.setdefault(c.lower(), []).append(c)
    twins = [names for names in by_lower.values() if len(names) > 1]
    if twins and not r.case_sensitive and any(c.star for c in r.spec.clauses):
        shown = "; ".join(", ".join(names) for names in twins)
        r.problems.append(
            f"the source has columns whose names differ only in letter case ({shown}); Spark matches "
            "names case-insensitively, so `*` cannot tell them apart. Rename them in the model SQL"
        )


def _pinned(r: _Resolution, text: str, what: str) -> str | None:
    """``text`` with its time functions pinned to the commit time, or None (problem recorded)."""
    try:
        return pin_time(text, r.commit_time, r.column_names)
    except UnpinnableTime as exc:
        r.problems.append(f"{what} ({shorten(text)}): {exc}")
        return None


def _resolve_on(r: _Resolution, s_ctx: DataFrame, t_ctx: DataFrame) -> tuple[str, Column, DataFrame]:
    """``on`` as pinned text, as a column, and the inner join it makes.

    It must resolve over both sides, be boolean and deterministic, and hold no subquery. If
    it cannot join (or holds a subquery), raise at once with the problems found so far.
    """
    on = r.spec.on
    on_text = _pinned(r, on, "`on`")
    if on_text is None:
        raise MergeSpecError(r.problems)
    try:
        on_col = F.expr(on_text)
        joined = s_ctx.join(t_ctx, on_col, "inner")
        joined.schema  # noqa: B018 -- analyses it now (Spark Connect analyses lazily)
        if not _deterministic_top(joined):
            r.problems.append(f"{r.spec.on_label} is non-deterministic; a merge condition must be repeatable")
    except Exception as exc:  # AnalysisException, or the parser giving up (py4j)
        if "NON_DETERMINISTIC" in str(exc):
            r.problems.append(f"{r.spec.on_label} is non-deterministic; a merge condition must be repeatable")
        else:
            r.problems.append(
                f"{r.spec.on_label} cannot be resolved: {_short(exc)}{_on_columns_hint(r, exc)}"
            )
        raise MergeSpecError(r.problems) from None
    if _top_has_subquery(joined):
        r.problems.append(
            f"{r.spec.on_label} uses a subquery; join the data in the model SQL and compare "
            "with that source column"
        )
        raise MergeSpecError(r.problems)
    return on_text, on_col, joined


def _clause_scopes(
    spec: MergeSpec, s_ctx: DataFrame, t_ctx: DataFrame, joined: DataFrame, first_run: bool
) -> dict[str, _Scope]:
    """Where each kind of clause resolves: matched over the join, the others over one side."""
    return {
        "matched": _scope(joined, None, joined, first_run, "matched"),
        "not_matched": _scope(
            s_ctx,
            f"the source ({spec.source_alias}); a not_matched row has no target row",
            joined,
            first_run,
            "not_matched",
        ),
        "not_matched_by_source": _scope(
            t_ctx,
            f"the target ({spec.target_alias}); such a row has no source row",
            joined,
            first_run,
            "not_matched_by_source",
        ),
    }


def _scope(
    frame: DataFrame, hint: str | None, joined: DataFrame, defer_unknown: bool = False, kind: str = ""
) -> _Scope:
    nodes = _plan_nodes(frame)
    return _Scope(frame, nodes, hint, joined, defer_unknown, kind)


def _resolve_clauses(r: _Resolution, scopes: dict[str, _Scope]) -> dict[str, list[ResolvedClause]]:
    """Every clause of the spec, in order, grouped by kind (matched, not_matched, not_matched_by_source).

    Spark analyses the expressions of each kind, and then the casts of their values, in one
    batch (a merge may have hundreds of clauses, and each analysis costs a round trip and a
    pass over the plan); only when a batch fails is each expression analysed alone, to name
    the ones at fault in the order of the spec.
    """
    for kind, scope in scopes.items():
        texts = []
        for c in r.spec.clauses:
            if c.when == kind:
                texts += [c.condition] if c.condition is not None else []
                texts += [text for _, text in c.assignments or ()]
        _check_batch(r, scope, texts)
    resolved: dict[str, list[ResolvedClause]] = {kind: [] for kind in scopes}
    for clause in r.spec.clauses:
        same_kind = resolved[clause.when]
        same_kind.append(_resolve_clause(r, clause, len(same_kind), scopes[clause.when]))
    _check_casts(r)
    return resolved


def _resolve_clause(r: _Resolution, clause: Clause, index: int, scope: _Scope) -> ResolvedClause:
    """One clause: its condition, then (update, insert) the values it writes."""
    rc = ResolvedClause(clause, index, _condition(r, clause, scope))
    if clause.action in ("update", "insert"):
        if clause.assignments is None:
            values = _star_values(r, clause, scope)
        else:
            values = _listed_values(r, clause, clause.assignments, scope)
        fields = {f.name: f for f in r.output_fields}
        parts = r.target.partition_columns
        rc.values = {name: as_stored(value, fields[name], parts) for name, value in values.items()}
        # A value kept as resolved (no cast, no partition-value rule) is its own text.
        rc.values_sql = {n: t for n, v in rc.values.items() if (t := _text_of(r, v)) is not None}
    if rc.condition is not None:
        rc.condition_sql = _text_of(r, rc.condition)
    return rc


def _text_of(r: _Resolution, col: Column) -> str | None:
    """The SQL text ``col`` was resolved from, if it is such a column (not one built around it)."""
    found = r.texts.get(id(col))
    return found[1] if found is not None and found[0] is col else None


def _condition(r: _Resolution, clause: Clause, scope: _Scope) -> Column | None:
    """The clause's condition as a boolean column (None: no condition, or a problem recorded)."""
    if clause.condition is None:
        return None
    checked = _check_expression(r, scope, clause.condition, f"{clause.label} condition", True)
    return checked[0] if checked else None


def _resolve_constraints(r: _Resolution) -> list[tuple[Constraint, Column]]:
    """Each constraint as the column that is true where a written row violates it.

    Resolved over the columns the merge writes (unqualified names): a ``not_null`` column
    must be one of them, a ``check`` a boolean, row-by-row expression over them.
    """
    if not r.spec.constraints:
        return []
    frame = r.source.sparkSession.createDataFrame([], StructType(r.output_fields))
    scope = _scope(frame, None, frame)
    by_lower = {f.name.lower(): f.name for f in r.output_fields}
    out = []
    for c in r.spec.constraints:
        if c.type == "not_null":
            name = by_lower.get(str(c.column).lower())
            if name is None:
                r.problems.append(
                    f"constraint {c.label} names column '{c.column}', which {r.target.name} does not "
                    f"have (columns: {', '.join(f.name for f in r.output_fields)})"
                )
                continue
            out.append((c, F.col(q(name)).isNull()))
        else:
            what = f"constraint check {c.name}" if c.name else "constraint check"
            checked = _check_expression(r, scope, str(c.expression), what, True)
            if checked is not None:
                out.append((c, ~F.coalesce(checked[0], F.lit(True))))
    return out


_UNRESOLVED = re.compile(r"UNRESOLVED_COLUMN[^\]]*\][^`]*`([^`]+)`(?:\.`([^`]+)`)?")


def _on_columns_hint(r: _Resolution, exc: Exception) -> str:
    """For a column `on` names that a side lacks: which side, and the columns it has."""
    found = _UNRESOLVED.search(str(exc))
    if not found:
        return ""
    alias, column = (found.group(1), found.group(2)) if found.group(2) else (None, found.group(1))
    sa, ta = r.spec.source_alias, r.spec.target_alias
    source_cols = [c for c in r.source.columns if not c.lower().startswith(PREFIX)]
    sides = []
    if alias is None or alias.lower() == sa.lower():
        if column.lower() not in {c.lower() for c in source_cols}:
            sides.append(
                f"the source ({r.spec.source}) has no column '{column}' (it has: {', '.join(source_cols)})"
            )
    if alias is None or alias.lower() == ta.lower():
        if not r.target.has_column(column):
            sides.append(
                f"the target {r.target.name} has no column '{column}' (it has: {', '.join(r.target.columns)})"
            )
    if not sides:
        return ""
    fix = "name key columns that the model's SQL and the table both have" if r.spec.on_origin else ""
    return "; " + "; ".join(sides) + (f": {fix}" if fix else "")


def _values_key(clause: Clause) -> str:
    """The spec key that holds the clause's values, as messages name it."""
    return "set" if clause.action == "update" else "values"


def _star_values(r: _Resolution, clause: Clause, scope: _Scope) -> dict[str, Column]:
    """``set: *`` / ``values: *``: every output column from the source column of the same name.

    With schema evolution a column the source lacks is NULL in an insert and kept in an
    update; without it, that column is a problem.
    """
    label, key, sa = clause.label, _values_key(clause), r.spec.source_alias
    if clause.when == "not_matched_by_source":
        r.problems.append(f"{label}: `{key}: *` needs a source row; list the columns to set")
    src_names = [c for c in r.source.columns if not c.lower().startswith(PREFIX)]
    values: dict[str, Column] = {}
    for fld in r.output_fields:
        alike = [c for c in src_names if c.lower() == fld.name.lower()]
        # The column of the very name first: under spark.sql.caseSensitive a source may hold
        # v and V, and Spark's own MERGE takes v for target column v.
        src_name = fld.name if fld.name in alike else alike[0] if len(alike) == 1 else None
        if len(alike) > 1 and src_name is None:
            if r.case_sensitive:  # without it, _check_source_names refuses the twins already
                r.problems.append(
                    f"{label}: `{key}: *` finds source columns {', '.join(alike)} for target "
                    f"column '{fld.name}' and none of them has its exact name; rename them in the "
                    "model SQL or list the columns to set"
                )
            continue
        if src_name is None:
            if r.spec.schema_evolution:
                if clause.action == "insert":
                    values[fld.name] = F.lit(None).cast(fld.dataType)
                continue  # update *: leave unchanged
            if clause.action == "insert":
                fix = (
                    f"add it to the model SQL (NULL if it has no value: `cast(null as "
                    f"{fld.dataType.simpleString()}) as {fld.name}`), or insert NULL there with schema "
                    "evolution (on_schema_change='append_new_columns'), or list the insert's values "
                    "(merge_clauses)"
                )
            else:
                fix = (
                    "add it to the model SQL, or list the columns to update (merge_update_columns / "
                    "merge_exclude_columns), or keep the table's value in updates with schema "
                    "evolution (on_schema_change='append_new_columns')"
                )
            r.problems.append(
                f"{label}: `{key}: *` needs source column '{fld.name}' (the target has it, the "
                f"source does not); {fix}"
            )
            continue
        col = F.col(q(sa, src_name))
        r.texts[id(col)] = (col, q(sa, src_name))
        src_type = r.source.schema[src_name].dataType
        values[fld.name] = _cast_to(r, col, src_type, f"{sa}.{src_name}", scope.frame, fld, label)
    return values


def _listed_values(
    r: _Resolution, clause: Clause, assignments: tuple[tuple[str, str], ...], scope: _Scope
) -> dict[str, Column]:
    """Listed ``set`` / ``values``: each a target column named once, its expression resolved and cast."""
    label, key = clause.label, _values_key(clause)
    values: dict[str, Column] = {}
    seen: set[str] = set()
    for name, text in assignments:
        if name.lower() in seen:
            r.problems.append(f"{label}: column '{name}' is assigned twice in `{key}`")
            continue
        seen.add(name.lower())
        match = [f for f in r.output_fields if f.name.lower() == name.lower()]
        if not match:
            r.problems.append(
                f"{label}: `{key}` names column '{name}', which the target "
                f"{r.target.name} does not have (columns: {', '.join(r.target.columns)})"
            )
            continue
        value = _check_expression(r, scope, text, f"{label} `{key}` for '{name}'", False)
        if value is not None:
            values[match[0].name] = _cast_to(r, *value, text, scope.frame, match[0], label)
    return values


def _check_batch(r: _Resolution, scope: _Scope, texts: list[str]) -> None:
    """Analyse ``texts`` (the conditions and values of one kind of clause) in one select over
    the scope's frame; record each as checked if the batch resolves, adds no aggregate, window,
    generator or subquery, and the expression is deterministic. Anything else is left to
    :func:`_check_expression`, which analyses it alone and names the problem."""
    pinned = []
    for text in dict.fromkeys(texts):
        try:
            pinned.append(pin_time(text, r.commit_time, r.column_names))
        except UnpinnableTime:
            continue  # reported by _check_expression
    if not pinned:
        return
    try:
        embedded = [operand(text) for text in pinned]
        cols = [F.expr(text) for text in embedded]
        probe = scope.frame.select(*cols)  # read by position: names may repeat
        types = [f.dataType for f in probe.schema.fields]
    except Exception:  # one of them does not resolve (or parse)
        return
    if _added_node(probe, scope.base_nodes) is not None:
        return
    checks = zip(pinned, embedded, cols, types, _plain_each(scope.frame, cols, probe), strict=True)
    for text, sql, col, dtype, ok in checks:
        if ok:
            r.checked[(scope.kind, text)] = (col, dtype)
            r.texts[id(col)] = (col, sql)


def _check_casts(r: _Resolution) -> None:
    """Analyse the pending casts (:func:`_cast_to`) in one select per frame; where that fails,
    each alone, and record the problem of each one Spark cannot do at its place in the list."""
    failed: list[tuple[int, int, _Cast]] = []
    groups: dict[int, list[_Cast]] = {}
    for cast in r.casts:
        groups.setdefault(id(cast.frame), []).append(cast)
    for group in groups.values():
        frame = group[0].frame
        try:
            frame.select(*[c.checked for c in group]).schema  # noqa: B018
            continue
        except AnalysisException:
            pass
        for cast in group:
            try:
                frame.select(cast.checked).schema  # noqa: B018
            except AnalysisException:
                failed.append((cast.position, r.casts.index(cast), cast))
    for position, _, cast in sorted(failed, key=lambda f: (f[0], f[1]), reverse=True):
        r.problems.insert(position, cast.problem())
    r.casts.clear()


def _check_expression(
    r: _Resolution, scope: _Scope, text: str, what: str, boolean: bool
) -> tuple[Column, DataType] | None:
    """Resolve ``text`` in the scope; return the column and its type, or record the problem.

    The expression must resolve in the scope's frame, be evaluable row by row (no aggregate,
    window, generator or subquery), be deterministic and, for a condition, be boolean.
    """
    expr_text = _pinned(r, text, what)
    if expr_text is None:
        return None
    batched = r.checked.get((scope.kind, expr_text))
    if batched is not None:  # resolved, row by row and deterministic (see _check_batch)
        if boolean and not isinstance(batched[1], (BooleanType, NullType)):
            r.problems.append(
                f"{what} ({shorten(text)}) must be a boolean expression, got {batched[1].simpleString()}"
            )
        return batched
    embedded = operand(expr_text)  # the text the outputs build into larger expressions
    try:
        col = F.expr(embedded)
        probe = scope.frame.select(col.alias("v"))
        probe.schema  # noqa: B018 -- analyses it now (Spark Connect analyses lazily)
    except AnalysisException as exc:
        if scope.hint is not None:
            try:
                scope.joined.select(F.expr(embedded)).schema  # noqa: B018
                r.problems.append(f"{what} ({shorten(text)}) may reference only {scope.hint}")
                return None
            except Exception:
                pass
        if scope.defer_unknown and _error_condition(exc).startswith("UNRESOLVED_COLUMN"):
            r.deferred.append((scope.kind, f"{what} ({shorten(text)})", _short(exc)))
            return None
        r.problems.append(f"{what} ({shorten(text)}) cannot be resolved: {_short(exc)}")
        return None
    except Exception as exc:  # the parser or analyzer gave up (py4j error)
        r.problems.append(f"{what} ({shorten(text)}) cannot be analysed: {_short(exc)}")
        return None
    kind = _not_row_by_row(probe, scope.base_nodes)
    if kind is not None:
        r.problems.append(
            f"{what} ({shorten(text)}) uses {kind}, which a merge cannot evaluate row by row; compute "
            "it in the model SQL and refer to that source column"
        )
        return None
    dtype = probe.schema.fields[0].dataType
    if boolean and not isinstance(dtype, (BooleanType, NullType)):
        r.problems.append(
            f"{what} ({shorten(text)}) must be a boolean expression, got {dtype.simpleString()}"
        )
    if not _deterministic_column(scope.frame, col, probe):
        r.problems.append(
            f"{what} ({shorten(text)}) is non-deterministic; conditions and values must be repeatable"
        )
    r.texts[id(col)] = (col, embedded)
    return col, dtype


def _cast_to(
    r: _Resolution, col: Column, src_type: DataType, text: str, frame: DataFrame, fld: StructField, what: str
) -> Column:
    """``col`` as a value of column ``fld``: unchanged if the types agree, else a checked cast.

    Struct fields are matched by name at every depth, so a struct of the value whose field
    names are not the column's (missing, extra or other names) is a problem here, as is a
    part Spark cannot cast at all (found by :func:`_check_casts`); a value that does not fit
    fails the job when it is written (:func:`.outputs.checked_cast`).
    """
    if src_type == fld.dataType and char_limit(fld) is None:
        return col
    where = f"column '{fld.name}'"
    mismatched = field_mismatches(src_type, fld.dataType, where, r.case_sensitive)
    if mismatched:
        r.problems.append(
            f"{what}: value ({shorten(text)}): {'; '.join(mismatched)}. Struct fields are matched by "
            "name, in any order: give the value's structs exactly the column's field names (e.g. "
            "named_struct('name', value, ...)), or change the column's type"
        )
        return col
    checked = checked_cast(col, src_type, fld, text, r.case_sensitive)

    def problem() -> str:
        part = _uncastable_part(frame, src_type, fld.dataType, where, r.case_sensitive)
        return (
            f"{what}: value ({shorten(text)}) of type {src_type.simpleString()} cannot be cast to "
            f"column '{fld.name}' of type {fld.dataType.simpleString()}" + (f" ({part})" if part else "")
        )

    # Analysed with the other casts of the clauses (see _resolve_clauses).
    r.casts.append(_Cast(frame, checked, len(r.problems), problem))
    return checked


def _uncastable_part(
    frame: DataFrame, src: DataType, dst: DataType, where: str, case_sensitive: bool
) -> str | None:
    """The first field, element, key or value of a nested value that Spark cannot cast to its
    part of the column, described for a message; None if that is the value as a whole."""
    pairs: list[tuple[DataType, DataType, str]] = []
    if isinstance(src, StructType) and isinstance(dst, StructType):
        matched = match_fields(src, dst, case_sensitive) or []
        pairs = [(v.dataType, c.dataType, f"{where} field '{c.name}'") for v, c in matched]
    elif isinstance(src, ArrayType) and isinstance(dst, ArrayType):
        pairs = [(src.elementType, dst.elementType, f"{where} element")]
    elif isinstance(src, MapType) and isinstance(dst, MapType):
        pairs = [(src.keyType, dst.keyType, f"{where} key"), (src.valueType, dst.valueType, f"{where} value")]
    for s, d, path in pairs:
        found = _uncastable_part(frame, s, d, path, case_sensitive)
        if found is not None:
            return found
        try:
            frame.select(F.lit(None).cast(s).try_cast(d)).schema  # noqa: B018
        except AnalysisException:
            return f"{path}: {s.simpleString()} cannot be cast to {d.simpleString()}"
    return None


# -- row-by-row checks ------------------------------------------------------------------------

# Plan nodes an expression adds when it is not evaluated row by row.
NOT_ROW_BY_ROW = {
    "Aggregate": "an aggregate function",
    "Window": "a window function",
    "Generate": "a generator (explode and the like)",
}


def _error_condition(exc: AnalysisException) -> str:
    """Spark's error condition of ``exc`` (e.g. UNRESOLVED_COLUMN.WITH_SUGGESTION), or ""."""
    try:
        return str(exc.getCondition() or "")
    except Exception:
        return ""


def _case_sensitive(spark: Any) -> bool:
    return str(spark.conf.get("spark.sql.caseSensitive", "false")).lower() == "true"


def _short(exc: Exception) -> str:
    """Spark's reason for rejecting an expression, short enough to quote in a message."""
    if "StackOverflowError" in str(exc):
        return "the expression is nested too deeply for Spark's parser"
    return shorten(spark_reason(exc), 400)


def _jvm_plan(df: DataFrame) -> Any:
    """The analyzed plan's Java object, or None on Spark Connect (see :mod:`.plan_connect`)."""
    jdf = getattr(df, "_jdf", None)
    return jdf.queryExecution().analyzed() if jdf is not None else None


def _deterministic_top(df: DataFrame) -> bool:
    """Whether the expressions of ``df``'s top node (a join's condition, a projection's values)
    are deterministic. Not the plans below: the source is materialized once (:mod:`.source`),
    so a source column computed by ``uuid()`` reads the same in every job of the merge."""
    jplan = _jvm_plan(df)
    if jplan is None:
        # On Connect the analyzer itself refused a non-deterministic join condition already.
        return True
    exprs = jplan.expressions()
    return all(bool(exprs.apply(i).deterministic()) for i in range(exprs.size()))


def _plain_each(frame: DataFrame, cols: list[Column], probe: DataFrame) -> list[bool]:
    """For each of ``cols`` (``probe`` is ``frame.select(*cols)``): deterministic and free of
    subqueries, as :func:`_deterministic_column` and :func:`_top_has_subquery` decide (a few
    round trips per column, not one per expression node). On Connect one question for all;
    if the answer is no, each is left unchecked (False), for :func:`_check_expression` to
    ask alone."""
    jplan = _jvm_plan(probe)
    if jplan is None:
        plain = not plan_connect.top_has_subquery(probe) and plan_connect.deterministic(
            frame, F.struct(*cols)
        )
        return [plain] * len(cols)
    exprs = jplan.expressions()
    if exprs.size() != len(cols):
        return [False] * len(cols)
    jvm: Any = probe.sparkSession._jvm  # type: ignore[attr-defined]
    subquery = jvm_class(jvm, "org.apache.spark.sql.catalyst.trees.TreePattern").PLAN_EXPRESSION()
    base = _jvm_plan(frame)
    if bool(base.deterministic()) and not bool(base.containsPattern(subquery)):
        # The frame is plain, so the plan's flags are its top node's: one question for all.
        if bool(jplan.deterministic()) and not bool(jplan.containsPattern(subquery)):
            return [True] * len(cols)
    out = []
    for i in range(len(cols)):
        e = exprs.apply(i)
        out.append(bool(e.deterministic()) and not bool(e.containsPattern(subquery)))
    return out


def _deterministic_column(frame: DataFrame, col: Column, probe: DataFrame) -> bool:
    """Whether ``col`` (``probe`` is ``frame.select(col)``) is deterministic, its frame aside."""
    if _jvm_plan(probe) is not None:
        return _deterministic_top(probe)
    return plan_connect.deterministic(frame, col)


def _plan_nodes(df: DataFrame) -> list[str]:
    jplan = _jvm_plan(df)
    return _node_classes(jplan) if jplan is not None else plan_connect.node_classes(df)


def _top_has_subquery(df: DataFrame) -> bool:
    jplan = _jvm_plan(df)
    return _has_subquery(jplan) if jplan is not None else plan_connect.top_has_subquery(df)


def _node_classes(jplan: Any) -> list[str]:
    """The plan's node names, from its tree text: one round trip, where walking the Java
    objects took five per node (the names counted, NOT_ROW_BY_ROW's, are the classes' own)."""
    return plan_connect.tree_nodes(str(jplan.treeString()).splitlines())


def _has_subquery(jplan: Any) -> bool:
    """True if the top node's own expressions hold a subquery (EXISTS, IN (SELECT ...), scalar)."""
    exprs = jplan.expressions()
    stack = [exprs.apply(i) for i in range(exprs.size())]
    while stack:
        e = stack.pop()
        name = str(e.getClass().getSimpleName())
        if "Subquery" in name or name in ("Exists", "ListQuery"):
            return True
        children = e.children()
        stack.extend(children.apply(i) for i in range(children.size()))
    return False


def _not_row_by_row(probe: DataFrame, base: list[str]) -> str | None:
    """What in ``probe`` (a select over a frame with plan nodes ``base``) is not row by row."""
    added = _added_node(probe, base)
    if added is not None:
        return added
    if _top_has_subquery(probe):
        return "a subquery"
    return None


def _added_node(probe: DataFrame, base: list[str]) -> str | None:
    """The aggregate, window or generator node ``probe`` adds to its frame's ``base`` nodes, described."""
    classes = _plan_nodes(probe)
    for cls, what in NOT_ROW_BY_ROW.items():
        if classes.count(cls) > base.count(cls):
            return what
    return None


# -- what `on` lets the scan prune ------------------------------------------------------------


def _class(jexpr: Any) -> str:
    return str(jexpr.getClass().getSimpleName())


def _conjuncts(jexpr: Any) -> list[Any]:
    """Top-level AND operands of a parsed expression (Spark's parser decides precedence)."""
    if _class(jexpr) == "And":
        return _conjuncts(jexpr.left()) + _conjuncts(jexpr.right())
    return [jexpr]


def _name_parts(jexpr: Any) -> list[str] | None:
    if _class(jexpr) != "UnresolvedAttribute":
        return None
    parts = jexpr.nameParts()
    return [str(parts.apply(i)) for i in range(parts.size())]


def _qualified_column(jexpr: Any, alias: str) -> str | None:
    """``alias.column`` -> column, for a plain attribute reference with that qualifier."""
    parts = _name_parts(jexpr)
    if parts and len(parts) == 2 and parts[0].lower() == alias.lower():
        return parts[1]
    return None


def _columns_of(jexpr: Any, alias: str) -> list[str]:
    """Every ``alias.column`` referenced anywhere in the expression, in order, once."""
    found: list[str] = []
    stack = [jexpr]
    while stack:
        e = stack.pop()
        col = _qualified_column(e, alias)
        if col is not None and col not in found:
            found.append(col)
        children = e.children()
        stack.extend(children.apply(i) for i in reversed(range(children.size())))
    return found


def _key_pair(conj: Any, ta: str, sa: str) -> tuple[str, str] | None:
    """``target.col = source.col`` (either order) -> (col, source column SQL); not ``<=>``."""
    if _class(conj) != "EqualTo":  # <=> matches NULLs, which range pruning would drop
        return None
    for t_side, s_side in ((conj.left(), conj.right()), (conj.right(), conj.left())):
        tcol, scol = _qualified_column(t_side, ta), _qualified_column(s_side, sa)
        if tcol is not None and scol is not None:
            return tcol, q(sa, scol)
    return None


@dataclass
class OnAnalysis:
    key_pairs: list[tuple[str, str]]
    target_only: list[str]
    target_columns: list[str]


def analyze_on(
    spark: Any, on: str, ta: str, sa: str, target: TargetTable, s_ctx: DataFrame, t_ctx: DataFrame
) -> OnAnalysis:
    """What `on` lets the scan prune: `target.col = source.col` conjuncts and target-only ones.

    ``on`` is the pinned text (time functions replaced; see :func:`build_plan`).
    """
    if getattr(spark, "_jsparkSession", None) is not None:  # Spark's own parser
        parsed = spark._jsparkSession.sessionState().sqlParser().parseExpression(on)
        conjuncts = [(_key_pair(c, ta, sa), str(c.sql())) for c in _conjuncts(parsed)]
        columns = _columns_of(parsed, ta)
    else:  # Spark Connect: no parser on this side
        conjuncts = [(plan_connect.key_pair(c, ta, sa), c) for c in plan_connect.split_conjuncts(on)]
        columns = plan_connect.columns_of(on, ta)
    key_pairs: list[tuple[str, str]] = []
    target_only: list[str] = []
    for pair, text in conjuncts:
        if pair is not None:
            tcol, sexpr = pair
            # Range pruning compares target values with source values; only sound when
            # both sides have the same type (otherwise the join's implicit casts decide).
            try:
                stype = s_ctx.select(F.expr(sexpr)).schema.fields[0].dataType
            except AnalysisException:
                continue
            if target.has_column(tcol) and stype == target.field(tcol).dataType:
                key_pairs.append((target.field(tcol).name, sexpr))
            continue
        try:
            t_ctx.select(F.expr(text)).schema  # noqa: B018 -- resolves over the target alone?
            target_only.append(text)
        except AnalysisException:
            pass
    return OnAnalysis(key_pairs, target_only, columns)
