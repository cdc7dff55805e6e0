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

`CdcSink` holds the sink's settings and runs these steps (`CdcSink._write_once`); the work of
each is done in a module of its own:

- `cdc_emitter.sink.options`: the constructor's arguments;
- `cdc_emitter.sink.layout`: step 1;
- `cdc_emitter.sink.decide`: step 2, and `cdc_emitter.sink.resume` for a batch whose own claim
  is already in the topic (a re-run, an unfinished `write`);
- `cdc_emitter.sink.clients` and `cdc_emitter.sink.topic`: the driver's Kafka clients, the
  frontier, the topic's schema and settings;
- `cdc_emitter.sink.paths`: which data path checks and writes the batch, step 3;
- `cdc_emitter.sink.claiming`: step 4, the claim committed (`cdc_emitter.sink.claim` decides
  where it goes);
- `cdc_emitter.sink.commit`: the statement's messages and the sink log record.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from cdc_emitter.errors import (
    BadInputError,
    CdcError,
    ConfigError,
    InterruptedBatchError,
    ReplayError,
)
from cdc_emitter.kafka.frontier import TopicFrontier, topic_frontier
from cdc_emitter.protocol.codec import CdcCodec
from cdc_emitter.protocol.headers import (
    HEADER_BATCH,
    HEADER_KIND,
    HEADER_LOWER,
    HEADER_UPPER,
    HEADER_WRITER,
)
from cdc_emitter.protocol.schemas import Framing
from cdc_emitter.sink import claiming, commit, decide, layout, options, resume, topic
from cdc_emitter.sink.batch import Batch, Checked
from cdc_emitter.sink.claim import Stated
from cdc_emitter.sink.claiming import Overtaken
from cdc_emitter.sink.clients import TopicClients
from cdc_emitter.sink.digest import digest_form, replay_message
from cdc_emitter.sink.interrupted import interrupted_batch
from cdc_emitter.sink.interval import batch_upper
from cdc_emitter.sink.layout import Layout
from cdc_emitter.sink.log import (
    DataFrameSinkLog,
    SinkLog,
    is_connect,
    open_sink_log,
    query_id_from_checkpoint,
)
from cdc_emitter.sink.options import (
    DEFAULT_MAX_MESSAGE_BYTES,
    SMALL_BATCH_ROWS,
    Encoder,
    Late,
)
from cdc_emitter.sink.paths import DRIVER, DRIVER_AFTER_EXECUTORS, EXECUTORS, DataPaths, JvmPath
from cdc_emitter.sink.result import BatchResult, PhaseClock
from cdc_emitter.sink.resume import NotThatBatch, Unfinished

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

