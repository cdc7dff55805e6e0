"""``CdcSink``: write Spark DataFrames to Kafka in the Materialize CDC format (CDCv2).

Attach it to a streaming query with ``writeStream.foreachBatch(CdcSink(...))``, or call
``CdcSink(...).write(df)`` for one batch outside streaming. What happens to a batch:

1. **Schema**: the data columns (every column except the diff and time columns) are mapped to
   the Avro ``data`` record (`cdc_emitter.spark.schema`); an unsupported type fails here.
2. **Interval, decided once**: a batch that already has a recorded interval — in the sink log
   beside the checkpoint (`cdc_emitter.sink.log`), or in the headers of the topic's latest
   progress message (same writer id, same batch id) — re-emits exactly that interval. Otherwise
   its lower bound is the topic's current frontier ``F``, learnt from the tail of the topic
   (never by scanning all of it) and then carried forward from batch to batch while partition 0,
   where every progress statement goes, has not moved past this sink's last statement (one
   offset request, through a client kept for the sink's life). Default time mode: ``t = max(time_offset + batch_id, F)`` and
   the interval is ``[F, t + 1)``. Column mode: ``[F, max_time + 1)``; a time below ``F`` is late.
3. **Every row checked before the first message**, by the path that writes the batch — null,
   negative and late times, null diffs, a consolidated diff over 64 bits, an update too big
   for one message: each a `BadInputError` naming the column, time
   and an example row. The paths (their seam: `cdc_emitter.sink.batch`):

   - `cdc_emitter.sink.distributed` (``encoder="jvm"``, the default when Spark has
     spark-avro and spark-sql-kafka-0-10): one Spark job validates, consolidates, encodes and
     packs the update arrays (`cdc_emitter.sink.plan`); Spark's own Kafka writer writes
     them — nothing of ours on the executors;
   - `cdc_emitter.sink.driver` (``encoder="jvm"``, after a small batch, or one whose rows
     consolidated to few updates): the rows, or their updates, come to the driver, which packs
     them and produces them through its own producer;
   - `cdc_emitter.sink.python_path` (``encoder="python"``): a validation scan, then one
     job that consolidates and produces on the executors
     (`cdc_emitter.sink.python_tasks`).

   A re-run whose first attempt is complete in the topic compares its digest
   (`cdc_emitter.sink.digest`) here, and writes nothing.
4. The interval is recorded in the sink log (when there is a checkpoint location), after a last
   check that no other writer took it.
5. **The update arrays are written** and acknowledged (``acks=all``): a delivery error fails the
   batch, and a retry writes the same updates.
6. Only then the driver writes the progress statement for the interval (to partition 0, with
   headers naming the writer, the batch, the interval and its digest) and flushes it.

A retry therefore only ever causes duplicates (identical ``(data, time, diff)`` triples) that
readers discard; it never moves a batch to a new time.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Literal, NamedTuple

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.avro.functions import to_avro

from cdc_emitter.errors import (
    BadInputError,
    CdcError,
    ConcurrentWriterError,
    ConfigError,
    DecodeError,
    LateUpdateError,
    ReplayError,
    SchemaError,
)
from cdc_emitter.kafka.config import PRODUCER_DEFAULTS
from cdc_emitter.kafka.frontier import TopicFrontier, retrying, topic_frontier
from cdc_emitter.kafka.producer import CdcProducer
from cdc_emitter.kafka.reading import TopicOffsets
from cdc_emitter.kafka.registry import SchemaRegistry, schema_text_of, subject_for
from cdc_emitter.kafka.topics import ensure_topic, topic_settings
from cdc_emitter.protocol.codec import CdcCodec, schema_differences, type_text
from cdc_emitter.protocol.headers import (
    HEADER_BATCH,
    HEADER_BATCH_LOWER,
    HEADER_BATCH_UPPER,
    HEADER_DIGEST,
    HEADER_KIND,
    HEADER_LOWER,
    HEADER_SCHEMA,
    HEADER_SHAPE,
    HEADER_UPPER,
    HEADER_WRITER,
)
from cdc_emitter.protocol.updates import MAX_LONG, progress_from_counts, split_progress
from cdc_emitter.sink.batch import Batch, Checked, Written
from cdc_emitter.sink.digest import digest_form, format_digest, parse_digest, replay_message
from cdc_emitter.sink.distributed import DistributedPath
from cdc_emitter.sink.driver import DriverPath
from cdc_emitter.sink.interval import Recorded, batch_upper, recorded_from_statement
from cdc_emitter.sink.interval import batch_time as decide_batch_time
from cdc_emitter.sink.log import (
    DataFrameSinkLog,
    SinkLog,
    SinkLogEntry,
    is_connect,
    open_sink_log,
    query_id_from_checkpoint,
)
from cdc_emitter.sink.plan import BATCH, Check, row_checks
from cdc_emitter.sink.python_path import PythonPath
from cdc_emitter.sink.python_tasks import TaskSpec
from cdc_emitter.sink.result import BatchResult, PhaseClock
from cdc_emitter.spark.columns import DIFF, TIME  # one name per column, every path
from cdc_emitter.spark.kafka import kafka_write_options
from cdc_emitter.spark.schema import contains_map, data_schema, without_collation

__all__ = [
    "CdcSink",
    "BatchResult",
    "TopicFrontier",
    "HEADER_KIND",
    "HEADER_WRITER",
    "HEADER_BATCH",
    "HEADER_LOWER",
    "HEADER_UPPER",
    "topic_frontier",
]

log = logging.getLogger("cdc_emitter.sink")  # the name users configure (0.1 had it)

DEFAULT_MAX_MESSAGE_BYTES = 900_000
#: The data paths (see the ``encoder`` argument of `CdcSink`).
Encoder = Literal["auto", "jvm", "python"]
ENCODERS: tuple[Encoder, ...] = ("auto", "jvm", "python")
#: What a column-mode update below the batch's lower bound does (see ``late``).
Late = Literal["error", "advance"]
#: How messages are framed (see ``framing``).
Framing = Literal["confluent", "raw"]
#: The paths a batch takes within the JVM data path (see `DRIVER`).
JvmPath = Literal["driver", "driver after executors", "executors"]
#: Bytes a Kafka record batch adds around one message's value (headers included), kept free
#: below the topic's max.message.bytes.
RECORD_OVERHEAD = 1024
#: Kafka's default max.message.bytes for a topic (1 MiB + 12).
KAFKA_DEFAULT_MAX_MESSAGE_BYTES = 1_048_588
#: How many of its own batches' statements a sink remembers for re-runs (Spark re-runs only the
#: last batch; the sink log and the topic's tail hold the rest).
CARRIED_BATCHES = 64
#: By default, a batch after one of at most this many rows and bytes of messages is finished on
#: the driver (`cdc_emitter.sink.driver`): a Spark job and its shuffle cost more than the
#: driver's work on so few rows (measured on 2 cores: 0.32 s against 0.80 s per 250,000-row
#: batch; at 500,000 still ahead, but the driver's work does not spread over a cluster as the
#: executors' does). After more rows that consolidated to at most this many, the executors
#: consolidate and the driver finishes.
SMALL_BATCH_ROWS = 250_000
SMALL_BATCH_BYTES = 16 * 2**20
#: The paths of a batch within the JVM data path (``BatchResult.finished_on``, then
#: ``consolidated_on``): the rows brought to the driver, which consolidates and produces them;
#: the rows consolidated by a Spark job, the updates brought to the driver, which produces them;
#: or everything on the executors, Spark's Kafka writer producing.
DRIVER: JvmPath = "driver"
DRIVER_AFTER_EXECUTORS: JvmPath = "driver after executors"
EXECUTORS: JvmPath = "executors"
_INTEGRAL = ("bigint", "int", "smallint", "tinyint")


class _Layout(NamedTuple):
    """A batch's columns as the sink writes them."""

    schema: T.StructType  # the input's schema, collations taken off
    data_cols: list[str]
    diff_col: str | None  # None: every row counts +1
    avro_data: dict  # the Avro data record
    schema_text: str  # ``avro_data`` as compact JSON


