"""Which nulls Spark declares that an Avro type does not have (pyspark types only, no session):
what ``declared_as_avro`` rebuilds before ``to_avro``, so that Spark's serializer does not warn."""

from __future__ import annotations

import fastavro
from pyspark.sql import types as T

from cdc_emitter.spark.columns import _gaps as _gaps_parsed

UPDATE = {
    "type": "record",
    "name": "update",
    "fields": [
        {
            "name": "data",
            "type": {
                "type": "record",
                "name": "row",
                "fields": [
                    {"name": "k", "type": "long"},
                    {"name": "v", "type": ["null", "string"]},
                ],
            },
        },
        {"name": "time", "type": "long"},
        {"name": "diff", "type": "long"},
    ],
}
ARRAY = {"type": "array", "items": UPDATE}


def _gaps(dtype: T.DataType, avro: object, nullable: bool) -> bool:
    """The rule on a whole schema, parsed as ``declared_as_avro`` parses it."""
    named: dict = {}
    return _gaps_parsed(dtype, fastavro.parse_schema(avro, named_schemas=named), named, nullable)


def _update_type(nullable: bool) -> T.StructType:
    row = T.StructType(
        [T.StructField("k", T.LongType(), nullable), T.StructField("v", T.StringType(), True)]
    )
    return T.StructType(
        [
            T.StructField("data", row, nullable),
            T.StructField("time", T.LongType(), nullable),
            T.StructField("diff", T.LongType(), nullable),
        ]
    )


def test_a_permissive_decoding_has_gaps_below_its_top_a_failfast_one_only_at_it():
    permissive = T.ArrayType(_update_type(True), True)  # from_avro PERMISSIVE: everything nullable
    failfast = T.ArrayType(_update_type(False), False)  # FAILFAST: as the Avro type says
    assert _gaps(permissive, ARRAY, nullable=False)
    assert not _gaps(failfast, ARRAY, nullable=False)
    assert _gaps(failfast, ARRAY, nullable=True)  # the value itself: from_avro is nullable


def test_a_union_with_null_allows_null_but_not_below():
    row = T.StructType([T.StructField("a", T.IntegerType(), True)])
    record = {"type": "record", "name": "r", "fields": [{"name": "a", "type": "int"}]}
    assert not _gaps(T.IntegerType(), ["null", "int"], nullable=True)
    assert _gaps(row, ["null", record], nullable=True)  # field a: nullable in Spark, not in Avro
    assert not _gaps(
        row, ["null", {**record, "fields": [{"name": "a", "type": ["null", "int"]}]}], nullable=True
    )


def test_named_types_arrays_and_maps():
    point = {
        "type": "record",
        "name": "point",
        "namespace": "geo",
        "fields": [{"name": "x", "type": "double"}],
    }
    avro = {
        "type": "record",
        "name": "shape",
        "fields": [
            {"name": "first", "type": point},
            {"name": "others", "type": {"type": "array", "items": "geo.point"}},
            {"name": "tags", "type": {"type": "map", "values": "string"}},
        ],
    }
    xy = T.StructType([T.StructField("x", T.DoubleType(), False)])

    def shape(items_null: bool, values_null: bool) -> T.StructType:
        return T.StructType(
            [
                T.StructField("first", xy, False),
                T.StructField("others", T.ArrayType(xy, items_null), False),
                T.StructField(
                    "tags", T.MapType(T.StringType(), T.StringType(), values_null), False
                ),
            ]
        )

    assert not _gaps(shape(False, False), avro, nullable=False)
    assert _gaps(shape(True, False), avro, nullable=False)  # an item of the array by name
    assert _gaps(shape(False, True), avro, nullable=False)


def test_a_name_defined_in_an_enclosing_namespace_resolves_by_its_full_name():
    # "point", defined inside namespace geo, is geo.point, as Avro resolves names
    avro = {
        "type": "record",
        "name": "shape",
        "namespace": "geo",
        "fields": [
            {
                "name": "first",
                "type": {
                    "type": "record",
                    "name": "point",
                    "fields": [{"name": "x", "type": "double"}],
                },
            },
            {"name": "others", "type": {"type": "array", "items": "geo.point"}},
        ],
    }
    xy = T.StructType([T.StructField("x", T.DoubleType(), True)])
    shape = T.StructType(
        [
            T.StructField(
                "first", T.StructType([T.StructField("x", T.DoubleType(), False)]), False
            ),
            T.StructField("others", T.ArrayType(xy, False), False),
        ]
    )
    assert _gaps(
        shape, avro, nullable=False
    )  # x of an item of "others", nullable in Spark, not in Avro


def test_a_union_of_more_than_null_and_one_type_is_left_alone():
    # a union of more than null and one type: Spark's own struct of members, left as it is
    assert not _gaps(T.StructType([]), ["null", "long", "string"], nullable=True)
