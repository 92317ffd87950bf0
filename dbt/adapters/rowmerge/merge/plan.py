"""Phase 1: turn the validated spec into Spark column expressions, checked against schemas.

Decides, per clause, the condition and the new value of every output column (``*``
resolved by name, every value cast to the target type), which clause acts on a joined row
(first whose condition holds; NULL counts as false), whether an update changes anything
(null-safe, maps included), and what the ``on`` condition lets the scan prune. Every
problem that needs the schemas — unknown columns, a not_matched clause reading the target,
a non-boolean or non-deterministic condition, an aggregate or window function, an
impossible cast — is collected and raised once here, before any data is read.

Scan, rewrite and change feed evaluate these expressions in separate Spark jobs, so every
expression must give the same value in each: non-deterministic ones are rejected, and
``current_timestamp()`` and its relatives are pinned to the merge's commit time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from functools import reduce
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, BooleanType, DataType, MapType, NullType, StructField, StructType
from pyspark.sql.utils import AnalysisException

from .errors import MergeSpecError, spark_reason
from .spec import Clause, MergeSpec
from .sqltext import UnpinnableTime, pin_time, shorten
from .table import TargetTable

PREFIX = "__rowmerge_"
SRC_PRESENT = PREFIX + "src"  # literal true on every source row: NULL after an outer join = no match
SRC_ID = PREFIX + "sid"  # fixed id of each source row (assigned before the checkpoint)
FILE = PREFIX + "file"  # _metadata.file_path of the target row
ROW = PREFIX + "row"  # row position inside its file (row_index, or a per-scan id for ORC)
SIZE = PREFIX + "size"  # _metadata.file_size
CAST_ERROR_MARK = "ROWMERGE_CAST_ERROR"
NO_ACTION = -1


def q(*parts: str) -> str:
    """Quote a (qualified) column name for F.col."""
    return ".".join("`" + p.replace("`", "``") + "`" for p in parts)


# Spark keeps a CHAR(n)/VARCHAR(n) column's declared type here; the schema says "string".
CHAR_VARCHAR_KEY = "__CHAR_VARCHAR_TYPE_STRING"


def _char_limit(fld: StructField) -> int | None:
    found = re.fullmatch(r"(?:var)?char\((\d+)\)", str(fld.metadata.get(CHAR_VARCHAR_KEY, "")), re.I)
    return int(found.group(1)) if found else None


def _short(exc: Exception) -> str:
    if "StackOverflowError" in str(exc):
        return "the expression is nested too deeply for Spark's parser"
    return shorten(spark_reason(exc), 400)


def _has_map(dtype: DataType) -> bool:
    if isinstance(dtype, MapType):
        return True
    if isinstance(dtype, ArrayType):
        return _has_map(dtype.elementType)
    if isinstance(dtype, StructType):
        return any(_has_map(f.dataType) for f in dtype.fields)
    return False


def comparable(col: Column, dtype: DataType) -> Column:
    """``col`` in a form that ``<=>`` accepts: every map (at any depth) as its key-sorted entries.

    Spark cannot compare maps; two maps are equal when they hold the same keys with equal
    values, whatever their order, which is what sorted entry arrays compare.
    """
    if not _has_map(dtype):
        return col
    if isinstance(dtype, MapType):
        key_type, value_type = dtype.keyType, dtype.valueType
        return F.array_sort(
            F.transform(
                F.map_entries(col),
                lambda e: F.struct(
                    comparable(e["key"], key_type).alias("k"), comparable(e["value"], value_type).alias("v")
                ),
            )
        )
    if isinstance(dtype, ArrayType):
        element = dtype.elementType
        return F.transform(col, lambda x: comparable(x, element))
    assert isinstance(dtype, StructType)
    fields = [comparable(col[f.name], f.dataType).alias(f.name) for f in dtype.fields]
    return F.when(col.isNull(), F.lit(None)).otherwise(F.struct(*fields))


# Plan nodes an expression adds when it is not evaluated row by row.
NOT_ROW_BY_ROW = {
    "Aggregate": "an aggregate function",
    "Window": "a window function",
    "Generate": "a generator (explode and the like)",
}


def _node_classes(jplan: Any) -> list[str]:
    out, stack = [], [jplan]
    while stack:
        node = stack.pop()
        out.append(str(node.getClass().getSimpleName()))
        children = node.children()
        stack.extend(children.apply(i) for i in range(children.size()))
    return out


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
    analyzed = probe._jdf.queryExecution().analyzed()
    classes = _node_classes(analyzed)
    for cls, what in NOT_ROW_BY_ROW.items():
        if classes.count(cls) > base.count(cls):
            return what
    if _has_subquery(analyzed):
        return "a subquery"
    return None


@dataclass
class ResolvedClause:
    """A clause with Spark expressions: condition and new values (output column -> value)."""

    clause: Clause
    index: int  # position among clauses of the same kind
    condition: Column | None
    values: dict[str, Column] = field(default_factory=dict)  # missing column = keep old value

    @property
    def action(self) -> str:
        return self.clause.action


@dataclass
class MergePlan:
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

    # -- row classification (valid on any frame that has both aliases) --------------------
    @property
    def ta(self) -> str:
        return self.spec.target_alias

    @property
    def sa(self) -> str:
        return self.spec.source_alias

    def src_present(self) -> Column:
        return F.col(q(self.sa, SRC_PRESENT)).isNotNull()

    def old(self, name: str) -> Column:
        if any(f.name == name for f in self.new_fields):
            typ = next(f.dataType for f in self.new_fields if f.name == name)
            return F.lit(None).cast(typ)
        return F.col(q(self.ta, name))

    @staticmethod
    def action_index(clauses: list[ResolvedClause]) -> Column:
        """Index of the first clause whose condition holds, else NO_ACTION."""
        if not clauses:
            return F.lit(NO_ACTION)
        expr = None
        for rc in clauses:
            cond = rc.condition if rc.condition is not None else F.lit(True)
            expr = F.when(cond, F.lit(rc.index)) if expr is None else expr.when(cond, F.lit(rc.index))
        assert expr is not None
        return expr.otherwise(F.lit(NO_ACTION))

    def acting(self, clauses: list[ResolvedClause], idx: Column, action: str) -> Column:
        """True where a clause of ``clauses`` with ``action`` acts (index ``idx``; never NULL).

        An update that changes nothing does not act when ``skip_unchanged_updates`` is on.
        """
        parts = []
        for rc in clauses:
            if rc.action != action:
                continue
            cond = idx == rc.index
            if action == "update" and self.spec.skip_unchanged_updates:
                cond = cond & self.changed(rc)
            parts.append(cond)
        if not parts:
            return F.lit(False)
        return F.coalesce(reduce(lambda a, b: a | b, parts), F.lit(False))

    def changed(self, rc: ResolvedClause) -> Column:
        """True if the update writes a value different (null-safe) from the old one."""
        types = {f.name: f.dataType for f in self.output_fields}
        diffs = [
            ~comparable(self.old(name), types[name]).eqNullSafe(comparable(value, types[name]))
            for name, value in rc.values.items()
        ]
        if not diffs:
            return F.lit(False)
        out = diffs[0]
        for d in diffs[1:]:
            out = out | d
        return out

    def output_value(self, name: str, matched_idx: Column, nmbs_idx: Column) -> Column:
        """New value of ``name`` for a target row in the rewrite (old value if no update acts)."""
        expr = None
        for kind_active, idx, clauses in (
            (self.src_present(), matched_idx, self.matched),
            (~self.src_present(), nmbs_idx, self.not_matched_by_source),
        ):
            for rc in clauses:
                if rc.action != "update" or name not in rc.values:
                    continue
                cond = kind_active & (idx == rc.index)
                expr = F.when(cond, rc.values[name]) if expr is None else expr.when(cond, rc.values[name])
        return self.old(name) if expr is None else expr.otherwise(self.old(name))

    def insert_value(self, name: str, nm_idx: Column, typ: DataType) -> Column:
        expr = None
        for rc in self.not_matched:
            value = rc.values.get(name, F.lit(None).cast(typ))
            expr = F.when(nm_idx == rc.index, value) if expr is None else expr.when(nm_idx == rc.index, value)
        return F.lit(None).cast(typ) if expr is None else expr

    def key_sample(self) -> Column:
        """A readable rendering of the target row's key columns, for error messages."""
        cols = [t for t, _ in self.key_pairs] or [
            self.target.field(c).name for c in self.on_target_columns if self.target.has_column(c)
        ]
        cols = cols or [self.target.columns[0]]
        parts = []
        for c in cols:
            parts.append(F.lit(f"{c}="))
            parts.append(F.coalesce(F.col(q(self.ta, c)).cast("string"), F.lit("NULL")))
            parts.append(F.lit(", "))
        return F.concat(*parts[:-1])


