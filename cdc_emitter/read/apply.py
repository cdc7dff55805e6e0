"""Keeping a Delta table equal to a CDCv2 topic's collection, exactly once.

The ``cdcv2`` stream (`cdc_emitter.read.stream_source`) hands each micro-batch the updates of
whole, newly complete times. `apply_changes` turns one such batch into one Delta commit (a
``MERGE``): the net change of each row (the sum of its diffs) is merged into the table. A row's
multiplicity is kept one of two ways: as a ``count`` column beside the data columns (`COUNT`,
the default; a row whose count reaches 0 is deleted), or as that many copies of the row
(`ROWS`: the table has the data columns only, as the source table had). The table is a Delta
path or a catalog table's name (`is_path` tells them apart). The commit records the topic and the last time it applied in its ``userMetadata``,
so that a batch read again after a crash — or a whole stream read again without its checkpoint
— applies only the times the table does not have yet.

Guarantees:

* after each commit the table is the topic's collection as of the time recorded with it
  (every time up to it applied, none after), so Delta's time travel shows the collection at
  every applied time;
* a time is applied once, whatever is read again;
* a batch with nothing new commits nothing.

DataFrame API and SQL only (``MERGE INTO``): it runs on Spark Connect too, where the server
has Delta.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F

from cdc_emitter.errors import ConfigError, SchemaError, shorten

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "COUNT",
    "COUNT_COLUMN",
    "MULTIPLICITIES",
    "ROWS",
    "METADATA_KEY",
    "ApplyResult",
    "applied_time",
    "apply_changes",
    "apply_topic",
]

#: The table's column holding each row's multiplicity (`COUNT`).
COUNT_COLUMN = "count"
#: A row's multiplicity as a `COUNT_COLUMN` beside the data columns.
COUNT = "count"
#: A row's multiplicity as that many copies of the row.
ROWS = "rows"
MULTIPLICITIES = (COUNT, ROWS)
#: The columns `ROWS` adds to its merge source: whether a row deletes or inserts, how many
#: copies the table holds, how many it will hold.
_OP, _HELD, _NEW = "__cdc_emitter_op", "__cdc_emitter_held", "__cdc_emitter_n"
#: The most copies of one row `ROWS` writes (Spark's array_repeat takes an int).
MAX_COPIES = 2**31 - 1
#: The key of the commit metadata that records what was applied.
METADATA_KEY = "cdc-emitter"
#: Commits read back first to find the last applied time (then, if none is ours, all).
RECENT_COMMITS = 20
#: The most time the driver's loop (PySpark 3.5) reads before it applies what it read, as the
#: ``cdcv2`` source's ``maxReadSeconds``; the trigger interval paces the batches.
DRIVER_READ_SECONDS = 1.0
#: The trigger interval when following a topic. A batch is mostly Delta's ``MERGE`` and commit,
#: seconds on a small machine: when a batch fits in the interval, a time is in the table within
#: two intervals of its statement, and the table gets fewer, larger commits.
FOLLOW_INTERVAL = "5 seconds"
#: The trigger interval of ``once``: batches back to back, until what was complete is applied.
ONCE_INTERVAL = "0 seconds"
#: Delta's session setting whose value becomes the next commit's ``userMetadata``.
_USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
_EXTRA = ("time", "diff")


@dataclass
class ApplyResult:
    """What `apply_changes` did with one batch.

    Attributes:
        version: The Delta version committed, or None when the batch held nothing new.
        time: The last time the table holds after it (None: none applied yet).
        rows: Rows of the table changed (inserted, updated or deleted; with `ROWS`, every
            copy of a changed row deleted and every copy inserted again).
    """

    version: int | None
    time: int | None
    rows: int


def applied_time(spark: SparkSession, table: str, topic: str) -> int | None:
    """The last time of ``topic`` the Delta table ``table`` (a path or a catalog table's name)
    holds, from the metadata
    of its newest commit that recorded one; None when the table does not exist or has none.

    Raises:
        ConfigError: The newest recorded commit is of another topic.
    """
    if not _exists(spark, table):
        return None
    found = None
    # the newest commits first: the last one is usually ours; other commits (OPTIMIZE, VACUUM)
    # may come after it, and only then is the whole history read
    for limit in (f" LIMIT {RECENT_COMMITS}", ""):
        history = (
            spark.sql(f"DESCRIBE HISTORY {_ident(table)}{limit}")
            .where(F.col("userMetadata").contains(f'"{METADATA_KEY}"'))
            .orderBy(F.col("version").desc())
            .select("userMetadata")
            .limit(1)
            .collect()
        )
        if history:
            found = history[0][0]
            break
    if found is None:
        return None
    recorded = json.loads(found)[METADATA_KEY]
    if recorded["topic"] != topic:
        raise ConfigError(
            f"Delta table {table} holds topic {recorded['topic']!r}, not {topic!r}: apply each "
            "topic to its own table"
        )
    return int(recorded["time"])


#: `apply_changes`'s ``after`` when the caller does not know what the table holds.
UNKNOWN = -(2**63)


def apply_changes(
    batch: DataFrame,
    table: str,
    topic: str,
    *,
    after: int | None = UNKNOWN,
    multiplicity: str = COUNT,
) -> ApplyResult:
    """Merge one micro-batch of the ``cdcv2`` source into a Delta table, as one commit.

    Args:
        batch: The batch: the data columns, ``time`` and ``diff`` (whole times only).
        table: The Delta table: a path, or a catalog table's name (see `is_path`); made if
            missing.
        topic: The topic the batch is of, recorded with the commit.
        after: The last time the table holds (None: none), when the caller knows it from the
            previous batch's result; by default it is read from the table's history.
        multiplicity: How a row's multiplicity is kept: `COUNT` (a ``count`` column) or
            `ROWS` (that many copies of the row).

    Returns:
        What was committed.

    Raises:
        SchemaError: The data has a map column (maps cannot be compared, so their rows cannot
            be found again), or a ``count`` column with `COUNT`.
        ConfigError: The table holds another topic, or keeps multiplicities the other way.
        BadInputError: With `ROWS`, a row's multiplicity after the batch would be below 0 (the
            topic's collection holds more deletions than insertions of it) or above
            `MAX_COPIES`, which copies cannot hold. It is checked at the end of each batch, so
            a multiplicity below 0 at a time inside a batch and back by its end passes.
    """
    if multiplicity not in MULTIPLICITIES:
        raise ConfigError(
            f"multiplicity {multiplicity!r}: say {COUNT!r} (a count column) or {ROWS!r} "
            "(that many copies of each row)"
        )
    spark = batch.sparkSession
    data = [name for name in batch.columns if name not in _EXTRA]
    _check_columns(batch, data, multiplicity)
    done = applied_time(spark, table, topic) if after == UNKNOWN else after
    rows = batch if done is None else batch.where(F.col("time") > done)
    last = rows.agg(F.max("time")).first()
    newest = None if last is None else last[0]
    if newest is None:
        return ApplyResult(None, done, 0)
    columns = [F.col(f"`{c}`") for c in data]
    net = rows.groupBy(*columns).agg(F.sum("diff").alias("diff")).where(F.col("diff") != 0)
    existing = _columns(spark, table)
    if existing is not None:
        _check_table(table, existing, data, multiplicity)
    else:
        empty = batch.select(*columns).limit(0)
        if multiplicity == COUNT:
            empty = empty.withColumn(COUNT_COLUMN, F.lit(0).cast("long"))
        writer = empty.write.format("delta")
        if is_path(table):
            writer.save(table)
        else:
            writer.saveAsTable(table)
    if multiplicity == ROWS:
        source, merge = _rows_source(spark, table, net, data, newest), _rows_merge
    else:
        source, merge = net, _count_merge
    view = f"cdc_emitter_apply_{abs(hash((table, newest)))}"
    source.createOrReplaceTempView(view)
    metadata = {"topic": topic, "time": newest, "multiplicity": multiplicity}
    spark.conf.set(_USER_METADATA, json.dumps({METADATA_KEY: metadata}))
    try:
        merged = spark.sql(merge(_ident(table), view, data)).first()
    finally:
        spark.conf.unset(_USER_METADATA)
        spark.catalog.dropTempView(view)
    changed = int(merged[0]) if merged is not None and merged[0] is not None else 0
    version = spark.sql(f"DESCRIBE HISTORY {_ident(table)} LIMIT 1").first()
    return ApplyResult(None if version is None else int(version["version"]), newest, changed)


def _count_merge(target: str, view: str, data: list[str]) -> str:
    """`COUNT`: add each row's net change to its count; a count that reaches 0 deletes it."""
    on = " AND ".join(f"t.`{c}` <=> s.`{c}`" for c in data) or "true"
    columns = "".join(f"`{c}`, " for c in data)
    values = "".join(f"s.`{c}`, " for c in data)
    return (
        f"MERGE INTO {target} t USING {view} s ON {on} "
        f"WHEN MATCHED AND t.`{COUNT_COLUMN}` + s.diff = 0 THEN DELETE "
        f"WHEN MATCHED THEN UPDATE SET t.`{COUNT_COLUMN}` = t.`{COUNT_COLUMN}` + s.diff "
        f"WHEN NOT MATCHED THEN INSERT ({columns}`{COUNT_COLUMN}`) VALUES ({values}s.diff)"
    )


def _rows_source(
    spark: SparkSession, table: str, net: DataFrame, data: list[str], newest: int
) -> DataFrame:
    """`ROWS`: for each changed row, one row that deletes its copies in the table and as many
    rows as its new multiplicity that insert it again (one ``MERGE``, so one commit).

    Raises:
        BadInputError: A row's new multiplicity is below 0.
    """
    from functools import reduce

    from cdc_emitter.errors import BadInputError

    def same(left: str, right: str) -> Any:
        pairs = [F.col(f"{left}.`{c}`").eqNullSafe(F.col(f"{right}.`{c}`")) for c in data]
        return reduce(lambda a, b: a & b, pairs, F.lit(True))

    held = (
        spark.sql(f"SELECT * FROM {_ident(table)}")
        .alias("t")
        .join(net.alias("s"), same("t", "s"), "left_semi")
        .groupBy(*[F.col(f"`{c}`") for c in data])
        .agg(F.count(F.lit(1)).alias(_HELD))
    )
    counted = (
        net.alias("s")
        .join(held.alias("h"), same("s", "h"), "left")
        .select(
            *[F.col(f"s.`{c}`") for c in data],
            (F.coalesce(F.col(f"h.`{_HELD}`"), F.lit(0)) + F.col("s.diff")).alias(_NEW),
        )
    )
    new = F.col(f"`{_NEW}`")
    wrong = counted.where((new < 0) | (new > MAX_COPIES)).limit(1).collect()
    if wrong:
        row, held = shorten(repr(tuple(wrong[0][c] for c in data)), 200), wrong[0][_NEW]
        raise BadInputError(
            f"row {row} would be held {held} times after time {newest}: copies of a row hold "
            f"from 0 to {MAX_COPIES:,} of it; keep a {COUNT_COLUMN!r} column instead "
            f"(multiplicity {COUNT!r})"
        )
    plain = [F.col(f"`{c}`") for c in data]
    deletes = counted.select(*plain, F.lit("delete").alias(_OP))
    inserts = counted.where(new > 0).select(
        *plain, F.explode(F.array_repeat(F.lit("insert"), new.cast("int"))).alias(_OP)
    )
    return deletes.unionByName(inserts)


def _rows_merge(target: str, view: str, data: list[str]) -> str:
    """`ROWS`: delete every copy of a changed row, insert its new copies."""
    same = "".join(f" AND t.`{c}` <=> s.`{c}`" for c in data)
    columns = ", ".join(f"`{c}`" for c in data)
    values = ", ".join(f"s.`{c}`" for c in data)
    return (
        f"MERGE INTO {target} t USING {view} s ON s.`{_OP}` = 'delete'{same} "
        "WHEN MATCHED THEN DELETE "
        f"WHEN NOT MATCHED AND s.`{_OP}` = 'insert' THEN INSERT ({columns}) VALUES ({values})"
    )


def _check_columns(batch: DataFrame, data: list[str], multiplicity: str) -> None:
    if multiplicity == COUNT and COUNT_COLUMN in data:
        raise SchemaError(
            f"the topic's data has a column named {COUNT_COLUMN!r}, which the table uses for "
            f"each row's multiplicity: rename it in the writer, or keep copies of each row "
            f"(multiplicity {ROWS!r})"
        )
    reserved = [name for name in data if name in (_OP, _HELD, _NEW)]
    if reserved:
        raise SchemaError(
            f"the topic's data has a column named {reserved[0]!r}, which apply uses itself"
        )
    maps = [f.name for f in batch.schema.fields if f.name in data and _has_map(f.dataType)]
    if maps:
        raise SchemaError(
            f"column {maps[0]!r} holds a map, which Spark cannot compare: its rows cannot be "
            "found again in the table to update their count"
        )


def _check_table(table: str, columns: list[str], data: list[str], multiplicity: str) -> None:
    """The existing table (of ``columns``) keeps multiplicities the way asked."""
    counted = COUNT_COLUMN in columns and COUNT_COLUMN not in data
    if counted and multiplicity == ROWS:
        raise ConfigError(
            f"Delta table {table} keeps each row's multiplicity in a {COUNT_COLUMN!r} column: "
            f"apply to it with multiplicity {COUNT!r}, or to a new table"
        )
    if not counted and multiplicity == COUNT:
        raise ConfigError(
            f"Delta table {table} has no {COUNT_COLUMN!r} column (it keeps copies of each "
            f"row?): apply to it with multiplicity {ROWS!r}, or to a new table"
        )


def _has_map(dtype: Any) -> bool:
    from cdc_emitter.spark.schema import contains_map

    return contains_map(dtype)


def is_path(table: str) -> bool:
    """Whether ``table`` names a path (it holds ``/``, ``\\`` or ``:``) rather than a catalog
    table (``db.table``, ``catalog.db.table``)."""
    return any(mark in table for mark in "/\\:")


def _exists(spark: SparkSession, table: str) -> bool:
    return _columns(spark, table) is not None


def _columns(spark: SparkSession, table: str) -> list[str] | None:
    """The table's columns, from its schema alone: no Spark job runs (``DESCRIBE DETAIL``
    cost a second of each batch); None when the table does not exist."""
    if not is_path(table) and not spark.catalog.tableExists(_ident(table)):
        return None  # asked first: Spark logs an ERROR for a query of a missing table
    try:
        return spark.sql(f"SELECT * FROM {_ident(table)} LIMIT 0").columns
    except Exception as exc:  # noqa: BLE001 - "is not a Delta table" / path or table missing
        if any(said in str(exc) for said in _MISSING):
            return None
        raise


#: What Spark and Delta say of a table that is not there (PySpark 3.5 and 4.x).
_MISSING = (
    "DELTA_MISSING_DELTA_TABLE",
    "DELTA_TABLE_NOT_FOUND",
    "PATH_NOT_FOUND",
    "doesn't exist",
    "does not exist",
    "TABLE_OR_VIEW_NOT_FOUND",
    "Table or view not found",
)


def _ident(table: str) -> str:
    """``table`` as SQL: ``delta.`path``` for a path, each part quoted for a table's name."""
    if is_path(table):
        return "delta.`" + table.replace("`", "``") + "`"
    if "`" in table:  # quoted by the caller already
        return table
    return ".".join(f"`{part}`" for part in table.split("."))


def apply_topic(
    spark: SparkSession,
    bootstrap_servers: str,
    topic: str,
    table: str,
    checkpoint: str,
    *,
    once: bool = True,
    config: dict[str, str] | None = None,
    broker_timeout: float | None = None,
    trigger_interval: str | None = None,
    on_batch: Any = None,
    multiplicity: str = COUNT,
    driver: bool | None = None,
) -> list[ApplyResult]:
    """Apply ``topic`` to the Delta table ``table`` with a streaming query of the
    ``cdcv2`` source, one Delta commit per micro-batch (`apply_changes`).

    On PySpark 3.5, which has no Python data sources (or with ``driver=True``), the driver
    follows the topic itself (`cdc_emitter.read.cdc_stream.read_cdc_stream`) with the same
    batches and commits, one batch at most every trigger interval; the table's own record of
    its last time is then the only checkpoint (``checkpoint`` is unused).

    Args:
        spark: A session with Delta (its package and session extension).
        bootstrap_servers: The Kafka servers.
        topic: The CDCv2 topic.
        table: The Delta table: a path, or a catalog table's name (see `is_path`).
        checkpoint: The query's checkpoint (where it is in the topic).
        once: Apply what is complete now, then stop; else run until stopped.
        config: librdkafka settings (``security.protocol``, ...).
        broker_timeout: Seconds a broker may be unreachable.
        trigger_interval: How often a micro-batch starts, in Spark's words ("5 seconds");
            default: `FOLLOW_INTERVAL`, or `ONCE_INTERVAL` with ``once``.
        on_batch: Called with each `ApplyResult` (in the driver; not on Spark Connect).
        multiplicity: `COUNT` or `ROWS` (see `apply_changes`).
        driver: Follow the topic in the driver rather than with a streaming query; default:
            where PySpark has no Python data sources.

    Returns:
        What each micro-batch committed (empty on Spark Connect, whose batches run on the
        server).

    Raises:
        ConfigError: The table holds another topic.
        ViolationError: The topic broke the protocol (what was applied before stays).
    """
    results: list[ApplyResult] = []
    trigger_interval = default_interval(trigger_interval, once)
    if driver or driver is None and getattr(spark, "dataSource", None) is None:
        for result in _apply_by_driver(
            spark,
            bootstrap_servers,
            topic,
            table,
            once,
            config,
            broker_timeout,
            trigger_interval,
            multiplicity,
        ):
            results.append(result)
            if on_batch is not None:
                on_batch(result)
        return results

    from cdc_emitter.read.stream_source import FORMAT, register

    register(spark)
    # what the table holds, once read from its history: each batch then knows it (one writer
    # per table, as the guide says)
    holds: list[int | None] = []

    def batch(df: DataFrame, _batch_id: int) -> None:
        result = apply_changes(
            df, table, topic, after=holds[-1] if holds else UNKNOWN, multiplicity=multiplicity
        )
        holds.append(result.time)
        results.append(result)
        if on_batch is not None:
            on_batch(result)

    reader = (
        spark.readStream.format(FORMAT)
        .option("kafka.bootstrap.servers", bootstrap_servers)
        .option("topic", topic)
    )
    for key, value in (config or {}).items():
        reader = reader.option(f"kafka.{key}", value)
    if broker_timeout is not None:
        reader = reader.option("brokerTimeout", str(broker_timeout))
    query = (
        reader.load()
        .writeStream.foreachBatch(batch)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime=trigger_interval)
        .start()
    )
    try:
        if once:
            query.processAllAvailable()
        else:
            query.awaitTermination()
    finally:
        query.stop()
    return results


