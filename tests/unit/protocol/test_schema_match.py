"""`column_differences`: whether a schema given by hand reads what a topic was written with."""

from __future__ import annotations

import io

import fastavro
import pytest

from cdc_emitter.protocol.schema_match import (
    column_differences,
    decoding_form,
    short_type_text,
)


def record(*fields, name="data", **extra):
    return {"type": "record", "name": name, **extra, "fields": [dict(f) for f in fields]}


def field(name, kind, **extra):
    return {"name": name, "type": kind, **extra}


PRODUCTS = record(field("id", "long"), field("price", ["null", "int"]))


def test_the_same_schema_has_no_differences():
    assert column_differences(PRODUCTS, PRODUCTS) == []


def test_what_does_not_change_decoding_is_ignored():
    dressed = record(
        field("id", {"type": "long"}, doc="the key"),
        field("price", ["null", "int"], default=None, aliases=["cost"]),
        name="products",
        namespace="shop",
        doc="a product",
    )
    assert column_differences(dressed, PRODUCTS) == []


def test_nullability_is_named_with_both_types():
    given = record(field("id", "long"), field("price", "int"))
    assert column_differences(given, PRODUCTS) == [
        """column 'price' is "int" in the file but ["null","int"] in the topic"""
    ]
    # and the other way round: a column made nullable does not read non-null bytes either
    assert column_differences(PRODUCTS, given) == [
        """column 'price' is ["null","int"] in the file but "int" in the topic"""
    ]


def test_the_order_of_a_union_s_branches_counts():
    given = record(field("id", "long"), field("price", ["int", "null"]))
    assert column_differences(given, PRODUCTS) == [
        """column 'price' is ["int","null"] in the file but ["null","int"] in the topic"""
    ]


def test_another_type():
    given = record(field("id", "int"), field("price", ["null", "int"]))
    assert column_differences(given, PRODUCTS) == [
        """column 'id' is "int" in the file but "long" in the topic"""
    ]


def test_missing_and_extra_columns():
    given = record(field("id", "long"), field("name", "string"))
    assert column_differences(given, PRODUCTS) == [
        "column 'price' is in the topic but not in the file",
        "column 'name' is in the file but not in the topic",
    ]


def test_a_subset_of_the_columns_differs():
    # Avro's resolution would read it; a reader without writer schemas per message would not
    given = record(field("id", "long"))
    assert column_differences(given, PRODUCTS) == [
        "column 'price' is in the topic but not in the file"
    ]


def test_another_order():
    given = record(field("price", ["null", "int"]), field("id", "long"))
    assert column_differences(given, PRODUCTS) == [
        "the columns are in another order: price, id in the file but id, price in the topic"
    ]


def test_the_labels_can_be_chosen():
    given = record(field("id", "int"), field("price", ["null", "int"]))
    assert column_differences(given, PRODUCTS, given_is="a.avsc", writer_is="t") == [
        """column 'id' is "int" in a.avsc but "long" in t"""
    ]


def test_logical_types_count():
    micros = record(field("at", {"type": "long", "logicalType": "timestamp-micros"}))
    millis = record(field("at", {"type": "long", "logicalType": "timestamp-millis"}))
    assert column_differences(micros, millis) == [
        'column \'at\' is {"type":"long","logicalType":"timestamp-micros"} in the file but '
        '{"type":"long","logicalType":"timestamp-millis"} in the topic'
    ]
    scale2 = record(
        field("x", {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2})
    )
    scale4 = record(
        field("x", {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 4})
    )
    assert len(column_differences(scale2, scale4)) == 1
    assert column_differences(scale2, scale2) == []


def test_names_of_nested_types_do_not_count_but_their_fields_do():
    inner = {"type": "record", "name": "a", "fields": [field("x", "int")]}
    renamed = {"type": "record", "name": "b", "namespace": "n", "fields": [field("x", "int")]}
    assert column_differences(record(field("r", renamed)), record(field("r", inner))) == []
    other = {"type": "record", "name": "a", "fields": [field("x", "long")]}
    assert column_differences(record(field("r", other)), record(field("r", inner))) == [
        'column \'r\' is {"type":"record","name":"a","fields":[{"name":"x","type":"long"}]} '
        'in the file but {"type":"record","name":"a","fields":[{"name":"x","type":"int"}]} '
        "in the topic"
    ]


def test_a_named_type_used_again_compares_as_its_definition():
    point = {"type": "record", "name": "point", "fields": [field("x", "int")]}
    written = record(field("a", point), field("b", point))
    given = record(field("a", point), field("b", "point"))
    assert column_differences(given, written) == []
    other = {"type": "record", "name": "point", "fields": [field("x", "long")]}
    # the same text "point", defined otherwise: the definitions are shown
    differences = column_differences(record(field("a", other), field("b", "point")), given)
    assert differences[1] == (
        """column 'b' is {"type":"record","fields":[["x","long"]]} in the file but """
        """{"type":"record","fields":[["x","int"]]} in the topic"""
    )


def test_enums_and_fixed_and_containers():
    written = record(
        field("e", {"type": "enum", "name": "e", "symbols": ["A", "B"]}),
        field("f", {"type": "fixed", "name": "f", "size": 4}),
        field("m", {"type": "map", "values": ["null", "string"]}),
        field("a", {"type": "array", "items": "double"}),
    )
    assert column_differences(written, written) == []
    swapped = record(
        field("e", {"type": "enum", "name": "e", "symbols": ["B", "A"]}),
        field("f", {"type": "fixed", "name": "f", "size": 8}),
        field("m", {"type": "map", "values": "string"}),
        field("a", {"type": "array", "items": "float"}),
    )
    assert [d.split(" is ")[0] for d in column_differences(swapped, written)] == [
        "column 'e'",
        "column 'f'",
        "column 'm'",
        "column 'a'",
    ]


def test_a_recursive_type_does_not_loop():
    node = {
        "type": "record",
        "name": "node",
        "fields": [field("v", "int"), field("next", ["null", "node"])],
    }
    assert decoding_form(node) == {
        "type": "record",
        "fields": [["v", "int"], ["next", ["null", {"ref": "node"}]]],
    }
    assert column_differences(record(field("n", node)), record(field("n", node))) == []


def test_long_type_texts_are_cut():
    assert short_type_text("int") == '"int"'
    wide = {"type": "record", "name": "r", "fields": [field(f"c{i}", "long") for i in range(20)]}
    text = short_type_text(wide)
    assert len(text) == 80 and text.endswith("...")
    given = record(field("r", wide))
    written = record(field("r", {**wide, "fields": wide["fields"][:-1]}))
    (difference,) = column_differences(given, written)
    assert len(difference) < 2 * 80 + 60


@pytest.mark.parametrize(
    "given",
    [
        record(field("id", {"type": "long"}, doc="d"), field("price", ["null", "int"])),
        record(field("id", "long"), field("price", ["null", {"type": "int"}]), name="x"),
    ],
)
def test_a_schema_without_differences_decodes_the_written_bytes_alike(given):
    """What is accepted reads the writer's bytes, without resolution, to the same values."""
    datum = {"id": 7, "price": 12}
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(PRODUCTS), datum)
    assert column_differences(given, PRODUCTS) == []
    read = fastavro.schemaless_reader(io.BytesIO(buf.getvalue()), fastavro.parse_schema(given))
    assert read == datum
