"""The Spark side of `read_cdc`: the decoded messages as rows of updates, grouped by data and time.

`cdc_emitter.read.spark_decode` gives a row per message. Here every update Spark decoded
becomes a row (`occurrences`), the update arrays are checked in the same pass
(`array_checks`: arrays with bytes to spare, malformed updates), and the updates are grouped by
``(data, time)`` (`first_arrivals`): a row per group with its first arrival, how many arrived
and whether their diffs differ. The reading's collection and history are read from those groups
(`reported_history`, `collection`). Nothing here runs on the driver but small collects.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame, Row
from pyspark.sql import functions as F
from pyspark.sql import types as T

from cdc_emitter.errors import CdcError
from cdc_emitter.protocol.codec import CdcCodec
from cdc_emitter.protocol.reader import CountingReader
from cdc_emitter.protocol.updates import Update
from cdc_emitter.read.spark_decode import reencoded
from cdc_emitter.spark.columns import canonical
from cdc_emitter.spark.schema import contains_map

__all__ = [
    "array_checks",
    "collection",
    "cut",
    "data_avro",
    "data_fields",
    "data_order",
    "first_arrivals",
    "grouping_keys",
    "in_message_order",
    "judged_by_driver",
    "later_conflicts",
    "malformed_updates",
    "occurrences",
    "one_row",
    "reported_history",
    "updates_in",
    "updates_of",
]


def one_row(df: DataFrame) -> Row:
    """The row of ``df``, a global aggregate (which always has exactly one)."""
    row = df.first()
    if row is None:  # not reached: an aggregate without grouping has one row
        raise CdcError("Spark returned no row for an aggregate")
    return row


def data_fields(codec: CdcCodec) -> list[str]:
    return [f["name"] for f in codec.data_schema["fields"]]


def data_order(df: DataFrame, codec: CdcCodec) -> list[Column]:
    """Sort expressions over the data columns that order rows as ``codec.sort_key`` orders the
    decoded data: nulls first, NaN after every number, strings by code point (UTF-8 bytes),
    records and arrays element by element, maps by their sorted entries."""
    return [canonical(df[c], df.schema[c].dataType).asc_nulls_first() for c in data_fields(codec)]


def data_avro(df: DataFrame, codec: CdcCodec, fields: list[str] | None = None) -> Column:
    """``df``'s data columns (``fields``, by default the codec's) as their Avro record."""

    fields = data_fields(codec) if fields is None else fields
    record = T.StructType([df.schema[c] for c in fields])
    return reencoded(F.struct(*[df[c] for c in fields]), record, codec.data_schema)


def occurrences(decoded: DataFrame, undecodable: list) -> tuple[DataFrame, list[str]]:
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


def malformed_updates(
    occurrences: DataFrame, codec: CdcCodec, data_fields: list[str], keys: set[tuple[int, int]]
) -> dict[tuple[int, int], list[tuple[int, Any]]]:
    """Updates at a negative time or with a zero diff (violations), with their data, by
    ``(partition, offset)``: ``(position, Update)`` in message order. ``keys`` are the messages
    that hold any (`array_checks`)."""
    extras: dict[tuple[int, int], list[tuple[int, Any]]] = {}
    if not keys:
        return extras
    holding = occurrences.sparkSession.createDataFrame(sorted(keys), "partition int, offset long")
    occurrences = occurrences.join(F.broadcast(holding), ["partition", "offset"], "left_semi")
    wrong = occurrences.filter((F.col("__time") < 0) | (F.col("__diff") == 0)).select(
        "partition",
        "offset",
        "__pos",
        data_avro(occurrences, codec, data_fields).alias("d"),
        "__time",
        "__diff",
    )
    for row in in_message_order(wrong):
        extras.setdefault((row["partition"], row["offset"]), []).append(
            (row["__pos"], Update(codec.decode_data(bytes(row["d"])), row["__time"], row["__diff"]))
        )
    return extras


def in_message_order(updates: DataFrame) -> list[Row]:
    """The rows of ``updates`` (a few, kept by the driver anyway) by ``partition``, ``offset``
    and ``__pos``: one job, sorted here, rather than Spark's range sort and a job per partition."""
    return sorted(updates.collect(), key=lambda r: (r["partition"], r["offset"], r["__pos"]))


def grouping_keys(
    good: DataFrame, data_fields: list[str]
) -> tuple[DataFrame, list[str], list[str]]:
    """The columns to group the data on: maps as their sorted entries (Spark cannot group
    maps), added to ``good`` as ``__key<i>``. Returns ``good`` with them, the key columns and
    the data columns that hold maps."""
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


def first_arrivals(good: DataFrame, key_cols: list[str], map_fields: list[str]) -> DataFrame:
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


def later_conflicts(
    good: DataFrame,
    groups: DataFrame,
    key_cols: list[str],
    data_fields: list[str],
    codec: CdcCodec,
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
            data_avro(good, codec, data_fields).alias("d"),
        )
    )
    conflicts = 0
    for row in in_message_order(later):
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


def array_checks(
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


def updates_in(decoded: DataFrame, keys: list) -> int:
    """Updates Spark decoded in messages the codec refuses (they count as none, as locally)."""
    if not keys:
        return 0

    bad = decoded.sparkSession.createDataFrame(keys, "partition int, offset long")
    return one_row(
        decoded.join(F.broadcast(bad), ["partition", "offset"]).agg(
            F.coalesce(F.sum(updates_of(F.col("u"))), F.lit(0))
        )
    )[0]


def updates_of(array: Column) -> Column:
    """How many updates a message's decoded array holds, none for a progress statement's null:
    Spark 3 sizes a null array as -1 (``spark.sql.legacy.sizeOfNull``), Spark 4 as null."""

    return F.when(array.isNotNull(), F.size(array))


def judged_by_driver() -> Column:
    """The decoded messages the driver decodes itself
    (`cdc_emitter.read.spark_replay.judge_singles`): progress statements, and what Spark could
    not read or may have read short."""
    return F.col("p").isNotNull() | F.col("suspect").isNotNull() | F.col("tombstone")


def reported_history(
    counting: CountingReader, groups: DataFrame, data_fields: list[str], until: int | None
) -> DataFrame:
    """The updates reported below the frontier (or ``until``): data columns, ``time``,
    ``diff``; first arrivals at times already reported left out, as the local reader drops
    them."""
    below = cut(counting.frontier, until)
    reported = groups if below is None else groups.filter(F.col("__time") < F.lit(below))
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


def collection(history: DataFrame, data_fields: list[str]) -> DataFrame:
    """The multiset ``history`` adds up to: data columns + ``count``, zero counts left out."""

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


def cut(frontier: tuple[int, ...], until: int | None) -> int | None:
    """The time below which the history is reported (None: all of it, the history is closed)."""
    if until is None:
        return frontier[0] if frontier else None
    if frontier and until > frontier[0]:
        raise CdcError(
            f"the topic is proven complete only up to frontier {frontier[0]}, not "
            f"up to {until}: read with until <= {frontier[0]}, or wait for more"
        )
    return until
