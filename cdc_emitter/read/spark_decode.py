"""Decoding a CDCv2 topic with Spark, for `cdc_emitter.read.spark_reader.read_cdc`.

Spark's Kafka source reads each partition between two offsets, and ``from_avro`` decodes each
message by its union branch (spark-avro cannot read a top-level union): the update arrays and
the progress statements become columns. A message Spark cannot judge alone is marked for the
driver, which decodes it again with the local codec: a tombstone, a body Spark cannot decode,
and a body longer than Avro's encoding of what Spark read of it (Spark's reader ignores bytes to
spare, which the local codec refuses). Messages of another schema id than the reader's are
decoded with their writer's schema and resolved into the reader's.

Nothing here verifies anything: the checks are `cdc_emitter.read.spark_groups`'s, the replay
`cdc_emitter.read.spark_replay`'s.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, cast

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.avro.functions import from_avro, to_avro

from cdc_emitter.errors import SchemaError
from cdc_emitter.protocol.codec import CdcCodec
from cdc_emitter.protocol.schemas import union_schema
from cdc_emitter.spark.avro_length import encoded_length
from cdc_emitter.spark.columns import declared_as_avro
from cdc_emitter.spark.kafka import kafka_read_options

__all__ = [
    "AVRO_READ",
    "DecodedTopic",
    "decode_topic",
    "lengths_as_written",
    "load_messages",
    "reencoded",
    "update_length_of",
]

#: ``from_avro``'s options for every read: Avro dates and timestamps count days and microseconds
#: in the proleptic Gregorian calendar, as the local codec reads them. Spark 3's default
#: (``spark.sql.avro.datetimeRebaseModeInRead=EXCEPTION``) refuses those before 1582, which
#: the local codec reads; Spark 4's default is this one.
AVRO_READ = {"datetimeRebaseMode": "CORRECTED"}


class DecodedTopic(NamedTuple):
    """The messages of a reading, decoded by Spark (`decode_topic`)."""

    #: One row per message, persisted (the caller unpersists it): ``partition``, ``offset``,
    #: ``u`` (the update array), ``p`` (the statement), ``suspect`` (the value, where the
    #: driver must decode the message itself), ``tombstone``, ``unchecked`` (the body's length,
    #: where the arrays' updates are sized after the read), ``size`` (the value's bytes) and
    #: ``headers`` (a statement's).
    decoded: DataFrame
    #: The values of the messages at some ``(partition, offset)`` keys, read again.
    values: Callable[[list[tuple[int, int]]], DataFrame]
    #: The length of an update ``x`` of the arrays as Avro encodes it (`update_length_of`), or
    #: None where the arrays were sized whole here.
    update_length: Column | None


def decode_topic(
    spark: SparkSession,
    servers: str,
    topic: str,
    codec: CdcCodec,
    config: dict,
    ends: Mapping[int, tuple[int, int]],
) -> DecodedTopic:
    """Read the messages at offsets ``ends`` (``[low, high)`` per partition) of ``topic`` with
    Spark's Kafka source (read committed, `kafka_read_options`) and decode them with ``codec``'s
    schemas.

    Returns:
        The decoded messages, persisted: the caller unpersists them.
    """

    options = kafka_read_options(servers, config, user="read_cdc")
    raw = load_messages(spark, options, topic, ends)

    array_schema, progress_schema = json.dumps(codec.union[0]), json.dumps(codec.union[1])
    skip = len(codec.frame)
    value = F.col("value")
    framed = F.lit(True) if skip == 0 else (F.substring(value, 1, 1) == F.lit(b"\x00"))
    branch = F.when(framed, F.substring(value, skip + 1, 1))
    body = F.expr(f"substring(value, {skip + 2})")
    permissive = {"mode": "PERMISSIVE", **AVRO_READ}
    is_array, is_progress = branch == F.lit(b"\x00"), branch == F.lit(b"\x02")
    u = F.when(is_array, from_avro(body, array_schema, permissive))
    p = F.when(is_progress, from_avro(body, progress_schema, permissive))
    writers: list[tuple[Column, list[tuple[str, Column, Any]]]] = []
    if codec.writer_schemas is not None:
        # messages of other schema ids: decoded with their writer's schema, resolved into the
        # reader's; their length is checked by sizing them as their writer wrote them
        u, p, writers = _resolved_ids(
            raw, codec, codec.writer_schemas, body, is_array, is_progress, u, p
        )
    columns: list[Any] = ["partition", "offset", "value", body.alias("body"), u.alias("u")]
    columns.append(p.alias("p"))
    as_written = F.lit(None).cast("int")
    if writers:  # sized by name (`encoded_length`): the writers' decodings as columns first
        raw = raw.select(
            *columns,
            "headers",
            *[column.alias(name) for _this, pairs in writers for name, column, _avro in pairs],
        )
        for this, pairs in writers:
            written = lengths_as_written(
                raw, F.col("body"), [(name, avro) for name, _column, avro in pairs]
            )
            as_written = F.when(this, written).otherwise(as_written)
        columns = ["partition", "offset", "value", "body", "u", "p"]
    parsed = raw.select(*columns, as_written.alias("as_written"), "headers")
    # Spark's Avro reader ignores bytes left after the record, which the local codec refuses:
    # a body longer than what Spark read of it goes to the driver's codec to be judged. The
    # update arrays of the reader's schema are measured after the read, update by update
    # (`cdc_emitter.read.spark_groups.array_checks`); the rest here
    update_length = update_length_of(parsed, codec)
    later = update_length is not None
    checked = [("p", codec.union[1])]
    if not later:
        checked.insert(0, ("u", codec.union[0]))
    written = F.coalesce(F.col("as_written"), lengths_as_written(parsed, F.col("body"), checked))
    unchecked = F.col("u").isNotNull() & F.col("as_written").isNull() & F.lit(later)
    suspect = F.col("value").isNull() | (
        ~unchecked & F.coalesce(written != F.octet_length("body"), F.lit(True))
    )
    decoded = parsed.select(
        "partition",
        "offset",
        "u",
        "p",
        F.when(suspect, F.col("value")).alias("suspect"),
        F.when(F.col("value").isNull(), True).alias("tombstone"),
        F.when(unchecked, F.octet_length("body")).alias("unchecked"),
        F.octet_length("value").alias("size"),
        F.when(F.col("u").isNull(), F.col("headers")).alias("headers"),
    ).persist()

    def values(keys: list[tuple[int, int]]) -> DataFrame:
        """The values of the messages at ``keys`` (partition, offset), read again."""
        spans: dict[int, tuple[int, int]] = {}
        for partition, offset in keys:
            low, high = spans.get(partition, (offset, offset + 1))
            spans[partition] = (min(low, offset), max(high, offset + 1))
        wanted = spark.createDataFrame(keys, "partition int, offset long")
        return (
            load_messages(spark, options, topic, spans)
            .join(F.broadcast(wanted), ["partition", "offset"], "left_semi")
            .select("partition", "offset", "value")
        )

    return DecodedTopic(decoded, values, update_length)


def load_messages(
    spark: SparkSession, options: dict, topic: str, spans: Mapping[int, tuple[int, int]]
) -> DataFrame:
    """The messages at offsets ``[low, high)`` of each partition of ``spans``, with their
    headers: a progress statement's writer and batch, which ``pending`` names."""
    low = {topic: {str(p): lo for p, (lo, _hi) in spans.items()}}
    high = {topic: {str(p): hi for p, (_lo, hi) in spans.items()}}
    return (
        spark.read.format("kafka")
        .options(**options)
        .option("assign", json.dumps({topic: sorted(spans)}))
        .option("includeHeaders", "true")
        .option("startingOffsets", json.dumps(low))
        .option("endingOffsets", json.dumps(high))
        .load()
    )


