"""The aging benchmark's report from saved results (benchmarks/aging.py: report_finished, the
--report-only/--combine path): a finished shape's committed report (aging.json) joins the shapes
finished in the work folder, so a run spread over machines still gets one report."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import aging  # noqa: E402

COMMITTED = ROOT / "benchmarks" / "results" / "aging-partial" / "insert_heavy-engine-da1b3a7e.json"


def test_a_committed_shape_is_reported_again_as_it_was(tmp_path: Path) -> None:
    aging.report_finished(tmp_path / "work", ["insert_heavy", "scattered"], tmp_path / "out", [COMMITTED])
    doc = json.loads((tmp_path / "out" / "aging.json").read_text())
    committed = json.loads(COMMITTED.read_text())
    assert doc["shapes"] == committed["shapes"]  # scattered: not finished anywhere, left out
    assert doc["meta"]["engine"] == committed["meta"]["engine"]
    text = (tmp_path / "out" / "aging.md").read_text()
    assert "## insert_heavy: 1000 merges into 2,000,000 rows in 16 files" in text
    assert "| last decile / first replayed now: mean | 1.026 | 1.15 | yes |" in text
    assert "scattered" not in text and (tmp_path / "out" / "aging.png").is_file()


def test_a_shape_finished_in_the_work_folder_joins_them_in_the_order_asked(tmp_path: Path) -> None:
    # a second finished shape, saved as a run saves it (state.json with its result)
    result = dict(json.loads(COMMITTED.read_text())["shapes"][0], shape="recent_updates")
    (tmp_path / "work" / "recent_updates").mkdir(parents=True)
    state = {"engine": "abc", "merges": 1000, "base": {"rows": 2_000_000, "files": []}, "result": result}
    (tmp_path / "work" / "recent_updates" / "state.json").write_text(json.dumps(state))
    unfinished = {**state, "result": None}
    (tmp_path / "work" / "scattered").mkdir()
    (tmp_path / "work" / "scattered" / "state.json").write_text(json.dumps(unfinished))
    shapes = ["recent_updates", "scattered", "insert_heavy"]
    aging.report_finished(tmp_path / "work", shapes, tmp_path / "out", [COMMITTED], (2_000_000, 16))
    doc = json.loads((tmp_path / "out" / "aging.json").read_text())
    assert [s["shape"] for s in doc["shapes"]] == ["recent_updates", "insert_heavy"]
    assert doc["meta"]["engine"] == "abc, da1b3a7eb5f08a4fb6b81ebdc2390c8085228bcb"


def test_nothing_finished_says_so(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="no shape of scattered is finished"):
        aging.report_finished(tmp_path, ["scattered"], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_the_replay_says_how_it_ran_and_each_systems_last_tenth_against_it() -> None:
    shape = json.loads(COMMITTED.read_text())["shapes"][0]
    # the committed replay ran our engine alone: said so, and no per-system table
    alone = aging._replay_lines(shape)
    assert "row_level_merge alone, on a fresh copy of the base table" in alone[0] and len(alone) == 2
    # an interleaved replay of every system: each one's last tenth against its replayed first
    deciles = {
        "row_level_merge": [{"mean_s": 1.6, "p95_s": 2.4}, {"mean_s": 1.95, "p95_s": 2.7}],
        "delta_rs": [{"mean_s": 0.15, "p95_s": 0.26}, {"mean_s": 0.154, "p95_s": 0.239}],
    }
    replay = {
        "started": "s", "ended": "e", "merges": 100, "mean_s": 1.5, "median_s": 1.4, "p95_s": 2.0,
        "same_rows": True,
        "systems": {
            "row_level_merge": {"mean_s": 1.5, "p95_s": 2.0},
            "delta_rs": {"mean_s": 0.11, "p95_s": 0.2},
        },
    }  # fmt: skip
    lines = aging._replay_lines({"deciles": deciles, "replay": replay})
    assert "every system, interleaved as in the run" in lines[0]
    assert "same rows as the first tenth: yes" in lines[0]
    assert "| row_level_merge | 1.6 | 1.5 | 1.95 | 1.3 | 1.35 |" in lines
    assert "| delta_rs | 0.15 | 0.11 | 0.154 | 1.4 | 1.195 |" in lines


def test_a_replay_beside_the_last_tenth_says_so() -> None:
    replay = {
        "started": "s", "ended": "e", "merges": 100, "mean_s": 1.5, "median_s": 1.4, "p95_s": 2.0,
        "same_rows": False, "paired": True,
    }  # fmt: skip
    lines = aging._replay_lines({"deciles": {}, "replay": replay})
    assert "each merge in the same round as one of the last tenth's" in lines[0]
    assert "same rows as the first tenth: NO" in lines[0] and len(lines) == 2


def test_the_fresh_twin_is_told_beside_the_aged_last_tenth() -> None:
    deciles = {
        "row_level_merge": [
            {"mean_s": 5.0, "median_s": 5.0, "p95_s": 6.0},
            {"mean_s": 7.4, "median_s": 7.2, "p95_s": 8.8},
        ]
    }
    twin = {
        "started": "a",
        "ended": "b",
        "mean_s": 7.0,
        "median_s": 6.9,
        "p95_s": 8.0,
        "same_rows": True,
        "round_ratio": {"median": 1.04, "low": 1.01, "high": 1.08},
    }
    (line, _) = aging._twin_lines({"deciles": deciles, "fresh_twin": twin})
    assert "mean 7.0 s, median 6.9 s, p95 8.0 s, against 7.4 / 7.2 / 8.8 s on the aged table" in line
    assert (
        "(aged / fresh: mean 1.057, p95 1.1; per round median 1.04, 95 % bootstrap interval 1.01-1.08)"
        in line
    )
    assert line.endswith("same rows at the end: yes.")
    assert aging._twin_lines({"deciles": deciles}) == []
