"""Spark Columns every way of writing a batch shares, and the Spark reader too: the names of the
columns a batch is prepared into; rows as every data path groups (`canonical`,
`normalized`), hashes (`hash_columns`) and encodes them (`encoded_data`); an
update's share of the batch digest; and how buckets map to Spark's hash partitions
(`bucket_of`). Equal rows give equal keys, hashes and bytes on every path — the JVM data
path (`cdc_emitter.sink.plan`), the driver's (`EncodedRows`) and our encoders'
(`cdc_emitter.sink.python_path`) — so a re-run compares digests whichever path wrote first.

Nothing here runs a Spark job but `EncodedRows.collect` and `arrow_table`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

from pyspark.sql import functions as F
from pyspark.sql import types as T

from cdc_emitter.protocol.schemas import kind, resolve
from cdc_emitter.spark.schema import contains_map, contains_type

__all__ = [
    "TIME",
    "DIFF",
    "HASH",
    "canonical",
    "group_keys",
    "hash_columns",
    "encoded_data",
    "digest_share",
    "not_null_long",
    "declared_as_avro",
    "normalized",
    "spark_hash_long",
    "bucket_of",
    "partition_labels",
    "EncodedRows",
    "arrow_table",
]

#: The columns a batch is prepared into, one name each on every way of writing it.
TIME = "__cdc_time"
DIFF = "__cdc_diff"
HASH = "__cdc_hash"


def canonical(c: Any, dtype: Any) -> Any:
    """An expression equal for equal values that Spark can group on (maps → sorted entry arrays)."""
    if not contains_map(dtype):
        return c
    if isinstance(dtype, T.MapType):
        if contains_map(dtype.valueType):
            entries = F.transform(
                F.map_entries(c),
                lambda e: F.struct(
                    e["key"].alias("key"), canonical(e["value"], dtype.valueType).alias("value")
                ),
            )
        else:
            entries = F.map_entries(c)
        return F.array_sort(entries)
    if isinstance(dtype, T.ArrayType):
        return F.transform(c, lambda e: canonical(e, dtype.elementType))
    inner = F.struct(*[canonical(c[f.name], f.dataType).alias(f.name) for f in dtype.fields])
    return F.when(c.isNull(), F.lit(None)).otherwise(inner)


def group_keys(schema: Any, data_cols: Sequence[str]) -> tuple[list, list]:
    """Grouping expressions for the data columns (maps canonicalised) and the ``first`` aggregates
    that bring back the original map-holding columns."""
    keys, firsts = [], []
    for i, c in enumerate(data_cols):
        dtype = schema[c].dataType
        if contains_map(dtype):
            keys.append(canonical(F.col(c), dtype).alias(f"__cdc_key{i}"))
            firsts.append(F.first(F.col(c)).alias(c))
        else:
            keys.append(F.col(c))
    return keys, firsts


def spark_hash_long(value: int, seed: int = 42) -> int:
    """Spark's ``hash`` (Murmur3 x86 32-bit) of one long column: what its hash partitioning uses."""

    def mix_k1(k: int) -> int:
        k = (k * 0xCC9E2D51) & 0xFFFFFFFF
        k = ((k << 15) | (k >> 17)) & 0xFFFFFFFF
        return (k * 0x1B873593) & 0xFFFFFFFF

    def mix_h1(h: int, k: int) -> int:
        h ^= k
        h = ((h << 13) | (h >> 19)) & 0xFFFFFFFF
        return (h * 5 + 0xE6546B64) & 0xFFFFFFFF

    value &= 0xFFFFFFFFFFFFFFFF
    h = mix_h1(seed & 0xFFFFFFFF, mix_k1(value & 0xFFFFFFFF))
    h = mix_h1(h, mix_k1(value >> 32))
    h ^= 8
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & 0xFFFFFFFF
    h ^= h >> 16
    return h - (1 << 32) if h >= 1 << 31 else h


def bucket_of(order: Any, buckets: int) -> Any:
    """The bucket of a row whose hash is ``order``: one of `partition_labels` (longs), so
    that ``repartition(buckets, bucket)`` gives every bucket a task of its own."""
    labels = F.array(*[F.lit(label).cast("long") for label in partition_labels(buckets)])
    return F.element_at(labels, (F.pmod(order, F.lit(buckets)) + 1).cast("int"))


_LABELS: dict[int, tuple[int, ...]] = {}


def partition_labels(count: int) -> tuple[int, ...]:
    """``count`` longs, the i-th of which Spark's hash partitioning into ``count`` partitions
    sends to partition i (the smallest such non-negative long)."""
    if count not in _LABELS:
        labels: list[int | None] = [None] * count
        missing, value = count, 0
        while missing:
            partition = spark_hash_long(value) % count  # Python's % is Spark's pmod here
            if labels[partition] is None:
                labels[partition], missing = value, missing - 1
            value += 1
        _LABELS[count] = tuple(labels)  # type: ignore[arg-type]
    return _LABELS[count]


