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
`SchemaError` naming the column by its dotted path and its type, so
a sink fails before anything is written.
"""

from __future__ import annotations

import re
from typing import Any

from pyspark.sql import types as T

from cdc_emitter.errors import SchemaError

__all__ = [
    "data_schema",
    "avro_type",
    "check_supported",
    "contains_map",
    "contains_type",
    "without_collation",
    "parse_ddl_columns",
    "DdlUnknown",
]

# the DDL parser lives in cdc_emitter.spark.ddl; its names stay importable from here (0.3 had them)
from cdc_emitter.spark.ddl import DdlUnknown as DdlUnknown  # noqa: E402
from cdc_emitter.spark.ddl import parse_ddl_columns as parse_ddl_columns  # noqa: E402

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
    """Raise `SchemaError` if any column has no Avro mapping."""
    data_schema(struct)


def avro_type(dtype: T.DataType, nullable: bool = True, path: str = "value") -> Any:
    """The Avro type of one Spark type (records named after ``path``)."""
    names: set[str] = {"data", "update", "progress", "counts"}
    return _type(dtype, nullable, path.split("."), names)


def contains_type(dtype: T.DataType, kinds: tuple[type, ...]) -> bool:
    """True when ``dtype`` is one of ``kinds`` or holds one in an array element or struct field
    (a map counts as a whole: its keys and values are not searched)."""
    if isinstance(dtype, kinds):
        return True
    if isinstance(dtype, T.ArrayType):
        return contains_type(dtype.elementType, kinds)
    if isinstance(dtype, T.StructType):
        return any(contains_type(f.dataType, kinds) for f in dtype.fields)
    return False


def contains_map(dtype: T.DataType) -> bool:
    """True when ``dtype`` is or contains a map (maps cannot be grouped on directly in Spark)."""
    return contains_type(dtype, (T.MapType,))


def without_collation(dtype: T.DataType) -> T.DataType | None:
    """``dtype`` with every collated string (Spark 4: ``STRING COLLATE UTF8_LCASE``…) as a plain
    string, or None when it has none. Avro strings carry no collation: ``to_avro`` refuses
    collated ones, and readers compare the bytes, so 'A' and 'a' are different data."""
    if isinstance(dtype, T.StringType):
        collated = getattr(dtype, "collation", "UTF8_BINARY") not in ("UTF8_BINARY", None)
        return T.StringType() if collated else None
    if isinstance(dtype, T.ArrayType):
        inner = without_collation(dtype.elementType)
        return None if inner is None else T.ArrayType(inner, dtype.containsNull)
    if isinstance(dtype, T.MapType):
        key, value = without_collation(dtype.keyType), without_collation(dtype.valueType)
        if key is None and value is None:
            return None
        return T.MapType(key or dtype.keyType, value or dtype.valueType, dtype.valueContainsNull)
    if isinstance(dtype, T.StructType):
        fields = [without_collation(f.dataType) for f in dtype.fields]
        if all(f is None for f in fields):
            return None
        return T.StructType(
            [
                T.StructField(f.name, new or f.dataType, f.nullable, f.metadata)
                for f, new in zip(dtype.fields, fields)
            ]
        )
    return None


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
        fields.append(
            {"name": field.name, "type": _type(field.dataType, field.nullable, where, names)}
        )
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
        return {
            "type": "bytes",
            "logicalType": "decimal",
            "precision": dtype.precision,
            "scale": dtype.scale,
        }
    if isinstance(dtype, T.DateType):
        return {"type": "int", "logicalType": "date"}
    if isinstance(dtype, T.TimestampNTZType):
        return {"type": "long", "logicalType": "local-timestamp-micros"}
    if isinstance(dtype, T.TimestampType):
        return {"type": "long", "logicalType": "timestamp-micros"}
    if isinstance(dtype, T.ArrayType):
        return {
            "type": "array",
            "items": _type(dtype.elementType, dtype.containsNull, path + ["element"], names),
        }
    if isinstance(dtype, T.MapType):
        if not isinstance(dtype.keyType, (T.StringType, T.CharType, T.VarcharType)):
            raise SchemaError(
                f"column {'.'.join(path)!r} has type {dtype.simpleString()}: Avro maps need string "
                "keys; cast the keys to string or turn the map into an array of structs"
            )
        return {
            "type": "map",
            "values": _type(dtype.valueType, dtype.valueContainsNull, path + ["value"], names),
        }
    if isinstance(dtype, T.StructType):
        if not dtype.fields:
            raise SchemaError(
                f"column {'.'.join(path)!r} is an empty struct, which Avro cannot hold"
            )
        name = _unique("_".join(["data"] + [re.sub(r"[^A-Za-z0-9_]", "_", p) for p in path]), names)
        return _record(dtype, name, path, names)
    raise SchemaError(
        f"column {'.'.join(path)!r} has type {dtype.simpleString()}, which has no Avro mapping in "
        "the CDC format; cast it (e.g. to string or long) or drop it"
    )
