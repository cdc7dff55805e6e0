"""Decoded values as text: the Avro-JSON notation of ``tail``, the plain JSON of
``verify --output``, and a total order for sorting data (`sort_key_of`). Pure: the standard
library and `cdc_emitter.protocol.schemas`."""

from __future__ import annotations

import base64
import datetime
import decimal
import math
from typing import Any

from cdc_emitter.errors import DecodeError
from cdc_emitter.protocol.schemas import kind, resolve

__all__ = ["avro_json", "map_items", "plain_json", "sort_key_of"]


def map_items(v: Any) -> Any:
    """A map value's ``(key, value)`` pairs: a dict's items, or the list of pairs itself."""
    return v.items() if isinstance(v, dict) else v


def sort_key_of(v: Any) -> Any:
    """Recursive total-order key: values are grouped by kind, then compared within the kind."""
    if v is None:
        return (0,)
    if isinstance(v, bool):
        return (1, v)
    if isinstance(v, (int, float, decimal.Decimal)):
        return (2, v) if v == v else (3,)  # NaN sorts after every number
    if isinstance(v, str):
        return (4, v)
    if isinstance(v, (bytes, bytearray)):
        return (5, bytes(v))
    if isinstance(v, datetime.datetime):
        return (
            7,
            v.timestamp() if v.tzinfo else v.replace(tzinfo=datetime.timezone.utc).timestamp(),
        )
    if isinstance(v, datetime.date):
        return (6, v.toordinal())
    if isinstance(v, (tuple, list)):
        return (8, tuple(map(sort_key_of, v)))
    if isinstance(v, dict):
        return (9, tuple(sorted((sort_key_of(k), sort_key_of(x)) for k, x in v.items())))
    return (10, type(v).__name__, repr(v))


def _type_name(schema: Any) -> str:
    if isinstance(schema, str):
        return schema
    if schema["type"] in ("record", "enum", "fixed"):
        return schema["name"]
    return schema["type"]


def _branch(schemas: list, value: Any, named: dict) -> Any:
    """The union branch a (raw) decoded value belongs to."""
    want = {
        bool: ("boolean",),
        int: ("int", "long"),
        float: ("double", "float"),
        str: ("string", "enum"),
        bytes: ("bytes", "fixed"),
        list: ("array",),
        dict: ("record", "map"),
    }.get(type(value), ())
    for s in schemas:
        r = resolve(s, named)
        if kind(r) in want:
            return s
    raise DecodeError(f"no union branch matches value {value!r}")


def avro_json(schema: Any, value: Any, named: dict) -> Any:
    """A raw (logical types stripped) decoded value in Avro-JSON notation."""
    if isinstance(schema, list):
        if value is None:
            return None
        s = _branch([b for b in schema if b != "null"], value, named)
        return {_type_name(s): avro_json(s, value, named)}
    schema = resolve(schema, named)
    t = kind(schema)
    if t == "record":
        return {f["name"]: avro_json(f["type"], value[f["name"]], named) for f in schema["fields"]}
    if t == "array":
        return [avro_json(schema["items"], v, named) for v in value]
    if t == "map":
        return {k: avro_json(schema["values"], v, named) for k, v in value.items()}
    if t in ("bytes", "fixed"):
        return value.decode("iso-8859-1")
    return value


def plain_json(schema: Any, value: Any, named: dict) -> Any:
    """A decoded (hashable) value as plain JSON: records dicts, unions unwrapped."""
    if value is None:
        return None
    if isinstance(schema, list):
        live = [b for b in schema if b != "null"]
        if len(live) == 1:
            return plain_json(live[0], value, named)
        return _plain_value(value)
    schema = resolve(schema, named)
    t = kind(schema)
    if t == "record":
        fields = schema["fields"]
        if isinstance(value, dict):
            value = [value.get(f["name"]) for f in fields]
        return {f["name"]: plain_json(f["type"], v, named) for f, v in zip(fields, value)}
    if t == "array":
        return [plain_json(schema["items"], v, named) for v in value]
    if t == "map":
        return {k: plain_json(schema["values"], v, named) for k, v in map_items(value)}
    return _plain_value(value)


def _plain_value(v: Any) -> Any:
    if v.__class__ is float:
        if v != v:
            return "NaN"  # JSON has no NaN or infinities: the names Spark and JavaScript print
        if v in (math.inf, -math.inf):
            return "Infinity" if v > 0 else "-Infinity"
        return v
    if isinstance(v, (bytes, bytearray)):
        return base64.b64encode(v).decode("ascii")
    if isinstance(v, decimal.Decimal):
        return format(v, "f")  # plain notation: 0E-10 prints 0.0000000000
    if isinstance(v, (datetime.date, datetime.time)):
        return v.isoformat()
    if isinstance(v, (tuple, list)):
        return [_plain_value(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain_value(x) for k, x in v.items()}
    return v
