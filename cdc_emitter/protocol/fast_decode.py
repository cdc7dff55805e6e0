"""A fast decoder for update arrays, written for one data layout.

fastavro reads each update as dicts, which the codec then turns into hashable
``(data, time, diff)`` tuples; for ordinary rows that is two thirds of what reading a topic
costs. `compile_array_decoder` writes a Python function for one update record layout that
reads an array straight into those tuples, about twice as fast. It reads the primitives,
records (as tuples), arrays (as tuples), maps (as tuples of ``(key, value)`` sorted by key),
enums, fixed, nullable types (``["null", T]`` or ``[T, "null"]``), dates and timestamps (computed
as fastavro computes them), and the other logical types fastavro knows (decimal, time, uuid,
through fastavro's own readers). Named references, unions of two types or more (a union
inside a union too) and unknown logical types are left to fastavro (no decoder).

`ColumnDecoder` reads the same arrays column by column, dates and timestamps at the top level
as their longs and decimals there as their unscaled integers, so a decode worker's result holds
plain values only and crosses a pipe as ``marshal`` data instead of ``pickle``;
`ColumnDecoder.rows` makes the rows again, in C.

Guarantees: a decoder either returns exactly what fastavro, then the codec's conversion, give
for the same bytes (floats canonical: one NaN object, -0.0 as 0.0), or raises (`Unfit`,
IndexError, ValueError, OverflowError, or whatever a fastavro logical reader raises) on
anything it does not read the ordinary way: a varint of ten bytes or more, a negative block
count (blocks with their byte size), a union index, boolean byte or enum index out of the
ordinary, a length past the end, bytes left after the array, a date or timestamp out of
Python's range. The caller then decodes that
message with fastavro, which gives the same value or the error the codec always gave. Pure:
imports neither Kafka nor Spark.
"""

from __future__ import annotations

import datetime
import decimal
import functools
import struct
from collections.abc import Callable
from dataclasses import dataclass
from operator import itemgetter, methodcaller
from typing import Any, cast

from fastavro.read import LOGICAL_READERS

from cdc_emitter.protocol.updates import NAN, canonical_nan

EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
EPOCH_NAIVE = datetime.datetime(1970, 1, 1)

_PRIMITIVES = ("null", "long", "int", "string", "bytes", "boolean", "double", "float")

#: ``decode(buf, pos, row) -> list``: the updates of the array starting at ``pos`` of ``buf``
#: (after the framing and union index), each ``row((data, time, diff))``-shaped.
ArrayDecoder = Callable[[bytes, int, type], list]


class Unfit(ValueError):
    """The bytes are not read the ordinary way: decode them with fastavro instead."""


class _Unsupported(Exception):
    """The layout holds a type the decoder is not written for."""


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


def _sized(target: str, indent: str, size: str, text: bool) -> list[str]:
    """Lines taking ``size`` bytes (an expression) into ``target``, as text or bytes."""
    return [
        f"{indent}end = pos + {size}",
        f"{indent}if {size} < 0 or end > length:",
        f"{indent}    raise Unfit('length')",
        f"{indent}{target} = buf[pos:end]{'.decode()' if text else ''}",
        f"{indent}pos = end",
    ]


