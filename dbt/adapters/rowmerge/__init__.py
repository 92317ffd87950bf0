"""dbt-rowmerge: dbt-spark plus a row-level MERGE strategy for Parquet/ORC tables.

``Plugin`` is built on first access, so ``import dbt.adapters.rowmerge.merge`` (the engine)
does not pull in dbt: the engine is usable from plain PySpark.
"""

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "Plugin":
        from dbt.adapters.base import AdapterPlugin

        from dbt.adapters.rowmerge.connections import RowMergeCredentials
        from dbt.adapters.rowmerge.impl import RowMergeAdapter
        from dbt.include import rowmerge

        plugin = AdapterPlugin(
            adapter=RowMergeAdapter,  # type: ignore[arg-type]
            credentials=RowMergeCredentials,
            include_path=rowmerge.PACKAGE_PATH,
            dependencies=["spark"],
        )
        globals()["Plugin"] = plugin
        return plugin
    raise AttributeError(name)
