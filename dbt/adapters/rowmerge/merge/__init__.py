"""The row-level MERGE engine: pure PySpark, no dbt imports (importable on its own).

Public API (stable): ``run_merge(spark, spec)``, ``dry_run(spark, spec)``, ``recover(spark, table_name)``,
``history(spark, table_name, limit=None)``, ``start_history(spark, table_name, ...)``,
``rebind(spark, table_name)``, ``replace_table(spark, table_name, rows, ...)`` (a full
refresh as a version),
``initial_rows(spark, spec)``, ``table_stats(spark, table_name)``,
``optimize(spark, table_name, ...)`` (compact small files; a version of its own),
``as_of(spark, table_name, version=None, timestamp=None)`` (the table at a past version),
``restore(spark, table_name, version=None, timestamp=None, ...)`` (its rows again, as a version),
``vacuum(spark, table_name, ...)`` (delete the files kept past retention),
``MergeResult``, ``DryRunReport``, ``Recovery`` and the error classes.
"""

from .as_of import as_of
from .errors import (
    CardinalityViolation,
    CastError,
    ConcurrentMergeError,
    ConstraintViolation,
    DeleteLimitError,
    EmptySourceError,
    ExecutionError,
    JournalError,
    MergeCommittedError,
    MergeError,
    MergeSpecError,
    StorageError,
    UnreadableFileError,
    UnsafeVacuumError,
    UnsupportedTableError,
)
from .initial import initial_rows
from .journal import Recovery
from .metrics import DryRunReport, MergeResult
from .optimize import OptimizeResult, optimize
from .replace import NO_JOURNAL, Replaced, replace_problem, replace_table
from .reshape import finish_refresh
from .restore import RestoreResult, restore
from .run import changes_range, dry_run, history, rebind, recover, run_merge, start_history, table_stats
from .spec import MergeSpec, merge_sql, parse_spec, static_problems
from .vacuum import VacuumResult, vacuum

__all__ = [
    "NO_JOURNAL",
    "OptimizeResult",
    "CardinalityViolation",
    "CastError",
    "ConcurrentMergeError",
    "ConstraintViolation",
    "DryRunReport",
    "DeleteLimitError",
    "EmptySourceError",
    "ExecutionError",
    "JournalError",
    "MergeCommittedError",
    "MergeError",
    "MergeResult",
    "MergeSpec",
    "MergeSpecError",
    "Recovery",
    "Replaced",
    "RestoreResult",
    "StorageError",
    "UnreadableFileError",
    "UnsafeVacuumError",
    "UnsupportedTableError",
    "VacuumResult",
    "as_of",
    "changes_range",
    "dry_run",
    "finish_refresh",
    "history",
    "initial_rows",
    "optimize",
    "merge_sql",
    "parse_spec",
    "rebind",
    "replace_problem",
    "replace_table",
    "recover",
    "restore",
    "run_merge",
    "start_history",
    "static_problems",
    "table_stats",
    "vacuum",
]
