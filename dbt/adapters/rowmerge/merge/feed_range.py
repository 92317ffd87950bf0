"""Which change-feed versions a ``table_changes`` read covers, checked against the journal.

A consumer that remembers the last version it applied asks for the versions after it: the
next version, which reads nothing until it is committed (a quiet hour, a first run that
summarizes the changes from version 1). Two reads would silently return less than the
consumer needs, so they fail instead, naming the version and the fix: a start past the next
version (there is no such version: the table's history restarted under the consumer, or the
consumer's bookkeeping is wrong), and a range across a full refresh that wrote no change rows
(``change_data_feed_on_replace: false``: applying the feed would miss the replace).
Timestamps select the versions committed in ``[start_ts, end_ts]`` (inclusive, UTC); commit
timestamps only go forward (:meth:`.journal.Journal.commit_time`), so a time range is a
version range (a ``start_ts`` after the latest commit reads nothing yet).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timezone
from typing import Any

from .journal import parse_iso


@dataclass(frozen=True)
class ChangesRange:
    """The versions to read (``end`` None: up to the latest) and the timestamp bounds in
    microseconds since the epoch (UTC), which the read also filters on."""

    start: int
    end: int | None
    start_us: int | None = None
    end_us: int | None = None


def parse_timestamp(value: Any) -> datetime:
    """A ``start_ts``/``end_ts`` value (ISO 8601 text or a datetime) as UTC; text without an
    offset is UTC. A date is its midnight, UTC (YAML reads an unquoted ``2026-11-26`` in a
    run-operation's ``--args`` as a date). ValueError saying what was expected."""
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, date):
        parsed = datetime(value.year, value.month, value.day)
    elif isinstance(value, str) and value.strip():
        try:
            parsed = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ValueError(
                f"{value!r} is not a timestamp; write ISO 8601, e.g. '2026-11-26 09:00:00' (UTC) "
                "or '2026-11-26T09:00:00+01:00'"
            ) from None
    else:
        raise ValueError(f"{value!r} is not a timestamp; write ISO 8601, e.g. '2026-11-26 09:00:00' (UTC)")
    return parsed.replace(tzinfo=timezone.utc) if parsed.tzinfo is None else parsed.astimezone(timezone.utc)


def _micros(ts: datetime) -> int:
    delta = ts - datetime(1970, 1, 1, tzinfo=timezone.utc)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def resolve(
    relation: str,
    history: Sequence[Mapping[str, Any]],
    start_version: int | None = None,
    end_version: int | None = None,
    start_ts: Any = None,
    end_ts: Any = None,
) -> ChangesRange:
    """The range to read from ``relation``'s change feed, given its ``history`` (newest first,
    as :func:`.run.history` returns it). Raises ValueError naming the problem and the fix."""
    start_at = parse_timestamp(start_ts) if start_ts is not None else None
    end_at = parse_timestamp(end_ts) if end_ts is not None else None
    versions = sorted(
        (int(h["version"]), parse_iso(str(h["timestamp"])) if h.get("timestamp") else None, h)
        for h in history
    )
    if not versions:
        return ChangesRange(start_version or 0, end_version, _opt(start_at), _opt(end_at))
    latest, latest_at, _ = versions[-1]
    start = start_version if start_version is not None else 0
    end = end_version
    if start_at is not None:
        # after the latest commit: nothing committed since (the next version, not yet there)
        later = [v for v, at, _ in versions if at is not None and at >= start_at]
        start = max(start, later[0] if later else latest + 1)
    if end_at is not None:
        earlier = [v for v, at, _ in versions if at is not None and at <= end_at]
        end = min(end, earlier[-1]) if end is not None and earlier else (earlier[-1] if earlier else -1)
    if start > latest + 1:
        raise ValueError(
            f"start_version {start} is past the latest version of {relation} ({latest}; the next one "
            f"will be {latest + 1}): there is no such version, or the table's history restarted since "
            "the consumer read it (a full refresh that had to rebuild the table). Read from a version "
            f"<= {latest + 1} (rowmerge_latest_version({relation}) tells the latest), or rebuild the "
            "consumer with --full-refresh."
        )
    last = latest if end is None else min(end, latest)
    kept_from = max(int((h.get("metrics") or {}).get("feedKeptFrom") or 0) for _, _, h in versions)
    if start < kept_from and start <= last:
        raise ValueError(
            f"the change feed of {relation} no longer holds versions before {kept_from}: a vacuum "
            f"dropped them (change_feed_retain_versions), so a consumer reading versions {start} to "
            f"{last} would miss their changes. Read from version {kept_from} on, and rebuild the "
            "consumer with --full-refresh; or keep more versions (change_feed_retain_versions)."
        )
    skipped = [(v, at) for v, at, h in versions if h.get("feed_skipped")]
    for _, _, h in versions:  # full refreshes a vacuum folded into a base
        folded = (h.get("metrics") or {}).get("feedSkippedVersions") or ()
        skipped += [(int(v), None) for v in folded]
    for v, at in sorted(skipped, key=lambda s: s[0]):
        if start <= v <= last:
            raise ValueError(
                f"version {v} of {relation} is a full refresh (REPLACE TABLE"
                f"{' at ' + at.isoformat() if at else ''}) that wrote no change rows "
                f"(change_data_feed_on_replace: false), so a consumer reading versions {start} to {last} "
                f"would miss it. Read from version {v + 1} on, and rebuild the consumer with "
                "--full-refresh; or let the model's full refreshes write their change rows."
            )
    return ChangesRange(start, end, _opt(start_at), _opt(end_at))


def _opt(ts: datetime | None) -> int | None:
    return _micros(ts) if ts is not None else None
