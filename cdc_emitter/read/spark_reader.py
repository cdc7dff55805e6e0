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

import heapq
import itertools
import json
import time as _time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from pyspark.sql import Column, DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from cdc_emitter.errors import CdcError, DecodeError, SchemaError
from cdc_emitter.protocol.codec import CdcCodec
from cdc_emitter.protocol.reader import CountingReader, Strict, TimeCounts
from cdc_emitter.protocol.schemas import Framing
from cdc_emitter.protocol.updates import Progress, Update
from cdc_emitter.read.spark_decode import decode_topic, reencoded
from cdc_emitter.read.verify import UndecodableReport, VerifyResult, reached_target

__all__ = ["read_cdc", "CdcRead"]

#: Seconds between two looks at the end offsets while following a topic to a target.
FOLLOW_INTERVAL = 0.5
#: Rows the driver takes in one ``collect`` and sorts itself, where it needs rows in order, knows
#: there are at most this many, and the reading's messages hold at most `COLLECT_BYTES_AT_MOST`:
#: on a small topic, Spark's sort and a job per partition cost more than the rows. Otherwise
#: they come a partition at a time, so the driver's memory stays bounded.
COLLECT_AT_MOST = 10_000
#: The most bytes of messages (their values) a reading may hold for `COLLECT_AT_MOST` to apply.
COLLECT_BYTES_AT_MOST = 16 * 2**20


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
        (a small reading's in one job, sorted here: see `COLLECT_AT_MOST`)."""
        collection = self.collection_frame
        data = _data_avro(collection, self.codec)
        decode, key = self.codec.decode_data, self.codec.sort_key
        if self._collectable():
            rows = [(decode(bytes(r[0])), r[1]) for r in collection.select(data, "count").collect()]
            yield from sorted(rows, key=lambda row: key(row[0]))
            return
        order = _data_order(collection, self.codec)
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

        _cut(self.frontier, time)
        if self.until is not None and time > self.until:
            raise CdcError(
                f"this reading holds the history below time {self.until} only (until="
                f"{self.until}): ask for a time up to {self.until}, or read without until"
            )
        return _collection(
            self.history_frame.filter(F.col("time") < F.lit(time)), _data_fields(self.codec)
        )

    def history_rows(self) -> Iterator[Update]:
        """The reported updates in ``verify --history`` order (by time, then data), streamed a
        partition at a time (a small reading's in one job, sorted here: see `COLLECT_AT_MOST`)."""
        history = self.history_frame
        data = _data_avro(history, self.codec)
        decode, key = self.codec.decode_data, self.codec.sort_key
        if self._collectable():
            rows = history.select(data, "time", "diff").collect()
            updates = [Update(decode(bytes(r[0])), r[1], r[2]) for r in rows]
            yield from sorted(updates, key=lambda u: (u.time, key(u.data)))
            return
        order = _data_order(history, self.codec)
        for row in history.orderBy("time", *order).select(data, "time", "diff").toLocalIterator():
            yield Update(decode(bytes(row[0])), row[1], row[2])

    def _collectable(self) -> bool:
        """Whether the rows of ``collection`` and ``history`` are few enough to collect."""
        if self.distinct is None or self.bytes_read is None:
            return False
        return _collectable(self.distinct, self.bytes_read)

    @property
    def held(self) -> int:
        """Distinct updates at or beyond the frontier (not proven yet)."""
        return 0 if self.pending is None else self.pending.updates


def _data_fields(codec: Any) -> list[str]:
    return [f["name"] for f in codec.data_schema["fields"]]


def _data_order(df: DataFrame, codec: Any) -> list[Column]:
    """Sort expressions over the data columns that order rows as ``codec.sort_key`` orders the
    decoded data: nulls first, NaN after every number, strings by code point (UTF-8 bytes),
    records and arrays element by element, maps by their sorted entries."""
    from cdc_emitter.spark.columns import canonical

    return [canonical(df[c], df.schema[c].dataType).asc_nulls_first() for c in _data_fields(codec)]


def _data_avro(df: DataFrame, codec: Any, fields: list[str] | None = None) -> Column:
    """``df``'s data columns (``fields``, by default the codec's) as their Avro record."""

    fields = _data_fields(codec) if fields is None else fields
    record = T.StructType([df.schema[c] for c in fields])
    return reencoded(F.struct(*[df[c] for c in fields]), record, codec.data_schema)


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
    codec: Any,
    until: int | None,
    strict: Strict | None,
    values: Callable[[list[tuple[int, int]]], DataFrame],
    update_length: Column | None,
) -> CdcRead:
    """Verify the decoded messages: Spark groups the updates by ``(data, time)``, the driver
    replays the messages' counts through a `CountingReader` in reading order. ``values`` reads
    the messages at some keys again (those `_array_checks` finds with bytes to spare);
    ``update_length`` is `update_length_of` of them."""
    counting = CountingReader(strict=strict)
    spare, malformed = _array_checks(decoded, update_length)
    sizes = _one_row(
        decoded.agg(
            F.count(F.lit(1)).alias("messages"),
            F.sum(_updates_of(F.col("u"))).alias("updates"),
            F.count(F.when(_judged_by_driver(), 1)).alias("judged"),
            F.sum("size").alias("bytes"),
        )
    )
    read_bytes = sizes["bytes"] or 0
    singles, undecodable, headers = _judge_singles(
        decoded, codec, spare, values, _collectable(sizes["judged"] + len(spare), read_bytes)
    )
    occurrences, data_fields = _occurrences(decoded, undecodable)
    extras = _malformed_updates(occurrences, codec, data_fields, malformed)
    good = occurrences.filter((F.col("__time") >= 0) & (F.col("__diff") != 0))
    good, key_cols, map_fields = _grouping_keys(good, data_fields)
    if key_cols:
        # spread by the data alone: the grouping by (data, time) below needs no other shuffle,
        # and neither does the collection's by data, which reads the cached groups
        good = good.repartition(*[F.col(c) for c in key_cols])
    # kept cached for the returned collection and history (`CdcRead.unpersist` frees it)
    groups = _first_arrivals(good, key_cols, map_fields).persist()
    try:
        totals = _one_row(
            groups.agg(
                F.count(F.lit(1)).alias("distinct"),
                F.sum("__n").alias("arrived"),
                F.sum(F.col("__conflicted").cast("int")).alias("conflicted"),
            )
        )
        distinct = totals["distinct"] or 0
        conflicts = 0
        if totals["conflicted"]:
            conflicts = _later_conflicts(good, groups, key_cols, data_fields, codec, extras)
        counting.add_duplicates((totals["arrived"] or 0) - distinct - conflicts)
        collect = _collectable(distinct, read_bytes)
        hints = _replay(counting, groups, singles, extras, codec, headers, collect)
        counting.messages = sizes["messages"]
        counting.updates_received = (sizes["updates"] or 0) - _updates_in(decoded, undecodable)
        if counting.late_violations:
            _fill_late_details(counting, groups, data_fields, codec)
        history = _reported_history(counting, groups, data_fields, until)
        collection = _collection(history, data_fields)
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


