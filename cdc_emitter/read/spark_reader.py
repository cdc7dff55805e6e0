"""``read_cdc``: read a CDCv2 topic back with Spark and verify it, for topics past one machine.

Spark's Kafka source reads every partition up to the end offsets taken when the read starts (a
snapshot, as ``verify`` without a target). Spark decodes the messages
(`cdc_emitter.read.spark_decode`) and finds, for every ``(data, time)``, its first
arrival in (partition, offset, position) order and every later arrival with another diff. The
driver then replays the messages in that order through a `CountingReader`,
which takes per-message counts and makes every decision the local verifier's reader makes on the
same messages in the same order. So the verdicts are the local engine's by construction:

* ``frontier``, ``violations`` (kinds, times, details, partitions, offsets), ``messages``,
  ``updates`` (received, duplicates included), ``duplicates``, ``pending``, ``hints`` and
  ``verdict`` are those of `verify_topic` reading the partitions one
  after another. For a topic of one partition that is exactly the local engine's reading; with
  several, only what depends on the interleaving of partitions can differ (which of two
  conflicting arrivals is first, at which message an over-count is noticed), and only on a topic
  that has violations. Within one message, violations are listed time by time.
* undecodable messages: every message Spark cannot decode, or whose Avro body is longer than
  Avro's encoding of what Spark read of it (bytes to spare, which Spark's reader ignores;
  `encoded_length`), is decoded again on the driver with the local codec, whose error text,
  partition and offset the violation carries, with the same hints.
* ``collection`` (data columns + ``count``) and ``history`` (data columns + ``time`` +
  ``diff``): DataFrames of the updates reported below the frontier (or ``until``). They read
  the reading's grouped updates, kept cached on the executors until `CdcRead.unpersist`, not
  the topic again.

The driver holds the progress statements (with their headers), the violations and a row per
(message, time) that brings updates first; never the updates. Messages written after the read
began are not read. Spark's Kafka source reads with ``kafka.isolation.level=read_committed``
(`cdc_emitter.spark.kafka.kafka_read_options`): a claim in an aborted transaction is never read.
"""

from __future__ import annotations

import json
import time as _time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from cdc_emitter.errors import CdcError, SchemaError
from cdc_emitter.protocol.codec import CdcCodec
from cdc_emitter.protocol.reader import CountingReader, Strict
from cdc_emitter.protocol.schemas import Framing
from cdc_emitter.protocol.updates import Update
from cdc_emitter.read import spark_groups, spark_replay
from cdc_emitter.read.spark_decode import decode_topic
from cdc_emitter.read.verify import VerifyResult, reached_target

__all__ = ["read_cdc", "CdcRead"]

#: Seconds between two looks at the end offsets while following a topic to a target.
FOLLOW_INTERVAL = 0.5


