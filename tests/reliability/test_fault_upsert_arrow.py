"""Kill the merge right after each commit step (see harness.run_fault_injection): upsert
(update * / insert *) on an unpartitioned table, with the engine on the pyarrow.fs storage
(what a Spark Connect client uses) in the victims and the recoveries: the commit protocol's
guarantees must hold on it exactly as on Hadoop's. The same shape on Hadoop's storage runs
with its victims on a standalone cluster (tests/cluster/test_on_standalone_cluster.py)."""

from tests.reliability.harness import fault_injection_test

test_fault_injection_upsert_on_arrow_storage = fault_injection_test("upsert", storage="arrow")
