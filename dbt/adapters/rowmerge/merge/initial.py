"""The first run: the rows a merge into an empty table would insert.

dbt's first run and ``--full-refresh`` build the table from the model's rows. Built from
*all* of them, the table would hold rows the merge never inserts (a source row failing
``not_matched_condition``, or one a ``delete_condition`` deletes), and ``values`` maps would
not apply: the first run would behave unlike every later one. A merge into an empty table
with the model's columns matches nothing, so only its ``not_matched`` clauses act; this
module resolves the spec against exactly that table and returns the rows those clauses
insert, for dbt to create the table from.

Resolving the plan also checks the config on the first run, before the table exists: ``on``
and every condition must parse, key, ``set``/``values`` and ``cluster_by`` columns must be
the model's, insert clauses must resolve over the source. A spec without any ``not_matched``
clause (update- or delete-only) creates the table from every row of the model: an insert-free merge
into an empty table would create an empty table that no later merge could fill. One
allowance: a clause may read a column the model selects only on incremental runs
(``is_incremental()``), so an unknown column is left for the first merge to report.
``matched`` and ``not_matched_by_source`` clauses cannot act on an empty table anyway; if a
``not_matched`` clause reads such a column, the first run cannot evaluate it and creates the
table from every row of the model, as dbt does, with a warning naming the clause and the
column.
"""

from __future__ import annotations

import re
from functools import reduce

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from .errors import ConstraintViolation
from .journal import utc_now
from .notices import warn
from .optimize import clustering_columns
from .outputs import inserts, q, written_key_sample
from .plan import MergePlan, build_plan
from .source import read_source
from .spec import MergeSpec
from .table import TargetTable, sql_name

_UNKNOWN_COLUMN = re.compile(r"with name (`[^ ]+`) cannot be resolved")


def initial_rows(spark: SparkSession, spec: MergeSpec) -> DataFrame:
    """The rows a merge of ``spec.source`` into an empty ``spec.target`` inserts.

    The target does not need to exist: it is taken to have the source's columns (what dbt
    creates from the model). Raises :class:`.MergeSpecError` listing every problem.
    """
    source = read_source(spark, spec.source)
    empty = TargetTable(
        name=spec.target,
        ident=sql_name(spec.target),
        location="",
        file_format="parquet",
        schema=source.schema,
        partition_columns=(),
    )
    target_df = spark.createDataFrame([], source.schema)
    plan = build_plan(spec, empty, source, target_df, utc_now(), first_run=True)
    if spec.upkeep.cluster_by is not None:
        # a cluster_by the table will not have would be refused only by the first merge
        clustering_columns(empty, spec.upkeep.cluster_by)
    unresolved = [(what, reason) for kind, what, reason in plan.deferred if kind == "not_matched"]
    if unresolved:
        warn(_every_row_warning(spec.target, unresolved))
        rows = source
    elif not plan.not_matched:
        # No insert clause (an update- or delete-only model): a merge into an empty table
        # would create nothing, and later merges would have no row to act on. Load them all.
        rows = source
    else:
        rows = inserts(plan, source.alias(plan.sa))
    _check_rows(plan, rows)
    return rows


def _every_row_warning(target: str, unresolved: list[tuple[str, str]]) -> str:
    """Why the first run of ``target`` keeps every row: the insert clauses it could not evaluate."""
    parts = []
    for what, reason in unresolved:
        column = _UNKNOWN_COLUMN.search(reason)
        parts.append(f"{what} reads {column.group(1) if column else 'a column'}")
    return (
        f"first run of {target}: the table is created from every row of the model, because "
        f"{'; '.join(parts)}, which the model does not select on this run. Later runs apply the "
        "clause; select the column on every run (e.g. a constant in the first-run branch) to "
        "apply it on the first run too."
    )


def _check_rows(plan: MergePlan, rows: DataFrame) -> None:
    """One job over the rows the table is created from, before dbt creates it: raise
    ConstraintViolation if a row breaks a constraint (a failure inside dbt's CREATE TABLE would
    leave Spark's raw message, not ours), and warn about rows with a NULL key, which no later
    merge can match (the first run warns as every merge does)."""
    keys = [t for t, _ in plan.key_pairs]
    if not plan.constraints and not keys:
        return
    sample = written_key_sample(plan)
    null_key = reduce(lambda a, b: a | b, [F.col(q(k)).isNull() for k in keys]) if keys else F.lit(False)
    found = rows.select(
        *[F.count(F.when(violated, 1)).alias(f"n{i}") for i, (_, violated) in enumerate(plan.constraints)],
        *[
            F.first(F.when(violated, sample), ignorenulls=True).alias(f"s{i}")
            for i, (_, violated) in enumerate(plan.constraints)
        ],
        F.count(F.when(null_key, 1)).alias("null_keys"),
    ).collect()[0]
    for i, (constraint, _) in enumerate(plan.constraints):
        if found[f"n{i}"]:
            raise ConstraintViolation(
                plan.target.name, constraint.label, found[f"s{i}"], found[f"n{i}"], True
            )
    if found["null_keys"]:
        then = "; an insert clause inserts such rows again on every run" if plan.not_matched else ""
        warn(
            f"first run of {plan.target.name}: {found['null_keys']} row(s) have a NULL in a key column "
            f"({', '.join(keys)}): NULL equals nothing in `on`, so no later merge matches them{then}. "
            "Filter them out or coalesce the key in the model SQL."
        )