def _apply_by_driver(
    spark: SparkSession,
    bootstrap_servers: str,
    topic: str,
    table: str,
    once: bool,
    config: dict[str, str] | None,
    broker_timeout: float | None,
    trigger_interval: str,
    multiplicity: str,
) -> Iterator[ApplyResult]:
    """`apply_topic` without a streaming query: each batch of `read_cdc_stream`, from the time
    after the table's last one, becomes one commit; a batch starts at most every interval."""
    import time

    from cdc_emitter.kafka.config import BROKER_TIMEOUT
    from cdc_emitter.read.cdc_stream import read_cdc_stream

    interval = trigger_seconds(trigger_interval)
    done = applied_time(spark, table, topic)
    batches = read_cdc_stream(
        spark,
        bootstrap_servers,
        topic,
        start=0 if done is None else done + 1,
        config=config,
        once=once,
        max_read_seconds=DRIVER_READ_SECONDS,
        broker_timeout=BROKER_TIMEOUT if broker_timeout is None else broker_timeout,
    )
    began = time.monotonic()
    for batch in batches:
        if batch.updates:
            result = apply_changes(batch.df, table, topic, after=done, multiplicity=multiplicity)
            done = result.time
            yield result
        wait = interval - (time.monotonic() - began)
        if wait > 0 and not once:
            time.sleep(wait)
        began = time.monotonic()


