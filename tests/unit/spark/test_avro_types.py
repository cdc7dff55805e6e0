"""spark_struct is the inverse of data_schema for the types the sink writes; row_converter turns
the codec's hashable values into Spark's; ViolationError names what verify would."""

from __future__ import annotations

import pytest
from pyspark.sql import types as T

from cdc_emitter.errors import SchemaError, ViolationError
from cdc_emitter.protocol import Violation
from cdc_emitter.protocol.codec import CdcCodec
from cdc_emitter.spark.avro_types import row_converter, spark_struct
from cdc_emitter.spark.schema import data_schema

STRUCT = T.StructType(
    [
        T.StructField("id", T.LongType(), False),
        T.StructField("n", T.IntegerType()),
        T.StructField("f", T.FloatType()),
        T.StructField("d", T.DoubleType()),
        T.StructField("ok", T.BooleanType()),
        T.StructField("s", T.StringType()),
        T.StructField("b", T.BinaryType()),
        T.StructField("price", T.DecimalType(12, 3)),
        T.StructField("day", T.DateType()),
        T.StructField("at", T.TimestampType()),
        T.StructField("local", T.TimestampNTZType()),
        T.StructField("tags", T.ArrayType(T.StringType(), False)),
        T.StructField("attrs", T.MapType(T.StringType(), T.LongType(), True)),
        T.StructField(
            "address",
            T.StructType(
                [
                    T.StructField("city", T.StringType()),
                    T.StructField("zips", T.ArrayType(T.IntegerType())),
                ]
            ),
        ),
    ]
)


def test_the_inverse_of_data_schema():
    assert spark_struct(data_schema(STRUCT)) == STRUCT


def test_narrow_spark_types_come_back_as_what_avro_holds():
    narrow = T.StructType([T.StructField("a", T.ShortType()), T.StructField("c", T.CharType(3))])
    assert spark_struct(data_schema(narrow)) == T.StructType(
        [T.StructField("a", T.IntegerType()), T.StructField("c", T.StringType())]
    )


def test_a_union_of_two_types_has_no_spark_type():
    record = {
        "type": "record",
        "name": "data",
        "fields": [{"name": "x", "type": ["int", "string"]}],
    }
    with pytest.raises(SchemaError, match="column 'x' is an Avro union of 2 types"):
        spark_struct(record)


def test_decoded_maps_become_dicts_and_the_rest_stays():
    schema = data_schema(
        T.StructType(
            [
                T.StructField("k", T.LongType(), False),
                T.StructField("m", T.MapType(T.StringType(), T.LongType())),
                T.StructField(
                    "nested",
                    T.ArrayType(
                        T.StructType(
                            [T.StructField("m", T.MapType(T.StringType(), T.StringType()))]
                        )
                    ),
                ),
            ]
        )
    )
    codec = CdcCodec(schema)
    data = (7, {"b": 2, "a": 1}, [{"m": {"x": "y"}}, {"m": None}])
    (update,) = codec.decode(codec.encode_updates([(data, 1, 1)])[0])
    assert row_converter(schema)(update.data) == (7, {"a": 1, "b": 2}, [({"x": "y"},), (None,)])
    plain = data_schema(T.StructType([T.StructField("k", T.LongType())]))
    assert row_converter(plain)((5,)) == (5,)


def test_a_violation_error_names_kind_time_partition_offset():
    found = [
        Violation("count_mismatch", 3, "statement says 2, another 3", 0, 17),
        Violation("undecodable", None, "x" * 500, 1, 4),
        *(Violation("over_count", t, "more", 0, t) for t in range(5)),
    ]
    text = str(ViolationError("orders", found))
    assert text.startswith(
        "topic 'orders' breaks the CDCv2 protocol: count_mismatch at time 3 (partition 0, "
        "offset 17): statement says 2, another 3; undecodable (partition 1, offset 4): xxx"
    )
    assert "… (300 more characters); over_count at time 0 (partition 0, offset 0): more" in text
    assert text.endswith(
        "; and 4 more (run cdc-emitter verify --topic orders for the whole report)"
    )


def test_named_types_by_full_name_fixed_decimals_uuid_and_refusals():
    inner = {
        "type": "record",
        "name": "In",
        "namespace": "ns",
        "fields": [{"name": "x", "type": "long"}],
    }
    money = {
        "type": "fixed",
        "name": "Money",
        "size": 8,
        "logicalType": "decimal",
        "precision": 10,
        "scale": 2,
    }
    record = {
        "type": "record",
        "name": "data",
        "fields": [
            {"name": "a", "type": inner},
            {"name": "b", "type": ["null", "ns.In"]},
            {"name": "c", "type": money},
            {"name": "d", "type": "Money"},
            {"name": "u", "type": {"type": "string", "logicalType": "uuid"}},
        ],
    }
    struct = spark_struct(record)
    assert [f.dataType.simpleString() for f in struct.fields] == [
        "struct<x:bigint>",
        "struct<x:bigint>",
        "decimal(10,2)",
        "decimal(10,2)",
        "string",
    ]
    import uuid

    value = uuid.UUID(int=5)
    assert row_converter(record)(((1,), None, 0, 0, value))[4] == str(value)
    timed = {
        "type": "record",
        "name": "data",
        "fields": [{"name": "t", "type": {"type": "int", "logicalType": "time-millis"}}],
    }
    with pytest.raises(SchemaError, match="column 't' is an Avro time-millis"):
        spark_struct(timed)
    looped = {
        "type": "record",
        "name": "Node",
        "fields": [{"name": "next", "type": ["null", "Node"]}],
    }
    with pytest.raises(SchemaError, match="recursive record"):
        spark_struct(looped)


def test_a_violation_error_pickles():
    import pickle

    error = ViolationError("t", [Violation("over_count", 1, "more", 0, 3)])
    again = pickle.loads(pickle.dumps(error))
    assert (str(again), again.violations) == (str(error), error.violations)
