"""A fast decoder for update arrays whose data is a flat record of plain columns.

fastavro reads each update as two dicts, which the codec then turns into ``(data, time, diff)``
tuples; for narrow rows that is about two thirds of what reading a topic costs. When every
data column is a ``long``, ``int``, ``string``, ``bytes`` or ``boolean``, nullable or not
(``["null", T]`` or ``[T, "null"]``), `compile_array_decoder` writes a Python function for
that exact record layout that reads the array straight into tuples, about twice as fast.

Guarantees: the function either returns exactly what fastavro, then the codec's conversion,
give for the same bytes, or raises `Unfit`. It raises `Unfit` (or IndexError, or
UnicodeDecodeError) on anything it does not read the ordinary way: a varint of ten bytes or
more, a negative block count (blocks with their byte size), a union index or boolean byte
other than the canonical ones, a length past the end, bytes left after the array. The caller
then decodes that message with fastavro, which gives the same value or the error the codec
always gave. Pure: imports neither Kafka nor Spark.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: The data column types the fast decoder reads.
PLAIN = ("long", "int", "string", "bytes", "boolean")

#: ``decode(buf, pos, row) -> list``: the updates of the array starting at ``pos`` of ``buf``
#: (after the framing and union index), each ``row((data, time, diff))``-shaped.
ArrayDecoder = Callable[[bytes, int, type], list]


class Unfit(ValueError):
    """The bytes are not read the ordinary way: decode them with fastavro instead."""


def _column(field_type: Any) -> tuple[str, str | None] | None:
    """``(type, null side)`` of a plain column: side None, ``"first"`` or ``"last"``."""
    if isinstance(field_type, str):
        return (field_type, None) if field_type in PLAIN else None
    if isinstance(field_type, list) and len(field_type) == 2 and "null" in field_type:
        other = field_type[1] if field_type[0] == "null" else field_type[0]
        if isinstance(other, str) and other in PLAIN:
            return other, "first" if field_type[0] == "null" else "last"
    return None


def _varint(target: str, indent: str) -> list[str]:
    """Lines reading one zig-zag varint of at most nine bytes into ``target``."""
    return [
        f"{indent}b = buf[pos]",
        f"{indent}pos += 1",
        f"{indent}if b < 128:",
        f"{indent}    {target} = (b >> 1) ^ -(b & 1)",
        f"{indent}else:",
        f"{indent}    n = b & 127",
        f"{indent}    s = 7",
        f"{indent}    while True:",
        f"{indent}        b = buf[pos]",
        f"{indent}        pos += 1",
        f"{indent}        n |= (b & 127) << s",
        f"{indent}        if b < 128:",
        f"{indent}            break",
        f"{indent}        s += 7",
        f"{indent}        if s > 56:",  # a tenth byte: fastavro's 64-bit arithmetic decides
        f"{indent}            raise Unfit('long varint')",
        f"{indent}    {target} = (n >> 1) ^ -(n & 1)",
    ]


def _value(kind: str, target: str, indent: str) -> list[str]:
    if kind in ("long", "int"):
        return _varint(target, indent)
    if kind == "boolean":
        return [
            f"{indent}b = buf[pos]",
            f"{indent}pos += 1",
            f"{indent}if b > 1:",
            f"{indent}    raise Unfit('boolean byte')",
            f"{indent}{target} = b == 1",
        ]
    # string or bytes: a length, then that many bytes
    lines = _varint("size", indent)
    lines += [
        f"{indent}end = pos + size",
        f"{indent}if size < 0 or end > length:",
        f"{indent}    raise Unfit('length')",
        f"{indent}{target} = buf[pos:end]{'.decode()' if kind == 'string' else ''}",
        f"{indent}pos = end",
    ]
    return lines


def _nullable(kind: str, side: str, target: str, indent: str) -> list[str]:
    # the union index is zig-zag 0 or 1: one byte, 0 or 2
    null_byte, value_byte = (0, 2) if side == "first" else (2, 0)
    return [
        f"{indent}b = buf[pos]",
        f"{indent}pos += 1",
        f"{indent}if b == {null_byte}:",
        f"{indent}    {target} = None",
        f"{indent}elif b == {value_byte}:",
        *_value(kind, target, indent + "    "),
        f"{indent}else:",
        f"{indent}    raise Unfit('union index')",
    ]


def compile_array_decoder(update_record: dict) -> ArrayDecoder | None:
    """A decoder for arrays of ``update_record``, or None when its data is not flat and plain.

    Args:
        update_record: The update record schema as JSON: fields ``data`` (a record), ``time``
            and ``diff`` (longs), in that order.

    Returns:
        ``decode(buf, pos, row)``: the updates of the array at ``pos``, each built as
        ``row.__new__(row, (data, time, diff))`` with ``data`` a tuple in field order (``row``
        is ``tuple`` or a tuple subclass). It raises `Unfit`, IndexError or UnicodeDecodeError
        where fastavro must decide (see the module doc).
    """
    fields = update_record.get("fields", [])
    if [f.get("name") for f in fields] != ["data", "time", "diff"]:
        return None
    if fields[1]["type"] != "long" or fields[2]["type"] != "long":
        return None
    data = fields[0]["type"]
    if not isinstance(data, dict) or data.get("type") != "record":
        return None
    columns = [_column(f["type"]) for f in data["fields"]]
    if any(c is None for c in columns):
        return None
    body: list[str] = []
    for i, column in enumerate(columns):
        assert column is not None
        kind, side = column
        if side is None:
            body += _value(kind, f"c{i}", "            ")
        else:
            body += _nullable(kind, side, f"c{i}", "            ")
    body += _varint("time", "            ") + _varint("diff", "            ")
    names = [f"c{i}" for i in range(len(columns))]
    data_tuple = f"({', '.join(names)}{',' if len(names) == 1 else ''})"
    source = "\n".join(
        [
            "def decode(buf, pos, row):",
            "    length = len(buf)",
            "    out = []",
            "    append = out.append",
            "    new = tuple.__new__",
            "    plain = row is tuple",
            "    while True:",
            *_varint("count", "        "),
            "        if count == 0:",
            "            break",
            "        if count < 0:",  # a block with its byte size
            "            raise Unfit('block size')",
            "        for _ in range(count):",
            *body,
            f"            update = ({data_tuple}, time, diff)",
            "            append(update if plain else new(row, update))",
            "    if pos != length:",
            "        raise Unfit('bytes after the array')",
            "    return out",
        ]
    )
    namespace: dict[str, Any] = {"Unfit": Unfit}
    exec(compile(source, f"<update decoder {data.get('name', 'data')}>", "exec"), namespace)
    decode: ArrayDecoder = namespace["decode"]
    return decode
