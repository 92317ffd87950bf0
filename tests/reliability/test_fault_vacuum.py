"""Kill VACUUM right after each step of its commit.

See operation_faults.run_operation_fault_injection: a victim vacuums a table that an earlier
vacuum folded (it deletes retained folders, folds the older base and later entries into a new
base, and drops change-feed versions) and dies after each step in turn; after recovery the
rows, the feed and the retained files are exactly those before or after the vacuum, and every
version in retention reads back.
"""

from tests.reliability.operation_faults import operation_fault_injection_test

test_fault_injection_vacuum_every_commit_step = operation_fault_injection_test("vacuum")
