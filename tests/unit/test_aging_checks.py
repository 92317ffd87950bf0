"""The aging benchmark's merge-time targets (benchmarks/aging.py: checks): the last tenth against
the first tenth replayed after the last merge, and against the first tenth as it ran only when
both ran in one slice (the machine's speed moves between sessions)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

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


def test_a_replay_beside_the_last_tenth_is_the_verdict_and_the_tenth_as_it_ran_is_not() -> None:
    paired = {**REPLAY, "paired": True}
    got = verdicts(aging.checks(DECILES, END, {}, paired, one_slice=True))
    assert got["last decile / first replayed beside it: mean"] == (0.969, True)
    assert got["last decile / first replayed beside it: p95"] == (0.847, True)
    as_ran = "last/first decile mean (rounds of the last tenth held the replay too: no verdict)"
    assert got[as_ran] == (1.405, None)
    assert not any("replayed now" in k for k in got)


def test_the_per_round_ratio_is_a_median_with_a_bootstrap_interval() -> None:
    first = [1.0] * 100
    last = [1.1] * 90 + [5.0] * 10  # ten GC pauses move a mean, not the median
    got = aging.paired_ratio(last, first)
    assert got == {"median": 1.1, "low": 1.1, "high": 1.1}
    spread = aging.paired_ratio([1.0 + i / 100 for i in range(100)], first)
    assert spread["low"] < spread["median"] < spread["high"] and abs(spread["median"] - 1.495) < 1e-9


def test_rounds_are_shuffled_by_merge_so_no_system_keeps_its_predecessor() -> None:
    live = {name: None for name in "abcde"}
    orders = [[n for n, _ in aging._round_order(live, k)] for k in range(1, 201)]
    assert orders[0] == [n for n, _ in aging._round_order(live, 1)]  # the same order for the same merge
    assert all(sorted(o) == list("abcde") for o in orders)
    before_a = {o[o.index("a") - 1] for o in orders if o.index("a") > 0}
    assert before_a == set("bcde")
    assert {o[0] for o in orders} == set("abcde")


def test_a_paired_replay_is_not_replaced_by_a_replay_now(tmp_path: Path) -> None:
    state = {"result": {"replay": {"paired": True}, "slices": [], "merges": 1000}}
    (tmp_path / "insert_heavy").mkdir()
    (tmp_path / "insert_heavy" / "state.json").write_text(json.dumps(state))
    with pytest.raises(SystemExit, match="replayed beside its last tenth"):
        aging.replay_finished(None, aging.SHAPES["insert_heavy"], tmp_path)  # type: ignore[arg-type]


def test_a_fresh_twin_is_reported_beside_the_targets_without_a_verdict() -> None:
    """The last tenth against the same merges on a fresh copy of the table's rows isolates its
    aging from its growth; it is shown, never judged, and the targets stay as they were."""
    paired = {**REPLAY, "paired": True}
    twin = {"mean_s": 1.7, "p95_s": 2.0, "same_rows": True}
    got = verdicts(aging.checks(DECILES, END, {}, paired, True, twin))
    assert got["last decile / same merges on a fresh copy of its rows beside it: mean (no verdict)"] == (
        1.072,
        None,
    )
    assert got["last decile / same merges on a fresh copy of its rows beside it: p95 (no verdict)"] == (
        1.087,
        None,
    )
    assert got["fresh twin: same rows as the aged table"] == ("yes", True)
    assert got["last decile / first replayed beside it: mean"] == (0.969, True)
    bad = verdicts(aging.checks(DECILES, END, {}, paired, True, {**twin, "same_rows": False}))
    assert bad["fresh twin: same rows as the aged table"] == ("no", False)
    assert verdicts(aging.checks(DECILES, END, {}, paired, True)).keys() == {
        k for k in got if "fresh copy" not in k and "twin" not in k
    }
