"""A batch's stats from the JVM data path's messages (`MessagePlan.messages`): `batch_stats`
computes the messages, cached, and takes their stats before anything is written (a bad row
fails that job: nothing written); a second job then writes those same messages.

The stats are those of the messages about to be written: the updates per time, the digest, the
largest message, the input rows and groups behind them, and the arrays to make again
(repeated, or too big).
"""

from __future__ import annotations

import builtins
import threading
from dataclasses import dataclass
from typing import Any

from pyspark.sql import functions as F

from cdc_emitter.spark.columns import arrow_table

__all__ = [
    "BatchStats",
    "batch_stats",
    "counts_per_time",
    "DRIVER_COUNTED_UPDATES",
]


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
