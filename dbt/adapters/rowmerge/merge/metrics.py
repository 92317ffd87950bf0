"""Merge metrics: Delta's names (camelCase), one public serializable structure.

Every phase of ``run_merge`` runs inside :func:`timed`, which records its duration under
the phase's metric; counters are filled by the phase that knows them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

COUNTER_NAMES = (
    "numSourceRows",
    "numTargetRowsInserted",
    "numTargetRowsUpdated",
    "numTargetRowsDeleted",
    "numTargetRowsCopied",
    "numTargetRowsMatchedUpdated",
    "numTargetRowsMatchedDeleted",
    "numTargetRowsNotMatchedBySourceUpdated",
    "numTargetRowsNotMatchedBySourceDeleted",
    "numTargetFilesBeforeSkipping",
    "numTargetFilesAfterSkipping",
    "numTargetFilesAdded",
    "numTargetFilesRemoved",
    "numTargetBytesAdded",
    "numTargetBytesRemoved",
    "numTargetChangeFilesAdded",
)
TIMER_NAMES = (
    "executionTimeMs",
    "materializeSourceTimeMs",
    "scanTimeMs",
    "rewriteTimeMs",
    "commitTimeMs",
)


@dataclass
class MergeMetrics:
    """Counters and timers of one merge; ``as_dict`` is what history and dbt report."""

    values: dict[str, int] = field(default_factory=lambda: {name: 0 for name in COUNTER_NAMES + TIMER_NAMES})

    def __getitem__(self, name: str) -> int:
        return self.values[name]

    def __setitem__(self, name: str, value: int) -> None:
        if name not in self.values:
            raise KeyError(f"unknown merge metric {name!r}")
        self.values[name] = int(value)

    def add(self, name: str, value: int) -> None:
        self[name] = self.values[name] + int(value)

    def as_dict(self) -> dict[str, int]:
        return dict(self.values)


@contextmanager
def timed(metrics: MergeMetrics, name: str) -> Iterator[None]:
    """Add the wall time of the block to timer ``name`` (even if it raises)."""
    start = time.monotonic()
    try:
        yield
    finally:
        metrics.add(name, round((time.monotonic() - start) * 1000))


@dataclass(frozen=True)
class MergeResult:
    """What ``run_merge`` returns: the committed version and the metrics."""

    version: int
    metrics: dict[str, int]
    target: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        """The dbt run line, e.g. ``MERGE 120 updated, 30 inserted, 4 deleted; 3 of 64 files rewritten``."""
        m = self.metrics
        return (
            f"MERGE {m['numTargetRowsUpdated']} updated, {m['numTargetRowsInserted']} inserted, "
            f"{m['numTargetRowsDeleted']} deleted; {m['numTargetFilesRemoved']} of "
            f"{m['numTargetFilesBeforeSkipping']} files rewritten"
        )