@dataclass
class CdcRead(VerifyResult[DataFrame, DataFrame]):
    """What `read_cdc` found: a `VerifyResult` whose ``collection`` and ``history`` are DataFrames.

    The other fields, ``summary()`` and ``verdict`` are as `verify_topic` gives them.

    Attributes:
        statements: Well-formed progress statements read.
        codec: The codec that reads the rows back for output.
        distinct: How many distinct (data, time) the reading grouped: at least as many as the
            rows of ``collection`` and of ``history``.
        bytes_read: The bytes of the messages read (their values).
        until: The ``until`` the reading was asked for: ``history`` holds only times below it.
    """

    statements: int = 0
    codec: Any = field(default=None, repr=False, compare=False)
    cached: DataFrame | None = field(default=None, repr=False, compare=False)
    distinct: int | None = field(default=None, repr=False, compare=False)
    bytes_read: int | None = field(default=None, repr=False, compare=False)
    until: int | None = field(default=None, repr=False, compare=False)

    def unpersist(self) -> None:
        """Free the executors' copy that ``collection`` and ``history`` read.

        The reading keeps its grouped updates cached, so that using ``collection`` or
        ``history`` does not read and decode the topic again. Call this when done with them;
        the session's end frees the copy too. Afterwards ``collection`` and ``history`` are new
        DataFrames that read the topic's pinned offsets again. Do not use one taken before:
        Spark would cache its data again, where nothing frees it.
        """
        if self.cached is None:
            return
        self.cached.unpersist()
        self.cached = None
        # a DataFrame keeps the plan it made first, the cached scan included: new ones plan anew
        self.collection = self.collection_frame.select("*")
        self.history = self.history_frame.select("*")

    @property
    def collection_frame(self) -> DataFrame:
        """``collection`` as the DataFrame it is here: the data columns + ``count``."""
        return cast("DataFrame", self.collection)

    @property
    def history_frame(self) -> DataFrame:
        """``history`` as the DataFrame it is here: the data columns + ``time`` + ``diff``."""
        return cast("DataFrame", self.history)

    def collection_rows(self) -> Iterator[tuple[Any, int]]:
        """``(data, count)`` at the frontier in ``verify --output`` order (data as the local
        reader holds it, sorted as ``codec.sort_key`` sorts), streamed a partition at a time
        (a small reading's in one job, sorted here: see `spark_replay.COLLECT_AT_MOST`)."""
        collection = self.collection_frame
        data = spark_groups.data_avro(collection, self.codec)
        decode, key = self.codec.decode_data, self.codec.sort_key
        if self._collectable():
            rows = [(decode(bytes(r[0])), r[1]) for r in collection.select(data, "count").collect()]
            yield from sorted(rows, key=lambda row: key(row[0]))
            return
        order = spark_groups.data_order(collection, self.codec)
        for row in collection.orderBy(*order).select(data, "count").toLocalIterator():
            yield decode(bytes(row[0])), row[1]

    def collection_as_of(self, time: int) -> DataFrame:
        """The collection as of ``time``: every reported update at a time below it, summed.

        Args:
            time: At most the frontier, and at most the reading's ``until`` when it had one.

        Returns:
            A DataFrame of the data columns + ``count``.

        Raises:
            CdcError: ``time`` is beyond the frontier or beyond ``until``.
        """

        spark_groups.cut(self.frontier, time)
        if self.until is not None and time > self.until:
            raise CdcError(
                f"this reading holds the history below time {self.until} only (until="
                f"{self.until}): ask for a time up to {self.until}, or read without until"
            )
        return spark_groups.collection(
            self.history_frame.filter(F.col("time") < F.lit(time)),
            spark_groups.data_fields(self.codec),
        )

    def history_rows(self) -> Iterator[Update]:
        """The reported updates in ``verify --history`` order (by time, then data), streamed a
        partition at a time (a small reading's in one job, sorted here: see `spark_replay.COLLECT_AT_MOST`)."""
        history = self.history_frame
        data = spark_groups.data_avro(history, self.codec)
        decode, key = self.codec.decode_data, self.codec.sort_key
        if self._collectable():
            rows = history.select(data, "time", "diff").collect()
            updates = [Update(decode(bytes(r[0])), r[1], r[2]) for r in rows]
            yield from sorted(updates, key=lambda u: (u.time, key(u.data)))
            return
        order = spark_groups.data_order(history, self.codec)
        for row in history.orderBy("time", *order).select(data, "time", "diff").toLocalIterator():
            yield Update(decode(bytes(row[0])), row[1], row[2])

    def _collectable(self) -> bool:
        """Whether the rows of ``collection`` and ``history`` are few enough to collect."""
        if self.distinct is None or self.bytes_read is None:
            return False
        return spark_replay.collectable(self.distinct, self.bytes_read)

    @property
    def held(self) -> int:
        """Distinct updates at or beyond the frontier (not proven yet)."""
        return 0 if self.pending is None else self.pending.updates


def _data_schema(schema: Any) -> dict:
    from cdc_emitter.protocol.schemas import data_schema_from_text

    if isinstance(schema, (str, Path)):
        try:
            text = Path(schema).read_text(encoding="utf-8")
        except OSError as exc:
            raise SchemaError(f"cannot read schema file {schema}: {exc}") from None
        return data_schema_from_text(text)
    if isinstance(schema, (dict, list)):
        return data_schema_from_text(json.dumps(schema))
    raise SchemaError(
        f"schema must be a path or an Avro schema (dict or list), not {type(schema).__name__}"
    )


def _writer_schema(servers: str, topic: str, config: dict, timeout: float) -> dict:
    """The data schema ``topic``'s writer recorded, from the newest progress statement among
    the last `TAIL_FOR_SCHEMA` messages of each partition (`writer_schema`). Never the whole
    topic: `read_cdc` is for topics past one machine, and the driver would read all of it.

    Raises:
        BrokerError: The topic is missing or the broker cannot be reached.
        SchemaError: No progress statement there records it.
    """
    from cdc_emitter.kafka.topic_schema import TAIL_FOR_SCHEMA, writer_schema

    written = writer_schema(servers, topic, config, timeout=timeout, full_scan=False)
    if written is None:
        raise SchemaError(
            f"topic {topic!r} has no progress statement with its writer's schema in the last "
            f"{TAIL_FOR_SCHEMA} messages of each partition: pass schema (the data record, as a "
            "path or a dict) or schema_registry_url"
        )
    return written


