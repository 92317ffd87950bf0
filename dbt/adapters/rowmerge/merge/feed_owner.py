"""Which target a change table belongs to: one feed per table, never shared.

A change table's rows are partitioned by ``_commit_version``, the version of the target's
journal that wrote them. Two targets writing one change table would both write version 1,
2, ..., and a consumer reading one target's feed would get the other's rows. So the change
table's folder records its target in a hidden file (readers skip ``_``-prefixed names)::

    <change table>/_rowmerge_feed.json     {"format": 1, "target": "db.orders"}

The first merge that writes a feed into a change table (or dbt creating it) claims it; a
merge of any other target into it is refused before anything is written. A renamed target
takes its feed along (``rebind``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from .errors import UnsupportedTableError
from .sqltext import same_table
from .storage import Storage

OWNER_FILE = "_rowmerge_feed.json"
OWNER_FORMAT = 1


def owner_path(location: str) -> str:
    return f"{location.rstrip('/')}/{OWNER_FILE}"


def read_owner(storage: Storage, location: str, changes: str) -> str | None:
    """The target recorded for the change table at ``location`` (None: not claimed yet)."""
    path = owner_path(location)
    if not storage.exists(path):
        return None
    try:
        raw = json.loads(storage.read_text(path))
        if isinstance(raw, dict) and isinstance(raw.get("target"), str) and raw["target"]:
            return str(raw["target"])
        problem = "it does not name a target"
    except (ValueError, UnicodeDecodeError) as exc:
        problem = f"it is not JSON ({exc})"
    raise UnsupportedTableError(
        f"change_data_feed table {changes} cannot be used: {path}, which records the table whose "
        f"change feed it holds, is damaged ({problem}). If the feed belongs to this model, delete "
        "that file (the next merge records the owner again); otherwise name another table in "
        "change_data_feed. Nothing was changed."
    )


def check_owner(storage: Storage, location: str, changes: str, target: str, full_name: Sequence[str]) -> None:
    """Refuse a change table that holds another target's feed (``target``: the merge's target
    as the user named it, ``full_name``: its catalog name)."""
    owner = read_owner(storage, location, changes)
    if owner is not None and not same_table(owner, full_name):
        raise UnsupportedTableError(
            f"change_data_feed table {changes} already holds the change feed of {owner}, so "
            f"{target} cannot write its changes there: both would write _commit_version 1, 2, ... "
            f"and each feed would show the other's rows. Name another table in change_data_feed "
            f"(dbt's default is <model>__changes). If {owner} was renamed to {target}, run "
            f"`dbt run-operation rowmerge_rebind --args '{{relation: {target}}}'`. Nothing was changed."
        )


def claim(storage: Storage, location: str, changes: str, target: str, full_name: Sequence[str]) -> None:
    """Record ``target`` as the change table's owner unless one is recorded (atomic: of two
    targets claiming at once, one wins and the other is refused)."""
    text = json.dumps({"format": OWNER_FORMAT, "target": target})
    if not storage.create_if_absent(owner_path(location), text):
        check_owner(storage, location, changes, target, full_name)


def reassign(storage: Storage, location: str, target: str) -> None:
    """Record ``target`` as the owner, whoever was (a full refresh or a rebind; hold the
    target's lock)."""
    path = owner_path(location)
    storage.delete(path)
    storage.create_if_absent(path, json.dumps({"format": OWNER_FORMAT, "target": target}))
