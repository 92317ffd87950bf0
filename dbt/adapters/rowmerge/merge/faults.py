"""The test hooks every commit protocol marks its steps with (merge, refresh, reshape, optimize).

Callers call ``faults.fault_point(step)`` through this module, so a test that replaces
:func:`fault_point` here sees every step of every protocol.
"""

from __future__ import annotations

import os
import time

# Test hooks, read at each step of the commit protocol: the name of the step after which the
# process dies (os._exit), a file that collects the name of every step reached, and a pause
# after each step (so that a kill from outside can land inside the protocol).
FAULT_ENV = "ROWMERGE_FAULT_AFTER"
FAULT_TRACE_ENV = "ROWMERGE_FAULT_TRACE"
FAULT_DELAY_ENV = "ROWMERGE_FAULT_DELAY_S"
FAULT_EXIT_CODE = 137


def fault_point(step: str) -> None:
    """Mark the end of one commit step for the test hooks (no effect unless they are set)."""
    trace = os.environ.get(FAULT_TRACE_ENV)
    if trace:
        with open(trace, "a", encoding="utf-8") as fh:
            fh.write(step + "\n")
    if os.environ.get(FAULT_ENV) == step:
        os._exit(FAULT_EXIT_CODE)
    delay = os.environ.get(FAULT_DELAY_ENV)
    if delay:
        time.sleep(float(delay))