def read_cdc(
    spark: SparkSession,
    *,
    bootstrap_servers: str,
    topic: str,
    schema: Any = None,
    framing: Framing = "confluent",
    kafka_options: Mapping[str, Any] | None = None,
    until: int | None = None,
    strict: Strict | None = None,
    until_frontier: int | None = None,
    until_closed: bool = False,
    timeout: float | None = None,
    broker_timeout: float | None = None,
    schema_registry_url: str | None = None,
    schema_registry_config: Mapping[str, Any] | None = None,
    schema_id: int | None = None,
) -> CdcRead:
    """Read a topic with Spark and verify it.

    The verdicts are those of `verify_topic` (the module docstring says where they can differ).
    Give at most one of ``schema`` and ``schema_registry_url``; with neither, the topic is read
    with the data schema its writer recorded (the header of its newest progress statement near
    the end of the topic), as ``cdc-emitter verify`` reads it.

    Args:
        spark: The session to read with.
        bootstrap_servers: The Kafka servers, as ``host:port,host:port``.
        topic: The topic to read.
        schema: The data record, or the whole documented union, as a path or a dict.
            Default: the writer's, from the topic.
        framing: ``"confluent"`` or ``"raw"``.
        kafka_options: librdkafka-style client settings, as ``-X`` takes them. Security
            settings are translated for Spark's Kafka source.
        until: Report the collection and history as of this time (times below it). It must not
            be beyond the frontier.
        strict: As for `verify_topic`. ``"exact"`` and ``"bloom"`` are both decided exactly:
            Spark sees every update, the driver remembers none.
        until_frontier: As for `verify_topic`: read again as the topic grows until the frontier
            reaches this time.
        until_closed: As for `verify_topic`: read again until the history is closed.
        timeout: Seconds to wait for the target; then ``reached`` is false.
        broker_timeout: Seconds to wait for a broker that does not answer.
        schema_registry_url: Take the schemas from this registry. Each message is decoded with
            the schema of the id in its header, resolved into the reader schema by Avro's
            rules, so an evolved topic reads as one.
        schema_registry_config: The registry client's settings.
        schema_id: The reader schema's id in the registry. Default: the id in the newest
            message's header.

    Returns:
        What the reading found; its ``collection`` and ``history`` are DataFrames.

    Raises:
        BrokerError: The topic is missing or the broker cannot be reached (before Spark reads).
        SchemaError: The schema cannot be read or used, no message names a schema id, or
            (with neither ``schema`` nor ``schema_registry_url``) no progress statement of the
            topic records its writer's schema.
        CdcError: The framing is unknown, both ``schema`` and ``schema_registry_url`` are
            given, or ``until`` is beyond the frontier.
        ValueError: ``until_frontier`` and ``until_closed`` are both given.
    """
    from cdc_emitter.kafka.config import BROKER_TIMEOUT
    from cdc_emitter.kafka.reading import end_offsets
    from cdc_emitter.protocol.codec import CdcCodec

    if framing not in ("confluent", "raw"):
        raise CdcError(f"framing must be 'confluent' or 'raw', not {framing!r}")
    if until_frontier is not None and until_closed:
        raise ValueError("until_frontier and until_closed exclude each other")
    target = () if until_closed else (None if until_frontier is None else (until_frontier,))
    config = dict(kafka_options or {})
    wait = BROKER_TIMEOUT if broker_timeout is None else broker_timeout
    if schema is not None and schema_registry_url is not None:
        raise CdcError("give read_cdc schema or schema_registry_url, not both")
    if schema_registry_url is None:
        if schema is None:
            schema = _writer_schema(bootstrap_servers, topic, config, wait)
        codec = CdcCodec(_data_schema(schema), framing=framing)
    else:
        from cdc_emitter.kafka.registry import SchemaRegistry, newest_schema_id

        if framing != "confluent":
            raise CdcError(
                "schema_registry_url needs framing='confluent': the schema id is in the header"
            )
        registry = SchemaRegistry(schema_registry_url, schema_registry_config)
        if schema_id is None:
            schema_id = newest_schema_id(bootstrap_servers, topic, config)
        if schema_id is None:
            raise SchemaError(
                f"topic {topic!r} has no message with a Confluent header to take a "
                "schema id from; pass schema_id"
            )
        codec = CdcCodec(
            registry.data_schema(schema_id),
            framing=framing,
            schema_id=schema_id,
            writer_schemas=registry.data_schema,
        )
    deadline = None if timeout is None else _time.monotonic() + timeout
    ends = end_offsets(bootstrap_servers, topic, config, timeout=wait)  # BrokerError: no topic
    while True:
        result = _read_once(spark, bootstrap_servers, topic, codec, config, ends, until, strict)
        result.target = target
        result.reached = target is None or reached_target(result.frontier, target)
        if (
            result.reached
            or result.violations
            or (deadline is not None and _time.monotonic() >= deadline)
        ):
            return result
        read = ends
        try:
            while (ends := end_offsets(bootstrap_servers, topic, config, timeout=wait)) == read:
                if deadline is not None and _time.monotonic() + FOLLOW_INTERVAL > deadline:
                    return result
                _time.sleep(FOLLOW_INTERVAL)
        except BaseException:  # the broker gone, Ctrl-C: the caller never gets this result
            result.unpersist()
            raise
        result.unpersist()  # read again below


