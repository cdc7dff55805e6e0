"""Converters between fastavro's values and the codec's, built once per data schema (pure).

A converter is built from a *parsed* schema (fastavro full names), of one of two kinds:
``"hash"`` makes a fastavro value hashable (records and arrays as tuples, maps as sorted
entries, one NaN, no negative zero), so the reader can deduplicate it; ``"write"`` makes what
fastavro writes from what the caller holds (tuples or dicts). ``None`` means identity, which
lets flat records skip per-value work.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import itemgetter
from typing import Any

from cdc_emitter.protocol.json_forms import map_items
from cdc_emitter.protocol.schemas import PRIMITIVES
from cdc_emitter.protocol.updates import NAN

__all__ = ["Conv", "converter", "record_converter", "strip_logical"]


def converter(schema: Any, named: dict, kind: str) -> Conv:
    """The converter of ``kind`` (``"hash"`` or ``"write"``) for a parsed ``schema`` whose
    named types are ``named``; None: values need none."""
    return _build(schema, named, kind, {})


def record_converter(schema: dict, named: dict, kind: str) -> Callable[[Any], Any]:
    """The converter of ``kind`` for a parsed record type (never identity: records become
    tuples, or dicts to write)."""
    return _build_record(schema, named, kind, {})


Conv = Callable[[Any], Any] | None


class _Lazy:
    """A converter for a named type still being built (recursive schemas)."""

    def __init__(self):
        self.fn: Callable[[Any], Any] = lambda v: v

    def __call__(self, v):
        return self.fn(v)


def _canonical_float(v: float) -> float:
    return NAN if v != v else v + 0.0  # one NaN object; -0.0 + 0.0 is 0.0


def _build(schema: Any, named: dict, kind: str, memo: dict) -> Conv:
    """Converter of ``kind``: "hash" (fastavro value → hashable) or "write" (→ fastavro value)."""
    if isinstance(schema, str):
        if kind == "hash" and schema in ("float", "double"):
            return _canonical_float
        if schema in PRIMITIVES:
            return None
        if schema in memo:
            return memo[schema]
        return _build(named[schema], named, kind, memo)
    if isinstance(schema, list):
        branches = [_build(b, named, kind, memo) for b in schema]
        live = [c for b, c in zip(schema, branches) if b != "null" and c is not None]
        if not live:
            return None
        if len(live) == 1:
            (conv,) = live
            return lambda v: None if v is None else conv(v)
        return lambda v: None if v is None else _first_ok(live, v)
    t = schema["type"]
    if t == "record":
        return _build_record(schema, named, kind, memo)
    if t == "array":
        item = _build(schema["items"], named, kind, memo)
        if kind == "hash":
            return tuple if item is None else (lambda v: tuple(map(item, v)))
        # lists, not tuples: fastavro's unions need them
        return list if item is None else (lambda v: list(map(item, v)))
    if t == "map":
        c = _build(schema["values"], named, kind, memo)
        if kind == "hash":
            if c is None:
                return lambda v: tuple(sorted(v.items(), key=_KEY0))
            return lambda v: tuple(sorted(((k, c(x)) for k, x in v.items()), key=_KEY0))
        if c is None:
            return lambda v: v if isinstance(v, dict) else dict(v)
        return lambda v: {k: c(x) for k, x in map_items(v)}
    if t in PRIMITIVES:  # {"type": "long", "logicalType": ...} etc.
        return _canonical_float if kind == "hash" and t in ("float", "double") else None
    return None  # enum, fixed


def _build_record(schema: dict, named: dict, kind: str, memo: dict) -> Callable[[Any], Any]:
    """Converter of ``kind`` for a parsed record type (never identity: records become tuples)."""
    lazy = memo[schema["name"]] = _Lazy()
    names = [f["name"] for f in schema["fields"]]
    convs = [_build(f["type"], named, kind, memo) for f in schema["fields"]]
    lazy.fn = _record_hash(names, convs) if kind == "hash" else _record_write(names, convs)
    return lazy.fn if not any(isinstance(c, _Lazy) for c in convs) else lazy


_KEY0 = itemgetter(0)


def _first_ok(convs, v):
    for c in convs:
        try:
            return c(v)
        except (TypeError, ValueError, AttributeError, KeyError):
            continue
    return v


def _record_hash(names, convs):
    if all(c is None for c in convs):
        return lambda d: tuple(d.values())
    pairs = list(zip(names, convs))
    return lambda d: tuple(d[n] if c is None else c(d[n]) for n, c in pairs)


def _record_write(names, convs):
    if all(c is None for c in convs):
        return lambda v: v if v.__class__ is dict else dict(zip(names, v))
    pairs = list(zip(names, convs))

    def conv(v):
        if not isinstance(v, dict):
            v = dict(zip(names, v))
        return {n: (v[n] if c is None or v[n] is None else c(v[n])) for n, c in pairs}

    return conv


def strip_logical(schema: Any) -> Any:
    """``schema`` without its logical types: what fastavro reads as the plain values."""
    if isinstance(schema, list):
        return [strip_logical(s) for s in schema]
    if isinstance(schema, dict):
        return {k: strip_logical(v) for k, v in schema.items() if k != "logicalType"}
    return schema
