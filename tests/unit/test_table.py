"""table.struct_from_json: the schemas a journal entry keeps, read back any number of times."""

from __future__ import annotations

import copy
import json

from pyspark.sql.types import ArrayType, LongType, StringType, StructField, StructType

from dbt.adapters.rowmerge.merge.table import struct_from_json

COLLATED = StructType(
    [
        StructField("id", LongType()),
        StructField("v", StringType("UTF8_LCASE")),
        StructField("a", ArrayType(StringType("UNICODE_CI"))),
    ]
)


def test_a_collated_schema_reads_back_twice_and_its_json_is_left_as_it_was():
    """PySpark's StructType.fromJson rewrites the collations in the dict it reads, so a second
    read of the same entry failed (an AssertionError after a merge's commit point)."""
    raw = COLLATED.jsonValue()
    written = json.dumps(raw)
    assert struct_from_json(raw) == COLLATED
    assert struct_from_json(raw) == COLLATED
    assert json.dumps(raw) == written


def test_an_entry_written_with_the_rewritten_collations_still_reads():
    """Entries written before the copy hold collations without their provider."""
    raw = COLLATED.jsonValue()
    StructType.fromJson(raw)  # what the journal once did to the entry before writing it
    assert raw["fields"][1]["metadata"]["__COLLATIONS"] == {"v": "UTF8_LCASE"}
    assert struct_from_json(copy.deepcopy(raw)) == COLLATED
