"""Differential test: a fixed seed of random merges, each run by the engine and by the DuckDB oracle.

Every case must agree on the outcome (success, cardinality violation or spec error), the final
rows and the change feed. All cases share one Spark session and one database; each builds two
tiny tables. ``make fuzz`` runs the same check on more seeds (tests/differential/fuzz.py).
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import duckdb
import pytest

from tests.differential.compare import COMPACTED, MERGED, RAN, check, reproduction
from tests.differential.generator import generate

SEED = 20261123
CASES = 150  # make fuzz runs more (README: How correctness is tested)


def case_rng(seed: int, index: int) -> random.Random:
    """The generator's randomness for case ``index`` of ``seed`` (fuzz.py uses the same)."""
    return random.Random(f"{seed}:{index}")


@pytest.fixture(scope="module")
def duck() -> Iterator[duckdb.DuckDBPyConnection]:
    con = duckdb.connect()
    yield con
    con.close()


@pytest.mark.slow
@pytest.mark.parametrize("index", range(CASES))
def test_differential_engine_agrees_with_duckdb_oracle(spark, diff_db, duck, index):
    case = generate(case_rng(SEED, index), f"seed{SEED}_case{index}")
    problems, expected, actual = check(spark, case, diff_db, f"c{index}", duck)
    assert not problems, reproduction(case, problems, expected, actual)


@pytest.mark.slow
def test_differential_cases_compacted_most_tables():
    """The cases above ran with compaction on a tiny target: most merges that committed a
    version were followed by an OPTIMIZE one (else the check above proved nothing about it).
    Runs after them (pytest keeps file order; under xdist this module's tests share a worker)."""
    if len(RAN) < CASES:
        pytest.skip("run with the differential cases above (the whole module)")
    assert len(COMPACTED) > len(MERGED) // 2, (len(COMPACTED), len(MERGED))
