"""Choosing the data path of a batch: ``encoder="auto"`` resolved to the JVM or the Python path,
and, within the JVM path, the driver or the executors (see `DRIVER`).

The JVM path's choice follows the last batch: a small one, or one whose rows consolidated to few
updates, sends the next to the driver (`cdc_emitter.sink.driver`); anything else, and a sink's
first batch, goes the distributed path (`cdc_emitter.sink.distributed`) — unless the topic's
last statement of the same layout says how big its batch was (`topic_shape`).

Guarantees:

- ``"auto"`` is ``"jvm"`` only when spark-avro and spark-sql-kafka-0-10 are loaded and every
  ``producer_config`` key has a Java equivalent;
- the choice is a matter of speed only: every path checks the same rows and writes the same
  messages and digest.
"""

from __future__ import annotations

import json
import logging
from typing import Literal

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import to_avro

from cdc_emitter.errors import ConfigError
from cdc_emitter.kafka.frontier import TopicFrontier
from cdc_emitter.sink.batch import Batch
from cdc_emitter.sink.options import SMALL_BATCH_BYTES, Encoder
from cdc_emitter.spark.kafka import kafka_write_options
from cdc_emitter.spark.schema import contains_map

log = logging.getLogger("cdc_emitter.sink")  # CdcSink's logger: one name for the sink's lines

#: The paths a batch takes within the JVM data path (see `DRIVER`).
JvmPath = Literal["driver", "driver after executors", "executors"]
#: The paths of a batch within the JVM data path (``BatchResult.finished_on``, then
#: ``consolidated_on``): the rows brought to the driver, which consolidates and produces them;
#: the rows consolidated by a Spark job, the updates brought to the driver, which produces them;
#: or everything on the executors, Spark's Kafka writer producing.
DRIVER: JvmPath = "driver"
DRIVER_AFTER_EXECUTORS: JvmPath = "driver after executors"
EXECUTORS: JvmPath = "executors"


def resolve_encoder(
    spark: SparkSession, bootstrap_servers: str, topic: str, producer_config: dict
) -> Encoder:
    """``"auto"`` resolved: ``"jvm"`` when the session can take it, else ``"python"``."""
    chosen: Encoder = "python"
    why = "spark-avro is not loaded"
    if probe_avro(spark):
        why = "spark-sql-kafka-0-10 is not loaded"
        if probe_kafka(spark):
            try:
                kafka_write_options(bootstrap_servers, topic, producer_config)
                chosen, why = "jvm", "spark-avro and spark-sql-kafka-0-10 are loaded"
            except ConfigError as exc:
                why = str(exc)
    log.info("cdc sink topic=%s: encoder %s (%s)", topic, chosen, why)
    return chosen


def probe_avro(spark: SparkSession) -> bool:
    """Whether the session has spark-avro."""
    try:
        # analysis fails without spark-avro
        _ = spark.range(1).select(to_avro(F.col("id"), '"long"')).schema
        return True
    except Exception:  # noqa: BLE001
        return False


def probe_kafka(spark: SparkSession) -> bool:
    """Whether the session has spark-sql-kafka-0-10."""
    try:  # resolving the source needs the package; nothing connects before a scan
        _ = (
            spark.read.format("kafka")
            .option("kafka.bootstrap.servers", "127.0.0.1:9")
            .option("subscribe", "cdc-emitter-probe")
            .load()
            .schema
        )
        return True
    except Exception:  # noqa: BLE001
        return False


def path_after(rows: int, groups: int, n_bytes: int, small_batch_rows: int) -> JvmPath:
    """How the batch after one of ``rows`` input rows, ``groups`` distinct data and times
    among them and ``n_bytes`` of messages is written (see `DRIVER`)."""
    if not (0 < small_batch_rows and n_bytes <= SMALL_BATCH_BYTES):
        return EXECUTORS
    if rows <= small_batch_rows:
        return DRIVER
    return DRIVER_AFTER_EXECUTORS if groups <= small_batch_rows else EXECUTORS


def topic_shape(topic: str, state: TopicFrontier, schema_text: str) -> tuple[int, int, int] | None:
    """The rows, groups and bytes of the topic's last batch of the same data layout, by any sink
    (the shape header of its progress statement); None when it does not say."""
    if not state.shape or state.schema != schema_text:
        return None
    try:
        shape = json.loads(state.shape)
        rows, groups, n_bytes = int(shape["rows"]), int(shape["groups"]), int(shape["bytes"])
    except (ValueError, KeyError, TypeError):
        log.debug(
            "topic %r: a progress statement's shape header %r is not ours: not followed",
            topic,
            state.shape[:200],
        )
        return None
    if rows <= 0 or n_bytes <= 0:
        return None
    return rows, groups, n_bytes


def small_layout(batch: Batch) -> bool:
    """Whether the driver can finish this layout's batches: it consolidates on each row's
    encoded bytes, which equal rows share unless they hold maps (entries in any order)."""
    return bool(batch.data_cols) and not any(
        contains_map(batch.schema[c].dataType) for c in batch.data_cols
    )
