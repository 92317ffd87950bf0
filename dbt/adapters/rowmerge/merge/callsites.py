"""Build a merge's expressions without PySpark recording a Python call site for each of them.

PySpark 4 records, for every Column and DataFrame call, the Python file and line that made it
(the "DataFrame context" of Spark's error messages): it looks up the active session, reads a
config, sets and clears a JVM thread-local, so one call costs some six py4j round trips
instead of one. A merge builds thousands of expression nodes; their call sites are lines of
this engine, which tell a user nothing. Measured on a 100-row upsert: about 9,000 py4j calls
and most of the driver's time outside Spark jobs.

PySpark reads ``spark.python.sql.dataFrameDebugging.enabled`` once per process and caches it in
``pyspark.errors.utils._enable_debugging_cache``; :func:`without_call_sites` sets that cache to
off while a merge runs and puts back what was there when the last concurrent merge ends (dbt
runs models in threads). Only Python-side bookkeeping changes: no Spark configuration, plan or
result does. If a PySpark version has no such cache, nothing is changed.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_lock = threading.Lock()
_depth = 0
_saved: Any = None


def _pyspark_utils() -> Any:
    try:
        from pyspark.errors import utils
    except ImportError:  # pragma: no cover - every supported PySpark has it
        return None
    return utils if hasattr(utils, "_enable_debugging_cache") else None


@contextmanager
def without_call_sites() -> Iterator[None]:
    """Run the block with PySpark's per-call call-site recording off (see the module doc)."""
    global _depth, _saved
    utils = _pyspark_utils()
    if utils is None:
        yield
        return
    with _lock:
        if _depth == 0:
            _saved = utils._enable_debugging_cache
            utils._enable_debugging_cache = False
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                utils._enable_debugging_cache = _saved
                _saved = None
