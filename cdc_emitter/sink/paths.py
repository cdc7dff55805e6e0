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
import threading
import weakref
from collections.abc import Callable
from typing import Any, Literal

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import to_avro

from cdc_emitter.errors import ConfigError
from cdc_emitter.kafka.frontier import TopicFrontier
from cdc_emitter.kafka.producer import CdcProducer
from cdc_emitter.protocol.schemas import Framing
from cdc_emitter.sink import layout
from cdc_emitter.sink.batch import Batch, Checked
from cdc_emitter.sink.distributed import DistributedPath
from cdc_emitter.sink.driver import DriverPath
from cdc_emitter.sink.layout import Layout, RowColumns
from cdc_emitter.sink.options import SMALL_BATCH_BYTES, Encoder, Late
from cdc_emitter.sink.python_path import PythonPath
from cdc_emitter.sink.python_tasks import TaskSpec
from cdc_emitter.sink.row_checks import BATCH, Check, row_checks
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


#: Sessions found to have both spark-avro and spark-sql-kafka-0-10. A session's jars stay
#: loaded, so a session object is probed once, not once per sink: the probes are two analyses,
#: about 25 ms of a new sink's first batch on a classic session, otherwise paid again by every
#: new sink writing DataFrames of the same session (one-off ``write`` calls; a ``foreachBatch``
#: function gets a new session object per micro-batch on a classic session, so a sink made in
#: it still probes). A session found without them is probed again by the next sink.
_JVM_SESSIONS: weakref.WeakSet[SparkSession] = weakref.WeakSet()
_jvm_sessions_lock = threading.Lock()


def resolve_encoder(
    spark: SparkSession, bootstrap_servers: str, topic: str, producer_config: dict
) -> Encoder:
    """``"auto"`` resolved: ``"jvm"`` when the session can take it, else ``"python"``."""
    chosen: Encoder = "python"
    missing = missing_package(spark)
    if missing is not None:
        why = f"{missing} is not loaded"
    else:
        try:
            kafka_write_options(bootstrap_servers, topic, producer_config)
            chosen, why = "jvm", "spark-avro and spark-sql-kafka-0-10 are loaded"
        except ConfigError as exc:
            why = str(exc)
    log.info("cdc sink topic=%s: encoder %s (%s)", topic, chosen, why)
    return chosen


def missing_package(spark: SparkSession) -> str | None:
    """The Spark package the JVM data path needs that the session lacks (spark-avro first);
    None when it has both. A session found with both is not probed again (`_JVM_SESSIONS`)."""
    with _jvm_sessions_lock:
        if spark in _JVM_SESSIONS:
            return None
    if not probe_avro(spark):
        return "spark-avro"
    if not probe_kafka(spark):
        return "spark-sql-kafka-0-10"
    with _jvm_sessions_lock:
        _JVM_SESSIONS.add(spark)
    return None


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


