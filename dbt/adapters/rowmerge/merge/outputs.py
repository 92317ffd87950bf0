"""Output expressions shared by scan, rewrite and change feed (phases 6–8): which clause acts
on a joined row, and what each output column becomes.

The scan counts the rows a clause acts on, the rewrite writes their new values and the
change feed writes old and new images, each in its own Spark job over its own join. They
agree only if they evaluate the same expressions, so those are built here, once, from the
resolved plan: the first clause whose condition holds acts (NULL counts as false), an
update that changes nothing (null-safe, maps and variants included) does not act when
``skip_unchanged_updates`` is on, and a value that does not fit its column — at any depth of
a struct, array or map — fails the job with :data:`CAST_ERROR_MARK` in the message. Which
clause acts is computed once per row, as a column of the frame (:func:`decide`): every
output column picks its value by comparing with that column, so the expressions grow
linearly with the number of clauses. The internal column names every join carries live
here too, under a reserved prefix.

``plan`` builds the plan these functions read and imports this module, so the plan appears
here as the :class:`ResolvedMerge` protocol, which ``plan.MergePlan`` satisfies.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, Protocol, TypeVar

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    DataType,
    MapType,
    StringType,
    StructField,
    StructType,
    VariantType,
)

from .spec import Constraint, MergeSpec
from .sqltext import null_sql, shorten
from .table import CHAR_VARCHAR_KEY, TargetTable

PREFIX = "__rowmerge_"
SRC_PRESENT = PREFIX + "src"  # literal true on every source row: NULL after an outer join = no match
SRC_ID = PREFIX + "sid"  # fixed id of each source row (assigned before the checkpoint)
FILE = PREFIX + "file"  # _metadata.file_path of the target row
ROW = PREFIX + "row"  # row position inside its file (row_index, or a per-scan id for ORC)
SIZE = PREFIX + "size"  # _metadata.file_size
# Which clause of each kind acts on a row, and whether it really does (see decide).
MATCHED_CLAUSE = PREFIX + "matched_clause"
NMBS_CLAUSE = PREFIX + "nmbs_clause"  # not_matched_by_source
NOT_MATCHED_CLAUSE = PREFIX + "not_matched_clause"
# The change feed's change types (Delta Lake's names), which rows of the data write carry too.
INSERT, PREIMAGE, POSTIMAGE, DELETE = "insert", "update_preimage", "update_postimage", "delete"
CAST_ERROR_MARK = "ROWMERGE_CAST_ERROR"
CONSTRAINT_MARK = "ROWMERGE_CONSTRAINT"
NO_ACTION = -1
# Container levels of a VARIANT value the no-op check compares element by element (see
# comparable); what lies deeper is compared as one piece.
VARIANT_LEVELS = 4


def q(*parts: str) -> str:
    """Quote a (qualified) column name for F.col."""
    return ".".join("`" + p.replace("`", "``") + "`" for p in parts)


def char_limit(fld: StructField) -> int | None:
    """The ``n`` of a CHAR(n)/VARCHAR(n) column (Spark's schema shows only "string"), else None."""
    found = re.fullmatch(r"(?:var)?char\((\d+)\)", str(fld.metadata.get(CHAR_VARCHAR_KEY, "")), re.I)
    return int(found.group(1)) if found else None


def is_char(fld: StructField) -> bool:
    """Whether ``fld`` is a CHAR(n) column (padded to n), not a VARCHAR(n)."""
    return re.fullmatch(r"char\(\d+\)", str(fld.metadata.get(CHAR_VARCHAR_KEY, "")), re.I) is not None


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

    @property
    def condition_sql(self) -> str | None: ...  # the condition as SQL text, where known

    @property
    def values_sql(self) -> Mapping[str, str]: ...  # values known as SQL text


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

    @property
    def memo(self) -> dict[tuple[Any, ...], Any]: ...  # expressions built once per merge (_built)


_T = TypeVar("_T")


def _built(plan: ResolvedMerge, key: tuple[Any, ...], build: Callable[[], _T]) -> _T:
    """``build()``, once per merge: scan, rewrite and change feed read the same expressions,
    and building a column costs a py4j round trip per node (with hundreds of clauses, most
    of a merge's driver time if each phase built them again)."""
    if key not in plan.memo:
        plan.memo[key] = build()
    return plan.memo[key]  # type: ignore[no-any-return]


def checked_cast(
    col: Column, src_type: DataType, fld: StructField, text: str, case_sensitive: bool = False
) -> Column:
    """``col`` (of ``src_type``, written as ``text``) cast to column ``fld``, failing where it does not fit.

    Spark's own cast turns a value it cannot convert into NULL — and, inside a struct, array
    or map, turns only that field, element, key or value into NULL; a merge must not write
    that NULL, so the job fails naming the column, the path inside it, the value and the
    expression. Struct fields are matched by name (Spark's cast matches them by position),
    letter case ignored unless ``case_sensitive``. A NULL struct, array, map or element stays
    NULL. Parts whose types already agree are left as they are. The caller has checked that
    the struct fields match (:func:`field_mismatches`) and that every part can be cast at all.
    """
    limit = char_limit(fld)
    if limit is None:
        return _checked(col, src_type, fld.dataType, f"column '{fld.name}'", shorten(text), case_sensitive)
    # Spark's own rule for CHAR/VARCHAR (top-level STRING columns): trailing spaces beyond the
    # limit are fine. A CHAR(n) value is stored padded to n, as Spark's INSERT stores it: a
    # partition folder is named by the value (``c=ab `` for 'ab' in CHAR(3)), and a row written
    # unpadded into ``c=ab`` would sit in a folder no catalog partition reads. A VARCHAR(n)
    # value's spaces beyond n are dropped, as Spark's INSERT drops them (rpad and substring
    # only cut spaces here: longer values failed above).
    casted = col if src_type == fld.dataType else col.try_cast(fld.dataType)
    failure = (col.isNotNull() & casted.isNull()) | (F.length(F.rtrim(casted)) > limit)
    if is_char(fld):
        stored = F.rpad(casted, limit, " ")
    else:
        stored = F.when(F.length(casted) > limit, F.substring(casted, 1, limit)).otherwise(casted)
    return _raise_where(
        failure, col, f"column '{fld.name}' ({fld.metadata[CHAR_VARCHAR_KEY]})", shorten(text), stored
    )


def _raise_where(failure: Column, col: Column, what: str, text: str, otherwise: Column) -> Column:
    """``otherwise``, or the job fails with :data:`CAST_ERROR_MARK` naming ``what`` and the value ``col``."""
    message = F.concat(
        F.lit(f"{CAST_ERROR_MARK}[{what}, value '"), col.cast("string"), F.lit(f"' from {text}]")
    )
    return F.when(failure, F.raise_error(message)).otherwise(otherwise)


def _checked(
    col: Column, src: DataType, dst: DataType, where: str, text: str, case_sensitive: bool
) -> Column:
    """:func:`checked_cast` of ``col`` at path ``where`` (e.g. "column 'k' field 'a' element")."""
    if src == dst:
        return col
    if _nullable(src) == _nullable(dst):  # only NULL flags differ: a cast that cannot fail
        return col.cast(dst)
    if isinstance(src, StructType) and isinstance(dst, StructType):
        pairs = match_fields(src, dst, case_sensitive)
        if pairs is None:
            raise ValueError(f"{where}: struct fields do not match by name")  # the plan checked them
        fields = [
            _checked(
                col.getField(v.name),
                v.dataType,
                c.dataType,
                f"{where} field '{c.name}'",
                text,
                case_sensitive,
            ).alias(c.name)
            for v, c in pairs
        ]
        return F.when(col.isNull(), F.lit(None).cast(dst)).otherwise(F.struct(*fields))
    if isinstance(src, ArrayType) and isinstance(dst, ArrayType):
        element, target = src.elementType, dst.elementType
        return F.transform(
            col, lambda x: _checked(x, element, target, f"{where} element", text, case_sensitive)
        )
    if isinstance(src, MapType) and isinstance(dst, MapType):
        return _checked_map(col, src, dst, where, text, case_sensitive)
    casted = col.try_cast(dst)
    return _raise_where(
        col.isNotNull() & casted.isNull(), col, f"{where} ({dst.simpleString()})", text, casted
    )


def _checked_map(
    col: Column, src: MapType, dst: MapType, where: str, text: str, case_sensitive: bool
) -> Column:
    """A map's values, then its keys, checked and cast; two keys that become one key fail too
    (naming the column, where Spark's own duplicate-key error would not)."""
    out = col
    if src.valueType != dst.valueType:
        vt, dvt = src.valueType, dst.valueType
        out = F.transform_values(
            out, lambda _, v: _checked(v, vt, dvt, f"{where} value", text, case_sensitive)
        )
    if src.keyType == dst.keyType:
        return out
    kt, dkt = src.keyType, dst.keyType

    def key(k: Column) -> Column:
        return _checked(k, kt, dkt, f"{where} key", text, case_sensitive)

    collide = F.size(F.array_distinct(F.transform(F.map_keys(col), key))) < F.size(col)
    what = f"{where} key ({dkt.simpleString()}): two keys cast to the same key"
    return _raise_where(collide, col, what, text, F.transform_keys(out, lambda k, _: key(k)))


def _nullable(dtype: DataType) -> DataType:
    """``dtype`` with every field, element and value nullable and no field metadata."""
    if isinstance(dtype, StructType):
        return StructType([StructField(f.name, _nullable(f.dataType), True) for f in dtype.fields])
    if isinstance(dtype, ArrayType):
        return ArrayType(_nullable(dtype.elementType), True)
    if isinstance(dtype, MapType):
        return MapType(_nullable(dtype.keyType), _nullable(dtype.valueType), True)
    return dtype


def match_fields(
    value: StructType, column: StructType, case_sensitive: bool
) -> list[tuple[StructField, StructField]] | None:
    """(value field, column field) for each field of ``column``, matched by name; None unless
    both have the same field names, in any order (letter case ignored unless ``case_sensitive``)."""
    key = (lambda n: n) if case_sensitive else str.lower
    by_name = {key(f.name): f for f in value.fields}
    wanted = [key(c.name) for c in column.fields]
    if len(by_name) != len(value.fields) or len(set(wanted)) != len(wanted) or set(wanted) != set(by_name):
        return None
    return [(by_name[key(c.name)], c) for c in column.fields]


def field_mismatches(value: DataType, column: DataType, where: str, case_sensitive: bool) -> list[str]:
    """Where, at any depth, a struct of ``value`` has other field names than the struct of
    ``column`` it is written into (``where``: "column 'k'"); one sentence each."""
    if isinstance(value, StructType) and isinstance(column, StructType):
        pairs = match_fields(value, column, case_sensitive)
        if pairs is None:
            return [_names_differ(value, column, where, case_sensitive)]
        out = []
        for v, c in pairs:
            out += field_mismatches(v.dataType, c.dataType, f"{where} field '{c.name}'", case_sensitive)
        return out
    if isinstance(value, ArrayType) and isinstance(column, ArrayType):
        return field_mismatches(value.elementType, column.elementType, f"{where} element", case_sensitive)
    if isinstance(value, MapType) and isinstance(column, MapType):
        return field_mismatches(
            value.keyType, column.keyType, f"{where} key", case_sensitive
        ) + field_mismatches(value.valueType, column.valueType, f"{where} value", case_sensitive)
    return []


def _names_differ(value: StructType, column: StructType, where: str, case_sensitive: bool) -> str:
    key = (lambda n: n) if case_sensitive else str.lower
    have, want = [f.name for f in value.fields], [f.name for f in column.fields]
    missing = [n for n in want if key(n) not in {key(h) for h in have}]
    extra = [n for n in have if key(n) not in {key(w) for w in want}]
    twins = sorted({n for n in have if [key(h) for h in have].count(key(n)) > 1})
    details = []
    if missing:
        details.append(f"missing {', '.join(missing)}")
    if extra:
        details.append(f"not in the column: {', '.join(extra)}")
    if twins:
        details.append(f"names that differ only in letter case: {', '.join(twins)}")
    return (
        f"{where} has struct fields ({', '.join(want)}) but the value has ({', '.join(have)}): "
        + "; ".join(details)
    )


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


BINARY_COLLATION = "UTF8_BINARY"


def holds_map_or_variant(dtype: DataType) -> bool:
    """Whether ``dtype`` holds a map or a variant (which ``<=>`` refuses) at any depth."""
    return _holds(dtype, lambda t: isinstance(t, (MapType, VariantType)))


def collated(dtype: DataType) -> bool:
    """Whether ``dtype`` is a string of a collation other than binary, under which ``=`` and
    ``<=>`` find 'ABC' and 'abc' equal (UTF8_LCASE) although they are other values."""
    return isinstance(dtype, StringType) and getattr(dtype, "collation", BINARY_COLLATION) != BINARY_COLLATION


def holds_collated(dtype: DataType) -> bool:
    return _holds(dtype, collated)


def needs_comparable(dtype: DataType) -> bool:
    """Whether the no-op check must compare ``dtype`` in another form (:func:`comparable`)."""
    return holds_map_or_variant(dtype) or holds_collated(dtype)


def _holds(dtype: DataType, found: Callable[[DataType], bool]) -> bool:
    if found(dtype):
        return True
    if isinstance(dtype, ArrayType):
        return _holds(dtype.elementType, found)
    if isinstance(dtype, MapType):
        return _holds(dtype.keyType, found) or _holds(dtype.valueType, found)
    if isinstance(dtype, StructType):
        return any(_holds(f.dataType, found) for f in dtype.fields)
    return False


def comparable(col: Column, dtype: DataType, side: str) -> Column:
    """``col`` in a form that ``<=>`` accepts: every map and variant (at any depth) rewritten,
    every string of another collation compared as binary.

    Spark cannot compare maps; two maps are equal when they hold the same keys with equal
    values, whatever their order, which is what sorted entry arrays compare. Nor can it
    compare variants: see :func:`_variant_comparable`. ``side`` ("old" or "new") tells the
    two sides of the no-op check apart where a variant cannot be compared exactly: there the
    forms always differ, so the update acts (an update too many is only work; a skipped one
    would lose data).
    """
    if not needs_comparable(dtype):
        return col
    if collated(dtype):  # an update to 'abc' writes 'abc', also where 'ABC' collates equal
        return F.collate(col, BINARY_COLLATION)
    if isinstance(dtype, VariantType):
        return _variant_comparable(col, side, VARIANT_LEVELS)
    if isinstance(dtype, MapType):
        key_type, value_type = dtype.keyType, dtype.valueType
        return F.array_sort(
            F.transform(
                F.map_entries(col),
                lambda e: F.struct(
                    comparable(e["key"], key_type, side).alias("k"),
                    comparable(e["value"], value_type, side).alias("v"),
                ),
            )
        )
    if isinstance(dtype, ArrayType):
        element = dtype.elementType
        return F.transform(col, lambda x: comparable(x, element, side))
    assert isinstance(dtype, StructType)
    fields = [comparable(col[f.name], f.dataType, side).alias(f.name) for f in dtype.fields]
    return F.when(col.isNull(), F.lit(None)).otherwise(F.struct(*fields))


def _variant_comparable(v: Column, side: str, levels: int) -> Column:
    """A variant as a comparable value: equal for two variants only if they hold the same value.

    A scalar is its JSON text with its type (``schema_of_variant``): the text alone does not
    tell the string "2024-01-01" from that date, a double from a decimal or an integer from a
    DECIMAL(p,0). (Integers of different widths with the same value are the same; the text
    carries a decimal's scale and a timestamp's zone offset.) An array is compared element by
    element and an object field by field (sorted by key, so key order does not matter), down
    ``levels`` container levels. Deeper, a value is compared as one piece by its text and
    type, which is exact unless an array there mixes element types that print alike: then
    ``schema_of_variant`` shows their common type (DOUBLE, FLOAT, DECIMAL, VARIANT) and the
    value counts as changed (see :func:`comparable`).
    """
    scalar = [F.to_json(v).alias("json"), F.schema_of_variant(v).alias("type")]
    if levels == 0:
        schema = F.schema_of_variant(v)
        unsure = schema.contains("ARRAY<") & schema.rlike("DOUBLE|FLOAT|DECIMAL|VARIANT")
        return F.when(v.isNotNull(), F.struct(*scalar, F.when(unsure, F.lit(side)).alias("unsure")))
    array = v.try_cast(ArrayType(VariantType()))
    obj = v.try_cast(MapType(StringType(), VariantType()))
    deeper = levels - 1
    fields = F.transform(
        F.map_entries(obj),
        lambda e: F.struct(e["key"].alias("k"), _variant_comparable(e["value"], side, deeper).alias("v")),
    )
    return F.when(
        v.isNotNull(),
        F.struct(
            F.when(array.isNull() & obj.isNull(), F.struct(*scalar)).alias("scalar"),
            F.transform(array, lambda e: _variant_comparable(e, side, deeper)).alias("array"),
            F.array_sort(fields).alias("object"),
        ),
    )


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


def old_sql(plan: ResolvedMerge, name: str) -> str | None:
    """:func:`old_value` as SQL text (None for a NULL of a type SQL cannot spell)."""
    for f in plan.new_fields:
        if f.name == name:
            return null_sql(f.dataType)
    return q(plan.ta, name)


def _index_sql(kind: str) -> str:
    """:func:`clause_index` as SQL text."""
    return f"shiftright({q(KINDS[kind])}, 1)"


# Each kind of clause, as the spec names it -> the column :func:`decide` adds for it.
KINDS = {
    "matched": MATCHED_CLAUSE,
    "not_matched_by_source": NMBS_CLAUSE,
    "not_matched": NOT_MATCHED_CLAUSE,
}


def _clauses(plan: ResolvedMerge, kind: str) -> Sequence[ActingClause]:
    return {
        "matched": plan.matched,
        "not_matched_by_source": plan.not_matched_by_source,
        "not_matched": plan.not_matched,
    }[kind]


def decide(
    plan: ResolvedMerge,
    rows: DataFrame,
    kinds: Sequence[str],
    acts: bool = False,
    only: Mapping[str, Column] | None = None,
) -> DataFrame:
    """``rows`` with a column per kind of clause (:data:`KINDS`): which clause of that kind acts.

    The column holds ``2 * i + a``: ``i`` the index of the first clause whose condition holds
    (NULL counts as false; :data:`NO_ACTION` if none, or if the row is not of that kind:
    matched needs a source row, not_matched_by_source none), ``a`` 1 if that clause really
    acts — with ``acts``, an update that changes nothing does not when
    ``skip_unchanged_updates`` is on; without, ``a`` is 1 for every clause. (One integer, not
    a struct: building a struct per clause costs several py4j round trips, which hundreds of
    clauses add up to seconds.)

    Computed once per row, as a column: every expression that needs the clause compares with
    it (:func:`clause_index`), so each output column's CASE holds each clause once. Spark
    does not inline a non-cheap column referenced many times into the projection that reads
    it (CollapseProject), but a filter pushed below it gets the column's expression at each
    reference: filters use :func:`chosen` and :func:`acting`, which read each column at most
    twice.

    ``only``: per kind, a condition outside which no clause of that kind is considered (its
    conditions are not evaluated there), for rows of several kinds side by side.
    """
    columns = []
    for kind in kinds:
        decided = _built(plan, ("decision", kind, acts), partial(_decision, plan, kind, acts))
        if only is not None and kind in only:
            decided = F.when(only[kind], decided).otherwise(F.lit(2 * NO_ACTION)).alias(KINDS[kind])
        columns.append(decided)
    return rows.select("*", *columns)


def _decision(plan: ResolvedMerge, kind: str, acts: bool) -> Column:
    text = _decision_sql(plan, kind, acts)
    if text is not None:
        return F.expr(text).alias(KINDS[kind])
    none = F.lit(2 * NO_ACTION)
    expr = None
    for rc in _clauses(plan, kind):
        cond = rc.condition if rc.condition is not None else F.lit(True)
        if acts and rc.action == "update" and plan.spec.skip_unchanged_updates:
            value = F.lit(2 * rc.index) + changed(plan, rc).cast("int")
        else:
            value = F.lit(2 * rc.index + 1)
        expr = F.when(cond, value) if expr is None else expr.when(cond, value)
    decided = none if expr is None else expr.otherwise(none)
    if kind != "not_matched":  # matched rows have a source row, not_matched_by_source ones none
        src = src_present(plan)
        decided = F.when(src if kind == "matched" else ~src, decided).otherwise(none)
    return decided.alias(KINDS[kind])


def _decision_sql(plan: ResolvedMerge, kind: str, acts: bool) -> str | None:
    """:func:`_decision` as one SQL expression (one round trip, where a Column per clause costs
    several), or None where a condition or value is known only as a Column."""
    branches = []
    for rc in _clauses(plan, kind):
        if rc.condition is not None and rc.condition_sql is None:
            return None
        cond = "true" if rc.condition is None else f"({rc.condition_sql})"
        if acts and rc.action == "update" and plan.spec.skip_unchanged_updates:
            diff = changed_sql(plan, rc)
            if diff is None:
                return None
            value = f"{2 * rc.index} + CAST(({diff}) AS INT)"
        else:
            value = str(2 * rc.index + 1)
        branches.append(f"WHEN {cond} THEN {value}")
    none = str(2 * NO_ACTION)
    decided = f"CASE {' '.join(branches)} ELSE {none} END" if branches else none
    if kind != "not_matched":  # matched rows have a source row, not_matched_by_source ones none
        present = f"{q(plan.sa, SRC_PRESENT)} IS {'NOT ' if kind == 'matched' else ''}NULL"
        decided = f"CASE WHEN {present} THEN {decided} ELSE {none} END"
    return decided


def clause_index(kind: str) -> Column:
    """The index of the clause of ``kind`` that acts on the row (from the column of :func:`decide`)."""
    return F.shiftright(F.col(q(KINDS[kind])), 1)


def clause_acts(kind: str) -> Column:
    """Whether the clause of ``kind`` at :func:`clause_index` really acts (rows decided with ``acts``)."""
    return (F.col(q(KINDS[kind])) % 2) == 1


def chosen(plan: ResolvedMerge, kind: str, action: str) -> Column:
    """True where the first clause of ``kind`` whose condition holds has ``action`` (never NULL),
    whether or not an update changes anything."""
    indexes = [str(rc.index) for rc in _clauses(plan, kind) if rc.action == action]
    if not indexes:
        return F.lit(False)
    # One parse instead of a py4j call per index.
    return F.expr(f"coalesce(shiftright({q(KINDS[kind])}, 1) IN ({', '.join(indexes)}), false)")


def acting(plan: ResolvedMerge, kind: str, action: str) -> Column:
    """True where a clause of ``kind`` with ``action`` really acts on the row (never NULL): for
    updates with ``skip_unchanged_updates``, the rows were decided with ``acts`` (see
    :func:`decide`)."""
    out = chosen(plan, kind, action)
    if (
        action == "update"
        and plan.spec.skip_unchanged_updates
        and any(rc.action == "update" for rc in _clauses(plan, kind))
    ):
        out = out & F.coalesce(clause_acts(kind), F.lit(False))
    return out


def changed_sql(plan: ResolvedMerge, rc: ActingClause) -> str | None:
    """:func:`changed` as SQL text, or None where a value is known only as a Column or needs
    :func:`comparable` (maps, variants)."""
    types = {f.name: f.dataType for f in plan.output_fields}
    diffs = []
    for name in rc.values:
        text = rc.values_sql.get(name)
        old = old_sql(plan, name)
        if text is None or old is None or needs_comparable(types[name]):
            return None
        diffs.append(f"NOT ({old} <=> ({text}))")
    return " OR ".join(diffs) if diffs else "false"


def changed(plan: ResolvedMerge, rc: ActingClause) -> Column:
    """True if the update writes a value different (null-safe) from the old one."""
    text = changed_sql(plan, rc)
    if text is not None:
        return F.expr(text)
    types = {f.name: f.dataType for f in plan.output_fields}
    diffs = [
        ~comparable(old_value(plan, name), types[name], "old").eqNullSafe(
            comparable(value, types[name], "new")
        )
        for name, value in rc.values.items()
    ]
    if not diffs:
        return F.lit(False)
    out = diffs[0]
    for d in diffs[1:]:
        out = out | d
    return out


# -- output values -------------------------------------------------------------------------


def output_value(plan: ResolvedMerge, name: str) -> Column:
    """New value of ``name`` for a target-source joined row (decided by :func:`decide` for
    matched and not_matched_by_source): the value the acting update clause writes, else the
    old value."""

    def build() -> Column:
        text = _output_sql(plan, name)
        if text is not None:
            return F.expr(text)
        expr = None
        for cond, rc in _update_choices(plan):
            if name in rc.values:
                expr = F.when(cond, rc.values[name]) if expr is None else expr.when(cond, rc.values[name])
        old = old_value(plan, name)
        return old if expr is None else expr.otherwise(old)

    return _built(plan, ("value", name), build)


def _output_sql(plan: ResolvedMerge, name: str) -> str | None:
    """:func:`output_value` as SQL text, or None where a value is known only as a Column."""
    branches = []
    for kind in ("matched", "not_matched_by_source"):
        for rc in _clauses(plan, kind):
            if rc.action != "update" or name not in rc.values:
                continue
            text = rc.values_sql.get(name)
            if text is None:
                return None
            branches.append(f"WHEN {_index_sql(kind)} = {rc.index} THEN ({text})")
    old = old_sql(plan, name)
    if old is None:
        return None
    return f"CASE {' '.join(branches)} ELSE {old} END" if branches else old


def _update_choices(plan: ResolvedMerge) -> list[tuple[Column, ActingClause]]:
    """(the clause is the one that acts on the row, clause) of every update clause; shared by
    every output column's CASE."""

    def build() -> list[tuple[Column, ActingClause]]:
        out = []
        for kind in ("matched", "not_matched_by_source"):
            idx = clause_index(kind)
            out += [(idx == rc.index, rc) for rc in _clauses(plan, kind) if rc.action == "update"]
        return out

    return _built(plan, ("update_choices",), build)


def inserts(plan: ResolvedMerge, candidates: DataFrame) -> DataFrame:
    """The rows the not_matched clauses insert for ``candidates`` (source rows, aliased as the
    source, that match no target row): each output column's value (NULL where the acting
    clause sets none), named after the column."""
    idx = clause_index("not_matched")
    return decide(plan, candidates, ["not_matched"]).where(idx != NO_ACTION).select(*insert_values(plan))


def insert_values_sql(plan: ResolvedMerge) -> list[str] | None:
    """:func:`insert_values` as SQL text (without the names), or None where a value is known
    only as a Column."""
    return _built(plan, ("insert_values_sql",), partial(_insert_values_sql, plan))


def _insert_values_sql(plan: ResolvedMerge) -> list[str] | None:
    clauses = list(plan.not_matched)
    only = clauses[0] if len(clauses) == 1 and clauses[0].condition is None else None
    out = []
    for f in plan.output_fields:
        null = null_sql(f.dataType)
        if null is None:
            return None
        branches = []
        for rc in clauses:
            if f.name not in rc.values:
                value = null
            elif (text := rc.values_sql.get(f.name)) is not None:
                value = f"({text})"
            else:
                return None
            branches.append((rc.index, value))
        if only is not None:
            out.append(branches[0][1])
        elif branches:
            cases = " ".join(f"WHEN {_index_sql('not_matched')} = {i} THEN {v}" for i, v in branches)
            out.append(f"CASE {cases} ELSE {null} END")
        else:
            out.append(null)
    return out


def insert_values(plan: ResolvedMerge) -> list[Column]:
    """Each output column's value in a row the not_matched clauses insert (rows decided by
    :func:`decide`; NULL where the acting clause sets none), named after the column."""
    idx = clause_index("not_matched")

    def build() -> list[Column]:
        texts = insert_values_sql(plan)
        if texts is not None:  # one round trip per column
            return [F.expr(f"{t} AS {q(f.name)}") for t, f in zip(texts, plan.output_fields, strict=True)]
        clauses = list(plan.not_matched)
        # One clause without a condition inserts every row that matched nothing: its values
        # need no CASE (a CASE per column costs round trips that an insert-only merge feels).
        only = clauses[0] if len(clauses) == 1 and clauses[0].condition is None else None
        chosen = [(idx == rc.index, rc) for rc in clauses]
        out = []
        for f in plan.output_fields:
            if only is not None and f.name in only.values:
                out.append(only.values[f.name].alias(f.name))
                continue
            null = F.lit(None).cast(f.dataType)
            expr = None
            for cond, rc in chosen:
                value = rc.values.get(f.name, null)
                expr = F.when(cond, value) if expr is None else expr.when(cond, value)
            out.append((null if expr is None else expr).alias(f.name))
        return out

    return _built(plan, ("insert_values",), build)


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
    # CHAR(n) columns compare padded in a check, as Spark compares them in a table: the values
    # are stored padded ('ab '), and `c IN ('ab')` holds for them only with the column's type
    # on it. Their own metadata goes back after the check.
    chars = {f.name: f.metadata for f in plan.output_fields if is_char(f) and f.name in rows.columns}
    had = {name: rows.schema[name].metadata for name in chars}
    for name, metadata in chars.items():
        rows = rows.withMetadata(name, metadata)
    sample = written_key_sample(plan)
    raised = None
    for i, (_, violated) in enumerate(plan.constraints):
        when = violated if checked is None else checked & violated
        message = F.concat(F.lit(f"{CONSTRAINT_MARK}[{i}|"), sample, F.lit("]"))
        fail = F.raise_error(message)
        raised = F.when(when, fail) if raised is None else raised.when(when, fail)
    assert raised is not None
    kept = rows.where(F.coalesce(raised.cast("boolean"), F.lit(True)))
    for name, metadata in had.items():
        kept = kept.withMetadata(name, metadata)
    return kept


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
