"""The JVM data path's distributed path: a batch checked, consolidated and packed by one Spark job
(`MessagePlan`), its messages cached with their stats, then written by Spark's own
Kafka writer in a second job — nothing of ours runs on the executors. The counts per time and
the digest are known before anything is written. A small batch spread before its size was
known (a sink's first, or one the driver turned down) over many messages has them joined on the
driver and produced by the sink's producer instead (`DistributedPath._joined`).

Guarantees: nothing is written before every row passed its checks, every consolidated diff fits
64 bits and every message is at most ``max_message_bytes`` (a spread that came out too big is
spread again by its size, and packed exactly if one still is, before writing); the counts and
digest are those of the messages written.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, cast

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from cdc_emitter.errors import DeliveryError, shorten
from cdc_emitter.protocol.schemas import union_schema
from cdc_emitter.sink import plan_stats
from cdc_emitter.sink.batch import Batch, Known
from cdc_emitter.sink.driver import produce_messages, too_big_for_driver
from cdc_emitter.sink.plan import MessagePlan, expect_repeats, note_repeats
from cdc_emitter.sink.row_checks import Check, task_error
from cdc_emitter.spark import kafka as spark_kafka
from cdc_emitter.spark.errors import spark_error_text
from cdc_emitter.spark.kafka import kafka_cause, kafka_write_options
from cdc_emitter.spark.settings import GroupsInMemory

__all__ = ["DistributedPath", "FANOUT_ARRAYS", "FIRST_BUCKETS", "spread"]

log = logging.getLogger("cdc_emitter.sink")

#: The arrays per bucket, at most: each task then packs this many groups,
#: well under the 128 after which Spark's object aggregation falls back to sorting.
FANOUT_ARRAYS = 64
#: A sink's first batch, whose size is unknown, is spread over this many buckets (each a task)
#: of `FANOUT_ARRAYS` arrays: room for 460 MB at the default message limit — a bigger one
#: is spread again by its size — without the session's shuffle partitions (200 by default)
#: turning a small batch into hundreds of tasks and thousands of messages.
FIRST_BUCKETS = 8
#: About how many bytes of messages a bucket packs, when the arrays need no more buckets.
BUCKET_BYTES = 16 * 2**20


def spread(n_bytes: int, max_message_bytes: int, partitions: int) -> tuple[int, int]:
    """``(buckets, arrays per bucket)`` for a batch of about ``n_bytes`` of messages: arrays of
    about a quarter of the limit (room to grow 4-fold before one is expected over it), at most
    `FANOUT_ARRAYS` per bucket, and buckets of about `BUCKET_BYTES`, no more than the
    session's shuffle ``partitions`` unless the arrays need more."""
    arrays = max(1, -(-n_bytes * 4 // max_message_bytes))
    buckets = max(1, -(-arrays // FANOUT_ARRAYS), min(partitions, -(-n_bytes // BUCKET_BYTES)))
    return buckets, max(1, min(FANOUT_ARRAYS, -(-arrays // buckets)))


def _shuffle_partitions(spark: SparkSession) -> int:
    """The session's ``spark.sql.shuffle.partitions``: at most how many buckets `spread`
    makes for the arrays' sake alone."""
    return int(cast(str, spark.conf.get("spark.sql.shuffle.partitions")))


class _Cached(NamedTuple):
    """A batch's messages, cached, and their stats (see `DistributedPath.check`)."""

    messages: DataFrame
    stats: plan_stats.BatchStats
    respread: bool  # spread again by its size (a first batch's spread came out too big)
    release: Callable[[], None]  # unpersists the cache


class DistributedPath:
    """Writes a sink's batches from the executors; keeps how the last one spread its updates.

    Each batch spreads its updates over buckets (a task each) and each bucket over a fixed
    number of arrays (no window to size them), each array holding updates of any times, as
    `spread` sizes them for the last batch's bytes: the first over `FIRST_BUCKETS`
    buckets of `FANOUT_ARRAYS` arrays."""

    def __init__(
        self,
        *,
        bootstrap_servers: str,
        topic: str,
        producer_config: Mapping[str, Any],
        max_message_bytes: int,
        row_checks: Callable[[Batch], list[Check]],
        producer: Callable[[], Any] | None = None,
        flush_timeout: float | None = None,
        join_bytes: int = 0,
    ) -> None:
        self.bootstrap_servers, self.topic = bootstrap_servers, topic
        self.producer_config, self.max_message_bytes = producer_config, max_message_bytes
        self.row_checks = row_checks  # Batch -> its per-row Checks
        # a batch of at most join_bytes of messages, if they are many, is produced on the driver
        # through the sink's producer (see _joined); 0: never
        self.producer, self.flush_timeout, self.join_bytes = producer, flush_timeout, join_bytes
        self.buckets: int | None  # None: a batch of unknown size's (see plan)
        self.fanout: int
        self.unsized()  # the first batch's size is unknown

    def plan(self, spark: SparkSession, batch: Batch) -> tuple[MessagePlan, int]:
        """The shared `MessagePlan` of the batch's layout, and the
        session's shuffle partitions."""
        partitions = _shuffle_partitions(spark)
        plan = MessagePlan.shared(
            type(spark),
            schema=batch.schema,
            data_cols=batch.data_cols,
            update_schema=union_schema(batch.avro_data)[0]["items"],
            frame=batch.codec.frame,
            max_message_bytes=self.max_message_bytes,
            buckets=self.buckets or FIRST_BUCKETS,
            partitions=batch.update_partitions,
        )
        return plan, partitions

    def check(self, prepared: DataFrame, spark: SparkSession, batch: Batch) -> Known:
        """Compute and cache the batch's messages and their stats (one Spark job, more only
        when the first attempt's spread needs mending, see `_cached_messages`); a bad row
        fails it with our error. The caller writes them with `Known.write` and frees them
        with `Known.release`. A sink's first batch is spread before its size is known: a
        spread that came out too big is spread again by its size before anything is written,
        and a small one's messages may be joined on the driver (`_joined`)."""
        first = self.buckets is None  # spread for an unknown size (a first batch, or unsized)
        plan, partitions = self.plan(spark, batch)
        # spread by hash over a fixed number of arrays per bucket (no sort, no window to size
        # them), each array of any times, each row its own update unless many arrays of the last
        # batch of its data layout had repeated rows (plan.expect_repeats)
        may_skip_consolidation = plan.by_bytes
        consolidate = not may_skip_consolidation or expect_repeats(batch.schema, batch.data_cols)
        # a first batch's messages that may be joined on the driver (_joined): those of at most
        # the share of join_bytes that one of its arrays would hold — at most join_bytes in all
        small = (
            self.join_bytes // (FIRST_BUCKETS * self.fanout)
            if first and self.producer is not None
            else 0
        )
        cached = self._cached_messages(
            prepared, spark, batch, plan, partitions, consolidate=consolidate, carry=small
        )
        stats = cached.stats
        if may_skip_consolidation:  # consolidated too, the stats tell which arrays had repeats
            # from about a quarter, the first attempt and the arrays consolidated again cost
            # more than consolidating at once (4M rows: about 3.0 s + 0.5 s + 4.3 s times the
            # share of arrays, against 4.3 s)
            note_repeats(
                batch.schema, batch.data_cols, 4 * len(stats.repeated_arrays) > stats.messages
            )
        self.size_next(stats.bytes, partitions)
        joined = (
            self._joined(cached.messages, stats, batch) if first and not cached.respread else None
        )
        return self._known(cached, batch, joined)

    def _cached_messages(
        self,
        prepared: DataFrame,
        spark: SparkSession,
        batch: Batch,
        plan: MessagePlan,
        partitions: int,
        *,
        consolidate: bool,
        carry: int,
    ) -> _Cached:
        """The batch's messages, cached, with their stats. The arrays found with a repeat are
        consolidated again (the whole batch when they are over half); a batch whose message came
        out too big is spread again by its size, and packed exactly only if one still does —
        nothing is written before the stats of the messages that will be. ``carry``: messages of
        at most this many bytes come back with the stats (none when the driver cannot take
        them)."""
        checks = self.row_checks(batch)
        exact = respread = False
        groups = GroupsInMemory(spark)

        def persist(**how: Any) -> DataFrame:
            """The batch's messages (`MessagePlan.messages`, ``how`` its own arguments), cached.
            Spark may run a check while it plans the cache: on a local relation (rows from the
            driver, every DataFrame of local rows on Spark Connect) the optimizer computes the
            projection itself, and a bad row fails here, not in a job."""
            messages = plan.messages(prepared, checks, time=batch.time, fanout=self.fanout, **how)
            try:
                return messages.persist()
            except Exception as exc:  # noqa: BLE001 - a raise_error of ours, or Spark's own
                _raise_ours(exc, batch)
                raise

        def persisted_messages() -> DataFrame:
            groups.at_least(
                plan.groups_per_packing_task(self.fanout, consolidate=consolidate, exact=exact)
            )
            return persist(exact=exact, consolidate=consolidate)

        persisted: list[DataFrame] = []

        def release() -> None:
            for cached in persisted:
                cached.unpersist()

        try:  # a bad row may fail the first persist: the setting is put back all the same
            messages = persisted_messages()
            persisted.append(messages)
            while True:
                try:
                    stats = plan_stats.batch_stats(
                        messages, time=batch.time, values_up_to=0 if respread else carry
                    )
                except Exception as exc:  # noqa: BLE001 - a raise_error of ours, or Spark's own
                    if carry and too_big_for_driver(exc):  # spark.driver.maxResultSize: without
                        carry = 0
                        continue
                    _raise_ours(exc, batch)
                    raise
                if not consolidate and stats.repeated:
                    consolidate = True
                    repeated = stats.repeated_arrays
                    if 2 * len(repeated) <= stats.messages:  # a few: consolidate those alone
                        log.debug(
                            "%s: %d of %d arrays have rows of the same data and time: "
                            "consolidating them",
                            batch.what,
                            len(repeated),
                            stats.messages,
                        )
                        fixed = persist(arrays=repeated)
                        persisted.append(fixed)
                        messages = messages.where(~F.col("repeated")).unionByName(fixed)
                        continue
                    log.debug(
                        "%s: most arrays have rows of the same data and time: consolidating",
                        batch.what,
                    )
                elif exact or stats.largest <= self.max_message_bytes:
                    break
                elif not respread:  # more bytes than the spread was sized for
                    respread = True
                    self.size_next(stats.bytes, partitions)
                    plan, _ = self.plan(spark, batch)
                    log.info(
                        "%s: a message came out at %d bytes, over the limit of %d: spreading the "
                        "batch's %d bytes again, over %d buckets of %d arrays",
                        batch.what,
                        stats.largest,
                        self.max_message_bytes,
                        stats.bytes,
                        self.buckets,
                        self.fanout,
                    )
                else:
                    log.info(
                        "%s: a spread message has %d bytes, over %d: packing exactly",
                        batch.what,
                        stats.largest,
                        self.max_message_bytes,
                    )
                    exact = consolidate = True
                release()
                messages = persisted_messages()
                persisted[:] = [messages]
        except BaseException:
            release()
            raise
        finally:
            groups.restore()
        return _Cached(messages, stats, respread, release)

    def _known(self, cached: _Cached, batch: Batch, joined: list[bytes] | None) -> Known:
        """The checked batch: its cached messages, written by Spark's Kafka writer — or, when
        ``joined``, those joined messages, produced by the sink's producer."""
        stats = cached.stats
        if joined is None:  # Spark's Kafka writer writes the cached messages
            options = kafka_write_options(self.bootstrap_servers, self.topic, self.producer_config)
            return Known(
                counts=stats.counts,
                digest=stats.digest,
                max_time=stats.max_time,
                rows=stats.rows,
                groups=stats.groups,
                messages=stats.messages,
                n_bytes=stats.bytes,
                write=lambda: self.write_messages(cached.messages, options, batch),
                release=cached.release,
            )
        cached.release()  # produced on the driver: the cache is no longer needed
        producer = self.producer
        assert producer is not None  # joined only with a producer
        return Known(
            counts=stats.counts,
            digest=stats.digest,
            max_time=stats.max_time,
            rows=stats.rows,
            groups=stats.groups,
            messages=len(joined),
            n_bytes=sum(map(len, joined)),
            write=lambda: produce_messages(producer(), joined, batch, self.flush_timeout),
            produced_on_driver=True,
        )

    def _joined(
        self, messages: DataFrame, stats: plan_stats.BatchStats, batch: Batch
    ) -> list[bytes] | None:
        """A small first batch's messages joined into as few as hold them, on the driver; None to
        write them as they are, from the executors. A sink's first batch is spread before its
        size is known — over 512 arrays — so a small one comes out as many tiny messages (later
        batches are spread for the size of the one before): when its bytes are at most
        ``join_bytes`` and its messages came with its stats, or are over twice as many as
        would hold them, they are brought to the driver, joined and produced there, in about the
        time of Spark's write job (measured on 2 cores: 1,000 to 500,000 rows, within the noise)
        — and readers get a few full messages instead of hundreds of tiny ones. They come with
        the batch's stats, in the same job, when each is at most its share of ``join_bytes``
        (as they are unless the spread is skewed); else a job of their own gathers them: 0.97 s
        against 0.82 s for 300,000 rows, 1.19 s against 1.09 s for 600,000 (medians of 10,
        interleaved)."""
        if self.producer is None or stats.bytes > self.join_bytes:
            return None
        if stats.values is not None:  # they came with the stats: produced from here, however few
            return batch.codec.merge_arrays(list(stats.values))
        if stats.messages <= 2 * -(
            -stats.bytes // self.max_message_bytes
        ):  # not worth a job to gather
            return None
        try:
            values = [
                row[0]
                for row in messages.where(F.col("value").isNotNull()).select("value").collect()
            ]
        except Exception as exc:  # noqa: BLE001 - too big for the driver after all: write them as they are
            if not too_big_for_driver(exc):
                raise
            log.info(
                "%s: %d messages of %d bytes are too big to join on the driver (%s)",
                batch.what,
                stats.messages,
                stats.bytes,
                str(exc).splitlines()[0][:200],
            )
            return None
        joined = batch.codec.merge_arrays(values)
        log.debug(
            "%s: %d messages joined into %d on the driver", batch.what, stats.messages, len(joined)
        )
        return joined

    def follow(
        self,
        rows: int,
        groups: int,
        n_bytes: int,
        spark: SparkSession,
        schema: T.StructType,
        data_cols: list[str],
    ) -> None:
        """Write the next batch as one after a batch of ``rows`` input rows, ``groups`` distinct
        data and times among them and ``n_bytes`` of messages, by another sink: spread for its
        bytes, and its rows consolidated straight away when that many repeats would fall in over
        a quarter of the arrays (as `note_repeats` notes of a batch
        of this process)."""
        self.size_next(n_bytes, _shuffle_partitions(spark))
        buckets = self.buckets or FIRST_BUCKETS  # set by size_next
        note_repeats(schema, data_cols, 4 * (rows - groups) > buckets * self.fanout)

    def unsized(self) -> None:
        """Spread the next batch as one whose size is unknown, as a first batch is: one the
        driver turned down (over ``spark.driver.maxResultSize``, or more updates than it takes)
        may be far bigger than the last batch this path wrote, whose spread would pack it into
        a few arrays each too big to build (4M rows in the one array of a 200-row batch ran out
        of memory: a 1 GB driver in local mode)."""
        self.buckets, self.fanout = None, FANOUT_ARRAYS

    def size_next(self, n_bytes: int, partitions: int) -> None:
        """Size the next batch's spread (`spread`) for this one's bytes."""
        self.buckets, self.fanout = spread(n_bytes, self.max_message_bytes, partitions)

    def write_messages(self, messages: DataFrame, options: dict, batch: Batch) -> None:
        """Write the batch's ``messages`` by Spark's Kafka writer with ``options``
        (`kafka_write_options`); a failed delivery raises
        `DeliveryError`."""
        try:
            spark_kafka.write_messages(messages, options, batch.headers)
        except Exception as exc:  # noqa: BLE001 - Spark wraps the producer's error
            raise self.delivery_error(exc, options, batch) from exc

    def delivery_error(self, exc: BaseException, options: dict, batch: Batch) -> DeliveryError:
        """Our error for a failed write by Spark's Kafka writer: the producer's cause, and that
        the batch's claim waits for a re-run (its claim is committed before its updates)."""
        cause = shorten(kafka_cause(exc) or spark_error_text(exc))
        timeout = options["kafka.delivery.timeout.ms"]
        return DeliveryError(
            f"delivery to topic {self.topic!r} failed in Spark's Kafka writer "
            f"(delivery.timeout.ms={timeout} per attempt): {cause}. The claim of {batch.what} "
            "is in the topic, so readers wait on its times until a re-run of the batch writes "
            "its updates again"
        )


def _raise_ours(exc: BaseException, batch: Batch) -> None:
    """Raise our error behind a failed Spark job (a ``raise_error`` of
    `cdc_emitter.sink.plan`, the batch named), if that is what failed it."""
    ours = task_error(exc, batch.what, batch.time)
    if ours is not None:
        raise ours from None
