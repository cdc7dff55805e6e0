"""The Avro codec: golden bytes against fastavro, the reference example, round trips, splitting."""

from __future__ import annotations

import datetime
import decimal
import io
import json
import struct
from pathlib import Path

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdc_emitter.errors import BadInputError, ConfigError, DecodeError, SchemaError
from cdc_emitter.protocol import Progress, Update
from cdc_emitter.protocol.codec import (
    CdcCodec,
    data_schema_from_text,
    encode_zigzag_long,
    union_schema,
)

SCHEMAS = Path(__file__).resolve().parents[3] / "schemas"
EXAMPLE = {
    "type": "record",
    "name": "data",
    "fields": [{"name": "id", "type": "long"}, {"name": "price", "type": ["null", "int"]}],
}
# The reference document's example changefeed, in canonical compact form.
REFERENCE_UPDATES = [
    Update((5, 10), 5, 1),
    Update((5, 12), 4, 1),
    Update((5, 12), 5, -1),
    Update((5, 10), 6, -1),
]
REFERENCE_LINES = [
    '{"array":[{"data":{"id":5,"price":{"int":10}},"time":5,"diff":1}]}',
    '{"array":[{"data":{"id":5,"price":{"int":12}},"time":4,"diff":1}]}',
    '{"array":[{"data":{"id":5,"price":{"int":12}},"time":5,"diff":-1}]}',
    '{"array":[{"data":{"id":5,"price":{"int":10}},"time":6,"diff":-1}]}',
]
REFERENCE_PROGRESS = [
    (
        Progress((0,), (3,), ()),
        '{"com.materialize.cdc.progress":{"lower":[0],"upper":[3],"counts":[]}}',
    ),
    (
        Progress((3,), (10,), ((4, 1), (5, 2), (6, 1))),
        '{"com.materialize.cdc.progress":{"lower":[3],"upper":[10],"counts":'
        '[{"time":4,"count":1},{"time":5,"count":2},{"time":6,"count":1}]}}',
    ),
]


def fastavro_bytes(union: list, datum) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(union), datum)
    return buf.getvalue()


def frame(framing: str, schema_id: int) -> bytes:
    return b"\x00" + struct.pack(">I", schema_id) if framing == "confluent" else b""


# -- schemas ------------------------------------------------------------------------------


def test_example_schema_file_is_the_union_of_its_data_record():
    union = json.loads((SCHEMAS / "materialize-cdc-example.avsc").read_text())
    assert union == union_schema(union[0]["items"]["fields"][0]["type"])
    progress = json.loads((SCHEMAS / "materialize-cdc-progress.avsc").read_text())
    assert progress == union[1]


def test_union_schema_renames_the_record_and_keeps_fields():
    union = union_schema(
        {"type": "record", "name": "row", "namespace": "x.y", "fields": EXAMPLE["fields"]}
    )
    data = union[0]["items"]["fields"][0]["type"]
    assert data == EXAMPLE
    assert [f["name"] for f in union[0]["items"]["fields"]] == ["data", "time", "diff"]
    assert union[1]["name"] == "progress" and union[1]["namespace"] == "com.materialize.cdc"


@pytest.mark.parametrize(
    "bad",
    [
        {"type": "array", "items": "long"},
        {"type": "record", "name": "data"},
        {"type": "record", "name": "data", "fields": [{"name": "x", "type": "nosuchtype"}]},
    ],
)
def test_union_schema_rejects_malformed(bad):
    with pytest.raises(SchemaError):
        union_schema(bad)


def test_data_schema_from_text_both_forms():
    full = (SCHEMAS / "materialize-cdc-example.avsc").read_text()
    assert data_schema_from_text(full) == EXAMPLE
    assert data_schema_from_text(json.dumps(EXAMPLE)) == EXAMPLE
    # the union exactly as printed in the reference document (other whitespace)
    assert data_schema_from_text(json.dumps(json.loads(full), indent=1) + "\n  ") == EXAMPLE


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[1, 2]",
        json.dumps([{"type": "array", "items": "long"}]),
        json.dumps(
            [
                {
                    "type": "array",
                    "items": {
                        "type": "record",
                        "name": "update",
                        "fields": [{"name": "data", "type": "long"}],
                    },
                }
            ]
        ),
        json.dumps(union_schema(EXAMPLE)[::-1]),
        json.dumps(union_schema(EXAMPLE)[1]),
        '"long"',
    ],
)
def test_data_schema_from_text_rejects_junk(text):
    with pytest.raises(SchemaError):
        data_schema_from_text(text)


