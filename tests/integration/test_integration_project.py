"""The integration dbt project end to end: scripts/demo.py in its own process and Spark.

Batch 0 creates every table, batches 1 and 2 merge; the project's own singular tests check
the exact table state after each batch (demo.py fails if any dbt command fails). Here we
also check every merge's metrics against what the seeds imply.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "scripts" / "demo.py"

# (updated, inserted, deleted) per model for the merges of batch 1 and batch 2.
EXPECTED_MERGES: dict[int, dict[str, tuple[int, int, int]]] = {
    1: {
        # Bob, Carol updated; Alice unchanged (not counted); Frank, Grace inserted.
        "customers_upsert": (2, 2, 0),
        # Same rows: Alice's updated_at is not newer, so no update either way.
        "customers_latest": (2, 2, 0),
        # Bob updated (tier/updated_at only); Frank and Carol are bronze: never inserted,
        # not even by the first run (batch 0), so Carol has no row to update.
        "customers_selective": (1, 1, 0),
        # U 101, U 103 updated; D 102 deleted; I 106 inserted; D 999 (unknown) ignored.
        "orders_cdc": (2, 1, 1),
        "orders_cdc_shorthand": (2, 1, 1),
        # A/west updated, E/east inserted, B/east missing from the snapshot: deleted.
        "inventory_mirror": (1, 1, 1),
        # Account 2 updated; 3 and 4 missing: soft-deleted (2 updates); 5 inserted.
        "accounts_soft_delete": (3, 1, 0),
        # Ticket 1 moves open -> closed, ticket 2 updated in place, ticket 6 inserted.
        "tickets_partitioned": (2, 1, 0),
    },
    2: {
        # Bob (stale, but plain upsert applies it), Dan updated; Heidi inserted.
        "customers_upsert": (2, 1, 0),
        # Bob's change is older than the row: skipped, and not inserted either.
        "customers_latest": (1, 1, 0),
        "customers_selective": (2, 1, 0),
        # 101 updated; 104 (U then D: D is latest) deleted; 102 re-created, 107 (U of an
        # unknown order) and 108 (I then U) inserted.
        "orders_cdc": (1, 3, 1),
        "orders_cdc_shorthand": (1, 3, 1),
        # A/east updated; B/east, F/west inserted; A/west, C/east, D/west deleted.
        "inventory_mirror": (1, 2, 3),
        # Account 1 updated, 3 revived (is_deleted false again), 2 soft-deleted; 4 stays
        # deleted and is not counted again.
        "accounts_soft_delete": (3, 0, 0),
        # Ticket 3 closed -> open, ticket 4 open -> on_hold (a new partition), 7 inserted.
        "tickets_partitioned": (2, 1, 0),
    },
}

# Rows not matched by source that were soft-deleted (numTargetRowsNotMatchedBySourceUpdated).
EXPECTED_SOFT_DELETES = {1: 2, 2: 1}

# Plain tables built downstream of a change feed (no merge of their own).
DOWNSTREAM = {"order_change_summary"}


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    work_dir = tmp_path_factory.mktemp("demo")
    proc = subprocess.run(
        [sys.executable, str(DEMO), "--work-dir", str(work_dir)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    return proc, work_dir


def _models(work_dir: Path, batch: int) -> dict[str, dict]:
    results = json.loads((work_dir / f"run_results_batch_{batch}.json").read_text())
    return {
        r["unique_id"].split(".")[-1]: r for r in results["results"] if r["unique_id"].startswith("model.")
    }


@pytest.mark.slow
def test_demo_succeeds(demo: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    proc, work_dir = demo
    assert proc.returncode == 0, proc.stdout[-20000:] + proc.stderr[-5000:]
    summary = json.loads((work_dir / "demo_summary.json").read_text())
    assert summary["ok"] is True
    assert [b["batch"] for b in summary["batches"]] == [0, 1, 2]
    assert [b["exit_codes"] for b in summary["batches"]] == [{"build": 0}, {"build": 0}, {"build": 0}]
    # Each build ran the project's tests of the batch (exact table states), and all passed.
    for batch in (0, 1, 2):
        results = json.loads((work_dir / f"run_results_batch_{batch}.json").read_text())["results"]
        tests = [r["status"] for r in results if r["unique_id"].startswith("test.")]
        assert len(tests) >= 8 and set(tests) == {"pass"}, (batch, tests)
    assert "total " in proc.stdout and "; OK" in proc.stdout


@pytest.mark.slow
def test_history_of_the_change_feed_model(demo: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    proc, work_dir = demo
    assert proc.returncode == 0, proc.stdout[-20000:]
    history = json.loads((work_dir / "demo_summary.json").read_text())["history"]
    assert history[0] == (
        "version | timestamp | operation | inserted | updated | deleted | files added | files removed"
    )
    # version | time | operation | inserted | updated | deleted (EXPECTED_MERGES) | files
    rows = [[part.strip() for part in line.split("|")] for line in history[1:]]
    assert [(r[0], r[2], r[3], r[4], r[5]) for r in rows] == [
        ("2", "MERGE", "3", "1", "1"),
        ("1", "MERGE", "1", "2", "1"),
        ("0", "CREATE TABLE", "5", "0", "0"),
    ]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00", r[1]) for r in rows)


@pytest.mark.slow
def test_first_run_creates_every_table(demo: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    proc, work_dir = demo
    assert proc.returncode == 0, proc.stdout[-20000:]
    models = _models(work_dir, 0)
    assert set(models) == set(EXPECTED_MERGES[1]) | DOWNSTREAM
    for name, result in models.items():
        assert result["status"] == "success", name
        assert result["adapter_response"].get("code") != "MERGE", name


@pytest.mark.slow
@pytest.mark.parametrize("batch", [1, 2])
def test_merge_metrics(demo: tuple[subprocess.CompletedProcess[str], Path], batch: int) -> None:
    proc, work_dir = demo
    assert proc.returncode == 0, proc.stdout[-20000:]
    models = _models(work_dir, batch)
    assert set(models) == set(EXPECTED_MERGES[batch]) | DOWNSTREAM
    for name, (updated, inserted, deleted) in EXPECTED_MERGES[batch].items():
        response = models[name]["adapter_response"]
        metrics = response["metrics"]
        got = (
            metrics["numTargetRowsUpdated"],
            metrics["numTargetRowsInserted"],
            metrics["numTargetRowsDeleted"],
        )
        assert got == (updated, inserted, deleted), f"batch {batch} {name}: {metrics}"
        assert response["code"] == "MERGE"
        assert response["version"] == batch, name
        message = f"MERGE {updated} updated, {inserted} inserted, {deleted} deleted;"
        assert response["_message"].startswith(message), response["_message"]
        # The summary printed by demo.py carries the same run line.
        assert any(line.split()[:1] == [name] and message in line for line in proc.stdout.splitlines()), (
            f"no run line for {name} in batch {batch}"
        )
    soft = models["accounts_soft_delete"]["adapter_response"]["metrics"]
    assert soft["numTargetRowsNotMatchedBySourceUpdated"] == EXPECTED_SOFT_DELETES[batch]
    mirror = models["inventory_mirror"]["adapter_response"]["metrics"]
    assert mirror["numTargetRowsNotMatchedBySourceDeleted"] == EXPECTED_MERGES[batch]["inventory_mirror"][2]
    # Only orders_cdc keeps a change feed; its rows are checked by the project's own test
    # of order_change_summary.
    for name in EXPECTED_MERGES[batch]:
        added = models[name]["adapter_response"]["metrics"]["numTargetChangeFilesAdded"]
        assert (added > 0) == (name == "orders_cdc"), (name, added)
    assert models["order_change_summary"]["status"] == "success"


# customers_snapshot (hard_deletes='new_record'): (versions closed, versions inserted) per
# batch. 1: Bob, Carol changed, Dan, Eve gone (each closed + one new version or deletion
# record), Frank, Grace new. 2: Alice, Carol, Frank, Grace gone, Dan's deletion record closed
# by Daniel, Heidi new; Eve is still deleted and Bob's older updated_at is no change.
EXPECTED_SNAPSHOT = {1: (4, 6), 2: (5, 6)}


@pytest.mark.slow
@pytest.mark.parametrize("batch", [0, 1, 2])
def test_snapshot_runs_through_the_engine(
    demo: tuple[subprocess.CompletedProcess[str], Path], batch: int
) -> None:
    """The snapshot is created by batch 0 and merged by the engine after (journal versions 1, 2);
    its rows are checked by the project's own test, assert_customers_snapshot_state."""
    proc, work_dir = demo
    assert proc.returncode == 0, proc.stdout[-20000:]
    results = json.loads((work_dir / f"run_results_batch_{batch}.json").read_text())["results"]
    by_id = {r["unique_id"].split(".")[-1]: r for r in results}
    assert by_id["customers_snapshot"]["status"] == "success"
    assert by_id["assert_customers_snapshot_state"]["status"] == "pass"
    response = by_id["customers_snapshot"]["adapter_response"]
    if batch == 0:
        assert response.get("code") != "MERGE"
        return
    assert response["code"] == "MERGE" and response["version"] == batch
    metrics = response["metrics"]
    got = (metrics["numTargetRowsUpdated"], metrics["numTargetRowsInserted"], metrics["numTargetRowsDeleted"])
    assert got == (*EXPECTED_SNAPSHOT[batch], 0), metrics


