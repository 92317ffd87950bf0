"""RowMergeAdapter: dbt-spark's adapter plus a few ``@available`` hooks for the macros.

Each hook is a few lines: it hands plain values to the engine (which never imports dbt)
and turns engine results and errors into what dbt expects.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from dbt.adapters.base import available
from dbt.adapters.contracts.connection import AdapterResponse
from dbt.adapters.events.logging import AdapterLogger
from dbt.adapters.spark.impl import SparkAdapter
from dbt_common.exceptions import CompilationError, DbtRuntimeError

from dbt.adapters.rowmerge import merge
from dbt.adapters.rowmerge.connections import RowMergeConnectionManager
from dbt.adapters.rowmerge.session import session_for

logger = AdapterLogger("RowMerge")


class _ToDbtLog(logging.Handler):
    """Forward the engine's phase log lines (logger ``rowmerge``) to dbt's log."""

    def emit(self, record: logging.LogRecord) -> None:
        logger.info(record.getMessage())


_engine_logger = logging.getLogger("rowmerge")
if not any(isinstance(h, _ToDbtLog) for h in _engine_logger.handlers):
    _engine_logger.addHandler(_ToDbtLog())
    _engine_logger.setLevel(logging.INFO)
    _engine_logger.propagate = False


@dataclass
class RowMergeAdapterResponse(AdapterResponse):
    """The run line (``_message``) plus every merge metric, for run_results.json."""

    version: int | None = None
    metrics: dict[str, int] = field(default_factory=dict)
    spec: dict[str, Any] = field(default_factory=dict)  # the compiled clause spec, for debugging


def config_error_message(relation: str, problems: list[str]) -> str:
    """One format for every config error, from Jinja or from the engine."""
    if len(problems) == 1:
        return f"Invalid row_level_merge config for {relation}: {problems[0]}"
    listed = "\n  - ".join(problems)
    return f"Invalid row_level_merge config for {relation} ({len(problems)} problems):\n  - {listed}"


class RowMergeAdapter(SparkAdapter):
    ConnectionManager = RowMergeConnectionManager  # type: ignore[assignment]

    def valid_incremental_strategies(self) -> list[str]:
        return ["append", "insert_overwrite", "microbatch", "merge", "row_level_merge"]

    @available
    def rowmerge_spec_problems(self, spec: dict[str, Any]) -> list[str]:
        """Static problems of a compiled spec (same messages the engine raises)."""
        return merge.static_problems(spec)

    @available
    def rowmerge_config_error(self, relation: str, problems: list[str]) -> str:
        return config_error_message(str(relation), list(problems))

    @available
    def rowmerge_run_merge(self, spec: dict[str, Any]) -> RowMergeAdapterResponse:
        spark = session_for(self.config.credentials)  # type: ignore[arg-type]
        try:
            result = merge.run_merge(spark, spec)
        except merge.MergeSpecError as exc:
            raise CompilationError(config_error_message(spec["target"], exc.problems)) from None
        except (merge.MergeError, merge.MergeCommittedError) as exc:
            raise DbtRuntimeError(str(exc)) from None
        m = result.metrics
        return RowMergeAdapterResponse(
            _message=result.summary(),
            code="MERGE",
            rows_affected=m["numTargetRowsInserted"] + m["numTargetRowsUpdated"] + m["numTargetRowsDeleted"],
            version=result.version,
            metrics=m,
            spec=dict(spec),
        )

    @available
    def rowmerge_recover(self, relation: str) -> dict[str, Any]:
        spark = session_for(self.config.credentials)  # type: ignore[arg-type]
        try:
            done = merge.recover(spark, str(relation))
        except merge.MergeError as exc:
            raise DbtRuntimeError(str(exc)) from None
        return {
            "rolled_forward": done.rolled_forward,
            "rolled_back": done.rolled_back,
            "message": done.describe(),
        }

    @available
    def rowmerge_history(self, relation: str, limit: int | None = None) -> list[dict[str, Any]]:
        spark = session_for(self.config.credentials)  # type: ignore[arg-type]
        try:
            return merge.history(spark, str(relation), limit)
        except merge.MergeError as exc:
            raise DbtRuntimeError(str(exc)) from None

    @available
    def rowmerge_version_count(self, relation: str) -> int:
        """How many versions the table's journal holds (0 if none, or not a mergeable table)."""
        spark = session_for(self.config.credentials)  # type: ignore[arg-type]
        try:
            return len(merge.history(spark, str(relation)))
        except merge.MergeError:
            return 0

    @available
    def rowmerge_start_history(
        self, relation: str, operation: str, changes_table: str | None = None
    ) -> dict[str, Any]:
        """Version 0 of a table dbt just created or rebuilt (and an empty change feed)."""
        spark = session_for(self.config.credentials)  # type: ignore[arg-type]
        try:
            return merge.start_history(spark, str(relation), operation, changes_table or None)
        except merge.MergeError as exc:
            raise DbtRuntimeError(str(exc)) from None
