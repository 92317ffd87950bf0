"""The undo campaign (undo_campaign.py): random merges with the change feed on, restores at random
points, every version read back with ``as_of`` — on a partitioned and an unpartitioned table.

``make test`` runs a small campaign per table kind on a fixed seed; the ``long`` test runs the
whole one (200 merges and 20 restores per kind), as
``python -m tests.reliability.undo_campaign --merges 200 --restores 20 --seed 1`` does.
"""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import SparkSession

from tests.reliability.undo_campaign import (
    KINDS,
    CampaignMismatch,
    Summary,
    applied,
    check_equal,
    keyed_diff,
    run_campaign,
)

SEED = 20261127
MERGES, RESTORES = 8, 2
LONG_SEED, LONG_MERGES, LONG_RESTORES = 1, 200, 20


def check_summary(summary: Summary, merges: int, restores: int) -> None:
    """The campaign did what it was asked, and every version it made was read back."""
    s = summary
    assert (s.merges, s.restores) == (merges, restores)
    assert all(s.merge_kinds[k] >= 1 for k in KINDS), s.merge_kinds
    assert sum(s.merge_kinds.values()) == merges
    # version 0, each merge that changed rows, each auto-compaction, each restore
    assert s.versions == 1 + merges - s.noop_merges + s.optimize_versions + restores
    assert s.versions_checked == s.versions
    # every version at the end; after each restore the version it restored, the restore, and
    # the versions in between it read
    assert s.as_of_reads == s.versions + 2 * restores + s.between_checked
    assert s.between_checked >= 1
    assert s.evolved_at is not None and s.restores_across_evolution >= 1
    assert s.restores_within_restore >= 1  # a restore of a version between an earlier one's ends
    assert s.feed_rows_checked >= merges
    assert 0 < s.min_rows <= s.max_rows


def record(record_property: Any, summary: Summary) -> None:
    s = summary
    record_property(
        "reliability",
        {
            "undo_merges": s.merges,
            "undo_restores": s.restores,
            "undo_as_of_versions": s.versions_checked,
            "undo_feed_rows": s.feed_rows_checked,
        },
    )


@pytest.mark.parametrize("partitioned", [True, False], ids=["partitioned", "unpartitioned"])
def test_undo_campaign_time_travel_and_restore_are_exact(
    spark: SparkSession, rdb: str, record_property: Any, partitioned: bool
) -> None:
    summary = run_campaign(spark, rdb, MERGES, RESTORES, SEED, partitioned)
    check_summary(summary, MERGES, RESTORES)
    record(record_property, summary)


@pytest.mark.long
@pytest.mark.parametrize("partitioned", [True, False], ids=["partitioned", "unpartitioned"])
def test_undo_campaign_whole_is_exact(
    spark: SparkSession, rdb: str, record_property: Any, partitioned: bool
) -> None:
    summary = run_campaign(spark, rdb, LONG_MERGES, LONG_RESTORES, LONG_SEED, partitioned)
    check_summary(summary, LONG_MERGES, LONG_RESTORES)
    assert summary.optimize_versions >= 1
    record(record_property, summary)


# -- the campaign's own checks, without Spark --------------------------------------------------


def test_keyed_diff_pairs_a_changed_key_and_applied_gives_the_new_rows() -> None:
    before = [(1, 1, "a", 1, None), (2, 2, "b", 2, None), (3, 3, "c", None, None)]
    after = [(1, 1, "a", 1, None), (2, 2, "B", 2, "x"), (4, 0, "d", 4, None)]
    feed = keyed_diff(before, after)
    assert feed == [
        (2, 2, "B", 2, "x", "update_postimage"),
        (2, 2, "b", 2, None, "update_preimage"),
        (3, 3, "c", None, None, "delete"),
        (4, 0, "d", 4, None, "insert"),
    ]
    assert applied(before, feed) == after
    assert applied(before, []) == before and keyed_diff(before, before) == []


def test_applied_refuses_a_feed_that_removes_a_row_the_state_lacks() -> None:
    with pytest.raises(CampaignMismatch, match="removes a row the state does not hold"):
        applied([(1, 1, "a", 1, None)], [(1, 1, "z", 1, None, "update_preimage")])


def test_check_equal_compares_multisets_and_names_the_differences() -> None:
    check_equal("same", [(2,), (1,)], [(1,), (2,)])
    with pytest.raises(CampaignMismatch, match=r"missing 1: \[\(1,\)\]; unexpected 1: \[\(3,\)\]"):
        check_equal("version 4", [(1,), (2,)], [(2,), (3,)])
    with pytest.raises(CampaignMismatch, match=r"2 row\(s\) expected, 3 found"):
        check_equal("a duplicate", [(1,), (2,)], [(1,), (1,), (2,)])
