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
_progress: ContextVar[Callable[[str], None] | None] = ContextVar("rowmerge_progress", default=None)


def warn(message: str) -> None:
    """Give the user ``message`` (prefixed ``rowmerge: ``) as a warning."""
    handler = _handler.get()
    if handler is None:
        logger.warning("rowmerge: %s", message)
    else:
        handler(message)


def progress(message: str) -> None:
    """Tell the user what a long wait is about (a merge waiting for a table's lock): logged at
    INFO, or given to the handler registered with :func:`warnings_to` (dbt shows it on the
    console, where the engine's routine progress lines do not go)."""
    handler = _progress.get()
    if handler is None:
        logger.info("rowmerge: %s", message)
    else:
        handler(message)


@contextmanager
def warnings_to(
    handler: Callable[[str], None], progress_handler: Callable[[str], None] | None = None
) -> Iterator[None]:
    """Send the engine's warnings to ``handler`` (and its progress notes to
    ``progress_handler``) instead of the log, inside the block."""
    token = _handler.set(handler)
    progress_token = _progress.set(progress_handler) if progress_handler else None
    try:
        yield
    finally:
        _handler.reset(token)
        if progress_token is not None:
            _progress.reset(progress_token)
