"""Vectorised Avro encoding of flat update records from Arrow columns (numpy; no per-row Python).

Used by the sink's pure-Python encoder when every data column is a flat primitive: long, int,
short, byte, boolean, double, float, string or binary, nullable or not (Avro ``["null", T]``).
Each update record is ``data fields..., time, diff`` in Avro's binary encoding (zig-zag varints,
length-prefixed bytes, little-endian floats, one branch byte for a nullable column); the
records of a batch are laid out back to back in one buffer, so update-array messages are slices
of it. The bytes are exactly what fastavro writes (the unit tests compare them).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cdc_emitter.protocol.varint import encode_zigzag_long

_LONGS = (pa.int64(), pa.int32(), pa.int16(), pa.int8())


def supported(arrow_type: Any) -> bool:
    return (
        arrow_type in _LONGS
        or arrow_type == pa.bool_()
        or arrow_type in (pa.float64(), pa.float32())
        or pa.types.is_string(arrow_type)
        or pa.types.is_binary(arrow_type)
        or pa.types.is_large_string(arrow_type)
        or pa.types.is_large_binary(arrow_type)
    )


def _varints(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Zig-zag varints of int64 ``values``: (bytes matrix n×10, lengths n), built a byte
    position at a time (10 bytes per value held, not 80)."""
    x = values.astype(np.int64, copy=False)
    z = ((x << 1) ^ (x >> 63)).view(np.uint64)
    n = len(z)
    lengths = np.ones(n, dtype=np.int64)
    for k in range(1, 10):
        lengths += z >= np.uint64(1 << (7 * k))
    groups = np.empty((n, 10), dtype=np.uint8)
    for k in range(10):
        groups[:, k] = ((z >> np.uint64(7 * k)) & np.uint64(0x7F)).astype(np.uint8)
        groups[:, k] |= np.where(lengths - 1 > k, 0x80, 0).astype(np.uint8)
    return groups, lengths


