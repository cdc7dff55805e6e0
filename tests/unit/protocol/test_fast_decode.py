"""The fast decoder of update arrays: fastavro's values (as the codec makes them hashable) for
every message it reads, and fastavro's verdict for every message it declines (odd encodings,
damage); column by column for a decode worker, the same rows again."""

from __future__ import annotations

import copy
import datetime
import decimal
import io
import marshal

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdc_emitter.errors import DecodeError, SchemaError
from cdc_emitter.protocol import NAN, Progress, Update
from cdc_emitter.protocol.codec import CdcCodec
from cdc_emitter.protocol.fast_decode import (
    Unfit,
    compile_array_decoder,
    compile_column_decoder,
    holds_floats,
)
from cdc_emitter.protocol.varint import encode_zigzag_long

UTC = datetime.timezone.utc
TIMES = {"min_value": datetime.datetime(1900, 1, 1), "max_value": datetime.datetime(2200, 1, 1)}
#: Each column type the fast decoder reads, and values of it (whole milliseconds for the
#: millisecond timestamps, as they hold no more)
VALUES = {
    "long": st.integers(-(2**63), 2**63 - 1),
    "int": st.integers(-(2**31), 2**31 - 1),
    "string": st.text(max_size=12),
    "bytes": st.binary(max_size=12),
    "boolean": st.booleans(),
    "double": st.floats(),
    "float": st.floats(width=32),
    "date": st.dates(),
    "timestamp-micros": st.datetimes(**TIMES, timezones=st.just(UTC)),
    "timestamp-millis": st.datetimes(**TIMES, timezones=st.just(UTC)).map(
        lambda t: t.replace(microsecond=t.microsecond // 1000 * 1000)
    ),
    "local-timestamp-micros": st.datetimes(**TIMES),
    "local-timestamp-millis": st.datetimes(**TIMES).map(
        lambda t: t.replace(microsecond=t.microsecond // 1000 * 1000)
    ),
}
LOGICAL = {
    "date": {"type": "int", "logicalType": "date"},
    **{
        name: {"type": "long", "logicalType": name}
        for name in VALUES
        if name.endswith(("-micros", "-millis"))
    },
}
#: Logical types read through fastavro's own readers, and values of them
OTHER_LOGICAL = {
    "decimal": (
        {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2},
        st.decimals(-(10**6), 10**6, places=2, allow_nan=False, allow_infinity=False),
    ),
    "uuid": ({"type": "string", "logicalType": "uuid"}, st.uuids()),
    "time-micros": ({"type": "long", "logicalType": "time-micros"}, st.times()),
    "time-millis": (
        {"type": "int", "logicalType": "time-millis"},
        st.times().map(lambda t: t.replace(microsecond=t.microsecond // 1000 * 1000)),
    ),
}


def canonical(value):
    """The codec's canonical value: one NaN object, -0.0 as 0.0."""
    if isinstance(value, float):
        return NAN if value != value else value + 0.0
    if isinstance(value, tuple):
        return tuple(map(canonical, value))
    return value


def hashable(avro_type, value):
    """The codec's hashable form of ``value`` (as given, or as fastavro reads it): records and
    arrays as tuples, maps as tuples sorted by key, floats canonical."""
    if value is None:
        return None
    if isinstance(avro_type, list):
        (other,) = [t for t in avro_type if t != "null"]
        return hashable(other, value)
    if isinstance(avro_type, dict) and avro_type["type"] == "record":
        fields = avro_type["fields"]
        if isinstance(value, dict):
            value = tuple(value[f["name"]] for f in fields)
        return tuple(hashable(f["type"], v) for f, v in zip(fields, value))
    if isinstance(avro_type, dict) and avro_type["type"] == "array":
        return tuple(hashable(avro_type["items"], v) for v in value)
    if isinstance(avro_type, dict) and avro_type["type"] == "map":
        return tuple(sorted((k, hashable(avro_type["values"], v)) for k, v in value.items()))
    return canonical(value)


@st.composite
def column_types(draw, names: list, depth: int = 0):
    """``(avro type, values)`` of a column: a primitive, a date or timestamp, another logical
    type, an enum, a fixed, or (``depth`` allowing) a record, array or map of such; nullable or
    not. ``names``: the named types so far (each name once in a schema)."""
    nested = ["record", "array", "map"] if depth < 2 else []
    kinds = [*sorted(VALUES), *OTHER_LOGICAL, "enum", "fixed", *nested]
    kind = draw(st.sampled_from(kinds))
    if kind in VALUES:
        avro_type, values = LOGICAL.get(kind, kind), VALUES[kind]
    elif kind in OTHER_LOGICAL:
        avro_type, values = OTHER_LOGICAL[kind]
    elif kind == "enum":
        names.append(f"n{len(names)}")
        avro_type = {"type": "enum", "name": names[-1], "symbols": ["A", "B", "C"]}
        values = st.sampled_from(["A", "B", "C"])
    elif kind == "fixed":
        names.append(f"n{len(names)}")
        avro_type, values = (
            {"type": "fixed", "name": names[-1], "size": 3},
            st.binary(min_size=3, max_size=3),
        )
    elif kind == "record":
        names.append(f"n{len(names)}")
        name = names[-1]
        inner = [draw(column_types(names, depth + 1)) for _ in range(draw(st.integers(1, 3)))]
        fields = [{"name": f"f{i}", "type": t} for i, (t, _v) in enumerate(inner)]
        avro_type = {"type": "record", "name": name, "fields": fields}
        values = st.tuples(*(v for _t, v in inner))
    else:
        item, item_values = draw(column_types(names, depth + 1))
        if kind == "array":
            avro_type, values = {"type": "array", "items": item}, st.lists(item_values, max_size=3)
        else:
            avro_type = {"type": "map", "values": item}
            values = st.dictionaries(st.text(max_size=3), item_values, max_size=3)
    null = draw(st.sampled_from([None, "first", "last"]))
    if null is None:
        return avro_type, values
    return (["null", avro_type] if null == "first" else [avro_type, "null"]), st.none() | values


@st.composite
def data_schemas(draw):
    """A data record of one to five columns."""
    names: list = []
    columns = [draw(column_types(names)) for _ in range(draw(st.integers(1, 5)))]
    fields = [{"name": f"c{i}", "type": t} for i, (t, _v) in enumerate(columns)]
    return {"type": "record", "name": "data", "fields": fields}, [v for _t, v in columns]


@st.composite
def topics(draw):
    schema, columns = draw(data_schemas())
    updates = draw(
        st.lists(
            st.builds(
                Update,
                st.tuples(*columns),
                st.integers(0, 2**63 - 1),
                st.integers(-(2**63), 2**63 - 1).filter(bool),
            ),
            max_size=20,
        )
    )
    return schema, updates


def fastavro_verdict(codec: CdcCodec, value: bytes):
    """What fastavro alone reads from an update-array message: the tuples, or "error"."""
    try:
        buf = io.BytesIO(value)
        buf.seek(len(codec.frame) + 1)
        datum = fastavro.schemaless_reader(buf, fastavro.parse_schema(codec.union[0]), None)
        if buf.tell() != len(value):
            return "error"
    except Exception:
        return "error"
    data = codec.data_schema
    return [(hashable(data, r["data"]), r["time"], r["diff"]) for r in datum]


def damaged(codec: CdcCodec, updates: list, data) -> bytes:
    """The first message of ``updates`` (or an empty array) with bytes flipped, cut or added."""
    messages = codec.encode_updates(updates)
    message = bytearray(messages[0] if messages else b"\x00\x00")
    for _ in range(data.draw(st.integers(1, 3))):
        how = data.draw(st.sampled_from(["flip", "cut", "add"]))
        at = data.draw(st.integers(1, max(1, len(message) - 1)))
        if how == "flip" and at < len(message):
            message[at] = data.draw(st.integers(0, 255))
        elif how == "cut":
            del message[at:]
        else:
            message[at:at] = data.draw(st.binary(min_size=1, max_size=3))
    return bytes(message)


def codec_verdict(codec: CdcCodec, value: bytes):
    try:
        return codec.decode_rows(value)
    except DecodeError:
        return "error"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topics(), st.sampled_from(["raw", "confluent"]))
def test_every_message_decodes_as_fastavro_decodes_it(topic, framing):
    schema, updates = topic
    codec = CdcCodec(schema, framing=framing, schema_id=7)
    assert compile_array_decoder(codec.union[0]["items"]) is not None  # what this is about
    for message in codec.encode_updates(updates):
        assert codec.decode_rows(message) == fastavro_verdict(codec, message)
    decoded = [u for m in codec.encode_updates(updates) for u in codec.decode(m)]
    assert decoded == [Update(hashable(schema, d), t, x) for d, t, x in updates]
    assert all(type(u) is Update for u in decoded)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topics(), st.data())
def test_a_damaged_message_gets_fastavro_s_verdict(topic, data):
    """Flipped, cut or added bytes: the fast decoders never read a value fastavro would not."""
    schema, updates = topic
    codec = CdcCodec(schema, framing="raw")
    value = damaged(codec, updates, data)
    verdict = codec_verdict(codec, value)
    assert verdict == fastavro_verdict(codec, value)
    try:  # and column by column, as a decode worker reads it
        columns = codec.decode_columns(value)
        assert (
            codec.columns_to_rows(columns) if columns.__class__ is tuple else columns
        ) == verdict
    except DecodeError:
        assert verdict == "error"


SCHEMA = {
    "type": "record",
    "name": "data",
    "fields": [{"name": "k", "type": "long"}, {"name": "v", "type": ["null", "string"]}],
}


def array(*blocks: bytes) -> bytes:
    return b"\x00" + b"".join(blocks) + b"\x00"  # union index 0, the blocks, closing zero


def test_odd_but_valid_encodings_are_left_to_fastavro():
    codec = CdcCodec(SCHEMA, framing="raw")
    decode = compile_array_decoder(codec.union[0]["items"])
    assert decode is not None
    one = b"\x02" + b"\x02" + b"\x02" + b"\x02a" + b"\x06" + b"\x02"  # ((1, "a"), 3, 1)
    assert codec.decode_rows(array(one)) == [((1, "a"), 3, 1)]
    # a block with its byte size (negative count), a ten-byte varint, a non-minimal union index
    sized = encode_zigzag_long(-1) + encode_zigzag_long(len(one) - 1) + one[1:]
    ten = b"\x02" + b"\xfe" + b"\xff" * 8 + b"\x01" + b"\x00" + b"\x06\x02"
    long_index = b"\x02" + b"\x02" + b"\x82\x00\x02a" + b"\x06\x02"
    for value in (array(sized), array(ten), array(long_index)):
        with pytest.raises(Unfit):
            decode(value, 1, tuple)
        assert codec.decode_rows(value) == fastavro_verdict(codec, value) != "error"
    assert codec.decode_rows(array(ten)) == [((2**63 - 1, None), 3, 1)]


def test_a_message_it_declines_fails_with_the_codec_s_own_error():
    codec = CdcCodec(SCHEMA, framing="raw")
    good = codec.encode_updates([Update((1, "a"), 3, 1)])[0]
    with pytest.raises(DecodeError, match="leaves 1 of .. bytes unread"):
        codec.decode(good + b"\x00")
    with pytest.raises(DecodeError, match="does not decode with the schema"):
        codec.decode(good[:-3])
    bad_text = good.replace(b"a", b"\xff")
    with pytest.raises(DecodeError, match="does not decode with the schema"):
        codec.decode(bad_text)


def test_other_schema_ids_and_progress_take_the_usual_path():
    def writer_schemas(schema_id: int) -> dict:
        if schema_id != 7:
            raise SchemaError(f"no schema {schema_id}")
        return SCHEMA

    codec = CdcCodec(SCHEMA, framing="confluent", schema_id=7, writer_schemas=writer_schemas)
    progress = Progress((0,), (4,), ((3, 1),))
    assert codec.decode(codec.encode_progress(progress)) == progress
    value = codec.encode_updates([Update((1, "a"), 3, 1)])[0]
    assert codec.decode(value) == [Update((1, "a"), 3, 1)]
    with pytest.raises(DecodeError, match="schema id 8"):
        codec.decode(value[:1] + (8).to_bytes(4, "big") + value[5:])


def test_layouts_it_is_not_written_for_get_no_fast_decoder():
    def items(data_fields):
        return CdcCodec({"type": "record", "name": "data", "fields": data_fields}).union[0]["items"]

    assert compile_array_decoder(items([{"name": "x", "type": ["null", "int", "long"]}])) is None
    point = {"type": "record", "name": "point", "fields": [{"name": "x", "type": "long"}]}
    by_name = [{"name": "a", "type": point}, {"name": "b", "type": "point"}]
    assert compile_array_decoder(items(by_name)) is None
    custom = {"type": "long", "logicalType": "x-custom"}
    assert compile_array_decoder(items([{"name": "x", "type": custom}])) is None
    money = {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}
    listed = {"type": "array", "items": ["null", "string"]}
    layout = items([{"name": "m", "type": money}, {"name": "l", "type": listed}])
    assert compile_array_decoder(layout) is not None
    assert compile_column_decoder(layout) is not None  # the decimal as its unscaled integer
    inside = {"type": "array", "items": money}
    assert compile_column_decoder(items([{"name": "m", "type": inside}])) is None  # pickled
    assert compile_column_decoder(items([{"name": "l", "type": listed}])) is not None


DECIMALS = [
    {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2},
    ["null", {"type": "bytes", "logicalType": "decimal", "precision": 38, "scale": 10}],
    {"type": "fixed", "name": "money", "size": 16, "logicalType": "decimal", "precision": 4},
]


@pytest.mark.parametrize("money", DECIMALS, ids=["bytes", "nullable", "fixed"])
def test_a_top_level_decimal_crosses_by_column_as_fastavro_reads_it(money):
    """Sent as its unscaled integer and made a decimal again: the very value fastavro's reader
    gives (exponent included), a value with more digits than the precision rounded as fastavro
    rounds it."""
    fields = [{"name": "k", "type": "long"}, {"name": "m", "type": money}]
    codec = CdcCodec({"type": "record", "name": "data", "fields": fields}, framing="raw")
    decimals = dict(money[1] if isinstance(money, list) else money)
    size, scale = decimals.get("size"), decimals.get("scale", 0)
    unscaled = [0, 1, -1, 12345, -(10**8) + 1, 10**40 + 7, -(2**100)]
    if size is None:
        cells = [u.to_bytes(u.bit_length() // 8 + 1, "big", signed=True) for u in unscaled]
    else:
        cells = [u.to_bytes(size, "big", signed=True) for u in unscaled[:-2]]
    cells = [*cells, None] if isinstance(money, list) else cells
    body = b""
    for k, cell in enumerate(cells):
        value = b"" if cell is None else encode_zigzag_long(len(cell)) + cell
        if isinstance(money, list):
            value = (b"\x00" if cell is None else b"\x02") + value
        elif size is not None:
            value = cell
        body += encode_zigzag_long(k) + value + b"\x06\x02"
    message = array(encode_zigzag_long(len(cells)) + body)
    columns = codec.decode_columns(message)
    assert columns.__class__ is tuple  # by column
    sent = marshal.loads(marshal.dumps(columns))
    rows = codec.columns_to_rows(sent)
    expected = fastavro_verdict(codec, message)
    assert repr(rows) == repr(codec.decode_rows(message)) == repr(expected)
    assert rows[1][0][1] == decimal.Decimal(1).scaleb(-scale)


def test_decimals_the_column_decoder_does_not_take_go_as_rows():
    """A union inside a union, a precision past what `decimal` takes, and an unscaled integer
    of thousands of digits: rows, as fastavro reads them (or its error), never other values."""

    def codec_of(money):
        fields = [{"name": "m", "type": money}]
        return CdcCodec({"type": "record", "name": "data", "fields": fields}, framing="raw")

    inner = {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}
    nested = codec_of(["null", ["null", inner]])
    (message,) = nested.encode_updates([Update((decimal.Decimal("12.34"),), 0, 1)])
    assert compile_column_decoder(nested.union[0]["items"]) is None
    assert repr(nested.decode_columns(message)) == repr(nested.decode_rows(message))
    assert nested.decode_rows(message)[0][0] == (decimal.Decimal("12.34"),)

    huge = codec_of({"type": "bytes", "logicalType": "decimal", "precision": 2**63, "scale": 1})
    value = array(b"\x02" + encode_zigzag_long(2) + (1234).to_bytes(2, "big") + b"\x06\x02")
    with pytest.raises(DecodeError) as by_rows:  # fastavro's own verdict: not in a C ssize_t
        huge.decode_rows(value)
    with pytest.raises(DecodeError) as by_columns:
        huge.decode_columns(value)
    assert str(by_columns.value) == str(by_rows.value)

    digits = codec_of({"type": "bytes", "logicalType": "decimal", "precision": 5, "scale": 2})
    long_one = (10**3000).to_bytes(1300, "big", signed=True)
    value = array(b"\x02" + encode_zigzag_long(len(long_one)) + long_one + b"\x06\x02")
    assert digits.decode_columns(value).__class__ is not tuple  # left to fastavro: rows
    assert repr(digits.decode_columns(value)) == repr(fastavro_verdict(digits, value))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topics())
def test_columns_through_marshal_are_the_rows_again(topic):
    """What a decode worker sends: columns of plain values, made rows on the other side."""
    schema, updates = topic
    codec = CdcCodec(schema, framing="raw")
    for message in codec.encode_updates(updates):
        columns = codec.decode_columns(message)
        if columns.__class__ is not tuple:  # a decimal in an array, a ten-byte varint...: rows
            assert columns == codec.decode_rows(message)
            continue
        sent = marshal.loads(marshal.dumps(columns))  # plain values only: marshal takes them
        # repr: a decimal's exponent too (Decimal("1.2") == Decimal("1.20"))
        assert repr(codec.columns_to_rows(sent, nan=True)) == repr(codec.decode_rows(message))


def test_a_timestamp_out_of_python_s_range_is_the_codec_s_error_by_column_too():
    stamp = {"type": "long", "logicalType": "timestamp-micros"}
    schema = {"type": "record", "name": "data", "fields": [{"name": "at", "type": stamp}]}
    codec = CdcCodec(schema, framing="raw")
    too_late = (datetime.datetime.max - datetime.datetime(1970, 1, 1)) // datetime.timedelta(
        microseconds=1
    ) + 1
    value = b"\x00\x02" + encode_zigzag_long(too_late) + b"\x06\x02\x00"
    with pytest.raises(DecodeError):
        codec.decode_rows(value)
    with pytest.raises(DecodeError):
        codec.decode_columns(value)


def test_a_codec_travels_without_its_generated_code():
    """A codec goes by cloudpickle to a Spark Python data source's reader: its generated
    decoders (which do not pickle) stay behind and are made again where it lands."""
    money = {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}
    tags = {"type": "array", "items": ["null", "string"]}
    fields = [{"name": "m", "type": money}, {"name": "t", "type": tags}]
    codec = CdcCodec({"type": "record", "name": "data", "fields": fields})
    generated = [
        name
        for name, value in codec.__getstate__().items()
        if getattr(getattr(value, "__code__", None), "co_filename", "") == "<update decoder>"
        or type(value).__name__ == "ColumnDecoder"
    ]
    assert generated == []
    again = copy.deepcopy(codec)  # through __getstate__ and __setstate__, as pickle goes
    update = Update((decimal.Decimal("1.25"), ("a", None)), 3, 1)
    message = codec.encode_updates([update])[0]
    assert again.decode(message) == codec.decode(message) == [update]
    assert again.decode_columns(message) == codec.decode_columns(message)


POINT = {
    "type": "record",
    "name": "Point",
    "namespace": "geo",
    "fields": [{"name": "x", "type": "double"}],
}
NODE = {
    "type": "record",
    "name": "Node",
    "fields": [{"name": "label", "type": "string"}, {"name": "next", "type": ["null", "Node"]}],
}


@pytest.mark.parametrize(
    ("schema", "within", "floats"),
    [
        ("double", None, True),
        (["null", "float"], None, True),
        ({"type": "map", "values": {"type": "array", "items": "double"}}, None, True),
        (
            {"type": "record", "name": "r", "fields": [{"name": "double", "type": "long"}]},
            None,
            False,
        ),
        ({"type": "record", "name": "r", "fields": [{"name": "p", "type": POINT}]}, None, True),
        # a named type used where it is not defined: the schema it is part of defines it
        (
            "geo.Point",
            {"type": "record", "name": "r", "fields": [{"name": "a", "type": POINT}]},
            True,
        ),
        ("Point", {"type": "record", "name": "r", "fields": [{"name": "a", "type": POINT}]}, True),
        ("Unknown", None, False),
        (NODE, None, False),
        ({**NODE, "fields": [*NODE["fields"], {"name": "w", "type": "float"}]}, None, True),
    ],
)
def test_holds_floats_looks_through_named_types(schema, within, floats):
    assert holds_floats(schema, within) is floats


def test_a_codec_knows_a_float_behind_a_named_type():
    data = {
        "type": "record",
        "name": "row",
        "fields": [{"name": "a", "type": POINT}, {"name": "b", "type": "geo.Point"}],
    }
    assert CdcCodec(data).has_floats
    assert not CdcCodec(
        {"type": "record", "name": "row", "fields": [{"name": "double", "type": "long"}]}
    ).has_floats
