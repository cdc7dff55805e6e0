"""The JVM data path's distributed way: a batch checked, consolidated and packed by one Spark job
(:class:`~cdc_emitter.sink_jvm.MessagePlan`), its messages cached, then written by Spark's own
Kafka writer — nothing of ours runs on the executors.

Guarantees: nothing is written before every row passed its checks, every consolidated diff fits
64 bits and every message is at most ``max_message_bytes`` (a spread that came out too big is
packed again exactly, before writing); the counts and digest are those of the messages written.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from .errors import DeliveryError
from .sink_batch import Batch, Known

__all__ = ["ExecutorsWay", "FANOUT_ARRAYS"]

log = logging.getLogger("cdc_emitter.sink")

#: The arrays per bucket in a batch of one time, at most: each task then packs this many groups,
#: well under the 128 after which Spark's object aggregation falls back to sorting.
FANOUT_ARRAYS = 64


class ExecutorsWay:
    """Writes a sink's batches from the executors; keeps how the last one spread its updates.

    Each batch spreads its updates over about as many groups (buckets, a task each) as the last
    one filled messages, and, with one time, each bucket over a fixed number of arrays (no window
    to size them) sized for room to grow 16-fold: the first batch over the session's shuffle
    partitions and :data:`FANOUT_ARRAYS` arrays."""

    def __init__(self, *, bootstrap_servers: str, topic: str, producer_config: Mapping[str, Any],
                 max_message_bytes: int, row_checks: Any) -> None:
        self.bootstrap_servers, self.topic = bootstrap_servers, topic
        self.producer_config, self.max_message_bytes = producer_config, max_message_bytes
        self.row_checks = row_checks  # Batch -> its per-row Checks
        self.buckets: int | None = None  # None: the session's shuffle partitions
        self.fanout = FANOUT_ARRAYS

    def plan(self, spark: Any, batch: Batch) -> tuple[Any, int]:
        """The shared :class:`~cdc_emitter.sink_jvm.MessagePlan` of the batch's layout, and the
        session's shuffle partitions."""
        from . import sink_jvm
        from .codec import union_schema

        partitions = int(spark.conf.get("spark.sql.shuffle.partitions"))
        plan = sink_jvm.MessagePlan.shared(
            type(spark), schema=batch.schema, data_cols=batch.data_cols,
            update_schema=union_schema(batch.avro_data)[0]["items"], frame=batch.codec.frame,
            max_message_bytes=self.max_message_bytes, buckets=self.buckets or partitions,
            partitions=batch.update_partitions)
        return plan, partitions

    def check(self, prepared: Any, spark: Any, batch: Batch) -> Known:
        """Compute and cache the batch's messages and their figures (one Spark job, more only
        when the first attempt's spread needs mending, as below); a bad row fails it with our
        error. The caller writes them with :meth:`Known.write` and frees them with
        :meth:`Known.release`."""
        from pyspark.sql import functions as F

        from . import sink_jvm

        checks = self.row_checks(batch)
        plan, partitions = self.plan(spark, batch)
        # spread by hash (no sort): a batch of one time over a fixed number of arrays per bucket
        # (no window to size them), each row its own update unless many arrays of the last such
        # batch of its data layout had repeated rows (sink_jvm.expect_repeats); else as many
        # arrays as its size needs. The arrays found with a repeat are consolidated again (the
        # whole batch when they are over half), the batch packed exactly in the rare case a
        # message came out too big — nothing is written before the stats of the messages that
        # will be
        fanout = self.fanout if batch.time is not None else None
        may_skip_consolidation = fanout is not None and plan.by_bytes
        consolidate = not may_skip_consolidation or sink_jvm.expect_repeats(batch.schema, batch.data_cols)
        exact = False
        messages = plan.messages(prepared, checks, time=batch.time, fanout=fanout,
                                 consolidate=consolidate).persist()
        persisted = [messages]

        def release() -> None:
            for cached in persisted:
                cached.unpersist()

        try:
            while True:
                try:
                    stats = sink_jvm.batch_stats(messages, time=batch.time)
                except Exception as exc:  # noqa: BLE001 - a raise_error of ours, or Spark's own
                    ours = sink_jvm.task_error(exc, batch.what, batch.time)
                    if ours is None:
                        raise
                    raise ours from None
                if not consolidate and stats.repeated:
                    consolidate = True
                    repeated = stats.repeated_arrays
                    if 2 * len(repeated) <= stats.messages:  # a few: consolidate those alone
                        log.debug("%s: %d of %d arrays have rows of the same data and time: "
                                  "consolidating them", batch.what, len(repeated), stats.messages)
                        fixed = plan.messages(prepared, checks, time=batch.time, fanout=fanout,
                                              arrays=repeated).persist()
                        persisted.append(fixed)
                        messages = messages.where(~F.col("repeated")).unionByName(fixed)
                        continue
                    log.debug("%s: most arrays have rows of the same data and time: consolidating",
                              batch.what)
                elif exact or stats.largest <= self.max_message_bytes:
                    break
                else:
                    log.debug("%s: a spread message has %d bytes, over %d: packing exactly", batch.what,
                              stats.largest, self.max_message_bytes)
                    exact = consolidate = True
                release()
                messages = plan.messages(prepared, checks, time=batch.time, fanout=fanout, exact=exact).persist()
                persisted[:] = [messages]
        except BaseException:
            release()
            raise
        if may_skip_consolidation:  # consolidated too, the stats tell which arrays had repeats
            # from about a quarter, the first attempt and the arrays consolidated again cost
            # more than consolidating at once (4M rows: about 3.0 s + 0.5 s + 4.3 s times the
            # share of arrays, against 4.3 s)
            sink_jvm.note_repeats(batch.schema, batch.data_cols, 4 * len(stats.repeated_arrays) > stats.messages)
        self._size_next(stats.bytes, partitions)
        options = sink_jvm.kafka_write_options(self.bootstrap_servers, self.topic, self.producer_config)
        return Known(counts=stats.counts, digest=stats.digest, max_time=stats.max_time, rows=stats.rows,
                     groups=stats.groups, messages=stats.messages, n_bytes=stats.bytes,
                     write=lambda: self._write(messages, options, batch), release=release)

    def _size_next(self, n_bytes: int, partitions: int) -> None:
        """Size the next batch's spread from this one's bytes: as many groups as this one filled
        messages (at least one; at most the shuffle partitions), and arrays of about 1/16 of the
        limit if it is as big as this one."""
        self.buckets = max(1, min(partitions, -(-n_bytes * 4 // self.max_message_bytes)))
        self.fanout = max(1, min(FANOUT_ARRAYS, -(-n_bytes * 16 // (self.buckets * self.max_message_bytes))))

    def _write(self, messages: Any, options: dict, batch: Batch) -> None:
        from . import sink_jvm
        from .sources import spark_error_text

        try:
            sink_jvm.write_messages(messages, options, batch.headers)
        except Exception as exc:  # noqa: BLE001 - Spark wraps the producer's error
            cause = sink_jvm.kafka_cause(exc) or spark_error_text(exc)
            timeout = options["kafka.delivery.timeout.ms"]
            raise DeliveryError(
                f"delivery to topic {self.topic!r} failed in Spark's Kafka writer "
                f"(delivery.timeout.ms={timeout} per attempt): {cause}. No progress "
                f"statement was written for {batch.what}; a re-run of the batch writes the same "
                "updates again"
            ) from exc