class _Writer:
    """Writes the lines that read values of a schema; the constants they use go to
    `constants`. ``raw``: dates and timestamps at the top level stay longs and decimals there
    their unscaled integers (column mode), and no value may need ``pickle``."""

    def __init__(self, raw: bool):
        self.raw = raw
        self.constants: dict[str, Any] = {}
        self._names = 0

    def fresh(self, base: str) -> str:
        self._names += 1
        return f"{base}{self._names}"

    def constant(self, value: Any, base: str) -> str:
        name = self.fresh(base.upper())
        self.constants[name] = value
        return name

    def value(self, schema: Any, target: str, indent: str, top: bool = False) -> list[str]:
        if isinstance(schema, str):
            return self._primitive(schema, target, indent)
        if isinstance(schema, list):
            return self._nullable(schema, target, indent, top)
        if not isinstance(schema, dict):
            raise _Unsupported(repr(schema))
        kind = schema.get("type")
        if "logicalType" in schema:
            return self._logical(schema, target, indent, top)
        if isinstance(kind, str) and kind in _PRIMITIVES:
            return self._primitive(kind, target, indent)
        if kind == "record":
            names = [self.fresh("f") for _ in schema["fields"]]
            lines: list[str] = []
            for name, field in zip(names, schema["fields"]):
                lines += self.value(field["type"], name, indent)
            return [
                *lines,
                f"{indent}{target} = ({', '.join(names)}{',' if len(names) == 1 else ''})",
            ]
        if kind in ("array", "map"):
            return self._blocks(schema, target, indent)
        if kind == "enum":
            symbols = self.constant(tuple(schema["symbols"]), "symbols")
            index = self.fresh("i")
            return [
                *_varint(index, indent),
                f"{indent}if {index} < 0 or {index} >= {len(schema['symbols'])}:",
                f"{indent}    raise Unfit('enum index')",
                f"{indent}{target} = {symbols}[{index}]",
            ]
        if kind == "fixed":
            return _sized(target, indent, str(int(schema["size"])), False)
        raise _Unsupported(repr(kind))

    def _primitive(self, kind: str, target: str, indent: str) -> list[str]:
        if kind == "null":
            return [f"{indent}{target} = None"]
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
        if kind in ("string", "bytes"):
            return [*_varint("size", indent), *_sized(target, indent, "size", kind == "string")]
        if kind in ("double", "float"):
            size, unpack = (8, "unpack_double") if kind == "double" else (4, "unpack_float")
            return [
                f"{indent}if pos + {size} > length:",
                f"{indent}    raise Unfit('length')",
                f"{indent}({target},) = {unpack}(buf, pos)",
                f"{indent}pos += {size}",
                # the codec's canonical float: one NaN object, -0.0 as 0.0
                f"{indent}{target} = NAN if {target} != {target} else {target} + 0.0",
            ]
        raise _Unsupported(kind)  # a named type, referred to by name

    def _nullable(self, schema: list, target: str, indent: str, top: bool) -> list[str]:
        if len(schema) != 2 or "null" not in schema or schema[0] == schema[1]:
            raise _Unsupported("a union of two types or more")
        other = schema[1] if schema[0] == "null" else schema[0]
        if isinstance(other, list):  # fastavro takes a union inside a union; it decides them
            raise _Unsupported("a union inside a union")
        # the union index is zig-zag 0 or 1: one byte, 0 or 2
        null_byte, value_byte = (0, 2) if schema[0] == "null" else (2, 0)
        return [
            f"{indent}b = buf[pos]",
            f"{indent}pos += 1",
            f"{indent}if b == {null_byte}:",
            f"{indent}    {target} = None",
            f"{indent}elif b == {value_byte}:",
            *self.value(other, target, indent + "    ", top),
            f"{indent}else:",
            f"{indent}    raise Unfit('union index')",
        ]

    def _logical(self, schema: dict, target: str, indent: str, top: bool) -> list[str]:
        kind, logical = schema["type"], schema["logicalType"]
        inline = _LOGICAL.get((kind, logical))
        if inline is not None:
            if self.raw and top:
                return _varint(target, indent)
            if self.raw:
                raise _Unsupported("a date or timestamp inside a column: pickled")
            return [
                *_varint(target, indent),
                f"{indent}{target} = {inline.inline.format(v=target)}",
            ]
        reader = LOGICAL_READERS.get(f"{kind}-{logical}")
        base = {k: v for k, v in schema.items() if k != "logicalType"}
        if self.raw and top and _decimal(schema) is not None:
            # the unscaled integer, as fastavro's reader reads it; ColumnDecoder.rows goes on
            lines = self.value(base if kind == "fixed" else kind, target, indent)
            return [*lines, f"{indent}{target} = int_from_bytes({target}, 'big', signed=True)"]
        if reader is None or self.raw:
            raise _Unsupported(f"{kind} {logical}")
        lines = self.value(base if kind == "fixed" else kind, target, indent)
        read, writer = self.constant(reader, "logical"), self.constant(schema, "schema")
        return [*lines, f"{indent}{target} = {read}({target}, {writer})"]

    def _blocks(self, schema: dict, target: str, indent: str) -> list[str]:
        is_map = schema["type"] == "map"
        count, items, item = self.fresh("count"), self.fresh("items"), self.fresh("item")
        inner = indent + "        "
        lines = [f"{indent}{items} = {{}}" if is_map else f"{indent}{items} = []"]
        lines += [f"{indent}while True:", *_varint(count, indent + "    ")]
        lines += [
            f"{indent}    if {count} == 0:",
            f"{indent}        break",
            f"{indent}    if {count} < 0:",
            f"{indent}        raise Unfit('block size')",
            f"{indent}    for _ in range({count}):",
        ]
        if is_map:
            key = self.fresh("key")
            lines += [*_varint("size", inner), *_sized(key, inner, "size", True)]
            lines += [*self.value(schema["values"], item, inner), f"{inner}{items}[{key}] = {item}"]
            by_key = self.constant(itemgetter(0), "by_key")
            lines.append(f"{indent}{target} = tuple(sorted({items}.items(), key={by_key}))")
        else:
            lines += [*self.value(schema["items"], item, inner), f"{inner}{items}.append({item})"]
            lines.append(f"{indent}{target} = tuple({items})")
        return lines


