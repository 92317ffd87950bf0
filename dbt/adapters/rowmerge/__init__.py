"""dbt-rowmerge: dbt-spark plus a row-level MERGE strategy for Parquet/ORC tables."""

from dbt.adapters.base import AdapterPlugin

from dbt.adapters.rowmerge.connections import RowMergeConnectionManager, RowMergeCredentials
from dbt.adapters.rowmerge.impl import RowMergeAdapter
from dbt.include import rowmerge

Plugin = AdapterPlugin(
    adapter=RowMergeAdapter,  # type: ignore[arg-type]
    credentials=RowMergeCredentials,
    include_path=rowmerge.PACKAGE_PATH,
    dependencies=["spark"],
)

__all__ = ["Plugin", "RowMergeAdapter", "RowMergeConnectionManager", "RowMergeCredentials"]