def hash_columns(schema: Any, data_cols: Sequence[str]) -> list:
    """The data columns as every data path hashes them: maps as sorted entries
    (`canonical`), floats as Spark's grouping sees them (`normalized`)."""
    return [
        canonical(F.col(c), schema[c].dataType)
        if contains_map(schema[c].dataType)
        else normalized(F.col(c), schema[c].dataType, schema[c].nullable)
        for c in data_cols
    ]


def encoded_data(schema: Any, data_cols: Sequence[str], data_record: dict) -> Any:
    """Each row's data record as ``to_avro`` bytes, floats normalized (`normalized`), so
    rows that consolidate together encode to the same bytes. Not for data holding maps (equal
    maps can encode their entries in other orders)."""
    from pyspark.sql.avro.functions import to_avro

    data = [
        normalized(F.col(c), schema[c].dataType, schema[c].nullable).alias(c) for c in data_cols
    ]
    return to_avro(F.struct(*data), json.dumps(data_record))


def not_null_long(c: Any) -> Any:
    """A long column that is never null where it is used (a row with a null time or diff fails
    its batch first; sums are of at least one row), said so to Spark by ``coalesce``: given a
    column it thinks nullable and a non-null Avro type, Spark's Avro serializer logs, in every
    task of every batch, a warning that a null would fail."""
    return F.coalesce(c, F.lit(0).cast("long"))


def declared_as_avro(c: Any, dtype: Any, avro: Any) -> Any:
    """``c``, of Spark type ``dtype``, said not null wherever the Avro type ``avro`` has no null
    (each record's fields, each array's items and map's values, the value itself), so that
    ``to_avro(result, avro)`` encodes the same bytes as ``to_avro(c, avro)`` without Spark's Avro
    serializer warning, in every task, that a null would fail (``from_avro`` in PERMISSIVE mode
    declares every field nullable; in FAILFAST mode only the value itself). For a value that
    ``from_avro`` decoded: where the Avro type has no null there is none, and the defaults
    ``coalesce`` adds are never taken. Only what Spark declares nullable is rebuilt: an array
    whose items are declared as Avro says is not gone through. A union of more than null and
    one type is left as it is (Spark may warn there). ``avro`` is a whole schema: its names are
    resolved as Avro resolves them (by ``fastavro``), namespaces inherited."""
    import fastavro

    named: dict = {}
    parsed = fastavro.parse_schema(avro, named_schemas=named)
    return _declared(c, dtype, parsed, named, nullable=True)


def _gaps(dtype: Any, avro: Any, named: dict, nullable: bool) -> bool:
    """Whether Spark declares a null, at or below a value of ``dtype`` (itself ``nullable``),
    where ``avro`` (parsed by ``fastavro``, its named types in ``named``) has none."""
    avro = resolve(avro, named)
    if isinstance(avro, list):
        others = [b for b in avro if b != "null"]
        return len(others) == 1 and _gaps(
            dtype, others[0], named, nullable and len(others) == len(avro)
        )
    if nullable:
        return True
    avro_kind = kind(avro)
    if avro_kind == "record" and isinstance(dtype, T.StructType):
        types = {f["name"]: f["type"] for f in avro["fields"]}
        return any(
            f.name in types and _gaps(f.dataType, types[f.name], named, f.nullable)
            for f in dtype.fields
        )
    if avro_kind == "array" and isinstance(dtype, T.ArrayType):
        return _gaps(dtype.elementType, avro["items"], named, dtype.containsNull)
    if avro_kind == "map" and isinstance(dtype, T.MapType):
        return _gaps(dtype.valueType, avro["values"], named, dtype.valueContainsNull)
    return False


def _declared(c: Any, dtype: Any, avro: Any, named: dict, nullable: bool) -> Any:
    if not _gaps(dtype, avro, named, nullable):
        return c
    avro = resolve(avro, named)
    if isinstance(avro, list):  # null and one type: its value rebuilt where it is not null
        (other,) = [b for b in avro if b != "null"]
        inner = _declared(c, dtype, other, named, nullable=True)
        return F.when(c.isNull(), F.lit(None)).otherwise(inner) if "null" in avro else inner
    avro_kind = kind(avro)
    if avro_kind == "record" and isinstance(dtype, T.StructType):
        types = {f["name"]: f["type"] for f in avro["fields"]}
        if set(types) != set(dtype.names):
            return c
        # a field of a struct Spark thinks nullable is nullable too, whatever its own declaration
        return F.struct(
            *[
                _declared(c[f.name], f.dataType, types[f.name], named, nullable=True).alias(f.name)
                for f in dtype.fields
            ]
        )
    if avro_kind == "array" and isinstance(dtype, T.ArrayType):
        items = c
        if _gaps(dtype.elementType, avro["items"], named, dtype.containsNull):
            items = F.transform(
                c, lambda e: _declared(e, dtype.elementType, avro["items"], named, nullable=True)
            )
        return F.coalesce(items, F.array())
    if avro_kind == "map" and isinstance(dtype, T.MapType):
        values = c
        if _gaps(dtype.valueType, avro["values"], named, dtype.valueContainsNull):
            values = F.transform_values(
                c, lambda _k, v: _declared(v, dtype.valueType, avro["values"], named, nullable=True)
            )
        return F.coalesce(values, F.create_map())
    default = _default_literals().get(type(dtype))
    return c if default is None else F.coalesce(c, default(dtype))


