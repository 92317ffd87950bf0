"""Warnings the engine gives a user: one function, so a caller can make them its own.

A warning is logged (logger ``rowmerge``) unless a caller registered a handler with
:func:`warnings_to`, which then receives it instead, in the thread that raised it and before
the engine goes on. dbt's adapter registers dbt's ``warn_or_error``: the warning is a real dbt
warning, and under ``--warn-error`` it raises there and then, so a NULL-key merge fails
before anything is written instead of after.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

logger = logging.getLogger("rowmerge")

_handler: ContextVar[Callable[[str], None] | None] = ContextVar("rowmerge_warnings", default=None)


def warn(message: str) -> None:
    """Give the user ``message`` (prefixed ``rowmerge: ``) as a warning."""
    handler = _handler.get()
    if handler is None:
        logger.warning("rowmerge: %s", message)
    else:
        handler(message)


@contextmanager
def warnings_to(handler: Callable[[str], None]) -> Iterator[None]:
    """Send the engine's warnings to ``handler`` (instead of the log) inside the block."""
    token = _handler.set(handler)
    try:
        yield
    finally:
        _handler.reset(token)
