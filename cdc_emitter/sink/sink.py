"""``CdcSink``: write Spark DataFrames to Kafka in the Materialize CDC format (CDCv2).

Attach it to a streaming query with ``writeStream.foreachBatch(CdcSink(...))``, or call
``CdcSink(...).write(df)`` for one batch outside streaming. What happens to a batch:

1. **Schema**: the data columns (every column except the diff and time columns) are mapped to
   the Avro ``data`` record (`cdc_emitter.spark.schema`); an unsupported type fails here.
2. **Interval, decided once**: a batch that already has a recorded interval — in the sink log
   beside the checkpoint (`cdc_emitter.sink.log`), or in the headers of the topic's latest
   progress message (same writer id, same batch id) — re-emits exactly that interval. Otherwise
   its lower bound is the topic's current frontier ``F``, learnt from the tail of the topic
   (never by scanning all of it) and then carried forward from batch to batch while no other
   writer fenced this sink's claims (step 4 checks it again). Default time mode:
   ``t = max(time_offset + batch_id, F)`` and the interval is ``[F, t + 1)``. Column mode: ``[F, max_time + 1)``; a time below ``F`` is late.
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

   A re-run whose first attempt's statement is in the topic compares its digest
   (`cdc_emitter.sink.digest`) here: other data fails with nothing written.
4. **The progress statement is claimed before any update** (`cdc_emitter.sink.claim`): committed
   to partition 0 in a Kafka transaction whose ``transactional.id`` every writer of the topic
   shares, on the topic's state as read after this writer fenced the others — so no writer can
   claim in between. Another writer's claim meanwhile moves the batch after it when its times
   allow, or fails it (`ConcurrentWriterError`, naming that writer and batch) with nothing
   written; a redundant writer's batch equal to a claim already there writes no statement.
5. **The update arrays are written** and acknowledged (``acks=all``), inside the batch's own
   claimed interval: a delivery error fails the batch, and a retry writes the same updates.
   Meanwhile the interval is recorded in the sink log (when there is a checkpoint location), by
   a thread that the sink's next batch waits for (`cdc_emitter.sink.commit.record_later`).

Readers wait for a claimed time until its counted updates are there: a writer that dies between
its claim and its last update holds them up until it is restarted from its checkpoint (or a
redundant twin writes the same updates). A retry only ever causes duplicates (identical
``(data, time, diff)`` triples) that readers discard; it never moves a claimed batch.

`CdcSink` holds the sink's state and runs these steps (`CdcSink._write`); the work of each is
done in a module of its own: `cdc_emitter.sink.options` (the constructor's arguments),
`cdc_emitter.sink.layout` (step 1), `cdc_emitter.sink.decide` (step 2),
`cdc_emitter.sink.topic` (the frontier, the topic's schema and settings, another writer),
`cdc_emitter.sink.paths` (which data path writes the batch, step 3),
`cdc_emitter.sink.claim` (where the claim goes, step 4) and `cdc_emitter.sink.commit` (the
statement's messages and the sink log record).
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from pyspark.sql import DataFrame, SparkSession

from cdc_emitter.errors import (
    BadInputError,
    CdcError,
    ConcurrentWriterError,
    ConfigError,
    DeliveryError,
    InterruptedBatchError,
    ReplayError,
)
from cdc_emitter.kafka.claims import ClaimProducer, Fenced, InDoubt
from cdc_emitter.kafka.frontier import TopicFrontier, retrying, topic_frontier
from cdc_emitter.kafka.producer import CdcProducer
from cdc_emitter.kafka.reading import TopicOffsets
from cdc_emitter.protocol.codec import CdcCodec
from cdc_emitter.protocol.headers import (
    HEADER_BATCH,
    HEADER_KIND,
    HEADER_LOWER,
    HEADER_UPPER,
    HEADER_WRITER,
)
from cdc_emitter.sink import commit, decide, layout, options, paths, topic
from cdc_emitter.sink.batch import Batch, Checked, Written
from cdc_emitter.sink.claim import Claim, Stated, decide_claim, stated_covering
from cdc_emitter.sink.digest import digest_form, parse_digest, replay_message
from cdc_emitter.sink.distributed import DistributedPath
from cdc_emitter.sink.driver import DriverPath
from cdc_emitter.sink.interrupted import interrupted_batch
from cdc_emitter.sink.interval import Recorded, batch_upper
from cdc_emitter.sink.layout import Layout, RowColumns
from cdc_emitter.sink.log import (
    DataFrameSinkLog,
    SinkLog,
    is_connect,
    open_sink_log,
    query_id_from_checkpoint,
)
from cdc_emitter.sink.options import (
    DEFAULT_MAX_MESSAGE_BYTES,
    SMALL_BATCH_BYTES,
    SMALL_BATCH_ROWS,
    Encoder,
    Framing,
    Late,
)
from cdc_emitter.sink.paths import DRIVER, DRIVER_AFTER_EXECUTORS, EXECUTORS, JvmPath
from cdc_emitter.sink.python_path import PythonPath
from cdc_emitter.sink.python_tasks import TaskSpec
from cdc_emitter.sink.result import BatchResult, PhaseClock
from cdc_emitter.sink.row_checks import BATCH, Check, row_checks

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
    # moved in this release (errors, sink.interrupted); kept here for one release
    "InterruptedBatchError",
    "interrupted_batch",
]

log = logging.getLogger("cdc_emitter.sink")  # the name users configure (0.1 had it)

#: How many times a batch claims again after another writer fenced its claim, at most.
CLAIM_ATTEMPTS = 12
#: How many of those may end in doubt (`InDoubt`: an error of the broker's, not a fence).
IN_DOUBT_ATTEMPTS = 3
#: How many times a batch is planned again (its Spark jobs run again) before its last attempt.
REPLANS = 3


class Unfinished(NamedTuple):
    """A `CdcSink.write` batch whose claim was sent and whose updates are not all written."""

    lower: int
    upper: int | None
    time: int | None
    digest_text: str
    #: the claim is known committed; else (its commit failed, its reply maybe lost) it is
    #: looked for in the topic before it is taken as this batch's
    confirmed: bool = True


class _NotThatBatch(Exception):
    """A `write` batch with other data than the one its writer left unfinished: a new batch."""


class _Overtaken(Exception):
    """A batch whose time was the frontier, which another writer's claim moved: plan it again."""


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
            interval, updates, messages, bytes and seconds per phase) once its updates are
            acknowledged — to chart the sink. What it raises fails the batch *after* it was
            written; Spark's re-run of the batch then writes only duplicates under its claim,
            and calls it again.
        small_batch_rows: with the JVM data path, a batch that follows one of at most this many
            rows (and 16 MiB of messages) is finished on the driver: one narrow Spark job brings
            its rows encoded by ``to_avro``, the driver consolidates them and produces them with
            the sink's own producer — no shuffle, no second job. Same checks, messages and
            digest as the distributed path; a batch too big for ``spark.driver.maxResultSize``
            goes the distributed path. A first batch (written by the distributed path, its
            spread sized before its size is known) whose messages are at most 16 MiB and over
            twice as many as would hold them has them joined on the driver, which produces
            them. 0: never.
        redundant: this writer is one of several identical writers of the topic (the same
            input, rows carrying their own times, the same batches), run for high availability.
            A batch whose times another writer already stated is compared with that statement
            — counts per time and digest — and its updates written as duplicates, completing
            the other writer's batch if it died; a batch that differs is refused before any of
            its updates is written. Not with ``late="advance"``.
        complete_last: with a ``writer_id``, in the default time mode: the sink's first `write`
            is first tried as this writer's last `write` batch (its interval and time, from the
            topic): the same data completes it — a process that died between that batch's claim
            and its last update left readers waiting on it — and other data is written as a new
            batch (after one more Spark job). What ``cdc-emitter export`` does, so that the same
            command run again finishes an interrupted export.

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
        redundant: bool = False,
        complete_last: bool = False,
    ) -> None:
        if redundant and late == "advance":
            raise ConfigError(
                "redundant=True cannot go with late='advance': advancing moves a late row to "
                "another time, so identical writers would write different updates"
            )
        checked = options.normalise(
            topic=topic,
            time_offset=time_offset,
            late=late,
            framing=framing,
            schema_id=schema_id,
            schema_registry_url=schema_registry_url,
            schema_registry_config=schema_registry_config,
            producer_config=producer_config,
            max_message_bytes=max_message_bytes,
            encoder=encoder,
            broker_timeout=broker_timeout,
            on_batch=on_batch,
            small_batch_rows=small_batch_rows,
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
        self.registry = checked.registry
        self._registered: dict[str, int] = {}  # schema text -> the registry's id for it
        self.producer_config = checked.producer_config  # a copy: the caller's dict is theirs
        self.max_message_bytes = checked.max_message_bytes
        self.create_topic = create_topic
        self.topic_partitions = topic_partitions
        self.writer_id = writer_id
        self._default_writer = uuid.uuid4().hex
        self.encoder = encoder
        self.flush_timeout = flush_timeout
        self.broker_timeout = checked.broker_timeout
        self.on_batch = on_batch
        self.small_batch_rows = small_batch_rows
        self.redundant = redundant
        self.complete_last = complete_last
        #: a `write` batch claimed whose updates were not all written (see _complete_unfinished)
        self._unfinished: Unfinished | None = None
        self._looked_back = False  # whether the first batch looked back for its own earlier claim
        self._claims: ClaimProducer | None = None  # commits the progress statements (claims)
        self._clock = PhaseClock()  # the current batch's phases (see sink.result)
        self._upper_hint: int | None = None  # write_upto's upper, for the batch being written
        self._topic_checked = False
        self._update_partitions: list[int] | None = None  # where update messages go (see Batch)
        self._schema_checked: str | None = None  # the data schema found compatible with the topic
        self._sinklog: SinkLog | DataFrameSinkLog | None = None
        self._recording: commit.PendingRecord | None = None  # the last batch's sink log record
        # ((schema text, schema id), codec) of the last batch: see _codec
        self._last_codec: tuple[tuple[str, int], CdcCodec] | None = None
        self._query_id: str | None = None  # Spark Connect: from the checkpoint (see _writer)
        self._producer: CdcProducer | None = None  # progress statements' (see _driver_producer)
        self._topic_offsets: TopicOffsets | None = None  # end offsets and tail (see _offsets)
        self._carried: TopicFrontier | None = None  # the frontier after our last statement
        self._distributed: DistributedPath | None = None  # JVM path (see _distributed_path)
        self._driver: DriverPath | None = None  # JVM path (see _driver_path)
        # JVM path: (key, the last batch's row checks), see _row_checks
        self._last_checks: tuple[tuple, list[Check]] | None = None
        # (layout, data Columns, diff Column) of the last batch, see _prepared
        self._row_columns: RowColumns | None = None
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
            InterruptedBatchError: the query was stopped while the batch was being written.
            CdcError: any other of the sink's errors (broker, delivery, configuration).
        """
        return self._write_streamed(batch_df, int(batch_id))

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
            return self._write_streamed(df, int(batch_id))
        finally:
            self._upper_hint = None

    def _write_streamed(self, df: DataFrame, batch_id: int) -> BatchResult:
        """Write micro-batch ``batch_id``; a batch interrupted by its query's stop raises a short
        `InterruptedBatchError` (`interrupted_batch`), without the long Py4J error behind it."""
        try:
            return self._write(df, batch_id, fixed_time=None, close=False)
        except Exception as exc:
            stopped = interrupted_batch(exc, f"topic {self.topic!r} batch {batch_id}")
            if stopped is None:
                raise
            log.info("topic %r batch %d was interrupted: its query stopped", self.topic, batch_id)
            log.debug("topic %r batch %d: the interruption", self.topic, batch_id, exc_info=exc)
            raise stopped from None

    @property
    def unfinished(self) -> Unfinished | None:
        """The batch of `write` that was claimed (or whose claim was sent: ``confirmed`` false)
        and whose updates are not all written, as an interrupted or failed `write` left it; None
        when there is none. Readers wait at its ``lower`` until the same batch is written again
        (by this sink, or by a new one with the same ``writer_id`` and ``complete_last=True``)."""
        return self._unfinished

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

    # -- the batch: plan, check, write, commit ------------------------------------------------

    def _write(
        self, df: DataFrame, batch_id: int | None, *, fixed_time: int | None, close: bool
    ) -> BatchResult:
        """Write one batch (`_write_once`); a default-mode batch whose time was the frontier,
        overtaken by another writer before its claim, is planned again at the new frontier —
        nothing of it was written (at most `REPLANS` times); so is a `write` batch that
        turned out not to be the one its writer left unfinished."""
        resume = True
        for _attempt in range(REPLANS):
            try:
                return self._write_once(
                    df, batch_id, fixed_time=fixed_time, close=close, resume=resume
                )
            except _Overtaken as exc:
                log.info("%s: planned again at the topic's new frontier", exc)
            except _NotThatBatch as exc:
                log.info("%s: other data than its writer's last batch: a new batch", exc)
                self._unfinished, resume = None, False
        return self._write_once(df, batch_id, fixed_time=fixed_time, close=close, last=True)

    def _write_once(
        self,
        df: DataFrame,
        batch_id: int | None,
        *,
        fixed_time: int | None,
        close: bool,
        last: bool = False,
        resume: bool = False,
    ) -> BatchResult:
        """Write one batch: its layout and topic checked, its interval decided once, its rows
        checked, its progress statement claimed, then its updates written (the module
        docstring's steps)."""
        self._clock = PhaseClock()
        self._wait_for_record()
        spark = df.sparkSession
        df = layout.without_collations(df)
        cols = layout.layout_of(
            df.schema, fixed_time, time_column=self.time_column, diff_column=self.diff_column
        )
        if self.registry is not None and cols.schema_text in self._registered:
            self.schema_id = self._registered[cols.schema_text]
        codec = self._codec(cols)
        self._ensure_topic()
        writer = self._writer(spark, batch_id)
        sinklog = self._log(spark) if batch_id is not None else None
        state = None
        if self._schema_checked != cols.schema_text:  # once per sink and schema: a tail read
            state = self._learn_frontier()
            codec = self._check_topic_schema(state, cols, codec)
        # 2. the interval, decided once: recorded, or from the topic's frontier
        decided = decide.decide_interval(
            sinklog,
            batch_id,
            writer,
            state,
            topic=self.topic,
            column_mode=self.time_column is not None,
            learn_frontier=self._learn_frontier,
        )
        if batch_id is not None and decided.recorded is None and not self._looked_back:
            decided = self._claimed_before_record(decided, sinklog, batch_id)
        resuming = False
        if batch_id is None and decided.recorded is None:
            if self._unfinished is None and resume and not last and not self._looked_back:
                # a new sink (a new process): its writer may have left a batch unfinished
                self._looked_back = True
                self._unfinished = self._left_by_writer(decided.state, writer, fixed_time)
                resuming = self._unfinished is not None
            if self._unfinished is not None:
                decided = self._complete_unfinished(decided, fixed_time)
        encoder = self._encoder(spark)
        if not self._followed:
            self._followed = True
            if encoder == "jvm":
                self._follow_topic(decided.state, spark, cols)
        # opened now, so that their connections and handshakes (~0.5 s each on a new sink)
        # overlap the Spark job instead of delaying the claim and the driver's updates; the
        # claim reads the topic again after a new claims producer fenced the others
        self._driver_producer()
        if self._claims_producer().ready():
            self._carried = None
        batch = decide.new_batch(
            batch_id,
            cols,
            codec,
            decided,
            fixed_time,
            topic=self.topic,
            time_column=self.time_column,
            time_offset=self.time_offset,
            late=self.late,
            update_partitions=self._update_partitions,
            redundant=self.redundant,
        )
        self._clock.mark("plan")
        # 3. every row, with its time and diff, checked by the batch's path (a bad one raises:
        # nothing written)
        path, checked = self._check_rows(df, spark, batch, encoder)
        # the batch's one time is the frontier it was decided from: another writer's claim
        # meanwhile moves it, and the batch is planned again rather than refused
        floats = (
            not last
            and batch.time is not None
            and fixed_time is None
            and decided.recorded is None
            and batch.time == decided.lower
            and not self.redundant
        )
        # 4. and 5. the progress statement claimed, then the updates written
        return self._write_checked(
            batch,
            checked,
            encoder,
            path,
            sinklog,
            decided.digest,
            close,
            floats=floats,
            resuming=resuming,
        )

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

    def _check_rows(
        self,
        df: DataFrame,
        spark: SparkSession,
        batch: Batch,
        encoder: Encoder,
    ) -> tuple[JvmPath, Checked]:
        """Every row of the batch checked (a bad one raises: nothing written) by the path the
        last batch chose — the driver path, or the distributed one for a batch too big for the
        driver after all — or by the Python path; return the JVM path taken and the batch."""
        path = self._next_path
        checked: Checked | None = None
        prepared: DataFrame | None = None  # built only for a path that reads it
        if encoder == "jvm" and path != EXECUTORS and paths.small_layout(batch):
            if path == DRIVER_AFTER_EXECUTORS:
                prepared = self._prepared(df, batch, encoder)
            checked = self._driver_path().check(df, prepared, spark, batch)
        if checked is None:
            path = EXECUTORS
            if prepared is None:
                prepared = self._prepared(df, batch, encoder)
            if encoder == "jvm":  # counts and digest known before the claim
                checked = self._distributed_path().check(prepared, spark, batch)
            else:
                checked = self._python_path().check(prepared, batch)
        # the next batch's path: by the rows the driver would take, and what they consolidated to
        if encoder == "jvm":
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
        close: bool,
        *,
        floats: bool = False,
        resuming: bool = False,
    ) -> BatchResult:
        """The checked batch's progress statement claimed (`_claim`), then its updates written
        while its interval is recorded (by a thread: `commit.record_later`): a re-run's
        compared with its first attempt first."""
        try:
            self._clock.mark("check")
            upper = self._upper(batch, close, checked.max_time)
            now = checked.digest()
            if recorded_digest is not None and digest_form(*now) != recorded_digest:
                if resuming:  # not the batch its writer left: a new one
                    raise _NotThatBatch(batch.what)
                raise ReplayError(
                    replay_message(batch.what, batch.batch_id, recorded_digest, digest_form(*now))
                )
            claim, statements, digest_text = self._claim(batch, upper, now, checked, floats=floats)
            self._clock.mark("commit")
            if batch.batch_id is None and claim.kind == "new":  # until its updates are written
                self._unfinished = Unfinished(claim.lower, claim.upper, batch.time, digest_text)
            elif batch.batch_id is None and claim.kind == "own" and self._unfinished is not None:
                self._unfinished = self._unfinished._replace(confirmed=True)
            if claim.lower != batch.lower:  # written after another writer's batch
                batch = dataclasses.replace(batch, lower=claim.lower)
            if claim.kind in ("new", "own"):  # while the updates are written (record_later)
                self._recording = commit.record_later(sinklog, batch, claim.upper, self.topic)
            try:
                written = checked.write()
            except BaseException:
                self._forget_clients()  # a producer may hold an error
                raise
            if batch.batch_id is None:
                self._unfinished = None
        finally:
            checked.release()
        if {t: n for t, n in written.counts.items() if n} != {t: n for t, n in now[1] if n}:
            # the job that wrote the updates computed other ones than the job that counted them
            raise CdcError(
                f"{batch.what}: the updates written differ from the ones its claim counts "
                f"({sum(written.counts.values())} written, {sum(n for _t, n in now[1])} "
                "counted): the batch's input is not deterministic. Readers will report the "
                "times it claimed; make the query deterministic (no rand(), current_timestamp())"
            )
        self._clock.mark("write")
        if claim.kind == "redundant":
            log.info(
                "%s: the same updates as %s: written as duplicates",
                batch.what,
                ", ".join(s.name() for s in claim.others),
            )
        counts = written.counts
        result = BatchResult(
            batch.batch_id,
            claim.lower,
            claim.upper,
            sum(counts.values()),
            written.messages + len(statements),
            counts,
            batch.recorded is not None or claim.kind == "own",
            written.bytes + sum(len(value) for value, _ in statements),
            redundant=claim.kind == "redundant",
        )
        return self._finish(result, encoder, path)

    def _claim(
        self,
        batch: Batch,
        upper: int | None,
        now: tuple[int, tuple],
        checked: Checked,
        *,
        floats: bool = False,
    ) -> tuple[Claim, list[commit.Message], str]:
        """Commit the batch's progress statement before any of its updates (`sink.claim`):
        on the topic's state as read after this writer fenced the others, so that no writer
        can have claimed in between — a commit that fails because another writer did is taken
        again on fresh state. Returns the claim, its statement messages and their digest header."""
        counts = dict(now[1])
        times = sorted(t for t, n in counts.items() if n)
        written = Written(counts, now[0], 0, 0)
        claims = self._claims_producer()
        pause, in_doubt = 0.05, 0
        # the statement of this call's last commit that raised (fenced or in doubt), with its
        # interval and digest: it may have landed, and then the claim found in the topic with
        # the same interval and digest is this call's new one
        sent: tuple[list[commit.Message], str, int, int | None] | None = None
        for _attempt in range(CLAIM_ATTEMPTS):
            if claims.ready():  # just fenced the others: what this sink carried may be stale
                self._carried = None
            state = self._carried or self.frontier()
            first = times[0] if times else batch.lower
            own = self._own_claim(state, batch)
            moved = state.frontier != batch.lower
            if own is None and (
                batch.recorded is not None or moved and times and first < (state.frontier or 0)
            ):
                # a re-run's claim, or the statements a redundant batch compares with, may be
                # older than the tail read: read back to them
                state = self.frontier(back_to=min(first, batch.lower))
                own = self._own_claim(state, batch)
            if own is None and floats and (state.frontier or 0) > batch.lower:
                raise _Overtaken(batch.what)
            claim = decide_claim(
                what=batch.what,
                writer=batch.writer,
                batch_id=batch.batch_id,
                lower=batch.lower,
                upper=upper,
                frontier=state.frontier,
                own=own,
                counts=counts,
                digest=now,
                covering=self._covering(state, first, times[-1] if times else first),
                redundant=self.redundant,
            )
            if (
                claim.kind == "own"
                and own is not None
                and sent is not None
                and (own.lower, own.upper, own.digest) == (sent[2], sent[3], sent[1])
            ):  # this call's commit landed
                self._carried = state
                return claim._replace(kind="new"), sent[0], sent[1]
            if claim.kind != "new":
                self._carried = state
                return claim, [], ""

            claimed = dataclasses.replace(batch, lower=claim.lower)
            messages, digest_text = commit.progress_messages(
                claimed, claim.upper, written, checked, self.max_message_bytes
            )
            if batch.batch_id is None:  # until its updates are written (see _own_claim)
                self._unfinished = Unfinished(
                    claim.lower, claim.upper, batch.time, digest_text, confirmed=False
                )
            try:
                offset = claims.commit(messages)
            except Fenced as exc:
                sent = (messages, digest_text, claim.lower, claim.upper)
                log.info(
                    "%s: another writer claimed meanwhile (%s): claiming again", batch.what, exc
                )
                self._carried = None
                time.sleep(pause * (0.5 + random.random()))
                pause = min(pause * 2, 2.0)
                continue
            except InDoubt as exc:
                sent = (messages, digest_text, claim.lower, claim.upper)
                in_doubt += 1
                if in_doubt >= IN_DOUBT_ATTEMPTS:
                    raise DeliveryError(
                        f"topic {self.topic!r} partition 0: the progress statement's transaction "
                        f"failed {in_doubt} times ({exc}); whether the last was committed is "
                        "for the next attempt to find in the topic"
                    ) from None
                log.warning(
                    "%s: the claim's transaction failed (%s): looking for it in the topic, "
                    "then claiming again",
                    batch.what,
                    exc,
                )
                self._carried = None
                time.sleep(pause * (0.5 + random.random()))
                pause = min(pause * 2, 2.0)
                continue
            self._carried = topic.carried_frontier(
                state,
                batch.writer,
                batch.batch_id,
                claim.lower,
                claim.upper,
                batch.avro_data,
                digest_text,
                offset + 1,  # the last record: the commit marker after the statement
            )
            return claim, messages, digest_text
        raise ConcurrentWriterError(
            f"{batch.what}: other writers of the topic kept claiming first "
            f"({CLAIM_ATTEMPTS} attempts). Nothing was written; retry the batch"
        )

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

    # -- what the sink learns from the topic, and checks against it (see sink.topic) ----------

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

    def frontier(self, back_to: int | None = None) -> TopicFrontier:
        """The topic's current frontier, read from its tail (see `topic_frontier`).

        Args:
            back_to: Read back until a statement whose lower bound is at most this time
                (default: only as far as the frontier needs).

        Returns:
            The frontier, with the statements read on the way.

        Raises:
            BrokerError: The topic is missing or the broker cannot be reached.
        """
        return topic.read_frontier(
            self.bootstrap_servers,
            self.topic,
            framing=self.framing,
            schema_id=self.schema_id,
            config=options.client_config(self.producer_config),
            offsets=self._offsets(),
            broker_timeout=self.broker_timeout,
            back_to=back_to,
        )

    def _offsets(self) -> TopicOffsets:
        """The topic's end offsets and tail, through one client for the sink's life."""
        if self._topic_offsets is None:
            self._topic_offsets = TopicOffsets(
                self.bootstrap_servers,
                self.topic,
                options.client_config(self.producer_config),
                broker_timeout=self.broker_timeout,
            )
        return self._topic_offsets

    def _partition0_end(self) -> int:
        """Partition 0's end offset, retried while the broker briefly cannot say (restarted,
        leader moving: the kept client's metadata is refreshed meanwhile)."""
        return retrying(lambda: self._offsets().end(0), self.broker_timeout)

    def _learn_frontier(self) -> TopicFrontier:
        """The topic's frontier: carried forward from this sink's last claim while no other
        writer fenced its claims producer (no request at all), or while partition 0 (where every
        statement goes) has not moved past it (one offset request); else read from the tail."""
        carried = self._carried
        if carried is not None and self._claims is not None and self._claims.commits:
            return carried  # no other writer committed since: it would have fenced our claims
        if carried is not None and self._partition0_end() == carried.partition0_end:
            return carried
        self._carried = state = self.frontier()
        return state

    def _ensure_topic(self) -> None:
        """The topic exists (or is created) and takes messages as large as this sink makes."""
        if self._topic_checked:
            return
        self._update_partitions = topic.writable_topic(
            self.bootstrap_servers,
            self.topic,
            self._offsets(),
            create=self.create_topic,
            partitions=self.topic_partitions,
            config=options.client_config(self.producer_config),
            max_message_bytes=self.max_message_bytes,
            broker_timeout=self.broker_timeout,
        )
        self._topic_checked = True

    def _codec(self, cols: Layout) -> CdcCodec:
        """The codec of the batch's data schema under the sink's schema id: the last batch's
        when both are the same (a codec takes about 5 ms to build: its Avro schemas parsed, its
        decoders generated — a tenth of a small streaming batch's own work)."""
        key = (cols.schema_text, self.schema_id)
        if self._last_codec is None or self._last_codec[0] != key:
            codec = CdcCodec(
                cols.avro_data,
                framing=self.framing,
                schema_id=self.schema_id,
                max_message_bytes=self.max_message_bytes,
                writer_schemas=None if self.registry is None else self.registry.data_schema,
            )
            self._last_codec = (key, codec)
        return self._last_codec[1]

    def _check_topic_schema(self, state: TopicFrontier, cols: Layout, codec: CdcCodec) -> CdcCodec:
        """Check the batch's data schema against the topic's (`topic.schema_changes`) and, with
        a registry, register it before the first message; return the codec to frame with."""
        topic.check_cdc(self.topic, state, self.framing)
        evolves = topic.schema_changes(
            self.topic,
            state,
            cols.avro_data,
            codec,
            framing=self.framing,
            with_registry=self.registry is not None,
        )
        if self.registry is not None:  # registered before the first message, once per schema
            self.schema_id = topic.register_schema(
                self.registry, self.topic, cols.avro_data, evolves
            )
            self._registered[cols.schema_text] = self.schema_id
            codec = self._codec(cols)
        self._schema_checked = cols.schema_text
        return codec

    def _log(self, spark: SparkSession) -> SinkLog | DataFrameSinkLog | None:
        if self.checkpoint_location is None:
            return None
        if self._sinklog is None:
            self._sinklog = open_sink_log(spark, self.checkpoint_location)
        return self._sinklog

    # -- the paths that write a batch (see sink.paths and sink.batch) --------------------------

    def _encoder(self, spark: SparkSession) -> Encoder:
        """The data path: ``encoder``, or for ``"auto"`` ``"jvm"`` when the session can take it,
        else ``"python"`` (decided once per sink, `paths.resolve_encoder`)."""
        if self.encoder != "auto":
            return self.encoder
        if self._resolved_encoder is None:
            self._resolved_encoder = paths.resolve_encoder(
                spark, self.bootstrap_servers, self.topic, self.producer_config
            )
        return self._resolved_encoder

    def _row_checks(self, batch: Batch) -> list[Check]:
        """The JVM path's per-row checks of ``batch`` (`row_checks`).
        A batch of one time has no time to check row by row: its interval was decided from it
        (`batch_upper` refuses a re-run's time beyond its record)."""
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
        """How the batch after this one is written (`paths.path_after`)."""
        return paths.path_after(rows, groups, n_bytes, self.small_batch_rows)

    def _follow_topic(self, state: TopicFrontier, spark: SparkSession, cols: Layout) -> None:
        """Size this sink's first batch like the topic's last one, of the same data layout, by
        any sink (`paths.topic_shape`): its path (`_path_after`), its spread and whether its
        rows are consolidated straight away — as a running sink's next batch follows its last.
        A hint for speed only: a batch unlike it is written the same, as after a change of size
        in a running sink."""
        shape = paths.topic_shape(self.topic, state, cols.schema_text)
        if shape is None:
            return
        rows, groups, n_bytes = shape
        self._next_path = self._path_after(rows, groups, n_bytes)
        self._distributed_path().follow(rows, groups, n_bytes, spark, cols.schema, cols.data_cols)
        log.debug(
            "topic %r: the last batch had %d rows, %d groups and %d bytes of messages: the "
            "first batch goes the %s path",
            self.topic,
            rows,
            groups,
            n_bytes,
            self._next_path,
        )

    # -- the driver's Kafka clients -------------------------------------------------------------

    def _claimed_before_record(
        self,
        decided: decide.Decided,
        sinklog: SinkLog | DataFrameSinkLog | None,
        batch_id: int,
    ) -> decide.Decided:
        """A restarted query's first batch with no record may still have claimed before it died
        (between its claim and its sink log record), with other writers' claims since pushing
        that claim out of the tail read: its claim lies after the previous batch's, which the
        sink log knows, so the topic is read back that far once. Found, the batch keeps it."""
        self._looked_back = True
        previous = sinklog.get(batch_id - 1) if sinklog is not None and batch_id else None
        if previous is None or previous.topic not in (None, self.topic):
            return decided
        state = self.frontier(back_to=previous.lower)
        claimed = decide.claimed_in(
            state, decided.writer, batch_id, column_mode=self.time_column is not None
        )
        return decided if claimed is None else claimed

    def _left_by_writer(
        self, state: TopicFrontier, writer: str, fixed_time: int | None
    ) -> Unfinished | None:
        """The newest `write` batch this sink's ``writer_id`` claimed, as a candidate to
        complete (default mode): a process that died between a claim and its last update
        leaves its readers waiting, and the same command run again — the same writer id, the
        same data — completes it. Other data is found out by its digest, and written as a new
        batch."""
        if not (self.complete_last and self.writer_id) or self.time_column is not None:
            return None
        key = (writer, None)
        found, digest_text = state.batches.get(key), state.digests.get(key)
        if found is None or found[1] is None or not digest_text:
            return None
        lower, upper = found
        if fixed_time is not None and fixed_time != upper - 1:
            return None
        return Unfinished(lower, upper, upper - 1, digest_text)

    def _complete_unfinished(
        self, decided: decide.Decided, fixed_time: int | None
    ) -> decide.Decided:
        """A `write` after one whose claim was committed but whose updates were not all
        written: it completes that claim — the same data at the claim's time — since readers
        wait on it until it is complete."""
        unfinished = self._unfinished
        assert unfinished is not None
        if fixed_time is not None and fixed_time != unfinished.time:
            upper = "∞" if unfinished.upper is None else unfinished.upper
            raise ReplayError(
                f"topic {self.topic!r}: this sink's last batch claimed [{unfinished.lower}, "
                f"{upper}) but its updates were not all written, and readers wait on it. "
                f"Nothing was written: write the same data again (time={unfinished.time}) to "
                "complete it"
            )
        recorded = Recorded(unfinished.lower, unfinished.upper, unfinished.time)
        digest = parse_digest(unfinished.digest_text)
        return decide.Decided(decided.writer, unfinished.lower, recorded, digest, decided.state)

    def _own_claim(self, state: TopicFrontier, batch: Batch) -> Stated | None:
        """This batch's committed claim: a re-run's, found in ``state`` by writer and batch id;
        a `write` batch's, the one this sink left unfinished (or found its writer left)."""
        if batch.batch_id is not None:
            key = (batch.writer, batch.batch_id)
            found = state.batches.get(key)
            if found is None:
                return None
            return Stated(batch.writer, batch.batch_id, found[0], found[1], state.digests.get(key))
        unfinished = self._unfinished
        if unfinished is None:
            return None
        newest: tuple[str, int | None] = (batch.writer, None)  # the writer's newest write batch
        if not unfinished.confirmed:  # committed after all?
            if state.batches.get(newest) != (unfinished.lower, unfinished.upper) or (
                state.digests.get(newest) != unfinished.digest_text
            ):
                return None
            self._unfinished = unfinished = unfinished._replace(confirmed=True)
        elif batch.recorded is None:
            return None
        return Stated(
            batch.writer, None, unfinished.lower, unfinished.upper, unfinished.digest_text
        )

    @staticmethod
    def _covering(state: TopicFrontier, first: int, last: int) -> list[Stated]:
        """The statements in ``state`` that meet ``[first, last]``; else the newest, to name."""
        found = stated_covering(state.batches, state.digests, first, last)
        if not found and state.found and state.lower is not None:
            found = [Stated(state.writer or "unknown", state.batch, state.lower, state.upper, None)]
        return found

    def _claims_producer(self) -> ClaimProducer:
        """The transactional producer of progress statements, one for the sink's life."""
        if self._claims is None:
            self._claims = ClaimProducer(
                self.bootstrap_servers,
                self.topic,
                self.producer_config,
                timeout=self.broker_timeout,
            )
        return self._claims

    def _driver_producer(self) -> CdcProducer:
        """The producer of the update messages the driver writes (small batches): one for the
        sink's life (a new one per batch would pay a connection and an idempotence handshake
        every time)."""
        if self._producer is None:
            self._producer = CdcProducer(self.bootstrap_servers, self.topic, self.producer_config)
        return self._producer

    def _forget_clients(self) -> None:
        """After a failed write: the carried frontier is no longer known, and the driver's
        producer may hold a latched error — the next batch reads the tail and gets new clients.
        The batch's own error is the one raised: its sink log record's, if any, is logged."""
        self._carried = None
        try:
            self.close()
        except CdcError:
            pass  # said by the record's thread (commit.PendingRecord)

    def _wait_for_record(self) -> None:
        """Wait until the last batch's interval is in the sink log (see `commit.record_later`)."""
        pending, self._recording = self._recording, None
        if pending is not None:
            pending.wait()

    def close(self) -> None:
        """Wait for the last batch's sink log record, and release the driver's Kafka clients
        (the sink can still be used: new ones are made).

        Raises:
            CdcError: The last batch's interval could not be recorded in the sink log (the
                clients are released all the same).
        """
        try:
            self._wait_for_record()
        finally:
            self._release_clients()

    def _release_clients(self) -> None:
        producer, self._producer = self._producer, None
        offsets, self._topic_offsets = self._topic_offsets, None
        claims, self._claims = self._claims, None
        if claims is not None:
            claims.close()
        if producer is not None:
            producer.close()
        if offsets is not None:
            offsets.close()