def _one_row(df: DataFrame) -> Row:
    """The row of ``df``, a global aggregate (which always has exactly one)."""
    row = df.first()
    if row is None:  # not reached: an aggregate without grouping has one row
        raise CdcError("Spark returned no row for an aggregate")
    return row


def _occurrences(decoded: DataFrame, undecodable: list) -> tuple[DataFrame, list[str]]:
    """Every update Spark decoded (messages the codec refuses left out), one row each: its
    ``partition``, ``offset``, ``__pos`` in the message, data columns, ``__time``, ``__diff``.
    Returns the rows and the names of the data columns."""
    updates = decoded.filter(F.col("u").isNotNull())
    if undecodable:
        bad = decoded.sparkSession.createDataFrame(undecodable, "partition int, offset long")
        updates = updates.join(F.broadcast(bad), ["partition", "offset"], "left_anti")
    occurrences = updates.select(
        "partition", "offset", F.posexplode("u").alias("__pos", "x")
    ).select(
        "partition",
        "offset",
        "__pos",
        "x.data.*",
        F.col("x.time").alias("__time"),
        F.col("x.diff").alias("__diff"),
    )
    data_fields = [
        c
        for c in occurrences.columns
        if c not in ("partition", "offset", "__pos", "__time", "__diff")
    ]
    return occurrences, data_fields


