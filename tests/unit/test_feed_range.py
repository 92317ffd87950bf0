"""feed_range.resolve: the versions a table_changes read covers, checked against history."""

from __future__ import annotations

from datetime import date, datetime, timezone

import pytest

from dbt.adapters.rowmerge.merge.feed_range import ChangesRange, parse_timestamp, resolve

REL = "analytics.orders"


def _history(*rows: tuple[int, str, str | None]) -> list[dict]:
    """(version, timestamp, feed_skipped), given oldest first; returned newest first."""
    out = []
    for version, ts, skipped in rows:
        row = {"version": version, "timestamp": ts, "operation": "MERGE"}
        if skipped:
            row.update(operation="REPLACE TABLE", feed_skipped=skipped)
        out.append(row)
    return list(reversed(out))


H = _history(
    (0, "2026-11-26T08:00:00.000+00:00", None),
    (1, "2026-11-26T09:00:00.000+00:00", None),
    (2, "2026-11-26T10:00:00.000+00:00", None),
    (3, "2026-11-26T11:00:00.000+00:00", None),
)
US_9H = 1_795_683_600_000_000  # 2026-11-26T09:00:00Z in microseconds


def test_version_range_within_history_is_kept():
    assert resolve(REL, H, 1, 2) == ChangesRange(1, 2)
    assert resolve(REL, H, 3) == ChangesRange(3, None)
    assert resolve(REL, H, 0, 99) == ChangesRange(0, 99)


def test_start_past_the_next_version_fails_naming_it():
    with pytest.raises(ValueError) as raised:
        resolve(REL, H, 5)
    message = str(raised.value)
    assert message.startswith(
        f"start_version 5 is past the latest version of {REL} (3; the next one will be 4)"
    )
    assert f"rowmerge_latest_version({REL})" in message and "--full-refresh" in message


def test_start_at_the_next_version_reads_nothing_yet():
    """A consumer that is up to date (or a first run summarizing from version 1) reads nothing."""
    assert resolve(REL, H, 4) == ChangesRange(4, None)
    assert resolve(REL, H[-1:], 1) == ChangesRange(1, None)  # only version 0 so far


def test_range_across_a_full_refresh_without_change_rows_fails_naming_it():
    h = _history(
        (0, "2026-11-26T08:00:00.000+00:00", None),
        (1, "2026-11-26T09:00:00.000+00:00", None),
        (2, "2026-11-26T10:00:00.000+00:00", "change_data_feed_on_replace is false"),
        (3, "2026-11-26T11:00:00.000+00:00", None),
    )
    with pytest.raises(ValueError, match=r"version 2 of analytics.orders is a full refresh \(REPLACE TABLE"):
        resolve(REL, h, 1)
    with pytest.raises(ValueError, match="Read from version 3 on"):
        resolve(REL, h, 0, 2)
    assert resolve(REL, h, 3) == ChangesRange(3, None)  # after it
    assert resolve(REL, h, 0, 1) == ChangesRange(0, 1)  # before it


def test_timestamps_select_the_versions_committed_between_them_inclusive():
    got = resolve(REL, H, start_ts="2026-11-26 09:00:00", end_ts="2026-11-26T10:00:00Z")
    assert (got.start, got.end) == (1, 2)
    assert got.start_us == US_9H and got.end_us == US_9H + 3_600_000_000
    # an offset is honoured: 10:30+01:00 is 09:30 UTC, so version 2 is the first after it
    assert resolve(REL, H, start_ts="2026-11-26T10:30:00+01:00").start == 2
    # an end before every commit selects nothing
    assert resolve(REL, H, start_version=0, end_ts="2026-01-01 00:00:00").end == -1


def test_start_ts_after_the_latest_commit_reads_nothing_yet():
    got = resolve(REL, H, start_ts="2026-11-26 11:00:00.001")
    assert (got.start, got.end) == (4, None)


def test_without_history_the_bounds_are_taken_as_given():
    assert resolve(REL, [], 5, 6) == ChangesRange(5, 6)


@pytest.mark.parametrize("bad", ["yesterday", "", 5, None])
def test_parse_timestamp_refuses_what_is_not_a_timestamp(bad):
    with pytest.raises(ValueError, match="is not a timestamp"):
        parse_timestamp(bad)


def test_parse_timestamp_takes_a_date_as_its_midnight_utc():
    # YAML reads an unquoted 2026-11-26 in --args as a date, not as text
    assert parse_timestamp(date(2026, 11, 26)) == datetime(2026, 11, 26, tzinfo=timezone.utc)
    assert parse_timestamp(date(2026, 11, 26)) == parse_timestamp("2026-11-26")
