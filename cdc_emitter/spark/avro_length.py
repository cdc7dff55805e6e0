"""How many bytes Avro's binary encoding of a decoded value takes, computed as a Spark Column.

``from_avro`` ignores bytes left after the value it reads, which the local codec refuses. The
Spark reader finds such bodies by comparing each body's length with the length of the value it
decoded, encoded again. `encoded_length` computes that length from the decoded columns (varint
sizes, string lengths, block counts), without building the encoding: the same number that
``to_avro`` gives, for the types it can size, at a fraction of the cost.

Guarantee: for a value ``from_avro`` decoded with the Avro type ``avro``, the Column equals the
length of ``to_avro`` of it: the canonical encoding (minimal varints, each array and map in one
block). A body can only be as long or longer (longer varints, several blocks, trailing bytes), so
an equal length proves there is nothing left over. Where the length cannot be known from the
Spark value (a decimal, a timestamp, a union Spark merges into one type, an enum of more than 64
symbols), it returns None and the caller encodes the value instead.

DataFrame API only. Imports ``protocol`` for Avro's schema helpers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import fastavro
from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from cdc_emitter.protocol.codec import kind, resolve

__all__ = ["encoded_length", "array_length"]

#: The Spark types ``from_avro`` gives an Avro ``int`` or ``long`` without a logical type.
_INTEGRAL = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)
#: Bytes a union's branch index takes: one while the union has at most 64 branches.
_ONE_BYTE_INDEX = 64
#: The Avro types whose encoding has the same length whatever the value.
_FIXED_SIZE = {"null": 0, "boolean": 1, "float": 4, "double": 8}


def encoded_length(value: Column, dtype: T.DataType, avro: Any) -> Column | None:
    """The length of Avro's canonical encoding of ``value`` as the Avro type ``avro``.

    Args:
        value: A value ``from_avro`` decoded with ``avro`` (any mode), or a part of one.
        dtype: Its Spark type.
        avro: The Avro type, as a whole schema (named types defined in it).

    Returns:
        An integral Column, null where ``value`` is null and ``avro`` has no null; or None when
        some part of the type cannot be sized from its Spark value.
    """
    named: dict = {}
    parsed = fastavro.parse_schema(avro, named_schemas=named)
    return _length(value, dtype, parsed, named)


def _length(c: Column, dtype: T.DataType, avro: Any, named: dict) -> Column | None:
    avro = resolve(avro, named)
    if isinstance(avro, list):
        return _union(c, dtype, avro, named)
    avro_kind = kind(avro)
    if avro_kind == "fixed":
        return F.lit(avro["size"])
    if isinstance(avro, dict) and avro.get("logicalType"):
        return _logical(c, dtype, avro)
    if avro_kind in _FIXED_SIZE:
        return F.lit(_FIXED_SIZE[avro_kind])
    if avro_kind in ("int", "long"):
        return _zigzag_size(c.cast("long")) if isinstance(dtype, _INTEGRAL) else None
    if avro_kind == "string" and isinstance(dtype, T.StringType):
        return _prefixed(F.octet_length(c))
    if avro_kind == "bytes" and isinstance(dtype, T.BinaryType):
        return _prefixed(F.octet_length(c))
    if avro_kind == "enum":
        return F.lit(1) if len(avro["symbols"]) <= _ONE_BYTE_INDEX else None
    if avro_kind == "record" and isinstance(dtype, T.StructType):
        return _record(c, dtype, avro, named)
    if avro_kind == "array" and isinstance(dtype, T.ArrayType):
        element = dtype.elementType
        return _blocks(c, lambda x: _length(x, element, avro["items"], named))
    if avro_kind == "map" and isinstance(dtype, T.MapType):
        values = dtype.valueType

        def entry(e: Column) -> Column | None:
            size = _length(e["value"], values, avro["values"], named)
            return None if size is None else _prefixed(F.octet_length(e["key"])) + size

        return _blocks(F.map_entries(c), entry)
    return None


def _logical(c: Column, dtype: T.DataType, avro: dict) -> Column | None:
    """A logical type: sized where Spark keeps the Avro value (an unknown logical type, which
    Spark ignores, and ``date``); None where it converts it (decimals, timestamps)."""
    base = avro["type"]
    if avro["logicalType"] == "date" and isinstance(dtype, T.DateType):
        return _zigzag_size(F.datediff(c, F.lit("1970-01-01").cast("date")).cast("long"))
    if base in _FIXED_SIZE:
        return F.lit(_FIXED_SIZE[base])
    if base in ("int", "long", "string", "bytes"):  # sized if Spark keeps the base's type
        return _length(c, dtype, base, {})
    return None


def _union(c: Column, dtype: T.DataType, branches: list, named: dict) -> Column | None:
    """A branch index (one byte up to 64 branches) and the branch's value. Spark reads null and
    one type as that type, nullable; several types as a struct of ``member0``, ``member1``, …,
    one of them set; ``int`` and ``long`` as a long, whose encodings have the same length."""
    if len(branches) > _ONE_BYTE_INDEX:
        return None
    others = [b for b in branches if b != "null"]
    if not others:
        return F.lit(1)
    if len(others) == 1:
        inner = _length(c, dtype, others[0], named)
    elif {kind(resolve(b, named)) for b in others} <= {"int", "long"} and isinstance(
        dtype, _INTEGRAL
    ):
        inner = _zigzag_size(c.cast("long"))
    elif isinstance(dtype, T.StructType) and dtype.names == [
        f"member{i}" for i in range(len(others))
    ]:
        members = [_length(c[f.name], f.dataType, b, named) for f, b in zip(dtype.fields, others)]
        if any(m is None for m in members):
            return None
        inner = F.coalesce(
            *[F.when(c[f.name].isNotNull(), m) for f, m in zip(dtype.fields, members)]
        )
    else:
        return None
    if inner is None:
        return None
    return F.when(c.isNull(), F.lit(1)).otherwise(inner + 1) if "null" in branches else inner + 1


def _record(c: Column, dtype: T.StructType, avro: dict, named: dict) -> Column | None:
    """The fields one after another, in the schema's order."""
    types = {f.name: f.dataType for f in dtype.fields}
    if set(types) != {f["name"] for f in avro["fields"]}:
        return None
    total: Column = F.lit(0)
    for field in avro["fields"]:
        size = _length(c[field["name"]], types[field["name"]], field["type"], named)
        if size is None:
            return None
        total = total + size
    return total