def _data_fields(update_record: dict) -> list[dict] | None:
    """The data record's fields, or None when the record is not ``data, time, diff``."""
    fields = update_record.get("fields", [])
    if [f.get("name") for f in fields] != ["data", "time", "diff"]:
        return None
    if fields[1]["type"] != "long" or fields[2]["type"] != "long":
        return None
    data = fields[0]["type"]
    if not isinstance(data, dict) or data.get("type") != "record":
        return None
    return cast("list[dict]", data["fields"])


def _compile(fields: list[dict], by_column: bool) -> Callable | None:
    """The decoder of update arrays whose data has ``fields``, or None: rows, or columns."""
    writer = _Writer(raw=by_column)
    names = [f"c{i}" for i in range(len(fields))]
    body: list[str] = []
    try:
        for name, field in zip(names, fields):
            body += writer.value(field["type"], name, "            ", top=True)
    except (_Unsupported, KeyError, TypeError, ValueError):
        return None
    body += _varint("time", "            ") + _varint("diff", "            ")
    if by_column:
        head = [
            "def decode(buf, pos):",
            "    times, diffs = [], []",
            *(f"    {name}_list = []" for name in names),
            "    add_time, add_diff = times.append, diffs.append",
            *(f"    add_{name} = {name}_list.append" for name in names),
        ]
        emit = [f"            add_{name}({name})" for name in names]
        emit += ["            add_time(time)", "            add_diff(diff)"]
        result = f"    return times, diffs, [{', '.join(f'{n}_list' for n in names)}]"
    else:
        head = [
            "def decode(buf, pos, row):",
            "    out = []",
            "    append = out.append",
            "    new = tuple.__new__",
            "    plain = row is tuple",
        ]
        data_tuple = f"({', '.join(names)}{',' if len(names) == 1 else ''})"
        emit = [
            f"            update = ({data_tuple}, time, diff)",
            "            append(update if plain else new(row, update))",
        ]
        result = "    return out"
    source = "\n".join(
        [
            *head,
            "    length = len(buf)",
            "    while True:",
            *_varint("count", "        "),
            "        if count == 0:",
            "            break",
            "        if count < 0:",  # a block with its byte size
            "            raise Unfit('block size')",
            "        for _ in range(count):",
            *body,
            *emit,
            "    if pos != length:",
            "        raise Unfit('bytes after the array')",
            result,
        ]
    )
    namespace: dict[str, Any] = {
        "Unfit": Unfit,
        "NAN": NAN,
        "unpack_double": struct.Struct("<d").unpack_from,
        "unpack_float": struct.Struct("<f").unpack_from,
        "date_fromordinal": datetime.date.fromordinal,
        "int_from_bytes": int.from_bytes,
        "timedelta": datetime.timedelta,
        "EPOCH": EPOCH,
        "EPOCH_NAIVE": EPOCH_NAIVE,
        **writer.constants,
    }
    exec(compile(source, "<update decoder>", "exec"), namespace)
    return cast("Callable", namespace["decode"])


