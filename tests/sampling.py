"""Which crash points `make test` visits, where `make test-long` visits them all.

A crash-point test parametrized over every step of a commit costs a Spark job or two per
step. Where the reliability suite (tests/reliability) already kills a real process after
each of the same steps on every `make test`, the in-process test keeps a sample there: the
step before the commit point, the commit point itself and the last step. The others carry
the ``long`` marker, so ``make test-long`` still runs every one of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pytest


def long_except(values: Iterable[Any], keep: Sequence[Any]) -> list[Any]:
    """``values`` as parameters, every one not in ``keep`` marked ``long``."""
    values = list(values)
    missing = [k for k in keep if k not in values]
    assert not missing, f"kept values that are not parameters: {missing}"
    return [v if v in keep else pytest.param(v, marks=pytest.mark.long) for v in values]
