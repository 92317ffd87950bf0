"""Kill RESTORE right after each step of its commit.

See operation_faults.run_operation_fault_injection: a victim restores version 1 of a table
with three merges (files come back from retained folders, others leave into the restore's,
change rows are written) and dies after each step in turn; after recovery the rows, the feed
and the retained files are exactly those before or after the restore, and every version in
retention reads back.
"""

from tests.reliability.operation_faults import operation_fault_injection_test

test_fault_injection_restore_every_commit_step = operation_fault_injection_test("restore")
