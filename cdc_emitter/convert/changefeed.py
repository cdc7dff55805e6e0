"""CockroachDB and YDB changefeeds in Kafka (JSON) as CDCv2: ``cdc-emitter convert cockroachdb|ydb``.

Both deliver at least once, in order per key only, with a watermark — ``resolved`` messages on
every partition, promising no new row at or below their timestamp on that partition. So the
converter writes, per micro-batch, the rows of the times below the smallest resolved timestamp
over all partitions, ``[lower, upper)``, and closes exactly those times with the progress
statement (`CdcSink.write_upto`); rows at later times
wait in the source topic and are read again from there when their time is resolved (the offsets
are recorded under ``<checkpoint>/cdc-emitter-convert``, see
`WatermarkRecord`). Nothing is held in Spark state.

Duplicates (the same key and timestamp again, after a restart of the changefeed) are written
once: inside a batch they are dropped, and a copy of a row that an earlier batch wrote has a time
below that batch's ``upper`` — it cannot be new, by the resolved promise — and is dropped too.

Times: CockroachDB's HLC timestamp ``"<wall ns>.<logical>"`` maps to its wall-clock nanoseconds
(a long until the year 2262); YDB's virtual timestamp ``[step, txId]`` to its ``step``. Both maps
keep order and merge only timestamps that differ in the logical part / transaction id, which
then share one CDCv2 time. A resolved timestamp ``R`` closes the times below ``map(R)``.

Before-images are required (CockroachDB's ``diff`` option, YDB's ``NEW_AND_OLD_IMAGES`` mode):
without them an update cannot retract the old row, and the converter refuses the message,
naming the option, rather than keeping every row in state.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.streaming import StreamingQuery

from cdc_emitter.convert.watermark import WatermarkRecord, watermark_window
from cdc_emitter.errors import CdcError, ConfigError, SchemaError
from cdc_emitter.sink.result import BatchResult

__all__ = [
    "FORMATS",
    "changefeed_rows",
    "KafkaChangefeed",
    "convert_kafka",
    "await_conversion",
    "conversion_error",
]

log = logging.getLogger(__name__)

TIME, DIFF = "_cdc_time", "_cdc_diff"
FORMATS = ("cockroachdb", "ydb")
# parsed columns (beside partition and offset)
_KIND, _T, _TICK, _KEY, _STAMP, _BEFORE, _AFTER, _ERROR = (
    "_kind",
    "_t",
    "_tick",
    "_key",
    "_stamp",
    "_before",
    "_after",
    "_error",
)


def _where(topic: str) -> Column:
    return F.concat(
        F.lit(f"topic {topic!r} partition "),
        F.col("partition").cast("string"),
        F.lit(" offset "),
        F.col("offset").cast("string"),
        F.lit(": "),
    )


def _image(
    text: Column, struct: T.StructType, columns: Sequence[str], exclude: Sequence[str] = ()
) -> tuple[Column, Column]:
    """``(struct or null, error or null)`` of a JSON object text: a column whose value does not
    fit its type is an error naming it (from_json would make it null)."""
    fields = [f for f in struct.fields if f.name not in exclude]
    parsed = F.from_json(text, T.StructType(fields))
    # every value as its JSON text, in one more parse (not one get_json_object per column)
    texts = F.from_json(text, T.StructType([T.StructField(f.name, T.StringType()) for f in fields]))
    error = F.lit(None).cast("string")
    for f in reversed(fields):
        raw = texts[f.name]
        bad = raw.isNotNull() & parsed[f.name].isNull()
        error = F.when(
            text.isNotNull() & bad,
            F.concat(
                F.lit(f"column {f.name!r} value "),
                F.substring(raw, 1, 80),
                F.lit(f" does not fit type {f.dataType.simpleString()}"),
            ),
        ).otherwise(error)
    return F.when(text.isNotNull(), parsed), error


def _first(*errors: Column) -> Column:
    return F.coalesce(*errors) if errors else F.lit(None).cast("string")


def _cockroachdb(raw: Any, struct: Any, key: Sequence[str]) -> Any:
    text = F.col("value").cast("string")
    fields = "after string, before string, updated string, resolved string"
    msg = F.from_json(text, fields)
    keys = F.expr("json_object_keys(CAST(value AS STRING))")
    resolved, updated = msg["resolved"], msg["updated"]
    after, after_error = _image(msg["after"], struct, struct.fieldNames())
    before, before_error = _image(msg["before"], struct, struct.fieldNames())
    wall = F.split(updated, r"\.")
    hlc = F.regexp_extract(updated, r"^(\d+)(\.(\d+))?$", 0)
    error = (
        F.when(keys.isNull(), F.lit("not a JSON object"))
        .when(
            resolved.isNotNull(),
            F.when(
                F.regexp_extract(resolved, r"^(\d+)(\.\d+)?$", 0) == F.lit(""),
                F.concat(
                    F.lit("resolved timestamp "),
                    F.substring(resolved, 1, 40),
                    F.lit(" is not an HLC timestamp"),
                ),
            ),
        )
        .when(
            updated.isNull(),
            F.lit(
                "expected 'updated' (create the changefeed WITH updated, "
                "resolved, diff) or 'resolved'"
            ),
        )
        .when(
            hlc == F.lit(""),
            F.concat(
                F.lit("updated timestamp "),
                F.substring(updated, 1, 40),
                F.lit(" is not an HLC timestamp"),
            ),
        )
        .when(
            ~F.array_contains(keys, "before"),
            F.lit(
                "no 'before' field: create the changefeed WITH diff, so updates and deletes "
                "carry the row they replace"
            ),
        )
        .when(msg["after"].isNull() & msg["before"].isNull(), F.lit("neither 'after' nor 'before'"))
        .otherwise(_first(after_error, before_error))
    )
    resolved_wall = F.split(resolved, r"\.")[0].cast("long")
    return raw.select(
        "partition",
        "offset",
        F.when(resolved.isNotNull(), F.lit("resolved")).otherwise(F.lit("row")).alias(_KIND),
        F.when(resolved.isNotNull(), resolved_wall).otherwise(wall[0].cast("long")).alias(_T),
        F.coalesce(wall[1].cast("long"), F.lit(0)).alias(_TICK),
        F.coalesce(F.col("key").cast("string"), F.get_json_object(text, "$.key")).alias(_KEY),
        updated.alias(_STAMP),
        before.alias(_BEFORE),
        after.alias(_AFTER),
        error.alias(_ERROR),
    )


def _ydb(raw: Any, struct: Any, key: Sequence[str]) -> Any:
    text = F.col("value").cast("string")
    msg = F.from_json(
        text,
        "key string, `update` string, erase string, newImage string, oldImage string, "
        "ts array<long>, resolved array<long>",
    )
    keys = F.expr("json_object_keys(CAST(value AS STRING))")
    key_text, resolved, ts = msg["key"], msg["resolved"], msg["ts"]
    elements = F.from_json(key_text, "array<string>")  # JSON numbers come as their text
    key_values = []
    key_errors = []
    for i, name in enumerate(key):
        dtype = struct[name].dataType
        element = elements[i]
        typed = element.cast(dtype)
        key_values.append(typed.alias(name))
        key_errors.append(
            F.when(
                element.isNotNull() & typed.isNull(),
                F.concat(
                    F.lit(f"key column {name!r} value "),
                    F.substring(element, 1, 80),
                    F.lit(f" does not fit type {dtype.simpleString()}"),
                ),
            )
        )
    new, new_error = _image(msg["newImage"], struct, struct.fieldNames(), exclude=key)
    old, old_error = _image(msg["oldImage"], struct, struct.fieldNames(), exclude=key)
    others = [f.name for f in struct.fields if f.name not in key]

    def row(image: Any) -> Any:
        return F.when(
            image.isNotNull(), F.struct(*key_values, *[image[c].alias(c) for c in others])
        )

    error = (
        F.when(keys.isNull(), F.lit("not a JSON object"))
        .when(
            resolved.isNotNull(),
            F.when(F.size(resolved) != 2, F.lit("resolved is not [step, txId]")),
        )
        .when(key_text.isNull(), F.lit("no 'key'"))
        # not a JSON array: no elements (Spark 4 sizes null as null, which no branch takes)
        .when(
            elements.isNull() | (F.size(elements) != len(key)),
            F.concat(
                F.lit(f"'key' has {len(key)} columns in --key ({', '.join(key)}) but the message "),
                F.substring(key_text, 1, 80),
            ),
        )
        .when(
            ts.isNull() | (F.size(ts) != 2),
            F.lit(
                "no virtual timestamp 'ts': [step, txId] (create the changefeed WITH "
                "VIRTUAL_TIMESTAMPS = TRUE)"
            ),
        )
        .when(msg["update"].isNull() & msg["erase"].isNull(), F.lit("neither 'update' nor 'erase'"))
        .when(
            msg["update"].isNotNull() & (msg["update"] != F.lit("{}")),
            F.lit(
                "'update' carries columns (UPDATES mode): create the changefeed WITH "
                "MODE = 'NEW_AND_OLD_IMAGES'"
            ),
        )
        .when(
            msg["erase"].isNotNull() & msg["oldImage"].isNull(),
            F.lit(
                "an erase without 'oldImage': create the changefeed WITH MODE = 'NEW_AND_OLD_IMAGES'"
            ),
        )
        .when(
            msg["update"].isNotNull() & msg["newImage"].isNull(),
            F.lit(
                "an update without 'newImage': create the changefeed WITH MODE = 'NEW_AND_OLD_IMAGES'"
            ),
        )
        .otherwise(_first(*key_errors, new_error, old_error))
    )
    return raw.select(
        "partition",
        "offset",
        F.when(resolved.isNotNull(), F.lit("resolved")).otherwise(F.lit("row")).alias(_KIND),
        F.when(resolved.isNotNull(), resolved[0]).otherwise(ts[0]).alias(_T),
        F.coalesce(ts[1], F.lit(0).cast("long")).alias(_TICK),
        key_text.alias(_KEY),
        F.to_json(ts).alias(_STAMP),
        row(old).alias(_BEFORE),
        row(new).alias(_AFTER),
        error.alias(_ERROR),
    )


PARSERS = {"cockroachdb": _cockroachdb, "ydb": _ydb}


def changefeed_rows(
    raw: Any, fmt: str, columns: Any, *, key: Sequence[str] = (), topic: str = "?"
) -> Any:
    """Kafka rows (``key``, ``value``, ``partition``, ``offset``: a batch or streaming read) of a
    ``fmt`` changefeed, parsed: one row per message with its kind (``row``/``resolved``), time,
    tick, key, timestamp text, before- and after-image (structs of ``columns``, a Spark
    ``StructType``). A message that does not parse fails the job with an error naming the topic,
    partition and offset and what was expected."""
    if fmt not in PARSERS:
        raise ConfigError(f"format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    names = columns.fieldNames()
    if fmt == "ydb":
        if not key:
            raise ConfigError(
                "ydb: --key is required: the primary-key columns, in the order of the "
                "messages' 'key' array"
            )
        unknown = [k for k in key if k not in names]
        if unknown:
            raise ConfigError(
                f"--key column(s) {', '.join(unknown)} are not in --columns ({', '.join(names)})"
            )
    parsed = PARSERS[fmt](raw, columns, key)
    checked = F.when(
        F.col(_ERROR).isNotNull(),
        F.raise_error(F.concat(F.lit("cdc-emitter convert: "), _where(topic), F.col(_ERROR))),
    )
    # the error column is replaced by its check: evaluating a row raises for a bad message
    return parsed.withColumn(_ERROR, checked.cast("string"))


def _required(value: Any, column: Any, topic: str) -> Any:
    """``value`` of a ``not null`` column: a null fails the batch naming the message; the result
    is non-nullable for Spark (a coalesce with a literal that is never used), so the topic's
    schema says so too. Types without such a literal stay nullable in the schema."""
    import datetime
    import decimal

    checked = F.when(
        value.isNull(),
        F.raise_error(
            F.concat(
                F.lit("cdc-emitter convert: "),
                _where(topic),
                F.lit(f"column {column.name!r} is null, but --columns declares it not null"),
            )
        ),
    ).otherwise(value)
    dtype = column.dataType
    zeros = {
        T.LongType: 0,
        T.IntegerType: 0,
        T.ShortType: 0,
        T.ByteType: 0,
        T.DoubleType: 0.0,
        T.FloatType: 0.0,
        T.StringType: "",
        T.BooleanType: False,
        T.BinaryType: b"",
        T.DateType: datetime.date(1970, 1, 1),
        T.TimestampType: datetime.datetime(1970, 1, 1),
        T.DecimalType: decimal.Decimal(0),
    }
    zero = zeros.get(type(dtype))
    if zero is None:
        return checked
    literal = (
        F.lit(zero)
        if isinstance(dtype, (T.DecimalType, T.DateType, T.TimestampType))
        else F.lit(zero).cast(dtype)
    )
    return F.coalesce(checked, literal).cast(dtype)


def _updates(parsed: Any, columns: Any, lower: int, upper: int, topic: str) -> Any:
    """The updates of ``[lower, upper)``: duplicates (same key and timestamp) once, a key's
    timestamps in offset order never going back, before-images −1, after-images +1."""
    rows = parsed.filter((F.col(_KIND) == "row") & F.isnull(F.col(_ERROR)))
    first = Window.partitionBy(_KEY, _STAMP).orderBy("partition", "offset")
    rows = rows.withColumn("_n", F.row_number().over(first)).filter(F.col("_n") == 1).drop("_n")
    rows = rows.filter(F.col(_T) >= F.lit(lower))
    earlier = (
        Window.partitionBy(_KEY)
        .orderBy("partition", "offset")
        .rowsBetween(Window.unboundedPreceding, -1)
    )
    latest = F.max(F.struct(F.col(_T), F.col(_TICK), F.col(_STAMP))).over(earlier)
    rows = rows.withColumn("_latest", latest)
    # the fields named alike on both sides: Spark Connect 3.5 names an unaliased field col1, col2,
    # and a comparison of structs whose field names differ does not resolve
    backwards = F.col("_latest").isNotNull() & (
        F.struct(F.col(_T).alias(_T), F.col(_TICK).alias(_TICK))
        < F.struct(F.col("_latest")[_T].alias(_T), F.col("_latest")[_TICK].alias(_TICK))
    )
    rows = rows.withColumn(
        _ERROR,
        F.when(
            backwards,
            F.raise_error(
                F.concat(
                    F.lit("cdc-emitter convert: "),
                    _where(topic),
                    F.lit("the timestamp of key "),
                    F.col(_KEY),
                    F.lit(" goes back to "),
                    F.col(_STAMP),
                    F.lit(" after "),
                    F.col("_latest")[_STAMP],
                )
            ),
        ).cast("string"),
    )
    rows = rows.filter(F.isnull(F.col(_ERROR)) & (F.col(_T) < F.lit(upper)))

    # both images from one pass over the rows (a union would read and parse the source twice)
    sides = F.explode(
        F.array(
            F.struct(F.col(_BEFORE).alias("image"), F.lit(-1).cast("long").alias("diff")),
            F.struct(F.col(_AFTER).alias("image"), F.lit(1).cast("long").alias("diff")),
        )
    )
    images = rows.select("partition", "offset", F.col(_T), sides.alias("_side")).filter(
        F.col("_side.image").isNotNull()
    )
    image = F.col("_side.image")
    values = [
        image[f.name] if f.nullable else _required(image[f.name], f, topic) for f in columns.fields
    ]
    return images.select(
        *[v.alias(f.name) for v, f in zip(values, columns.fields)],
        F.col(_T).alias(TIME),
        F.col("_side.diff").alias(DIFF),
    )


class KafkaChangefeed:
    """The ``foreachBatch`` function of a changefeed stream (see the module docstring): decides
    the batch's ``[lower, upper)`` and source offsets, records them, then writes through ``sink``
    (a column-mode `CdcSink` with ``time_column=TIME``, ``diff_column=DIFF``).
    """

    def __init__(
        self,
        fmt: str,
        source_topic: str,
        source_options: Mapping[str, str],
        columns: Any,
        key: Sequence[str],
        sink: Any,
        checkpoint_location: str,
        partitions: Sequence[int],
    ) -> None:
        if sink.time_column != TIME or sink.diff_column != DIFF:
            raise ConfigError(f"the sink must have time_column={TIME!r} and diff_column={DIFF!r}")
        self.fmt, self.source_topic, self.source_options = fmt, source_topic, dict(source_options)
        self.columns, self.key, self.sink = columns, list(key), sink
        self.checkpoint_location = checkpoint_location
        self.partitions = sorted(int(p) for p in partitions)

    def _window(
        self, spark: SparkSession, start: Mapping[int, int], end: Mapping[int, int]
    ) -> DataFrame:
        topic = self.source_topic
        raw = (
            spark.read.format("kafka")
            .options(**self.source_options)
            .option("subscribe", topic)
            .option("startingOffsets", json.dumps({topic: {str(p): o for p, o in start.items()}}))
            .option("endingOffsets", json.dumps({topic: {str(p): end[p] for p in start}}))
            .load()
        )
        return changefeed_rows(raw, self.fmt, self.columns, key=self.key, topic=topic)

    def plan(
        self, batch_df: DataFrame, batch_id: int, previous: WatermarkRecord | None
    ) -> WatermarkRecord:
        """The record of a new batch: its resolved times, interval and offsets (Spark jobs: one
        over the batch, and when times resolved, one over the offsets read again)."""
        spark = batch_df.sparkSession
        parsed = changefeed_rows(
            batch_df, self.fmt, self.columns, key=self.key, topic=self.source_topic
        )
        stats = (
            parsed.groupBy("partition")
            .agg(
                F.min("offset").alias("first"),
                F.max("offset").alias("last"),
                F.max(F.when(F.col(_KIND) == "resolved", F.col(_T))).alias("resolved"),
                F.count(F.col(_ERROR)).alias("errors"),
            )
            .collect()
        )
        unknown = sorted({int(r["partition"]) for r in stats} - set(self.partitions))
        if unknown:
            raise CdcError(
                f"topic {self.source_topic!r} has partition(s) {unknown} it did not have when the "
                "converter started (partitions added): restart the converter"
            )
        first = {int(r["partition"]): int(r["first"]) for r in stats}
        end = {int(r["partition"]): int(r["last"]) + 1 for r in stats}
        resolved_now = {
            int(r["partition"]): int(r["resolved"]) for r in stats if r["resolved"] is not None
        }
        resolved, lower, upper, start, ends = watermark_window(
            previous, self.partitions, first, end, resolved_now
        )
        pending = dict(start)
        if upper > lower:
            window = self._window(spark, start, ends)
            waiting = (
                window.filter((F.col(_KIND) == "row") & (F.col(_T) >= F.lit(upper)))
                .groupBy("partition")
                .agg(F.min("offset").alias("o"))
                .collect()
            )
            pending = {p: ends[p] for p in start}
            pending.update({int(r["partition"]): int(r["o"]) for r in waiting})
        return WatermarkRecord(batch_id, resolved, lower, upper, start, ends, pending)

    def __call__(self, batch_df: DataFrame, batch_id: int) -> BatchResult | None:
        from cdc_emitter.sink.log import converter_records

        spark = batch_df.sparkSession
        batch_id = int(batch_id)
        plans, record, previous = converter_records(
            spark,
            self.checkpoint_location,
            WatermarkRecord,
            batch_id,
            f"topic {self.source_topic!r}",
        )
        if record is None:  # a new batch
            record = plans.put(self.plan(batch_df, batch_id, previous))
        if record.upper == record.lower:
            missing = [p for p in self.partitions if p not in record.resolved]
            log.info(
                "topic %r batch %d: nothing resolved beyond %d%s",
                self.source_topic,
                batch_id,
                record.lower,
                f" (no resolved message yet on partition(s) {missing})" if missing else "",
            )
            return None
        window = self._window(spark, record.start, record.end)
        updates = _updates(window, self.columns, record.lower, record.upper, self.source_topic)
        return self.sink.write_upto(updates, batch_id, record.upper)


def convert_kafka(
    spark: SparkSession,
    fmt: str,
    source_topic: str,
    *,
    columns: str | T.StructType,
    bootstrap_servers: str,
    topic: str,
    checkpoint_location: str,
    key: Sequence[str] = (),
    source_bootstrap_servers: str | None = None,
    source_config: Mapping[str, Any] | None = None,
    once: bool = False,
    trigger_interval: str | None = None,
    max_offsets_per_trigger: int | None = None,
    **sink_options: Any,
) -> StreamingQuery:
    """Start the stream converting a CockroachDB or YDB changefeed (JSON) into a CDCv2 topic.

    Args:
        spark: the session (with spark-sql-kafka-0-10).
        fmt: ``"cockroachdb"`` or ``"ydb"``.
        source_topic: the Kafka topic of the changefeed.
        columns: a DDL column list (``"id long not null, name string"``) or a ``StructType``:
            the table's columns in the topic's order.
        bootstrap_servers: the Kafka cluster of ``topic``.
        topic: the CDC topic to write.
        checkpoint_location: the streaming query's checkpoint (any Hadoop path).
        key: YDB's primary-key columns, in the order of its messages' ``key``.
        source_bootstrap_servers: the Kafka cluster of ``source_topic`` (default:
            ``bootstrap_servers``).
        source_config: librdkafka-style security settings for the source topic.
        once: convert what is there now, then stop.
        trigger_interval: start a micro-batch at most this often, e.g. ``"10 seconds"``.
        max_offsets_per_trigger: at most this many source messages per micro-batch.
        **sink_options: go to `CdcSink`.

    Returns:
        The running streaming query.

    Raises:
        ConfigError: an unknown ``fmt``, or options that do not fit it.
        SchemaError: ``columns`` that cannot be parsed or written.
    """
    from cdc_emitter.kafka.reading import end_offsets
    from cdc_emitter.sink.sink import CdcSink
    from cdc_emitter.spark.kafka import kafka_read_options
    from cdc_emitter.spark.tables import columns_struct

    if fmt not in FORMATS:
        raise ConfigError(f"format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    struct = columns_struct(columns) if isinstance(columns, str) else columns
    for name in (TIME, DIFF):
        if name in struct.fieldNames():
            raise SchemaError(
                f"--columns has a column named {name!r}, the converter's own: rename it"
            )
    servers = source_bootstrap_servers or bootstrap_servers
    partitions = sorted(end_offsets(servers, source_topic, dict(source_config or {})))
    options = kafka_read_options(servers, dict(source_config or {}), user="convert")
    sink = CdcSink(
        bootstrap_servers,
        topic,
        checkpoint_location=checkpoint_location,
        time_column=TIME,
        diff_column=DIFF,
        **sink_options,
    )
    function = KafkaChangefeed(
        fmt, source_topic, options, struct, key, sink, checkpoint_location, partitions
    )
    reader = (
        spark.readStream.format("kafka")
        .options(**options)
        .option("subscribe", source_topic)
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", "true")
    )
    if max_offsets_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(int(max_offsets_per_trigger)))
    writer = (
        reader.load()
        # Spark ignores the function's return value; pyspark's stub asks for None
        .writeStream.foreachBatch(cast("Callable[[DataFrame, int], None]", function))
        .option("checkpointLocation", checkpoint_location)
        .queryName(f"cdc-emitter convert {fmt} {topic}")
    )
    if once:
        writer = writer.trigger(availableNow=True)
    elif trigger_interval:
        writer = writer.trigger(processingTime=trigger_interval)
    return writer.start()


#: Spark 4.1.1's Kafka source fails the progress report of a batch re-run from the offset log
#: after a restart (SPARK-55271: ``KafkaMicroBatchStream.metrics`` calls ``.map`` on ``Some(null)``)
#: — after the batch ran and was committed. Starting the query again continues past it.
_SPARK_55271 = (
    'Cannot invoke "scala.collection.IterableOps.map(scala.Function1)" because the return value of '
    '"scala.Option.get()" is null'
)


_OUR_ERROR = re.compile(r"cdc_emitter\.errors\.\w+: ([^\n]+)")
_BAD_MESSAGE = re.compile(r"(cdc-emitter convert: [^\n]*?)(?: SQLSTATE: \w+)?(?:\n|$)")


def conversion_error(exc: BaseException) -> str:
    """The message of a converter query's failure: our error raised in the batch function, or a
    bad message found by a Spark job (``cdc-emitter convert: topic ... offset ...: ...``), without
    Spark's and Py4J's wrapping; else Spark's own first line."""
    from cdc_emitter.spark.errors import spark_error_text

    text = str(exc)
    for pattern in (_BAD_MESSAGE, _OUR_ERROR):
        found = pattern.search(text)
        if found:
            return found.group(1).strip()
    return spark_error_text(exc)


def await_conversion(start: Callable[[], Any], *, restarts: int = 3) -> Any:
    """Start a converter's query with ``start()`` and wait for its end (``once``); returns the
    query. An interrupt (KeyboardInterrupt, SIGTERM's exception) stops the query and is raised
    again. A failure that is Spark 4.1.1's SPARK-55271 (see above) starts
    the query again, at most ``restarts`` times in a row; any other failure is raised."""
    left = restarts
    while True:
        query = start()
        try:
            query.awaitTermination()
            return query
        except Exception as exc:  # noqa: BLE001 - re-raised unless it is the known Spark bug
            if _SPARK_55271 not in str(exc) or left == 0:
                raise
            left -= 1
            log.warning(
                "the query failed in Spark's Kafka source progress report after a restart "
                "(SPARK-55271, fixed after Spark 4.1.1); its batch was committed: starting it again"
            )
        except BaseException:  # Ctrl-C, SIGTERM: the query stops where it is; the caller says so
            query.stop()
            raise
