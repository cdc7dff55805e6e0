"""A batch's stats from the JVM data path's messages (`MessagePlan.messages`), taken two ways:

- `batch_stats`: from the cached messages, before anything is written (a bad row fails
  that job: nothing written), then written by a second job;
- `write_observed`: in the one job that computes and writes them (``Dataset.observe``),
  for a batch of one time — no cache, no second read of the messages.

Either way the stats are those of the messages written (by `batch_stats`, about to be):
the updates per time, the digest, the largest message, the input rows and groups behind them,
and the arrays to make again (repeated, or too big).
"""

from __future__ import annotations

import base64
import builtins
import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Observation
from pyspark.sql import functions as F

from cdc_emitter.spark import kafka as spark_kafka
from cdc_emitter.spark.columns import arrow_table

__all__ = [
    "BatchStats",
    "batch_stats",
    "counts_per_time",
    "DRIVER_COUNTED_UPDATES",
    "ObservedWrite",
    "write_observed",
]


@dataclass(frozen=True)
class ObservedWrite:
    """What `write_observed` found: the updates' count and digest, input rows and groups of
    every array it wrote or brought back (`small_values`); the messages, bytes and largest
    message it wrote; the ``(bucket, array)`` of each array left out for a repeat or its size,
    how many for a repeat and whether any for its size."""

    updates: int
    digest: int
    messages: int
    bytes: int
    largest: int
    rows: int
    groups: int
    left_out: tuple = ()
    repeated: int = 0
    too_big: bool = False
    #: the values of the arrays under its ``small_below`` bytes (and without a repeat), not written
    small_values: tuple[builtins.bytes, ...] = ()


def _observed_columns(
    kind: type, max_message_bytes: int, small_below: int, consolidated: bool
) -> tuple[Any, tuple]:
    """``(the condition of the messages written, the Columns observed)`` of
    `write_observed`, built once per DataFrame kind, message limit, small size and whether
    the messages are consolidated (`_built_once`)."""
    return _built_once(
        ("observed", kind, max_message_bytes, small_below, consolidated),
        lambda: _build_observed(max_message_bytes, small_below, consolidated),
    )


def _build_observed(
    max_message_bytes: int, small_below: int, consolidated: bool
) -> tuple[Any, tuple]:
    size = F.octet_length("value")
    too_big = F.coalesce(size > F.lit(max_message_bytes), F.lit(False))
    # a message as it is: written, or brought back if small; consolidated, ``repeated`` only
    # says that an update was made of several rows (counted, for the next batch's bet)
    held = ~too_big if consolidated else ~F.col("repeated") & ~too_big
    small = held & F.coalesce(size < F.lit(small_below), F.lit(False))
    kept = held & ~small

    def of_held(c: Any) -> Any:
        return F.when(held, c)

    def of_kept(c: Any) -> Any:
        return F.when(kept, c)

    # arrays as JSON text: PySpark 3.5's Observation hands them back as Java objects
    return kept & F.col("value").isNotNull(), (
        F.coalesce(F.sum(of_held(F.col("n"))), F.lit(0)).alias("n"),
        F.coalesce(F.bit_xor(of_held(F.col("xor"))), F.lit(0).cast("long")).alias("x"),
        F.count(of_kept(F.col("value"))).alias("m"),
        F.coalesce(F.sum(of_kept(size)), F.lit(0)).alias("b"),
        F.coalesce(F.max(of_kept(size)), F.lit(0)).alias("l"),
        F.coalesce(F.sum(of_held(F.col("rows"))), F.lit(0)).alias("i"),
        F.coalesce(F.sum(of_held(F.col("groups"))), F.lit(0)).alias("g"),
        F.to_json(F.collect_list(F.when(~held, F.array("bucket", "array")))).alias("left"),
        F.count(F.when(F.col("repeated"), F.lit(1))).alias("r"),
        F.bool_or(too_big).alias("big"),
        F.to_json(F.collect_list(F.when(small, F.base64("value")))).alias("small"),
    )