def _malformed_updates(
    occurrences: DataFrame, codec: Any, data_fields: list[str], keys: set[tuple[int, int]]
) -> dict[tuple[int, int], list[tuple[int, Any]]]:
    """Updates at a negative time or with a zero diff (violations), with their data, by
    ``(partition, offset)``: ``(position, Update)`` in message order. ``keys`` are the messages
    that hold any (`_array_checks`)."""
    extras: dict[tuple[int, int], list[tuple[int, Any]]] = {}
    if not keys:
        return extras
    holding = occurrences.sparkSession.createDataFrame(sorted(keys), "partition int, offset long")
    occurrences = occurrences.join(F.broadcast(holding), ["partition", "offset"], "left_semi")
    wrong = occurrences.filter((F.col("__time") < 0) | (F.col("__diff") == 0)).select(
        "partition",
        "offset",
        "__pos",
        _data_avro(occurrences, codec, data_fields).alias("d"),
        "__time",
        "__diff",
    )
    for row in _in_message_order(wrong):
        extras.setdefault((row["partition"], row["offset"]), []).append(
            (row["__pos"], Update(codec.decode_data(bytes(row["d"])), row["__time"], row["__diff"]))
        )
    return extras


def _in_message_order(updates: DataFrame) -> list[Row]:
    """The rows of ``updates`` (a few, kept by the driver anyway) by ``partition``, ``offset``
    and ``__pos``: one job, sorted here, rather than Spark's range sort and a job per partition."""
    return sorted(updates.collect(), key=lambda r: (r["partition"], r["offset"], r["__pos"]))


def _grouping_keys(
    good: DataFrame, data_fields: list[str]
) -> tuple[DataFrame, list[str], list[str]]:
    """The columns to group the data on: maps as their sorted entries (Spark cannot group
    maps), added to ``good`` as ``__key<i>``. Returns ``good`` with them, the key columns and
    the data columns that hold maps."""
    from cdc_emitter.spark.columns import canonical
    from cdc_emitter.spark.schema import contains_map

    key_cols, map_fields = [], []
    for i, c in enumerate(data_fields):
        dtype = good.schema[c].dataType
        if contains_map(dtype):
            good = good.withColumn(f"__key{i}", canonical(F.col(c), dtype))
            key_cols.append(f"__key{i}")
            map_fields.append(c)
        else:
            key_cols.append(c)
    return good, key_cols, map_fields


def _first_arrivals(good: DataFrame, key_cols: list[str], map_fields: list[str]) -> DataFrame:
    """One row per ``(data, time)``: its first arrival ``__first`` (partition, offset, position,
    diff), how many arrived ``__n``, whether their diffs differ ``__conflicted``; map columns
    (grouped as their sorted entries) as first found."""
    map_firsts = [F.first(c).alias(c) for c in map_fields]
    return good.groupBy(*key_cols, "__time").agg(
        F.min(F.struct("partition", "offset", "__pos", "__diff")).alias("__first"),
        F.count(F.lit(1)).alias("__n"),
        (F.min("__diff") != F.max("__diff")).alias("__conflicted"),
        *map_firsts,
    )


