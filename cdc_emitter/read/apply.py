"""Keeping a Delta table equal to a CDCv2 topic's collection, exactly once.

The ``cdcv2`` stream (`cdc_emitter.read.stream_source`) hands each micro-batch the updates of
whole, newly complete times. `apply_changes` turns one such batch into one Delta commit: the
net change of each row (the sum of its diffs) is merged into the table, which holds the data
columns and a ``count`` column (the row's multiplicity; a row whose count reaches 0 is
deleted). The commit records the topic and the last time it applied in its ``userMetadata``,
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
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F

from cdc_emitter.errors import ConfigError, SchemaError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "COUNT_COLUMN",
    "METADATA_KEY",
    "ApplyResult",
    "applied_time",
    "apply_changes",
    "apply_topic",
]

#: The table's column holding each row's multiplicity.
COUNT_COLUMN = "count"
#: The key of the commit metadata that records what was applied.
METADATA_KEY = "cdc-emitter"
#: Commits read back first to find the last applied time (then, if none is ours, all).
RECENT_COMMITS = 20
#: Delta's session setting whose value becomes the next commit's ``userMetadata``.
_USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
_EXTRA = ("time", "diff")


@dataclass
class ApplyResult:
    """What `apply_changes` did with one batch.

    Attributes:
        version: The Delta version committed, or None when the batch held nothing new.
        time: The last time the table holds after it (None: none applied yet).
        rows: Rows of the table changed (inserted, updated or deleted).
    """

    version: int | None
    time: int | None
    rows: int


def applied_time(spark: SparkSession, table: str, topic: str) -> int | None:
    """The last time of ``topic`` the Delta table at path ``table`` holds, from the metadata
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
    batch: DataFrame, table: str, topic: str, *, after: int | None = UNKNOWN
) -> ApplyResult:
    """Merge one micro-batch of the ``cdcv2`` source into the Delta table at path ``table``.

    Args:
        batch: The batch: the data columns, ``time`` and ``diff`` (whole times only).
        table: The Delta table's path; made (the data columns and ``count``) if missing.
        topic: The topic the batch is of, recorded with the commit.
        after: The last time the table holds (None: none), when the caller knows it from the
            previous batch's result; by default it is read from the table's history.

    Returns:
        What was committed.

    Raises:
        SchemaError: The data has a ``count`` column, or a map column (maps cannot be
            compared, so their rows cannot be found again).
        ConfigError: The table holds another topic.
    """
    spark = batch.sparkSession
    data = [name for name in batch.columns if name not in _EXTRA]
    _check_columns(batch, data)
    done = applied_time(spark, table, topic) if after == UNKNOWN else after
    rows = batch if done is None else batch.where(F.col("time") > done)
    last = rows.agg(F.max("time")).first()
    newest = None if last is None else last[0]
    if newest is None:
        return ApplyResult(None, done, 0)
    net = (
        rows.groupBy(*[F.col(f"`{c}`") for c in data])
        .agg(F.sum("diff").alias("diff"))
        .where(F.col("diff") != 0)
    )
    if not _exists(spark, table):
        empty = batch.select(*[F.col(f"`{c}`") for c in data]).limit(0)
        empty.withColumn(COUNT_COLUMN, F.lit(0).cast("long")).write.format("delta").save(table)
    view = f"cdc_emitter_apply_{abs(hash((table, newest)))}"
    net.createOrReplaceTempView(view)
    on = " AND ".join(f"t.`{c}` <=> s.`{c}`" for c in data) or "true"
    columns = ", ".join(f"`{c}`" for c in data)
    values = ", ".join(f"s.`{c}`" for c in data)
    metadata = json.dumps({METADATA_KEY: {"topic": topic, "time": newest}})
    spark.conf.set(_USER_METADATA, metadata)
    try:
        merged = spark.sql(
            f"MERGE INTO {_ident(table)} t USING {view} s ON {on} "
            f"WHEN MATCHED AND t.`{COUNT_COLUMN}` + s.diff = 0 THEN DELETE "
            f"WHEN MATCHED THEN UPDATE SET t.`{COUNT_COLUMN}` = t.`{COUNT_COLUMN}` + s.diff "
            f"WHEN NOT MATCHED THEN INSERT ({columns}{', ' if data else ''}`{COUNT_COLUMN}`) "
            f"VALUES ({values}{', ' if data else ''}s.diff)"
        ).first()
    finally:
        spark.conf.unset(_USER_METADATA)
        spark.catalog.dropTempView(view)
    changed = int(merged[0]) if merged is not None and merged[0] is not None else 0
    version = spark.sql(f"DESCRIBE HISTORY {_ident(table)} LIMIT 1").first()
    return ApplyResult(None if version is None else int(version["version"]), newest, changed)


