"""Phase 5: the source is evaluated once, and that one job also gathers its statistics.

The statistics (row count, rows with a NULL key, each key's range, the files its values fall
in) are observed while the source is checkpointed: every task folds its own rows and the
driver merges them, so however many partitions the source has, the phase is one Spark job.
"""

from __future__ import annotations

from tests.engine.helpers import UPSERT, create_table, merge, rows, sorted_rows, spark_jobs

INSERT_ONLY = [{"when": "not_matched", "action": "insert", "values": "*"}]


def _table(spark, db: str) -> str:
    t = f"{db}.t"
    create_table(
        spark, t, "id long, v string", [[(i, f"v{i}") for i in range(k, k + 10)] for k in (0, 10, 20)]
    )
    return t


def _four_partitions(spark, name: str, data: list[tuple], schema: str) -> str:
    """A view of ``data`` spread over four partitions that no shuffle made."""
    df = spark.createDataFrame(spark.sparkContext.parallelize(data, 4), schema)
    assert df.rdd.getNumPartitions() == 4
    df.createOrReplaceTempView(name)
    return name


def test_insert_only_merge_of_a_four_partition_source_is_two_jobs(spark, db) -> None:
    # One job evaluates the source with its statistics; the keys fall in no file, so the
    # inserts are written without reading the target: the second and last job.
    t = _table(spark, db)
    src = _four_partitions(spark, f"{db}_src", [(i + 100, f"n{i}") for i in range(40)], "id long, v string")
    before = rows(spark, t)
    result, jobs = spark_jobs(spark, lambda: merge(spark, t, src, INSERT_ONLY, auto_compact=False))
    assert jobs == 2
    assert result.metrics["numSourceRows"] == 40
    assert result.metrics["numTargetFilesAfterSkipping"] == 0
    assert rows(spark, t) == sorted_rows(before + [(i + 100, f"n{i}") for i in range(40)])


def test_statistics_fold_every_partition(spark, db) -> None:
    # Keys of every partition, NULL keys among them: the range covers the keys of all four
    # partitions, so the files holding 3 and 27 are both read and both rows updated.
    t = _table(spark, db)
    data = [(3, "A"), (None, "N1"), (27, "B"), (None, "N2"), (500, "C")]
    src = _four_partitions(spark, f"{db}_src", data, "id long, v string")
    before = rows(spark, t)
    m = merge(spark, t, src, UPSERT, auto_compact=False).metrics
    changed = {3: "A", 27: "B"}
    expected = [(i, changed.get(i, v)) for i, v in before] + [(None, "N1"), (None, "N2"), (500, "C")]
    assert rows(spark, t) == sorted_rows(expected)
    assert m["numSourceRows"] == 5
    assert (m["numTargetRowsUpdated"], m["numTargetRowsInserted"]) == (2, 3)
    assert m["numTargetFilesAfterSkipping"] == 2


def test_empty_source_with_partitions_changes_nothing(spark, db) -> None:
    t = _table(spark, db)
    src = _four_partitions(spark, f"{db}_src", [], "id long, v string")
    before = rows(spark, t)
    result = merge(spark, t, src, UPSERT, auto_compact=False)
    assert result.metrics["numSourceRows"] == 0
    assert (result.metrics["numTargetFilesAdded"], result.metrics["numTargetFilesRemoved"]) == (0, 0)
    assert rows(spark, t) == before
