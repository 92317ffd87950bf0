"""Build a merge's expressions without PySpark's per-call bookkeeping round trips.

A merge builds hundreds of Column expressions in the driver, and in classic PySpark each one
is a py4j round trip to the JVM. PySpark adds round trips of its own to most of them:

- **Call sites.** PySpark 4 records, for every Column and DataFrame call, the Python file and
  line that made it (the "DataFrame context" of Spark's error messages): it looks up the active
  session, reads a config, sets and clears a JVM thread-local, so one call costs some six
  round trips instead of one. The call sites of a merge are lines of this engine, which tell a
  user nothing. Measured on a 100-row upsert: about 9,000 py4j calls and most of the driver's
  time outside Spark jobs. PySpark reads ``spark.python.sql.dataFrameDebugging.enabled`` once
  per process and caches it in ``pyspark.errors.utils._enable_debugging_cache``; that cache is
  set to off while a merge runs.
- **Class and method lookups.** Each ``pyspark.sql.functions`` call (``col``, ``lit``,
  ``when``, ``expr``, ...), each ``select`` of a list of columns and each lookup of the active
  session first finds a JVM class and then its static method by reflection
  (``sc._jvm.functions.lit``, ``sc._jvm.PythonUtils.toSeq``, ...): two round trips that search
  the JVM's class loaders, the dearest kind (about a millisecond each on a busy driver), before
  the call itself. The answers never change, so while a merge runs the classes PySpark looks up
  by name (:data:`REMEMBERED_CLASSES`) are set on the session's JVM view as objects that
  remember their static members: an ``F.lit`` is one round trip instead of three. The engine's
  own lookups go through :func:`jvm_class`, which remembers the same way. Measured on a small
  upsert: 262 reflection round trips (of 727 py4j calls) before, 2 after (of 467).

:func:`lean_columns` does both and puts back what was there when the last concurrent merge
ends (dbt runs models in threads). Only Python-side bookkeeping changes: no Spark
configuration, plan or result does. If a PySpark version has no such hooks, nothing is changed.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# The names PySpark's classic Column, DataFrame, functions and session code look classes up by
# (``getattr(sc._jvm, name)``); the short ones were imported into the view by PySpark.
REMEMBERED_CLASSES = (
    "functions",
    "PythonUtils",
    "PythonSQLUtils",
    "org.apache.spark.sql.functions",
    "org.apache.spark.sql.classic.SparkSession",
    "org.apache.spark.sql.api.python.PythonSQLUtils",
)

_lock = threading.Lock()
_depth = 0
_saved_debugging: Any = None
_pinned: Any = None  # the JVM view the classes are set on while merges run
# Per JVM view, its remembering classes: kept between merges, so each member is looked up
# once per process, not once per merge.
_classes: weakref.WeakKeyDictionary[Any, dict[str, RememberingClass]] = weakref.WeakKeyDictionary()


class RememberingClass:
    """A py4j ``JavaClass`` whose static members (methods, nested classes, fields) are looked
    up once: the first access asks the JVM, later ones read this object's attributes. A field
    is read once too, so only classes whose fields are constants (an enum's values) qualify."""

    def __init__(self, target: Any) -> None:
        self._rowmerge_target = target

    def __getattr__(self, name: str) -> Any:
        member = getattr(self._rowmerge_target, name)
        if not name.startswith("_"):  # py4j's own bookkeeping is read through, never kept
            setattr(self, name, member)
        return member

    def __call__(self, *args: Any) -> Any:  # a constructor call
        return self._rowmerge_target(*args)


def jvm_class(jvm: Any, name: str) -> RememberingClass:
    """The JVM class ``name`` (fully qualified) of a py4j JVM view, remembering its members;
    looked up once per view (one reflection round trip; ``jvm.org.apache...`` takes one per
    dot)."""
    classes = _classes.get(jvm)
    if classes is None:
        classes = _classes[jvm] = {}
    found = classes.get(name)
    if found is None:
        found = classes[name] = RememberingClass(getattr(jvm, name))
    return found


def _pyspark_utils() -> Any:
    try:
        from pyspark.errors import utils
    except ImportError:  # pragma: no cover - every supported PySpark has it
        return None
    return utils if hasattr(utils, "_enable_debugging_cache") else None


def _active_jvm() -> Any:
    """The JVM view of the process's SparkContext (None through Spark Connect)."""
    try:
        from pyspark import SparkContext
    except ImportError:  # pragma: no cover
        return None
    sc = SparkContext._active_spark_context
    return getattr(sc, "_jvm", None) if sc is not None else None


def _pin(jvm: Any) -> None:
    vars(jvm).update({name: jvm_class(jvm, name) for name in REMEMBERED_CLASSES})


def _unpin(jvm: Any) -> None:
    for name in REMEMBERED_CLASSES:
        vars(jvm).pop(name, None)


@contextmanager
def lean_columns() -> Iterator[None]:
    """Run the block with PySpark's call-site recording off and its JVM class lookups
    remembered (see the module doc)."""
    global _depth, _saved_debugging, _pinned
    utils = _pyspark_utils()
    with _lock:
        if _depth == 0:
            if utils is not None:
                _saved_debugging = utils._enable_debugging_cache
                utils._enable_debugging_cache = False
            _pinned = _active_jvm()
            if _pinned is not None:
                _pin(_pinned)
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                if utils is not None:
                    utils._enable_debugging_cache = _saved_debugging
                    _saved_debugging = None
                if _pinned is not None:
                    _unpin(_pinned)
                    _pinned = None
