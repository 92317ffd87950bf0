"""dbt's shared adapter tests (dbt-tests-adapter), run under adapter type `rowmerge` the way
dbt-spark runs them for its session profile: the inherited materializations still work."""

from __future__ import annotations

import pytest
from dbt.tests.adapter.basic.test_base import BaseSimpleMaterializations
from dbt.tests.adapter.basic.test_incremental import BaseIncremental


class TestSimpleMaterializationsRowMerge(BaseSimpleMaterializations):
    pass


class TestIncrementalRowMerge(BaseIncremental):
    pass


class TestIncrementalRowLevelMerge(BaseIncremental):
    """The same shared test with every incremental model on row_level_merge (key `id`)."""

    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {
            "name": "incremental",
            "models": {"+incremental_strategy": "row_level_merge", "+unique_key": "id"},
        }