def compile_array_decoder(update_record: dict) -> ArrayDecoder | None:
    """A decoder for arrays of ``update_record``, or None when its data holds a type the
    decoder is not written for (see the module doc).

    Args:
        update_record: The update record schema as JSON: fields ``data`` (a record), ``time``
            and ``diff`` (longs), in that order.

    Returns:
        ``decode(buf, pos, row)``: the updates of the array at ``pos``, each built as
        ``row.__new__(row, (data, time, diff))`` with ``data`` a tuple in field order (``row``
        is ``tuple`` or a tuple subclass). It raises where fastavro must decide (see the
        module doc).
    """
    fields = _data_fields(update_record)
    return None if fields is None else cast("ArrayDecoder | None", _compile(fields, False))


def _epoch_plus(epoch: datetime.datetime, scale: int) -> Callable[[list], list]:
    micros = functools.partial(datetime.timedelta, 0, 0)  # timedelta(0, 0, us): C, no keyword
    if scale == 1:
        return lambda col: list(map(epoch.__add__, map(micros, col)))
    return lambda col: list(map(epoch.__add__, map(micros, map(scale.__mul__, col))))


@dataclass(frozen=True)
class _Logical:
    """A date or timestamp the decoders compute from its long themselves, as fastavro's
    readers compute it.

    Attributes:
        name: The logical type.
        inline: The value as a Python expression of the long ``{v}`` (the row decoders).
        as_values: A column of longs as values, in C (``map`` of C callables: the column
            decoder).
        low, high: The longs it takes without leaving Python's dates, in microseconds (a
            date: in days).
        unit: Microseconds per long (a date: 1 day per long, compared in days).
    """

    name: str
    inline: str
    as_values: Callable[[list], list]
    low: int
    high: int
    unit: int


_MICROS_FROM_EPOCH = (
    (datetime.datetime.min - EPOCH_NAIVE) // datetime.timedelta(microseconds=1),
    (datetime.datetime.max - EPOCH_NAIVE) // datetime.timedelta(microseconds=1),
)


def _timestamp(name: str, epoch: str, unit: int) -> _Logical:
    scaled = "{v}" if unit == 1 else f"{{v}} * {unit}"
    return _Logical(
        name,
        f"{epoch} + timedelta(microseconds={scaled})",
        _epoch_plus(EPOCH if epoch == "EPOCH" else EPOCH_NAIVE, unit),
        *_MICROS_FROM_EPOCH,
        unit,
    )


#: The logical types decoded inline, by ``(type, logicalType)``.
_LOGICAL = {
    ("int", "date"): _Logical(
        "date",
        "date_fromordinal({v} + 719163)",
        lambda col: list(map(datetime.date.fromordinal, map((719163).__add__, col))),
        1 - 719163,
        datetime.date.max.toordinal() - 719163,
        1,
    ),
    ("long", "timestamp-micros"): _timestamp("timestamp-micros", "EPOCH", 1),
    ("long", "timestamp-millis"): _timestamp("timestamp-millis", "EPOCH", 1000),
    ("long", "local-timestamp-micros"): _timestamp("local-timestamp-micros", "EPOCH_NAIVE", 1),
    ("long", "local-timestamp-millis"): _timestamp("local-timestamp-millis", "EPOCH_NAIVE", 1000),
}

#: ``(times, diffs, columns)``: an update array column by column, dates and timestamps as their
#: longs and decimals as their unscaled integers (plain values, which ``marshal`` takes, for a
#: result that crosses processes).
Columns = tuple[list[int], list[int], list[list[Any]]]