@pytest.mark.slow
def test_empty_run_skips_every_merge(demo: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    """`dbt build --empty` of the merge models and the snapshot after the last batch: every one
    is skipped, nothing changes
    (test_history_of_the_change_feed_model sees no version after batch 2's)."""
    proc, work_dir = demo
    assert proc.returncode == 0, proc.stdout[-20000:]
    empty = json.loads((work_dir / "demo_summary.json").read_text())["empty_run"]
    assert empty["exit_code"] == 0
    assert {m["model"]: m["message"] for m in empty["models"]} == {
        name: f"MERGE skipped (--empty): rowmerge_it.{name} not changed"
        for name in [*EXPECTED_MERGES[2], "customers_snapshot"]
    }


@pytest.mark.slow
def test_console_is_quiet(demo: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    """No Spark session warning per statement, no stage progress bars, no doubled prefix."""
    proc, _ = demo
    assert proc.returncode == 0, proc.stdout[-20000:]
    out = proc.stdout + proc.stderr
    assert "Using an existing Spark session" not in out
    assert "[Stage " not in out
    assert "rowmerge: rowmerge:" not in out and "adapter: rowmerge:" not in out


# Lines the JVM prints when its output reaches the console: Java stack frames, Spark's log
# lines (date, level, class) and its start-up notes.
_JAVA_FRAME = re.compile(r"^\s*(at [\w$.<>]+\(|Caused by: |\.\.\. \d+ more)")
_SPARK_LOG = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (TRACE|DEBUG|INFO|WARN|ERROR|FATAL) ")
_SPARK_START = (
    "Using Spark's default log4j profile",
    "Setting default log level",
    "WARNING: Using incubator",
)
# The only adapter lines of the demo: its deliberate first-run warnings (`op` is selected only
# by incremental runs; see integration_project/models/orders_cdc*.sql), in batch 0.
_EXPECTED_ADAPTER_LINES = {
    0: ["first run of rowmerge_it.orders_cdc: ", "first run of rowmerge_it.orders_cdc_shorthand: "],
    1: [],
    2: [],
}


def _batches(stdout: str) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    current = -1
    for line in stdout.splitlines():
        if line.startswith("#####"):  # a batch, or the --empty runs after them (-1)
            found = re.match(r"^##### batch (\d+) #####", line)
            current = int(found.group(1)) if found else -1
        out.setdefault(current, []).append(line)
    return out


@pytest.mark.slow
def test_console_shows_dbt_lines_only(demo: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    """What a user sees of a `dbt build` batch: dbt's own lines (one START and one result line
    per model), nothing from Spark's JVM (start-up lines, log lines, Java stack traces: they are
    in logs/spark.log) and no adapter progress line (those are at --log-level debug)."""
    proc, work_dir = demo
    assert proc.returncode == 0, proc.stdout[-20000:]
    lines = (proc.stdout + proc.stderr).splitlines()
    assert [line for line in lines if _JAVA_FRAME.match(line)] == []
    assert [line for line in lines if _SPARK_LOG.match(line)] == []
    assert [line for line in lines if line.startswith(_SPARK_START)] == []
    for batch, batch_lines in _batches(proc.stdout).items():
        if batch < 0:
            continue
        marker = "RowMerge adapter: "
        adapter = sorted(line.split(marker, 1)[1] for line in batch_lines if marker in line)
        expected = _EXPECTED_ADAPTER_LINES[batch]
        assert len(adapter) == len(expected), (batch, adapter)
        assert all(got.startswith(want) for got, want in zip(adapter, expected, strict=True)), adapter
        # one START line and one result line per model: nothing else names a model
        for model in EXPECTED_MERGES[1]:
            name = f"rowmerge_it.{model}"
            named = [line for line in batch_lines if f"{name} " in line or line.endswith(name)]
            assert len(named) == 2, (batch, model, named)
    spark_logs = [p for p in work_dir.rglob("spark.log") if p.stat().st_size > 0]
    assert spark_logs, "Spark's own lines were not kept in logs/spark.log"
