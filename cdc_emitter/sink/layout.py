"""A batch's columns as the sink writes them: its data columns mapped to the Avro ``data``
record, its diff and time columns checked, and the rows selected as data, time and diff.

Guarantees:

- a column of a type the sink cannot write, a missing time column, or a diff or time column that
  is not an integer raises `SchemaError` before any Spark work;
- collated strings are written, and compared, by their bytes.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from cdc_emitter.errors import ConfigError, SchemaError
from cdc_emitter.sink.batch import Batch
from cdc_emitter.spark.columns import DIFF, TIME  # one name per column, every path
from cdc_emitter.spark.schema import data_schema, without_collation

INTEGRAL = ("bigint", "int", "smallint", "tinyint")

#: ((data columns, diff column), the data Columns, the diff Column): see `row_columns`
RowColumns = tuple[tuple, list[Column], Column]


class Layout(NamedTuple):
    """A batch's columns as the sink writes them."""

    schema: T.StructType  # the input's schema, collations taken off
    data_cols: list[str]
    diff_col: str | None  # None: every row counts +1
    avro_data: dict  # the Avro data record
    schema_text: str  # ``avro_data`` as compact JSON


def without_collations(df: DataFrame) -> DataFrame:
    """``df`` with collated strings cast to plain ones: written and compared by their bytes."""
    plain = {f.name: without_collation(f.dataType) for f in df.schema.fields}
    if not any(plain.values()):
        return df
    return df.select(
        *[F.col(c).cast(t).alias(c) if t is not None else F.col(c) for c, t in plain.items()]
    )


def layout_of(
    schema: T.StructType, fixed_time: int | None, *, time_column: str | None, diff_column: str
) -> Layout:
    """The batch's columns: its data columns mapped to the Avro data record, and its diff
    and time columns checked to be integers."""
    columns = schema.fieldNames()
    diff_col = diff_column if diff_column in columns else None
    if time_column is not None and time_column not in columns:
        raise SchemaError(f"time column {time_column!r} is missing (columns: {columns})")
    if time_column is not None and fixed_time is not None:
        raise ConfigError("write(time=...) conflicts with time_column: the rows carry their times")
    data_cols = [c for c in columns if c not in (diff_column, time_column)]
    avro_data = data_schema(
        T.StructType([schema[c] for c in data_cols])
    )  # SchemaError names the column
    for name in filter(None, (diff_col, time_column)):
        if schema[name].dataType.simpleString() not in INTEGRAL:
            raise SchemaError(
                f"column {name!r} must be an integer type (long, int, short, byte), "
                f"not {schema[name].dataType.simpleString()}"
            )
    schema_text = json.dumps(avro_data, separators=(",", ":"))
    return Layout(schema, data_cols, diff_col, avro_data, schema_text)


def row_columns(
    cached: RowColumns | None, data_cols: list[str], diff_col: str | None
) -> RowColumns:
    """The data and diff Columns of this layout: ``cached`` when it is the same layout's (each
    Column made is round trips to the JVM)."""
    if cached is not None and cached[0] == (data_cols, diff_col):
        return cached
    diff_expr = F.col(diff_col).cast("long") if diff_col else F.lit(1).cast("long")
    return ((data_cols, diff_col), [F.col(c) for c in data_cols], diff_expr.alias(DIFF))


def prepared_rows(
    df: DataFrame,
    batch: Batch,
    columns: RowColumns,
    *,
    jvm: bool,
    time_column: str | None,
    late: Any,
) -> DataFrame:
    """The rows as data columns, time and diff (nothing computed yet). The JVM path takes a
    batch's one time as binary literals, which Spark does not write into the code it
    generates (MessagePlan.messages), or does without it (MessagePlan.updates): no time
    column."""
    _, data_columns, diff_column = columns
    if batch.time is not None:
        time_columns = [] if jvm else [F.lit(batch.time).cast("long").alias(TIME)]
    else:
        assert time_column is not None  # column mode
        time_expr = F.col(time_column).cast("long")
        if late == "advance":
            time_expr = F.when(
                (time_expr >= 0) & (time_expr < batch.lower), F.lit(batch.lower).cast("long")
            ).otherwise(time_expr)
        time_columns = [time_expr.alias(TIME)]
    return df.select(*data_columns, *time_columns, diff_column)
