"""A model whose table was renamed: refused until ``dbt run-operation rowmerge_rebind`` records it.

The user renames the table (``ALTER TABLE ... RENAME TO``) and the model file with it; the
journal, which moved with the managed table's folder, still names the old table. The next run
fails naming the run-operation; after it the model merges on, and its change feed continues.
"""

from __future__ import annotations

import os
import re
import shutil

from dbt.tests.util import run_dbt_and_capture, write_file

from tests.engine.helpers import folder_digest
from tests.functional.helpers import incremental_model, ok, rows, run_step, table, table_property, values

STEP1 = values("id, name", "(1, 'a')", "(2, 'b')")
STEP2 = values("id, name", "(2, 'B')", "(3, 'c')")
STEP3 = values("id, name", "(3, 'C')", "(4, 'd')")


class TestRebindAfterRename:
    def test_renamed_model_is_refused_then_rebound(self, project):
        config = "unique_key='id', change_data_feed='orders_feed'"
        models = os.path.join(project.project_root, "models")
        write_file(incremental_model(config, STEP1, STEP2, STEP3), models, "orders.sql")
        ok(run_step(1), "orders")
        ok(run_step(2), "orders")

        project.run_sql(f"alter table {table(project, 'orders')} rename to {table(project, 'orders_v2')}")
        os.remove(os.path.join(models, "orders.sql"))
        write_file(incremental_model(config, STEP1, STEP2, STEP3), models, "orders_v2.sql")

        refused = run_step(3, expect_pass=False)["orders_v2"]
        assert refused.status == "error"
        message = re.sub(r"\s+", " ", str(refused.message))
        assert f"it belongs to table {table(project, 'orders')} (version 1 says so)" in message
        assert f"rowmerge_rebind --args '{{relation: {table(project, 'orders_v2')}}}'" in message
        assert rows(project, "orders_v2") == [(1, "a"), (2, "B"), (3, "c")]

        _, output = run_dbt_and_capture(
            ["run-operation", "rowmerge_rebind", "--args", f"{{relation: {table(project, 'orders_v2')}}}"]
        )
        assert (
            f"rowmerge_rebind {table(project, 'orders_v2')}: rebound from {table(project, 'orders')} as "
            f"version 2; change table(s) {table(project, 'orders_feed')} now belong to it"
        ) in output

        ok(run_step(3), "orders_v2")
        assert rows(project, "orders_v2") == [(1, "a"), (2, "B"), (3, "C"), (4, "d")]
        assert rows(project, "orders_feed", "id, name, _change_type, _commit_version") == sorted(
            [
                (2, "b", "update_preimage", 1),
                (2, "B", "update_postimage", 1),
                (3, "c", "insert", 1),
                (3, "c", "update_preimage", 3),
                (3, "C", "update_postimage", 3),
                (4, "d", "insert", 3),
            ],
            key=repr,
        )


class TestRebindAfterMove:
    def test_model_whose_folder_was_copied_is_refused_then_rebound(self, project, tmp_path):
        """The table's folder copied to a new place and the table pointed at the copy (as after
        copying a warehouse): the journal still names the old folder's files."""
        models = os.path.join(project.project_root, "models")
        write_file(incremental_model("unique_key='id'", STEP1, STEP2, STEP3), models, "orders.sql")
        ok(run_step(1), "orders")
        ok(run_step(2), "orders")
        original = str(table_property(project, "orders", "Location")).removeprefix("file:")
        copy = str(tmp_path / "new_warehouse" / "orders")
        shutil.copytree(original, copy)
        project.run_sql(f"alter table {table(project, 'orders')} set location '{copy}'")
        before = folder_digest(original), folder_digest(copy)

        refused = run_step(3, expect_pass=False)["orders"]
        assert refused.status == "error"
        message = re.sub(r"\s+", " ", str(refused.message))
        assert f"names files at file:{original} (version 1)" in message
        assert f"rowmerge_rebind --args '{{relation: {table(project, 'orders')}}}'" in message
        assert (folder_digest(original), folder_digest(copy)) == before
        assert rows(project, "orders") == [(1, "a"), (2, "B"), (3, "c")]

        _, output = run_dbt_and_capture(
            ["run-operation", "rowmerge_rebind", "--args", f"{{relation: {table(project, 'orders')}}}"]
        )
        assert (
            f"rowmerge_rebind {table(project, 'orders')}: rebound (its folder moved from file:{original}) as "
            "version 2"
        ) in output
        ok(run_step(3), "orders")
        assert rows(project, "orders") == [(1, "a"), (2, "B"), (3, "C"), (4, "d")]
        assert folder_digest(original) == before[0]
