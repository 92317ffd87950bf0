"""`--full-refresh` of a model whose shape changed, through real dbt runs (issue 29 item 1).

The refresh drops a column, adds one and partitions by it: still the table's next version
(REPLACE TABLE), the same managed table over the same folder, its history and change feed
going on, and the next run merging on as version 3. A refresh killed while its table was
missing from the catalog (between the drop and the create) is finished by the next `dbt run`
of the model, which then merges on with the table's history.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from dbt.tests.util import run_dbt

from dbt.adapters.rowmerge.merge import history, replace_table
from tests.functional.helpers import by_name, ok, rows, table, values

SQL = {
    1: values("id, name, note", "(1, 'a', 'n1')", "(2, 'b', 'n2')"),
    2: values("id, name, note", "(2, 'B', 'n2')", "(3, 'c', 'n3')"),
    3: values("id, name, region", "(1, 'a', 'eu')", "(4, 'd', 'us')"),
    4: values("id, name, region", "(4, 'D', 'us')", "(5, 'e', 'eu')"),
}


def _model(extra: str = "") -> str:
    branches = "".join(
        f"{{% {'if' if step == 1 else 'elif'} var('step') == {step} %}}\n{sql}\n" for step, sql in SQL.items()
    )
    return (
        "{{ config(materialized='incremental', incremental_strategy='row_level_merge', unique_key='id', "
        f"change_data_feed=true, partition_by=var('parts', none){extra}) }}}}\n{branches}{{% endif %}}\n"
    )


MODELS = {"orders.sql": _model(), "victim.sql": _model()}
NEW = "{step: 3, parts: region}"
NEXT = "{step: 4, parts: region}"


def _history(spark: Any, project: Any, name: str) -> list[tuple[int, str, bool]]:
    return [(h["version"], h["operation"], h["applied"]) for h in history(spark, table(project, name))]


class TestRefreshWithANewShape:
    @pytest.fixture(scope="class")
    def models(self):
        return MODELS

    @pytest.fixture(scope="class")
    def timeline(self, project) -> dict[str, Any]:
        s: dict[str, Any] = {}
        run_dbt(["run", "--vars", "{step: 1}"])
        run_dbt(["run", "--vars", "{step: 2}"])
        s["refresh"] = by_name(run_dbt(["run", "--vars", NEW, "--full-refresh", "--select", "orders"]))
        s["merge"] = by_name(run_dbt(["run", "--vars", NEXT, "--select", "orders"]))
        s["described"] = json.loads(
            project.run_sql(f"describe table extended {table(project, 'orders')} as json", fetch="one")[0]
        )
        return s

    def test_the_refresh_is_version_2_and_the_next_run_merges_as_version_3(self, project, timeline, spark):
        assert ok(timeline["refresh"], "orders").message.startswith(
            "REPLACE TABLE version 2: 2 rows (replacing 3)"
        )
        assert ok(timeline["merge"], "orders").message.startswith("MERGE 1 updated, 1 inserted, 0 deleted")
        assert _history(spark, project, "orders") == [
            (3, "MERGE", True),
            (2, "REPLACE TABLE", True),
            (1, "MERGE", True),
            (0, "CREATE TABLE", True),
        ]

    def test_the_table_has_the_new_shape_and_stays_managed(self, project, timeline):
        info = timeline["described"]
        assert (info["type"], info["partition_columns"]) == ("MANAGED", ["region"])
        assert [c["name"] for c in info["columns"]] == ["id", "name", "region"]
        assert rows(project, "orders") == [(1, "a", "eu"), (4, "D", "us"), (5, "e", "eu")]

    def test_the_feed_goes_on_with_the_dropped_column_kept(self, project, timeline):
        feed = rows(project, "orders__changes", "_commit_version, _change_type, id, name, note, region")
        assert [r for r in feed if r[0] == 2] == sorted(
            [
                (2, "delete", 1, "a", "n1", None),
                (2, "delete", 2, "B", "n2", None),
                (2, "delete", 3, "c", "n3", None),
                (2, "insert", 1, "a", None, "eu"),
                (2, "insert", 4, "d", None, "us"),
            ],
            key=repr,
        )
        assert [r for r in feed if r[0] == 3] == sorted(
            [
                (3, "update_preimage", 4, "d", None, "us"),
                (3, "update_postimage", 4, "D", None, "us"),
                (3, "insert", 5, "e", None, "eu"),
            ],
            key=repr,
        )

    def test_a_refresh_killed_with_its_table_missing_is_finished_by_the_next_run(
        self, project, timeline, spark, monkeypatch
    ):
        victim = table(project, "victim")
        from dbt.adapters.rowmerge.merge import faults

        def die(step: str) -> None:
            if step == "reshape_dropped":
                raise SystemExit("killed")

        monkeypatch.setattr(faults, "fault_point", die)
        new = spark.sql(SQL[3].replace("/*+ REPARTITION(1) */ ", ""))
        with pytest.raises(SystemExit):
            replace_table(spark, victim, new, partition_by=["region"], change_data_feed=f"{victim}__changes")
        monkeypatch.undo()
        assert not spark.catalog.tableExists(victim)

        done = by_name(run_dbt(["run", "--vars", NEXT, "--select", "victim"]))

        assert ok(done, "victim").message.startswith("MERGE 1 updated, 1 inserted, 0 deleted")
        assert rows(project, "victim") == [(1, "a", "eu"), (4, "D", "us"), (5, "e", "eu")]
        assert [v for v, _, _ in _history(spark, project, "victim")] == [3, 2, 1, 0]
