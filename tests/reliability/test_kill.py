"""SIGKILL the whole merge process (Python driver and its JVM) at random moments.

Each trial starts a victim in its own process group and kills the group at a random time,
stratified so the kills spread evenly (seeded; the seed is in every failure message):

* half the trials over the whole merge, from the moment it starts to a little past the
  time an uninterrupted merge took (measured first, in the same run);
* half over the commit protocol: each commit step is followed by a short pause
  (ROWMERGE_FAULT_DELAY_S) and the victim reports its steps on stdout
  (ROWMERGE_FAULT_TRACE), so the kill is timed from the end of staging and lands before
  the commit point, inside the apply window, or after it.

After each kill the test process recovers the table, and every reader must see exactly the
pre-merge or the post-merge state, change feed included.
"""

from __future__ import annotations

import os
import queue
import random
import threading
import time
from pathlib import Path

import pytest

from tests.reliability.harness import (
    SHAPES,
    Outcome,
    create_target,
    expected_states,
    job,
    kill_group,
    long_campaign,
    losses,
    recover_and_observe,
    result_line,
    run_victim,
    start_victim,
    victim_env,
    write_job,
)

TRIALS = 20 if long_campaign() else 8  # make test-long: 20
STEP_DELAY_S = 0.25
# From the end of data staging: change-feed staging (about 1 s), then 13-15 commit steps with
# the pause (about 3.5 s), then margin, so the last kills come after the merge finished.
PROTOCOL_S = 7.0


def _watch(stream, lines: queue.Queue) -> None:
    for line in stream:
        lines.put((time.monotonic(), line.rstrip("\n")))
    lines.put((time.monotonic(), None))


@pytest.mark.slow
def test_sigkill_at_random_moments_leaves_pre_or_post_state(
    spark, rdb, tmp_path: Path, java_opts, record_property
):
    seed = int(os.environ.get("ROWMERGE_KILL_SEED", "20261123"))
    rng = random.Random(seed)
    shapes = sorted(SHAPES)
    expected = {name: expected_states(spark, rdb, SHAPES[name]) for name in shapes}
    merge_s = _uninterrupted_merge_seconds(spark, rdb, tmp_path, java_opts, expected)
    n = TRIALS // 2
    plan = []  # (shape, kill during the protocol?, seconds after the trigger line)
    for k in range(n):
        plan.append((shapes[k % len(shapes)], False, rng.uniform(k, k + 1) * 1.2 * merge_s / n))
    for k in range(n):
        plan.append((shapes[k % len(shapes)], True, rng.uniform(k, k + 1) * PROTOCOL_S / n))

    counts = {"kill_trials": 0, "kill_before_commit": 0, "kill_in_apply_window": 0, "kill_after_apply": 0}
    lost = duplicated = 0
    tables = [create_target(spark, f"{rdb}.kill_0", SHAPES[plan[0][0]])]
    for i, (shape_name, in_protocol, after_s) in enumerate(plan):
        shape, table = SHAPES[shape_name], tables[i]
        protocol = {"ROWMERGE_FAULT_DELAY_S": str(STEP_DELAY_S), "ROWMERGE_FAULT_TRACE": "/dev/stdout"}
        job_file = write_job(tmp_path / f"kill_{i}.json", job(shape, table, tmp_path))
        victim = start_victim(job_file, victim_env(java_opts, **(protocol if in_protocol else {})))
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=_watch, args=(victim.stdout, lines), daemon=True).start()
        if i + 1 < len(plan):  # the next trial's table, built while this victim starts
            tables.append(create_target(spark, f"{rdb}.kill_{i + 1}", SHAPES[plan[i + 1][0]]))
        trigger = "staged_data" if in_protocol else "MERGING"
        announced = None
        while announced is None:
            at, line = lines.get(timeout=300)
            assert line is not None, f"victim {i} ended early: {Path(job_file + '.err').read_text()[-3000:]}"
            if line == trigger:
                announced = at
        time.sleep(max(0.0, announced + after_s - time.monotonic()))
        kill_group(victim)
        victim.wait(timeout=60)
        outcome = recover_and_observe(spark, table, shape, Outcome(victim.returncode, "", "", False, False))
        assert outcome.state is not None
        exp = expected[shape_name]
        context = f"trial {i} (seed {seed}, {shape_name}, kill {after_s:.2f}s after {trigger})"
        assert outcome.state in (exp.pre, exp.post), f"{context}: neither the pre- nor the post-merge state"
        want = exp.pre if outcome.state == exp.pre else exp.post
        lo, du = losses(outcome.state, want)
        lost, duplicated = lost + lo, duplicated + du
        assert (want is exp.post) == outcome.committed, context
        counts["kill_trials"] += 1
        if not outcome.committed:
            counts["kill_before_commit"] += 1
        elif not outcome.applied:
            counts["kill_in_apply_window"] += 1
        else:
            counts["kill_after_apply"] += 1
    record_property("reliability", {**counts, "rows_lost": lost, "rows_duplicated": duplicated})
    assert (lost, duplicated) == (0, 0)
    # The kills really spread: before the commit point, inside the apply window, after it.
    assert min(counts.values()) > 0, counts


def _uninterrupted_merge_seconds(spark, rdb, tmp_path: Path, java_opts: str, expected) -> float:
    """How long a victim's merge takes here and now (the kill window scales with it)."""
    shape = SHAPES["upsert"]
    table = create_target(spark, f"{rdb}.kill_calibration", shape)
    proc = run_victim(
        write_job(tmp_path / "calibration.json", job(shape, table, tmp_path)), victim_env(java_opts)
    )
    result = result_line(proc.stdout)
    assert proc.returncode == 0 and result and result["ok"], proc.stderr[-3000:]
    outcome = recover_and_observe(spark, table, shape, Outcome(0, "", "", False, False))
    assert outcome.state == expected["upsert"].post
    return float(result["ended"] - result["started"])
