"""A Delta table's change data feed as a CDCv2 changefeed: ``cdc-emitter convert delta``.

Each change row becomes an update of the table's columns at time ``_commit_version``:
``insert`` and ``update_postimage`` count +1, ``delete`` and ``update_preimage`` −1 (an update
that changes nothing cancels out in the sink's consolidation). The stream runs through
`CdcSink` in column mode, so a batch's progress statement closes every
version up to its newest — which is why `plan_versions` first holds
back a version that Delta split over micro-batches, and writes it whole once all of it arrived.

Guarantees: every version is written once, whole, and closed only with all of its change rows;
a re-run batch or a restart from the checkpoint decides the same (the plan of each batch is
recorded under ``<checkpoint>/cdc-emitter-convert``, the sink's intervals under
``<checkpoint>/cdc-emitter-sink``); the rest is the sink's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from cdc_emitter.convert.plan import PlanRecord, plan_versions
from cdc_emitter.errors import CdcError, ConfigError, SchemaError
from cdc_emitter.sink.result import BatchResult

__all__ = ["delta_changes", "DeltaChangefeed", "convert_delta", "CHANGE_TYPE", "VERSION", "DIFF"]

log = logging.getLogger(__name__)

CHANGE_TYPE, VERSION, COMMIT_TIMESTAMP = "_change_type", "_commit_version", "_commit_timestamp"
#: The diff column the converter adds (a table column of this name is refused).
DIFF = "_cdc_diff"
ENABLE_HINT = "ALTER TABLE {ident} SET TBLPROPERTIES (delta.enableChangeDataFeed = true)"


def is_path(source: str) -> bool:
    """A SOURCE with a ``/`` is a table path (``/data/t``, ``s3://b/t``, ``./t``); else a name."""
    return "/" in source


def identifier(source: str) -> str:
    return f"delta.`{source}`" if is_path(source) else source


def delta_changes(changes: Any) -> Any:
    """Change rows (a batch or streaming DataFrame read with ``readChangeFeed``) as the sink's
    input: the table's columns, ``_commit_version`` (the time) and ``_cdc_diff`` (+1 / −1)."""
    missing = [c for c in (CHANGE_TYPE, VERSION) if c not in changes.columns]
    if missing:
        raise SchemaError(
            f"not a change data feed: column(s) {', '.join(missing)} missing "
            f"(columns: {changes.columns}); read the table with readChangeFeed=true"
        )
    data = [c for c in changes.columns if c not in (CHANGE_TYPE, VERSION, COMMIT_TIMESTAMP)]
    if DIFF in data:
        raise SchemaError(
            f"the table has a column named {DIFF!r}, the converter's diff column: rename it"
        )
    kind = F.col(CHANGE_TYPE)
    sign = (
        F.when(kind.isin("insert", "update_postimage"), F.lit(1))
        .when(kind.isin("delete", "update_preimage"), F.lit(-1))
        .otherwise(F.raise_error(F.concat(F.lit("unknown _change_type "), kind.cast("string"))))
    )
    return changes.select(
        *[F.col(c) for c in data],
        F.col(VERSION).cast("long").alias(VERSION),
        sign.cast("long").alias(DIFF),
    )


def read_changes(
    spark: Any,
    source: str,
    *,
    starting_version: int,
    ending_version: int | None = None,
    stream: bool = False,
    options: Mapping[str, str] | None = None,
) -> Any:
    """The change data feed of ``source`` (a path or a table name) from ``starting_version``."""
    reader = spark.readStream if stream else spark.read
    reader = (
        reader.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", starting_version)
    )
    if ending_version is not None:
        reader = reader.option("endingVersion", ending_version)
    for key, value in (options or {}).items():
        reader = reader.option(key, value)
    return reader.load(source) if is_path(source) else reader.table(source)


def check_change_data_feed(spark: Any, source: str) -> None:
    """Refuse a table that is not Delta or has no change data feed, saying how to enable it."""
    from cdc_emitter.spark.errors import spark_error_text

    ident = identifier(source)
    try:
        detail = spark.sql(f"DESCRIBE DETAIL {ident}").collect()[0].asDict()
    except Exception as exc:  # noqa: BLE001 - not a table, not Delta, Delta not loaded
        raise CdcError(f"cannot read delta table {source!r}: {spark_error_text(exc)}") from None
    if str(detail.get("format", "delta")).lower() != "delta":
        raise CdcError(f"{source!r} is a {detail.get('format')} table, not a Delta table")
    properties = detail.get("properties") or {}
    if str(properties.get("delta.enableChangeDataFeed", "false")).lower() != "true":
        raise CdcError(
            f"delta table {source!r} has no change data feed: enable it with "
            f"{ENABLE_HINT.format(ident=ident)} — changes from the next commit on are then "
            "recorded (pass --starting-version with that commit's version)"
        )


class DeltaChangefeed:
    """The ``foreachBatch`` function of a Delta change-data-feed stream: plans the batch's versions
    (recorded beside the checkpoint), then writes them through ``sink``.

    ``sink``: a `CdcSink` with ``time_column=VERSION`` and
    ``diff_column=DIFF`` and the query's checkpoint location (see `convert_delta`).
    """

    def __init__(self, source: str, sink: Any, checkpoint_location: str) -> None:
        if sink.time_column != VERSION or sink.diff_column != DIFF:
            raise ConfigError(
                f"the sink must have time_column={VERSION!r} and diff_column={DIFF!r}"
            )
        self.source = source
        self.sink = sink
        self.checkpoint_location = checkpoint_location

    def _table_count(self, spark: Any) -> Callable[[int], int]:
        def count(version: int) -> int:
            return read_changes(
                spark, self.source, starting_version=version, ending_version=version
            ).count()

        return count

    def __call__(self, batch_df: Any, batch_id: int) -> BatchResult | None:
        from cdc_emitter.sink.log import converter_records

        spark = batch_df.sparkSession
        batch_id = int(batch_id)
        plans, record, previous = converter_records(
            spark, self.checkpoint_location, PlanRecord, batch_id, f"delta table {self.source!r}"
        )
        if record is None:  # a new batch
            held = previous.plan.held if previous is not None else None
            counts = {int(r[0]): int(r[1]) for r in batch_df.groupBy(VERSION).count().collect()}
            plan = plan_versions(
                counts,
                held,
                self._table_count(spark),
                where=f"delta table {self.source!r} batch {batch_id}",
            )
            record = plans.put(PlanRecord(batch_id, plan))
        plan = record.plan
        if plan.held is not None:
            log.info(
                "delta table %r batch %d: version %d arrived in part (%d change rows so far): "
                "held open until all of it has arrived",
                self.source,
                batch_id,
                *plan.held,
            )
        if not plan.writes:
            return None
        out = delta_changes(batch_df).filter(F.col(VERSION).isin(list(plan.from_batch)))
        if plan.reread is not None:
            whole = read_changes(
                spark, self.source, starting_version=plan.reread, ending_version=plan.reread
            )
            out = out.unionByName(delta_changes(whole))
        return self.sink(out, batch_id)


def convert_delta(
    spark: SparkSession,
    source: str,
    *,
    bootstrap_servers: str,
    topic: str,
    checkpoint_location: str,
    once: bool = False,
    starting_version: int = 0,
    max_files_per_trigger: int | None = None,
    trigger_interval: str | None = None,
    **sink_options: Any,
) -> StreamingQuery:
    """Start the stream converting a Delta table's change data feed into a CDCv2 topic.

    Args:
        spark: the session (with Delta Lake's package).
        source: the Delta table: a path (with a ``/``) or a table name.
        bootstrap_servers: the Kafka cluster of ``topic``.
        topic: the CDC topic to write.
        checkpoint_location: the streaming query's checkpoint (any Hadoop path); a second run
            continues from it.
        once: Spark's ``availableNow`` trigger: convert what is there, then stop.
        starting_version: the first table version to convert.
        max_files_per_trigger: at most about this many files per micro-batch.
        trigger_interval: start a micro-batch at most this often, e.g. ``"10 seconds"``.
        **sink_options: go to `CdcSink` (``create_topic``,
            ``producer_config``, ``on_batch``, ``broker_timeout``, ...).

    Returns:
        The running streaming query.

    Raises:
        ConfigError: ``starting_version`` is not a non-negative integer.
        CdcError: before anything starts, when the table is not Delta or has no change data
            feed.
    """
    from cdc_emitter.sink.sink import CdcSink

    if (
        isinstance(starting_version, bool)
        or not isinstance(starting_version, int)
        or starting_version < 0
    ):
        raise ConfigError(
            f"starting_version must be a non-negative integer, not {starting_version!r}"
        )
    check_change_data_feed(spark, source)
    sink = CdcSink(
        bootstrap_servers,
        topic,
        checkpoint_location=checkpoint_location,
        time_column=VERSION,
        diff_column=DIFF,
        **sink_options,
    )
    options = (
        {}
        if max_files_per_trigger is None
        else {"maxFilesPerTrigger": str(int(max_files_per_trigger))}
    )
    stream = read_changes(
        spark, source, starting_version=starting_version, stream=True, options=options
    )
    writer = (
        stream.writeStream.foreachBatch(DeltaChangefeed(source, sink, checkpoint_location))
        .option("checkpointLocation", checkpoint_location)
        .queryName(f"cdc-emitter convert delta {topic}")
    )
    if once:
        writer = writer.trigger(availableNow=True)
    elif trigger_interval:
        writer = writer.trigger(processingTime=trigger_interval)
    return writer.start()