@functools.cache
def _default_literals() -> dict:
    """A literal of each Spark type that ``from_avro`` decodes a non-record value to, by type:
    what `declared_as_avro` coalesces with (never taken). Casts of literals are folded
    by Spark's optimizer, before the serializer sees them."""
    import datetime
    import decimal

    def cast(value: Any) -> Any:
        return lambda t: F.lit(value).cast(t)

    return {
        T.BooleanType: lambda _t: F.lit(False),
        T.IntegerType: cast(0),
        T.LongType: cast(0),
        T.ShortType: cast(0),
        T.ByteType: cast(0),
        T.FloatType: cast(0.0),
        T.DoubleType: cast(0.0),
        T.DecimalType: cast(decimal.Decimal(0)),
        T.StringType: lambda _t: F.lit(""),
        T.BinaryType: lambda _t: F.lit(bytearray()),
        T.DateType: lambda _t: F.lit(datetime.date(1970, 1, 1)),
        T.TimestampType: lambda _t: F.timestamp_seconds(F.lit(0)),
        T.TimestampNTZType: cast(datetime.datetime(1970, 1, 1)),
    }


def digest_share(order: Any, diff: Any) -> Any:
    """An update's share of its batch's digest (the digest is their XOR, in any order):
    ``xxhash64(xxhash64(data, time), diff)``, ``order`` being the inner hash. Every data path
    computes the same (`cdc_emitter.sink.small_batch.consolidate` in numpy), so a re-run
    compares whichever path wrote the first attempt."""
    return F.xxhash64(order, diff)


def _has_float(dtype: Any) -> bool:
    return contains_type(dtype, (T.FloatType, T.DoubleType))


def normalized(c: Any, dtype: Any, nullable: bool) -> Any:
    """``c`` with every float as Spark's grouping sees it (-0.0 as 0.0, one NaN), nullability
    kept: rows that consolidate together then encode to the same bytes."""
    if not _has_float(dtype):
        return c
    if isinstance(dtype, (T.FloatType, T.DoubleType)):
        zero, nan = F.lit(0.0).cast(dtype), F.lit(float("nan")).cast(dtype)
        return F.when(F.isnan(c), nan).when(c == zero, zero).otherwise(c)
    if isinstance(dtype, T.ArrayType):
        return F.transform(c, lambda e: normalized(e, dtype.elementType, dtype.containsNull))
    inner = F.struct(
        *[normalized(c[f.name], f.dataType, f.nullable).alias(f.name) for f in dtype.fields]
    )
    return F.when(c.isNull(), F.lit(None)).otherwise(inner) if nullable else inner


class EncodedRows:
    """A small batch's rows for the driver to finish (`cdc_emitter.sink.small_batch`), in one
    narrow Spark job (no shuffle): ``data``, each row's data record encoded by ``to_avro``
    (floats normalized: equal rows, equal bytes); ``h``, Spark's ``xxhash64`` of its data
    columns — the distributed path's update hash before time and diff; ``t`` and ``d``, the
    time and diff columns as longs when the rows carry them. Built once per layout; not for
    data holding maps (equal maps can encode their entries in other orders)."""

    def __init__(
        self,
        *,
        schema: Any,
        data_cols: Sequence[str],
        data_record: dict,
        time_column: str | None,
        diff_column: str | None,
    ) -> None:
        self.columns = [
            encoded_data(schema, data_cols, data_record).alias("data"),
            F.xxhash64(*hash_columns(schema, data_cols)).alias("h"),
        ]
        if time_column is not None:
            self.columns.append(F.col(time_column).cast("long").alias("t"))
        if diff_column is not None:
            self.columns.append(F.col(diff_column).cast("long").alias("d"))

    @staticmethod
    def key_of(
        *,
        schema: Any,
        data_cols: Sequence[str],
        data_record: dict,
        time_column: str | None,
        diff_column: str | None,
    ) -> tuple:
        return schema.json(), tuple(data_cols), json.dumps(data_record), time_column, diff_column

    def collect(self, df: Any) -> Any:
        """The rows as a pyarrow Table (one Spark job)."""
        return arrow_table(df.select(*self.columns))


def arrow_table(rows: Any) -> Any:
    """A DataFrame of `EncodedRows`' columns (or
    `updates`') collected as a pyarrow Table (one Spark
    job)."""
    import pyarrow as pa

    if hasattr(rows, "toArrow"):  # pyspark >= 4.0, classic and Connect
        return rows.toArrow()
    collected = rows.collect()
    types = {
        "data": pa.binary(),
        "h": pa.int64(),
        "t": pa.int64(),
        "d": pa.int64(),
        "n": pa.int64(),
    }
    return pa.table(
        {n: pa.array([r[i] for r in collected], types[n]) for i, n in enumerate(rows.columns)}
    )
