"""`dbt docs generate`: a merged table's row count and size come from its journal (Spark keeps
statistics only after ANALYZE TABLE, so dbt-spark's catalog showed none for it)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from urllib.parse import urlparse

import pytest
from dbt.tests.util import run_dbt

from tests.functional.helpers import incremental_model, ok, run_step, table_property, values

S = "DBT_INTERNAL_SOURCE"
FIRST = values("id, name, op", "(1, 'a', 'I')", "(2, 'b', 'I')", "(3, 'c', 'I')")
LATER = values("id, name, op", "(1, 'A', 'U')", "(2, 'b', 'D')", "(4, 'd', 'I')", "(5, 'e', 'I')")


def _data_bytes(location: str) -> int:
    """Bytes of the visible data files under a table's folder (what the catalog should say)."""
    total = 0
    for dirpath, dirnames, filenames in os.walk(urlparse(location).path):
        dirnames[:] = [d for d in dirnames if not d.startswith(("_", "."))]
        total += sum(
            os.path.getsize(os.path.join(dirpath, f)) for f in filenames if not f.startswith(("_", "."))
        )
    return total


class TestCatalogStatistics:
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "cdc.sql": incremental_model(f"unique_key='id', delete_condition=\"{S}.op = 'D'\"", FIRST, LATER),
            "plain.sql": "{{ config(materialized='table') }}\n" + FIRST,
        }

    def test_docs_generate_shows_rows_and_bytes_from_the_journal(self, project):
        run_step(1)
        ok(run_step(2, "--select", "cdc"), "cdc")  # 1 updated, 1 deleted, 2 inserted: 4 rows
        run_dbt(["docs", "generate"])
        catalog = json.loads(Path(project.project_root, "target", "catalog.json").read_text())
        nodes = {key.split(".")[-1]: node for key, node in catalog["nodes"].items()}
        stats = nodes["cdc"]["stats"]
        assert stats["rows"]["value"] == 4
        assert stats["rows"]["label"] == "Row count"
        assert stats["rows"]["description"] == "Row count from the dbt-rowmerge journal (version 1)"
        assert stats["bytes"]["value"] == _data_bytes(str(table_property(project, "cdc", "Location")))
        assert stats["bytes"]["value"] > 0
        # a table the engine does not write keeps dbt-spark's statistics (none here)
        assert "Row count" not in json.dumps(nodes["plain"]["stats"])