def _check_columns(batch: DataFrame, data: list[str]) -> None:
    if COUNT_COLUMN in data:
        raise SchemaError(
            f"the topic's data has a column named {COUNT_COLUMN!r}, which the table uses for "
            "each row's multiplicity: rename it in the writer"
        )
    maps = [f.name for f in batch.schema.fields if f.name in data and _has_map(f.dataType)]
    if maps:
        raise SchemaError(
            f"column {maps[0]!r} holds a map, which Spark cannot compare: its rows cannot be "
            "found again in the table to update their count"
        )


def _has_map(dtype: Any) -> bool:
    from cdc_emitter.spark.schema import contains_map

    return contains_map(dtype)


def _exists(spark: SparkSession, table: str) -> bool:
    try:
        spark.sql(f"DESCRIBE DETAIL {_ident(table)}").collect()
    except Exception as exc:  # noqa: BLE001 - "is not a Delta table" / path missing
        text = str(exc)
        if "DELTA_MISSING_DELTA_TABLE" in text or "not a Delta table" in text.lower():
            return False
        if "PATH_NOT_FOUND" in text or "doesn't exist" in text or "does not exist" in text:
            return False
        raise
    return True


def _ident(table: str) -> str:
    return "delta.`" + table.replace("`", "``") + "`"


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
    trigger_interval: str = "1 second",
    on_batch: Any = None,
) -> list[ApplyResult]:
    """Apply ``topic`` to the Delta table at path ``table`` with a streaming query of the
    ``cdcv2`` source, one Delta commit per micro-batch (`apply_changes`).

    On PySpark 3.5, which has no Python data sources, the driver follows the topic itself
    (`cdc_emitter.read.cdc_stream.read_cdc_stream`) with the same batches and commits; the
    table's own record of its last time is then the only checkpoint (``checkpoint`` is unused).

    Args:
        spark: A session with Delta (its package and session extension).
        bootstrap_servers: The Kafka servers.
        topic: The CDCv2 topic.
        table: The Delta table's path.
        checkpoint: The query's checkpoint (where it is in the topic).
        once: Apply what is complete now, then stop; else run until stopped.
        config: librdkafka settings (``security.protocol``, ...).
        broker_timeout: Seconds a broker may be unreachable.
        trigger_interval: How often a micro-batch starts.
        on_batch: Called with each `ApplyResult` (in the driver; not on Spark Connect).

    Returns:
        What each micro-batch committed (empty on Spark Connect, whose batches run on the
        server).

    Raises:
        ConfigError: The table holds another topic.
        ViolationError: The topic broke the protocol (what was applied before stays).
    """
    results: list[ApplyResult] = []
    if getattr(spark, "dataSource", None) is None:  # PySpark 3.5: no Python data sources
        for result in _apply_by_driver(
            spark, bootstrap_servers, topic, table, once, config, broker_timeout, trigger_interval
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
        result = apply_changes(df, table, topic, after=holds[-1] if holds else UNKNOWN)
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
        max_read_seconds=interval,
        broker_timeout=BROKER_TIMEOUT if broker_timeout is None else broker_timeout,
    )
    began = time.monotonic()
    for batch in batches:
        if batch.updates:
            result = apply_changes(batch.df, table, topic, after=done)
            done = result.time
            yield result
        wait = interval - (time.monotonic() - began)
        if wait > 0 and not once:
            time.sleep(wait)
        began = time.monotonic()


def trigger_seconds(interval: str) -> float:
    """Seconds in a trigger interval as Spark spells it: "1 second", "500 milliseconds", "2 min".

    Raises:
        ConfigError: Not an interval.
    """
    import re

    units = {"ms": 0.001, "millisecond": 0.001, "s": 1.0, "sec": 1.0, "second": 1.0}
    units |= {"m": 60.0, "min": 60.0, "minute": 60.0, "h": 3600.0, "hour": 3600.0}
    found = re.fullmatch(r"\s*(?:interval\s+)?(\d+(?:\.\d+)?)\s*([a-z]*)\s*", interval.lower())
    unit = "" if found is None else found.group(2)
    unit = unit[:-1] if unit not in units and unit.endswith("s") else unit
    if found is None or unit not in units:
        raise ConfigError(
            f"trigger interval {interval!r} is not an interval: write it like '1 second', "
            "'500 milliseconds' or '2 minutes'"
        )
    value = float(found.group(1)) * units[unit]
    if value <= 0:
        raise ConfigError(f"trigger interval {interval!r} must be more than 0")
    return value
