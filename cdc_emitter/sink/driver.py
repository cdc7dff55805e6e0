"""The JVM data path's driver path: a batch finished on the driver, for batches whose rows (or
updates) are few enough that a Spark job and its shuffle would cost more than the driver's work.

Two forms:

- **small batches**: one narrow Spark job (no shuffle) brings every row to the driver, its data
  encoded by ``to_avro`` and hashed by ``xxhash64``
  (`EncodedRows`: nothing of ours on the executors); the driver checks the rows and consolidates them on those
  bytes (`cdc_emitter.sink.small_batch`);
- **rows that consolidate to few updates**: one Spark job checks and consolidates the rows,
  partly before its shuffle (`MessagePlan.updates`),
  and only the updates come to the driver.

Either way the driver packs the update arrays and produces them through the sink's own producer.

Guarantees: the same checks, error messages, messages and digest as the distributed path (a
re-run compares across paths); nothing is produced before every row passed; a batch the driver
cannot take (``spark.driver.maxResultSize``, or more updates than ``small_batch_rows``) is left
to the distributed path, with nothing written.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession

from cdc_emitter.errors import shorten
from cdc_emitter.sink import small_batch
from cdc_emitter.sink.batch import Batch, Known
from cdc_emitter.sink.plan import ENVELOPE
from cdc_emitter.sink.row_checks import Check, task_error
from cdc_emitter.spark.columns import EncodedRows, arrow_table

if TYPE_CHECKING:
    from cdc_emitter.kafka.producer import CdcProducer
    from cdc_emitter.sink.plan import MessagePlan

__all__ = ["DriverPath", "produce_messages", "too_big_for_driver"]

log = logging.getLogger("cdc_emitter.sink")


class _RowText:
    """Row ``i`` of a small batch as JSON, decoded from its encoded data record (for messages)."""

    def __init__(self, data: pa.Array, data_record: dict) -> None:
        self.data, self.data_record = data, data_record

    def __call__(self, i: int) -> str:
        record = fastavro.schemaless_reader(
            io.BytesIO(self.data[i].as_py()), fastavro.parse_schema(self.data_record)
        )
        return shorten(json.dumps(record, default=str, separators=(",", ":"), ensure_ascii=False))


class DriverPath:
    """Finishes a sink's batches on the driver (see the module docstring)."""

    def __init__(
        self,
        *,
        small_batch_rows: int,
        max_message_bytes: int,
        time_column: str | None,
        diff_column: str,
        late: str,
        flush_timeout: float | None,
        producer: Callable[[], CdcProducer],
        plan: Callable[[SparkSession, Batch], MessagePlan],
        row_checks: Callable[[Batch], list[Check]],
    ) -> None:
        self.small_batch_rows, self.max_message_bytes = small_batch_rows, max_message_bytes
        self.time_column, self.diff_column, self.late = time_column, diff_column, late
        self.flush_timeout = flush_timeout
        self.producer = producer  # the sink's driver producer (made on first use)
        self.plan = plan  # (spark, batch) -> the batch layout's MessagePlan
        self.row_checks = row_checks
        self._encoded_rows: tuple[tuple, EncodedRows] | None = None  # of the last layout

    def check(
        self,
        df: DataFrame,
        prepared: DataFrame | None,
        spark: SparkSession,
        batch: Batch,
    ) -> Known | None:
        """The batch checked and consolidated on the driver, ready to produce; None when the
        driver cannot take it (then nothing was written, and the caller writes it by the
        distributed path).

        ``df``: the input as given. ``prepared``: its data columns, time and diff, for the
        updates form: the Spark job checks ``prepared`` and consolidates it first, and only the
        updates come to the driver (a bad row fails that job). None: the rows form, every row
        of ``df`` comes to the driver."""
        consolidated = prepared is not None
        try:
            if prepared is not None:  # at most one update over the limit comes back: then too many
                plan = self.plan(spark, batch)
                updates = plan.updates(
                    prepared, self.row_checks(batch), one_time=batch.time is not None
                )
                table = arrow_table(updates.limit(self.small_batch_rows + 1))
            else:
                layout = dict(
                    schema=batch.schema,
                    data_cols=batch.data_cols,
                    data_record=batch.codec.data_schema,
                    time_column=self.time_column,
                    diff_column=batch.diff_col,
                )
                key = (type(spark), EncodedRows.key_of(**layout))
                if self._encoded_rows is None or self._encoded_rows[0] != key:
                    self._encoded_rows = (key, EncodedRows(**layout))
                table = self._encoded_rows[1].collect(df)
        except Exception as exc:  # noqa: BLE001 - a raise_error of ours, or too big for the driver
            if not too_big_for_driver(exc):
                ours = task_error(exc, batch.what, batch.time) if consolidated else None
                if ours is None:
                    raise
                raise ours from None
            log.info(
                "%s: too big to finish on the driver (%s); writing it from the executors",
                batch.what,
                str(exc).splitlines()[0][:200],
            )
            return None
        if consolidated and table.num_rows > self.small_batch_rows:
            # every row was checked, but the updates are many this time: they are packed and
            # written from the executors, by a job that consolidates again (one aggregation lost)
            log.info(
                "%s: over %d updates, too many to finish on the driver; writing them from the "
                "executors",
                batch.what,
                self.small_batch_rows,
            )
            return None
        rows = int(pc.sum(table.column("n")).as_py() or 0) if consolidated else table.num_rows
        data = table.column("data").combine_chunks()
        describe = _RowText(data, batch.codec.data_schema)
        if self.time_column:  # else every row has the batch's time
            times = table.column("t").combine_chunks()
        else:
            times = pa.array(np.full(table.num_rows, batch.time, np.int64))
        recorded = batch.recorded
        t, d = small_batch.check_rows(
            times,
            table.column("d").combine_chunks() if batch.diff_col or consolidated else None,
            what=batch.what,
            time_column=self.time_column,
            diff_column=self.diff_column,
            lower=batch.late_below,
            late_advance=self.late == "advance",
            rerun_upper=None if recorded is None else recorded.upper,
            describe=describe,
        )
        hashes = table.column("h").combine_chunks().to_numpy(zero_copy_only=False)
        consolidated_batch = small_batch.consolidate(
            data,
            hashes,
            t,
            d,
            what=batch.what,
            describe=describe,
            max_item_bytes=self.max_message_bytes - ENVELOPE,
            max_message_bytes=self.max_message_bytes,
        )
        messages = list(batch.codec.pack_items(consolidated_batch.items))
        return Known(
            counts=consolidated_batch.counts,
            digest=consolidated_batch.digest,
            max_time=consolidated_batch.max_time,
            rows=rows,
            groups=consolidated_batch.groups,
            messages=len(messages),
            n_bytes=sum(map(len, messages)),
            write=lambda: self._produce(messages, batch),
        )

    def _produce(self, messages: list[bytes], batch: Batch) -> None:
        produce_messages(self.producer(), messages, batch, self.flush_timeout)


def too_big_for_driver(exc: BaseException) -> bool:
    """Whether a failed collect brought more to the driver than ``spark.driver.maxResultSize``
    lets it take: the caller then leaves the batch to the executors, nothing written."""
    return "maxResultSize" in str(exc)


def produce_messages(
    producer: CdcProducer, messages: list[bytes], batch: Batch, flush_timeout: float | None
) -> None:
    """Produce a batch's update messages through the sink's driver ``producer``, in turn to each
    of its update partitions; return once every one is acknowledged (a failed delivery raises
    `DeliveryError`)."""
    targets = batch.update_partitions
    for n, message in enumerate(messages):
        producer.produce(
            message,
            headers=batch.headers,
            partition=None if not targets else targets[n % len(targets)],
        )
    producer.flush(flush_timeout)
