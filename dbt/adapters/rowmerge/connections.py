"""Credentials and connection manager: dbt-spark's, under the adapter type ``rowmerge``.

Every dbt-spark profile setting works unchanged; ``method: session`` is the one that can
run row_level_merge, because the engine needs the Spark session in the dbt process.
"""

from __future__ import annotations

from dataclasses import dataclass

from dbt.adapters.spark.connections import SparkConnectionManager, SparkCredentials


@dataclass
class RowMergeCredentials(SparkCredentials):
    @property
    def type(self) -> str:
        return "rowmerge"


class RowMergeConnectionManager(SparkConnectionManager):
    TYPE = "rowmerge"