# -- golden bytes and the reference example -----------------------------------------------


@pytest.mark.parametrize("framing,schema_id", [("confluent", 0), ("confluent", 258), ("raw", 0)])
def test_golden_bytes_match_fastavro_union_encoding(framing, schema_id):
    codec = CdcCodec(EXAMPLE, framing=framing, schema_id=schema_id)
    union = union_schema(EXAMPLE)
    records = [
        {"data": {"id": u.data[0], "price": u.data[1]}, "time": u.time, "diff": u.diff}
        for u in REFERENCE_UPDATES
    ]
    assert codec.encode_updates(REFERENCE_UPDATES) == [
        frame(framing, schema_id) + fastavro_bytes(union, records)
    ]
    for p, _ in REFERENCE_PROGRESS:
        datum = {
            "lower": list(p.lower),
            "upper": list(p.upper),
            "counts": [{"time": t, "count": c} for t, c in p.counts],
        }
        assert codec.encode_progress(p) == frame(framing, schema_id) + fastavro_bytes(union, datum)
    assert codec.encode_updates([Update((1, None), 2, 3)])[0] == frame(framing, schema_id) + bytes(
        [0, 2, 2, 0, 4, 6, 0]
    )


def test_reference_changefeed_avro_json():
    codec = CdcCodec(EXAMPLE)
    for update, line in zip(REFERENCE_UPDATES, REFERENCE_LINES):
        (message,) = codec.encode_updates([update])
        assert codec.to_avro_json(message) == line
        assert codec.decode(message) == [update]
    for progress, line in REFERENCE_PROGRESS:
        message = codec.encode_progress(progress)
        assert codec.to_avro_json(message) == line
        assert codec.decode(message) == progress
    assert CdcCodec(EXAMPLE).to_avro_json(codec.encode_updates([Update((1, None), 0, 1)])[0]) == (
        '{"array":[{"data":{"id":1,"price":null},"time":0,"diff":1}]}'
    )


def test_data_as_dict_or_tuple_and_zigzag():
    codec = CdcCodec(EXAMPLE, framing="raw")
    assert codec.encode_updates([Update({"id": 5, "price": 10}, 5, 1)]) == codec.encode_updates(
        [Update([5, 10], 5, 1)]
    )
    assert codec.encode_updates([]) == []
    for n in (0, -1, 1, 63, -64, 64, 2**63 - 1, -(2**63)):
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, "long", n)
        assert encode_zigzag_long(n) == buf.getvalue()


def test_avro_json_of_bytes_nested_and_logical_types():
    schema = {
        "type": "record",
        "name": "r",
        "fields": [
            {"name": "b", "type": ["null", "bytes"]},
            {
                "name": "n",
                "type": [
                    "null",
                    {"type": "record", "name": "inner", "fields": [{"name": "a", "type": "long"}]},
                ],
            },
            {"name": "d", "type": {"type": "int", "logicalType": "date"}},
            {"name": "m", "type": {"type": "map", "values": "string"}},
        ],
    }
    codec = CdcCodec(schema, framing="raw")
    data = (b"\x00\xff", (7,), datetime.date(1970, 1, 3), (("k", "v"),))
    (message,) = codec.encode_updates([Update(data, 1, 1)])
    assert codec.decode(message) == [Update(data, 1, 1)]
    assert codec.to_avro_json(message) == (
        '{"array":[{"data":{"b":{"bytes":"\\u0000ÿ"},"n":{"com.materialize.cdc.inner":{"a":7}},'
        '"d":2,"m":{"k":"v"}},"time":1,"diff":1}]}'
    )
    assert codec.data_to_json(data) == {
        "b": "AP8=",
        "n": {"a": 7},
        "d": "1970-01-03",
        "m": {"k": "v"},
    }


# -- round trips --------------------------------------------------------------------------

