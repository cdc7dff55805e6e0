"""The JVM data path's distributed path: a batch checked, consolidated and packed by one Spark job
(`MessagePlan`), its messages cached, then written by Spark's own
Kafka writer — nothing of ours runs on the executors. A small first batch, spread before its
size was known over many messages, has them joined on the driver and produced by the sink's
producer instead (`DistributedPath._joined`). A batch of one time, its data grouped as
bytes, is checked, packed and written by one job instead (`WrittenWhilePacked`).

Guarantees: nothing is written before every row passed its checks, every consolidated diff fits
64 bits and every message is at most ``max_message_bytes`` (a spread that came out too big is
packed again exactly, before writing); the counts and digest are those of the messages written.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, cast

import pyspark
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from cdc_emitter.errors import DeliveryError
from cdc_emitter.protocol.codec import union_schema
from cdc_emitter.sink import plan_stats
from cdc_emitter.sink.batch import Batch, Checked, Known, Written
from cdc_emitter.sink.driver import produce_messages, too_big_for_driver
from cdc_emitter.sink.plan import (
    LARGE_DIFF,
    Check,
    MessagePlan,
    expect_repeats,
    large_diff,
    note_repeats,
    small_diffs,
    task_error,
)
from cdc_emitter.spark import kafka as spark_kafka
from cdc_emitter.spark.errors import spark_error_text
from cdc_emitter.spark.kafka import kafka_cause, kafka_write_options
from cdc_emitter.spark.settings import GroupsInMemory, KafkaWriteObserved

__all__ = ["DistributedPath", "FANOUT_ARRAYS", "FIRST_BUCKETS", "WrittenWhilePacked", "spread"]

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
#: A first batch written by one job brings back its arrays under this many bytes, to be joined on
#: the driver (at most 2 MiB over its 512 arrays): a bigger one is written as it is. Through the
#: job's observed stats, values cost more than through a collect (500,000 rows, 10 MB of
#: arrays under 32 KiB: 2.1 s against 1.3 s by two jobs), and arrays of a few KiB are no burden
#: to readers.
SMALL_ARRAY_BYTES = 4096


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
        self.buckets: int | None = None  # None: the first batch's (see plan)
        self.fanout = FANOUT_ARRAYS
        #: a batch had a diff beyond plan.LARGE_DIFF: this sink's batches take two jobs
        self.large_diffs = False
        self._checks_writing: tuple | None = None  # (row checks, with small_diffs), built once

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

    def check(
        self,
        prepared: DataFrame,
        spark: SparkSession,
        batch: Batch,
        *,
        write_while_packing: bool = False,
    ) -> Checked:
        """Compute and cache the batch's messages and their stats (one Spark job, more only
        when the first attempt's spread needs mending, see `_cached_messages`); a bad row
        fails it with our error. The caller writes them with `Known.write` and frees them
        with `Known.release`.

        ``write_while_packing`` (the caller needs no stats before writing: not a re-run
        comparing digests): a batch of one time whose data is grouped as bytes is instead
        checked, packed and written by one job when `Checked.write` is called
        (`WrittenWhilePacked`), written unconsolidated or consolidated straight away —
        nothing is computed here. A sink's first batch is spread before its size is known:
        there, the arrays that came out small are brought back by that job and joined on the
        driver, and those too big are packed exactly after it; by two jobs, a first batch's
        spread that came out too big is spread again by its size before anything is written."""
        first = self.buckets is None  # spread before any size was known
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
        if (
            write_while_packing
            and not self.large_diffs
            and batch.time is not None
            and plan.by_bytes
            and _observable(spark)
        ):
            return WrittenWhilePacked(
                self,
                spark,
                prepared,
                batch,
                plan,
                partitions,
                consolidate=consolidate,
                small_below=min(small, SMALL_ARRAY_BYTES),
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

        def persisted_messages() -> DataFrame:
            groups.at_least(
                plan.groups_per_packing_task(self.fanout, consolidate=consolidate, exact=exact)
            )
            return plan.messages(
                prepared,
                checks,
                time=batch.time,
                fanout=self.fanout,
                exact=exact,
                consolidate=consolidate,
            ).persist()

        messages = persisted_messages()
        persisted = [messages]

        def release() -> None:
            for cached in persisted:
                cached.unpersist()

        try:
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
                        fixed = plan.messages(
                            prepared, checks, time=batch.time, fanout=self.fanout, arrays=repeated
                        ).persist()
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
        no progress statement was written."""
        cause = kafka_cause(exc) or spark_error_text(exc)
        timeout = options["kafka.delivery.timeout.ms"]
        return DeliveryError(
            f"delivery to topic {self.topic!r} failed in Spark's Kafka writer "
            f"(delivery.timeout.ms={timeout} per attempt): {cause}. No progress "
            f"statement was written for {batch.what}; a re-run of the batch writes the same "
            "updates again"
        )

    def checks_writing(self, batch: Batch) -> list[Check]:
        """The batch's row checks and `small_diffs`, for a batch
        written in the job that packs it: the same list while the row checks are (the plan
        reuses the Columns it built for them)."""
        checks = self.row_checks(batch)
        if self._checks_writing is None or self._checks_writing[0] is not checks:
            self._checks_writing = (checks, [*checks, small_diffs()])
        return self._checks_writing[1]


