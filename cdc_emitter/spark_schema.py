"""Spark types → the Avro ``data`` record of the CDCv2 update schema (DESIGN §2).

Imports only ``pyspark.sql.types`` (no session needed). The mapping:

==========================  =====================================================
Spark                       Avro
==========================  =====================================================
long                        ``long``
int, short, byte            ``int``
double / float              ``double`` / ``float``
boolean                     ``boolean``
string (char, varchar)      ``string``
binary                      ``bytes``
decimal(p, s)               ``bytes`` with ``logicalType: decimal`` (precision, scale)
date                        ``int`` with ``logicalType: date``
timestamp                   ``long`` with ``logicalType: timestamp-micros``
timestamp_ntz               ``long`` with ``logicalType: local-timestamp-micros``
array<T>                    ``array`` of T
map<string, T>              ``map`` of T
struct<...>                 a ``record`` (name derived from the column path, unique)
==========================  =====================================================

A nullable column (or array element, map value, struct field) becomes ``["null", T]`` — null
first, as Materialize and the reference documentation write it. Anything else (intervals,
maps with non-string keys, variant, null type, user-defined types…) raises
:class:`~cdc_emitter.errors.SchemaError` naming the column by its dotted path and its type, so
a sink fails before anything is written.
"""

from __future__ import annotations

import re
from typing import Any

from pyspark.sql import types as T

from .errors import SchemaError

__all__ = ["data_schema", "avro_type", "check_supported", "contains_map"]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def data_schema(struct: T.StructType, *, name: str = "data") -> dict[str, Any]:
    """The Avro ``data`` record for the data columns ``struct`` (in column order).

    The record has no namespace, so it inherits ``com.materialize.cdc`` from the enclosing
    ``update`` record, as in the reference schema. Nested records are named after their
    column path (``data_address``, ``data_items_element``…), made unique if needed.
    """
    if not isinstance(struct, T.StructType):
        raise SchemaError(f"the data columns must be a StructType, got {struct!r}")
    if not struct.fields:
        raise SchemaError("a changefeed needs at least one data column")
    names: set[str] = {name, "update", "progress", "counts"}
    return _record(struct, name, [], names)


def check_supported(struct: T.StructType) -> None:
    """Raise :class:`SchemaError` if any column has no Avro mapping."""
    data_schema(struct)


def avro_type(dtype: T.DataType, nullable: bool = True, path: str = "value") -> Any:
    """The Avro type of one Spark type (records named after ``path``)."""
    names: set[str] = {"data", "update", "progress", "counts"}
    return _type(dtype, nullable, path.split("."), names)


def contains_map(dtype: T.DataType) -> bool:
    """True when ``dtype`` is or contains a map (maps cannot be grouped on directly in Spark)."""
    if isinstance(dtype, T.MapType):
        return True
    if isinstance(dtype, T.ArrayType):
        return contains_map(dtype.elementType)
    if isinstance(dtype, T.StructType):
        return any(contains_map(f.dataType) for f in dtype.fields)
    return False


def _unique(base: str, names: set[str]) -> str:
    candidate, i = base, 2
    while candidate in names:
        candidate = f"{base}_{i}"
        i += 1
    names.add(candidate)
    return candidate


def _record(struct: T.StructType, name: str, path: list[str], names: set[str]) -> dict[str, Any]:
    fields = []
    seen: set[str] = set()
    for field in struct.fields:
        where = path + [field.name]
        if not _NAME.match(field.name):
            raise SchemaError(
                f"column {'.'.join(where)!r} is not a valid Avro field name "
                "(letters, digits and _ only, not starting with a digit): rename it"
            )
        if field.name in seen:
            raise SchemaError(f"column {'.'.join(where)!r} appears twice")
        seen.add(field.name)
        fields.append({"name": field.name, "type": _type(field.dataType, field.nullable, where, names)})
    return {"type": "record", "name": name, "fields": fields}


def _type(dtype: T.DataType, nullable: bool, path: list[str], names: set[str]) -> Any:
    base = _base(dtype, path, names)
    return ["null", base] if nullable else base


def _base(dtype: T.DataType, path: list[str], names: set[str]) -> Any:
    # Order matters: check subclasses before the generic cases.
    if isinstance(dtype, T.LongType):
        return "long"
    if isinstance(dtype, (T.IntegerType, T.ShortType, T.ByteType)):
        return "int"
    if isinstance(dtype, T.DoubleType):
        return "double"
    if isinstance(dtype, T.FloatType):
        return "float"
    if isinstance(dtype, T.BooleanType):
        return "boolean"
    if isinstance(dtype, (T.StringType, T.CharType, T.VarcharType)):
        return "string"
    if isinstance(dtype, T.BinaryType):
        return "bytes"
    if isinstance(dtype, T.DecimalType):
        return {"type": "bytes", "logicalType": "decimal", "precision": dtype.precision, "scale": dtype.scale}
    if isinstance(dtype, T.DateType):
        return {"type": "int", "logicalType": "date"}
    if isinstance(dtype, T.TimestampNTZType):
        return {"type": "long", "logicalType": "local-timestamp-micros"}
    if isinstance(dtype, T.TimestampType):
        return {"type": "long", "logicalType": "timestamp-micros"}
    if isinstance(dtype, T.ArrayType):
        return {"type": "array", "items": _type(dtype.elementType, dtype.containsNull, path + ["element"], names)}
    if isinstance(dtype, T.MapType):
        if not isinstance(dtype.keyType, (T.StringType, T.CharType, T.VarcharType)):
            raise SchemaError(
                f"column {'.'.join(path)!r} has type {dtype.simpleString()}: Avro maps need string "
                "keys; cast the keys to string or turn the map into an array of structs"
            )
        return {"type": "map", "values": _type(dtype.valueType, dtype.valueContainsNull, path + ["value"], names)}
    if isinstance(dtype, T.StructType):
        if not dtype.fields:
            raise SchemaError(f"column {'.'.join(path)!r} is an empty struct, which Avro cannot hold")
        name = _unique("_".join(["data"] + [re.sub(r"[^A-Za-z0-9_]", "_", p) for p in path]), names)
        return _record(dtype, name, path, names)
    raise SchemaError(
        f"column {'.'.join(path)!r} has type {dtype.simpleString()}, which has no Avro mapping in "
        "the CDC format; cast it (e.g. to string or long) or drop it"
    )
