"""The aging benchmark's merge-time targets (benchmarks/aging.py: checks): the last tenth against
the first tenth replayed after the last merge, and against the first tenth as it ran only when
both ran in one slice (the machine's speed moves between sessions)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import aging  # noqa: E402

DECILES = {"row_level_merge": [{"mean_s": 1.297, "p95_s": 1.753}, {"mean_s": 1.822, "p95_s": 2.173}]}
END = {
    "fresh": {"data_files": 72, "spark_scan_s": 1.811, "pyarrow_scan_s": 0.405, "probe_files_read": 1},
    "row_level_merge": {
        "data_files": 101,
        "most_small_files_in_a_partition": 16,
        "spark_scan_s": 2.119,
        "pyarrow_scan_s": 0.405,
        "probe_files_read": 1,
    },
}
REPLAY = {"mean_s": 1.881, "p95_s": 2.567, "same_rows": True}
TWO_SLICES = [{"from_merge": 1, "to_merge": 445}, {"from_merge": 446, "to_merge": 1000}]


def verdicts(checks: dict) -> dict:
    return {k: (c["measured"], c["held"]) for k, c in checks.items()}


def test_tenths_in_two_slices_are_judged_against_the_replay_only() -> None:
    assert not aging._one_slice(TWO_SLICES, 1000)
    got = verdicts(aging.checks(DECILES, END, {}, REPLAY, one_slice=False))
    assert got["last decile / first replayed now: mean"] == (0.969, True)
    assert got["last decile / first replayed now: p95"] == (0.847, True)
    assert got["first decile replayed: same rows"] == ("yes", True)
    assert got["last/first decile mean (ran in another slice: no verdict)"] == (1.405, None)
    assert got["last/first decile p95 (ran in another slice: no verdict)"] == (1.24, None)


def test_tenths_in_one_slice_are_judged_both_ways() -> None:
    assert aging._one_slice([{"from_merge": 1, "to_merge": 1000}], 1000)
    got = verdicts(aging.checks(DECILES, END, {}, REPLAY, one_slice=True))
    assert got["last/first decile mean"] == (1.405, False)
    assert got["last decile / first replayed now: mean"] == (0.969, True)


def test_a_replay_with_other_rows_fails() -> None:
    got = verdicts(aging.checks(DECILES, END, {}, {**REPLAY, "same_rows": False}, one_slice=False))
    assert got["first decile replayed: same rows"] == ("no", False)
