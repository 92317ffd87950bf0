from __future__ import annotations

import pytest

from dbt.adapters.rowmerge.merge.metrics import (
    COUNTER_NAMES,
    TIMER_NAMES,
    DryRunReport,
    MergeMetrics,
    MergeResult,
    timed,
)


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


def test_dry_run_report_line_and_dict() -> None:
    report = DryRunReport(
        target="a.b",
        source_rows=9,
        files=64,
        bytes=262_458_573,
        files_read=5,
        files_rewritten=3,
        bytes_rewritten=12_688_179,
        clauses=[
            ("clauses[0] (when: matched, action: delete)", "delete", 4),
            ("clauses[1] (when: matched, action: update)", "update", 120),
            ("clauses[2] (when: not_matched, action: insert)", "insert", 30),
            ("clauses[3] (when: not_matched_by_source, action: update)", "update", 2),
        ],
    )
    assert report.summary() == (
        "MERGE dry run: a.b would update 122, insert 30, delete 4 rows; rewrite 3 of 64 files "
        "(12.1 MB of 250.3 MB); nothing written"
    )
    assert report.as_dict()["clauses"][2] == {
        "clause": "clauses[2] (when: not_matched, action: insert)",
        "action": "insert",
        "rows": 30,
    }
    small = DryRunReport("a.b", 1, 1, 900, 1, 1, 900, [])
    assert small.summary().endswith("rewrite 1 of 1 files (900 bytes of 900 bytes); nothing written")
    assert (
        DryRunReport("a.b", 1, 1, 3 * 1024**4, 1, 0, 1536, [])
        .summary()
        .endswith("(1.5 KB of 3072.0 GB); nothing written")
    )