RICH = {
    "type": "record",
    "name": "row",
    "fields": [
        {"name": "k", "type": "long"},
        {"name": "s", "type": ["null", "string"]},
        {"name": "b", "type": "bytes"},
        {"name": "f", "type": ["null", "double"]},
        {"name": "t", "type": "boolean"},
        {
            "name": "nested",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "inner",
                    "fields": [
                        {"name": "x", "type": "int"},
                        {"name": "tags", "type": {"type": "array", "items": "string"}},
                    ],
                },
            ],
        },
        {"name": "arr", "type": {"type": "array", "items": ["null", "long"]}},
        {"name": "m", "type": {"type": "map", "values": "long"}},
        {
            "name": "dec",
            "type": [
                "null",
                {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2},
            ],
        },
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "ts", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}]},
    ],
}
RICH_CODEC = CdcCodec(RICH)

longs = st.integers(-(2**63), 2**63 - 1)
rich_data = st.tuples(
    longs,
    st.none() | st.text(max_size=8),
    st.binary(max_size=8),
    st.none() | st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.none()
    | st.tuples(
        st.integers(-(2**31), 2**31 - 1), st.lists(st.text(max_size=3), max_size=3).map(tuple)
    ),
    st.lists(st.none() | longs, max_size=3).map(tuple),
    st.dictionaries(st.text(max_size=3), longs, max_size=3).map(lambda d: tuple(sorted(d.items()))),
    st.none() | st.integers(-(10**11), 10**11).map(lambda n: decimal.Decimal(n).scaleb(-2)),
    st.dates(),
    st.none()
    | st.datetimes(datetime.datetime(1900, 1, 1), datetime.datetime(2200, 1, 1)).map(
        lambda d: d.replace(tzinfo=datetime.timezone.utc)
    ),
)
updates = st.lists(
    st.builds(Update, rich_data, st.integers(0, 2**63 - 1), longs.filter(bool)), max_size=20
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(updates)
def test_round_trip_rich_data(batch):
    messages = RICH_CODEC.encode_updates(batch)
    decoded = [u for m in messages for u in RICH_CODEC.decode(m)]
    assert decoded == batch
    for u in decoded:
        hash(u)
        json.dumps(RICH_CODEC.data_to_json(u.data))
        RICH_CODEC.to_avro_json(messages[0])
    sorted((u.data for u in decoded), key=RICH_CODEC.sort_key)


def progress_datum(p: Progress) -> dict:
    return {
        "lower": list(p.lower),
        "upper": list(p.upper),
        "counts": [{"time": t, "count": c} for t, c in p.counts],
    }


@given(
    st.lists(st.integers(0, 2**63 - 1), max_size=1),
    st.lists(st.integers(0, 2**63 - 1), max_size=1),
    st.lists(st.tuples(longs, longs), max_size=40),
)
def test_progress_bytes_are_fastavros(lower, upper, counts):
    # written by hand (vectorised): every varint length, negative longs included
    codec = CdcCodec(EXAMPLE)
    progress = Progress(tuple(lower), tuple(upper), tuple(counts))
    assert codec.encode_progress(progress) == frame("confluent", 0) + b"\x02" + fastavro_bytes(
        union_schema(EXAMPLE)[1], progress_datum(progress)
    )


@pytest.mark.slow  # a million-entry workload: the full run, not --quick
def test_a_statement_of_a_million_times_is_fastavros_bytes():
    codec = CdcCodec(EXAMPLE, framing="raw")
    progress = Progress((5,), (2**62,), tuple((5 + 3 * t, 1 + t % 1000) for t in range(1_000_000)))
    assert codec.encode_progress(progress) == b"\x02" + fastavro_bytes(
        union_schema(EXAMPLE)[1], progress_datum(progress)
    )


@pytest.mark.parametrize("counts", [((1, 2**63),), ((-1 - 2**63, 1),), ((1, "2"),)])
def test_a_progress_value_that_is_not_a_long_is_refused(counts):
    # not a plain long: fastavro writes it, and says what is wrong
    with pytest.raises(BadInputError, match="cannot be encoded"):
        CdcCodec(EXAMPLE).encode_progress(Progress((0,), (9,), counts))


@given(
    st.tuples(
        st.lists(st.integers(0, 2**63 - 1), max_size=1),
        st.lists(st.integers(0, 2**63 - 1), max_size=1),
        st.lists(st.tuples(st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1)), max_size=5),
    )
)
def test_round_trip_progress(parts):
    progress = Progress(tuple(parts[0]), tuple(parts[1]), tuple(parts[2]))
    assert RICH_CODEC.decode(RICH_CODEC.encode_progress(progress)) == progress


