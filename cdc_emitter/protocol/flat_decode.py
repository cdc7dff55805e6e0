"""A fast decoder for update arrays whose data is a flat record of plain columns.

fastavro reads each update as two dicts, which the codec then turns into ``(data, time, diff)``
tuples; for narrow rows that is about two thirds of what reading a topic costs. When every
data column is a ``long``, ``int``, ``string``, ``bytes``, ``boolean``, ``double``, ``float``,
``date`` or one of the four timestamps, nullable or not (``["null", T]`` or ``[T, "null"]``),
`compile_array_decoder` writes a Python function for that exact record layout that reads the
array straight into tuples, about twice as fast.

Guarantees: the function either returns exactly what fastavro, then the codec's conversion,
give for the same bytes (floats canonical: one NaN object, -0.0 as 0.0), or raises. It raises
`Unfit`, IndexError, ValueError or OverflowError on anything it does not read the ordinary
way: a varint of ten bytes or more, a negative block count (blocks with their byte size), a
union index or boolean byte other than the canonical ones, a length past the end, bytes left
after the array, a date or timestamp out of Python's range. The caller then decodes that
message with fastavro, which gives the same value or the error the codec always gave. Pure:
imports neither Kafka nor Spark.
"""

from __future__ import annotations

import datetime
import functools
import struct
from collections.abc import Callable
from typing import Any, cast

from cdc_emitter.protocol.updates import NAN

#: The data column types the fast decoder reads: Avro primitives, and logical types by
#: ``(type, logicalType)``.
PLAIN = ("long", "int", "string", "bytes", "boolean", "double", "float")
LOGICAL = {
    ("int", "date"): "date",
    ("long", "timestamp-micros"): "timestamp-micros",
    ("long", "timestamp-millis"): "timestamp-millis",
    ("long", "local-timestamp-micros"): "local-timestamp-micros",
    ("long", "local-timestamp-millis"): "local-timestamp-millis",
}
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
EPOCH_NAIVE = datetime.datetime(1970, 1, 1)
#: What a logical type's long becomes, as fastavro's logical readers compute it.
_LOGICAL_VALUE = {
    "date": "date_fromordinal({v} + 719163)",
    "timestamp-micros": "EPOCH + timedelta(microseconds={v})",
    "timestamp-millis": "EPOCH + timedelta(microseconds={v} * 1000)",
    "local-timestamp-micros": "EPOCH_NAIVE + timedelta(microseconds={v})",
    "local-timestamp-millis": "EPOCH_NAIVE + timedelta(microseconds={v} * 1000)",
}

#: ``decode(buf, pos, row) -> list``: the updates of the array starting at ``pos`` of ``buf``
#: (after the framing and union index), each ``row((data, time, diff))``-shaped.
ArrayDecoder = Callable[[bytes, int, type], list]


class Unfit(ValueError):
    """The bytes are not read the ordinary way: decode them with fastavro instead."""


def _kind(avro_type: Any) -> str | None:
    """The decoder's name for a column type it reads, or None."""
    if isinstance(avro_type, str):
        return avro_type if avro_type in PLAIN else None
    if isinstance(avro_type, dict) and set(avro_type) <= {"type", "logicalType"}:
        if "logicalType" not in avro_type:
            return _kind(avro_type["type"])
        return LOGICAL.get((avro_type["type"], avro_type["logicalType"]))
    return None


def _column(field_type: Any) -> tuple[str, str | None] | None:
    """``(kind, null side)`` of a column it reads: side None, ``"first"`` or ``"last"``."""
    if isinstance(field_type, list):
        if len(field_type) == 2 and "null" in field_type:
            other = field_type[1] if field_type[0] == "null" else field_type[0]
            kind = _kind(other)
            if kind is not None:
                return kind, "first" if field_type[0] == "null" else "last"
        return None
    kind = _kind(field_type)
    return None if kind is None else (kind, None)


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


def _value(kind: str, target: str, indent: str, raw: bool) -> list[str]:
    """Lines reading one value of ``kind``; ``raw``: a date or timestamp as its long."""
    if kind in ("long", "int") or (raw and kind in _LOGICAL_VALUE):
        return _varint(target, indent)
    if kind in _LOGICAL_VALUE:
        return [
            *_varint(target, indent),
            f"{indent}{target} = {_LOGICAL_VALUE[kind].format(v=target)}",
        ]
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


def _nullable(kind: str, side: str, target: str, indent: str, raw: bool) -> list[str]:
    # the union index is zig-zag 0 or 1: one byte, 0 or 2
    null_byte, value_byte = (0, 2) if side == "first" else (2, 0)
    return [
        f"{indent}b = buf[pos]",
        f"{indent}pos += 1",
        f"{indent}if b == {null_byte}:",
        f"{indent}    {target} = None",
        f"{indent}elif b == {value_byte}:",
        *_value(kind, target, indent + "    ", raw),
        f"{indent}else:",
        f"{indent}    raise Unfit('union index')",
    ]


def _columns_of(update_record: dict) -> list[tuple[str, str | None]] | None:
    """The data columns' ``(kind, null side)``, or None when the layout is not flat and plain."""
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
    return cast("list[tuple[str, str | None]]", columns)


def _compile(columns: list[tuple[str, str | None]], by_column: bool) -> Callable:
    """The decoder's source for ``columns``, compiled: rows, or (``by_column``) columns."""
    body: list[str] = []
    for i, (kind, side) in enumerate(columns):
        if side is None:
            body += _value(kind, f"c{i}", "            ", by_column)
        else:
            body += _nullable(kind, side, f"c{i}", "            ", by_column)
    body += _varint("time", "            ") + _varint("diff", "            ")
    names = [f"c{i}" for i in range(len(columns))]
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
        "timedelta": datetime.timedelta,
        "EPOCH": EPOCH,
        "EPOCH_NAIVE": EPOCH_NAIVE,
    }
    exec(compile(source, "<update decoder>", "exec"), namespace)
    return cast("Callable", namespace["decode"])


