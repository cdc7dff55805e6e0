"""The driver side of `read_cdc`: the messages that change the reader's state, in reading order.

Spark's groups (`cdc_emitter.read.spark_groups`) say, per (message, time), how many updates
arrive there first. The driver decodes the few messages it must judge itself (progress
statements, and what Spark could not read or may have read short: `judge_singles`), merges them
with those counts in (partition, offset) order (`in_order`), and pushes them through a
`CountingReader` (`replay`), which makes every decision the local verifier's reader makes. The
driver holds a row per (message, time), never the updates: a small reading's rows come in one
collect (`COLLECT_AT_MOST`), a large one's a partition at a time.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterator
from typing import Any

from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F

from cdc_emitter.errors import CdcError, DecodeError
from cdc_emitter.protocol.codec import CdcCodec
from cdc_emitter.protocol.reader import CountingReader, TimeCounts
from cdc_emitter.protocol.updates import Progress, Update
from cdc_emitter.read.spark_groups import data_avro, judged_by_driver
from cdc_emitter.read.verify import UndecodableReport

__all__ = [
    "COLLECT_AT_MOST",
    "COLLECT_BYTES_AT_MOST",
    "collectable",
    "fill_late_details",
    "in_order",
    "judge_singles",
    "replay",
    "rows_in_order",
]

#: Rows the driver takes in one ``collect`` and sorts itself, where it needs rows in order, knows
#: there are at most this many, and the reading's messages hold at most `COLLECT_BYTES_AT_MOST`:
#: on a small topic, Spark's sort and a job per partition cost more than the rows. Otherwise
#: they come a partition at a time, so the driver's memory stays bounded.
COLLECT_AT_MOST = 10_000
#: The most bytes of messages (their values) a reading may hold for `COLLECT_AT_MOST` to apply.
COLLECT_BYTES_AT_MOST = 16 * 2**20


def collectable(rows: int, read_bytes: int) -> bool:
    """Whether ``rows`` rows of a reading of ``read_bytes`` bytes come to the driver at once
    (`COLLECT_AT_MOST`)."""
    return rows <= COLLECT_AT_MOST and read_bytes <= COLLECT_BYTES_AT_MOST


def rows_in_order(df: DataFrame, keys: list[str], collect: bool) -> Iterator[Row]:
    """The rows of ``df`` by the columns ``keys``: collected and sorted here if ``collect``
    (`collectable`), else sorted by Spark and streamed a partition at a time."""
    if collect:
        return iter(sorted(df.collect(), key=lambda row: tuple(row[k] for k in keys)))
    return df.orderBy(*keys).toLocalIterator()


def judge_singles(
    decoded: DataFrame,
    codec: CdcCodec,
    spare: list[tuple[int, int]],
    values: Callable[[list[tuple[int, int]]], DataFrame],
    collect: bool,
) -> tuple[list, list, dict]:
    """The messages the driver decodes itself, in (partition, offset) order: progress statements,
    and what Spark could not read or read with bytes to spare (the codec's verdict stands):
    ``spare`` are the keys of update arrays found so after the read, whose ``values`` are read
    again. ``collect``: they are few enough to collect (`rows_in_order`).
    Returns ``[((partition, offset), "progress" | "undecodable", payload)]``, the undecodable
    messages' keys, and the headers of the messages that have any, by key."""

    few = decoded.filter(judged_by_driver()).select(
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
    for row in rows_in_order(few, ["partition", "offset"], collect):
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


def replay(
    counting: CountingReader,
    groups: DataFrame,
    singles: list,
    extras: dict[tuple[int, int], list[tuple[int, Any]]],
    codec: CdcCodec,
    headers: dict[tuple[int, int], list[tuple[str, bytes | None]]],
    collect: bool,
) -> list[str]:
    """Feed ``counting`` every message that changes its state, in reading order: first
    arrivals per (message, time), malformed updates and conflicts, progress statements (with
    their ``headers``) and undecodable messages. ``collect``: the rows of first arrivals per
    (message, time) are few enough to collect (`rows_in_order`).
    Returns the hints about the undecodable ones."""
    fresh = groups.groupBy(
        F.col("__first.partition").alias("partition"),
        F.col("__first.offset").alias("offset"),
        F.col("__time").alias("time"),
    ).agg(F.count(F.lit(1)).alias("fresh"), F.min("__first.__pos").alias("pos"))
    hints: list[str] = []
    report_undecodable = UndecodableReport(counting, codec, hints)
    ordered = rows_in_order(fresh, ["partition", "offset", "pos"], collect)
    for (partition, offset), kind, payload in in_order(ordered, singles, extras):
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


def in_order(
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


def fill_late_details(
    counting: CountingReader, groups: DataFrame, data_fields: list, codec: CdcCodec
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
            data_avro(groups, codec, data_fields).alias("d"),
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