def write_observed(
    messages: Any,
    options: Mapping[str, str],
    headers: Sequence[tuple[str, bytes]],
    *,
    max_message_bytes: int,
    small_below: int = 0,
    consolidated: bool = False,
) -> ObservedWrite:
    """Write ``messages`` (of a batch of one time, not cached; ``consolidated`` or not) in the
    job that computes them, all but those over ``max_message_bytes`` and, unconsolidated, those
    with ``repeated``, which are left out for the caller to write again (consolidated, or packed
    exactly), and those under ``small_below`` bytes, whose values come back instead (for the
    caller to join into fewer); and take the stats of what was written from the same job
    (``Dataset.observe``). The session must write Kafka by its V2 writer
    (`KafkaWriteObserved`).

    Why this keeps the guarantees: every row is checked in the job's input stage, before the
    first shuffle, and no task after a shuffle starts before every task before it succeeded — so
    a bad row fails the job before its first message. Consolidated, the messages must be those
    of a plan that sums the diffs before the shuffle that its writing tasks follow
    (`messages` of a whole batch grouped as bytes). A
    retried write task writes its arrays again (duplicates, which readers discard); the stats
    count each array once (those of a failed attempt are dropped)."""
    written, columns = _observed_columns(
        type(messages), max_message_bytes, small_below, consolidated
    )
    observation = Observation()
    observed = messages.observe(observation, *columns)
    spark_kafka.write_messages(observed, options, headers, where=written)
    got = observation.get
    left = tuple((int(bucket), int(array)) for bucket, array in json.loads(got["left"] or "[]"))
    small = tuple(base64.b64decode(value) for value in json.loads(got["small"] or "[]"))
    return ObservedWrite(
        int(got["n"]),
        int(got["x"]),
        int(got["m"]),
        int(got["b"]),
        int(got["l"]),
        int(got["i"]),
        int(got["g"]),
        left_out=left,
        repeated=int(got["r"]),
        too_big=bool(got["big"]),
        small_values=small,
    )


@dataclass(frozen=True)
class BatchStats:
    """What a batch's messages hold (see `batch_stats`)."""

    counts: dict  # updates per time
    digest: int  # XOR of the updates' hashes
    max_time: int | None  # the largest time, cancelled updates included; None: no rows
    messages: int
    bytes: int
    largest: int  # bytes of the largest message
    rows: int = 0  # input rows behind the messages, zero diffs included
    groups: int = 0  # distinct (data, time) among them, cancelled ones included
    #: the ``(bucket, array)`` of each message with ``repeated`` (see MessagePlan.messages)
    repeated_arrays: tuple = ()
    #: every message's value, when each was at most the ``values_up_to`` bytes asked for;
    #: else None
    values: tuple[builtins.bytes, ...] | None = None

    @property
    def repeated(self) -> bool:
        """Some message has ``repeated``."""
        return bool(self.repeated_arrays)