# -- construction and validation ------------------------------------------------------------


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
    """(``on`` is the pinned text: see :func:`build_plan`.)"""
    """What `on` lets the scan prune: `target.col = source.col` conjuncts and target-only ones."""
    parsed = spark._jsparkSession.sessionState().sqlParser().parseExpression(on)
    key_pairs: list[tuple[str, str]] = []
    target_only: list[str] = []
    for conj in _conjuncts(parsed):
        pair = _key_pair(conj, ta, sa)
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
        text = str(conj.sql())
        try:
            t_ctx.select(F.expr(text))
            target_only.append(text)
        except AnalysisException:
            pass
    return OnAnalysis(key_pairs, target_only, _columns_of(parsed, ta))


def build_plan(
    spec: MergeSpec, target: TargetTable, source: DataFrame, target_df: DataFrame, commit_time: datetime
) -> MergePlan:
    """Resolve every clause against the schemas; raise MergeSpecError listing all problems.

    Time functions in every expression read ``commit_time`` (see the module doc); messages
    quote the expressions as the user wrote them.
    """
    problems: list[str] = []
    column_names = [*source.columns, *target_df.columns]

    def pinned(text: str, what: str) -> str | None:
        try:
            return pin_time(text, commit_time, column_names)
        except UnpinnableTime as exc:
            problems.append(f"{what} ({shorten(text)}): {exc}")
            return None

    ta, sa = spec.target_alias, spec.source_alias
    s_ctx = source.alias(sa)
    t_ctx = target_df.alias(ta)

    reserved = [c for c in source.columns if c.lower().startswith(PREFIX)]
    if reserved:
        problems.append(f"source column(s) {', '.join(reserved)} use the reserved prefix {PREFIX}")
    by_lower: dict[str, list[str]] = {}
    for c in source.columns:
        by_lower.setdefault(c.lower(), []).append(c)
    twins = [names for names in by_lower.values() if len(names) > 1]
    case_sensitive = str(source.sparkSession.conf.get("spark.sql.caseSensitive", "false")).lower() == "true"
    if twins and not case_sensitive and any(c.star for c in spec.clauses):
        shown = "; ".join(", ".join(names) for names in twins)
        problems.append(
            f"the source has columns whose names differ only in letter case ({shown}); Spark matches "
            "names case-insensitively, so `*` cannot tell them apart. Rename them in the model SQL"
        )

    src_by_lower = {c.lower(): c for c in source.columns if not c.lower().startswith(PREFIX)}
    tgt_lower = {f.name.lower() for f in target.schema.fields}
    uses_star = any(c.star for c in spec.clauses)
    new_fields: list[StructField] = []
    if spec.schema_evolution and uses_star:
        for f in source.schema.fields:
            if f.name.lower() not in tgt_lower and not f.name.lower().startswith(PREFIX):
                new_fields.append(StructField(f.name, f.dataType, True))
    part_lower = {p.lower() for p in target.partition_columns}
    data_fields = [f for f in target.schema.fields if f.name.lower() not in part_lower]
    part_fields = [f for f in target.schema.fields if f.name.lower() in part_lower]
    output_fields = data_fields + new_fields + part_fields

    # `on`: must resolve over both sides, be boolean and deterministic.
    on_text = pinned(spec.on, "`on`")
    if on_text is None:
        raise MergeSpecError(problems)
    try:
        on_col = F.expr(on_text)
        joined = s_ctx.join(t_ctx, on_col, "inner")
        if not joined._jdf.queryExecution().analyzed().deterministic():
            problems.append(
                f"`on` ({shorten(spec.on)}) is non-deterministic; a merge condition must be repeatable"
            )
    except Exception as exc:  # AnalysisException, or the parser giving up (py4j)
        if "NON_DETERMINISTIC" in str(exc):
            problems.append(
                f"`on` ({shorten(spec.on)}) is non-deterministic; a merge condition must be repeatable"
            )
        else:
            problems.append(f"`on` ({shorten(spec.on)}) cannot be resolved: {_short(exc)}")
        raise MergeSpecError(problems) from None
    if _has_subquery(joined._jdf.queryExecution().analyzed()):
        problems.append(
            f"`on` ({shorten(spec.on)}) uses a subquery; join the data in the model SQL and compare "
            "with that source column"
        )
        raise MergeSpecError(problems)
    base_nodes = {
        id(ctx): _node_classes(ctx._jdf.queryExecution().analyzed()) for ctx in (s_ctx, t_ctx, joined)
    }

    def check(
        ctx: DataFrame, text: str, what: str, boolean: bool, scope_hint: str | None
    ) -> tuple[Column, DataType] | None:
        """Resolve ``text`` in ``ctx``; return the column and its type, or record the problem."""
        expr_text = pinned(text, what)
        if expr_text is None:
            return None
        try:
            col = F.expr(expr_text)
            probe = ctx.select(col.alias("v"))
        except AnalysisException as exc:
            if scope_hint is not None:
                try:
                    joined.select(F.expr(expr_text))
                    problems.append(f"{what} ({shorten(text)}) may reference only {scope_hint}")
                    return None
                except Exception:
                    pass
            problems.append(f"{what} ({shorten(text)}) cannot be resolved: {_short(exc)}")
            return None
        except Exception as exc:  # the parser or analyzer gave up (py4j error)
            problems.append(f"{what} ({shorten(text)}) cannot be analysed: {_short(exc)}")
            return None
        kind = _not_row_by_row(probe, base_nodes[id(ctx)])
        if kind is not None:
            problems.append(
                f"{what} ({shorten(text)}) uses {kind}, which a merge cannot evaluate row by row; compute "
                "it in the model SQL and refer to that source column"
            )
            return None
        dtype = probe.schema.fields[0].dataType
        if boolean and not isinstance(dtype, (BooleanType, NullType)):
            problems.append(
                f"{what} ({shorten(text)}) must be a boolean expression, got {dtype.simpleString()}"
            )
        if not probe._jdf.queryExecution().analyzed().deterministic():
            problems.append(
                f"{what} ({shorten(text)}) is non-deterministic; conditions and values must be repeatable"
            )
        return col, dtype

    def cast_to(
        col: Column, src_type: DataType, text: str, ctx: DataFrame, fld: StructField, what: str
    ) -> Column:
        limit = _char_limit(fld)
        if src_type == fld.dataType and limit is None:
            return col
        try:
            ctx.select(col.cast(fld.dataType))
        except AnalysisException:
            problems.append(
                f"{what}: value ({shorten(text)}) of type {src_type.simpleString()} cannot be cast to "
                f"column '{fld.name}' of type {fld.dataType.simpleString()}"
            )
            return col
        casted = col if src_type == fld.dataType else col.try_cast(fld.dataType)
        failure = col.isNotNull() & casted.isNull()
        declared = fld.dataType.simpleString()
        if limit is not None:
            # Spark's own rule for CHAR/VARCHAR: trailing spaces beyond the limit are fine.
            failure = failure | (F.length(F.rtrim(casted)) > limit)
            declared = str(fld.metadata[CHAR_VARCHAR_KEY])
        message = F.concat(
            F.lit(f"{CAST_ERROR_MARK}[column '{fld.name}' ({declared}), value '"),
            col.cast("string"),
            F.lit(f"' from {shorten(text)}]"),
        )
        return F.when(failure, F.raise_error(message)).otherwise(casted)

    resolved: dict[str, list[ResolvedClause]] = {
        "matched": [],
        "not_matched": [],
        "not_matched_by_source": [],
    }
    contexts = {
        "matched": (joined, None),
        "not_matched": (s_ctx, f"the source ({sa}); a not_matched row has no target row"),
        "not_matched_by_source": (t_ctx, f"the target ({ta}); such a row has no source row"),
    }
    for clause in spec.clauses:
        ctx, hint = contexts[clause.when]
        label = clause.label
        cond: Column | None = None
        if clause.condition is not None:
            checked = check(ctx, clause.condition, f"{label} condition", True, hint)
            cond = checked[0] if checked else None
        rc = ResolvedClause(clause, len(resolved[clause.when]), cond)
        if clause.action in ("update", "insert"):
            key = "set" if clause.action == "update" else "values"
            if clause.assignments is None:  # `*`, by name
                if clause.when == "not_matched_by_source":
                    problems.append(f"{label}: `{key}: *` needs a source row; list the columns to set")
                for fld in output_fields:
                    src_name = src_by_lower.get(fld.name.lower())
                    if src_name is None:
                        if spec.schema_evolution:
                            if clause.action == "insert":
                                rc.values[fld.name] = F.lit(None).cast(fld.dataType)
                            continue  # update *: leave unchanged
                        problems.append(
                            f"{label}: `{key}: *` needs source column '{fld.name}' (target column "
                            "missing from the source); add it to the model SQL, or list the "
                            "columns explicitly (merge_update_columns / merge_exclude_columns)"
                        )
                        continue
                    col = F.col(q(sa, src_name))
                    src_type = source.schema[src_name].dataType
                    rc.values[fld.name] = cast_to(col, src_type, f"{sa}.{src_name}", ctx, fld, label)
            else:
                seen: set[str] = set()
                for name, text in clause.assignments:
                    if name.lower() in seen:
                        problems.append(f"{label}: column '{name}' is assigned twice in `{key}`")
                        continue
                    seen.add(name.lower())
                    match = [f for f in output_fields if f.name.lower() == name.lower()]
                    if not match:
                        problems.append(
                            f"{label}: `{key}` names column '{name}', which the target "
                            f"{target.name} does not have (columns: {', '.join(target.columns)})"
                        )
                        continue
                    value = check(ctx, text, f"{label} `{key}` for '{name}'", False, hint)
                    if value is not None:
                        rc.values[match[0].name] = cast_to(*value, text, ctx, match[0], label)
        resolved[clause.when].append(rc)

    on_info = analyze_on(source.sparkSession, on_text, ta, sa, target, s_ctx, t_ctx)

    if problems:
        raise MergeSpecError(problems)
    return MergePlan(
        spec=spec,
        target=target,
        output_fields=output_fields,
        new_fields=new_fields,
        on=on_col,
        matched=resolved["matched"],
        not_matched=resolved["not_matched"],
        not_matched_by_source=resolved["not_matched_by_source"],
        key_pairs=on_info.key_pairs,
        target_only_conjuncts=on_info.target_only,
        on_target_columns=on_info.target_columns,
    )
