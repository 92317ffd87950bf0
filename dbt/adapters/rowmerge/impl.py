"""RowMergeAdapter: dbt-spark's adapter plus a few ``@available`` hooks for the macros.

Each hook is a few lines: it hands plain values to the engine (which never imports dbt)
and turns engine results and errors into what dbt expects.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from dbt.adapters.base import available
from dbt.adapters.contracts.connection import AdapterResponse
from dbt.adapters.events.logging import AdapterLogger
from dbt.adapters.events.types import AdapterEventWarning
from dbt.adapters.spark.impl import SparkAdapter
from dbt_common.events.contextvars import get_node_info
from dbt_common.events.functions import warn_or_error
from dbt_common.exceptions import CompilationError, DbtRuntimeError
from pyspark.sql import SparkSession

from dbt.adapters.rowmerge import merge, model_config
from dbt.adapters.rowmerge.connections import RowMergeConnectionManager
from dbt.adapters.rowmerge.merge.notices import warnings_to
from dbt.adapters.rowmerge.merge.spec import DEFAULT_LOCK_TIMEOUT_S
from dbt.adapters.rowmerge.merge.sqltext import parse_name, same_table
from dbt.adapters.rowmerge.session import session_for

logger = AdapterLogger("RowMerge")
T = TypeVar("T")


def _relation_name(relation: Any) -> str:
    """A relation as SQL names it (a dbt Relation renders itself; a string is taken as is)."""
    return relation.render() if hasattr(relation, "render") else str(relation)


def _lock_timeout(value: Any) -> Any:
    """A run-operation's ``lock_timeout_s`` (None: the engine's default); a quoted number from
    ``--args`` is read as the number, anything else left for the engine to refuse by name."""
    if value is None:
        return DEFAULT_LOCK_TIMEOUT_S
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def _flag(value: Any, name: str) -> bool:
    """A run-operation's true/false argument: a boolean, or the words (``--args`` quoted them);
    anything else refused naming the argument, rather than read as true."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise merge.MergeSpecError([f"`{name}` must be true or false, got {value!r}"])


class _ToDbtLog(logging.Handler):
    """Forward the engine's log lines (logger ``rowmerge``) to dbt's log: its phase lines
    ("materializing the source", "scanning 3 of 64 files", ...) at debug level (the console
    shows dbt's own run line per model; ``--log-level debug`` shows these too), warnings as
    warnings. Inside an engine call warnings and progress notes bypass the log and reach dbt as
    events (:meth:`RowMergeAdapter._engine`)."""

    def emit(self, record: logging.LogRecord) -> None:
        # dbt's logger already says "RowMerge adapter: "; drop the engine's own prefix.
        message = record.getMessage().removeprefix("rowmerge: ")
        if record.levelno >= logging.WARNING:
            logger.warning(message)
        else:
            logger.debug(message)


_engine_logger = logging.getLogger("rowmerge")
if not any(isinstance(h, _ToDbtLog) for h in _engine_logger.handlers):
    _engine_logger.addHandler(_ToDbtLog())
    _engine_logger.setLevel(logging.INFO)
    _engine_logger.propagate = False


def _dbt_warning(message: str) -> None:
    """An engine warning as a dbt warning: shown as one, and an error under ``--warn-error``
    (or ``--warn-error-options '{"error": ["AdapterEventWarning"]}'``)."""
    warn_or_error(AdapterEventWarning(name=logger.name, base_msg=message, args=[], node_info=get_node_info()))


@dataclass
class RowMergeAdapterResponse(AdapterResponse):
    """The run line (``_message``) plus every merge metric, for run_results.json."""

    version: int | None = None
    metrics: dict[str, int] = field(default_factory=dict)
    spec: dict[str, Any] = field(default_factory=dict)  # the compiled clause spec, for debugging
    dry_run: dict[str, Any] = field(default_factory=dict)  # what a dry run found (see merge.dry_run)


def _catalog_stats(stats: dict[str, int]) -> dict[str, Any]:
    """``stats`` (merge.table_stats) as the catalog's ``stats:<key>:*`` fields, as dbt-spark names them."""
    source = f"from the dbt-rowmerge journal (version {stats['version']})"
    out: dict[str, Any] = {}
    for key, label in (("rows", "Row count"), ("bytes", "Approximate size")):
        out[f"stats:{key}:label"] = label
        out[f"stats:{key}:value"] = stats[key]
        out[f"stats:{key}:description"] = f"{label} {source}"
        out[f"stats:{key}:include"] = True
    return out


