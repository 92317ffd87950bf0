"""Kill the merge right after each commit step (see harness.run_fault_injection): an insert of
new keys whose source Spark can size, so one job writes the inserts and their change rows
(direct.py), followed by a compaction; table and feed exactly before or after at every step."""

from tests.reliability.harness import fault_injection_test

test_fault_injection_insert_new = fault_injection_test("insert_new", compaction=True)
