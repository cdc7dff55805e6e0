"""Spark sessions and table reading for the CLI's Spark-backed commands (``export``, ``schema``).

Guarantees:
  * a session or a read that fails raises :class:`~cdc_emitter.errors.ConfigError` whose first
    line is Spark's own cause (the Java exception behind a Py4J error), plus the package to add
    when a reader is missing (Delta at the running Spark version, a JDBC driver);
  * the session's executors run the interpreter this process runs (the sink encodes there).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from cdc_emitter.errors import ConfigError, SchemaError

#: The formats ``export`` and ``schema --from`` read.
FORMATS = ["parquet", "csv", "json", "orc", "delta", "jdbc", "table", "avro", "text"]

#: The Delta Lake package built for each Spark major.minor version (the one --format delta needs).
DELTA_PACKAGES = {
    "3.5": "io.delta:delta-spark_2.12:3.3.2",
    "4.0": "io.delta:delta-spark_2.13:4.0.0",
    "4.1": "io.delta:delta-spark_4.1_2.13:4.4.0",
    "4.2": "io.delta:delta-spark_4.2_2.13:4.4.0",
}


def delta_package(spark_version: str) -> str | None:
    """The Delta Lake package built for Spark ``spark_version`` (``4.1.1``), or None when Delta
    publishes none for that release (see :data:`DELTA_PACKAGES`)."""
    return DELTA_PACKAGES.get(".".join(spark_version.split(".")[:2]))


_DELTA_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}

_SOURCE_HINTS = {
    "delta": "Spark has no Delta Lake reader loaded: add --packages {delta}",
    "jdbc": "Spark needs the database's JDBC driver: add --packages with the driver's Maven "
    "coordinates (e.g. org.postgresql:postgresql:42.7.4), -O driver=CLASS (e.g. "
    "org.postgresql.Driver) and -O url=jdbc:...",
}


def spark_session(
    app: str,
    packages: Sequence[str] = (),
    conf: dict | None = None,
    fmt: str | None = None,
    remote: str | None = None,
) -> Any:
    """A Spark session loading the sink's packages and ``packages``, with ``conf`` and the
    settings reading ``fmt`` needs; with ``remote`` (``sc://host:port``, or ``SPARK_REMOTE``), a
    Spark Connect session instead, which loads nothing itself (its server does)."""
    from pyspark.sql import SparkSession

    remote = remote or os.environ.get("SPARK_REMOTE") or None
    if remote is not None:
        if packages or conf:
            raise ConfigError(
                f"--packages and --conf do not apply to a Spark Connect session ({remote}): its "
                "server loads packages and holds the configuration (start it with --packages)"
            )
        try:
            return SparkSession.builder.remote(remote).getOrCreate()
        except Exception as exc:  # noqa: BLE001 - no server, or the Connect client's modules missing
            raise ConfigError(
                f"cannot connect to Spark at {remote}: {spark_error_text(exc)} "
                "(the client needs pip install 'cdc-emitter[connect]')"
            ) from exc
    # executors run this interpreter when the sink's Python data path is used
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from cdc_emitter.spark.setup import configure_spark

    builder = (
        SparkSession.builder.appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "true" if sys.stderr.isatty() else "false")
        .config("spark.sql.session.timeZone", "UTC")
    )
    builder = configure_spark(builder, packages)
    for key, value in reader_conf(fmt, packages, conf).items():
        builder = builder.config(key, value)
    try:
        with _jvm_output_to_stderr():
            spark = builder.getOrCreate()
    except Exception as exc:  # noqa: BLE001 - e.g. a package Maven Central does not have
        raise ConfigError(f"cannot start Spark: {spark_error_text(exc)}") from exc
    spark.sparkContext.setLogLevel("ERROR")
    return spark


@contextlib.contextmanager
def _jvm_output_to_stderr() -> Iterator[None]:
    """While a session starts, this process's standard output is its standard error: the JVM
    that PySpark launches inherits it, and what the JVM prints (Spark 3.5's Ivy prints
    ``:: loading settings ::`` when it resolves packages) must not mix into a command's output
    (``--json``). Python's own standard output is put back after."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def spark_struct(spark: Any, columns: str) -> Any:
    """Spark's StructType of the DDL column list ``columns``, parsed by the JVM of ``spark`` (a
    running classic session, which both parsers need): ``StructType.fromDDL`` from PySpark 4;
    before, the parser PySpark 3.5's ``createDataFrame`` uses for a DDL schema (an empty
    DataFrame of those columns would refuse ``varchar``)."""
    from pyspark.sql import types

    if hasattr(types.StructType, "fromDDL"):
        return types.StructType.fromDDL(columns)
    return types._parse_datatype_string(columns)


def spark_error_text(exc: BaseException) -> str:
    """The first line of what Spark says: the Java exception behind a Py4J error, if any."""
    java = getattr(exc, "java_exception", None)
    text = ""
    if java is not None:
        try:
            text = str(java.toString())
        except Exception:  # noqa: BLE001 - the JVM may be gone
            text = ""
    text = (text or str(exc)).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def reader_conf(fmt: str | None, packages: Sequence[str], conf: dict | None) -> dict:
    """Spark settings for reading ``fmt``: Delta's extension and catalog when its package is
    loaded (Delta refuses to read without them); the user's --conf wins."""
    out = dict(conf or {})
    if fmt == "delta" and any(c.startswith("io.delta:") for c in packages):
        for key, value in _DELTA_CONF.items():
            out.setdefault(key, value)
    return out


def read_table(spark: Any, source: str, fmt: str, options: dict) -> Any:
    """A DataFrame for SOURCE; errors reading it become ConfigError (exit 2, no traceback)."""
    try:
        if fmt == "table":
            return spark.read.options(**options).table(source)
        if fmt == "jdbc":
            opts = dict(options)
            opts.setdefault("dbtable", source)
            return spark.read.format("jdbc").options(**opts).load()
        return spark.read.format(fmt).options(**options).load(source)
    except Exception as exc:  # noqa: BLE001 - Spark raises many types; all mean "cannot read"
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


def columns_struct(columns: str) -> Any:
    """The StructType of a DDL column list: the pure parser, else Spark's parser."""
    from cdc_emitter.spark.schema import DdlUnknown, parse_ddl_columns

    try:
        return parse_ddl_columns(columns)
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