class DataPaths:
    """One sink's data paths, kept for its life, and the choice of the one that checks and
    writes each batch (the module docstring says how it is made).

    Args:
        bootstrap_servers: the Kafka cluster.
        topic: the CDC topic.
        producer_config: the sink's librdkafka settings.
        encoder: the sink's ``encoder`` argument (``"auto"`` is resolved once, `encoder`).
        max_message_bytes: the largest message the sink makes.
        framing: how messages are framed (the Python path frames its own).
        time_column: the time column in column mode, else None.
        diff_column: the diff column.
        late: what a column-mode update below the batch's lower bound does.
        flush_timeout: seconds a task waits for acknowledgements.
        small_batch_rows: the sink's ``small_batch_rows`` (0: never the driver path).
        producer: the sink's producer of the updates the driver writes.

    Attributes:
        task_producer: the Python path's producer on the executors (None: a `CdcProducer`);
            the seam where tests put one that fails on cue.
    """

    def __init__(
        self,
        *,
        bootstrap_servers: str,
        topic: str,
        producer_config: dict,
        encoder: Encoder,
        max_message_bytes: int,
        framing: Framing,
        time_column: str | None,
        diff_column: str,
        late: Late,
        flush_timeout: float | None,
        small_batch_rows: int,
        producer: Callable[[], CdcProducer],
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.producer_config = producer_config
        self.chosen_encoder = encoder
        self.max_message_bytes = max_message_bytes
        self.framing = framing
        self.time_column = time_column
        self.diff_column = diff_column
        self.late = late
        self.flush_timeout = flush_timeout
        self.small_batch_rows = small_batch_rows
        self.producer = producer
        self.task_producer: Callable[[TaskSpec], Any] | None = None
        self._resolved: Encoder | None = None
        self._distributed: DistributedPath | None = None
        self._driver: DriverPath | None = None
        # how the next batch goes: on the driver when the last was small, or consolidated to
        # few updates; the first goes the distributed path, whatever its size, unless the
        # topic's last batch of the same layout says otherwise (`follow_topic`)
        self._next: JvmPath = EXECUTORS
        self._followed = False
        # (key, the last batch's row checks), see _row_checks
        self._last_checks: tuple[tuple, list[Check]] | None = None
        # (layout, data Columns, diff Column) of the last batch, see _prepared
        self._row_columns: RowColumns | None = None

    def encoder(self, spark: SparkSession) -> Encoder:
        """The data path: ``encoder``, or for ``"auto"`` ``"jvm"`` when the session can take it,
        else ``"python"`` (decided once, `resolve_encoder`)."""
        if self.chosen_encoder != "auto":
            return self.chosen_encoder
        if self._resolved is None:
            self._resolved = resolve_encoder(
                spark, self.bootstrap_servers, self.topic, self.producer_config
            )
        return self._resolved

    @property
    def distributed(self) -> DistributedPath:
        """The JVM family's distributed path (`cdc_emitter.sink.distributed`): it sizes each
        batch's spread from the last."""
        if self._distributed is None:
            self._distributed = DistributedPath(
                bootstrap_servers=self.bootstrap_servers,
                topic=self.topic,
                producer_config=self.producer_config,
                max_message_bytes=self.max_message_bytes,
                row_checks=self._row_checks,
                producer=self.producer,
                flush_timeout=self.flush_timeout,
                join_bytes=SMALL_BATCH_BYTES if self.small_batch_rows else 0,
            )
        return self._distributed

    @property
    def driver(self) -> DriverPath:
        """The JVM family's driver path (`cdc_emitter.sink.driver`)."""
        if self._driver is None:
            self._driver = DriverPath(
                small_batch_rows=self.small_batch_rows,
                max_message_bytes=self.max_message_bytes,
                time_column=self.time_column,
                diff_column=self.diff_column,
                late=self.late,
                flush_timeout=self.flush_timeout,
                producer=self.producer,
                plan=lambda spark, batch: self.distributed.plan(spark, batch)[0],
                row_checks=self._row_checks,
            )
        return self._driver

    def follow_topic(
        self, state: TopicFrontier, spark: SparkSession, cols: Layout, encoder: Encoder
    ) -> None:
        """Once per sink, on its first batch: size that batch like the topic's last one of the
        same data layout, by any sink (`topic_shape`): its path, its spread and whether its rows
        are consolidated straight away, as a running sink's next batch follows its last. A hint
        for speed only: a batch unlike it is written the same."""
        if self._followed:
            return
        self._followed = True
        shape = topic_shape(self.topic, state, cols.schema_text) if encoder == "jvm" else None
        if shape is None:
            return
        rows, groups, n_bytes = shape
        self._next = path_after(rows, groups, n_bytes, self.small_batch_rows)
        self.distributed.follow(rows, groups, n_bytes, spark, cols.schema, cols.data_cols)
        log.debug(
            "topic %r: the last batch had %d rows, %d groups and %d bytes of messages: the "
            "first batch goes the %s path",
            self.topic,
            rows,
            groups,
            n_bytes,
            self._next,
        )

    def check(
        self,
        df: DataFrame,
        spark: SparkSession,
        batch: Batch,
        encoder: Encoder,
        *,
        schema_id: int,
    ) -> tuple[JvmPath, Checked]:
        """Check every row of the batch (a bad one raises: nothing written) by the path the last
        batch chose: the driver path, or the distributed one for a batch too big for the driver
        after all; or by the Python path. Choose the next batch's path from this one's figures.

        Returns:
            Where the batch is finished (`DRIVER`, ...), and the checked batch.
        """
        path = self._next
        checked: Checked | None = None
        prepared: DataFrame | None = None  # built only for a path that reads it
        if encoder == "jvm" and path != EXECUTORS and small_layout(batch):
            if path == DRIVER_AFTER_EXECUTORS:
                prepared = self._prepared(df, batch, encoder)
            checked = self.driver.check(df, prepared, spark, batch)
            if checked is None:  # bigger than the driver takes: of unknown size
                self.distributed.unsized()
        if checked is None:
            path = EXECUTORS
            if prepared is None:
                prepared = self._prepared(df, batch, encoder)
            if encoder == "jvm":  # counts and digest known before the claim
                checked = self.distributed.check(prepared, spark, batch)
            else:
                checked = self._python_path(schema_id).check(prepared, batch)
        if encoder == "jvm":  # by the rows the driver would take, and what they consolidated to
            self._next = path_after(
                checked.rows, checked.groups, checked.bytes, self.small_batch_rows
            )
            if path == EXECUTORS and checked.produced_on_driver:
                path = DRIVER_AFTER_EXECUTORS  # a small batch's messages came back to be joined
        return path, checked

    def _prepared(self, df: DataFrame, batch: Batch, encoder: Encoder) -> DataFrame:
        """The rows as data columns, time and diff (`layout.prepared_rows`). The data and diff
        Columns are the last batch's when the layout is (each Column made is round trips to the
        JVM)."""
        self._row_columns = layout.row_columns(self._row_columns, batch.data_cols, batch.diff_col)
        return layout.prepared_rows(
            df,
            batch,
            self._row_columns,
            jvm=encoder == "jvm",
            time_column=self.time_column,
            late=self.late,
        )

    def _row_checks(self, batch: Batch) -> list[Check]:
        """The JVM family's per-row checks of ``batch`` (`row_checks`). A batch of one time has
        no time to check row by row: its interval was decided from it (`batch_upper` refuses a
        re-run's time beyond its record)."""
        rerun = batch.recorded is not None and batch.time is None
        # the checks name the batch as BATCH (row_checks.task_error puts its name back) and hold
        # the frontier only where a time column is checked against it: most batches share the
        # last one's, already built (each Column made is round trips to the JVM)
        recorded_upper = batch.recorded.upper if rerun and batch.recorded is not None else None
        key = (batch.late_below if self.time_column else None, recorded_upper)
        if self._last_checks is None or self._last_checks[0] != key:
            self._last_checks = (
                key,
                row_checks(
                    what=BATCH,
                    lower=batch.late_below,
                    recorded_upper=recorded_upper,
                    time_column=self.time_column,
                    diff_column=self.diff_column,
                ),
            )
        return self._last_checks[1]

    def _python_path(self, schema_id: int) -> PythonPath:
        """The Python data path (`cdc_emitter.sink.python_path`), for this batch's schema id."""
        return PythonPath(
            bootstrap_servers=self.bootstrap_servers,
            topic=self.topic,
            producer_config=self.producer_config,
            framing=self.framing,
            schema_id=schema_id,
            max_message_bytes=self.max_message_bytes,
            flush_timeout=self.flush_timeout,
            time_column=self.time_column,
            diff_column=self.diff_column,
            producer_factory=self.task_producer,
        )