def _later_conflicts(
    good: DataFrame,
    groups: DataFrame,
    key_cols: list[str],
    data_fields: list[str],
    codec: Any,
    extras: dict[tuple[int, int], list[tuple[int, Any]]],
) -> int:
    """Add to ``extras`` every later arrival with another diff than its first (a violation),
    with its data, as ``(position, (time, data, first diff, diff))``. Returns how many."""
    first = groups.filter("__conflicted").select(
        *[F.col(k).alias(f"__c{i}") for i, k in enumerate(key_cols)],
        F.col("__time").alias("__ct"),
        F.col("__first.__diff").alias("__first_diff"),
    )
    on = [good[k].eqNullSafe(first[f"__c{i}"]) for i, k in enumerate(key_cols)]
    later = (
        good.join(F.broadcast(first), [*on, good["__time"] == first["__ct"]])
        .filter(F.col("__diff") != F.col("__first_diff"))
        .select(
            "partition",
            "offset",
            "__pos",
            "__time",
            "__first_diff",
            "__diff",
            _data_avro(good, codec, data_fields).alias("d"),
        )
    )
    conflicts = 0
    for row in _in_message_order(later):
        conflicts += 1
        extras.setdefault((row["partition"], row["offset"]), []).append(
            (
                row["__pos"],
                (
                    row["__time"],
                    codec.decode_data(bytes(row["d"])),
                    row["__first_diff"],
                    row["__diff"],
                ),
            )
        )
    return conflicts


def _replay(
    counting: CountingReader,
    groups: DataFrame,
    singles: list,
    extras: dict[tuple[int, int], list[tuple[int, Any]]],
    codec: Any,
    headers: dict[tuple[int, int], list[tuple[str, bytes | None]]],
    collect: bool,
) -> list[str]:
    """Feed ``counting`` every message that changes its state, in reading order: first
    arrivals per (message, time), malformed updates and conflicts, progress statements (with
    their ``headers``) and undecodable messages. ``collect``: the rows of first arrivals per
    (message, time) are few enough to collect (`_rows_in_order`).
    Returns the hints about the undecodable ones."""
    fresh = groups.groupBy(
        F.col("__first.partition").alias("partition"),
        F.col("__first.offset").alias("offset"),
        F.col("__time").alias("time"),
    ).agg(F.count(F.lit(1)).alias("fresh"), F.min("__first.__pos").alias("pos"))
    hints: list[str] = []
    report_undecodable = UndecodableReport(counting, codec, hints)
    ordered = _rows_in_order(fresh, ["partition", "offset", "pos"], collect)
    for (partition, offset), kind, payload in _in_order(ordered, singles, extras):
        if kind == "progress":
            counting.push(
                payload,
                partition=partition,
                offset=offset,
                headers=headers.get((partition, offset)),
            )
        elif kind == "updates":
            counting.push_counts(payload, partition=partition, offset=offset)
        else:  # as verify_topic says it: the codec's error, the likely cause once
            error, value = payload
            report_undecodable(partition, offset, value, error)
    return hints


def _reported_history(
    counting: CountingReader, groups: DataFrame, data_fields: list[str], until: int | None
) -> DataFrame:
    """The updates reported below the frontier (or ``until``): data columns, ``time``,
    ``diff``; first arrivals at times already reported left out, as the local reader drops
    them."""
    cut = _cut(counting.frontier, until)
    reported = groups if cut is None else groups.filter(F.col("__time") < F.lit(cut))
    if counting.late:
        late = groups.sparkSession.createDataFrame(counting.late, "__lp int, __lo long, __lt long")
        reported = reported.join(
            F.broadcast(late),
            (F.col("__first.partition") == F.col("__lp"))
            & (F.col("__first.offset") == F.col("__lo"))
            & (F.col("__time") == F.col("__lt")),
            "left_anti",
        )
    return reported.select(
        *data_fields, F.col("__time").alias("time"), F.col("__first.__diff").alias("diff")
    )


