"""The storage refuses one step of applying a commit, at every step of every shape.

Hadoop's ``rename`` and ``delete`` report a refusal by returning false, not by raising; a
replaced file that was not deleted stays next to its rewritten copy (issue 28). Each trial
runs a shape's merge in the test process with a storage (harness.Refusal) that refuses
exactly one call of applying the committed entry — the i-th move into place, the i-th delete
of a replaced file, or the creation of the applied marker — by returning false and doing
nothing, and checks that

* the merge raises MergeCommittedError naming the refused file, and stopped right there (the
  fault-point trace ends just before the step); version 1 is committed and not applied;
* while it is stuck, every reader (catalog and folder, table and change feed) sees exactly the
  rows the steps done so far left in place;
* recovery while the refusal persists raises JournalError naming the same file, moves or
  deletes nothing more, and leaves the version unapplied;
* once the refusal is lifted, recovery rolls version 1 forward and every reader sees exactly
  the state an uninterrupted merge leaves: no row lost or duplicated, no staging left.

The steps come from the fault-point trace of an uninterrupted run of the same merge (which
also gives the post-merge state); each trial's entry has as many moves and deletes as that
trace, and every step is refused once (`make test`: the first and last move and delete and
the marker, as harness.crash_steps samples; `make test-long`: all). (The one step that is not
a storage call, registering new partitions, is a catalog statement; the kill suites cover
it.) Each trial merges into a fresh target, a copy of one that was never merged into.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from dbt.adapters.rowmerge.merge import JournalError, MergeCommittedError, recover, run_merge
from dbt.adapters.rowmerge.merge import run as run_module
from dbt.adapters.rowmerge.merge.faults import FAULT_TRACE_ENV
from dbt.adapters.rowmerge.merge.journal import LOG_DIR, STAGING_DIR, Entry, Journal
from dbt.adapters.rowmerge.merge.storage import STORAGE_CONF, HadoopStorage
from tests.engine.helpers import session_conf
from tests.reliability.harness import (
    APPLIED_STEP,
    BEFORE_COMMIT,
    SHAPES,
    Expected,
    Outcome,
    Refusal,
    Shape,
    Table,
    copy_target,
    crash_steps,
    create_target,
    expected_states,
    journal_of,
    losses,
    observe,
    partition_of,
    recover_and_observe,
    refusing_storage_for,
    spec,
    stuck_state,
)

# (shape, the engine's storage): the upsert on Hadoop's storage, the partitioned NOT MATCHED BY
# SOURCE shape on pyarrow.fs (a Connect client's storage); both write a change feed, so every
# kind of apply step (data move, feed move, delete, partition, marker) is refused on both
# storages (19 trials; the suite's time budget keeps it to two shapes).
CASES = [("upsert", "hadoop"), ("nmbs_partitioned", "arrow")]


# These tables hold a few rows: adaptive execution re-plans every query at a cost above what
# it saves, and one shuffle partition does what four do (the victims of the other fault
# suites run so too). The commit of each shape moves and deletes as many files either way,
# and the steps are taken from a run under the same settings.
TINY_TABLES = {"spark.sql.adaptive.enabled": "false", "spark.sql.shuffle.partitions": "1"}


@dataclass(frozen=True)
class Reference:
    """A shape's merge run without a refusal, and a target to copy each trial's from."""

    expected: Expected  # what readers see before and after it
    steps: list[str]  # the steps of its commit (fault-point names), in order
    pristine: Table  # a target of the shape, never merged into


@pytest.fixture(scope="module")
def reference(
    spark: SparkSession, rdb: str, tmp_path_factory: pytest.TempPathFactory
) -> Callable[[Shape], Reference]:
    """Each shape's :class:`Reference`, made once per module. Both storages' trials of a shape
    share it: the files a merge writes, and so its steps and outcome, do not depend on the
    storage that moves them (each trial checks its entry has as many moves and deletes)."""
    made: dict[str, Reference] = {}

    def get(shape: Shape) -> Reference:
        if shape.name not in made:
            trace = tmp_path_factory.mktemp("refusals") / f"{shape.name}.trace"
            with pytest.MonkeyPatch.context() as m:
                m.setenv(FAULT_TRACE_ENV, str(trace))
                expected = expected_states(spark, rdb, shape)
            pristine = create_target(spark, f"{rdb}.{shape.name}_pristine", shape)
            made[shape.name] = Reference(expected, trace.read_text().split(), pristine)
        return made[shape.name]

    return get


@pytest.mark.slow
@pytest.mark.parametrize(("shape_name", "storage"), CASES)
def test_apply_refused_step_is_named_left_unapplied_and_recovered(
    spark: SparkSession,
    rdb: str,
    reference: Callable[[Shape], Reference],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    record_property: Any,
    shape_name: str,
    storage: str,
) -> None:
    shape = SHAPES[shape_name]
    with session_conf(spark, {STORAGE_CONF: storage, **TINY_TABLES}):
        # The steps of the merge's commit, from its uninterrupted run.
        ref = reference(shape)
        steps = ref.steps
        moves = [s for s in steps if s.startswith("move_")]
        deletes = [s for s in steps if s.startswith("delete_")]
        assert steps == [*BEFORE_COMMIT, "entry", *moves, "registered", *deletes, "before_applied", "applied"]
        assert len(moves) >= 2 and deletes, steps

        # make test refuses the first and last move and delete (crash_steps); test-long all.
        refusable = [*crash_steps([*moves, *deletes]), APPLIED_STEP]
        # Every trial's target, built before any trial runs.
        tables = [
            copy_target(spark, ref.pristine, f"{rdb}.{shape.name}_{storage}_{k}", shape)
            for k in range(len(refusable))
        ]
        covered: list[str] = []
        lost = duplicated = 0
        for step, table in zip(refusable, tables, strict=True):
            refused, lo, du = _refuse_one_step(
                spark, monkeypatch, tmp_path, shape, table, step, steps, ref.expected
            )
            covered.append(refused)
            lost, duplicated = lost + lo, duplicated + du
    # Every step of the commit that acts on a file was refused in a trial of its own: each move,
    # each delete (found by the file its entry names) and the applied marker; make test's
    # sample of them: the first and last move and delete.
    assert covered == refusable
    trials = len(refusable)
    record_property(
        "reliability",
        {
            "refusal_trials": trials,
            f"refusal_trials_{shape.name}": trials,
            f"refusal_trials_{storage}_storage": trials,
            "refused_moves": sum(s.startswith("move_") for s in refusable),
            "refused_deletes": sum(s.startswith("delete_") for s in refusable),
            "refused_markers": 1,
            "rows_lost": lost,
            "rows_duplicated": duplicated,
        },
    )
    assert (lost, duplicated) == (0, 0)


def _refuse_one_step(
    spark: SparkSession,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    shape: Shape,
    table: Table,
    step: str,
    steps: list[str],
    expected: Expected,
) -> tuple[str, int, int]:
    """One trial: merge into ``table`` with ``step`` refused, recover with it still refused,
    lift it, recover. Returns the step the refused call was (found from the committed entry),
    and the rows lost and duplicated after the last recovery."""
    files = HadoopStorage(spark)
    partitions_before = {partition_of(f.path, table.location) for f in files.list_data_files(table.location)}
    refusal = Refusal(table.location, step)
    monkeypatch.setattr(run_module, "storage_for", refusing_storage_for(refusal))

    trace = tmp_path / f"trace_{step}.txt"
    with monkeypatch.context() as m:
        m.setenv(FAULT_TRACE_ENV, str(trace))
        with pytest.raises(MergeCommittedError) as raised:
            run_merge(spark, spec(shape, table, f"ref_src_{shape.name}"))
    # It stopped at the refused step: every step before it done, none after it.
    assert trace.read_text().split() == steps[: steps.index(step)], step
    journal = journal_of(spark, table)
    assert journal.listing() == ([0, 1], {0}), step
    entry = journal.read_entry(1)
    # The entry the trace was taken from and this one move and delete as many files.
    assert [f"move_{i}" for i in range(len(entry.moves()))] == [s for s in steps if s.startswith("move_")]
    assert [f"delete_{i}" for i in range(len(entry.removed))] == [s for s in steps if s.startswith("delete_")]
    assert refusal.path is not None and refusal.refused == 1, (step, refusal)
    refused, problem = _step_of(journal, entry, refusal.path)
    assert refused == step, f"refusing {step} refused the call of {refused}"
    assert raised.value.version == 1
    assert problem in str(raised.value), (step, str(raised.value))

    # While stuck, readers see the files the steps done so far left in place (harness.stuck_state
    # says why each reader sees what it sees): after a refused move, the table as it stands
    # (the pre-merge rows and those of the files moved so far); after a refused delete, the
    # post-merge rows and those of the replaced files not deleted yet.
    stuck = observe(spark, table, shape)
    assert stuck == stuck_state(spark, table, shape, entry, step, expected, partitions_before), step
    if step.startswith("delete_"):
        # The rows of the replaced file that was not deleted are read next to their new versions.
        assert stuck.rows != expected.post.rows and losses(stuck, expected.post)[0] == 0, step

    # Recovery while the storage still refuses: it names the same file and changes nothing.
    listed = _listing(files, table)
    with pytest.raises(JournalError) as again:
        recover(spark, table.name, lock_timeout_s=60)
    assert f"Cannot finish the interrupted commit of version 1 of {table.name}: {problem}" in str(again.value)
    assert refusal.refused == 2, step
    assert journal.listing() == ([0, 1], {0}), step
    assert _listing(files, table) == listed, step

    refusal.lifted = True
    outcome = recover_and_observe(spark, table, shape, Outcome(0, "", "", False, False))
    assert outcome.committed and not outcome.applied and outcome.recovered == [1], step
    assert journal.listing() == ([0, 1], {0, 1}), step
    assert outcome.state is not None
    lost, duplicated = losses(outcome.state, expected.post)
    assert outcome.state == expected.post, f"after refusing {step} and recovering: not the post-merge state"
    return refused, lost, duplicated


def _step_of(journal: Journal, entry: Entry, path: str) -> tuple[str, str]:
    """The apply step of ``entry`` that acts on ``path`` (a move's source), and the problem apply
    reports when that step is refused."""
    marker = journal.applied_path(entry.version)
    if path == marker:
        return APPLIED_STEP, f"could not create {marker}: the storage reported it not written"
    for i, f in enumerate(entry.moves()):
        if f.staged == path:
            return (
                f"move_{i}",
                f"could not move {f.staged} to {f.path}: the storage reported the move as not done",
            )
    for i, f in enumerate(entry.removed):
        if f.path == path and entry.retains:  # moved into retained/<version>/, not deleted
            kept = journal.retained_path(entry.version, f.path)
            return (
                f"delete_{i}",
                f"could not move {f.path}, which version {entry.version} replaces, to {kept} (the "
                "storage reported the move as not done)",
            )
        if f.path == path:
            return (
                f"delete_{i}",
                f"could not delete {f.path}, which version {entry.version} replaces (the storage "
                "reported it not deleted)",
            )
    raise AssertionError(f"{path} is not a file version {entry.version} moves or deletes")


def _listing(files: HadoopStorage, table: Table) -> list[str]:
    """The data files of the table and of its change table, its staged files and the names in
    its journal's folder."""
    log = f"{table.location}/{LOG_DIR}"
    roots = (table.location, table.changes_location, f"{log}/{STAGING_DIR}")
    return [f.path for root in roots for f in files.list_data_files(root)] + files.list_names(log)
