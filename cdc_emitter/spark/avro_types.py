"""The Avro ``data`` record of a CDCv2 topic → Spark types, and its decoded values → Spark's.

The inverse of `cdc_emitter.spark.schema` for what that module writes (and the primitive and
logical types another writer may use): ``long`` → bigint, ``int`` → int, ``float``/``double``,
``boolean``, ``string`` (and ``enum``) → string, ``bytes`` (and ``fixed``) → binary, ``decimal``
→ decimal(p, s), ``date``, ``timestamp-millis/micros`` → timestamp,
``local-timestamp-millis/micros`` → timestamp_ntz, ``array``, ``map`` (string keys), ``record``
→ struct. ``["null", T]`` is a nullable T. Other unions raise `SchemaError`.

Imports only ``pyspark.sql.types``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyspark.sql import types as T

from cdc_emitter.errors import SchemaError

__all__ = ["row_converter", "spark_struct"]

_PRIMITIVE = {
    "long": T.LongType(),
    "int": T.IntegerType(),
    "float": T.FloatType(),
    "double": T.DoubleType(),
    "boolean": T.BooleanType(),
    "string": T.StringType(),
    "bytes": T.BinaryType(),
}
#: How deep records may nest (deeper: a recursive record, which Spark cannot type).
_MAX_DEPTH = 64

_LOGICAL = {
    "date": T.DateType(),
    "timestamp-millis": T.TimestampType(),
    "timestamp-micros": T.TimestampType(),
    "local-timestamp-millis": T.TimestampNTZType(),
    "local-timestamp-micros": T.TimestampNTZType(),
}


def _register(schema: dict, named: dict[str, Any], namespace: str | None = None) -> None:
    """Remember a named type under its short and its full name (``ns.Name``)."""
    name = schema["name"]
    space = schema.get("namespace", namespace)
    named[name.rsplit(".", 1)[-1]] = schema
    named[name if "." in name or not space else f"{space}.{name}"] = schema


def spark_struct(record: dict) -> T.StructType:
    """The Spark struct of the Avro ``data`` record (its fields in order).

    Raises:
        SchemaError: A field's type has no Spark counterpart here (a union of two non-null
            types), naming the field by its dotted path.
    """
    return _struct(record, [], {})


def row_converter(record: dict) -> Callable[[tuple], tuple]:
    """How a decoded data tuple (`cdc_emitter.protocol.codec.CdcCodec`'s: records and arrays as
    tuples, maps as sorted ``(key, value)`` pairs) becomes the value of `spark_struct`'s row:
    arrays become lists and maps dicts; everything else is already what Spark takes."""
    conv = _converter(record, {})
    return conv if conv is not None else (lambda v: v)


def _struct(record: dict, path: list[str], named: dict[str, Any]) -> T.StructType:
    if len(path) > _MAX_DEPTH:
        raise SchemaError(
            f"column {'.'.join(path[:3])}... nests records deeper than {_MAX_DEPTH} levels (a "
            "recursive record?), which Spark types cannot hold"
        )
    _register(record, named)
    fields = []
    for field in record["fields"]:
        dtype, nullable = _type(field["type"], [*path, field["name"]], named)
        fields.append(T.StructField(field["name"], dtype, nullable))
    return T.StructType(fields)


def _type(schema: Any, path: list[str], named: dict[str, Any]) -> tuple[T.DataType, bool]:
    """The Spark type of ``schema`` and whether it is nullable."""
    if isinstance(schema, list):
        others = [b for b in schema if b != "null"]
        if len(others) != 1:
            raise SchemaError(
                f"column {'.'.join(path)!r} is an Avro union of {len(others)} types other than "
                "null, which has no Spark type: read the topic with read_cdc instead"
            )
        return _type(others[0], path, named)[0], len(others) < len(schema)
    if isinstance(schema, str):
        if schema in _PRIMITIVE:
            return _PRIMITIVE[schema], False
        if schema in named:
            return _type(named[schema], path, named)
        raise SchemaError(f"column {'.'.join(path)!r} has the unknown Avro type {schema!r}")
    kind, logical = schema.get("type"), schema.get("logicalType")
    if kind in ("enum", "fixed"):
        _register(schema, named)
    if logical == "decimal":
        return T.DecimalType(schema["precision"], schema.get("scale", 0)), False
    if logical in ("time-millis", "time-micros"):
        raise SchemaError(
            f"column {'.'.join(path)!r} is an Avro {logical}, which has no Spark type here: "
            "write it as a long (or a string) instead"
        )
    if logical in _LOGICAL:
        return _LOGICAL[logical], False
    if kind == "record":
        return _struct(schema, path, named), False
    if kind == "array":
        item, nullable = _type(schema["items"], [*path, "element"], named)
        return T.ArrayType(item, nullable), False
    if kind == "map":
        value, nullable = _type(schema["values"], [*path, "value"], named)
        return T.MapType(T.StringType(), value, nullable), False
    if kind == "enum":
        return T.StringType(), False
    if kind == "fixed":
        return T.BinaryType(), False
    return _type(kind, path, named)  # {"type": "long"} and the like


#: The key of ``named`` under which `_converter` keeps the names it is converting.
_BUILDING = " building"


def _converter(schema: Any, named: dict[str, Any]) -> Callable[[Any], Any] | None:
    """None where the decoded value is Spark's already."""
    if isinstance(schema, list):
        others = [b for b in schema if b != "null"]
        conv = _converter(others[0], named) if len(others) == 1 else None
        return None if conv is None else (lambda v: None if v is None else conv(v))
    if isinstance(schema, str):
        # a reference back to a record being converted (a recursive record, which
        # `spark_struct` refuses anyway) converts nothing more
        if schema not in named or schema in named.get(_BUILDING, ()):
            return None
        named[_BUILDING] = (*named.get(_BUILDING, ()), schema)
        try:
            return _converter(named[schema], named)
        finally:
            named[_BUILDING] = named[_BUILDING][:-1]
    kind = schema.get("type")
    if schema.get("logicalType") == "uuid":  # fastavro gives a UUID object
        return str
    if kind in ("record", "enum", "fixed"):
        _register(schema, named)
    if kind == "record":
        convs = [_converter(f["type"], named) for f in schema["fields"]]
        if not any(convs):
            return None
        pairs = list(enumerate(convs))
        return lambda v: tuple(v[i] if c is None else c(v[i]) for i, c in pairs)
    if kind == "array":  # Spark takes lists, not the codec's tuples
        item = _converter(schema["items"], named)
        return list if item is None else (lambda v: [item(x) for x in v])
    if kind == "map":
        value = _converter(schema["values"], named)
        if value is None:
            return dict
        return lambda v: {k: value(x) for k, x in v}
    return None
