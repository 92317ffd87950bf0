"""Kill the merge right after each commit step: CDC with deletes (op D/U/I through conditional clauses).

See harness.run_fault_injection: a victim process dies with os._exit after each step of the
commit protocol in turn (ROWMERGE_FAULT_AFTER); after recovery every reader sees exactly
the pre-merge state (death before the commit point) or exactly the post-merge state.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability.harness import SHAPES, run_fault_injection


@pytest.mark.slow
def test_fault_injection_cdc_every_commit_step(spark, rdb, tmp_path: Path, java_opts, record_property):
    counts = run_fault_injection(spark, rdb, tmp_path, java_opts, SHAPES["cdc"])
    record_property("reliability", counts)
    assert (counts["rows_lost"], counts["rows_duplicated"]) == (0, 0)
