"""Every error the merge engine raises, in one place.

Each class has a one-line docstring saying when it is raised; each message says what to
change. All subclass :class:`MergeError`, so callers can catch one type.
"""

from __future__ import annotations

from collections.abc import Sequence


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


class ConcurrentMergeError(MergeError):
    """Another writer holds the table's merge lock, or changed the table's files under us."""


class UnsupportedTableError(MergeError):
    """The target is not a plain Parquet/ORC file table that row_level_merge can rewrite."""


class JournalError(MergeError):
    """The table's journal cannot be read or an interrupted commit cannot be finished."""
