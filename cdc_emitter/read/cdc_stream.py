"""`read_cdc_stream`: a CDCv2 topic as DataFrames of proven times, in the caller's own loop.

The batches of the ``cdcv2`` streaming source (`cdc_emitter.read.stream_source`), without a
Spark streaming query: the caller iterates, and each step hands over a DataFrame with the
consolidated updates of the times the topic proved complete since the previous step. It runs
on every PySpark this project supports — on 3.5, which has no Python data sources, it is the
way to consume a topic as a stream — and on Spark Connect (the rows are made in the driver).

Restarting exactly is the caller's part, as with any consumer without a checkpoint: keep the
``upper`` of the last batch made durable (a table can record it in its commit, as
``cdc-emitter apply`` does) and pass it as ``start`` to the next run.

Guarantees:

* each batch holds exactly the updates of the times in ``[lower, upper)``, consolidated (one
  update per data and time, no zero diff): never an update of an open time, never a duplicate,
  never a time twice; the batches follow one another (each ``lower`` is the previous
  ``upper``);
* memory holds the updates of open times (warned about as ``verify`` warns) and those of the
  batch being handed over (what one step read, at most ``max_read_seconds`` of reading);
* a protocol violation raises `ViolationError` and nothing more is handed out.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql import types as T

from cdc_emitter.errors import BrokerError, ConfigError, SchemaError
from cdc_emitter.kafka.config import BROKER_TIMEOUT
from cdc_emitter.protocol.codec import CdcCodec
from cdc_emitter.protocol.schemas import data_schema_from_text
from cdc_emitter.protocol.updates import Update
from cdc_emitter.read.follow import TopicFollower
from cdc_emitter.spark.avro_types import row_converter, spark_struct

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["CdcBatch", "read_cdc_stream", "stream_columns", "topic_data_schema"]

#: The columns after the data columns.
EXTRA_COLUMNS = ("time", "diff")


@dataclass(frozen=True)
class CdcBatch:
    """One step of `read_cdc_stream`.

    Attributes:
        df: The updates: the data columns, ``time`` and ``diff``.
        lower: Every time below it was in an earlier batch (or before ``start``).
        upper: The frontier after this batch: every time below it is complete and handed out;
            None when the history is closed (the last batch).
        updates: How many updates ``df`` holds.
    """

    df: DataFrame
    lower: int
    upper: int | None
    updates: int


def stream_columns(data_schema: Mapping[str, Any]) -> T.StructType:
    """The Spark schema of a stream of updates: the data columns, ``time`` and ``diff``.

    Raises:
        SchemaError: A data column is named ``time`` or ``diff``.
    """
    data = spark_struct(dict(data_schema))
    clash = [f.name for f in data.fields if f.name.lower() in EXTRA_COLUMNS]
    if clash:
        raise SchemaError(
            f"the topic's data has a column named {clash[0]!r}, which the stream adds itself "
            "(the update's time and diff): rename it in the writer"
        )
    return T.StructType(
        [*data.fields, T.StructField("time", T.LongType(), False)]
        + [T.StructField("diff", T.LongType(), False)]
    )


def topic_data_schema(
    bootstrap_servers: str,
    topic: str,
    config: Mapping[str, Any] | None = None,
    *,
    schema: str | None = None,
    timeout: float = BROKER_TIMEOUT,
    option: str = "schema",
) -> dict:
    """The Avro ``data`` record to decode ``topic`` with: ``schema`` (JSON) when given, else the
    writer's, from the header of the topic's newest progress statement.

    Raises:
        SchemaError: ``schema`` is not a data record, or the topic has no statement yet (the
            message names ``option``, the way to pass one).
    """
    if schema:
        try:
            return data_schema_from_text(schema)
        except (SchemaError, ValueError) as exc:
            raise SchemaError(f"{option}: {exc}") from exc
    from cdc_emitter.kafka.topic_schema import writer_schema

    written = writer_schema(bootstrap_servers, topic, dict(config or {}), timeout=timeout)
    if written is None:
        raise SchemaError(
            f"topic {topic!r} has no progress statement with the writer's schema yet: pass "
            f"{option} (the Avro data record as JSON)"
        )
    return written


def read_cdc_stream(
    spark: SparkSession,
    bootstrap_servers: str,
    topic: str,
    *,
    start: int | None = 0,
    schema: str | None = None,
    config: Mapping[str, Any] | None = None,
    once: bool = False,
    max_read_seconds: float = 1.0,
    broker_timeout: float = BROKER_TIMEOUT,
) -> Iterator[CdcBatch]:
    """Follow ``topic``, handing over the updates of each group of newly complete times.

    Args:
        spark: The session the DataFrames are made in.
        bootstrap_servers: The Kafka servers.
        topic: The CDCv2 topic.
        start: The first time to hand over: the ``upper`` of the last batch the caller made
            durable (times below it are read, to prove later ones, but not handed over); None,
            the upper of a closed history's last batch, hands over nothing.
        schema: The Avro ``data`` record as JSON; default: the writer's, from the topic.
        config: librdkafka settings (``security.protocol``, ...).
        once: Stop once every message the topic held at the start is read (else follow it
            until the caller stops iterating).
        max_read_seconds: The most time one step spends reading before it hands over.
        broker_timeout: Seconds a broker may be unreachable.

    Yields:
        A `CdcBatch` each time the frontier moves past ``start`` and on (a batch may hold no
        update: its times were empty); the last one has ``upper`` None when the history closes.

    Raises:
        ViolationError: The topic broke the protocol (nothing of the broken time is handed
            over).
        BrokerError: The broker is unreachable for longer than ``broker_timeout``, or the
            topic does not prove the times below ``start`` (messages deleted by retention, or
            another topic).
        SchemaError: See `topic_data_schema`.
        ConfigError: ``max_read_seconds`` is not above 0.
    """
    if max_read_seconds <= 0:
        raise ConfigError(f"max_read_seconds must be more than 0, not {max_read_seconds!r}")
    if start is None:  # the upper of a closed history's last batch: nothing comes after it
        return
    data = topic_data_schema(
        bootstrap_servers,
        topic,
        config,
        schema=schema,
        timeout=broker_timeout,
        option="argument 'schema'",
    )
    columns, row = stream_columns(data), row_converter(data)
    lower = start
    with TopicFollower(
        bootstrap_servers,
        topic,
        CdcCodec(data),
        config,
        broker_timeout=broker_timeout,
        start=start,
    ) as follower:
        read, quiet_since = follower.reader.messages, time.monotonic()
        while True:
            updates = follower.advance(max_read_seconds)
            frontier = follower.frontier
            upper = frontier[0] if frontier else None
            if upper is None or upper > lower:
                rows = [(*row(u.data), u.time, u.diff) for u in _in_time_order(updates)]
                yield CdcBatch(spark.createDataFrame(rows, columns), lower, upper, len(rows))
                if upper is None:
                    return
                lower = upper
            if follower.reader.messages > read:
                read, quiet_since = follower.reader.messages, time.monotonic()
            if (
                (follower.caught_up or once and follower.read_all_at_start)
                and upper is not None
                and upper < start
            ):
                # the times below `start` were proven once: only a topic that lost messages
                # (or another topic) proves less; a follower waits for the broker timeout
                if once or time.monotonic() - quiet_since > broker_timeout:
                    raise BrokerError(
                        f"topic {topic!r} on {bootstrap_servers} does not prove the times "
                        f"below {start}, where the last run stopped (its frontier is "
                        f"{upper}): were messages deleted by retention, or is this another "
                        "topic?"
                    )
            elif once and follower.read_all_at_start:
                return


def _in_time_order(updates: list[Update]) -> list[Update]:
    return sorted(updates, key=lambda u: u.time)
