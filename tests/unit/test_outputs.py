"""Output-expression helpers that need no Spark session: quoting and CHAR/VARCHAR limits (outputs.py).

The expressions themselves (which clause acts, new values, the cast check) run in Spark and
are covered by tests/engine.
"""

from __future__ import annotations

import pytest
from pyspark.sql.types import IntegerType, StringType, StructField

from dbt.adapters.rowmerge.merge.outputs import CHAR_VARCHAR_KEY, PREFIX, SRC_ID, SRC_PRESENT, char_limit, q


@pytest.mark.parametrize(
    "parts, quoted",
    [
        (("id",), "`id`"),
        (("s", "id"), "`s`.`id`"),
        (("s", "we`ird"), "`s`.`we``ird`"),
        (("a.b",), "`a.b`"),
    ],
)
def test_q_quotes_each_part(parts: tuple[str, ...], quoted: str) -> None:
    assert q(*parts) == quoted


@pytest.mark.parametrize(
    "declared, limit",
    [("char(3)", 3), ("varchar(10)", 10), ("VARCHAR(7)", 7), ("string", None), ("varchar(x)", None)],
)
def test_char_limit_reads_the_declared_type(declared: str, limit: int | None) -> None:
    assert char_limit(StructField("c", StringType(), True, {CHAR_VARCHAR_KEY: declared})) == limit


def test_char_limit_none_without_metadata() -> None:
    assert char_limit(StructField("c", StringType())) is None
    assert char_limit(StructField("n", IntegerType())) is None


def test_internal_columns_use_the_reserved_prefix() -> None:
    assert SRC_PRESENT.startswith(PREFIX) and SRC_ID.startswith(PREFIX)
