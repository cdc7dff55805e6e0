"""Reading tables for the CLI's Spark-backed commands, and DDL column lists as Spark schemas.

Guarantees: a read that fails raises `ConfigError` whose first line is
Spark's own cause, plus the package to add when a reader is missing (Delta at the running Spark
version, a JDBC driver).

Imports PySpark only when a table is read: the CLI's commands that need no Spark start fast.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from cdc_emitter.errors import ConfigError, SchemaError
from cdc_emitter.spark.errors import spark_error_text
from cdc_emitter.spark.session import delta_package, spark_session

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructType

__all__ = ["FORMATS", "columns_struct", "read_table", "spark_struct"]

#: The formats ``export`` and ``schema --from`` read.
FORMATS = ["parquet", "csv", "json", "orc", "delta", "jdbc", "table", "avro", "text"]

_SOURCE_HINTS = {
    "delta": "Spark has no Delta Lake reader loaded: add --packages {delta}",
    "jdbc": "Spark needs the database's JDBC driver: add --packages with the driver's Maven "
    "coordinates (e.g. org.postgresql:postgresql:42.7.4), -O driver=CLASS (e.g. "
    "org.postgresql.Driver) and -O url=jdbc:...",
}


def read_table(spark: SparkSession, source: str, fmt: str, options: Mapping[str, str]) -> DataFrame:
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


def columns_struct(columns: str) -> StructType:
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


def spark_struct(spark: SparkSession, columns: str) -> DataType:
    """Spark's StructType of the DDL column list ``columns``, parsed by the JVM of ``spark`` (a
    running classic session, which both parsers need): ``StructType.fromDDL`` from PySpark 4;
    before, the parser PySpark 3.5's ``createDataFrame`` uses for a DDL schema (an empty
    DataFrame of those columns would refuse ``varchar``)."""
    from pyspark.sql import types

    if hasattr(types.StructType, "fromDDL"):
        return types.StructType.fromDDL(columns)
    return types._parse_datatype_string(columns)