def _collection(history: DataFrame, data_fields: list[str]) -> DataFrame:
    """The multiset ``history`` adds up to: data columns + ``count``, zero counts left out."""

    from cdc_emitter.spark.columns import canonical
    from cdc_emitter.spark.schema import contains_map

    maps = [c for c in data_fields if contains_map(history.schema[c].dataType)]
    by_data = [
        F.col(c)
        if c not in maps
        else canonical(F.col(c), history.schema[c].dataType).alias(f"__key{i}")
        for i, c in enumerate(data_fields)
    ]
    return (
        history.groupBy(*by_data)
        .agg(F.sum("diff").alias("count"), *[F.first(c).alias(c) for c in maps])
        .filter(F.col("count") != 0)
        .select(*data_fields, "count")
    )


def _judged_by_driver() -> Column:
    """The decoded messages the driver decodes itself (`_judge_singles`): progress statements,
    and what Spark could not read or may have read short."""
    return F.col("p").isNotNull() | F.col("suspect").isNotNull() | F.col("tombstone")


def _collectable(rows: int, read_bytes: int) -> bool:
    """Whether ``rows`` rows of a reading of ``read_bytes`` bytes come to the driver at once
    (`COLLECT_AT_MOST`)."""
    return rows <= COLLECT_AT_MOST and read_bytes <= COLLECT_BYTES_AT_MOST


def _rows_in_order(df: DataFrame, keys: list[str], collect: bool) -> Iterator[Row]:
    """The rows of ``df`` by the columns ``keys``: collected and sorted here if ``collect``
    (`_collectable`), else sorted by Spark and streamed a partition at a time."""
    if collect:
        return iter(sorted(df.collect(), key=lambda row: tuple(row[k] for k in keys)))
    return df.orderBy(*keys).toLocalIterator()


def _array_checks(
    decoded: DataFrame, length: Column | None
) -> tuple[list[tuple[int, int]], set[tuple[int, int]]]:
    """One pass over every update Spark read, a row each: the keys (partition, offset) of the
    update arrays left ``unchecked`` whose body is longer than Avro's encoding of the updates
    Spark read of it (``length``, of an update ``x``: see `update_length_of`; None: none is left
    unchecked), and of the arrays that hold a malformed update (a negative time or a zero
    diff). A row per update rather than a lambda over each array, which Spark runs
    uncompiled, at several times the cost."""
    from cdc_emitter.spark.avro_length import array_length

    arrays = decoded.filter(F.col("u").isNotNull()).select(
        "partition",
        "offset",
        "unchecked",
        F.size("u").alias("n"),
        F.explode_outer("u").alias("x"),  # an empty array stays, as one row of a null update
    )
    malformed = (F.col("x.time") < 0) | (F.col("x.diff") == 0)
    if length is None:  # nothing to size: no grouping by message, only the malformed updates
        return [], {
            (row[0], row[1])
            for row in arrays.filter(malformed).select("partition", "offset").collect()
        }
    per_array = arrays.groupBy("partition", "offset", "unchecked", "n").agg(
        F.count(F.when(malformed, 1)).alias("malformed"),
        F.sum(F.when(F.col("unchecked").isNotNull(), length)).alias("items"),
    )
    spare = F.col("unchecked").isNotNull() & (
        array_length("`n`", "coalesce(`items`, 0)") != F.col("unchecked")
    )
    flagged = per_array.select(
        "partition", "offset", spare.alias("spare"), (F.col("malformed") > 0).alias("malformed")
    ).filter(F.col("spare") | F.col("malformed"))
    rows = flagged.collect()
    return (
        sorted((row["partition"], row["offset"]) for row in rows if row["spare"]),
        {(row["partition"], row["offset"]) for row in rows if row["malformed"]},
    )


