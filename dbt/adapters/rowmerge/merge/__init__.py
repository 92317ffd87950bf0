"""The row-level MERGE engine: pure PySpark, no dbt imports (importable on its own).

Public API (stable): ``run_merge(spark, spec)``, ``recover(spark, table_name)``,
``history(spark, table_name, limit=None)``, ``MergeResult`` and the error classes.
"""

from .errors import (
    CardinalityViolation,
    CastError,
    ConcurrentMergeError,
    MergeError,
    MergeSpecError,
    UnsupportedTableError,
)
from .metrics import MergeResult
from .run import history, recover, run_merge
from .spec import MergeSpec, parse_spec, static_problems

__all__ = [
    "CardinalityViolation",
    "CastError",
    "ConcurrentMergeError",
    "MergeError",
    "MergeResult",
    "MergeSpec",
    "MergeSpecError",
    "UnsupportedTableError",
    "history",
    "parse_spec",
    "recover",
    "run_merge",
    "static_problems",
]