class RowMergeAdapter(SparkAdapter):
    ConnectionManager = RowMergeConnectionManager  # type: ignore[assignment]

    def valid_incremental_strategies(self) -> list[str]:
        return ["append", "insert_overwrite", "microbatch", "merge", "row_level_merge"]

    @staticmethod
    @contextmanager
    def _dbt_errors(relation: str, operation: str | None = None) -> Iterator[None]:
        """Engine errors as dbt errors: a config error names the relation, in one format (and
        the run-operation whose arguments were wrong, when it is one)."""
        try:
            yield
        except merge.MergeSpecError as exc:
            what = f"{operation} arguments" if operation else None
            raise CompilationError(model_config.error_message(relation, exc.problems, what)) from None
        except (merge.MergeError, merge.MergeCommittedError) as exc:
            raise DbtRuntimeError(str(exc)) from None

    def _engine(self, call: Callable[[SparkSession], T], relation: str, operation: str | None = None) -> T:
        """Run ``call`` on dbt's Spark session; engine errors become dbt errors, engine
        warnings dbt warnings (``--warn-error`` fails the model where the engine warned, before
        it writes anything). ``operation``: the run-operation calling, named by its errors."""
        spark = session_for(self.config.credentials)  # type: ignore[arg-type]
        with self._dbt_errors(relation, operation), warnings_to(_dbt_warning, logger.info):
            return call(spark)

    # -- compiling a model's config (the macros compile, these judge) ------------------------
    @available
    def rowmerge_defaults(self) -> dict[str, Any]:
        """Defaults the compiling macros need (aliases, change-table suffix, spec version)."""
        return {
            **model_config.DEFAULTS,
            "spec_keys": list(model_config.SPEC_KEYS),
            "upkeep_keys": list(model_config.UPKEEP_KEYS),
        }

    @available
    def rowmerge_config_error(
        self, spec: Any, config: Any, relation: str, columns: list[str] | None = None
    ) -> str | None:
        """The error a model with ``config`` (compiled to ``spec``) would fail with, or None."""
        found = model_config.problems(spec, config or {}, str(relation), columns)
        return model_config.error_message(str(relation), found) if found else None

    @available
    def rowmerge_validate(
        self, spec: Any, config: Any, relation: str, columns: list[str] | None = None
    ) -> merge.MergeSpec:
        """The spec, validated once with the config it came from; raises one error naming
        the relation and every offending key."""
        with self._dbt_errors(str(relation)):
            return model_config.check(spec, config or {}, str(relation), columns)

    @available
    def rowmerge_check_strategy(self, strategy: Any) -> str:
        """An unknown incremental strategy fails naming every strategy of this adapter."""
        problem = model_config.strategy_problem(str(strategy), self.valid_incremental_strategies())
        if problem:
            raise CompilationError(problem)
        return ""

    @available
    def rowmerge_check_versions(
        self, relation: Any, start: Any, end: Any = None, start_ts: Any = None, end_ts: Any = None
    ) -> str:
        """``table_changes`` bounds, checked when the model that reads them compiles."""
        problem = model_config.version_range_problem(start, end, start_ts, end_ts)
        if problem:
            raise CompilationError(f"table_changes({relation}): {problem}")
        return ""

    @available
    def rowmerge_changes_range(
        self, relation: Any, start: Any, end: Any = None, start_ts: Any = None, end_ts: Any = None
    ) -> dict[str, Any]:
        """The versions (and timestamp bounds, in microseconds) a ``table_changes`` read covers,
        checked against the table's journal: a start past its latest version, or a range across
        a full refresh that wrote no change rows, fails naming the version and the fix."""
        self.rowmerge_check_versions(relation, start, end, start_ts, end_ts)
        spark = session_for(self.config.credentials)  # type: ignore[arg-type]
        try:
            found = merge.changes_range(spark, str(relation), start, end, start_ts, end_ts)
        except ValueError as exc:
            raise CompilationError(f"table_changes({relation}): {exc}") from None
        return {"start": found.start, "end": found.end, "start_us": found.start_us, "end_us": found.end_us}

    @available
    def rowmerge_latest_version(self, relation: Any) -> int | None:
        """The newest version of ``relation`` (None: no such table, or no journal)."""
        spark = session_for(self.config.credentials)  # type: ignore[arg-type]
        try:
            found = merge.history(spark, str(relation), 1)
        except Exception:  # noqa: BLE001 - no such table yet, or not one of ours
            return None
        return int(found[0]["version"]) if found else None

    # -- running the engine -----------------------------------------------------------------
    @available
    def rowmerge_run_merge(self, spec: merge.MergeSpec) -> RowMergeAdapterResponse:
        result = self._engine(lambda spark: merge.run_merge(spark, spec), spec.target)
        m = result.metrics
        return RowMergeAdapterResponse(
            _message=result.summary(),
            code="MERGE",
            rows_affected=m["numTargetRowsInserted"] + m["numTargetRowsUpdated"] + m["numTargetRowsDeleted"],
            version=result.version,
            metrics=m,
            spec=dict(spec.raw),
        )

    @available
    def rowmerge_merge_text(self, spec: merge.MergeSpec) -> str:
        """What ``target/run/<model>.sql`` shows: the merge as MERGE INTO text, then the clause
        spec the engine runs."""
        listed = json.dumps(dict(spec.raw), indent=2, sort_keys=True, default=str)
        return (
            "-- row_level_merge: the merge this model runs, as SQL (the engine runs the clause spec below)\n"
            f"{merge.merge_sql(spec)}\n\n/* clause spec:\n{listed}\n*/\n"
        )

    @available
    def rowmerge_initial_rows(self, spec: merge.MergeSpec, view: str) -> str:
        """Register, as temporary view ``view``, the rows a first run or full refresh creates
        the table from (what a merge into an empty table inserts); return the view's name."""

        def register(spark: SparkSession) -> str:
            merge.initial_rows(spark, spec).createOrReplaceTempView(view)
            return view

        return self._engine(register, spec.target)

    @available
    def rowmerge_skip_merge(self, spec: merge.MergeSpec, reason: str) -> RowMergeAdapterResponse:
        """The run line of a merge that was compiled and validated but deliberately not run."""
        return RowMergeAdapterResponse(
            _message=f"MERGE skipped ({reason}): {spec.target} not changed",
            code="MERGE",
            rows_affected=0,
            spec=dict(spec.raw),
        )

    @available
    def rowmerge_dry_run(self, spec: merge.MergeSpec) -> RowMergeAdapterResponse:
        """Plan the merge into the existing table and report what it would do; nothing is written."""
        report = self._engine(lambda spark: merge.dry_run(spark, spec), spec.target)
        return RowMergeAdapterResponse(
            _message=report.summary(),
            code="MERGE",
            rows_affected=0,
            spec=dict(spec.raw),
            dry_run=report.as_dict(),
        )

    @available
    def rowmerge_dry_run_create(self, spec: merge.MergeSpec) -> RowMergeAdapterResponse:
        """The first run's dry run: how many rows the table would be created with (constraints
        checked); nothing is created."""

        def count(spark: SparkSession) -> int:
            return merge.initial_rows(spark, spec).count()

        rows = self._engine(count, spec.target)
        return self.rowmerge_dry_run_created(spec.target, rows, dict(spec.raw))

    @available
    def rowmerge_dry_run_created(self, target: Any, rows: Any, spec: Any = None) -> RowMergeAdapterResponse:
        """The run line of a first run's dry run that counted ``rows`` (a snapshot's too)."""
        name = _relation_name(target)
        return RowMergeAdapterResponse(
            _message=f"CREATE TABLE dry run: {name} would be created with {int(rows)} rows; nothing written",
            code="CREATE TABLE",
            rows_affected=0,
            spec=dict(spec or {}),
            dry_run={"target": name, "rows": int(rows)},
        )

    @available
    def rowmerge_same_table(self, wanted: Any, model_relation: Any) -> bool:
        """True if ``wanted`` (a run-operation's relation as the user spelled it) names the
        table of ``model_relation`` (a model's): the two compare as the journal compares a
        table's names (case, back-quotes, ``spark_catalog.`` do not matter), so an operation
        finds its model's unique_key and cluster_by however the relation was written."""
        try:
            parts = parse_name(_relation_name(model_relation))
        except ValueError:
            return False
        return same_table(_relation_name(wanted), parts)

    @available
    def rowmerge_check_snapshot_config(self, config: Any, relation: Any) -> str:
        """Refuse a Parquet/ORC snapshot's bad upkeep or lock_timeout_s before it writes
        anything, its first run included (model_config.snapshot_problems)."""
        found = model_config.snapshot_problems(config or {})
        if found:
            raise CompilationError(
                model_config.error_message(_relation_name(relation), found, "snapshot config")
            )
        return ""

    @available
    def rowmerge_check_arguments(self, operation: str, given: Any, known: Any) -> str:
        """Refuse a run-operation's arguments it does not take (a misspelling is named, with
        the argument meant), before it reads or writes anything."""
        problem = model_config.unknown_arguments(operation, list(given or ()), list(known))
        if problem:
            raise CompilationError(problem)
        return ""

    @available
    def rowmerge_flag(self, value: Any, name: str) -> bool:
        """A run-operation's true/false argument as the operation reads it (``"false"`` is false)."""
        return _flag(value, name)

    @available
    def rowmerge_recover(self, relation: str) -> dict[str, Any]:
        done = self._engine(lambda spark: merge.recover(spark, str(relation)), str(relation))
        return {
            "rolled_forward": done.rolled_forward,
            "rolled_back": done.rolled_back,
            "message": done.describe(),
        }

    @available
    def rowmerge_optimize(
        self,
        relation: Any,
        cluster_by: Any = None,
        partition_filter: str | None = None,
        target_file_size_mb: float | None = None,
        dry_run: Any = False,
        default_cluster_by: Any = None,
        lock_timeout_s: Any = None,
    ) -> dict[str, Any]:
        """Compact the table's small files as an OPTIMIZE version (merge.optimize);
        ``default_cluster_by``: the model's unique_key, used when neither ``cluster_by`` nor
        the table's stored clustering says how to order rows."""
        name = _relation_name(relation)
        fallback = [default_cluster_by] if isinstance(default_cluster_by, str) else default_cluster_by
        done = self._engine(
            lambda spark: merge.optimize(
                spark,
                name,
                partition_filter=partition_filter,
                cluster_by=cluster_by,
                target_file_size_mb=target_file_size_mb,
                dry_run=_flag(dry_run, "dry_run"),
                default_cluster_by=list(fallback or []) or None,
                lock_timeout_s=_lock_timeout(lock_timeout_s),
            ),
            name,
            "rowmerge_optimize",
        )
        return {**done.as_dict(), "message": done.summary()}

    @available
    def rowmerge_restore(
        self,
        relation: Any,
        version: int | None = None,
        timestamp: str | None = None,
        unique_key: Any = None,
        dry_run: Any = False,
        lock_timeout_s: Any = None,
    ) -> dict[str, Any]:
        """Make the table's rows those of an earlier version again, as a RESTORE version."""
        name = _relation_name(relation)
        done = self._engine(
            lambda spark: merge.restore(
                spark,
                name,
                version,
                timestamp,
                unique_key=unique_key,
                dry_run=_flag(dry_run, "dry_run"),
                lock_timeout_s=_lock_timeout(lock_timeout_s),
            ),
            name,
            "rowmerge_restore",
        )
        return {**done.as_dict(), "message": done.summary()}

    @available
    def rowmerge_vacuum(
        self,
        relation: Any,
        retain_versions: int | None = None,
        retain_hours: float | None = None,
        dry_run: Any = False,
        force: Any = False,
        change_feed_retain_versions: int | None = None,
        lock_timeout_s: Any = None,
    ) -> dict[str, Any]:
        """Delete the files the table keeps past its retention, as a VACUUM version."""
        name = _relation_name(relation)
        done = self._engine(
            lambda spark: merge.vacuum(
                spark,
                name,
                retain_versions,
                retain_hours,
                dry_run=_flag(dry_run, "dry_run"),
                force=_flag(force, "force"),
                change_feed_retain_versions=change_feed_retain_versions,
                lock_timeout_s=_lock_timeout(lock_timeout_s),
            ),
            name,
            "rowmerge_vacuum",
        )
        return {**done.as_dict(), "message": done.summary()}

    @available
    def rowmerge_as_of_view(
        self, relation: Any, version: int | None = None, timestamp: str | None = None
    ) -> str:
        """A temporary view of the table as of a version (merge.as_of), for a model's SQL to
        select from; its name, back-quoted. One view per table and version, replaced on reuse."""
        name = _relation_name(relation)

        def view(spark: SparkSession) -> str:
            df = merge.as_of(spark, name, version=version, timestamp=timestamp)
            at = f"v{version}" if version is not None else "t" + re.sub(r"\W", "_", str(timestamp))
            ident = re.sub(r"\W", "_", f"rowmerge_as_of__{name}__{at}").lower()
            df.createOrReplaceTempView(ident)
            return f"`{ident}`"

        return self._engine(view, name, "rowmerge_as_of")

    @available
    def rowmerge_rebind(self, relation: str) -> dict[str, Any]:
        """Record a renamed table's new name, or its folder's new place, in the journal its
        folder holds (and its feed)."""
        done = self._engine(lambda spark: merge.rebind(spark, str(relation)), str(relation))
        if done["rebound"]:
            # a renamed managed table's folder moves too: the new name says enough
            was = (
                f"from {done['previous']}"
                if done["previous"]
                else f"(its folder moved from {done['moved_from']})"
            )
            message = f"rebound {was} as version {done['version']}"
            if done["changes_tables"]:
                message += f"; change table(s) {', '.join(done['changes_tables'])} now belong to it"
        else:
            message = "the journal already names this table; nothing to do"
        return {**done, "message": message}

    # -- dbt docs generate -------------------------------------------------------------------
    def _get_columns_for_catalog(self, relation: Any) -> Iterator[dict[str, Any]]:
        """dbt-spark's catalog columns, with row count and size from the journal for a table
        the engine writes: Spark keeps statistics only after ANALYZE TABLE, so the catalog
        showed no rows (or stale ones) for a merged table."""
        stats = self._journal_stats(relation)
        for column in super()._get_columns_for_catalog(relation):
            if stats is not None:
                column.update(_catalog_stats(stats))
            yield column

    def _journal_stats(self, relation: Any) -> dict[str, int] | None:
        if not relation.is_table or str(self.config.credentials.method) != "session":  # type: ignore[attr-defined]
            return None
        try:
            spark = session_for(self.config.credentials)  # type: ignore[arg-type]
            return merge.table_stats(spark, relation.render())
        except Exception as exc:  # noqa: BLE001 - not our table (delta, hive serde...): Spark's stats stand
            logger.debug(f"no journal statistics for {relation}: {exc}")
            return None

    @available
    def rowmerge_history(self, relation: str, limit: int | None = None) -> list[dict[str, Any]]:
        return self._engine(
            lambda spark: merge.history(spark, str(relation), limit), str(relation), "rowmerge_history"
        )

    @available
    def rowmerge_replace(
        self,
        relation: str,
        rows_view: str,
        partition_by: Any = None,
        file_format: Any = None,
        changes_table: str | None = None,
        feed_on_replace: Any = True,
        tblproperties: Any = None,
        spec: merge.MergeSpec | None = None,
    ) -> RowMergeAdapterResponse | None:
        """A full refresh as the table's next version (its history and change feed go on), or
        None when it cannot be one (dbt then rebuilds the table; warned). ``spec``: the model's
        validated spec, whose retention settings say what the refresh keeps of the old table."""
        parts = [partition_by] if isinstance(partition_by, str) else list(partition_by or [])
        fmt = str(file_format or "parquet")
        props = {str(k): str(v) for k, v in dict(tblproperties or {}).items()}

        def replace(spark: SparkSession) -> merge.Replaced | None:
            rows = spark.table(rows_view)
            problem = merge.replace_problem(spark, str(relation), rows, parts, fmt, changes_table or None)
            if problem:
                if problem != merge.NO_JOURNAL:
                    _dbt_warning(
                        f"full refresh of {relation} rebuilds the table, so its history restarts at "
                        f"version 0 and its change feed starts empty: {problem}. Consumers of its "
                        "change feed must start over."
                    )
                return None
            return merge.replace_table(
                spark,
                str(relation),
                rows,
                partition_by=parts,
                file_format=fmt,
                change_data_feed=changes_table or None,
                feed_on_replace=feed_on_replace is not False,
                table_properties=props or None,
                upkeep=spec.upkeep if spec is not None else None,
            )

        done = self._engine(replace, str(relation))
        if done is None:
            return None
        return RowMergeAdapterResponse(
            _message=done.summary(),
            code="REPLACE TABLE",
            rows_affected=done.rows_inserted,
            version=done.version,
            metrics={
                "numTargetRowsInserted": done.rows_inserted,
                "numTargetRowsDeleted": done.rows_deleted,
                "numTargetFilesAdded": done.files_added,
                "numTargetFilesRemoved": done.files_removed,
            },
        )

    @available
    def rowmerge_finish_refresh(self, relation: Any, location_root: str | None = None) -> bool:
        """Before a model's table is created: finish a full refresh that stopped between
        dropping the table and registering it again (its journal waits beside the folder).
        True if it did (the table exists again, with its history)."""
        location = f"{str(location_root).rstrip('/')}/{relation.identifier}" if location_root else None
        done = self._engine(
            lambda spark: merge.finish_refresh(spark, relation.render(), location), relation.render()
        )
        if done:
            self.cache_added(relation.incorporate(type="table"))
        return done

    @available
    def rowmerge_created(self, started: dict[str, Any]) -> RowMergeAdapterResponse:
        """The run line of a first run (or a rebuild): the rows the table was created with."""
        operation = str(started.get("operation") or "CREATE TABLE")
        rows = int(started.get("rows") or 0)
        return RowMergeAdapterResponse(
            _message=f"{operation} {rows} rows", code=operation, rows_affected=rows, version=0
        )

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
        return self._engine(
            lambda spark: merge.start_history(spark, str(relation), operation, changes_table or None),
            str(relation),
        )
