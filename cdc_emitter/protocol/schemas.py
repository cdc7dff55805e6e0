"""The documented CDCv2 Avro schemas, and small helpers on Avro types. Pure: fastavro and the
standard library.

`union_schema` makes the documented top-level union ``[update array, progress]`` for a data
record; `data_schema_from_text` takes either that union or the record alone;
`schema_differences` names how two data records differ, column by column.
"""

from __future__ import annotations

import json
from typing import Any, Literal

import fastavro

from cdc_emitter.errors import SchemaError

__all__ = [
    "FRAMINGS",
    "NAMESPACE",
    "PRIMITIVES",
    "Framing",
    "data_schema_from_text",
    "kind",
    "resolve",
    "schema_differences",
    "type_text",
    "union_schema",
]

NAMESPACE = "com.materialize.cdc"
#: How a message's value starts: a Confluent header (magic byte, schema id) or nothing.
Framing = Literal["confluent", "raw"]
FRAMINGS: tuple[Framing, ...] = ("confluent", "raw")
PRIMITIVES = frozenset(("null", "boolean", "int", "long", "float", "double", "bytes", "string"))
_LONG_ARRAY = {"type": "array", "items": "long"}


def _progress_schema() -> dict:
    return {
        "type": "record",
        "name": "progress",
        "namespace": NAMESPACE,
        "fields": [
            {"name": "lower", "type": dict(_LONG_ARRAY)},
            {"name": "upper", "type": dict(_LONG_ARRAY)},
            {
                "name": "counts",
                "type": {
                    "type": "array",
                    "items": {
                        "type": "record",
                        "name": "counts",
                        "fields": [
                            {"name": "time", "type": "long"},
                            {"name": "count", "type": "long"},
                        ],
                    },
                },
            },
        ],
    }


def _data_record(data_schema: Any) -> dict:
    if not isinstance(data_schema, dict) or data_schema.get("type") != "record":
        raise SchemaError(
            f"the data schema must be an Avro record, got {json.dumps(data_schema)[:200]}"
        )
    if not isinstance(data_schema.get("fields"), list):
        raise SchemaError("the data record schema needs a list of 'fields'")
    rest = {k: v for k, v in data_schema.items() if k not in ("type", "name", "namespace")}
    return {"type": "record", "name": "data", **rest}


def union_schema(data_schema: dict) -> list:
    """The full top-level CDC union for ``data_schema`` (an Avro record), as documented.

    The record is renamed ``data`` (full name ``com.materialize.cdc.data``), its fields kept.
    Raises `SchemaError` if the result is not a valid Avro schema.
    """
    update = {
        "type": "record",
        "name": "update",
        "namespace": NAMESPACE,
        "fields": [
            {"name": "data", "type": _data_record(data_schema)},
            {"name": "time", "type": "long"},
            {"name": "diff", "type": "long"},
        ],
    }
    union = [{"type": "array", "items": update}, _progress_schema()]
    try:
        fastavro.parse_schema(union)
    except Exception as exc:  # fastavro raises several types for malformed schemas
        raise SchemaError(f"invalid Avro data schema: {exc}") from None
    return union


def data_schema_from_text(text: str) -> dict:
    """The data record schema from either the full documented union schema or the record alone."""
    try:
        schema = json.loads(text)
    except ValueError as exc:
        raise SchemaError(f"the schema is not valid JSON: {exc}") from None
    if isinstance(schema, list):
        data = None
        for branch in schema:
            items = (
                branch.get("items")
                if isinstance(branch, dict) and branch.get("type") == "array"
                else None
            )
            if isinstance(items, dict) and items.get("name") in ("update", f"{NAMESPACE}.update"):
                fields = items.get("fields") or [{}]
                if (
                    isinstance(fields, list)
                    and isinstance(fields[0], dict)
                    and fields[0].get("name") == "data"
                ):
                    data = fields[0].get("type")
        if data is None:
            raise SchemaError(
                "the union schema has no update array branch "
                '({"type": "array", "items": {"name": "update", fields data, time, diff}})'
            )
        if not isinstance(data, dict) or data.get("type") != "record":
            raise SchemaError("the 'data' field of the update record must be a record")
        expected = union_schema(data)
        try:
            same = fastavro.schema.to_parsing_canonical_form(schema) == (
                fastavro.schema.to_parsing_canonical_form(expected)
            )
        except Exception as exc:
            raise SchemaError(f"invalid Avro union schema: {exc}") from None
        if not same:
            raise SchemaError(
                "the union schema differs from the documented Materialize CDC schema "
                "(branches [update array, progress], field names and order as documented)"
            )
        return data
    if isinstance(schema, dict) and schema.get("type") == "record":
        if schema.get("name") in (
            "progress",
            "update",
            f"{NAMESPACE}.progress",
            f"{NAMESPACE}.update",
        ):
            raise SchemaError(
                f"expected the data record or the full union, got the {schema['name']} record"
            )
        union_schema(schema)  # validates
        return schema
    raise SchemaError("the schema must be the full CDC union (a JSON array) or the data record")


def schema_differences(topic: dict, batch: dict) -> list[str]:
    """How the data record ``batch`` differs from ``topic`` (the one a topic was written with),
    one phrase per column, nullability included; empty when they are the same schema."""
    if json.dumps(topic, sort_keys=True) == json.dumps(batch, sort_keys=True):
        return []
    old = {f["name"]: f["type"] for f in topic.get("fields", [])}
    new = {f["name"]: f["type"] for f in batch.get("fields", [])}
    out = []
    for name, kind in old.items():
        if name not in new:
            out.append(f"column {name} ({type_text(kind)}) is in the topic, not in this batch")
        elif json.dumps(kind, sort_keys=True) != json.dumps(new[name], sort_keys=True):
            was, now = type_text(kind), type_text(new[name])
            if was == now:  # the same outline: the difference is deeper (nested fields)
                was, now = json.dumps(kind, sort_keys=True), json.dumps(new[name], sort_keys=True)
            out.append(f"column {name} is {was} in the topic, {now} in this batch")
    out.extend(
        f"column {name} ({type_text(kind)}) is new in this batch"
        for name, kind in new.items()
        if name not in old
    )
    if not out:
        out.append(
            f"the columns are in another order: {', '.join(old)} in the topic, "
            f"{', '.join(new)} in this batch"
        )
    return out


def resolve(schema: Any, named: dict) -> Any:
    """``schema`` with its names followed: a parsed Avro type (a primitive's name, a union's
    list or a type's dict), given ``named``, the named types ``fastavro.parse_schema`` filled."""
    while isinstance(schema, str) and schema not in PRIMITIVES:
        schema = named[schema]
    return schema


def kind(schema: Any) -> str:
    """The kind of a resolved, non-union Avro type: a primitive's name (``long``) or a complex
    type's (``record``, ``array``, ``map``, ``enum``, ``fixed``)."""
    return schema if isinstance(schema, str) else schema["type"]


def type_text(schema: Any) -> str:
    """A short text for an Avro field type: ``long``, ``long?`` (nullable), ``record``...

    Nullable is marked because it changes the bytes: ``["null", "long"]`` writes a union index
    before every value, so data written as ``long`` does not read as ``long?`` or back."""
    if isinstance(schema, list):
        live = [b for b in schema if b != "null"]
        text = type_text(live[0]) if len(live) == 1 else "union"
        return text + "?" if "null" in schema else text
    if isinstance(schema, dict):
        return schema.get("logicalType") or schema["type"]
    return schema.rsplit(".", 1)[-1]
