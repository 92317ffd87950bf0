from tests.engine.helpers import UPSERT, create_table, file_snapshot, merge, rows, source_view


def test_run_merge_upsert_rewrites_only_touched_file(spark, db):
    t = f"{db}.orders"
    create_table(spark, t, "id long, v string", [[(1, "a"), (2, "b")], [(3, "c"), (4, "d")]])
    before = file_snapshot(spark, t)
    src = source_view(spark, "src_smoke", "id long, v string", [(1, "A"), (9, "Z")])
    result = merge(spark, t, src, UPSERT)
    assert rows(spark, t) == [(1, "A"), (2, "b"), (3, "c"), (4, "d"), (9, "Z")]
    after = file_snapshot(spark, t)
    untouched = [p for p, st in before.items() if after.get(p) == st]
    assert len(untouched) == 1
    assert result.metrics["numTargetRowsUpdated"] == 1
    assert result.metrics["numTargetRowsInserted"] == 1
    assert result.metrics["numTargetFilesRemoved"] == 1
    assert result.version == 1
