"""Phase 5b: refuse or flag merges that are valid MERGE but almost always a mistake.

Run once the source is materialized and before the target is read, so a refused merge has
read and written nothing. An empty source with a NOT MATCHED BY SOURCE delete would empty the
table (an upstream that returned nothing for one run, a bad filter); it fails unless the spec
opts in with ``allow_empty_source``. Source rows with a NULL key match nothing, so an insert
clause inserts them again on every run: that is MERGE semantics, so it is a warning with the
count, not an error. After the scan (phase 6), a spec with ``max_delete_fraction`` refuses a
merge that would delete more of the table than that, before anything is written.
"""

from __future__ import annotations

from .errors import DeleteLimitError, EmptySourceError
from .notices import warn
from .plan import MergePlan
from .source import MaterializedSource


def check_source(plan: MergePlan, source: MaterializedSource) -> None:
    """Raise EmptySourceError for an empty source that would delete every row; warn about
    NULL keys."""
    check_source_rows(plan, source.num_rows, source.null_key_rows)


def check_source_rows(plan: MergePlan, num_rows: int, null_key_rows: int) -> None:
    """:func:`check_source` of a source of ``num_rows`` rows, ``null_key_rows`` of them with a
    NULL in a key column."""
    if num_rows == 0 and not plan.spec.allow_empty_source:
        deleting = [c for c in plan.spec.not_matched_by_source if c.action == "delete"]
        if deleting:
            raise EmptySourceError(plan.target.name, deleting[0].label)
    if null_key_rows:
        keys = ", ".join(t for t, _ in plan.key_pairs)
        then = "; an insert clause inserts them as new rows on every run" if plan.not_matched else ""
        warn(
            f"{null_key_rows} source row(s) merged into {plan.target.name} have a NULL in a "
            f"key column ({keys}): NULL equals nothing in `on`, so they match no target row{then}. "
            "Filter them out or coalesce the key in the model SQL."
        )


def check_deletes(plan: MergePlan, deleted: int, table_rows: int) -> None:
    """Raise DeleteLimitError when ``deleted`` of ``table_rows`` exceeds max_delete_fraction."""
    limit = plan.spec.max_delete_fraction
    if limit is None or deleted == 0:
        return
    if deleted > limit * table_rows:
        raise DeleteLimitError(plan.target.name, deleted, table_rows, limit)
