"""DDL column lists (``"id long not null, name string"``) as Spark schemas, without the JVM.

A pure parser for the column lists ``cdc-emitter schema --columns`` and ``export --columns``
take, so that the common case needs no Spark session; anything it does not know is left to
Spark's own parser (`DdlUnknown`).
"""

from __future__ import annotations

import difflib
import re
from typing import Any

from pyspark.sql import types as T

from cdc_emitter.errors import SchemaError

__all__ = ["DdlUnknown", "parse_ddl_columns"]


_DDL_TOKEN = re.compile(
    r"\s*(?:(`(?:[^`]|``)*`)|([A-Za-z_][A-Za-z0-9_]*)|(\d+)|('(?:[^'\\]|\\.)*')|(.))"
)
_SIMPLE_TYPES = {
    "boolean": "BooleanType",
    "tinyint": "ByteType",
    "byte": "ByteType",
    "smallint": "ShortType",
    "short": "ShortType",
    "int": "IntegerType",
    "integer": "IntegerType",
    "bigint": "LongType",
    "long": "LongType",
    "float": "FloatType",
    "real": "FloatType",
    "double": "DoubleType",
    "string": "StringType",
    "binary": "BinaryType",
    "date": "DateType",
    "timestamp": "TimestampType",
    "timestamp_ltz": "TimestampType",
    "timestamp_ntz": "TimestampNTZType",
}


#: Spark types the pure parser leaves to Spark (Spark's parser knows them; the CDC format may not).
_SPARK_ONLY_TYPES = frozenset(
    ("interval", "variant", "void", "character", "time", "geometry", "geography", "object")
)
_TYPE_NAMES = ", ".join(
    sorted(
        {*_SIMPLE_TYPES, "varchar(n)", "char(n)", "decimal(p,s)", "array<>", "map<,>", "struct<>"}
    )
)


class DdlUnknown(Exception):
    """Syntax the pure parser does not handle: let Spark parse it."""


def _ddl_tokens(text: str) -> list[str]:
    out, pos = [], 0
    text = text.strip()
    while pos < len(text):
        m = _DDL_TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise DdlUnknown(text[pos:])
        pos = m.end()
        out.append(m.group(0).strip())
    return [t for t in out if t]


def parse_ddl_columns(text: str) -> Any:
    """``"id long not null, price int"`` → a pyspark StructType, without starting Spark.

    Raises:
        SchemaError: A column without a type, or a type Spark does not know either (``lng``).
        DdlUnknown: Syntax it does not know (the caller then asks Spark).
    """
    toks = _ddl_tokens(text)
    pos = 0

    def peek(k: int = 0) -> str | None:
        return toks[pos + k] if pos + k < len(toks) else None

    def take(expected: str | None = None) -> str:
        nonlocal pos
        tok = peek()
        if tok is None or (expected is not None and tok.lower() != expected):
            raise DdlUnknown(f"expected {expected or 'more'} at {tok!r}")
        pos += 1
        return tok

    def name() -> str:
        tok = take()
        if tok.startswith("`"):
            return tok[1:-1].replace("``", "`")
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", tok):
            raise DdlUnknown(tok)
        return tok

    def dtype() -> Any:
        word = take().lower()
        if word in _SIMPLE_TYPES:
            return getattr(T, _SIMPLE_TYPES[word])()
        if word in ("varchar", "char"):
            take("(")
            length = int(take())
            take(")")
            kind = getattr(T, "VarcharType" if word == "varchar" else "CharType", None)
            return T.StringType() if kind is None else kind(length)
        if word in ("decimal", "dec", "numeric"):
            precision, scale = 10, 0
            if peek() == "(":
                take("(")
                precision = int(take())
                if peek() == ",":
                    take(",")
                    scale = int(take())
                take(")")
            return T.DecimalType(precision, scale)
        if word == "array":
            take("<")
            element = dtype()
            take(">")
            return T.ArrayType(element, True)
        if word == "map":
            take("<")
            key = dtype()
            take(",")
            value = dtype()
            take(">")
            return T.MapType(key, value, True)
        if word == "struct":
            take("<")
            fields = []
            while peek() != ">":
                fname = name()
                if peek() == ":":
                    take(":")
                fields.append(field(fname))
                if peek() == ",":
                    take(",")
            take(">")
            return T.StructType(fields)
        if word in _SPARK_ONLY_TYPES or not re.fullmatch(r"[a-z_][a-z0-9_]*", word):
            raise DdlUnknown(word)
        close = difflib.get_close_matches(word, [*_SIMPLE_TYPES, "decimal", "varchar"], 1)
        hint = f"did you mean {close[0]!r}?" if close else f"Spark's types are {_TYPE_NAMES}"
        raise SchemaError(f"unknown type {word!r} ({hint})")

    def field(fname: str) -> Any:
        if peek() in (None, ",", ">"):
            raise SchemaError(f"column {fname!r} has no type (write it as: {fname} TYPE)")
        try:
            ftype = dtype()
        except SchemaError as exc:
            raise SchemaError(f"column {fname!r}: {exc}") from None
        nullable = True
        while (word := peek()) is not None and word.lower() in ("not", "comment"):
            if take().lower() == "not":
                take("null")
                nullable = False
            else:
                take()  # the comment string
        return T.StructField(fname, ftype, nullable)

    fields = []
    while pos < len(toks):
        fields.append(field(name()))
        if peek() is not None:
            take(",")
    if not fields:
        raise DdlUnknown("no columns")
    return T.StructType(fields)
