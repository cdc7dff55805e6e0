"""Reading tables for the CLI's Spark-backed commands, and DDL column lists as Spark schemas.

Guarantees: a read that fails raises `ConfigError` whose first line is
Spark's own cause, plus the package to add when a reader is missing (Delta at the running Spark
version, a JDBC driver). csv and json are read strictly (``mode=FAILFAST``) unless the options
say otherwise: a malformed record fails the read — at load when Spark's schema inference meets
it, else at the first action — and `malformed_input_error` phrases that failure (the file, the
line, and ``-O mode=PERMISSIVE``) wherever the action runs.

Imports PySpark only when a table is read: the CLI's commands that need no Spark start fast.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING
from urllib.parse import unquote

from cdc_emitter.errors import ConfigError, SchemaError, shorten
from cdc_emitter.spark.errors import spark_error_text
from cdc_emitter.spark.malformed import find_malformed_line
from cdc_emitter.spark.session import delta_package, spark_session
from cdc_emitter.spark.sources import local_path

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructType

__all__ = [
    "FORMATS",
    "STRICT_FORMATS",
    "columns_struct",
    "malformed_input_error",
    "read_table",
    "spark_struct",
    "strict_options",
]

#: The formats ``export`` and ``schema --from`` read.
FORMATS = ["parquet", "csv", "json", "orc", "delta", "jdbc", "table", "avro", "text"]
#: The formats `read_table` reads with ``mode=FAILFAST`` unless the options give a ``mode``.
STRICT_FORMATS = ("csv", "json")

_SOURCE_HINTS = {
    "delta": "Spark has no Delta Lake reader loaded: add --packages {delta}",
    "jdbc": "Spark needs the database's JDBC driver: add --packages with the driver's Maven "
    "coordinates (e.g. org.postgresql:postgresql:42.7.4), -O driver=CLASS (e.g. "
    "org.postgresql.Driver) and -O url=jdbc:...",
}


def read_table(spark: SparkSession, source: str, fmt: str, options: Mapping[str, str]) -> DataFrame:
    """A DataFrame for SOURCE; errors reading it become ConfigError (exit 2, no traceback).

    csv and json are read with ``mode=FAILFAST`` unless ``options`` has a ``mode`` (any case
    of the key): Spark's default, PERMISSIVE, turns a garbled line into a row of nulls that
    would be exported. A malformed record found at load (json's schema inference, which reads
    every record) fails here; one found later fails the action that reads the rows, whose
    error `malformed_input_error` phrases.

    Args:
        spark: The session to read with.
        source: A path or URI (a table name with ``table``, a ``dbtable`` with ``jdbc``).
        fmt: One of `FORMATS`.
        options: Spark reader options (``-O``), passed on as given.

    Returns:
        The DataFrame (nothing read yet but the schema).

    Raises:
        ConfigError: Spark cannot read SOURCE (its cause, and the package to add when the
            reader is missing), or a record of it is malformed (its file and line).
    """
    opts = strict_options(fmt, options)
    try:
        if fmt == "table":
            return spark.read.options(**opts).table(source)
        if fmt == "jdbc":
            opts.setdefault("dbtable", source)
            return spark.read.format("jdbc").options(**opts).load()
        return spark.read.format(fmt).options(**opts).load(source)
    except Exception as exc:  # noqa: BLE001 - Spark raises many types; all mean "cannot read"
        malformed = malformed_input_error(exc, source, fmt, opts)
        if malformed is not None:
            raise malformed from exc
        text = spark_error_text(exc)
        missing = ("DATA_SOURCE_NOT_FOUND", "No suitable driver", "ClassNotFoundException")
        hint = _SOURCE_HINTS.get(fmt) if any(m in text for m in missing) else None
        if hint is not None:
            hint = hint.format(
                delta=delta_package(spark.version)
                or f"with the Delta Lake package built for Spark {spark.version}"
            )
        raise ConfigError(
            f"cannot read {fmt} source {source!r}: {text}" + (f"\n{hint}" if hint else "")
        ) from exc


def strict_options(fmt: str, options: Mapping[str, str]) -> dict[str, str]:
    """``options`` with ``mode=FAILFAST`` added for the `STRICT_FORMATS` when they give no
    ``mode`` (Spark's option keys are case-insensitive).

    Args:
        fmt: The format read.
        options: The reader options given.

    Returns:
        A new dict of the options.
    """
    opts = dict(options)
    if fmt in STRICT_FORMATS and not any(key.lower() == "mode" for key in opts):
        opts["mode"] = "FAILFAST"
    return opts


#: What Spark 3.5 and 4 say of a record FAILFAST refuses (the error class, and its text).
_MALFORMED_MARKERS = (
    "MALFORMED_RECORD_IN_PARSING",
    "Malformed records are detected in record parsing",
    "MALFORMED_RECORD_IN_SCHEMA_INFERENCE",
    "Malformed records are detected in schema inference",  # Spark 3.5, json's inference
    "MALFORMED_CSV_RECORD",
    "Malformed CSV record",
)
_OPT_OUT = (
    "fix the file, or pass -O mode=PERMISSIVE to read malformed records as nulls "
    "(-O mode=DROPMALFORMED to skip them)"
)


def malformed_input_error(
    exc: BaseException,
    source: str | Sequence[str | None],
    fmt: str,
    options: Mapping[str, str],
) -> ConfigError | None:
    """Our error for a Spark failure caused by a malformed csv or json record (FAILFAST).

    Spark raises it lazily, from whichever action first reads the rows (for ``export``, the
    sink's write), and names at most the file: the line is found by reading the local file
    again in Python with the same options (`find_malformed_line`).

    Args:
        exc: What the action (or the load) raised; its causes are looked at too.
        source: The SOURCE read, or several (SOURCE and ``--previous``; None entries are
            skipped): the one holding the malformed line is named.
        fmt: The format read; only csv and json records are malformed in this sense.
        options: The reader options the sources were read with.

    Returns:
        A ConfigError whose one line names the file, the line number and the line (cut to 80
        characters) when the file is local, and the opt-out ``-O mode=PERMISSIVE``; None when
        ``exc`` is not Spark refusing a malformed record (raise ``exc`` itself then).
    """
    if fmt not in STRICT_FORMATS:
        return None
    text = _error_text(exc)
    if not any(marker in text for marker in _MALFORMED_MARKERS):
        return None
    sources = [source] if isinstance(source, str) else [s for s in source if s]
    named = re.search(r"error while reading file (\S+?)\.?(?:\s|$)", text)
    record = _spark_record(text)
    # the file Spark names, else each source: the first local one with a malformed line
    candidates: list[tuple[str, str]] = []  # (local path, how to name it)
    if named is not None:
        uri = unquote(named.group(1))
        local = local_path(uri)
        shown = _shown(local, sources) if local is not None else uri
        candidates.append((local or "", shown))
    else:
        candidates.extend((local_path(s) or "", s) for s in sources)
    for local, shown in candidates:
        if not local or not os.path.exists(local):
            continue
        found = find_malformed_line(local, fmt, options, record=record)
        if found is not None:
            if found.path != local:
                shown = _shown(found.path, sources)
            return ConfigError(
                f"malformed {fmt} record in {shorten(shown, 160)!r} at line {found.number} "
                f"({found.reason}): {shorten(found.text, 80)!r}; {_OPT_OUT}"
            )
    where = " or ".join(repr(shorten(shown, 160)) for _, shown in candidates) or "the input"
    quoted = f": {shorten(record, 80)!r}" if record else ""
    return ConfigError(f"malformed {fmt} record in {where}{quoted}; {_OPT_OUT}")


def _error_text(exc: BaseException) -> str:
    """All Spark says of ``exc``: its text, its Java causes' and its Python causes'."""
    parts: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(seen) < 10:
        seen.add(id(current))
        try:
            parts.append(str(current))
        except Exception:  # noqa: BLE001 - the JVM may be gone
            parts.append(type(current).__name__)
        java = getattr(current, "java_exception", None)
        for _depth in range(10):
            if java is None:
                break
            try:
                parts.append(str(java.toString()))
                java = java.getCause()
            except Exception:  # noqa: BLE001 - the JVM may be gone
                break
        current = current.__cause__ or current.__context__
    return "\n".join(parts)


def _spark_record(text: str) -> str | None:
    """The malformed record as Spark quotes it (csv only: json's is ``_corrupt_record``)."""
    match = re.search(r"Malformed CSV record: ?(.*?)(?: SQLSTATE: \w+)?$", text, re.M)
    if match and match.group(1).strip():
        return match.group(1)
    return None


def _shown(local: str, sources: Sequence[str]) -> str:
    """``local`` as the user named it: a SOURCE itself, or a file under a SOURCE directory."""
    real = os.path.realpath(local)
    for source in sources:
        base = local_path(source)
        if base is None:
            continue
        root = os.path.realpath(base)
        if real == root:
            return source
        if real.startswith(root.rstrip(os.sep) + os.sep):
            return os.path.join(source, os.path.relpath(real, root))
    return local


def columns_struct(columns: str) -> StructType:
    """The StructType of a DDL column list: the pure parser, else Spark's parser."""
    from cdc_emitter.spark.ddl import DdlUnknown, parse_ddl_columns

    try:
        return parse_ddl_columns(columns)
    except SchemaError as exc:
        shown = columns if len(columns) <= 60 else f"{columns[:57]}..."
        raise SchemaError(f"--columns {shown!r}: {exc}") from None
    except (DdlUnknown, ValueError):
        pass
    spark = spark_session("cdc-emitter schema")
    from pyspark.sql.types import StructType

    try:
        struct = spark_struct(spark, columns)
    except Exception as exc:  # noqa: BLE001 - Spark's parse errors
        first = str(exc).strip().splitlines()[0]
        raise SchemaError(f"cannot parse --columns {columns!r}: {first}") from exc
    if not isinstance(struct, StructType):
        raise SchemaError(f"--columns {columns!r} is not a list of columns")
    return struct


def spark_struct(spark: SparkSession, columns: str) -> DataType:
    """Spark's StructType of the DDL column list ``columns``, parsed by the JVM of ``spark`` (a
    running classic session, which both parsers need): ``StructType.fromDDL`` from PySpark 4;
    before, the parser PySpark 3.5's ``createDataFrame`` uses for a DDL schema (an empty
    DataFrame of those columns would refuse ``varchar``)."""
    from pyspark.sql import types

    if hasattr(types.StructType, "fromDDL"):
        return types.StructType.fromDDL(columns)
    return types._parse_datatype_string(columns)
