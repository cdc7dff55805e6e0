"""The Spark → Avro type mapping of DESIGN §2 (pyspark types only, no session)."""

from __future__ import annotations

import pytest
from pyspark.sql import types as T

from cdc_emitter.errors import SchemaError
from cdc_emitter.spark.schema import contains_map, data_schema


def field_types(schema):
    return {f["name"]: f["type"] for f in schema["fields"]}


def test_scalar_types_nullable_and_not():
    s = T.StructType(
        [
            T.StructField("l", T.LongType(), False),
            T.StructField("i", T.IntegerType(), False),
            T.StructField("sh", T.ShortType(), True),
            T.StructField("b", T.ByteType(), True),
            T.StructField("d", T.DoubleType(), True),
            T.StructField("f", T.FloatType(), True),
            T.StructField("bo", T.BooleanType(), True),
            T.StructField("s", T.StringType(), True),
            T.StructField("bin", T.BinaryType(), True),
            T.StructField("dec", T.DecimalType(12, 3), True),
            T.StructField("dt", T.DateType(), True),
            T.StructField("ts", T.TimestampType(), True),
            T.StructField("ntz", T.TimestampNTZType(), False),
        ]
    )
    schema = data_schema(s)
    assert schema["type"] == "record" and schema["name"] == "data" and "namespace" not in schema
    assert [f["name"] for f in schema["fields"]] == [f.name for f in s.fields]
    t = field_types(schema)
    assert t["l"] == "long" and t["i"] == "int"
    assert t["sh"] == ["null", "int"] and t["b"] == ["null", "int"]
    assert t["d"] == ["null", "double"] and t["f"] == ["null", "float"]
    assert (
        t["bo"] == ["null", "boolean"]
        and t["s"] == ["null", "string"]
        and t["bin"] == ["null", "bytes"]
    )
    assert t["dec"] == [
        "null",
        {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 3},
    ]
    assert t["dt"] == ["null", {"type": "int", "logicalType": "date"}]
    assert t["ts"] == ["null", {"type": "long", "logicalType": "timestamp-micros"}]
    assert t["ntz"] == {"type": "long", "logicalType": "local-timestamp-micros"}


def test_nested_types_and_unique_record_names():
    inner = T.StructType([T.StructField("x", T.LongType(), True)])
    s = T.StructType(
        [
            T.StructField("a", T.ArrayType(T.StringType(), containsNull=True), True),
            T.StructField("a2", T.ArrayType(T.LongType(), containsNull=False), False),
            T.StructField(
                "m", T.MapType(T.StringType(), T.ArrayType(T.IntegerType(), False), True), True
            ),
            T.StructField(
                "st",
                T.StructType(
                    [
                        T.StructField("x", T.LongType(), True),
                        T.StructField("deep", inner, True),
                    ]
                ),
                True,
            ),
            T.StructField("sts", T.ArrayType(inner, False), True),
        ]
    )
    t = field_types(data_schema(s))
    assert t["a"] == ["null", {"type": "array", "items": ["null", "string"]}]
    assert t["a2"] == {"type": "array", "items": "long"}
    assert t["m"] == [
        "null",
        {"type": "map", "values": ["null", {"type": "array", "items": "int"}]},
    ]
    st = t["st"][1]
    assert st["type"] == "record" and st["name"] == "data_st"
    assert st["fields"][1]["type"][1]["name"] == "data_st_deep"
    assert t["sts"][1]["items"]["name"] == "data_sts_element"
    # every record name is distinct
    names = []

    def walk(x):
        if isinstance(x, dict):
            if x.get("type") == "record":
                names.append(x["name"])
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(data_schema(s))
    assert len(names) == len(set(names))
    assert contains_map(s["m"].dataType) and not contains_map(s["st"].dataType)


def test_fastavro_accepts_the_schema():
    fastavro = pytest.importorskip("fastavro")
    s = T.StructType(
        [
            T.StructField("st", T.StructType([T.StructField("x", T.LongType())])),
            T.StructField("st2", T.ArrayType(T.StructType([T.StructField("x", T.LongType())]))),
            T.StructField("dec", T.DecimalType(38, 10)),
        ]
    )
    update = {
        "type": "record",
        "name": "update",
        "namespace": "com.materialize.cdc",
        "fields": [
            {"name": "data", "type": data_schema(s)},
            {"name": "time", "type": "long"},
            {"name": "diff", "type": "long"},
        ],
    }
    fastavro.parse_schema(update)


UNSUPPORTED = [
    (T.DayTimeIntervalType(), ["interval"]),
    (T.YearMonthIntervalType(), ["interval"]),
    (T.MapType(T.LongType(), T.StringType()), ["map<bigint,string>", "string keys"]),
    (T.NullType(), ["void"]),
] + [
    (getattr(T, name)(), words)
    for name, words in (("CalendarIntervalType", ["interval"]), ("VariantType", ["variant"]))
    if hasattr(T, name)
]  # PySpark 4's types


@pytest.mark.parametrize("dtype, words", UNSUPPORTED)
def test_unsupported_types_name_the_column(dtype, words):
    s = T.StructType(
        [
            T.StructField("ok", T.LongType()),
            T.StructField("outer", T.StructType([T.StructField("bad", dtype)])),
        ]
    )
    with pytest.raises(SchemaError) as info:
        data_schema(s)
    msg = str(info.value)
    assert "'outer.bad'" in msg
    for w in words:
        assert w in msg


def test_unsupported_inside_array_and_bad_names():
    s = T.StructType([T.StructField("xs", T.ArrayType(T.DayTimeIntervalType()))])
    with pytest.raises(SchemaError, match=r"xs\.element"):
        data_schema(s)
    with pytest.raises(SchemaError, match="valid Avro field name"):
        data_schema(T.StructType([T.StructField("a b", T.LongType())]))
    with pytest.raises(SchemaError, match="at least one"):
        data_schema(T.StructType([]))


def test_collated_strings_become_plain_strings_wherever_they_are_nested():
    from pyspark.sql import types as T

    from cdc_emitter.spark.schema import without_collation

    if not hasattr(T.StringType(), "collation"):
        pytest.skip("collations need Spark 4")
    lcase = T.StringType("UTF8_LCASE")
    assert without_collation(T.StringType()) is None
    assert without_collation(T.LongType()) is None
    assert without_collation(lcase) == T.StringType()
    nested = T.StructType(
        [
            T.StructField("a", T.ArrayType(lcase, False), False),
            T.StructField("m", T.MapType(T.StringType(), lcase, True)),
            T.StructField("n", T.LongType()),
        ]
    )
    assert without_collation(nested) == T.StructType(
        [
            T.StructField("a", T.ArrayType(T.StringType(), False), False),
            T.StructField("m", T.MapType(T.StringType(), T.StringType(), True)),
            T.StructField("n", T.LongType()),
        ]
    )
    assert without_collation(T.StructType([T.StructField("s", T.StringType())])) is None