def update_length_of(df: DataFrame, codec: CdcCodec) -> Column | None:
    """The length of an update ``x`` of ``df``'s update arrays ``u`` (once exploded) as Avro encodes it, or
    None where its data cannot be sized (`encoded_length`)."""
    item = cast("T.ArrayType", df.schema["u"].dataType).elementType
    return encoded_length("x", item, codec.union[0]["items"])


def reencoded(value: Column, dtype: T.DataType, avro: Any) -> Column:
    """``value`` (of Spark type ``dtype``, decoded by ``from_avro`` of ``avro``) encoded again
    by ``to_avro``; null where it is null. Said not null first where ``avro`` says so
    (`declared_as_avro`): else Spark's Avro serializer warns,
    in every task, of each nullable field PERMISSIVE decoding declares."""

    return F.when(
        value.isNotNull(), to_avro(declared_as_avro(value, dtype, avro), json.dumps(avro))
    )


def lengths_as_written(df: DataFrame, body: Column, decodings: list[tuple[str, Any]]) -> Column:
    """The length of ``body`` as Avro encodes what ``from_avro`` of ``avro`` reads of it, for
    the first ``(decoded, avro)`` of ``decodings`` whose column ``decoded`` of ``df`` (the
    body's PERMISSIVE decoding) is not null: a body with bytes to spare, which Spark's reader
    ignores, is longer. Computed from the decoded value (`encoded_length`); a type it cannot
    size is encoded again (`_reencoded_length`)."""

    lengths = []
    for decoded, avro in decodings:
        length = encoded_length(decoded, df.schema[decoded].dataType, avro)
        if length is None:
            length = _reencoded_length(df, body, avro)
        lengths.append(F.when(F.col(decoded).isNotNull(), length))
    return F.coalesce(*lengths)