def _read_once(
    spark: SparkSession,
    servers: str,
    topic: str,
    codec: CdcCodec,
    config: dict,
    ends: dict,
    until: int | None,
    strict: Strict | None,
) -> CdcRead:
    """One reading of the messages at offsets ``ends``: decoded by Spark, then verified."""
    topic_rows = decode_topic(spark, servers, topic, codec, config, ends)
    try:
        return _verify(
            topic_rows.decoded, codec, until, strict, topic_rows.values, topic_rows.update_length
        )
    finally:
        topic_rows.decoded.unpersist()


def _verify(
    decoded: DataFrame,
    codec: CdcCodec,
    until: int | None,
    strict: Strict | None,
    values: Callable[[list[tuple[int, int]]], DataFrame],
    update_length: Column | None,
) -> CdcRead:
    """Verify the decoded messages: Spark groups the updates by ``(data, time)``, the driver
    replays the messages' counts through a `CountingReader` in reading order. ``values`` reads
    the messages at some keys again (those `array_checks` finds with bytes to spare);
    ``update_length`` is `update_length_of` of them."""
    counting = CountingReader(strict=strict)
    spare, malformed = spark_groups.array_checks(decoded, update_length)
    sizes = spark_groups.one_row(
        decoded.agg(
            F.count(F.lit(1)).alias("messages"),
            F.sum(spark_groups.updates_of(F.col("u"))).alias("updates"),
            F.count(F.when(spark_groups.judged_by_driver(), 1)).alias("judged"),
            F.sum("size").alias("bytes"),
        )
    )
    read_bytes = sizes["bytes"] or 0
    singles, undecodable, headers = spark_replay.judge_singles(
        decoded,
        codec,
        spare,
        values,
        spark_replay.collectable(sizes["judged"] + len(spare), read_bytes),
    )
    occurrences, data_fields = spark_groups.occurrences(decoded, undecodable)
    extras = spark_groups.malformed_updates(occurrences, codec, data_fields, malformed)
    good = occurrences.filter((F.col("__time") >= 0) & (F.col("__diff") != 0))
    good, key_cols, map_fields = spark_groups.grouping_keys(good, data_fields)
    if key_cols:
        # spread by the data alone: the grouping by (data, time) below needs no other shuffle,
        # and neither does the collection's by data, which reads the cached groups
        good = good.repartition(*[F.col(c) for c in key_cols])
    # kept cached for the returned collection and history (`CdcRead.unpersist` frees it)
    groups = spark_groups.first_arrivals(good, key_cols, map_fields).persist()
    try:
        totals = spark_groups.one_row(
            groups.agg(
                F.count(F.lit(1)).alias("distinct"),
                F.sum("__n").alias("arrived"),
                F.sum(F.col("__conflicted").cast("int")).alias("conflicted"),
            )
        )
        distinct = totals["distinct"] or 0
        conflicts = 0
        if totals["conflicted"]:
            conflicts = spark_groups.later_conflicts(
                good, groups, key_cols, data_fields, codec, extras
            )
        counting.add_duplicates((totals["arrived"] or 0) - distinct - conflicts)
        collect = spark_replay.collectable(distinct, read_bytes)
        hints = spark_replay.replay(counting, groups, singles, extras, codec, headers, collect)
        counting.messages = sizes["messages"]
        counting.updates_received = (sizes["updates"] or 0) - spark_groups.updates_in(
            decoded, undecodable
        )
        if counting.late_violations:
            spark_replay.fill_late_details(counting, groups, data_fields, codec)
        history = spark_groups.reported_history(counting, groups, data_fields, until)
        collection = spark_groups.collection(history, data_fields)
    except BaseException:
        groups.unpersist()
        raise
    pending = counting.pending()
    return CdcRead(
        frontier=counting.frontier,
        messages=counting.messages,
        updates=counting.updates_received,
        duplicates=counting.duplicates,
        violations=list(counting.violations),
        collection=collection,
        history=history,
        reached=True,
        target=None,
        pending=pending,
        hints=hints,
        statements=pending.statements,
        codec=codec,
        cached=groups,
        distinct=distinct,
        bytes_read=read_bytes,
        until=until,
    )
