"""How many bytes Avro's binary encoding of a decoded value takes, computed as a Spark Column.

``from_avro`` ignores bytes left after the value it reads, which the local codec refuses. The
Spark reader finds such bodies by comparing each body's length with the length of the value it
decoded, encoded again. `encoded_length` computes that length from the decoded columns (varint
sizes, string lengths, block counts), without building the encoding: the same number that
``to_avro`` gives, for the types it can size, at a fraction of the cost.

The length is built as the text of one SQL expression, made a Column by one ``F.expr``: on
PySpark 4 each Column operator is about eleven calls into the JVM, and a read sizes every field
of every update (a one-field topic's read spent a second building the Columns).

Guarantee: for a value ``from_avro`` decoded with the Avro type ``avro``, the Column equals the
length of ``to_avro`` of it: the canonical encoding (minimal varints, each array and map in one
block). A body can only be as long or longer (longer varints, several blocks, trailing bytes), so
an equal length proves there is nothing left over. Where the length cannot be known from the
Spark value (a decimal, a timestamp, a union Spark merges into one type, an enum of more than 64
symbols), it returns None and the caller encodes the value instead.

DataFrame API only (``F.expr`` of Spark SQL built-in functions, which Spark Connect parses on
the server too). Imports ``protocol`` for Avro's schema helpers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import fastavro
from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from cdc_emitter.protocol.schemas import kind, resolve

__all__ = ["encoded_length", "array_length"]

#: The Spark types ``from_avro`` gives an Avro ``int`` or ``long`` without a logical type.
_INTEGRAL = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)
#: Bytes a union's branch index takes: one while the union has at most 64 branches.
_ONE_BYTE_INDEX = 64
#: The Avro types whose encoding has the same length whatever the value.
_FIXED_SIZE = {"null": 0, "boolean": 1, "float": 4, "double": 8}


def encoded_length(column: str, dtype: T.DataType, avro: Any) -> Column | None:
    """The length of Avro's canonical encoding of the column ``column`` as the Avro type ``avro``.

    Args:
        column: The name of a column ``from_avro`` decoded with ``avro`` (any mode).
        dtype: Its Spark type.
        avro: The Avro type, as a whole schema (named types defined in it).

    Returns:
        An integral Column, null where the value is null and ``avro`` has no null; or None when
        some part of the type cannot be sized from its Spark value.
    """
    named: dict = {}
    parsed = fastavro.parse_schema(avro, named_schemas=named)
    text = _Sizer(named).length(_quoted(column), dtype, parsed)
    return None if text is None else F.expr(text)


def array_length(count: str, items: str) -> Column:
    """The length of an array (or a map) of ``count`` items in one block, whose items take
    ``items`` bytes (both SQL expressions): the count, the items, and a zero count to end it
    (when empty, the zero alone)."""
    return F.expr(_array_length(count, items))


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


class _Sizer:
    """Builds the SQL text of a value's length; ``named`` are the schema's named types. Each
    ``value`` below is SQL text naming the value: a column, a lambda variable, or a field of
    one."""

    def __init__(self, named: dict) -> None:
        self.named = named
        self.lambdas = 0  # lambda variables are numbered: an array's items may hold arrays

    def length(self, c: str, dtype: T.DataType, avro: Any) -> str | None:
        avro = resolve(avro, self.named)
        if isinstance(avro, list):
            return self.union(c, dtype, avro)
        avro_kind = kind(avro)
        if avro_kind == "fixed":
            return str(avro["size"])
        if isinstance(avro, dict) and avro.get("logicalType"):
            return self.logical(c, dtype, avro)
        if avro_kind in _FIXED_SIZE:
            return str(_FIXED_SIZE[avro_kind])
        if avro_kind in ("int", "long"):
            return _zigzag_size(f"CAST({c} AS BIGINT)") if isinstance(dtype, _INTEGRAL) else None
        if avro_kind == "string" and isinstance(dtype, T.StringType):
            return _prefixed(f"octet_length({c})")
        if avro_kind == "bytes" and isinstance(dtype, T.BinaryType):
            return _prefixed(f"octet_length({c})")
        if avro_kind == "enum":
            return "1" if len(avro["symbols"]) <= _ONE_BYTE_INDEX else None
        if avro_kind == "record" and isinstance(dtype, T.StructType):
            return self.record(c, dtype, avro)
        if avro_kind == "array" and isinstance(dtype, T.ArrayType):
            element = dtype.elementType
            return self.blocks(c, lambda x: self.length(x, element, avro["items"]))
        if avro_kind == "map" and isinstance(dtype, T.MapType):
            values = dtype.valueType

            def entry(e: str) -> str | None:
                size = self.length(f"{e}.`value`", values, avro["values"])
                return (
                    None if size is None else f"({_prefixed(f'octet_length({e}.`key`)')} + {size})"
                )

            return self.blocks(f"map_entries({c})", entry)
        return None

    def logical(self, c: str, dtype: T.DataType, avro: dict) -> str | None:
        """A logical type: sized where Spark keeps the Avro value (an unknown logical type,
        which Spark ignores, and ``date``); None where it converts it (decimals, timestamps)."""
        base = avro["type"]
        if avro["logicalType"] == "date" and isinstance(dtype, T.DateType):
            return _zigzag_size(f"CAST(datediff({c}, DATE'1970-01-01') AS BIGINT)")
        if base in _FIXED_SIZE:
            return str(_FIXED_SIZE[base])
        if base in ("int", "long", "string", "bytes"):  # sized if Spark keeps the base's type
            return self.length(c, dtype, base)
        return None

    def union(self, c: str, dtype: T.DataType, branches: list) -> str | None:
        """A branch index (one byte up to 64 branches) and the branch's value. Spark reads null
        and one type as that type, nullable; several types as a struct of ``member0``,
        ``member1``, …, one of them set; ``int`` and ``long`` as a long, whose encodings have
        the same length."""
        if len(branches) > _ONE_BYTE_INDEX:
            return None
        others = [b for b in branches if b != "null"]
        if not others:
            return "1"
        inner: str | None
        if len(others) == 1:
            inner = self.length(c, dtype, others[0])
        elif {kind(resolve(b, self.named)) for b in others} <= {"int", "long"} and isinstance(
            dtype, _INTEGRAL
        ):
            inner = _zigzag_size(f"CAST({c} AS BIGINT)")
        elif isinstance(dtype, T.StructType) and dtype.names == [
            f"member{i}" for i in range(len(others))
        ]:
            members = [
                self.length(f"{c}.{_quoted(f.name)}", f.dataType, b)
                for f, b in zip(dtype.fields, others)
            ]
            if any(m is None for m in members):
                return None
            inner = "coalesce({})".format(
                ", ".join(
                    f"CASE WHEN {c}.{_quoted(f.name)} IS NOT NULL THEN {m} END"
                    for f, m in zip(dtype.fields, members)
                )
            )
        else:
            return None
        if inner is None:
            return None
        if "null" in branches:
            return f"CASE WHEN {c} IS NULL THEN 1 ELSE {inner} + 1 END"
        return f"({inner} + 1)"

    def record(self, c: str, dtype: T.StructType, avro: dict) -> str | None:
        """The fields one after another, in the schema's order."""
        types = {f.name: f.dataType for f in dtype.fields}
        if set(types) != {f["name"] for f in avro["fields"]}:
            return None
        sizes = []
        for field in avro["fields"]:
            size = self.length(f"{c}.{_quoted(field['name'])}", types[field["name"]], field["type"])
            if size is None:
                return None
            sizes.append(size)
        return "({})".format(" + ".join(["0", *sizes]))

    def blocks(self, items: str, item_length: Callable[[str], str | None]) -> str | None:
        """An array or map in one block (`array_length`); ``item_length`` gives an item's
        length, or None."""
        self.lambdas += 1
        total, item = f"__total{self.lambdas}", f"__item{self.lambdas}"
        length = item_length(item)
        if length is None:
            return None
        body = f"aggregate({items}, CAST(0 AS BIGINT), ({total}, {item}) -> {total} + {length})"
        return _array_length(f"size({items})", body)


def _array_length(count: str, items: str) -> str:
    return (
        f"CASE WHEN {count} = 0 THEN 1 "
        f"ELSE {_zigzag_size(f'CAST({count} AS BIGINT)')} + {items} + 1 END"
    )


def _prefixed(length: str) -> str:
    """A string's or bytes' length: the byte count (a zig-zag varint: twice it), the bytes."""
    return f"({_half_varint_size(length)} + {length})"


def _zigzag_size(n: str) -> str:
    """Bytes the varint of ``n`` (a long) takes after zig-zag encoding."""
    # zig-zag maps n to 2n (n >= 0) or -2n - 1 (n < 0); n ^ (n >> 63) is n or -n - 1, half that
    return _half_varint_size(f"({n} ^ shiftright({n}, 63))")


def _half_varint_size(m: str) -> str:
    """Bytes the varint of ``2m`` or ``2m + 1`` takes, for ``m >= 0``: 7 bits a byte."""
    whens = " ".join(f"WHEN {m} < {1 << (7 * n - 1)} THEN {n}" for n in range(1, 10))
    return f"CASE {whens} ELSE 10 END"