def _reencoded_length(df: DataFrame, body: Column, avro: Any) -> Column:
    """The length of ``body``'s decoding as ``avro``, encoded again by ``to_avro``. The body is
    decoded again in FAILFAST mode (it decoded once, it decodes again), typed as ``avro`` says,
    so only its top is said not null before it is encoded again: a second decoding costs less
    than going through every update to say each is not null."""

    again = from_avro(body, json.dumps(avro), {"mode": "FAILFAST", **AVRO_READ})
    dtype = df.select(again.alias("again")).schema.fields[0].dataType
    return F.octet_length(reencoded(again, dtype, avro))


def _resolved_ids(
    raw: DataFrame,
    codec: CdcCodec,
    writer_schemas: Callable[[int], dict],
    body: Column,
    is_array: Column,
    is_progress: Column,
    u: Column,
    p: Column,
) -> tuple[Column, Column, list[tuple[Column, list[tuple[str, Column, Any]]]]]:
    """``u`` and ``p`` with a branch for each schema id in the topic other than the reader's
    (one job finds the ids), and for each such id the condition of its messages and its
    writer's decodings to size them by: ``(name, column, avro)`` of the array and of the
    statement. ``writer_schemas`` gives each id's data schema (the codec's)."""

    header_id = F.substring(F.col("value"), 2, 4)
    ids = [
        int.from_bytes(bytes(row[0]), "big")
        for row in raw.where(F.substring(F.col("value"), 1, 1) == F.lit(b"\x00"))
        .select(header_id)
        .distinct()
        .collect()
        if row[0] is not None and len(row[0]) == 4
    ]
    reader = {"mode": "PERMISSIVE", **AVRO_READ}
    writers = []
    array_reader, progress_reader = json.dumps(codec.union[0]), json.dumps(codec.union[1])
    for schema_id in sorted(set(ids) - {codec.schema_id}):
        try:
            writer = union_schema(writer_schemas(schema_id))
        except SchemaError:
            continue  # no such id: Spark fails to decode those messages; the driver names the cause
        this = header_id == F.lit(schema_id.to_bytes(4, "big"))
        array_writer, progress_writer = json.dumps(writer[0]), json.dumps(writer[1])
        pairs = [  # decoded only where sized: this id's messages
            (
                f"__w{schema_id}_u",
                F.when(this & is_array, from_avro(body, array_writer, reader)),
                writer[0],
            ),
            (
                f"__w{schema_id}_p",
                F.when(this & is_progress, from_avro(body, progress_writer, reader)),
                writer[1],
            ),
        ]
        writers.append((this, pairs))
        u = F.when(
            this & is_array, from_avro(body, array_writer, {**reader, "avroSchema": array_reader})
        ).otherwise(u)
        p = F.when(
            this & is_progress,
            from_avro(body, progress_writer, {**reader, "avroSchema": progress_reader}),
        ).otherwise(p)
    return u, p, writers