#: How many times a batch is planned again (its Spark jobs run again) before its last attempt.
REPLANS = 3


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
            goes the distributed path. A first batch, or one the driver turned down (written
            by the distributed path, its spread sized before its size is known), whose
            messages are at most 16 MiB and over twice as many as would hold them has them
            joined on the driver, which produces them. 0: never.
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
        # the driver's Kafka clients, and the frontier carried from the last claim
        self._clients = TopicClients(
            bootstrap_servers,
            topic,
            self.producer_config,
            framing=framing,
            broker_timeout=self.broker_timeout,
        )
        # the data paths, and which one the next batch takes
        self._paths = DataPaths(
            bootstrap_servers=bootstrap_servers,
            topic=topic,
            producer_config=self.producer_config,
            encoder=encoder,
            max_message_bytes=self.max_message_bytes,
            framing=framing,
            time_column=time_column,
            diff_column=diff_column,
            late=late,
            flush_timeout=flush_timeout,
            small_batch_rows=small_batch_rows,
            producer=self._clients.producer,
        )
        #: a `write` batch claimed whose updates were not all written (see resume.Unfinished)
        self._unfinished: Unfinished | None = None
        self._looked_back = False  # whether the first batch looked back for its own earlier claim
        self._clock = PhaseClock()  # the current batch's phases (see sink.result)
        self._upper_hint: int | None = None  # write_upto's upper, for the batch being written
        self._schema_checked: str | None = None  # the data schema found compatible with the topic
        self._sinklog: SinkLog | DataFrameSinkLog | None = None
        self._recording: commit.PendingRecord | None = None  # the last batch's sink log record
        # ((schema text, schema id), codec) of the last batch: see _codec
        self._last_codec: tuple[tuple[str, int], CdcCodec] | None = None
        self._query_id: str | None = None  # Spark Connect: from the checkpoint (see _writer)
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
        look_back = True
        for _attempt in range(REPLANS):
            try:
                return self._write_once(
                    df, batch_id, fixed_time=fixed_time, close=close, look_back=look_back
                )
            except Overtaken as exc:
                log.info("%s: planned again at the topic's new frontier", exc)
            except NotThatBatch as exc:
                log.info("%s: other data than its writer's last batch: a new batch", exc)
                self._unfinished, look_back = None, False
        return self._write_once(df, batch_id, fixed_time=fixed_time, close=close, last=True)

    def _write_once(
        self,
        df: DataFrame,
        batch_id: int | None,
        *,
        fixed_time: int | None,
        close: bool,
        last: bool = False,
        look_back: bool = False,
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
        update_partitions = self._clients.update_partitions(
            create=self.create_topic,
            partitions=self.topic_partitions,
            max_message_bytes=self.max_message_bytes,
        )
        # started now, so that its round trips to the transaction coordinator (up to half a
        # second on a new sink) overlap this batch's reads of the topic and its Spark job; the
        # claim waits for it, since it fences the other writers, and then reads the topic again
        self._clients.start_fencing()
        writer = self._writer(spark, batch_id)
        sinklog = self._log(spark) if batch_id is not None else None
        state = None
        if self._schema_checked != cols.schema_text:  # once per sink and schema: a tail read
            state = self._clients.learn_frontier(self.frontier)
            codec = self._check_topic_schema(state, cols, codec)
        # 2. the interval, decided once: recorded, or from the topic's frontier
        decided = decide.decide_interval(
            sinklog,
            batch_id,
            writer,
            state,
            topic=self.topic,
            column_mode=self.time_column is not None,
            learn_frontier=lambda: self._clients.learn_frontier(self.frontier),
        )
        if batch_id is not None and decided.recorded is None and not self._looked_back:
            self._looked_back = True
            decided = resume.claimed_before_record(
                decided,
                sinklog,
                batch_id,
                topic=self.topic,
                column_mode=self.time_column is not None,
                read_back=lambda lower: self.frontier(back_to=lower),
            )
        resuming = False
        if batch_id is None and decided.recorded is None:
            if self._unfinished is None and look_back and not last and not self._looked_back:
                # a new sink (a new process): its writer may have left a batch unfinished
                self._looked_back = True
                if self.complete_last and self.writer_id and self.time_column is None:
                    self._unfinished = resume.left_by_writer(decided.state, writer, fixed_time)
                resuming = self._unfinished is not None
            if self._unfinished is not None:
                decided = resume.completing(self._unfinished, decided, fixed_time, topic=self.topic)
        encoder = self._paths.encoder(spark)
        self._paths.follow_topic(decided.state, spark, cols, encoder)
        # opened now, so that its connection and idempotence handshake overlap the Spark job;
        # and a claims producer that could not start fails the batch before that job runs
        self._clients.producer()
        self._clients.raise_failed_fencing()
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
            update_partitions=update_partitions,
            redundant=self.redundant,
        )
        self._clock.mark("plan")
        # 3. every row, with its time and diff, checked by the batch's path (a bad one raises:
        # nothing written)
        path, checked = self._paths.check(df, spark, batch, encoder, schema_id=self.schema_id)
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
        """The checked batch's progress statement claimed (`claiming.claim_statement`), then its updates written
        while its interval is recorded (by a thread: `commit.record_later`): a re-run's
        compared with its first attempt first."""
        try:
            self._clock.mark("check")
            upper = self._upper(batch, close, checked.max_time)
            now = checked.digest()
            if recorded_digest is not None and digest_form(*now) != recorded_digest:
                if resuming:  # not the batch its writer left: a new one
                    raise NotThatBatch(batch.what)
                raise ReplayError(
                    replay_message(batch.what, batch.batch_id, recorded_digest, digest_form(*now))
                )
            claim, statements, digest_text = claiming.claim_statement(
                batch,
                upper,
                now,
                checked,
                clients=self._clients,
                read_frontier=self.frontier,
                redundant=self.redundant,
                max_message_bytes=self.max_message_bytes,
                own=lambda state: self._own_claim(state, batch),
                sending=lambda lower, upper, digest: self._sending(batch, lower, upper, digest),
                floats=floats,
            )
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
        return self._clients.frontier(self.schema_id, back_to=back_to)

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

    # -- this sink's own claims (see sink.resume) ---------------------------------------------

    def _own_claim(self, state: TopicFrontier, batch: Batch) -> Stated | None:
        """This batch's committed claim in ``state`` (`resume.own_claim`): a re-run's, by writer
        and batch id; a `write` batch's, the one this sink left unfinished."""
        stated, self._unfinished = resume.own_claim(state, batch, self._unfinished)
        return stated

    def _sending(self, batch: Batch, lower: int, upper: int | None, digest_text: str) -> None:
        """A `write` batch's claim is about to be committed: until its updates are written, it
        is this sink's unfinished batch, maybe committed (see `unfinished`)."""
        if batch.batch_id is None:
            self._unfinished = Unfinished(lower, upper, batch.time, digest_text, confirmed=False)

    # -- the driver's Kafka clients (see sink.clients) -----------------------------------------

    def _forget_clients(self) -> None:
        """After a failed write: the carried frontier is no longer known, and the driver's
        producer may hold a latched error — the next batch reads the tail and gets new clients.
        The batch's own error is the one raised: its sink log record's, if any, is logged."""
        self._clients.carried = None
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
            self._clients.release()
