"""Two processes merge into the same table at the same moment, round after round.

Two long-lived victim processes (serve mode, each with its own Spark) receive, in every
round, one of two conflicting merges into a fresh table at the same time. The table's lock
serializes them: both must succeed, with versions 1 and 2 — or, in the rounds run with
``lock_timeout_s: 0``, the one that finds the lock taken may fail with the lock error — and
the table and its change feed must equal exactly the outcome of running the merges one
after the other in the order of their versions (or of the one merge that ran). The two
merges conflict on purpose: each order gives a different table.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dbt.adapters.rowmerge.merge import run_merge
from tests.reliability.harness import (
    CDC,
    REPO,
    Outcome,
    Shape,
    State,
    create_target,
    job,
    losses,
    observe,
    recover_and_observe,
    spec,
    victim_command,
    victim_env,
)

WAITING_ROUNDS = 8  # lock_timeout_s large: both merges must succeed
IMPATIENT_ROUNDS = 2  # lock_timeout_s 0: the later one may fail with the lock error

RACE = Shape(
    name="race",
    ddl=CDC.ddl,
    files=CDC.files,
    source_ddl=CDC.source_ddl,
    source_rows=[],
    clauses=CDC.clauses,
)
# A deletes 5 that B updates, inserts 100 that B updates, and both update 2.
A_ROWS = [(1, "a1", 11, "U"), (2, "a2", 22, "U"), (5, "", 0, "D"), (100, "a100", 1000, "I")]
B_ROWS = [(2, "b2", 220, "U"), (3, "b3", 330, "U"), (5, "b5", 550, "U"), (100, "b100", 1001, "U")]
SOURCES = {"A": A_ROWS, "B": B_ROWS}


def serial_state(spark, db: str, order: tuple[str, ...]) -> State:
    """The table and feed after running the merges of ``order`` one after the other."""
    table = create_target(spark, f"{db}.serial_{''.join(order)}", RACE)
    for name in order:
        view = f"serial_src_{''.join(order)}_{name}"
        spark.createDataFrame(SOURCES[name], RACE.source_ddl).createOrReplaceTempView(view)
        run_merge(spark, spec(RACE, table, view))
    return observe(spark, table, RACE)


class Worker:
    """A serve-mode victim: one merge per JSON line on stdin, one result line on stdout."""

    def __init__(self, root: Path, java_opts: str, index: int) -> None:
        self.err = root / f"worker_{index}.err"
        self.proc = subprocess.Popen(
            victim_command("serve", str(root)),
            cwd=REPO,
            env=victim_env(java_opts),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.err.open("w"),
            text=True,
        )
        assert self._line() == "READY"

    def _line(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, f"worker died: {self.err.read_text()[-3000:]}"
        return line.rstrip("\n")

    def send(self, data: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(data) + "\n")
        self.proc.stdin.flush()

    def result(self) -> dict[str, Any]:
        while True:
            line = self._line()
            if line.startswith(("RESULT ", "ERROR ")):
                out: dict[str, Any] = json.loads(line.split(" ", 1)[1])
                return out

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=120)


@pytest.fixture(scope="module")
def workers(java_opts: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Worker]]:
    root = tmp_path_factory.mktemp("workers")
    pair = [Worker(root, java_opts, 0), Worker(root, java_opts, 1)]
    yield pair
    for w in pair:
        w.close()


@pytest.mark.slow
def test_two_processes_merging_at_once_serialize(spark, rdb, tmp_path: Path, workers, record_property):
    expected = {order: serial_state(spark, rdb, order) for order in (("A", "B"), ("B", "A"), ("A",), ("B",))}
    assert len({repr(s) for s in expected.values()}) == 4  # every order gives another table
    counts = {"concurrent_trials": 0, "concurrent_overlapping": 0, "concurrent_lock_errors": 0}
    lost = duplicated = 0
    rounds = WAITING_ROUNDS + IMPATIENT_ROUNDS
    tables = [create_target(spark, f"{rdb}.race_0", RACE)]
    for r in range(rounds):
        timeout = 120 if r < WAITING_ROUNDS else 0
        table = tables[r]
        # Alternate which process gets which merge.
        assigned = {"A": workers[r % 2], "B": workers[(r + 1) % 2]}
        for name, worker in assigned.items():
            data = job(RACE, table, tmp_path, source_rows=SOURCES[name], lock_timeout_s=timeout)
            data["spec"]["source"] = f"src_{name}"
            worker.send(data)
        if r + 1 < rounds:  # the next round's table, built while the two merges run
            tables.append(create_target(spark, f"{rdb}.race_{r + 1}", RACE))
        results = {name: worker.result() for name, worker in assigned.items()}
        outcome = recover_and_observe(spark, table, RACE, Outcome(0, "", "", False, False))
        assert outcome.state is not None

        done = sorted((res["version"], name) for name, res in results.items() if res["ok"])
        failed = [(name, res) for name, res in results.items() if not res["ok"]]
        for name, res in failed:
            assert timeout == 0, f"round {r}: {name} failed although it could wait: {res}"
            assert res["error"] == "ConcurrentMergeError", res
            assert res["message"].startswith(f"MERGE on {table.name} gave up after waiting 0 s"), res
        assert [v for v, _ in done] == list(range(1, len(done) + 1)), (r, results)
        order = tuple(name for _, name in done)
        assert outcome.state == expected[order], f"round {r}: not the serial outcome of {order}"
        lo, du = losses(outcome.state, expected[order])
        lost, duplicated = lost + lo, duplicated + du

        a, b = results["A"], results["B"]
        counts["concurrent_trials"] += 1
        counts["concurrent_overlapping"] += max(a["started"], b["started"]) < min(a["ended"], b["ended"])
        counts["concurrent_lock_errors"] += len(failed)
    record_property("reliability", {**counts, "rows_lost": lost, "rows_duplicated": duplicated})
    assert (lost, duplicated) == (0, 0)
    # The merges really ran at the same time (one waited for the other's lock) in most rounds.
    assert counts["concurrent_overlapping"] >= WAITING_ROUNDS // 2, counts