class _Unsized(Exception):
    """An item of an array or map cannot be sized (raised out of the lambda that sizes it)."""


def _blocks(items: Column, item_length: Callable[[Column], Column | None]) -> Column | None:
    """An array or map in one block (`array_length`); ``item_length`` gives an item's length,
    or None."""

    def add(total: Column, item: Column) -> Column:
        length = item_length(item)
        if length is None:
            raise _Unsized
        return total + length

    try:  # PySpark calls the lambda now, to build the expression
        body = F.aggregate(items, F.lit(0).cast("long"), add)
    except _Unsized:
        return None
    return array_length(F.size(items), body)


def array_length(count: Column, items: Column) -> Column:
    """The length of an array (or a map) of ``count`` items in one block, whose items take
    ``items`` bytes: the count, the items, and a zero count to end it (when empty, the zero
    alone)."""
    return F.when(count == 0, F.lit(1)).otherwise(_zigzag_size(count.cast("long")) + items + 1)


def _prefixed(length: Column) -> Column:
    """A string's or bytes' length: the byte count (a zig-zag varint: twice it), the bytes."""
    return _half_varint_size(length) + length


def _zigzag_size(n: Column) -> Column:
    """Bytes the varint of ``n`` (a long) takes after zig-zag encoding."""
    # zig-zag maps n to 2n (n >= 0) or -2n - 1 (n < 0); n ^ (n >> 63) is n or -n - 1, half that
    return _half_varint_size(n.bitwiseXOR(F.shiftright(n, 63)))


def _half_varint_size(m: Column) -> Column:
    """Bytes the varint of ``2m`` or ``2m + 1`` takes, for ``m >= 0``: 7 bits a byte."""
    size = F.when(m < F.lit(1 << 6), F.lit(1))
    for n in range(2, 10):
        size = size.when(m < F.lit(1 << (7 * n - 1)), F.lit(n))
    return size.otherwise(F.lit(10))