def _judge_singles(
    decoded: DataFrame,
    codec: Any,
    spare: list[tuple[int, int]],
    values: Callable[[list[tuple[int, int]]], DataFrame],
    collect: bool,
) -> tuple[list, list, dict]:
    """The messages the driver decodes itself, in (partition, offset) order: progress statements,
    and what Spark could not read or read with bytes to spare (the codec's verdict stands):
    ``spare`` are the keys of update arrays found so after the read, whose ``values`` are read
    again. ``collect``: they are few enough to collect (`_rows_in_order`).
    Returns ``[((partition, offset), "progress" | "undecodable", payload)]``, the undecodable
    messages' keys, and the headers of the messages that have any, by key."""

    few = decoded.filter(_judged_by_driver()).select(
        "partition",
        "offset",
        "p",
        "suspect",
        "tombstone",
        F.col("u").isNull().alias("no_u"),
        "headers",
    )
    if spare:
        few = few.unionByName(
            values(spare).select(
                "partition",
                "offset",
                F.lit(None).cast(few.schema["p"].dataType).alias("p"),
                F.col("value").alias("suspect"),
                F.lit(None).cast("boolean").alias("tombstone"),
                F.lit(False).alias("no_u"),
                F.lit(None).cast(few.schema["headers"].dataType).alias("headers"),
            )
        )
    singles: list[tuple[tuple[int, int], str, Any]] = []
    undecodable: list[tuple[int, int]] = []
    headers: dict[tuple[int, int], list[tuple[str, bytes | None]]] = {}
    # a partition at a time unless few: a suspect message Spark read too (an array of several
    # Avro blocks) is judged here and dropped, and every array of a topic may be one
    unseen = set(spare)
    for row in _rows_in_order(few, ["partition", "offset"], collect):
        key = (row["partition"], row["offset"])
        unseen.discard(key)
        if row["headers"]:
            headers[key] = [
                (h["key"], None if h["value"] is None else bytes(h["value"]))
                for h in row["headers"]
            ]
        if row["suspect"] is None and not row["tombstone"]:
            p = row["p"]
            singles.append(
                (
                    key,
                    "progress",
                    Progress(
                        tuple(p["lower"] or ()),
                        tuple(p["upper"] or ()),
                        tuple((c["time"], c["count"]) for c in p["counts"] or ()),
                    ),
                )
            )
            continue
        value = None if row["tombstone"] else bytes(row["suspect"])
        try:
            message = codec.decode(value)
        except DecodeError as exc:
            singles.append((key, "undecodable", (str(exc), value)))
            undecodable.append(key)
            continue
        if isinstance(message, Progress):
            singles.append((key, "progress", message))
        elif row["no_u"]:  # the codec reads what Spark's Avro reader cannot: say so, never guess
            singles.append(
                (
                    key,
                    "undecodable",
                    (
                        "Spark's Avro reader cannot decode this update array, which the local codec reads: "
                        "verify the topic with the local engine",
                        value,
                    ),
                )
            )
            undecodable.append(key)
        # else: Spark read it too (an array written in several blocks re-encodes shorter)
    if unseen:  # never counted as read: the topic lost it between the reads
        partition, offset = min(unseen)
        raise CdcError(
            f"partition {partition} offset {offset} of the topic is gone since read_cdc began "
            "(retention or compaction): read it again"
        )
    return singles, undecodable, headers


def _in_order(
    fresh_rows: Any, singles: list, extras: dict
) -> Iterator[tuple[tuple[int, int], str, Any]]:
    """Every message that changes the reader's state, in (partition, offset) order: progress
    statements and undecodable messages as they are, update messages as their items in order
    (`TimeCounts` where its time first appears, malformed updates where they are)."""

    def fresh_messages():
        for key, rows in itertools.groupby(fresh_rows, key=lambda r: (r["partition"], r["offset"])):
            yield key, 0, [(r["pos"], r["time"], r["fresh"]) for r in rows]

    merged = heapq.merge(
        fresh_messages(),
        ((key, 1, items) for key, items in sorted(extras.items())),
        ((key, 2, (kind, payload)) for key, kind, payload in singles),
        key=lambda entry: (entry[0], entry[1]),
    )
    for key, entries in itertools.groupby(merged, key=lambda entry: entry[0]):
        firsts: list = []
        others: list = []
        for _key, tag, payload in entries:
            if tag == 2:
                yield key, payload[0], payload[1]
            elif tag == 0:
                firsts = payload
            else:
                others = payload
        if firsts or others:
            yield key, "updates", _items(firsts, others)