def compile_array_decoder(update_record: dict) -> ArrayDecoder | None:
    """A decoder for arrays of ``update_record``, or None when its data is not flat and plain.

    Args:
        update_record: The update record schema as JSON: fields ``data`` (a record), ``time``
            and ``diff`` (longs), in that order.

    Returns:
        ``decode(buf, pos, row)``: the updates of the array at ``pos``, each built as
        ``row.__new__(row, (data, time, diff))`` with ``data`` a tuple in field order (``row``
        is ``tuple`` or a tuple subclass). It raises `Unfit`, IndexError, ValueError or
        OverflowError where fastavro must decide (see the module doc).
    """
    columns = _columns_of(update_record)
    return None if columns is None else cast("ArrayDecoder", _compile(columns, False))


def _epoch_plus(epoch: datetime.datetime, scale: int) -> Callable[[list], list]:
    micros = functools.partial(datetime.timedelta, 0, 0)  # timedelta(0, 0, us): C, no keyword
    if scale == 1:
        return lambda col: list(map(epoch.__add__, map(micros, col)))
    return lambda col: list(map(epoch.__add__, map(micros, map(scale.__mul__, col))))


#: A column of longs as the logical type's values, in C (``map`` of C callables).
_AS_VALUES: dict[str, Callable[[list], list]] = {
    "date": lambda col: list(map(datetime.date.fromordinal, map((719163).__add__, col))),
    "timestamp-micros": _epoch_plus(EPOCH, 1),
    "timestamp-millis": _epoch_plus(EPOCH, 1000),
    "local-timestamp-micros": _epoch_plus(EPOCH_NAIVE, 1),
    "local-timestamp-millis": _epoch_plus(EPOCH_NAIVE, 1000),
}
_MICROS_FROM_EPOCH = (
    (datetime.datetime.min - EPOCH_NAIVE) // datetime.timedelta(microseconds=1),
    (datetime.datetime.max - EPOCH_NAIVE) // datetime.timedelta(microseconds=1),
)
#: The longs each logical type takes without leaving Python's dates (a date's days, a
#: timestamp's units since the epoch), and the unit's microseconds.
_RANGES = {
    "date": (1 - 719163, datetime.date.max.toordinal() - 719163, 1),
    "timestamp-micros": (*_MICROS_FROM_EPOCH, 1),
    "timestamp-millis": (*_MICROS_FROM_EPOCH, 1000),
    "local-timestamp-micros": (*_MICROS_FROM_EPOCH, 1),
    "local-timestamp-millis": (*_MICROS_FROM_EPOCH, 1000),
}

#: ``(times, diffs, columns)``: an update array column by column, dates and timestamps as their
#: longs (plain values, which ``marshal`` takes, for a result that crosses processes).
Columns = tuple[list[int], list[int], list[list[Any]]]


class ColumnDecoder:
    """Update arrays of one flat layout read column by column, then made rows again.

    For decoding in another process: columns of plain values cross a pipe as ``marshal``
    data, where rows of dates and timestamps need ``pickle``, several times slower to load.
    `rows` makes them the rows `compile_array_decoder`'s function gives, in C.

    Args:
        columns: The data columns' ``(kind, null side)``.
    """

    def __init__(self, columns: list[tuple[str, str | None]]):
        self.columns = columns
        self._decode = _compile(columns, True)
        self._logical = [(i, kind) for i, (kind, _side) in enumerate(columns) if kind in _RANGES]
        self._floats = [i for i, (kind, _side) in enumerate(columns) if kind in ("double", "float")]

    def decode(self, buf: bytes, pos: int) -> Columns:
        """The array at ``pos`` of ``buf``, column by column.

        Raises:
            Unfit: As `compile_array_decoder`'s function (also IndexError, ValueError), and
                for a date or timestamp outside Python's range.
        """
        times, diffs, cols = self._decode(buf, pos)
        for i, kind in self._logical:
            values = cols[i]
            if None in values:
                values = [v for v in values if v is not None]
            if values:
                low, high, unit = _RANGES[kind]
                if min(values) * unit < low or max(values) * unit > high:
                    raise Unfit(f"{kind} out of range")
        return times, diffs, cols

    def rows(self, decoded: Columns, nan: bool = False) -> list[tuple]:
        """The ``(data, time, diff)`` rows of ``decoded``.

        Args:
            decoded: What `decode` gave, perhaps through ``marshal``.
            nan: Whether a float column may hold a NaN that is not `NAN` (after ``marshal``).

        Returns:
            The rows `compile_array_decoder`'s function gives for the same bytes.
        """
        times, diffs, cols = decoded
        cols = list(cols)
        for i, kind in self._logical:
            convert = _AS_VALUES[kind]
            values = cols[i]
            if None in values:
                cols[i] = [None if v is None else convert([v])[0] for v in values]
            else:
                cols[i] = convert(values)
        if nan:
            for i in self._floats:
                cols[i] = [NAN if v != v else v for v in cols[i]]
        datas = zip(*cols) if cols else [()] * len(times)
        return list(zip(datas, times, diffs))


def compile_column_decoder(update_record: dict) -> ColumnDecoder | None:
    """A `ColumnDecoder` for arrays of ``update_record``, or None when its data is not flat and
    plain (see `compile_array_decoder`)."""
    columns = _columns_of(update_record)
    return None if columns is None else ColumnDecoder(columns)