def test_sort_key_is_total():
    codec = CdcCodec(EXAMPLE)
    rows = [(5, None), (5, 3), (1, 2), (-3, None)]
    assert sorted(rows, key=codec.sort_key) == [(-3, None), (1, 2), (5, None), (5, 3)]
    assert codec.sort_key((1, None)) < codec.sort_key((1, 0))


# -- size splitting -----------------------------------------------------------------------

SPLIT = {
    "type": "record",
    "name": "r",
    "fields": [{"name": "k", "type": "long"}, {"name": "v", "type": "string"}],
}


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(longs, st.text(st.characters(max_codepoint=127), max_size=40)), max_size=200
    ),
    st.integers(70, 3000),  # an item is at most 10 + 41 + 10 + 1 bytes
    st.sampled_from(["confluent", "raw"]),
)
def test_splitting_keeps_every_update_once_within_the_limit(rows, limit, framing):
    codec = CdcCodec(SPLIT, framing=framing, max_message_bytes=limit)
    batch = [Update(row, i, 1) for i, row in enumerate(rows)]
    messages = codec.encode_updates(batch)
    assert all(len(m) <= limit for m in messages)
    assert [u for m in messages for u in codec.decode(m)] == batch
    # pack_items on per-item bytes (as Spark's to_avro would make them) gives the same messages
    item = fastavro.parse_schema(union_schema(SPLIT)[0]["items"])
    items = []
    for u in batch:
        buf = io.BytesIO()
        fastavro.schemaless_writer(
            buf, item, {"data": dict(zip(("k", "v"), u.data)), "time": u.time, "diff": u.diff}
        )
        items.append(buf.getvalue())
    packed = list(codec.pack_items(items))
    assert all(len(m) <= limit for m in packed)
    assert [u for m in packed for u in codec.decode(m)] == batch
    if len(messages) == 1:
        assert packed == messages


