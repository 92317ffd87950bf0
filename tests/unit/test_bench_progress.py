"""A benchmark run that spans sittings (benchmarks/progress.py, run.py --resume/--minutes): the
code it times ignores committed results, finished cases are kept and not timed again, a
resumed run must ask for the same code and timing, and a sitting ends between two cases."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import run  # noqa: E402
from cases import GRID  # noqa: E402
from progress import Progress, Stopped, code_id  # noqa: E402

PARAMS = {"mode": "cases", "code": "c0de", "cases": "grid", "repeat": 5, "rows": 1000, "files": 4}


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    for name, text in {
        "dbt/engine.py": "x = 1\n",
        "benchmarks/run.py": "y = 1\n",
        "benchmarks/results/results.json": "{}\n",
        "pyproject.toml": "[project]\n",
        "README.md": "hello\n",
    }.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    git(root.parent, "init", "-q", str(root))
    git(root, "add", ".")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    return root


def commit(root: Path, name: str, text: str) -> None:
    (root / name).write_text(text)
    git(root, "add", name)
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", name)


def test_results_and_docs_committed_later_keep_the_code_id(repo: Path) -> None:
    before = code_id(repo)
    assert len(before) == 12 and "+" not in before
    commit(repo, "benchmarks/results/results.json", '{"cases": []}\n')
    commit(repo, "README.md", "bye\n")
    assert code_id(repo) == before


@pytest.mark.parametrize("name", ["dbt/engine.py", "benchmarks/run.py", "pyproject.toml"])
def test_a_committed_change_to_the_code_changes_it(repo: Path, name: str) -> None:
    before = code_id(repo)
    commit(repo, name, "changed = True\n")
    assert code_id(repo) != before


def test_an_uncommitted_change_to_the_code_is_marked(repo: Path) -> None:
    before = code_id(repo)
    (repo / "benchmarks/results/results.json").write_text("[]\n")
    assert code_id(repo) == before  # results are not code
    (repo / "dbt/engine.py").write_text("x = 2\n")
    assert code_id(repo) == before + "+changes"


def test_a_rename_out_of_the_results_is_a_change_and_odd_result_names_are_not(repo: Path) -> None:
    before = code_id(repo)
    (repo / "benchmarks/results/a file é.json").write_text("{}\n")
    git(repo, "add", ".")
    assert code_id(repo) == before  # staged, under results/: git would quote this name
    commit(repo, "benchmarks/results/a file é.json", "[]\n")
    assert code_id(repo) == before
    git(repo, "mv", "benchmarks/results/results.json", "benchmarks/loader.py")
    assert code_id(repo) == before + "+changes"


def record(case: str, rows: int = 1000, files: int = 4) -> dict[str, Any]:
    systems = {s: {"seconds": 1.0} for s in run.SYSTEM_ORDER}
    return {"case": case, "rows": rows, "files": files, "identical": True, "problems": [], "systems": systems}


def add(progress: Progress, case: str, rows: int = 1000, files: int = 4, wrote: int | None = None) -> None:
    """A finished case asked for at ``rows`` in ``files`` files (its table got ``wrote``)."""
    progress.add(case, rows, files, record(case, rows, files if wrote is None else wrote))


def opened(out: Path, params: dict[str, Any] = PARAMS, **kw: Any) -> Progress:
    kw = {"resume": True, "minutes": None, "warmup": True, **kw}
    return Progress.open(out, params, "test machine", **kw)


def test_finished_cases_are_saved_and_a_resumed_run_keeps_them(tmp_path: Path) -> None:
    first = opened(tmp_path, resume=False)
    add(first, GRID[0].name)
    add(first, GRID[1].name, rows=2000, files=8)
    add(first, GRID[2].name, wrote=9)  # a partitioned table gets more files than asked for
    again = opened(tmp_path)
    assert again.done(GRID[0].name, 1000, 4) == record(GRID[0].name)
    assert again.done(GRID[1].name, 1000, 4) is None  # another size
    assert again.done(GRID[1].name, 2000, 8) == record(GRID[1].name, rows=2000, files=8)
    assert again.done(GRID[2].name, 1000, 4) == record(GRID[2].name, files=9)
    assert [s["cases"] for s in again.sittings] == [3, 0]


def test_a_run_without_resume_starts_again(tmp_path: Path) -> None:
    add(opened(tmp_path, resume=False), GRID[0].name)
    fresh = opened(tmp_path, resume=False)
    assert fresh.records == [] and len(fresh.sittings) == 1
    assert json.loads((tmp_path / "progress-cases.json").read_text())["records"] == []


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"code": "beef"}, "is a run of code='c0de'; this one asks for code='beef'"),
        ({"repeat": 3}, "is a run of repeat=5; this one asks for repeat=3"),
        ({"rows": 2000, "files": 8}, "is a run of files=4, rows=1000; this one asks for files=8, rows=2000"),
    ],
)
def test_a_resumed_run_must_ask_for_the_same_run(tmp_path: Path, change: dict[str, Any], said: str) -> None:
    add(opened(tmp_path, resume=False), GRID[0].name)
    with pytest.raises(SystemExit, match="run without --resume to start again") as caught:
        opened(tmp_path, {**PARAMS, **change})
    assert said in str(caught.value)
    assert len(json.loads((tmp_path / "progress-cases.json").read_text())["records"]) == 1  # kept


def test_uncommitted_code_cannot_resume(tmp_path: Path) -> None:
    dirty = {**PARAMS, "code": "c0de+changes"}
    add(opened(tmp_path, dirty, resume=False), GRID[0].name)
    with pytest.raises(SystemExit, match="uncommitted changes to dbt, benchmarks, pyproject.toml"):
        opened(tmp_path, dirty)


def test_resumed_cases_are_not_timed_again(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    saved = opened(tmp_path, resume=False)
    for case in GRID[:2]:
        add(saved, case.name)
    # No Spark session and no work folder: a case timed again would fail at once.
    records = run.run_cases(None, GRID[:2], 1000, 4, tmp_path / "nowhere", 5, opened(tmp_path))  # type: ignore[arg-type]
    assert records == [record(c.name) for c in GRID[:2]]
    assert "an earlier sitting" in capsys.readouterr().out


def test_a_sitting_ends_between_two_cases(tmp_path: Path) -> None:
    saved = opened(tmp_path, resume=False)
    add(saved, GRID[0].name)
    late = opened(tmp_path, minutes=0)
    with pytest.raises(Stopped, match=r"stopped after 1 finished case\(s\); go on with --resume"):
        run.run_cases(None, GRID[:2], 1000, 4, tmp_path / "nowhere", 5, late)  # type: ignore[arg-type]
    (tmp_path / "STOP").touch()
    asked = opened(tmp_path)  # a new sitting clears an old STOP file
    assert not (tmp_path / "STOP").exists()
    (tmp_path / "STOP").touch()
    with pytest.raises(Stopped):
        asked.check()


def test_the_warm_up_runs_once_per_sitting(tmp_path: Path) -> None:
    first = opened(tmp_path, resume=False)
    assert [first.take_warmup(), first.take_warmup()] == [True, False]
    assert opened(tmp_path).take_warmup() is True
    assert opened(tmp_path, warmup=False).take_warmup() is False


def test_the_duration_counts_sittings_not_the_gaps(tmp_path: Path) -> None:
    saved = opened(tmp_path, resume=False)
    saved.sittings[0].update(started="2026-11-29T07:00:00", seconds=600)
    saved._clock -= 600  # noqa: SLF001 - the first sitting ran ten minutes
    saved.save()
    later = opened(tmp_path)
    later._clock -= 300  # noqa: SLF001
    assert later.seconds() == 900
    assert later.dates().startswith("2026-11-29")


def test_resume_without_a_run_to_go_on_with_is_refused(tmp_path: Path) -> None:
    with pytest.raises(
        SystemExit, match="there is no run to go on with .*progress-cases.json does not exist"
    ):
        opened(tmp_path)
    assert not (tmp_path / "progress-cases.json").exists()


def test_a_finished_run_resumed_only_reports_again(tmp_path: Path) -> None:
    done = opened(tmp_path, resume=False)
    for case in GRID[:2]:
        add(done, case.name)
    done.finish()
    again = opened(tmp_path, minutes=0)  # even a sitting already over: nothing is left to time
    records = run.run_cases(None, GRID[:2], 1000, 4, tmp_path / "nowhere", 5, again)  # type: ignore[arg-type]
    assert records == [record(c.name) for c in GRID[:2]]
    assert json.loads((tmp_path / "progress-cases.json").read_text())["sittings"][0]["finished"] is True
