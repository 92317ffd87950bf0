"""How long the files a version replaces are kept, so older versions stay readable.

A version that replaces files (a merge that rewrites, a compaction, a full refresh) moves them
into ``_rowmerge_log/retained/<version>/`` instead of deleting them, when its table's
retention is on: the table folder still holds exactly the current files, and the journal can
name every file of every version still in retention (a file that left the table at version
``k`` lives in ``retained/<k>/``, at the same path below it as it had in the table).

The policy is the table's: a model's ``retain_versions`` / ``retain_hours`` (or an operation's
arguments) set it, and each entry carries it to the next, as ``cluster_by`` is carried, so a
run-operation without arguments honours what the model chose. A retained file is kept while
either setting still keeps it; both 0 turn retention off (the replaced files are deleted, as
before retention existed).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

# The newest 24 versions stay readable and restorable: about a day of an hourly model, weeks of a
# daily one — enough to undo a bad run found the next morning. Counted in versions, not hours,
# so the space it costs is bounded by what 24 versions replace (at worst, a model whose every
# run rewrites the whole table, 24 copies of it) however often the model runs; hours would make
# a 2-minute model keep 720 versions. README "Time travel and undo" has the measured cost.
DEFAULT_RETAIN_VERSIONS = 24
DEFAULT_RETAIN_HOURS = 0.0


@dataclass(frozen=True)
class Retention:
    """A table's retention: the newest ``versions`` versions, and every version that was
    current less than ``hours`` ago, stay readable."""

    versions: int
    hours: float
    # The change feed keeps the rows of this many newest versions (None: of every version);
    # vacuum drops the older ones.
    feed_versions: int | None = None

    @property
    def on(self) -> bool:
        return self.versions > 0 or self.hours > 0

    def keeps(self, replaced_by: int, committed: datetime, newest: int, now: datetime) -> bool:
        """Whether the files version ``replaced_by`` replaced (committed at ``committed``) are
        still kept once ``newest`` is the newest version, at ``now``: they are the files of
        version ``replaced_by - 1``, which is among the newest ``versions`` versions before
        ``newest``, or was current until less than ``hours`` ago."""
        if replaced_by > newest - self.versions:
            return True
        return self.hours > 0 and committed > now - timedelta(hours=self.hours)

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"versions": self.versions, "hours": self.hours}
        if self.feed_versions is not None:
            out["feed_versions"] = self.feed_versions
        return out

    @staticmethod
    def from_json(raw: Any) -> Retention | None:
        """The policy an entry stores, or None if ``raw`` is not one (a reader that finds the
        key odd treats the entry as having none: the default applies)."""
        if not isinstance(raw, Mapping):
            return None
        versions, hours = raw.get("versions"), raw.get("hours")
        if isinstance(versions, bool) or not isinstance(versions, int) or versions < 0:
            return None
        if isinstance(hours, bool) or not isinstance(hours, (int, float)) or not hours >= 0:
            return None
        feed = raw.get("feed_versions")
        if feed is not None and (isinstance(feed, bool) or not isinstance(feed, int) or feed < 1):
            return None
        return Retention(versions, float(hours), feed)


DEFAULT_RETENTION = Retention(DEFAULT_RETAIN_VERSIONS, DEFAULT_RETAIN_HOURS)


def chosen(
    versions: int | None, hours: float | None, stored: Retention | None, feed_versions: int | None = None
) -> Retention | None:
    """The retention a new version records: each setting given now (a model's config, an
    operation's argument), else the table's stored one, else the default. None when nothing
    was ever chosen and the default keeps nothing: an entry stores the policy only when it
    was chosen or decides what applying the entry does."""
    if versions is None and hours is None and feed_versions is None and stored is None:
        return DEFAULT_RETENTION if DEFAULT_RETENTION.on else None
    base = stored or DEFAULT_RETENTION
    return Retention(
        base.versions if versions is None else versions,
        base.hours if hours is None else float(hours),
        base.feed_versions if feed_versions is None else feed_versions,
    )
