"""Kill the merge right after each commit step, as test_fault_upsert does, with the engine on
the pyarrow.fs storage (what a Spark Connect client uses) in the victims and the recoveries:
the commit protocol's guarantees must hold on it exactly as on Hadoop's."""

from tests.reliability.harness import fault_injection_test

test_fault_injection_upsert_on_arrow_storage = fault_injection_test("upsert", storage="arrow")