@pytest.mark.parametrize("limit", [200, 1000, 5000, 100_000])
def test_splitting_large_batches_of_varied_updates(limit):
    codec = CdcCodec(SPLIT, max_message_bytes=limit)
    batch = [Update((i, "v" * (i % 97)), i // 100, 1) for i in range(5000)]
    messages = codec.encode_updates(batch)
    assert all(len(m) <= limit for m in messages)
    assert [u for m in messages for u in codec.decode(m)] == batch
    if limit >= 1000:  # messages are well filled
        assert sum(map(len, messages)) > 0.7 * limit * (len(messages) - 1)


def test_pack_items_fills_messages_greedily():
    codec = CdcCodec(SPLIT, framing="raw", max_message_bytes=100)
    items = [b"\x02\x02x" + b"\x00" * 12] * 50  # 15-byte items (content is not inspected)
    messages = list(codec.pack_items(items))
    assert [len(m) for m in messages] == [93] * 8 + [3 + 2 * 15]  # index, count, 6 items, 0
    assert list(codec.pack_items([])) == []


@given(
    st.lists(
        st.lists(
            st.tuples(longs, st.text(st.characters(max_codepoint=127), max_size=30)),
            min_size=1,
            max_size=20,
        ),
        max_size=40,
    ),
    st.integers(300, 4000),  # a small array (at most 20 items of at most 52 bytes) fits whole
    st.sampled_from(["confluent", "raw"]),
)
def test_merge_arrays_keeps_every_update_in_order_within_the_limit(arrays, limit, framing):
    codec = CdcCodec(SPLIT, framing=framing, max_message_bytes=limit)
    given_ = [
        m
        for rows in arrays
        for m in codec.encode_updates([Update(r, i, 1) for i, r in enumerate(rows)])
    ]
    merged = codec.merge_arrays(given_)
    assert [u for m in merged for u in codec.decode(m)] == [
        u for m in given_ for u in codec.decode(m)
    ]
    assert all(len(m) <= limit for m in merged)
    assert len(merged) <= len(given_)
    # greedy: no two neighbours would have fitted in one message
    for a, b in zip(merged, merged[1:]):
        assert len(codec.merge_arrays([a, b])) == 2


def test_merge_arrays_joins_small_messages_and_refuses_foreign_ones():
    codec = CdcCodec(SPLIT, max_message_bytes=1000)
    arrays = [codec.encode_updates([Update((i, "x" * 30), 3, -1)])[0] for i in range(40)]
    merged = codec.merge_arrays(arrays)
    # updates of 34 bytes: 29 fill 992 of the 1,000 (header 5, branch 1, count 1, closing zero 1)
    assert [len(m) for m in merged] == [994, 8 + 11 * 34]
    assert codec.decode(merged[1]) == [Update((i, "x" * 30), 3, -1) for i in range(29, 40)]
    assert codec.merge_arrays([]) == []
    progress = codec.encode_progress(Progress((0,), (1,), ((0, 1),)))
    with pytest.raises(DecodeError, match="message 1 .* not framed"):
        codec.merge_arrays([arrays[0], progress])
    with pytest.raises(DecodeError, match="message 0 ends inside its block count"):
        codec.merge_arrays([arrays[0][:6] + b"\x80\x00"])


def test_oversized_update_is_rejected_naming_time_size_and_limit():
    codec = CdcCodec(SPLIT, max_message_bytes=100)
    with pytest.raises(BadInputError, match=r"time 7.* 205 bytes.* 100 bytes"):
        codec.encode_updates([Update((1, "x"), 1, 1), Update((1, "x" * 200), 7, 1)])
    with pytest.raises(BadInputError, match="item 0"):
        list(codec.pack_items([b"\x00" * 200]))
    with pytest.raises(BadInputError, match="time 3"):
        codec.encode_updates([Update(("not a long", "x"), 3, 1)])


# -- decode errors and options ------------------------------------------------------------


def test_decode_errors():
    codec = CdcCodec(EXAMPLE)
    (good,) = codec.encode_updates(REFERENCE_UPDATES)
    progress = codec.encode_progress(REFERENCE_PROGRESS[1][0])
    with pytest.raises(DecodeError, match="magic"):
        codec.decode(b"\x01" + good[1:])
    for cut in (0, 3, 6, len(good) - 1):
        with pytest.raises(DecodeError):
            codec.decode(good[:cut])
    with pytest.raises(DecodeError):
        codec.decode(progress[:-1])
    with pytest.raises(DecodeError, match="leaves 1 of 29 bytes unread"):
        codec.decode(good + b"\x00")
    with pytest.raises(DecodeError, match="union index"):
        codec.decode(good[:5] + b"\x04" + good[6:])
    with pytest.raises(DecodeError):
        CdcCodec(EXAMPLE, framing="raw").decode(b"")
    # another schema id is not rejected
    assert CdcCodec(EXAMPLE, schema_id=9).decode(good) == REFERENCE_UPDATES


def test_config_errors():
    with pytest.raises(ConfigError):
        CdcCodec(EXAMPLE, framing="magic")
    for bad in (-1, 2**31, "1"):
        with pytest.raises(ConfigError):
            CdcCodec(EXAMPLE, schema_id=bad)
    codec = CdcCodec(EXAMPLE, framing="raw", schema_id=5, max_message_bytes=1000)
    assert (codec.framing, codec.schema_id, codec.max_message_bytes) == ("raw", 5, 1000)
    assert codec.field_names == ["id", "price"] and codec.data_schema == EXAMPLE
    assert codec.union == union_schema(EXAMPLE)


def test_nullable_array_map_and_recursive_record():
    schema = {
        "type": "record",
        "name": "r",
        "fields": [
            {"name": "a", "type": ["null", {"type": "array", "items": "long"}]},
            {
                "name": "node",
                "type": [
                    "null",
                    {
                        "type": "record",
                        "name": "node",
                        "fields": [
                            {"name": "v", "type": "long"},
                            {"name": "next", "type": ["null", "node"]},
                        ],
                    },
                ],
            },
            {"name": "m", "type": ["null", {"type": "map", "values": "long"}]},
        ],
    }
    codec = CdcCodec(schema, framing="raw")
    data = ((1, 2), (1, (2, None)), (("a", 1),))
    (message,) = codec.encode_updates([Update(data, 1, 1)])
    assert codec.decode(message) == [Update(data, 1, 1)]
    assert codec.to_avro_json(message) == (
        '{"array":[{"data":{"a":{"array":[1,2]},"node":{"com.materialize.cdc.node":{"v":1,'
        '"next":{"com.materialize.cdc.node":{"v":2,"next":null}}}},"m":{"map":{"a":1}}},"time":1,"diff":1}]}'
    )
    assert codec.data_to_json(data) == {
        "a": [1, 2],
        "node": {"v": 1, "next": {"v": 2, "next": None}},
        "m": {"a": 1},
    }
