"""The first malformed line of a local csv or json file, for a message that names it.

Spark's FAILFAST readers say that a record is malformed, not where: this re-reads a local file
with the same delimiter, quote, escape and header options and finds the line.

Pure: imports neither PySpark nor confluent_kafka.

Guarantees: `find_malformed_line` never raises for a file it cannot read: it returns None.
"""

from __future__ import annotations

import bz2
import csv
import gzip
import json
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import IO

from cdc_emitter.spark.data_files import data_files
from cdc_emitter.spark.sources import COMPRESSED_SUFFIXES

__all__ = ["MAX_SCAN_BYTES", "MalformedLine", "find_malformed_line"]

#: how much of a source `find_malformed_line` reads at most before giving up
MAX_SCAN_BYTES = 256 * 2**20


@dataclass(frozen=True)
class MalformedLine:
    """The first line of a local csv or json file that Spark's FAILFAST mode refuses.

    Attributes:
        path: The local file.
        number: Its line number, from 1.
        text: The line, without its line break.
        reason: Why: ``4 fields, the header has 3``, or what JSON's parser says.
    """

    path: str
    number: int
    text: str
    reason: str


def _option(options: Mapping[str, str], *names: str) -> str | None:
    """The value of the first of ``names`` in ``options`` (Spark's keys are case-insensitive)."""
    lowered = {k.lower(): v for k, v in options.items()}
    for name in names:
        if name.lower() in lowered:
            return lowered[name.lower()]
    return None


def _flag(options: Mapping[str, str], name: str) -> bool:
    return (_option(options, name) or "").strip().lower() == "true"


def find_malformed_line(
    path: str,
    fmt: str,
    options: Mapping[str, str],
    *,
    record: str | None = None,
    max_bytes: int = MAX_SCAN_BYTES,
) -> MalformedLine | None:
    """The first line of a local csv or json input that Spark's FAILFAST mode refuses.

    Re-reads the input with Spark's reader options that shape lines: for csv ``sep`` (or
    ``delimiter``), ``quote``, ``escape``, ``comment``, ``header``, ``multiLine`` and
    ``encoding``; blank lines are skipped, as Spark does. A csv line is malformed when its
    number of fields differs from the first line's (the header's) or it does not parse; a json
    line when it is not a JSON object or array. Files ending in ``.gz`` or ``.bz2`` are read
    decompressed; other compressed files are not read.

    Args:
        path: A local file, or a directory (its data files in name order).
        fmt: ``csv`` or ``json``; any other gives None.
        options: The reader options the input was read with.
        record: The malformed record as Spark quotes it, if known: the line equal to it counts
            as malformed too.
        max_bytes: Stop after reading this many bytes of the input (None found then).

    Returns:
        The first malformed line found, or None (none found, unreadable, or too big).
    """
    if fmt not in ("csv", "json"):
        return None
    files = data_files(path) if os.path.isdir(path) else iter([path])
    budget = max_bytes
    for file in files:
        try:
            size = os.path.getsize(file)
        except OSError:
            continue
        if size > budget:
            return None
        budget -= size
        try:
            found = (_csv_malformed if fmt == "csv" else _json_malformed)(file, options, record)
        except (OSError, UnicodeError, EOFError, ValueError):
            continue
        if found is not None:
            return found
    return None


def _open_text(path: str, options: Mapping[str, str], newline: str | None) -> IO[str]:
    encoding = _option(options, "encoding", "charset") or "utf-8"
    if encoding.replace("-", "").lower() == "utf8":
        encoding = "utf-8-sig"
    lower = path.lower()
    if lower.endswith(".gz"):
        return gzip.open(path, "rt", encoding=encoding, errors="replace", newline=newline)
    if lower.endswith(".bz2"):
        return bz2.open(path, "rt", encoding=encoding, errors="replace", newline=newline)
    if lower.endswith(COMPRESSED_SUFFIXES):
        raise ValueError("compressed by a codec Python does not read")
    return open(path, encoding=encoding, errors="replace", newline=newline)


def _spark_char(value: str | None, default: str) -> str:
    """A one-character option as Spark reads it: ``\\t``, ``\\u0001`` and ``\\\\`` escapes."""
    if value is None:
        return default
    if value == "\\t":
        return "\t"
    if re.fullmatch(r"\\u[0-9a-fA-F]{4}", value):
        return chr(int(value[2:], 16))
    if value == "\\\\":
        return "\\"
    return value