def default_interval(interval: str | None, once: bool) -> str:
    """``interval``, or when None the default: `ONCE_INTERVAL` with ``once``, else
    `FOLLOW_INTERVAL`."""
    if interval is not None:
        return interval
    return ONCE_INTERVAL if once else FOLLOW_INTERVAL


def trigger_seconds(interval: str) -> float:
    """Seconds in a trigger interval, read as Spark reads ``processingTime``: signed numbers,
    each followed by a space and a whole unit name, singular or plural ("1 second",
    "500 milliseconds", "1 minute 30 seconds", "1 minute -30 seconds"); a fraction of up to 9
    digits only on seconds; 0 means as often as possible.

    Raises:
        ConfigError: Not such an interval, or one below 0.
    """
    text = interval.strip().lower()
    if text.startswith("interval") and text[len("interval") :][:1].isspace():
        text = text[len("interval") :].strip()
    found = _INTERVAL.fullmatch(text)
    if not text or found is None:
        raise ConfigError(
            f"trigger interval {interval!r} is not an interval: write it like '1 second', "
            "'500 milliseconds' or '1 minute 30 seconds'"
        )
    total = 0.0
    for number, unit in _INTERVAL_PART.findall(text):
        if "." in number and unit != "second":
            raise ConfigError(
                f"trigger interval {interval!r}: only seconds take a fraction ({number} {unit}); "
                "write it in a smaller unit"
            )
        total += float(number) * _INTERVAL_UNITS[unit]
    if total < 0:
        raise ConfigError(f"trigger interval {interval!r} is below 0")
    return total


#: Seconds in each unit Spark's interval strings name.
_INTERVAL_UNITS = {
    "week": 604800.0,
    "day": 86400.0,
    "hour": 3600.0,
    "minute": 60.0,
    "second": 1.0,
    "millisecond": 0.001,
    "microsecond": 0.000001,
}
_INTERVAL_PART = re.compile(
    r"([+-]?(?:\d+(?:\.\d{0,9})?|\.\d{1,9}))\s+(" + "|".join(_INTERVAL_UNITS) + r")s?(?![a-z0-9])"
)
_INTERVAL = re.compile(rf"{_INTERVAL_PART.pattern}(?:\s+{_INTERVAL_PART.pattern})*")