def _packed_varints(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The zig-zag varints of int64 ``values`` back to back (uint8), and each one's length."""
    groups, lengths = _varints(values)
    return groups[np.arange(10)[None, :] < lengths[:, None]], lengths


def varint_bytes(values: np.ndarray) -> bytes:
    """The zig-zag varints of int64 ``values``, back to back."""
    return _packed_varints(values)[0].tobytes()


def varint_array(values: np.ndarray) -> pa.Array:
    """Each of int64 ``values`` as its zig-zag varint, a binary array (one value each)."""
    flat, lengths = _packed_varints(values)
    offsets = np.concatenate([np.zeros(1, np.int64), np.cumsum(lengths)]).astype(np.int32)
    return pa.Array.from_buffers(
        pa.binary(), len(values), [None, pa.py_buffer(offsets), pa.py_buffer(flat)]
    )


#: Up to this many rows, `long_block` encodes in plain Python: numpy's set-up costs more there
#: (about 3 ms for a statement of one time, a tenth of a small batch's own work in the sink).
SMALL_BLOCK = 64


def long_block(rows: Any) -> bytes | None:
    """Avro's encoding of an array of ``rows`` as fastavro writes it: one block (the count, each
    row's longs as zig-zag varints, then 0), or 0 alone when empty. A row is an int, or a tuple
    of ints (a record of longs, e.g. a progress count's time and count). None unless every
    value is a plain integer that fits a long, for the caller to encode them otherwise (and
    report what is wrong)."""
    if len(rows) == 0:
        return b"\x00"
    if len(rows) <= SMALL_BLOCK:
        longs = _plain_longs(rows)
        if longs is not None:
            return b"".join(map(encode_zigzag_long, [len(rows), *longs])) + b"\x00"
    try:
        values = np.array(rows)
    except (ValueError, OverflowError, TypeError):  # ragged rows, or ints beyond any dtype
        return None
    if values.dtype.kind != "i":  # floats, bools, objects (ints beyond 64 bits), unsigned
        return None
    return (
        varint_bytes(np.array([len(rows)], dtype=np.int64)) + varint_bytes(values.ravel()) + b"\x00"
    )


def _plain_longs(rows: Any) -> list[int] | None:
    """The longs of ``rows`` in order — ints, or tuples of ints all of one length — or None
    when any is something else (numpy ints, bools, beyond a long, ragged rows)."""
    if isinstance(rows[0], tuple):
        width = len(rows[0])
        if width == 0 or any(not isinstance(r, tuple) or len(r) != width for r in rows):
            return None
        values = [value for row in rows for value in row]
    else:
        values = list(rows)
    if any(type(v) is not int or not -(2**63) <= v < 2**63 for v in values):
        return None
    return values


class _Bytes(NamedTuple):
    """A string or binary field's raw bytes, after each row's head."""

    data: np.ndarray  # the column's bytes (uint8)
    offsets: np.ndarray  # start of each row's bytes in data
    lengths: np.ndarray  # length of each row's bytes (0 for null)


class _Field:
    """One field's per-row encoding: a fixed-width matrix with per-row lengths, plus raw bytes."""

    def __init__(self, matrix: np.ndarray, lengths: np.ndarray, tail: _Bytes | None = None) -> None:
        self.matrix = matrix  # n × w head bytes (varint, branch byte, fixed value)
        self.head_lengths = lengths  # bytes used of each row of matrix
        self.tail = tail  # string/binary bytes, or None

    @property
    def lengths(self) -> np.ndarray:
        if self.tail is None:
            return self.head_lengths
        return self.head_lengths + self.tail.lengths


def _field(column: pa.Array, nullable: bool) -> _Field:
    n = len(column)
    t = column.type
    valid = None
    if nullable:
        valid = (
            ~np.asarray(column.is_null().to_numpy(zero_copy_only=False), dtype=bool)
            if column.null_count
            else np.ones(n, dtype=bool)
        )
    if t in _LONGS or t == pa.bool_() or t in (pa.float64(), pa.float32()):
        if t in _LONGS:
            values = column.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
            matrix, lengths = _varints(values)
        elif t == pa.bool_():
            values = column.fill_null(False).to_numpy(zero_copy_only=False).astype(np.uint8)
            matrix, lengths = values[:, None], np.ones(n, dtype=np.int64)
        else:
            dtype = np.float64 if t == pa.float64() else np.float32
            values = np.ascontiguousarray(
                column.fill_null(0).to_numpy(zero_copy_only=False),
                dtype=np.dtype(dtype).newbyteorder("<"),
            )
            width = values.dtype.itemsize
            matrix = values.view(np.uint8).reshape(n, width)
            lengths = np.full(n, width, dtype=np.int64)
        if valid is not None:
            lengths = np.where(valid, lengths, 0)
            matrix = np.concatenate(
                [np.where(valid, 2, 0).astype(np.uint8)[:, None], matrix], axis=1
            )
            lengths = lengths + 1
        return _Field(matrix, lengths)
    # string / binary: varint length, then the bytes
    if pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        column = column.cast(pa.large_binary())
        offset_type = np.int64
    else:
        column = column.cast(pa.binary())
        offset_type = np.int32
    if column.null_count:
        column = pc.if_else(column.is_null(), pa.scalar(b"", column.type), column)
    buffers = column.buffers()
    offsets = np.frombuffer(buffers[1], dtype=offset_type)[
        column.offset : column.offset + n + 1
    ].astype(np.int64)
    data = (
        np.frombuffer(buffers[2], dtype=np.uint8)
        if buffers[2] is not None
        else np.zeros(0, np.uint8)
    )
    byte_lengths = np.diff(offsets)
    matrix, lengths = _varints(byte_lengths)
    if valid is not None:
        lengths = np.where(valid, lengths, 0)
        byte_lengths = np.where(valid, byte_lengths, 0)
        matrix = np.concatenate([np.where(valid, 2, 0).astype(np.uint8)[:, None], matrix], axis=1)
        lengths = lengths + 1
    return _Field(matrix, lengths, _Bytes(data, offsets[:-1], byte_lengths))


def encode_records(columns: list[pa.Array], nullable: list[bool]) -> tuple[np.ndarray, np.ndarray]:
    """Records made of ``columns`` (data fields, then time and diff as non-null int64).

    Returns ``(buffer, ends)``: record i is ``buffer[ends[i-1]:ends[i]]`` (``ends[-1]`` = size).
    """
    fields = [_field(c, nb) for c, nb in zip(columns, nullable)]
    n = len(columns[0])
    sizes = np.zeros(n, dtype=np.int64)
    for f in fields:
        sizes += f.lengths
    ends = np.cumsum(sizes)
    out = np.zeros(int(ends[-1]) if n else 0, dtype=np.uint8)
    pos = ends - sizes  # where the next field of each row goes
    for f in fields:
        width = f.matrix.shape[1]
        mask = np.arange(width)[None, :] < f.head_lengths[:, None]
        targets = pos[:, None] + np.arange(width)[None, :]
        out[targets[mask]] = f.matrix[mask]
        pos = pos + f.head_lengths
        tail = f.tail
        if tail is not None:
            total = int(tail.lengths.sum())
            if total:
                rows = np.repeat(np.arange(n), tail.lengths)
                starts = np.cumsum(tail.lengths) - tail.lengths
                within = np.arange(total) - starts[rows]
                out[pos[rows] + within] = tail.data[tail.offsets[rows] + within]
            pos = pos + tail.lengths
    return out, ends