def _csv_malformed(
    path: str, options: Mapping[str, str], record: str | None
) -> MalformedLine | None:
    sep = _spark_char(_option(options, "sep", "delimiter"), ",")
    quote = _spark_char(_option(options, "quote"), '"')
    escape = _spark_char(_option(options, "escape"), "\\")
    comment = _spark_char(_option(options, "comment"), "\x00")
    header = _flag(options, "header")
    quoting = len(quote) == 1 and quote != "\x00"
    dialect = {
        "delimiter": sep,
        "quotechar": quote if quoting else None,
        "quoting": csv.QUOTE_MINIMAL if quoting else csv.QUOTE_NONE,
        "escapechar": escape if len(escape) == 1 and escape != quote else None,
        "doublequote": True,
        "strict": False,
    }

    def fields(line: str) -> int:
        if len(sep) != 1:
            return len(line.split(sep))
        if not quoting or quote not in line:
            return line.count(sep) + 1
        return len(next(csv.reader([line], **dialect)))  # type: ignore[arg-type]

    def skipped(line: str) -> bool:
        return not line.strip() or comment != "\x00" and line.startswith(comment)

    expected: int | None = None
    with _open_text(path, options, newline=None if not _flag(options, "multiLine") else "") as fh:
        if _flag(options, "multiLine") and len(sep) == 1:
            return _csv_multiline(path, fh, dialect, skipped, header, record)
        for number, raw in enumerate(fh, 1):
            line = raw.rstrip("\r\n")
            if skipped(line):
                continue
            try:
                count = fields(line)
            except csv.Error as exc:
                return MalformedLine(path, number, line, f"it does not parse: {exc}")
            if expected is None:
                expected = count
                continue
            if count != expected or line == record:
                first = "the header has" if header else "the first line has"
                return MalformedLine(path, number, line, f"{count} fields, {first} {expected}")
    return None


def _csv_multiline(path, fh, dialect, skipped, header, record) -> MalformedLine | None:
    """`_csv_malformed` for ``multiLine=true``: records may span lines (quoted line breaks)."""
    lines: list[str] = []

    def remembered() -> Iterator[str]:
        for raw in fh:
            lines.append(raw.rstrip("\r\n"))
            yield raw

    reader = csv.reader(remembered(), **dialect)
    expected: int | None = None
    start = 0
    while True:
        start = reader.line_num
        try:
            row = next(reader)
        except StopIteration:
            return None
        except csv.Error as exc:
            line = lines[start] if start < len(lines) else ""
            return MalformedLine(path, start + 1, line, f"it does not parse: {exc}")
        first_line = lines[start] if start < len(lines) else ""
        if not row or len(row) == 1 and not row[0].strip() or skipped(first_line):
            continue
        if expected is None:
            expected = len(row)
            continue
        if len(row) != expected or first_line == record:
            first = "the header has" if header else "the first record has"
            return MalformedLine(
                path, start + 1, first_line, f"{len(row)} fields, {first} {expected}"
            )


def _json_malformed(
    path: str, options: Mapping[str, str], record: str | None
) -> MalformedLine | None:
    single_quotes = (_option(options, "allowSingleQuotes") or "true").lower() != "false"
    with _open_text(path, options, newline=None) as fh:
        if _flag(options, "multiLine"):
            text = fh.read()
            try:
                json.loads(text)
            except json.JSONDecodeError as exc:
                lines = text.splitlines()
                line = lines[exc.lineno - 1] if 0 < exc.lineno <= len(lines) else ""
                return MalformedLine(path, exc.lineno, line, f"{exc.msg} at column {exc.colno}")
            return None
        for number, raw in enumerate(fh, 1):
            line = raw.rstrip("\r\n")
            if not line.strip():
                continue
            reason = _json_line_error(line, single_quotes)
            if reason is not None or line == record:
                return MalformedLine(path, number, line, reason or "Spark refused it")
    return None


def _json_line_error(line: str, single_quotes: bool) -> str | None:
    """Why a line of JSON lines is not a record Spark reads, or None."""
    try:
        value = json.loads(line)
    except json.JSONDecodeError as exc:
        if single_quotes and "'" in line:  # Spark's default allowSingleQuotes=true
            try:
                value = json.loads(_double_quoted(line))
            except json.JSONDecodeError:
                return f"{exc.msg} at column {exc.colno}"
        else:
            return f"{exc.msg} at column {exc.colno}"
    if not isinstance(value, (dict, list)):
        return f"a JSON {type(value).__name__ if value is not None else 'null'}, not an object"
    return None


def _double_quoted(line: str) -> str:
    """``line`` with its single-quoted strings double-quoted (as Jackson reads them)."""

    def swap(match: re.Match[str]) -> str:
        inner = match.group(1).replace("\\'", "'").replace('"', '\\"')
        return f'"{inner}"'

    return re.sub(r"'((?:[^'\\]|\\.)*)'", swap, line)