def _items(firsts: list, others: list) -> list:
    times: dict[int, list] = {pos_time[1]: [pos_time[0], pos_time[2], []] for pos_time in firsts}
    placed: list[tuple[int, Any]] = []
    for pos, item in sorted(others, key=lambda entry: entry[0]):
        if isinstance(item, Update):
            placed.append((pos, item))
            continue
        time, data, first_diff, diff = item
        entry = times.setdefault(time, [pos, 0, []])
        entry[0] = min(entry[0], pos)
        entry[2].append((data, first_diff, diff))
    placed += [(pos, TimeCounts(time, n, tuple(c))) for time, (pos, n, c) in times.items()]
    placed.sort(key=lambda entry: entry[0])
    return [item for _pos, item in placed]


def _updates_in(decoded: DataFrame, keys: list) -> int:
    """Updates Spark decoded in messages the codec refuses (they count as none, as locally)."""
    if not keys:
        return 0

    bad = decoded.sparkSession.createDataFrame(keys, "partition int, offset long")
    return _one_row(
        decoded.join(F.broadcast(bad), ["partition", "offset"]).agg(
            F.coalesce(F.sum(_updates_of(F.col("u"))), F.lit(0))
        )
    )[0]


def _updates_of(array: Column) -> Column:
    """How many updates a message's decoded array holds, none for a progress statement's null:
    Spark 3 sizes a null array as -1 (``spark.sql.legacy.sizeOfNull``), Spark 4 as null."""

    return F.when(array.isNotNull(), F.size(array))


def _fill_late_details(
    counting: CountingReader, groups: DataFrame, data_fields: list, codec: Any
) -> None:
    """Strict mode: name the data of each first arrival at a reported time, as CdcReader does."""

    late = groups.sparkSession.createDataFrame(counting.late, "__lp int, __lo long, __lt long")
    rows = (
        groups.join(
            F.broadcast(late),
            (F.col("__first.partition") == F.col("__lp"))
            & (F.col("__first.offset") == F.col("__lo"))
            & (F.col("__time") == F.col("__lt")),
        )
        .select(
            "__lp",
            "__lo",
            "__lt",
            F.col("__first.__pos").alias("pos"),
            F.col("__first.__diff").alias("diff"),
            _data_avro(groups, codec, data_fields).alias("d"),
        )
        .orderBy("__lp", "__lo", "__lt", "pos")
        .collect()
    )
    found: dict[tuple, list] = {}
    for row in rows:
        found.setdefault((row["__lp"], row["__lo"], row["__lt"]), []).append(
            (codec.decode_data(bytes(row["d"])), row["diff"])
        )
    for key, (at, n) in zip(counting.late, counting.late_violations):
        for i, (data, diff) in enumerate(found.get(key, [])[:n]):
            counting.violations[at + i] = counting.violations[at + i]._replace(
                detail=counting.late_detail(data, key[2], diff)
            )


def _cut(frontier: tuple[int, ...], until: int | None) -> int | None:
    """The time below which the history is reported (None: all of it, the history is closed)."""
    if until is None:
        return frontier[0] if frontier else None
    if frontier and until > frontier[0]:
        raise CdcError(
            f"the topic is proven complete only up to frontier {frontier[0]}, not "
            f"up to {until}: read with until <= {frontier[0]}, or wait for more"
        )
    return until
