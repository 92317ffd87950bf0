"""`make bench-sizes` takes the 10M grid from `make bench` (benchmarks/run.py: sizes_from) only
when that run timed the same code (benchmarks/progress.py: code_id; the commit, for a run that
did not record it) at least as many times per case, and has every case."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import run  # noqa: E402
from cases import GRID  # noqa: E402


def results(path: Path, commit: str, repeat: int, cases: list[str], code: str | None = None) -> Path:
    doc = {
        "meta": {"commit": commit, "repeat": repeat, "rows": 10_000_000, **({"code": code} if code else {})},
        "cases": [{"case": name, "group": "grid", "rows": 10_000_000} for name in cases]
        + [{"case": "upsert_recent", "group": "dbt", "rows": 10_000_000}],
    }
    path.write_text(json.dumps(doc))
    return path


def args(path: Path, commit: str = "abc1234", repeat: int = 5, code: str = "c0de") -> argparse.Namespace:
    return argparse.Namespace(sizes_from=path, commit=commit, repeat=repeat, cases="grid", code=code)


def test_the_grid_of_the_same_commit_is_taken(tmp_path: Path) -> None:
    path = results(tmp_path / "results.json", "abc1234", 5, [c.name for c in GRID])
    records = run.sizes_from(args(path))
    assert [r["case"] for r in records] == [c.name for c in GRID]  # not the dbt case


@pytest.mark.parametrize(
    ("commit", "repeat", "said"),
    [
        ("def5678", 5, "it timed commit def5678 5 times per case; this run needs commit abc1234"),
        ("abc1234", 3, "it timed commit abc1234 3 times per case; this run needs commit abc1234"),
        ("abc1234+changes", 5, "it timed commit abc1234+changes 5 times"),
    ],
)
def test_another_commit_or_fewer_runs_is_refused(tmp_path: Path, commit: str, repeat: int, said: str) -> None:
    path = results(tmp_path / "results.json", commit, repeat, [c.name for c in GRID])
    with pytest.raises(SystemExit, match="run `make bench` on this code first") as caught:
        run.sizes_from(args(path))
    assert said in str(caught.value)


def test_the_same_code_is_taken_from_a_later_commit(tmp_path: Path) -> None:
    # The results were committed after the run: HEAD moved, the code it timed did not.
    path = results(tmp_path / "results.json", "abc1234", 5, [c.name for c in GRID], code="c0de")
    records = run.sizes_from(args(path, commit="def5678", code="c0de"))
    assert len(records) == len(GRID)


@pytest.mark.parametrize(
    ("code", "said"),
    [
        ("beef", "it timed code beef 5 times per case; this run needs code c0de"),
        ("c0de+changes", "it timed code c0de+changes 5 times"),
    ],
)
def test_other_code_is_refused_whatever_the_commit(tmp_path: Path, code: str, said: str) -> None:
    path = results(tmp_path / "results.json", "abc1234", 5, [c.name for c in GRID], code=code)
    with pytest.raises(SystemExit, match="on this code first") as caught:
        run.sizes_from(args(path, code="c0de"))
    assert said in str(caught.value)


def test_a_run_without_some_case_is_refused(tmp_path: Path) -> None:
    path = results(tmp_path / "results.json", "abc1234", 5, [c.name for c in GRID[1:]])
    with pytest.raises(SystemExit, match=f"it has no run of {GRID[0].name}$"):
        run.sizes_from(args(path))


def test_a_missing_file_says_what_to_run(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="no such file; run `make bench` first"):
        run.sizes_from(args(tmp_path / "results.json"))