def holds_floats(schema: Any, within: Any = None) -> bool:
    """Whether values of ``schema`` (an Avro schema as parsed JSON) can hold a float or a
    double, at any depth, named types included.

    Args:
        schema: The schema.
        within: The whole schema ``schema`` is part of, where the named types it uses are
            defined (default: ``schema`` itself).
    """
    named: dict[str, Any] = {}
    _named_types(schema if within is None else within, None, named)
    return _holds_floats(schema, named, set())


def _named_types(schema: Any, space: str | None, named: dict[str, Any]) -> None:
    """Collect the records, enums and fixed types ``schema`` defines, by full and short name."""
    if isinstance(schema, list):
        for branch in schema:
            _named_types(branch, space, named)
    elif isinstance(schema, dict):
        kind = schema.get("type")
        if "name" in schema and kind in ("record", "error", "enum", "fixed"):
            name = schema["name"]
            space = schema.get("namespace", space) if "." not in name else name.rpartition(".")[0]
            full = name if "." in name or not space else f"{space}.{name}"
            named[full] = named[full.rpartition(".")[2]] = schema
        for field in schema.get("fields", ()) if kind in ("record", "error") else ():
            _named_types(field["type"], space, named)
        if kind == "array":
            _named_types(schema["items"], space, named)
        elif kind == "map":
            _named_types(schema["values"], space, named)
        elif isinstance(kind, (dict, list)):
            _named_types(kind, space, named)


def _holds_floats(schema: Any, named: dict[str, Any], seen: set[int]) -> bool:
    if isinstance(schema, str):
        if schema in ("float", "double"):
            return True
        found = named.get(schema)
        return found is not None and _holds_floats(found, named, seen)
    if isinstance(schema, list):
        return any([_holds_floats(branch, named, seen) for branch in schema])
    if isinstance(schema, dict):
        kind = schema.get("type")
        if kind in ("record", "error"):
            if id(schema) in seen:  # a record that holds itself: its other fields decide
                return False
            seen.add(id(schema))
            return any([_holds_floats(f["type"], named, seen) for f in schema["fields"]])
        if kind == "array":
            return _holds_floats(schema["items"], named, seen)
        if kind == "map":
            return _holds_floats(schema["values"], named, seen)
        return _holds_floats(kind, named, seen)
    return False


def _not_null(field_type: Any) -> Any:
    """A top-level column's type without its null (None for a union of two types or more)."""
    if isinstance(field_type, list):
        others = [t for t in field_type if t != "null"]
        return others[0] if len(others) == 1 else None
    return field_type


def _top_logical(field_type: Any) -> _Logical | None:
    """The inline logical type of a top-level column (nullable or not), or None."""
    field_type = _not_null(field_type)
    if isinstance(field_type, dict) and "logicalType" in field_type:
        return _LOGICAL.get((field_type["type"], field_type["logicalType"]))
    return None


#: fastavro's decimal context as it makes it (a new `decimal.Context`, when it is imported, as
#: this module imports it); a decimal column's context is a copy, its precision the schema's.
_DECIMAL_CONTEXT = decimal.Context()

#: The largest unscaled integer, in bits, a decimal column takes (about 2,466 digits): with a
#: scale within `_DECIMAL_SCALE` its decimal neither overflows nor takes long to make, so the
#: reading process never meets an error fastavro would have raised in the worker. Larger
#: ones are left to fastavro (`Unfit`).
_DECIMAL_BITS = 8192
_DECIMAL_SCALE = 100_000


