"""Output expressions shared by scan, rewrite and change feed (phases 6–8): which clause acts
on a joined row, and what each output column becomes.

The scan counts the rows a clause acts on, the rewrite writes their new values and the
change feed writes old and new images, each in its own Spark job over its own join. They
agree only if they evaluate the same expressions, so those are built here, once, from the
resolved plan: the first clause whose condition holds acts (NULL counts as false), an
update that changes nothing (null-safe, maps included) does not act when
``skip_unchanged_updates`` is on, and a value that does not fit its column fails the job
with :data:`CAST_ERROR_MARK` in the message. The internal column names every join carries
live here too, under a reserved prefix.

``plan`` builds the plan these functions read and imports this module, so the plan appears
here as the :class:`ResolvedMerge` protocol, which ``plan.MergePlan`` satisfies.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import reduce
from typing import Protocol

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DataType, MapType, StringType, StructField, StructType

from .spec import Constraint, MergeSpec
from .sqltext import shorten
from .table import CHAR_VARCHAR_KEY, TargetTable

PREFIX = "__rowmerge_"
SRC_PRESENT = PREFIX + "src"  # literal true on every source row: NULL after an outer join = no match
SRC_ID = PREFIX + "sid"  # fixed id of each source row (assigned before the checkpoint)
FILE = PREFIX + "file"  # _metadata.file_path of the target row
ROW = PREFIX + "row"  # row position inside its file (row_index, or a per-scan id for ORC)
SIZE = PREFIX + "size"  # _metadata.file_size
CAST_ERROR_MARK = "ROWMERGE_CAST_ERROR"
CONSTRAINT_MARK = "ROWMERGE_CONSTRAINT"
NO_ACTION = -1

def q(*parts: str) -> str:
    """Quote a (qualified) column name for F.col."""
    return ".".join("`" + p.replace("`", "``") + "`" for p in parts)


def char_limit(fld: StructField) -> int | None:
    """The ``n`` of a CHAR(n)/VARCHAR(n) column (Spark's schema shows only "string"), else None."""
    found = re.fullmatch(r"(?:var)?char\((\d+)\)", str(fld.metadata.get(CHAR_VARCHAR_KEY, "")), re.I)
    return int(found.group(1)) if found else None


class ActingClause(Protocol):
    """A resolved clause as the expressions read it (``plan.ResolvedClause``)."""

    @property
    def index(self) -> int: ...  # position among clauses of the same kind

    @property
    def action(self) -> str: ...

    @property
    def condition(self) -> Column | None: ...

    @property
    def values(self) -> Mapping[str, Column]: ...  # output column -> new value


class ResolvedMerge(Protocol):
    """A resolved merge as the expressions read it (``plan.MergePlan``)."""

    @property
    def spec(self) -> MergeSpec: ...

    @property
    def target(self) -> TargetTable: ...

    @property
    def output_fields(self) -> Sequence[StructField]: ...

    @property
    def new_fields(self) -> Sequence[StructField]: ...

    @property
    def matched(self) -> Sequence[ActingClause]: ...

    @property
    def not_matched(self) -> Sequence[ActingClause]: ...

    @property
    def not_matched_by_source(self) -> Sequence[ActingClause]: ...

    @property
    def key_pairs(self) -> Sequence[tuple[str, str]]: ...

    @property
    def on_target_columns(self) -> Sequence[str]: ...

    @property
    def constraints(self) -> Sequence[tuple[Constraint, Column]]: ...

    @property
    def ta(self) -> str: ...

    @property
    def sa(self) -> str: ...


def checked_cast(col: Column, src_type: DataType, fld: StructField, text: str) -> Column:
    """``col`` (of ``src_type``, written as ``text``) cast to column ``fld``, failing where it does not fit.

    Spark's own cast turns a value it cannot convert into NULL; a merge must not write that
    NULL, so the job fails naming the column, the value and the expression. The caller has
    checked that the types can be cast at all.
    """
    limit = char_limit(fld)
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


def as_stored(col: Column, fld: StructField, partition_columns: Sequence[str]) -> Column:
    """``col`` as readers will read it back from column ``fld``: a partition value ``''`` is NULL.

    A Hive-style table stores an empty STRING partition value as its default partition
    (``__HIVE_DEFAULT_PARTITION__``), which Spark, Hive and Trino all read as NULL. The merge
    computes with that value, so the no-op check, the rewrite and the change feed agree with
    what the table shows afterwards.
    """
    if fld.name.lower() not in {p.lower() for p in partition_columns}:
        return col
    if not isinstance(fld.dataType, StringType):
        return col
    return F.when(col == F.lit(""), F.lit(None).cast(fld.dataType)).otherwise(col)


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


# -- row classification (valid on any frame that has both aliases) ------------------------


def src_present(plan: ResolvedMerge) -> Column:
    """True where the joined row has a source row (false after an outer join found none)."""
    return F.col(q(plan.sa, SRC_PRESENT)).isNotNull()


def old_value(plan: ResolvedMerge, name: str) -> Column:
    """The target row's current value of ``name`` (NULL for a column schema evolution adds)."""
    if any(f.name == name for f in plan.new_fields):
        typ = next(f.dataType for f in plan.new_fields if f.name == name)
        return F.lit(None).cast(typ)
    return F.col(q(plan.ta, name))


def action_index(clauses: Sequence[ActingClause]) -> Column:
    """Index of the first clause whose condition holds, else NO_ACTION."""
    if not clauses:
        return F.lit(NO_ACTION)
    expr = None
    for rc in clauses:
        cond = rc.condition if rc.condition is not None else F.lit(True)
        expr = F.when(cond, F.lit(rc.index)) if expr is None else expr.when(cond, F.lit(rc.index))
    assert expr is not None
    return expr.otherwise(F.lit(NO_ACTION))


def acting(plan: ResolvedMerge, clauses: Sequence[ActingClause], idx: Column, action: str) -> Column:
    """True where a clause of ``clauses`` with ``action`` acts (index ``idx``; never NULL).

    An update that changes nothing does not act when ``skip_unchanged_updates`` is on.
    """
    parts = []
    for rc in clauses:
        if rc.action != action:
            continue
        cond = idx == rc.index
        if action == "update" and plan.spec.skip_unchanged_updates:
            cond = cond & changed(plan, rc)
        parts.append(cond)
    if not parts:
        return F.lit(False)
    return F.coalesce(reduce(lambda a, b: a | b, parts), F.lit(False))


def changed(plan: ResolvedMerge, rc: ActingClause) -> Column:
    """True if the update writes a value different (null-safe) from the old one."""
    types = {f.name: f.dataType for f in plan.output_fields}
    diffs = [
        ~comparable(old_value(plan, name), types[name]).eqNullSafe(comparable(value, types[name]))
        for name, value in rc.values.items()
    ]
    if not diffs:
        return F.lit(False)
    out = diffs[0]
    for d in diffs[1:]:
        out = out | d
    return out


# -- output values -------------------------------------------------------------------------


@dataclass(frozen=True)
class Updates:
    """Which update clause acts on a joined row, and the row's old values: built once per frame
    and shared by every output column's CASE (built per column, the same conditions cost a
    py4j call per node and column, most of a small merge's driver time)."""

    conditions: tuple[tuple[Column, ActingClause], ...]  # (the clause acts on this row, clause)
    old: Mapping[str, Column]  # output column -> the target row's current value


def updates(plan: ResolvedMerge, matched_idx: Column, nmbs_idx: Column) -> Updates:
    """The update clauses of ``plan`` as they act on a target-source joined row."""
    src = src_present(plan)
    conditions = []
    for kind_active, idx, clauses in (
        (src, matched_idx, plan.matched),
        (~src, nmbs_idx, plan.not_matched_by_source),
    ):
        for rc in clauses:
            if rc.action == "update":
                conditions.append((kind_active & (idx == rc.index), rc))
    return Updates(tuple(conditions), {f.name: old_value(plan, f.name) for f in plan.output_fields})


def output_value(name: str, acts: Updates) -> Column:
    """New value of ``name`` for a target row in the rewrite (old value if no update acts)."""
    expr = None
    for cond, rc in acts.conditions:
        if name not in rc.values:
            continue
        expr = F.when(cond, rc.values[name]) if expr is None else expr.when(cond, rc.values[name])
    return acts.old[name] if expr is None else expr.otherwise(acts.old[name])


def insert_values(plan: ResolvedMerge, nm_idx: Column) -> list[Column]:
    """Each output column's value in the row inserted by not_matched clause ``nm_idx`` (NULL
    where the clause sets none), named after the column."""
    chosen = [(nm_idx == rc.index, rc) for rc in plan.not_matched]
    out = []
    for f in plan.output_fields:
        null = F.lit(None).cast(f.dataType)
        expr = None
        for cond, rc in chosen:
            value = rc.values.get(f.name, null)
            expr = F.when(cond, value) if expr is None else expr.when(cond, value)
        out.append((null if expr is None else expr).alias(f.name))
    return out


def written_key_sample(plan: ResolvedMerge) -> Column:
    """The key columns of a written row (output column names), rendered for messages."""
    cols = [t for t, _ in plan.key_pairs] or [plan.output_fields[0].name]
    parts = []
    for c in cols:
        parts += [F.lit(f"{c}="), F.coalesce(F.col(q(c)).cast("string"), F.lit("NULL")), F.lit(", ")]
    return F.concat(*parts[:-1])


def enforce_constraints(plan: ResolvedMerge, rows: DataFrame, checked: Column | None = None) -> DataFrame:
    """``rows`` (output columns) failing the job at the first row that breaks a constraint, with
    :data:`CONSTRAINT_MARK`, the constraint's index in the spec and the row's key in the
    message; ``checked``: only rows where it is true (the rows an update writes; copied
    rows were checked when they were written)."""
    if not plan.constraints:
        return rows
    sample = written_key_sample(plan)
    raised = None
    for i, (_, violated) in enumerate(plan.constraints):
        when = violated if checked is None else checked & violated
        message = F.concat(F.lit(f"{CONSTRAINT_MARK}[{i}|"), sample, F.lit("]"))
        fail = F.raise_error(message)
        raised = F.when(when, fail) if raised is None else raised.when(when, fail)
    assert raised is not None
    return rows.where(F.coalesce(raised.cast("boolean"), F.lit(True)))


def key_sample(plan: ResolvedMerge) -> Column:
    """A readable rendering of the target row's key columns, for error messages."""
    cols = [t for t, _ in plan.key_pairs] or [
        plan.target.field(c).name for c in plan.on_target_columns if plan.target.has_column(c)
    ]
    cols = cols or [plan.target.columns[0]]
    parts = []
    for c in cols:
        parts.append(F.lit(f"{c}="))
        parts.append(F.coalesce(F.col(q(plan.ta, c)).cast("string"), F.lit("NULL")))
        parts.append(F.lit(", "))
    return F.concat(*parts[:-1])
