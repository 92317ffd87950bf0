from __future__ import annotations

import pytest

from dbt.adapters.rowmerge.merge.metrics import COUNTER_NAMES, TIMER_NAMES, MergeMetrics, MergeResult, timed


def test_merge_metrics_has_every_delta_name_zeroed() -> None:
    m = MergeMetrics().as_dict()
    assert set(m) == set(COUNTER_NAMES + TIMER_NAMES)
    assert "numTargetRowsNotMatchedBySourceDeleted" in m and "commitTimeMs" in m
    assert all(v == 0 for v in m.values())


def test_merge_metrics_rejects_unknown_name() -> None:
    with pytest.raises(KeyError, match="numRowsFrobnicated"):
        MergeMetrics()["numRowsFrobnicated"] = 1


def test_timed_records_even_when_block_raises() -> None:
    m = MergeMetrics()
    with pytest.raises(RuntimeError), timed(m, "scanTimeMs"):
        sum(range(200_000))
        raise RuntimeError("boom")
    assert m["scanTimeMs"] >= 0
    with timed(m, "commitTimeMs"):
        sum(range(2_000_000))
    assert m["commitTimeMs"] > 0


def test_merge_result_summary_is_the_dbt_run_line() -> None:
    m = MergeMetrics()
    m["numTargetRowsUpdated"] = 120
    m["numTargetRowsInserted"] = 30
    m["numTargetRowsDeleted"] = 4
    m["numTargetFilesRemoved"] = 3
    m["numTargetFilesBeforeSkipping"] = 64
    result = MergeResult(version=7, metrics=m.as_dict(), target="a.b")
    assert result.summary() == "MERGE 120 updated, 30 inserted, 4 deleted; 3 of 64 files rewritten"
    assert result.as_dict()["version"] == 7
