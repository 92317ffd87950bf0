"""Every error the merge engine raises, in one place.

Each class has a one-line docstring saying when it is raised; each message says what to
change. All but one subclass :class:`MergeError`, which promises that the target did not
change, so a caller may fix the input and run the merge again. The exception is
:class:`MergeCommittedError`: the merge *is* committed, and running it again would apply
it twice.
"""

from __future__ import annotations

import re
from collections.abc import Sequence


def spark_reason(exc: BaseException) -> str:
    """Why ``exc`` was raised, in one line: the first line of its message (for a py4j error,
    the JVM's line after py4j's own), without Spark's SQLSTATE suffix."""
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    if len(lines) > 1 and lines[0].startswith("An error occurred while calling"):
        lines = [lines[1].lstrip(": ")]
    text = lines[0] if lines else type(exc).__name__
    return re.sub(r"\s*SQLSTATE: \w+", "", text)


class MergeError(Exception):
    """Base class: the merge did not change the target table."""


class MergeSpecError(MergeError):
    """The clause spec (or the model config it came from) is invalid; nothing was run."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        if len(self.problems) == 1:
            text = f"Invalid row_level_merge configuration: {self.problems[0]}"
        else:
            listed = "\n".join(f"  - {p}" for p in self.problems)
            text = f"Invalid row_level_merge configuration ({len(self.problems)} problems):\n{listed}"
        super().__init__(text)


class CardinalityViolation(MergeError):
    """A target row matched more than one source row while a matched clause could act."""

    def __init__(self, target: str, offending_rows: int, samples: Sequence[tuple[str, int]]) -> None:
        self.target = target
        self.offending_rows = offending_rows
        self.samples = list(samples)
        shown = "; ".join(f"{key} matched {n} source rows" for key, n in self.samples)
        super().__init__(
            f"MERGE into {target} failed: {offending_rows} target row(s) matched more than one "
            f"source row (e.g. {shown}). A MERGE can update or delete a target row only once. "
            "Deduplicate the source on the merge key (for example with "
            "row_number() over (partition by <key> order by <updated_at> desc) = 1), "
            "or make the `on` condition / unique_key specific enough to match one source row."
        )


class CastError(MergeError):
    """A value assigned by an update or insert cannot be cast to the target column's type."""

    def __init__(self, target: str, failures: int, sample: str) -> None:
        self.failures = failures
        super().__init__(
            f"MERGE into {target} failed: {failures} value(s) cannot be cast to the target column "
            f"type (first: {sample}). Cast or clean the value in the model SQL, or change the "
            "column type of the target table."
        )


class ConstraintViolation(MergeError):
    """A row an update or insert writes breaks a constraint of the model's contract."""

    def __init__(
        self, target: str, constraint: str, sample: str, rows: int | None = None, created: bool = False
    ) -> None:
        self.constraint = constraint
        what = f"{rows} row(s)" if rows is not None else "a row"
        verb = "violate" if rows is not None and rows != 1 else "violates"
        if created:
            head = f"{target} was not created: {what} of the model {verb}"
        else:
            head = f"MERGE into {target} failed: {what} it writes {verb}"
        super().__init__(
            f"{head} constraint {constraint} (first: {sample}). Nothing was changed. Fix the rows in the "
            "model SQL, or change the model's contract."
        )


class ExecutionError(MergeError):
    """Spark failed while evaluating the merge (before its commit point); nothing was changed."""

    def __init__(self, target: str, reason: str) -> None:
        self.reason = reason
        super().__init__(
            f"MERGE into {target} failed while Spark evaluated it: {reason}. Nothing was changed. "
            "If the error comes from a condition or value of the merge config (or the model SQL), "
            "fix it there; otherwise run the model again."
        )


class EmptySourceError(MergeError):
    """The source is empty and a NOT MATCHED BY SOURCE clause would delete every target row."""

    def __init__(self, target: str, clause: str) -> None:
        super().__init__(
            f"MERGE into {target} refused: the source is empty and {clause} deletes every target row "
            "no source row matches, so this merge would delete every row of the table. An empty "
            "source usually means an upstream problem (or a run with no input). If an empty source "
            "really means 'delete everything', set `allow_empty_source: true` in the model config "
            "(spec key allow_empty_source). Nothing was changed."
        )


class DeleteLimitError(MergeError):
    """The merge would delete more of the table than the spec's max_delete_fraction allows."""

    def __init__(self, target: str, deleted: int, rows: int, limit: float) -> None:
        share = deleted / rows if rows else 1.0
        super().__init__(
            f"MERGE into {target} refused: it would delete {deleted} of {rows} rows ({share:.1%}), more "
            f"than `max_delete_fraction: {limit:g}` allows ({limit:.1%}). Nothing was changed. Check the "
            "source (an upstream that lost rows?) and the delete clauses; if the deletes are intended, "
            "raise max_delete_fraction for this run."
        )


class UnsafeVacuumError(MergeError):
    """A vacuum would delete the files of a version that was current too recently; nothing was
    deleted (a refusal of the operation, not of a config: ``force`` overrides it)."""


class ConcurrentMergeError(MergeError):
    """Another writer holds the table's merge lock, or changed the table's files under us."""


class UnsupportedTableError(MergeError):
    """The target is not a plain Parquet/ORC file table that row_level_merge can rewrite."""


class UnreadableFileError(UnsupportedTableError):
    """A visible file in the table's folder cannot be read as the table's format."""

    def __init__(self, path: str, file_format: str, reason: str) -> None:
        self.path = path
        super().__init__(
            f"{path} is in a table's folder but cannot be read as {file_format} data ({reason}). "
            "Every visible file in a table's folder is read as table data, by Spark and by every "
            "other engine. If it is not a data file of the table, move it out of the folder (or "
            "rename it to start with _ or . so readers skip it); if it is, it is damaged: restore "
            "it from a backup. Nothing was changed."
        )


class JournalError(MergeError):
    """The table's journal cannot be read or an interrupted commit cannot be finished."""


class StorageError(MergeError):
    """The filesystem refused a write or a removal the merge needs, before its commit point."""


class MergeCommittedError(Exception):
    """The merge committed, but finishing it failed; recovery completes it. Do not rerun it.

    Not a :class:`MergeError`: a caller that retries failed merges must not retry this one.
    """

    def __init__(self, table: str, version: int, cause: BaseException) -> None:
        self.table = table
        self.version = version
        self.cause = cause
        super().__init__(
            f"MERGE into {table} is committed as version {version}, but applying it stopped: "
            f"{spark_reason(cause)}. The merge is durable and will be completed by recovery, which runs "
            "before the next merge of this table (or now: `dbt run-operation rowmerge_recover "
            f"--args '{{relation: {table}}}'`). Do not run this merge again: it would be "
            "applied twice."
        )
