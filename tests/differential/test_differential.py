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

from tests.differential.compare import (
    COMPACTED,
    DIRECT,
    DIRECT_FALLBACK,
    DIRECT_SPREAD,
    LARGE_SOURCE,
    MERGED,
    ONE_PASS_BROADCAST,
    ONE_PASS_SINGLE_TASK,
    RAN,
    check,
    reproduction,
)
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


@pytest.mark.slow
def test_differential_cases_took_both_one_pass_joins():
    """Among the cases above, merges written in one pass took both joins: in a single task and
    with the source broadcast (compare.single_task_rows_for), so the check covered both. (Few
    random merges qualify for one pass, 6 of the 150; a 2,000-case `make fuzz` has about 80,
    and tests/engine/test_one_pass.py runs both joins on chosen merges.)"""
    if len(RAN) < CASES:
        pytest.skip("run with the differential cases above (the whole module)")
    assert len(ONE_PASS_SINGLE_TASK) >= 2 and len(ONE_PASS_BROADCAST) >= 2, (
        len(ONE_PASS_SINGLE_TASK),
        len(ONE_PASS_BROADCAST),
    )


@pytest.mark.slow
def test_differential_cases_took_the_direct_write_and_lost_the_bet():
    """Among the cases above, some merges wrote their inserts directly (direct.py), in one task
    and by the source's own tasks (the cases run as large sources, compare.large_source_for),
    and some bet and lost (the write discarded, the merge run as usual), so the check covered
    all three: only cases whose source is a Parquet file can bet (compare.source_from_files),
    and without a history only insert-only merges do: 1 won in one task, 2 by the source's
    tasks and 3 lost of the 150 (tests/engine/test_direct.py bets on chosen merges)."""
    if len(RAN) < CASES:
        pytest.skip("run with the differential cases above (the whole module)")
    counts = (len(DIRECT), len(DIRECT_SPREAD), len(DIRECT_FALLBACK))
    assert min(counts) >= 1, counts


@pytest.mark.slow
def test_differential_cases_ran_large_sources():
    """A third of the cases above ran as large sources (not broadcast: a rewrite joins through a
    shuffle and gathers each file's rows back), and many of them committed a merge: 22 of 58."""
    if len(RAN) < CASES:
        pytest.skip("run with the differential cases above (the whole module)")
    merged = set(LARGE_SOURCE) & set(MERGED)
    assert len(LARGE_SOURCE) >= CASES // 5 and len(merged) >= 10, (len(LARGE_SOURCE), len(merged))
