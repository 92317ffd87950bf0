"""Kill a merge followed by its auto-compaction after every step of both commits.

See harness.run_fault_injection(compaction=True): the victim's merge is followed by an
OPTIMIZE version (``optimize_every: 1``, so it compacts); a crash before the merge's commit point leaves
the pre-merge state, any later crash (the compaction's steps included) the post-merge state,
with the compaction finished by recovery once its entry exists. The shape is partitioned, so
the compaction moves and deletes files in several partitions. `make test` crashes after the
merge's last move and its hand-over step (applied, compaction not yet staged) and after every
kind of compaction step (harness.crash_steps); the merge's other steps are crashed after in
`make test-long` (and on other shapes in every `make test`).
"""

from tests.reliability.harness import fault_injection_test

test_fault_injection_nmbs_partitioned_and_its_compaction_every_commit_step = fault_injection_test(
    "nmbs_partitioned", compaction=True
)