def batch_stats(messages: Any, *, time: int | None = None, values_up_to: int = 0) -> BatchStats:
    """Compute the (cached) messages and what they hold: a row per message (about one per
    bucket in a small batch) brought to the driver — one Spark job; a bad row fails it, as
    `task_error` explains — and, for a batch of many times, its live
    updates counted per time from the cached messages, a second, small one.

    ``time``: every update's time (a batch of one time, whose messages do not hold it).
    ``values_up_to``: also bring each message's value of at most that many bytes, in the same
    job — the caller joins a small batch's messages on the driver without a job of its own to
    gather them; `BatchStats.values` holds them when every message came.
    """
    one_time = time is not None
    columns = _stats_columns(type(messages), one_time)
    if values_up_to > 0:
        columns = (
            *columns,
            F.when(F.octet_length("value") <= F.lit(values_up_to), F.col("value")).alias("v"),
        )
    rows = messages.select(*columns).collect()
    largest = max((int(r["b"] or 0) for r in rows), default=0)
    repeated = tuple((r["bucket"], r["array"]) for r in rows if r["r"])
    updates = sum(int(r["n"]) for r in rows)
    counts: dict[Any, int]
    if one_time:
        counts = {time: updates} if updates else {}
        max_time = time if rows else None
    else:
        counts = counts_per_time(messages, updates) if updates else {}
        max_time = max((r["t"] for r in rows if r["t"] is not None), default=None)
    xor = 0
    for r in rows:
        xor ^= r["x"]
    values = None
    if values_up_to > 0 and all(r["m"] == 0 or r["v"] is not None for r in rows):
        values = tuple(bytes(r["v"]) for r in rows if r["m"])
    return BatchStats(
        counts,
        xor,
        max_time,
        sum(int(r["m"]) for r in rows),
        sum(int(r["b"] or 0) for r in rows),
        largest,
        rows=sum(int(r["i"] or 0) for r in rows),
        groups=sum(int(r["g"] or 0) for r in rows),
        repeated_arrays=repeated,
        values=values,
    )


#: A batch of many times whose messages hold at most this many live updates has them counted per
#: time on the driver, their times brought as Arrow (8 bytes each); more are counted by a Spark
#: aggregation. 4M updates of 1M times: 0.6 s against 1.6-1.9 s (ad hoc, 2 cores).
DRIVER_COUNTED_UPDATES = 8_000_000


def counts_per_time(messages: Any, updates: int) -> dict[int, int]:
    """The live updates of the (cached) messages counted per time (their ``times``), in time
    order — what the progress statement and the digest sort again, then in one pass. As Arrow:
    a batch of event times can have a count for each of a million times, which as Rows took
    seconds to bring over."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if updates <= DRIVER_COUNTED_UPDATES and hasattr(messages, "toArrow"):  # pyspark >= 4.0
        times = pc.list_flatten(messages.select("times").toArrow().column("times"))
        low, high = (v.as_py() for v in pc.min_max(times).values())
        if high - low < max(updates, 1 << 20):  # dense: a count per time of the span, in time order
            # (4M updates of 1M times: 0.02 s, against 0.44 s hashing and sorting them)
            per_span = np.bincount(times.to_numpy() - low)
            counted = np.flatnonzero(per_span)
            return dict(zip((counted + low).tolist(), per_span[counted].tolist()))
        found = pc.value_counts(times)
        per_time = pa.table({"t": found.field("values"), "n": found.field("counts")})
    else:
        per_time = arrow_table(
            messages.select(F.explode("times").alias("t"))
            .groupBy("t")
            .agg(F.count(F.lit(1)).alias("n"))
        )
    per_time = per_time.sort_by("t")
    return dict(zip(per_time.column("t").to_pylist(), per_time.column("n").to_pylist()))


_columns_lock = threading.Lock()
_columns: dict[tuple, Any] = {}


def _built_once(key: tuple, build: Any) -> Any:
    """``build()``'s Columns, built once per ``key`` (which holds the DataFrame kind, classic or
    Connect) and kept for the process: on a classic session each function call to build one is
    several round trips to the JVM, some 190 per batch for `batch_stats`'s alone."""
    with _columns_lock:
        found = _columns.get(key)
        if found is None:
            found = _columns[key] = build()
    return found


def _stats_columns(kind: type, one_time: bool) -> Any:
    """The Columns `batch_stats` selects, built once per DataFrame kind (`_built_once`)."""

    def build() -> tuple:
        return (
            F.col("n"),
            F.col("xor").alias("x"),
            F.col("rows").alias("i"),
            F.col("groups").alias("g"),
            F.col("value").isNotNull().cast("long").alias("m"),
            F.octet_length("value").alias("b"),
            F.col("repeated").alias("r"),
            F.col("bucket"),
            F.col("array"),
            *([] if one_time else [F.col("max_time").alias("t")]),
        )

    return _built_once(("stats", kind, one_time), build)