def _raise_ours(exc: BaseException, batch: Batch) -> None:
    """Raise our error behind a failed Spark job (a ``raise_error`` of
    `cdc_emitter.sink.plan`, the batch named), if that is what failed it."""
    ours = task_error(exc, batch.what, batch.time)
    if ours is not None:
        raise ours from None


def _observable(spark: SparkSession) -> bool:
    """Whether ``spark``'s DataFrames take an ``Observation`` (Spark Connect's from PySpark 4)."""
    if "connect" not in type(spark).__module__:
        return True
    return int(pyspark.__version__.split(".")[0]) >= 4


class WrittenWhilePacked(Checked):
    """A batch of one time, its data grouped as bytes, that is checked, packed and written by one
    Spark job when `write` is called — nothing is computed before — instead of a job that
    computes and caches its messages and one that writes them: the cache, the second job and
    the second read of the messages are saved (a running sink's batches, medians: 4M narrow rows
    3.56 s against 3.67 s, within the noise; 4M wide rows 6.23 s against 7.49 s; 4M rows of
    400,000 keys, ``consolidate``, 1.68 s against 1.91 s). Written unconsolidated, unless
    ``consolidate`` (its layout's last batch repeated rows): then consolidated as Spark's own
    aggregation goes, the diffs summed before the shuffle that the writing tasks follow.

    Guarantees, as the two jobs': nothing is written before every row passed its checks (they
    fail the job's input stage, and no task after the shuffle — no write — starts before every
    task before it succeeded: `write_observed`); every message
    is at most ``max_message_bytes`` and holds no two live updates of one data and time — the
    arrays that came out (unconsolidated) with such a repeat are left out of that job and written
    by a second one like it, consolidated (only their rows; no cache, no job to compute their
    stats first), and those that came out too big, from either, are packed exactly after it,
    consolidated; the stats are those of the messages written. No consolidation can fail on a
    diff sum over 64 bits once a message is written: a batch with a diff beyond
    `LARGE_DIFF` fails the first job before its shuffle and is
    written by the two jobs instead, which find such a sum before writing.

    A sink's first batch, spread before its size was known, does not write its arrays under
    ``small_below`` bytes (at most the sink's join bytes in all): their values come back with
    the job's stats, and a small batch's many tiny messages are joined on the driver into as
    few as hold them and produced there, with no job of their own.

    Unlike the two jobs' batch, its stats (`rows`, `groups`, `bytes`) are
    known only after `write` (`known_before_write`), and it has no `digest`
    to compare before writing."""

    known_before_write = False

    def __init__(
        self,
        path: DistributedPath,
        spark: SparkSession,
        prepared: DataFrame,
        batch: Batch,
        plan: MessagePlan,
        partitions: int,
        *,
        consolidate: bool = False,
        small_below: int = 0,
    ) -> None:
        self._path, self._spark, self._prepared, self._batch = path, spark, prepared, batch
        self._plan, self._partitions, self._small_below = plan, partitions, small_below
        self._consolidate = consolidate
        self.max_time = batch.time  # a batch of one time: the interval does not wait for its rows

    def digest(self) -> tuple[int, tuple]:
        raise TypeError("a batch written while it is packed has no digest before it is written")

    def write(self) -> Written:
        path, batch, spark, plan = self._path, self._batch, self._spark, self._plan
        checks = path.checks_writing(batch)
        options = kafka_write_options(path.bootstrap_servers, path.topic, path.producer_config)
        groups, v2 = GroupsInMemory(spark), KafkaWriteObserved(spark)
        observed: plan_stats.ObservedWrite | None = None
        again: plan_stats.ObservedWrite | None = None
        try:
            if v2.in_force:
                groups.at_least(
                    plan.groups_per_packing_task(path.fanout, consolidate=self._consolidate)
                )
                observed = self._in_one_job(checks, options, consolidate=self._consolidate)
                if observed is not None and observed.left_out and not observed.too_big:
                    # arrays with a repeat only: consolidated by a job like the first (no cache, no
                    # job to compute their stats first); their rows passed its checks
                    log.debug(
                        "%s: %d arrays left out of the first write (rows of one data and time): "
                        "writing them consolidated",
                        batch.what,
                        len(observed.left_out),
                    )
                    again = self._in_one_job(
                        checks, options, consolidate=True, arrays=observed.left_out
                    )
        finally:
            groups.restore()
            v2.restore()
        if observed is None:
            return self._in_two_jobs(
                f"a diff is beyond {LARGE_DIFF}"
                if v2.in_force
                else "the session keeps Kafka's V1 writer"
            )
        updates, digest, n_messages, n_bytes = (
            observed.updates,
            observed.digest,
            observed.messages,
            observed.bytes,
        )
        self.rows, self.groups = observed.rows, observed.groups
        to_join = list(observed.small_values)  # a first batch's small arrays: joined on the driver
        pending = observed  # the write whose left-out arrays are still to write
        if again is not None:
            updates += again.updates
            digest ^= again.digest
            self.rows, self.groups = self.rows + again.rows, self.groups + again.groups
            n_messages, n_bytes = n_messages + again.messages, n_bytes + again.bytes
            to_join += again.small_values
            pending = again
        if pending.left_out:  # written after, consolidated: its stats join the first job's
            left, left_values = self._left_out(pending, checks, options)
            updates += left.counts.get(batch.time, 0)
            digest ^= left.digest
            self.rows, self.groups = self.rows + left.rows, self.groups + left.groups
            if left_values:
                to_join += left_values
            else:
                n_messages, n_bytes = n_messages + left.messages, n_bytes + left.bytes
        if to_join:
            joined = batch.codec.merge_arrays(to_join)
            log.debug(
                "%s: %d small messages joined into %d on the driver",
                batch.what,
                len(to_join),
                len(joined),
            )
            assert path.producer is not None  # small values come back only with a producer
            produce_messages(path.producer(), joined, batch, path.flush_timeout)
            self.produced_on_driver = True
            n_messages, n_bytes = n_messages + len(joined), n_bytes + sum(map(len, joined))
        # as DistributedPath.check notes them: consolidate the layout's next batch straight away
        # when over a quarter of the arrays had a repeat
        arrays = observed.messages + len(observed.small_values) + len(observed.left_out)
        note_repeats(batch.schema, batch.data_cols, 4 * observed.repeated > max(1, arrays))
        path.size_next(n_bytes, self._partitions)
        self.bytes = n_bytes
        return Written({batch.time: updates} if updates else {}, digest, n_messages, n_bytes)

    def _in_one_job(
        self,
        checks: list,
        options: dict,
        *,
        consolidate: bool,
        arrays: Sequence[tuple[int, int]] | None = None,
    ) -> plan_stats.ObservedWrite | None:
        """Check, pack and write the batch — or only its ``arrays`` — by one job
        (`write_observed`) and return what it observed; None when
        a diff beyond `LARGE_DIFF` failed it before its shuffle
        (nothing written: the batch goes by two jobs). Raises our error for a bad row, else a
        DeliveryError."""
        path, batch = self._path, self._batch
        messages = self._plan.messages(
            self._prepared,
            checks,
            time=batch.time,
            fanout=path.fanout,
            consolidate=consolidate,
            arrays=arrays,
        )
        try:
            return plan_stats.write_observed(
                messages,
                options,
                batch.headers,
                max_message_bytes=path.max_message_bytes,
                small_below=self._small_below,
                consolidated=consolidate,
            )
        except Exception as exc:  # noqa: BLE001 - a raise_error of ours, or Spark's own
            if not large_diff(exc):
                _raise_ours(exc, batch)
                raise path.delivery_error(exc, options, batch) from exc
            path.large_diffs = True  # it failed before its shuffle: nothing was written
            return None

    def _left_out(
        self, observed: plan_stats.ObservedWrite, checks: list[Check], options: dict
    ) -> tuple[plan_stats.BatchStats, list[bytes]]:
        """Write the arrays that a one-job write left out, consolidated — packed exactly if one was
        too big (the only ones a consolidated job leaves out), or comes out so — and return
        their `BatchStats` and, for a first batch whose arrays all
        came out under ``small_below`` bytes, their values instead of writing them, to be joined
        on the driver. Their rows passed the checks, and their sums cannot overflow (see the
        class)."""
        path, batch = self._path, self._batch
        exact = observed.too_big
        log.debug(
            "%s: %d arrays left out of a one-job write (%s): writing them consolidated%s",
            batch.what,
            len(observed.left_out),
            "a message too big" if exact else "rows of one data and time",
            ", packed exactly" if exact else "",
        )
        while True:
            fixed = self._plan.messages(
                self._prepared,
                checks,
                time=batch.time,
                fanout=path.fanout,
                exact=exact,
                arrays=observed.left_out,
            ).persist()
            try:
                stats = plan_stats.batch_stats(
                    fixed, time=batch.time, values_up_to=self._small_below
                )
                if exact or stats.largest <= path.max_message_bytes:
                    if stats.values is not None:
                        return stats, list(stats.values)
                    path.write_messages(fixed, options, batch)
                    return stats, []
            except Exception as exc:  # noqa: BLE001 - a raise_error of ours, or Spark's own
                _raise_ours(exc, batch)
                raise
            finally:
                fixed.unpersist()
            exact = True

    def _in_two_jobs(self, why: str) -> Written:
        """Write the batch by the two jobs (`DistributedPath.check`, then its write)."""
        log.info("%s: written by a job after the one that packs it: %s", self._batch.what, why)
        known = self._path.check(self._prepared, self._spark, self._batch)
        try:
            written = known.write()
        finally:
            known.release()
        self.rows, self.groups, self.bytes = known.rows, known.groups, known.bytes
        return written
