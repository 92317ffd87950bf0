"""Kill the merge right after each commit step: not-matched-by-source delete, partitioned;
rows move between partitions and the merge creates a partition.

See harness.run_fault_injection: a victim process dies with os._exit after each step of the
commit protocol in turn (ROWMERGE_FAULT_AFTER); after recovery every reader sees exactly
the pre-merge state (death before the commit point) or exactly the post-merge state.

`make test-long` only: in `make test`, test_fault_compaction.py runs this same merge on this
same shape (followed by its compaction) and kills a victim after its last move (the new
partition's files in place, not yet registered) and after its last step; the cdc and upsert
shapes are killed after every kind of step.
"""

from tests.reliability.harness import fault_injection_test

test_fault_injection_nmbs_partitioned_every_commit_step = fault_injection_test("nmbs_partitioned", long=True)
