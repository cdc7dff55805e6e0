"""``encoded_length`` in Spark: for every value ``from_avro`` decodes, the length of Avro's
canonical encoding of it, as fastavro writes it; None for the types it cannot size."""

from __future__ import annotations

import io
import json
import random

import fastavro
import fastavro.schema
import pytest
from helpers import frame
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro

from cdc_emitter.spark.avro_length import array_length, encoded_length

#: Longs and ints at each varint boundary (a zig-zag varint holds 6 bits in one byte, 13 in two…)
EDGES = sorted(
    {0, 1, -1, 2**63 - 1, -(2**63)}
    | {s * (2 ** (7 * n - 1)) + d for n in range(1, 10) for s in (1, -1) for d in (-1, 0, 1)}
)
INT_EDGES = [v for v in EDGES if -(2**31) <= v < 2**31]
#: ``from_avro``'s options as ``read_cdc`` gives them: dates before 1582 (which Spark 3 refuses by
#: default) read as Avro and fastavro count them, in the proleptic Gregorian calendar
READ = {"datetimeRebaseMode": "CORRECTED"}
TEXTS = ["", "a", "é", "日本", "x" * 63, "y" * 64, "z" * 8191, "w" * 8192, "\U0001f600" * 17]

RECORD = {
    "type": "record",
    "name": "row",
    "namespace": "test",
    "fields": [
        {"name": "l", "type": "long"},
        {"name": "i", "type": "int"},
        {"name": "s", "type": "string"},
        {"name": "ns", "type": ["null", "string"]},
        {"name": "sn", "type": ["string", "null"]},
        {"name": "b", "type": "bytes"},
        {"name": "flag", "type": "boolean"},
        {"name": "f", "type": "float"},
        {"name": "d", "type": "double"},
        {"name": "e", "type": {"type": "enum", "name": "colour", "symbols": ["red", "green"]}},
        {"name": "fx", "type": {"type": "fixed", "name": "four", "size": 4}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "longs", "type": {"type": "array", "items": "long"}},
        {"name": "texts", "type": {"type": "array", "items": ["null", "string"]}},
        {"name": "nested", "type": {"type": "array", "items": {"type": "array", "items": "int"}}},
        {"name": "m", "type": {"type": "map", "values": ["null", "long"]}},
        {
            "name": "inner",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "inner",
                    "fields": [{"name": "a", "type": "int"}, {"name": "c", "type": "colour"}],
                },
            ],
        },
        {"name": "either", "type": ["null", "string", "long", "inner"]},
        {"name": "number", "type": ["int", "long"]},
        {"name": "nothing", "type": "null"},
    ],
}


def _value(rng: random.Random) -> dict:
    def long() -> int:
        return rng.choice(EDGES) if rng.random() < 0.5 else rng.randint(-(2**40), 2**40)

    def text() -> str:
        return rng.choice(TEXTS)

    def maybe(make):
        return None if rng.random() < 0.3 else make()

    inner = {"a": rng.choice(INT_EDGES), "c": rng.choice(["red", "green"])}
    return {
        "l": long(),
        "i": rng.choice(INT_EDGES),
        "s": text(),
        "ns": maybe(text),
        "sn": maybe(text),
        "b": text().encode()[: rng.randint(0, 100)],
        "flag": rng.random() < 0.5,
        "f": rng.random(),
        "d": rng.random() * 1e300,
        "e": rng.choice(["red", "green"]),
        "fx": bytes(rng.randrange(256) for _ in range(4)),
        "day": rng.choice([-800_000, -1, 0, 1, 63, 64, 20_000, 2_900_000]),
        "id": "00000000-0000-0000-0000-00000000000" + str(rng.randrange(10)),
        "longs": [long() for _ in range(rng.choice([0, 1, 5, 70]))],
        "texts": [maybe(text) for _ in range(rng.choice([0, 2, 64]))],
        "nested": [
            [rng.choice(INT_EDGES) for _ in range(rng.choice([0, 3]))]
            for _ in range(rng.choice([0, 2]))
        ],
        "m": {text()[:5] + str(j): maybe(long) for j in range(rng.choice([0, 1, 65]))},
        "inner": maybe(lambda: inner),
        "either": rng.choice([None, text(), long(), ("test.inner", inner)]),
        "number": rng.choice(INT_EDGES),
        "nothing": None,
    }


def _encoded(schema: dict, value: dict) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), value)
    return out.getvalue()


def test_the_length_is_fastavros_for_every_type_it_sizes(spark):
    rng = random.Random(57)
    bodies = [_encoded(RECORD, _value(rng)) for _ in range(400)]
    df = frame(spark, [(b,) for b in bodies], "body binary")
    decoded = df.select("body", from_avro("body", json.dumps(RECORD), READ).alias("v"))
    length = encoded_length("v", decoded.schema["v"].dataType, RECORD)
    assert length is not None
    rows = decoded.select(F.octet_length("body"), length).collect()
    assert [r[1] for r in rows] == [r[0] for r in rows]


def test_each_field_alone_has_its_length(spark):
    """One field at a time, so a wrong length names its type (named types written out)."""
    rng = random.Random(58)
    values = [_value(rng) for _ in range(200)]
    for field in fastavro.schema.expand_schema(RECORD)["fields"]:
        schema = {**RECORD, "fields": [field]}
        bodies = [_encoded(schema, {field["name"]: v[field["name"]]}) for v in values]
        decoded = frame(spark, [(b,) for b in bodies], "body binary").select(
            "body", from_avro("body", json.dumps(schema), READ).alias("v")
        )
        length = encoded_length("v", decoded.schema["v"].dataType, schema)
        assert length is not None, field["name"]
        rows = decoded.select(F.octet_length("body"), length).collect()
        assert [r[1] for r in rows] == [r[0] for r in rows], field["name"]


@pytest.mark.parametrize(
    "avro",
    [
        {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
        {"type": "long", "logicalType": "timestamp-micros"},
        ["null", "float", "double"],
    ],
    ids=["decimal", "timestamp", "float-or-double"],
)
def test_a_type_spark_converts_is_not_sized(spark, avro):
    schema = {"type": "record", "name": "r", "fields": [{"name": "x", "type": avro}]}
    decoded = frame(spark, [(b"",)], "body binary").select(
        from_avro("body", json.dumps(schema), {"mode": "PERMISSIVE", **READ}).alias("v")
    )
    assert encoded_length("v", decoded.schema["v"].dataType, schema) is None


def test_an_array_length_counts_its_block(spark):
    row = (
        spark.range(1)
        .select(
            array_length("0", "0").alias("empty"),
            array_length("3", "30").alias("three"),
            array_length("64", "640").alias("sixty_four"),
        )
        .first()
    )
    # the zero alone; count (1 byte), items, zero; count 64 takes 2 bytes
    assert (row["empty"], row["three"], row["sixty_four"]) == (1, 32, 643)
