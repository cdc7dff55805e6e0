"""The schema registry's pure parts: URLs and messages without secrets, the registered text, and
the codec reading messages framed with other schema ids (no registry, no broker)."""

from __future__ import annotations

import json

import pytest

from cdc_emitter.errors import DecodeError, SchemaError
from cdc_emitter.kafka.registry import (
    SchemaRegistry,
    _no_secrets,
    safe_url,
    schema_text_of,
    subject_for,
)
from cdc_emitter.protocol import Progress, Update
from cdc_emitter.protocol.codec import CdcCodec
from cdc_emitter.protocol.materialize import create_source_sql

V1 = {
    "type": "record",
    "name": "data",
    "fields": [{"name": "id", "type": "long"}, {"name": "price", "type": ["null", "int"]}],
}
V2 = {
    "type": "record",
    "name": "data",
    "fields": [*V1["fields"], {"name": "name", "type": ["null", "string"], "default": None}],
}


def test_subject_and_urls_without_credentials():
    assert subject_for("orders") == "orders-value"
    assert (
        safe_url("https://user:pa55@registry.example:8081/apis/ccompat/v6")
        == "https://registry.example:8081/apis/ccompat/v6"
    )
    assert safe_url("http://127.0.0.1:8081") == "http://127.0.0.1:8081"
    registry = SchemaRegistry(
        "https://user:pa55@registry.example", {"basic.auth.user.info": "user:s3cr3t"}
    )
    assert repr(registry) == "SchemaRegistry('https://registry.example')"
    assert "s3cr3t" not in repr(registry) and "pa55" not in repr(registry)
    assert registry.where == "schema registry https://registry.example"


def test_secret_values_are_blanked_in_messages():
    config = {
        "basic.auth.user.info": "alice:s3cr3t-pw",
        "bearer.auth.token": "tok-123456",
        "ssl.ca.location": "/etc/ca.pem",
    }
    text = _no_secrets("401 for alice:s3cr3t-pw, token tok-123456, ca /etc/ca.pem", config)
    assert text == "401 for ***, token ***, ca /etc/ca.pem"
    assert "s3cr3t-pw" not in _no_secrets("bad password s3cr3t-pw", config)


def test_the_registered_text_is_the_union_with_defaults_for_nullable_columns():
    union = json.loads(schema_text_of(V1))
    fields = union[0]["items"]["fields"][0]["type"]["fields"]
    assert fields == [
        {"name": "id", "type": "long"},
        {"name": "price", "type": ["null", "int"], "default": None},
    ]
    assert union[1]["name"] == "progress"
    assert ":" in schema_text_of(V1) and " " not in schema_text_of(V1)  # compact


def test_messages_of_an_older_schema_id_resolve_into_the_newer_schema():
    old = CdcCodec(V1, schema_id=1)
    new = CdcCodec(V2, schema_id=2, writer_schemas={1: V1}.__getitem__)
    updates = old.encode_updates([Update((5, 10), 3, 1), Update((6, None), 3, -1)])
    assert [u for m in updates for u in new.decode(m)] == [
        Update((5, 10, None), 3, 1),
        Update((6, None, None), 3, -1),
    ]
    assert new.decode(old.encode_progress(Progress((0,), (4,), ((3, 2),)))) == Progress(
        (0,), (4,), ((3, 2),)
    )
    own = new.encode_updates([Update((7, 1, "x"), 4, 1)])
    assert new.decode(own[0]) == [Update((7, 1, "x"), 4, 1)]


def test_an_unknown_schema_id_is_a_decode_error_naming_it():
    def lookup(schema_id):
        raise SchemaError(f"schema registry http://r has no schema id {schema_id} (HTTP 404)")

    reader = CdcCodec(V2, schema_id=2, writer_schemas=lookup)
    message = CdcCodec(V1, schema_id=9).encode_updates([Update((1, 1), 0, 1)])[0]
    with pytest.raises(
        DecodeError, match=r"schema id 9: schema registry http://r has no schema id 9"
    ):
        reader.decode(message)
    # without writer schemas, every message is read with the codec's own schema, as before
    assert CdcCodec(V1, schema_id=2).decode(message) == [Update((1, 1), 0, 1)]


def test_materialize_statement_with_a_registry():
    union = json.loads(schema_text_of(V1))
    assert create_source_sql(
        "orders", "kafka:9092", "orders", union, "https://registry.example"
    ) == (
        "CREATE SOURCE orders\n"
        "FROM KAFKA BROKER 'kafka:9092' TOPIC 'orders'\n"
        "FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY 'https://registry.example'\n"
        "ENVELOPE MATERIALIZE;"
    )
