"""Avro's zig-zag varint longs: what the codec and the Arrow encoder both write (pure)."""

from __future__ import annotations

from typing import Any

from cdc_emitter.errors import DecodeError

__all__ = ["decode_zigzag_long", "encode_zigzag_long"]


def encode_zigzag_long(n: int) -> bytes:
    """Avro's zig-zag varint encoding of a signed 64-bit integer."""
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def decode_zigzag_long(data: Any, pos: int, end: int) -> tuple[int, int]:
    """The zig-zag varint in ``data`` (bytes or a memoryview) at ``pos``, and the position after
    it; raises `DecodeError` if it does not end before ``end``."""
    n = shift = 0
    while True:
        if pos >= end:
            raise DecodeError("a varint runs past its end")
        byte = data[pos]
        pos += 1
        n |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return (n >> 1) ^ -(n & 1), pos
