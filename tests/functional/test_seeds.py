"""Seeds load empty cells as NULL and text with quotes as written (dbt-spark's session mode
loaded an empty cell as the string 'None' and failed on a quote)."""

from __future__ import annotations

import pytest
from dbt.tests.util import run_dbt

from tests.functional.helpers import rows

SEED = """id,name,note
1,O'Brien,back\\slash
2,,plain
3,Ann,
"""


class TestSeedValues:
    @pytest.fixture(scope="class")
    def seeds(self):
        return {"people.csv": SEED}

    def test_empty_cells_are_null_and_quotes_survive(self, project):
        run_dbt(["seed"])
        assert rows(project, "people", "id, name, note") == [
            (1, "O'Brien", "back\\slash"),
            (2, None, "plain"),
            (3, "Ann", None),
        ]