def _decimal(schema: Any) -> Callable[[list], list] | None:
    """For a decimal schema (bytes or fixed), a column of its unscaled integers as the decimals
    fastavro's reader makes of them, in C: ``create_decimal`` in a context of the schema's
    precision, then ``scaleb`` by its scale. None for any other schema, and for a precision or
    scale outside what the column decoder takes."""
    if not isinstance(schema, dict) or schema.get("logicalType") != "decimal":
        return None
    precision, scale = schema.get("precision"), schema.get("scale", 0)
    if schema.get("type") not in ("bytes", "fixed") or type(precision) is not int:
        return None
    if type(scale) is not int or f"{schema['type']}-decimal" not in LOGICAL_READERS:
        return None
    if not 1 <= precision <= decimal.MAX_PREC or abs(scale) > _DECIMAL_SCALE:
        return None
    context = _DECIMAL_CONTEXT.copy()
    context.prec = precision
    scaleb = methodcaller("scaleb", -scale, context)
    return lambda col: list(map(scaleb, map(context.create_decimal, col)))


def _present(values: list) -> list:
    """``values`` without its Nones (the list itself when it holds none)."""
    return [v for v in values if v is not None] if None in values else values


class ColumnDecoder:
    """Update arrays of one layout read column by column, then made rows again.

    For decoding in another process: columns of plain values cross a pipe as ``marshal``
    data, where rows of dates, timestamps and decimals need ``pickle``, several times slower
    to make and to load.
    `rows` makes them the rows `compile_array_decoder`'s function gives, in C.
    """

    def __init__(self, fields: list[dict], decode: Callable):
        self._decode = decode
        self._logical = [
            (i, kind) for i, f in enumerate(fields) if (kind := _top_logical(f["type"]))
        ]
        decimals = [
            (i, convert)
            for i, f in enumerate(fields)
            if (convert := _decimal(_not_null(f["type"]))) is not None
        ]
        self._decimals = [i for i, _convert in decimals]
        #: each top-level column read as other values than ``rows`` gives: its conversion
        self._convert = [(i, kind.as_values) for i, kind in self._logical] + decimals
        whole = {"type": "record", "name": "data", "fields": fields}
        self._floats = [i for i, f in enumerate(fields) if holds_floats(f["type"], whole)]

    def decode(self, buf: bytes, pos: int) -> Columns:
        """The array at ``pos`` of ``buf``, column by column.

        Raises:
            Unfit: As `compile_array_decoder`'s function (which may raise others too), for a
                date or timestamp outside Python's range, and for a decimal of more than
                `_DECIMAL_BITS`.
        """
        times, diffs, cols = self._decode(buf, pos)
        for i, kind in self._logical:
            values = _present(cols[i])
            if values:
                if min(values) * kind.unit < kind.low or max(values) * kind.unit > kind.high:
                    raise Unfit(f"{kind.name} out of range")
        for i in self._decimals:
            values = _present(cols[i])
            if values and max(map(int.bit_length, values)) > _DECIMAL_BITS:
                raise Unfit("a decimal of more digits than the column decoder takes")
        return times, diffs, cols

    def rows(self, decoded: Columns, nan: bool = False) -> list[tuple]:
        """The ``(data, time, diff)`` rows of ``decoded``.

        Args:
            decoded: What `decode` gave, perhaps through ``marshal``.
            nan: Whether a float may be a NaN that is not `NAN` (after ``marshal``).

        Returns:
            The rows `compile_array_decoder`'s function gives for the same bytes.
        """
        times, diffs, cols = decoded
        cols = list(cols)
        for i, convert in self._convert:
            values = cols[i]
            made = convert(_present(values))  # the whole column at once, nulls or not
            if len(made) != len(values):  # the nulls back in their places
                each = iter(made)
                made = [None if v is None else next(each) for v in values]
            cols[i] = made
        if nan:
            for i in self._floats:
                cols[i] = list(map(canonical_nan, cols[i]))
        datas = zip(*cols) if cols else [()] * len(times)
        return list(zip(datas, times, diffs))


def compile_column_decoder(update_record: dict) -> ColumnDecoder | None:
    """A `ColumnDecoder` for arrays of ``update_record``, or None when its data holds a type
    the decoder is not written for, or a value ``marshal`` does not take (a decimal, date or
    timestamp below the top level)."""
    fields = _data_fields(update_record)
    if fields is None:
        return None
    decode = _compile(fields, True)
    return None if decode is None else ColumnDecoder(fields, decode)