class _Decided(NamedTuple):
    """A batch's interval as decided before any Spark work."""

    writer: str  # the batch's writer (a re-run's: as first recorded)
    lower: int
    recorded: Recorded | None  # a re-run's first decision
    digest: tuple | None  # what a re-run's first attempt wrote, if complete in the topic
    state: TopicFrontier  # the topic's frontier when the interval was decided


def _without_collations(df: DataFrame) -> DataFrame:
    """``df`` with collated strings cast to plain ones: written and compared by their bytes."""
    plain = {f.name: without_collation(f.dataType) for f in df.schema.fields}
    if not any(plain.values()):
        return df
    return df.select(
        *[F.col(c).cast(t).alias(c) if t is not None else F.col(c) for c, t in plain.items()]
    )


class CdcSink:
    """A Spark sink writing CDCv2 changefeeds to a Kafka topic (see the module docstring).

    Use it as ``writeStream.foreachBatch(CdcSink(...))``, or call `write` for one batch
    outside streaming. Every argument but the first two is keyword-only.

    Args:
        bootstrap_servers: the Kafka cluster, ``HOST:PORT[,...]``.
        topic: the CDC topic to write.
        checkpoint_location: the streaming query's checkpoint; the sink log of batch intervals
            goes to ``<checkpoint_location>/cdc-emitter-sink`` (any Hadoop FileSystem path).
            Without it, re-run batches find their interval in the progress message headers.
        time_column: column of non-negative integer times (column mode); None: the default
            mode, ``time = time_offset + batch_id`` (never below the topic's frontier).
        diff_column: integer diff column (rows count +1 when the DataFrame has no such column).
        time_offset: in the default mode, the time of batch 0.
        late: ``"error"`` (`LateUpdateError`) or ``"advance"``
            (move late updates to the lower bound of the batch's interval, then consolidate)
            for column-mode times below it.
        framing: ``"confluent"`` (the 5-byte Confluent header) or ``"raw"`` (see ``CdcCodec``).
        schema_id: the schema id in the Confluent header (without a schema registry).
        schema_registry_url: a Confluent-compatible schema registry. Before a batch's first
            message, the topic's union schema is registered under ``<topic>-value`` and every
            message is framed with the id the registry gave; the subject's compatibility rule
            is the registry's to apply, and a schema it refuses fails the batch with the
            registry's reason. A data schema other than the topic's is accepted only then, and
            only if the subject's compatibility is not ``NONE``.
        schema_registry_config: the registry client's settings (``basic.auth.user.info``,
            ``bearer.auth.*``, ``ssl.*``; never printed).
        producer_config: librdkafka settings on top of the safe defaults (never mutated).
        max_message_bytes: the largest message the sink makes.
        create_topic: create a missing topic instead of failing.
        topic_partitions: the partitions of a topic the sink creates.
        writer_id: identifies this writer in progress headers; default: the streaming query's
            id (stable across restarts from a checkpoint), else a random id per sink object.
        encoder: the data path. ``"jvm"``: everything in Spark SQL and Spark's Kafka writer,
            nothing of ours on the executors (`cdc_emitter.sink.plan`; needs spark-avro
            and spark-sql-kafka-0-10, see `cdc_emitter.configure_spark`). ``"python"``:
            Arrow → numpy / fastavro, produced with librdkafka on the executors (they need
            cdc-emitter installed). ``"auto"``: ``jvm`` when both packages are loaded and every
            ``producer_config`` key has a Java equivalent, else ``python``.
        flush_timeout: seconds a task waits for acknowledgements (None: librdkafka's
            ``message.timeout.ms``).
        broker_timeout: seconds the driver waits for a broker that does not answer — the
            topic's metadata and settings, its end offsets and tail, retried — before the batch
            fails with a `BrokerError` that says how long it waited.
            (Deliveries are bounded by ``message.timeout.ms`` in ``producer_config``.)
        on_batch: called with each batch's `BatchResult` (its
            interval, updates, messages, bytes and seconds per phase) once its progress
            statement is acknowledged — to chart the sink. What it raises fails the batch
            *after* it was written; Spark's re-run of the batch then writes nothing new and
            calls it again.
        small_batch_rows: with the JVM data path, a batch that follows one of at most this many
            rows (and 16 MiB of messages) is finished on the driver: one narrow Spark job brings
            its rows encoded by ``to_avro``, the driver consolidates them and produces them with
            the sink's own producer — no shuffle, no second job. Same checks, messages and
            digest as the distributed path; a batch too big for ``spark.driver.maxResultSize``
            goes the distributed path. A first batch (written by the distributed path, its
            spread sized before its size is known) whose messages are at most 16 MiB and over
            twice as many as would hold them has them joined on the driver, which produces
            them. 0: never.

    Raises:
        ConfigError: an argument out of its range, conflicting arguments, or
            ``encoder="avro"`` (removed in 0.2).

    Attributes:
        last_result: the last batch's `BatchResult` (None
            before the first batch is written).
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        *,
        checkpoint_location: str | None = None,
        time_column: str | None = None,
        diff_column: str = "diff",
        time_offset: int = 0,
        late: Late = "error",
        framing: Framing = "confluent",
        schema_id: int = 0,
        schema_registry_url: str | None = None,
        schema_registry_config: Mapping[str, Any] | None = None,
        producer_config: Mapping[str, Any] | None = None,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        create_topic: bool = False,
        topic_partitions: int = 1,
        writer_id: str | None = None,
        encoder: Encoder = "auto",
        flush_timeout: float | None = None,
        broker_timeout: float = 30.0,
        on_batch: Callable[[BatchResult], None] | None = None,
        small_batch_rows: int = SMALL_BATCH_ROWS,
    ) -> None:
        if late not in ("error", "advance"):
            raise ConfigError(f"late must be 'error' or 'advance', not {late!r}")
        if framing not in ("confluent", "raw"):
            raise ConfigError(f"framing must be 'confluent' or 'raw', not {framing!r}")
        if str(encoder) == "avro":  # removed: say what replaces it
            raise ConfigError(
                "encoder='avro' was removed in 0.2: use 'jvm' (the default with "
                "configure_spark) or 'python'"
            )
        if encoder not in ENCODERS:
            raise ConfigError(
                f"encoder must be one of {', '.join(map(repr, ENCODERS))}, not {encoder!r}"
            )
        if (
            isinstance(time_offset, bool)
            or not isinstance(time_offset, int)
            or not 0 <= time_offset <= MAX_LONG
        ):
            raise ConfigError(f"time_offset must be a non-negative integer, not {time_offset!r}")
        if not topic:
            raise ConfigError("a topic name is required")
        if (
            isinstance(broker_timeout, bool)
            or not isinstance(broker_timeout, (int, float))
            or not broker_timeout > 0
        ):
            raise ConfigError(
                f"broker_timeout must be a positive number of seconds, not {broker_timeout!r}"
            )
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.checkpoint_location = checkpoint_location
        self.time_column = time_column
        self.diff_column = diff_column
        self.time_offset = time_offset
        self.late = late
        self.framing = framing
        self.schema_id = schema_id
        self.registry = None
        if schema_registry_url is not None:
            if framing != "confluent":
                raise ConfigError(
                    "schema_registry_url needs framing='confluent': the registry's id "
                    "travels in the Confluent header"
                )
            if schema_id:
                raise ConfigError(
                    f"schema_id={schema_id} conflicts with schema_registry_url: the "
                    "registry gives the id; drop schema_id"
                )
            self.registry = SchemaRegistry(schema_registry_url, schema_registry_config)
        elif schema_registry_config:
            raise ConfigError("schema_registry_config given without schema_registry_url")
        self._registered: dict[str, int] = {}  # schema text -> the registry's id for it
        self.producer_config = dict(producer_config or {})  # a copy: the caller's dict is theirs
        self.max_message_bytes = int(max_message_bytes)

        client_limit = int(
            self.producer_config.get("message.max.bytes", PRODUCER_DEFAULTS["message.max.bytes"])
        )
        if self.max_message_bytes + 1024 > client_limit:
            raise ConfigError(
                f"max_message_bytes={self.max_message_bytes} does not fit the producer's "
                f"message.max.bytes={client_limit} (with 1 KiB for record overhead): lower it, or raise "
                "message.max.bytes in producer_config (and the topic's max.message.bytes)"
            )
        self.create_topic = create_topic
        self.topic_partitions = topic_partitions
        self.writer_id = writer_id
        self._default_writer = uuid.uuid4().hex
        self.encoder = encoder
        self.flush_timeout = flush_timeout
        self.broker_timeout = float(broker_timeout)
        if on_batch is not None and not callable(on_batch):
            raise ConfigError(f"on_batch must be a function taking a BatchResult, not {on_batch!r}")
        self.on_batch = on_batch
        if (
            isinstance(small_batch_rows, bool)
            or not isinstance(small_batch_rows, int)
            or small_batch_rows < 0
        ):
            raise ConfigError(
                f"small_batch_rows must be a non-negative integer, not {small_batch_rows!r}"
            )
        self.small_batch_rows = small_batch_rows
        self._clock = PhaseClock()  # the current batch's phases (see sink.result)
        self._upper_hint: int | None = None  # write_upto's upper, for the batch being written
        self._topic_checked = False
        self._update_partitions: list[int] | None = None  # where update messages go (see Batch)
        self._schema_checked: str | None = None  # the data schema found compatible with the topic
        self._sinklog: SinkLog | DataFrameSinkLog | None = None
        self._query_id: str | None = None  # Spark Connect: from the checkpoint (see _writer)
        self._producer: CdcProducer | None = None  # progress statements' (see _driver_producer)
        self._topic_offsets: TopicOffsets | None = None  # end offsets and tail (see _offsets)
        self._carried: TopicFrontier | None = None  # the frontier after our last statement
        self._distributed: DistributedPath | None = None  # JVM path (see _distributed_path)
        self._driver: DriverPath | None = None  # JVM path (see _driver_path)
        # JVM path: (key, the last batch's row checks), see _row_checks
        self._last_checks: tuple[tuple, list[Check]] | None = None
        # (layout, data Columns, diff Column) of the last batch, see _prepared
        self._row_columns: tuple[tuple, list[Column], Column] | None = None
        # how the next batch goes (DRIVER, ...): on the driver (see sink.driver) when the last was
        # small, or consolidated to few updates; the first goes the distributed path, whatever
        # its size — unless the topic's last batch of the same layout says it (_follow_topic)
        self._next_path: JvmPath = EXECUTORS
        self._followed = False  # whether the first batch's path was looked up in the topic
        self._resolved_encoder: Encoder | None = None
        # the executors' producer_factory (see python_tasks.TaskSpec): a test seam
        self._task_producer: Callable[[TaskSpec], Any] | None = None
        #: the last batch's result (None before the first batch is written)
        self.last_result: BatchResult | None = None

    def __repr__(self) -> str:
        return (
            f"CdcSink(topic={self.topic!r}, bootstrap_servers={self.bootstrap_servers!r}, "
            f"time_column={self.time_column!r}, framing={self.framing!r})"
        )

    # -- entry points -----------------------------------------------------------------------

    def __call__(self, batch_df: DataFrame, batch_id: int) -> BatchResult:
        """Write micro-batch ``batch_id``: the ``foreachBatch`` entry point.

        Args:
            batch_df: the micro-batch: the data columns, the diff column (optional) and, in
                column mode, the time column.
            batch_id: Spark's id of the micro-batch; a re-run of a batch id re-emits the
                interval its first attempt decided.

        Returns:
            What the batch wrote.

        Raises:
            BadInputError: a bad row (null or negative time, null diff, a diff sum over 64
                bits, an update too big for one message); nothing of the batch is written.
            LateUpdateError: a column-mode time below the topic's frontier (``late="error"``).
            SchemaError: a column of a type the sink cannot write, or a data schema other than
                the topic's.
            ReplayError: a re-run whose data differs from its first attempt's.
            ConcurrentWriterError: another writer wrote a progress statement for the interval.
            CdcError: any other of the sink's errors (broker, delivery, configuration).
        """
        return self._write(batch_df, int(batch_id), fixed_time=None, close=False)

    def write_upto(self, df: DataFrame, batch_id: int, upper: int) -> BatchResult:
        """Write micro-batch ``batch_id`` and close every time below ``upper`` (column mode).

        For a source that knows its watermark: every time below ``upper`` is closed, not just
        those below the largest time + 1 — e.g. a converter whose source resolved times up to
        ``upper``, maybe with no rows in this batch. A re-run keeps the recorded interval.

        Args:
            df: the micro-batch, with the time column.
            batch_id: Spark's id of the micro-batch.
            upper: the interval's upper bound: every time below it is complete.

        Returns:
            What the batch wrote.

        Raises:
            ConfigError: the sink is not in column mode, or ``upper`` is not a non-negative
                integer.
            BadInputError: an update at ``upper`` or later, or another bad row (as for
                `__call__`, which lists the other errors).
        """
        if self.time_column is None:
            raise ConfigError("write_upto needs column mode (time_column=...)")
        if isinstance(upper, bool) or not isinstance(upper, int) or upper < 0:
            raise ConfigError(f"upper must be a non-negative integer, not {upper!r}")
        self._upper_hint = upper
        try:
            return self._write(df, int(batch_id), fixed_time=None, close=False)
        finally:
            self._upper_hint = None

    def write(self, df: DataFrame, time: int | None = None, close: bool = False) -> BatchResult:
        """Write one batch DataFrame outside streaming.

        Args:
            df: the batch: the data columns, the diff column (optional) and, in column mode,
                the time column.
            time: default mode: every row's time (None: the topic's current frontier); the
                interval is ``[frontier, time + 1)``. Column mode (``time_column``) takes the
                rows' own times, and no ``time``.
            close: the interval is ``[frontier, ∞)``, which closes the history.

        Returns:
            What the batch wrote.

        Raises:
            BadInputError: ``time`` is not a non-negative integer, or a bad row (as for
                `__call__`, which lists the other errors).
            ConfigError: ``time`` given in column mode.
        """
        if time is not None and (isinstance(time, bool) or not isinstance(time, int) or time < 0):
            raise BadInputError(f"time must be a non-negative integer, got {time!r}")
        return self._write(df, None, fixed_time=time, close=close)

    # -- helpers ----------------------------------------------------------------------------

    def _writer(self, spark: SparkSession, batch_id: int | None) -> str:
        """Who writes: ``writer_id``, else the streaming query's id (stable across restarts from
        its checkpoint, so a re-run batch is told from a new query's), else a random id."""
        if self.writer_id:
            return self.writer_id
        if not is_connect(spark):
            qid = spark.sparkContext.getLocalProperty("sql.streaming.queryId")
            return qid or self._default_writer
        if batch_id is None:
            return self._default_writer
        # Spark Connect shows foreachBatch no query id: the checkpoint's metadata file has it
        if self._query_id is None:
            if self.checkpoint_location is None:
                raise ConfigError(
                    "on Spark Connect the sink cannot see the streaming query's id, which tells a "
                    "re-run batch from a new query's: pass checkpoint_location= (the query's "
                    "checkpoint location) or a stable writer_id= to CdcSink"
                )
            self._query_id = query_id_from_checkpoint(spark, self.checkpoint_location)
        return self._query_id

    def frontier(self) -> TopicFrontier:
        """The topic's current frontier (see `topic_frontier`)."""
        # progress statements decode the same whatever the data schema: use a one-column one
        codec = CdcCodec(
            {"type": "record", "name": "data", "fields": [{"name": "x", "type": "long"}]},
            framing=self.framing,
            schema_id=self.schema_id,
        )
        skip = 5 if self.framing == "confluent" else 0

        def progress_only(value: bytes) -> Any:  # an update array is not decoded just to be skipped
            return None if value[skip : skip + 1] == b"\x00" else codec.decode(value)

        return topic_frontier(
            self.bootstrap_servers,
            self.topic,
            config=self._client_config(),
            decode=progress_only,
            offsets=self._offsets(),
            broker_timeout=self.broker_timeout,
        )

    def _offsets(self) -> TopicOffsets:
        """The topic's end offsets and tail, through one client for the sink's life."""
        if self._topic_offsets is None:
            self._topic_offsets = TopicOffsets(
                self.bootstrap_servers,
                self.topic,
                self._client_config(),
                broker_timeout=self.broker_timeout,
            )
        return self._topic_offsets

    def _partition0_end(self) -> int:
        """Partition 0's end offset, retried while the broker briefly cannot say (restarted,
        leader moving: the kept client's metadata is refreshed meanwhile)."""
        return retrying(lambda: self._offsets().end(0), self.broker_timeout)

    def _learn_frontier(self) -> TopicFrontier:
        """The topic's frontier: carried forward from this sink's last progress statement while
        partition 0 (where every statement goes) has not moved past it — one offset request —
        else read from the topic's tail."""
        carried = self._carried
        if carried is not None and self._partition0_end() == carried.partition0_end:
            return carried
        self._carried = state = self.frontier()
        return state

    def _carry(
        self,
        writer: str,
        batch_id: int | None,
        lower: int,
        upper: int | None,
        avro_data: dict,
        digest: str,
        statement_offset: int | None,
    ) -> None:
        """Remember the frontier our statement just set, as the next batch would read it from
        the tail (with the statements of earlier batches seen, for a re-run to find)."""
        if statement_offset is None:
            self._carried = None
            return
        before = self._carried
        batches = dict(before.batches) if before is not None else {}
        digests = dict(before.digests) if before is not None else {}
        if batch_id is not None:
            batches[(writer, batch_id)] = (lower, upper)
            digests[(writer, batch_id)] = digest
            for key in list(batches)[:-CARRIED_BATCHES]:
                batches.pop(key)
                digests.pop(key, None)
        self._carried = TopicFrontier(
            upper,
            writer,
            batch_id,
            lower,
            upper,
            True,
            batches,
            schema=json.dumps(avro_data, separators=(",", ":")),
            digests=digests,
            partition0_end=statement_offset + 1,
        )

    def _client_config(self) -> dict:
        """Client (security) settings for admin/consumer clients: producer-only keys dropped."""
        skip = set(PRODUCER_DEFAULTS) | {
            "linger.ms",
            "queue.buffering.max.ms",
            "batch.num.messages",
            "queue.buffering.max.messages",
            "queue.buffering.max.kbytes",
            "delivery.timeout.ms",
            "message.timeout.ms",
            "retries",
            "transactional.id",
            "partitioner",
            "request.required.acks",
            "message.send.max.retries",
            "retry.backoff.ms",
            "compression.codec",
            "sticky.partitioning.linger.ms",
        }
        return {k: v for k, v in self.producer_config.items() if k not in skip}

    def _ensure_topic(self) -> None:
        """The topic exists (or is created) and takes messages as large as this sink makes."""
        if self._topic_checked:
            return

        needed = self.max_message_bytes + RECORD_OVERHEAD
        created = (
            {"max.message.bytes": str(needed)} if needed > KAFKA_DEFAULT_MAX_MESSAGE_BYTES else None
        )
        # asked through the client kept for the frontier, which the tail read then reuses
        count = self._offsets().partition_count()
        if count is None:  # missing: created, or refused with what to do
            count = ensure_topic(
                self.bootstrap_servers,
                self.topic,
                create=self.create_topic,
                partitions=self.topic_partitions,
                config=self._client_config(),
                topic_config=created,
                timeout=self.broker_timeout,
            )
        self._update_partitions = list(range(1, count)) if count > 1 else None
        settings = topic_settings(
            self.bootstrap_servers,
            self.topic,
            config=self._client_config(),
            timeout=self.broker_timeout,
        )
        limit = (settings or {}).get("max.message.bytes")
        if limit is not None and int(limit) < needed:
            raise ConfigError(
                f"topic {self.topic!r} accepts messages of at most {int(limit)} bytes (its "
                f"max.message.bytes), but this sink makes messages of up to {self.max_message_bytes} "
                f"bytes plus up to {RECORD_OVERHEAD} of record overhead: pass max_message_bytes="
                f"{int(limit) - RECORD_OVERHEAD} or less, or raise the topic's max.message.bytes"
            )
        self._topic_checked = True

    def _codec(self, avro_data: dict) -> CdcCodec:
        return CdcCodec(
            avro_data,
            framing=self.framing,
            schema_id=self.schema_id,
            max_message_bytes=self.max_message_bytes,
            writer_schemas=None if self.registry is None else self.registry.data_schema,
        )

    def _register(self, avro_data: dict, schema_text: str, evolves: list[str]) -> int:
        """The registry's id for this batch's union schema under ``<topic>-value``.

        A data schema that differs from the topic's (``evolves``) is left to the subject's
        compatibility rule, which must then be one (not ``NONE``): readers resolve the older
        messages into the newer schema by their ids only if the registry vouches they can.
        """
        registry = self.registry
        assert registry is not None  # called only with a registry
        subject = subject_for(self.topic)
        if evolves:
            level = registry.compatibility(subject)
            if level.upper() == "NONE":
                raise SchemaError(
                    f"topic {self.topic!r} was written with another data schema than this batch's: "
                    f"{'; '.join(evolves)}; the {registry.where} would accept any schema for "
                    f"subject {subject!r} (compatibility NONE), so it cannot vouch that readers "
                    "resolve the older messages. Nothing was written. Set the subject's "
                    "compatibility (BACKWARD, FULL, ...) or write this data to a new topic"
                )
        try:
            schema_id = registry.register(subject, schema_text_of(avro_data))
        except SchemaError as exc:
            raise SchemaError(f"topic {self.topic!r}: {exc}. Nothing was written") from None
        log.info(
            "cdc sink topic=%s: %s gave schema id %d for subject %s",
            self.topic,
            registry.where,
            schema_id,
            subject,
        )
        self._registered[schema_text] = schema_id
        return schema_id

    def _check_schema(self, state: TopicFrontier, avro_data: dict, codec: CdcCodec) -> list[str]:
        """Refuse a batch whose data schema is not the one the topic was written with.

        Kafka is append-only: messages under two data schemas leave a topic no single schema
        reads. The topic's schema comes from the newest progress statement's header; a topic
        without one (another writer) is checked by decoding its newest update message.

        With a schema registry, readers resolve each message by its schema id, so a different
        schema is not refused here: its differences are returned for `_register` to put
        to the registry's compatibility rule.
        """
        way_out = (
            "Nothing was written. Write this data to a new topic, or give the batch exactly "
            "the topic's columns (names, order, types and nullability)"
        )
        if state.schema is not None:
            try:
                written = json.loads(state.schema)
            except ValueError:
                written = None
            differences = [] if written is None else schema_differences(written, avro_data)
            if differences and self.registry is not None:
                return differences
            if differences:
                raise SchemaError(
                    f"topic {self.topic!r} was written with another data schema than this "
                    f"batch's: {'; '.join(differences)}. {way_out}"
                )
            return []
        sample = state.update_sample
        skip = 5 if self.framing == "confluent" else 0
        if sample is not None and len(sample) > skip and sample[skip] == 0:
            try:
                codec.decode(sample)
            except DecodeError as exc:
                fields = ", ".join(
                    f"{f['name']} {type_text(f['type'])}" for f in avro_data["fields"]
                )
                raise SchemaError(
                    f"topic {self.topic!r} holds update messages that do not decode with this "
                    f"batch's data schema ({fields}): {exc}. {way_out}"
                ) from None
        return []

    def _log(self, spark: SparkSession) -> SinkLog | DataFrameSinkLog | None:
        if self.checkpoint_location is None:
            return None
        if self._sinklog is None:
            self._sinklog = open_sink_log(spark, self.checkpoint_location)
        return self._sinklog

    def _encoder(self, spark: SparkSession) -> Encoder:
        """The data path: ``encoder``, or for ``"auto"`` ``"jvm"`` when the session can take it,
        else ``"python"`` (decided once per sink)."""
        if self.encoder != "auto":
            return self.encoder
        if self._resolved_encoder is not None:
            return self._resolved_encoder
        chosen: Encoder = "python"
        why = "spark-avro is not loaded"
        if self._probe_avro(spark):
            why = "spark-sql-kafka-0-10 is not loaded"
            if self._probe_kafka(spark):
                try:
                    kafka_write_options(self.bootstrap_servers, self.topic, self.producer_config)
                    chosen, why = "jvm", "spark-avro and spark-sql-kafka-0-10 are loaded"
                except ConfigError as exc:
                    why = str(exc)
        self._resolved_encoder = chosen
        log.info("cdc sink topic=%s: encoder %s (%s)", self.topic, chosen, why)
        return chosen

    @staticmethod
    def _probe_avro(spark: SparkSession) -> bool:
        try:
            # analysis fails without spark-avro
            _ = spark.range(1).select(to_avro(F.col("id"), '"long"')).schema
            return True
        except Exception:  # noqa: BLE001
            return False

    @staticmethod
    def _probe_kafka(spark: SparkSession) -> bool:
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

    # -- the batch ----------------------------------------------------------------------------

    def _write(
        self, df: DataFrame, batch_id: int | None, *, fixed_time: int | None, close: bool
    ) -> BatchResult:
        """Write one batch: its layout and topic checked, its interval decided once, its rows
        checked, its updates written, then its progress statement (the module docstring's
        steps)."""
        self._clock = PhaseClock()
        spark = df.sparkSession
        df = _without_collations(df)
        layout = self._layout(df.schema, fixed_time)
        if self.registry is not None and layout.schema_text in self._registered:
            self.schema_id = self._registered[layout.schema_text]
        codec = self._codec(layout.avro_data)
        self._ensure_topic()
        writer = self._writer(spark, batch_id)
        sinklog = self._log(spark) if batch_id is not None else None
        state = None
        if self._schema_checked != layout.schema_text:  # once per sink and schema: a tail read
            state = self._learn_frontier()
            codec = self._check_topic_schema(state, layout, codec)
        # 1. the interval, decided once: recorded, or from the topic's frontier
        decided = self._decide_interval(sinklog, batch_id, writer, state)
        encoder = self._encoder(spark)
        if not self._followed:
            self._followed = True
            if encoder == "jvm":
                self._follow_topic(decided.state, spark, layout)
        # opened now, so that its connection and idempotence handshake (~0.5 s on a new sink)
        # overlap the Spark job instead of delaying the progress statement
        self._driver_producer()
        batch = self._batch(batch_id, layout, codec, decided, fixed_time)
        # 2. the rows with their times and diffs (nothing is computed yet)
        prepared = self._prepared(df, batch, encoder)
        self._clock.mark("plan")
        since = decided.state.partition0_end  # partition 0's end when the interval was decided
        # 3. every row checked (a bad one raises: nothing written)
        path, checked = self._check_rows(
            df, prepared, spark, batch, encoder, compares_digest=decided.digest is not None
        )
        # 4. and 5. the updates written, then the progress statement
        return self._write_checked(
            batch, checked, encoder, path, sinklog, decided.digest, since=since, close=close
        )

    def _layout(self, schema: T.StructType, fixed_time: int | None) -> _Layout:
        """The batch's columns: its data columns mapped to the Avro data record, and its diff
        and time columns checked to be integers."""
        columns = schema.fieldNames()
        diff_col = self.diff_column if self.diff_column in columns else None
        if self.time_column is not None and self.time_column not in columns:
            raise SchemaError(f"time column {self.time_column!r} is missing (columns: {columns})")
        if self.time_column is not None and fixed_time is not None:
            raise ConfigError(
                "write(time=...) conflicts with time_column: the rows carry their times"
            )
        data_cols = [c for c in columns if c not in (self.diff_column, self.time_column)]
        avro_data = data_schema(
            T.StructType([schema[c] for c in data_cols])
        )  # SchemaError names the column
        for name in filter(None, (diff_col, self.time_column)):
            if schema[name].dataType.simpleString() not in _INTEGRAL:
                raise SchemaError(
                    f"column {name!r} must be an integer type (long, int, short, byte), "
                    f"not {schema[name].dataType.simpleString()}"
                )
        schema_text = json.dumps(avro_data, separators=(",", ":"))
        return _Layout(schema, data_cols, diff_col, avro_data, schema_text)

    def _check_topic_schema(
        self, state: TopicFrontier, layout: _Layout, codec: CdcCodec
    ) -> CdcCodec:
        """Check the batch's data schema against the topic's (`_check_schema`) and, with a
        registry, register it before the first message; return the codec to frame with."""
        evolves = self._check_schema(state, layout.avro_data, codec)
        if self.registry is not None:  # registered before the first message, once per schema
            self.schema_id = self._register(layout.avro_data, layout.schema_text, evolves)
            codec = self._codec(layout.avro_data)
        self._schema_checked = layout.schema_text
        return codec

    def _decide_interval(
        self,
        sinklog: SinkLog | DataFrameSinkLog | None,
        batch_id: int | None,
        writer: str,
        state: TopicFrontier | None,
    ) -> _Decided:
        """The batch's lower bound: a re-run's recorded one (in the sink log, else in the
        topic's statements), else the topic's frontier."""
        recorded = None
        if sinklog is not None and batch_id is not None:
            entry = sinklog.get(batch_id)
            if entry is not None and entry.topic not in (None, self.topic):
                log.warning(
                    "sink log %s records batch %d for topic %r, not %r: ignored",
                    sinklog.location,
                    batch_id,
                    entry.topic,
                    self.topic,
                )
            elif entry is not None:
                recorded = Recorded(entry.lower, entry.upper, entry.time)
                writer = entry.writer or writer  # the batch's writer, as first recorded
        if recorded is None:
            state = state or self._learn_frontier()
            found = state.recorded(writer, batch_id) if batch_id is not None else None
            if found is not None:
                recorded = recorded_from_statement(*found, column_mode=self.time_column is not None)
        if recorded is not None:
            # what the first attempt wrote, if its progress statement made it to the topic
            state = state or self._learn_frontier()
            digest = parse_digest(state.digests.get((writer, batch_id)))
            return _Decided(writer, recorded[0], recorded, digest, state)
        assert state is not None  # learnt above
        if state.frontier is None:
            raise LateUpdateError(
                f"topic {self.topic!r} is closed (a progress statement with upper [] was written): "
                "nothing more can be written to it"
            )
        return _Decided(writer, state.frontier, None, None, state)

    def _batch(
        self,
        batch_id: int | None,
        layout: _Layout,
        codec: CdcCodec,
        decided: _Decided,
        fixed_time: int | None,
    ) -> Batch:
        """The batch as decided before any Spark work: its interval's lower bound, its time in
        the default mode, the headers of its update messages."""
        batch_time = (
            None
            if self.time_column is not None
            else decide_batch_time(
                topic=self.topic,
                lower=decided.lower,
                recorded=decided.recorded,
                fixed_time=fixed_time,
                batch_id=batch_id,
                time_offset=self.time_offset,
                late=self.late,
            )
        )
        headers = [(HEADER_KIND, b"updates"), (HEADER_WRITER, decided.writer.encode())]
        if batch_id is not None:
            headers.append((HEADER_BATCH, str(batch_id).encode()))
        return Batch(
            what=self._what(batch_id),
            batch_id=batch_id,
            writer=decided.writer,
            schema=layout.schema,
            data_cols=layout.data_cols,
            diff_col=layout.diff_col,
            avro_data=layout.avro_data,
            codec=codec,
            lower=decided.lower,
            recorded=decided.recorded,
            time=batch_time,
            headers=headers,
            update_partitions=self._update_partitions,
        )

    def _prepared(self, df: DataFrame, batch: Batch, encoder: Encoder) -> DataFrame:
        """The rows as data columns, time and diff (nothing computed yet). The JVM path takes a
        batch's one time as binary literals, which Spark does not write into the code it
        generates (MessagePlan.messages), or does without it (MessagePlan.updates): no time
        column. The data and diff Columns are the last batch's when the layout is (each Column
        made is round trips to the JVM)."""
        data_cols, diff_col = batch.data_cols, batch.diff_col
        if self._row_columns is None or self._row_columns[0] != (data_cols, diff_col):
            diff_expr = F.col(diff_col).cast("long") if diff_col else F.lit(1).cast("long")
            self._row_columns = (
                (data_cols, diff_col),
                [F.col(c) for c in data_cols],
                diff_expr.alias(DIFF),
            )
        _, data_columns, diff_column = self._row_columns
        if batch.time is not None:
            time_columns = [] if encoder == "jvm" else [F.lit(batch.time).cast("long").alias(TIME)]
        else:
            assert self.time_column is not None  # column mode
            time_expr = F.col(self.time_column).cast("long")
            if self.late == "advance":
                time_expr = F.when(
                    (time_expr >= 0) & (time_expr < batch.lower), F.lit(batch.lower).cast("long")
                ).otherwise(time_expr)
            time_columns = [time_expr.alias(TIME)]
        return df.select(*data_columns, *time_columns, diff_column)

    def _check_rows(
        self,
        df: DataFrame,
        prepared: DataFrame,
        spark: SparkSession,
        batch: Batch,
        encoder: Encoder,
        *,
        compares_digest: bool,
    ) -> tuple[JvmPath, Checked]:
        """Every row of the batch checked (a bad one raises: nothing written) by the path the
        last batch chose — the driver path, or the distributed one for a batch too big for the
        driver after all — or by the Python path; return the JVM path taken and the batch."""
        path = self._next_path
        checked: Checked | None = None
        if encoder == "jvm" and path != EXECUTORS and self._small_layout(batch):
            checked = self._driver_path().check(
                df, prepared, spark, batch, consolidated=path == DRIVER_AFTER_EXECUTORS
            )
        if checked is None:
            path = EXECUTORS
            if encoder == "jvm":  # checked and written by one job, when no digest is compared first
                checked = self._distributed_path().check(
                    prepared, spark, batch, write_while_packing=not compares_digest
                )
            else:
                checked = self._python_path().check(prepared, batch)
        # the next batch's path: by the rows the driver would take, and by what they
        # consolidated to (known after the write, for a batch checked and written by one job)
        if encoder == "jvm" and checked.known_before_write:
            path = self._followed_by(checked, path)
        return path, checked

    def _write_checked(
        self,
        batch: Batch,
        checked: Checked,
        encoder: Encoder,
        path: JvmPath,
        sinklog: SinkLog | DataFrameSinkLog | None,
        recorded_digest: tuple | None,
        *,
        since: int | None,
        close: bool,
    ) -> BatchResult:
        """The checked batch compared (a re-run whose first attempt completed) or written, after
        a check for another writer and with its interval recorded; then its progress
        statement."""
        try:
            self._clock.mark("check")
            upper = self._upper(batch, close, checked.max_time)
            if recorded_digest is not None:  # a re-run whose first attempt completed
                return self._finish(
                    self._replayed(batch, recorded_digest, checked.digest(), upper), encoder, path
                )
            # another writer may have written since the interval was decided: check before
            # writing; then record the interval (decided once) and write the updates
            if batch.recorded is None:
                self._check_no_other_writer(
                    batch, upper, "was being prepared", written=False, since=since
                )
            self._record_interval(sinklog, batch, upper)
            try:
                written = checked.write()
            except BaseException:
                self._forget_clients()  # the topic's state is unknown, a producer may hold an error
                raise
        finally:
            checked.release()
        if encoder == "jvm" and not checked.known_before_write:
            path = self._followed_by(checked, path)
        self._clock.mark("write")
        # only after every update is acknowledged: the progress statement
        result = self._commit(batch, upper, written, since=since, checked=checked)
        return self._finish(result, encoder, path)

    def _finish(self, result: BatchResult, encoder: Encoder, path: JvmPath) -> BatchResult:
        """The batch's result with its phases and paths, logged and given to ``on_batch``."""
        result = dataclasses.replace(
            result,
            seconds=self._clock.seconds(),
            topic=self.topic,
            encoder=encoder,
            finished_on="executors" if path == EXECUTORS else "driver",
            consolidated_on="driver" if path == DRIVER else "executors",
        )
        self.last_result = result
        log.info(
            "cdc sink topic=%s batch=%s interval=[%d, %s) %s finished on the %s%s%s",
            self.topic,
            result.batch_id,
            result.lower,
            "∞" if result.upper is None else result.upper,
            result.log_text(),
            result.finished_on,
            " (consolidated on the executors)" if path == DRIVER_AFTER_EXECUTORS else "",
            " (re-run: recorded interval)" if result.reused else "",
        )
        if self.on_batch is not None:
            self.on_batch(result)
        return result

    # -- the paths that write a batch (see sink.batch) ------------------------------------------

    def _row_checks(self, batch: Batch) -> list[Check]:
        """The JVM path's per-row checks of ``batch`` (`row_checks`).
        A batch of one time has no time to check row by row: its interval was decided from it
        (`batch_upper` refuses a re-run's time beyond its record)."""
        rerun = batch.recorded is not None and batch.time is None
        # the checks name the batch as BATCH (plan.task_error puts its name back) and hold
        # the frontier only where a time column is checked against it: most batches share the
        # last one's, already built (each Column made is round trips to the JVM)
        recorded_upper = batch.recorded.upper if rerun and batch.recorded is not None else None
        key = (batch.lower if self.time_column else None, recorded_upper)
        if self._last_checks is None or self._last_checks[0] != key:
            self._last_checks = (
                key,
                row_checks(
                    what=BATCH,
                    lower=batch.lower,
                    recorded_upper=recorded_upper,
                    time_column=self.time_column,
                    diff_column=self.diff_column,
                ),
            )
        return self._last_checks[1]

    def _distributed_path(self) -> DistributedPath:
        """The JVM path's distributed path (`cdc_emitter.sink.distributed`), one for the
        sink's life: it sizes each batch's spread from the last."""
        if self._distributed is None:
            self._distributed = DistributedPath(
                bootstrap_servers=self.bootstrap_servers,
                topic=self.topic,
                producer_config=self.producer_config,
                max_message_bytes=self.max_message_bytes,
                row_checks=self._row_checks,
                producer=self._driver_producer,
                flush_timeout=self.flush_timeout,
                join_bytes=SMALL_BATCH_BYTES if self.small_batch_rows else 0,
            )
        return self._distributed

    def _driver_path(self) -> DriverPath:
        """The JVM path's driver path (`cdc_emitter.sink.driver`), one for the sink's life."""
        if self._driver is None:
            self._driver = DriverPath(
                small_batch_rows=self.small_batch_rows,
                max_message_bytes=self.max_message_bytes,
                time_column=self.time_column,
                diff_column=self.diff_column,
                late=self.late,
                flush_timeout=self.flush_timeout,
                producer=self._driver_producer,
                plan=lambda spark, batch: self._distributed_path().plan(spark, batch)[0],
                row_checks=self._row_checks,
            )
        return self._driver

    def _python_path(self) -> PythonPath:
        """The Python data path (`cdc_emitter.sink.python_path`)."""
        return PythonPath(
            bootstrap_servers=self.bootstrap_servers,
            topic=self.topic,
            producer_config=self.producer_config,
            framing=self.framing,
            schema_id=self.schema_id,
            max_message_bytes=self.max_message_bytes,
            flush_timeout=self.flush_timeout,
            time_column=self.time_column,
            diff_column=self.diff_column,
            producer_factory=self._task_producer,
        )

    def _followed_by(self, checked: Checked, path: JvmPath) -> JvmPath:
        """Choose the next batch's path from ``checked``'s stats (`_path_after`); return
        where its own messages were finished: the driver, after the executors, when a small
        batch's messages came back to be joined."""
        self._next_path = self._path_after(checked.rows, checked.groups, checked.bytes)
        return DRIVER_AFTER_EXECUTORS if path == EXECUTORS and checked.produced_on_driver else path

    def _path_after(self, rows: int, groups: int, n_bytes: int) -> JvmPath:
        """How the batch after one of ``rows`` input rows, ``groups`` distinct data and times
        among them and ``n_bytes`` of messages is written (see `DRIVER`)."""
        if not (0 < self.small_batch_rows and n_bytes <= SMALL_BATCH_BYTES):
            return EXECUTORS
        if rows <= self.small_batch_rows:
            return DRIVER
        return DRIVER_AFTER_EXECUTORS if groups <= self.small_batch_rows else EXECUTORS

    def _follow_topic(self, state: TopicFrontier, spark: SparkSession, layout: _Layout) -> None:
        """Size this sink's first batch like the topic's last one, of the same data layout, by
        any sink (the shape header of its progress statement): its path (`_path_after`),
        its spread and whether its rows are consolidated straight away — as a running sink's
        next batch follows its last. A hint for speed only: a batch unlike it is written the
        same, as after a change of size in a running sink."""
        if not state.shape or state.schema != layout.schema_text:
            return
        try:
            shape = json.loads(state.shape)
            rows, groups, n_bytes = int(shape["rows"]), int(shape["groups"]), int(shape["bytes"])
        except (ValueError, KeyError, TypeError):
            log.debug(
                "topic %r: a progress statement's shape header %r is not ours: not followed",
                self.topic,
                state.shape[:200],
            )
            return
        if rows <= 0 or n_bytes <= 0:
            return
        self._next_path = self._path_after(rows, groups, n_bytes)
        self._distributed_path().follow(
            rows, groups, n_bytes, spark, layout.schema, layout.data_cols
        )
        log.debug(
            "topic %r: the last batch had %d rows, %d groups and %d bytes of messages: the "
            "first batch goes the %s path",
            self.topic,
            rows,
            groups,
            n_bytes,
            self._next_path,
        )

    def _small_layout(self, batch: Batch) -> bool:
        """Whether the driver can finish this layout's batches: it consolidates on each row's
        encoded bytes, which equal rows share unless they hold maps (entries in any order)."""
        return bool(batch.data_cols) and not any(
            contains_map(batch.schema[c].dataType) for c in batch.data_cols
        )

    def _what(self, batch_id: int | None) -> str:
        """How messages name this batch: the topic, and the batch id when there is one."""
        return f"topic {self.topic!r}" + ("" if batch_id is None else f" batch {batch_id}")

    def _replayed(
        self, batch: Batch, recorded_digest: tuple, now: tuple, upper: int | None
    ) -> BatchResult:
        """A re-run of a batch whose first attempt is complete in the topic: the same data
        (digest and counts per time) writes nothing; other data raises `ReplayError`."""
        kept = digest_form(*now)
        if kept != recorded_digest:
            raise ReplayError(replay_message(batch.what, batch.batch_id, recorded_digest, kept))
        log.info(
            "%s: re-run with the same data as its first attempt, which is complete "
            "in the topic: nothing to write",
            batch.what,
        )
        counts = dict(now[1])
        return BatchResult(
            batch.batch_id, batch.lower, upper, sum(counts.values()), 0, counts, True
        )

    def _upper(self, batch: Batch, close: bool, max_time: int | None) -> int | None:
        """The batch's upper bound (see `batch_upper`)."""
        return batch_upper(
            what=batch.what,
            lower=batch.lower,
            recorded=batch.recorded,
            close=close,
            column_mode=self.time_column is not None,
            time=batch.time,
            max_time=max_time,
            upper_hint=self._upper_hint,
        )

    def _record_interval(
        self, sinklog: SinkLog | DataFrameSinkLog | None, batch: Batch, upper: int | None
    ) -> None:
        """Record a new batch's interval in the sink log (the first decision for a batch id wins)."""
        if sinklog is None or batch.recorded is not None or batch.batch_id is None:
            return

        kept = sinklog.put(
            SinkLogEntry(batch.batch_id, batch.lower, upper, batch.time, batch.writer, self.topic)
        )
        if (kept.lower, kept.upper) != (batch.lower, upper):  # someone else decided first
            raise CdcError(
                f"{batch.what}: the sink log already records interval "
                f"[{kept.lower}, {kept.upper}) for this batch; retry the batch"
            )

    def _commit(
        self,
        batch: Batch,
        upper: int | None,
        written: Written,
        since: int | None,
        checked: Checked | None = None,
    ) -> BatchResult:
        """Write the batch's progress statement — only after every update is acknowledged — with,
        when ``checked`` knows them, the batch's rows, groups and bytes (`HEADER_SHAPE`)."""
        counts, writer, lower = written.counts, batch.writer, batch.lower
        total = sum(counts.values())
        # unless another writer's statement took the interval meanwhile (a statement of ours on
        # top of it would contradict it)
        self._check_no_other_writer(batch, upper, "was being written", written=total, since=since)
        progress = progress_from_counts(lower, upper, counts)  # counts lie inside: validated
        digest_text = format_digest(written.digest, counts)
        common = [
            (HEADER_KIND, b"progress"),
            (HEADER_WRITER, writer.encode()),
            (HEADER_SCHEMA, json.dumps(batch.avro_data, separators=(",", ":")).encode()),
        ]
        if batch.batch_id is not None:
            common.append((HEADER_BATCH, str(batch.batch_id).encode()))
        if checked is not None and checked.rows and checked.bytes:
            common.append(
                (
                    HEADER_SHAPE,
                    json.dumps(
                        {"rows": checked.rows, "groups": checked.groups, "bytes": checked.bytes},
                        separators=(",", ":"),
                    ).encode(),
                )
            )
        # a statement counting more times than one message holds is written as several that
        # tile the interval, each naming the batch's interval; the digest goes on the last
        statements = split_progress(progress, self._times_per_statement())
        batch_interval = (
            []
            if len(statements) == 1
            else [
                (HEADER_BATCH_LOWER, str(lower).encode()),
                (HEADER_BATCH_UPPER, b"" if upper is None else str(upper).encode()),
            ]
        )
        producer = self._driver_producer()
        values = [batch.codec.encode_progress(statement) for statement in statements]
        try:
            for n, (statement, value) in enumerate(zip(statements, values), 1):
                headers = [
                    *common,
                    (HEADER_LOWER, str(statement.lower[0]).encode()),
                    (HEADER_UPPER, str(statement.upper[0]).encode() if statement.upper else b""),
                    *batch_interval,
                ]
                if n == len(statements):
                    headers.append((HEADER_DIGEST, digest_text.encode()))
                producer.produce(value, headers=headers, partition=0)
            producer.flush(self.flush_timeout)
        except BaseException:
            self._forget_clients()
            raise
        self._carry(
            writer,
            batch.batch_id,
            lower,
            upper,
            batch.avro_data,
            digest_text,
            producer.last_offsets.get(0),
        )
        self._clock.mark("commit")
        return BatchResult(
            batch.batch_id,
            lower,
            upper,
            total,
            written.messages + len(values),
            counts,
            batch.recorded is not None,
            written.bytes + sum(map(len, values)),
        )

    def _times_per_statement(self) -> int:
        """How many counted times one progress statement may hold: a count is a record of two
        longs (at most 20 bytes in Avro), and the message keeps 1 KiB for the rest."""
        return max(1, (self.max_message_bytes - 1024) // 20)

    def _driver_producer(self) -> CdcProducer:
        """The producer of progress statements: one for the sink's life (a new one per batch
        would pay a connection and an idempotence handshake every time)."""
        if self._producer is None:
            self._producer = CdcProducer(self.bootstrap_servers, self.topic, self.producer_config)
        return self._producer

    def _forget_clients(self) -> None:
        """After a failed write: the carried frontier is no longer known, and the driver's
        producer may hold a latched error — the next batch reads the tail and gets new clients."""
        self._carried = None
        self.close()

    def close(self) -> None:
        """Release the driver's Kafka clients (the sink can still be used: new ones are made)."""
        producer, self._producer = self._producer, None
        offsets, self._topic_offsets = self._topic_offsets, None
        if producer is not None:
            producer.close()
        if offsets is not None:
            offsets.close()

    def _check_no_other_writer(
        self,
        batch: Batch,
        upper: int | None,
        while_: str,
        written: int | bool,
        since: int | None = None,
    ) -> None:
        """Raise ConcurrentWriterError if the topic's frontier moved past the batch's lower bound
        by a statement that is not this batch's own: two writers decided the same interval.

        ``since``: partition 0's end when the interval was decided. Statements go to partition 0
        (and, on a topic of several partitions, nothing else of ours), so while it has not moved
        one watermark request is the whole check; else the tail is read again."""
        if since is not None and self._partition0_end() == since:
            return
        lower, now = batch.lower, self.frontier()
        if now.frontier == lower or (now.writer, now.batch) == (batch.writer, batch.batch_id):
            return
        theirs = (
            f"[{now.lower}, {'∞' if now.upper is None else now.upper})"
            if now.found
            else "an interval"
        )
        by = f" by writer {now.writer}" + ("" if now.batch is None else f" (batch {now.batch})")
        if written:
            done = (
                f"This batch's {written} updates at [{lower}, {'∞' if upper is None else upper}) "
                "are in the topic without their progress statement, which is not written "
                "(cdc-emitter verify --strict reports them)"
            )
        else:
            done = "Nothing was written"
        raise ConcurrentWriterError(
            f"{batch.what}: another writer wrote a progress statement for {theirs}{by} while this batch "
            f"{while_} (it decided [{lower}, {'∞' if upper is None else upper}) from frontier "
            f"{lower}). {done}. Two writers on one topic lose each other's rows: run one writer "
            "per topic; a retried batch writes after the other writer's"
        )
