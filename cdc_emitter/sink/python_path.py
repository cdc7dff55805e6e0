"""The Python data path (``encoder="python"``): a validation scan of the input, then one Spark
job that consolidates the rows and encodes and produces each partition's updates on the
executors (`cdc_emitter.sink.python_tasks`), which need cdc-emitter installed.

Guarantees: every row is checked by the validation scan (null, negative and late times, null
diffs, a diff sum that could overflow 64 bits, a row too big for one message) before the job that
produces starts; each task's messages are acknowledged before it reports its counts, and a retried
task writes the same updates (duplicates at most).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from functools import partial
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from cdc_emitter.errors import BadInputError, CdcError, LateUpdateError
from cdc_emitter.protocol.schemas import Framing
from cdc_emitter.protocol.updates import MAX_LONG, MIN_LONG
from cdc_emitter.sink.batch import Batch, Checked, Written
from cdc_emitter.sink.python_tasks import TaskSpec, check_sizes, produce_partition
from cdc_emitter.spark.columns import DIFF, HASH, TIME, digest_share, group_keys, hash_columns

__all__ = ["PythonPath", "task_error"]

_TASK_ERROR = re.compile(r"cdc_emitter\.errors\.(\w+): ([^\n]+)")


def task_error(exc: BaseException) -> CdcError | None:
    """Our error behind a failed Spark job (a task raised it; Spark retried and gave up), with
    its own message first — Spark's wrapper starts with an empty line and a JVM stack."""
    from cdc_emitter import errors

    found = _TASK_ERROR.findall(str(exc))
    if not found:
        return None
    name, message = found[-1]
    kind = getattr(errors, name, None)
    if not (isinstance(kind, type) and issubclass(kind, CdcError)):
        return None
    return kind(f"{message.strip()} (raised in a Spark task, which failed every attempt)")


def size_estimate(struct: T.StructType) -> Column:
    """A cheap JVM-side bound related to a row's Avro size, to find rows that might not fit.

    Strings and binaries count their bytes (Avro adds a length varint); fixed-size values count
    16 bytes (Avro needs at most 10, 1 for a null); nested values count the length of their JSON
    text, which can be up to ~2x smaller than Avro (arrays of doubles) — so rows estimated above
    a quarter of the message limit are encoded exactly to check them.
    """
    parts = []
    fixed = 32  # time, diff, array overhead
    for column in struct.fields:
        c = F.col(column.name)
        if isinstance(column.dataType, (T.StringType, T.BinaryType)):
            parts.append(F.coalesce(F.octet_length(c), F.lit(0)))
            fixed += 10
        elif isinstance(column.dataType, (T.ArrayType, T.MapType, T.StructType)):
            parts.append(F.coalesce(F.octet_length(F.to_json(F.struct(c))), F.lit(0)))
            fixed += 10
        else:
            fixed += 16
    total = F.lit(fixed)
    for part in parts:
        total = total + part
    return total


class PythonPath:
    """Checks a batch with a validation scan; its `Checked` batch consolidates, encodes
    and produces on the executors. ``producer_factory``: the executors' producer (None: a
    `CdcProducer`), the seam where tests put one that fails on cue."""

    def __init__(
        self,
        *,
        bootstrap_servers: str,
        topic: str,
        producer_config: dict,
        framing: Framing,
        schema_id: int,
        max_message_bytes: int,
        flush_timeout: float | None,
        time_column: str | None,
        diff_column: str,
        producer_factory: Callable[[TaskSpec], Any] | None = None,
    ) -> None:
        self.bootstrap_servers, self.topic, self.producer_config = (
            bootstrap_servers,
            topic,
            producer_config,
        )
        self.framing, self.schema_id, self.max_message_bytes = framing, schema_id, max_message_bytes
        self.flush_timeout, self.time_column, self.diff_column = (
            flush_timeout,
            time_column,
            diff_column,
        )
        self.producer_factory = producer_factory

    def spec(self, batch: Batch, data_types: list) -> TaskSpec:
        """What the executors' tasks need to encode and produce ``batch``."""
        return TaskSpec(
            self.bootstrap_servers,
            self.topic,
            dict(self.producer_config),
            batch.avro_data,
            self.framing,
            self.schema_id,
            self.max_message_bytes,
            batch.headers,
            data_types,
            self.flush_timeout,
            batch.update_partitions,
            self.producer_factory,
        )

    def check(self, prepared: DataFrame, batch: Batch) -> _Validated:
        """One narrow scan of the input (no shuffle): every row checked, the few that might be
        too big encoded to check them, an exact consolidation only if a diff sum might overflow."""
        data_cols, what = batch.data_cols, batch.what
        data_struct = T.StructType([batch.schema[c] for c in data_cols])
        data_json = F.to_json(F.struct(*[F.col(c) for c in data_cols]))
        t, d = F.col(TIME), F.col(DIFF)
        estimate = size_estimate(data_struct)
        tcol = self.time_column or "time"
        # examples are built only for bad rows (when() does not evaluate its value otherwise)
        st = prepared.agg(
            F.count(F.lit(1)).alias("rows"),
            F.count(F.when(t.isNull(), 1)).alias("null_times"),
            F.min(t).alias("min_time"),
            F.max(t).alias("max_time"),
            F.count(F.when(d.isNull(), 1)).alias("null_diffs"),
            F.sum(F.abs(d.cast("double"))).alias("abs_sum"),
            F.max(estimate).alias("max_estimate"),
        ).collect()[0]

        def example(condition: Column) -> str:  # a second, short job only when something is wrong
            rows = prepared.filter(condition).select(data_json.alias("row")).limit(1).collect()
            return rows[0]["row"] if rows else "?"

        if st["null_times"]:
            raise BadInputError(
                f"{what}: null time in column {tcol!r} ({st['null_times']} rows, e.g. row "
                f"{example(t.isNull())}); every row needs a non-negative integer time"
            )
        if st["min_time"] is not None and st["min_time"] < 0:
            raise BadInputError(
                f"{what}: negative time {st['min_time']} in column {tcol!r} "
                f"(e.g. row {example(t == F.lit(st['min_time']))}); times must be non-negative"
            )
        if st["null_diffs"]:
            raise BadInputError(
                f"{what}: null diff in column {self.diff_column!r} ({st['null_diffs']} rows, "
                f"e.g. row {example(d.isNull())})"
            )
        if st["min_time"] is not None and st["min_time"] < batch.late_below:
            raise LateUpdateError(
                f"{what}: update at time {st['min_time']} in column {tcol!r} is late (e.g. row "
                f"{example(t == F.lit(st['min_time']))}): the topic is complete up to frontier "
                f"{batch.lower}; pass late='advance' to move late updates to {batch.lower}"
            )

        # diff sums: |sum| <= sum |diff|, so only a batch whose absolute total might reach 2^63
        # needs the exact (decimal) consolidation to find the overflowing row
        might_overflow = (st["abs_sum"] or 0) >= 2.0**62
        keys, firsts = group_keys(batch.schema, data_cols)
        if might_overflow:
            s = F.sum(d.cast("decimal(38,0)"))
            over = (
                prepared.groupBy(*keys, t)
                .agg(s.alias("s"), *firsts)
                .filter((F.col("s") > F.lit(MAX_LONG)) | (F.col("s") < F.lit(MIN_LONG)))
                .select(
                    data_json.alias("row"), t.alias("time"), F.col("s").cast("string").alias("s")
                )
                .limit(1)
                .collect()
            )
            if over:
                raise BadInputError(
                    f"{what}: the consolidated diff of row {over[0]['row']} at time {over[0]['time']} "
                    f"is {over[0]['s']}, which overflows a 64-bit long"
                )

        # oversized rows: only rows whose estimate makes it possible are encoded to check
        threshold = self.max_message_bytes // 4
        data_types = [f.dataType for f in data_struct.fields]
        if (st["max_estimate"] or 0) > threshold:
            spec = self.spec(batch, data_types)
            big = (
                prepared.filter(estimate > threshold)
                .select(
                    *[F.col(c) for c in data_cols],
                    t,
                    F.lit(MIN_LONG).alias("diff"),
                    data_json.alias("__cdc_json"),
                )  # the longest diff: a bound
                .mapInArrow(
                    partial(check_sizes, spec),
                    "size long, time long, example string",
                )
                .limit(1)
                .collect()
            )
            if big:
                row = big[0]
                size = "more than the limit" if row["size"] < 0 else f"{row['size']} bytes"
                raise BadInputError(
                    f"{what}: row {row['example']} at time {row['time']} encodes to {size}, over "
                    f"the message limit of {self.max_message_bytes} bytes (max_message_bytes)"
                )

        s = F.col("__cdc_sum")
        # a sum of longs can overflow on the way to a total that fits ([MAX_LONG, 1, -1]):
        # then sum exactly (checked above to fit) and cast back
        total_diff = F.sum(d.cast("decimal(38,0)")).cast("long") if might_overflow else F.sum(d)
        out = (
            prepared.groupBy(*keys, t)
            .agg(total_diff.alias("__cdc_sum"), *firsts)
            .filter(s != 0)
            .select(*[F.col(c) for c in data_cols], t, s.alias(DIFF))
        )
        # each update's 64-bit hash; their XOR is the batch's digest, whatever the order
        inner = F.xxhash64(*hash_columns(batch.schema, data_cols), t)
        out = out.withColumn(HASH, digest_share(inner, F.col(DIFF)))
        return _Validated(self, batch, out, data_types, rows=st["rows"], max_time=st["max_time"])


class _Validated(Checked):
    """A batch the validation scan passed: consolidated, encoded and produced by `write`."""

    def __init__(
        self,
        path: PythonPath,
        batch: Batch,
        out: DataFrame,
        data_types: list,
        *,
        rows: int,
        max_time: int | None,
    ) -> None:
        self.path, self.batch, self.out, self.data_types = path, batch, out, data_types
        self.rows, self.max_time = rows, max_time

    def digest(self) -> tuple[int, tuple]:
        """Of the consolidated updates, in one Spark job."""
        if not self.rows:
            return 0, ()
        rows = (
            self.out.groupBy(F.col(TIME))
            .agg(F.count(F.lit(1)).alias("n"), F.bit_xor(F.col(HASH)).alias("x"))
            .collect()
        )
        xor = 0
        for row in rows:
            xor ^= row["x"]
        return xor, tuple(sorted((row[TIME], row["n"]) for row in rows))

    def write(self) -> Written:
        if not self.rows:
            return Written({}, 0, 0, 0)
        spec = self.path.spec(self.batch, self.data_types)
        try:
            produced = self.out.mapInArrow(
                partial(produce_partition, spec),
                "time long, n long, messages long, bytes long, digest long",
            ).collect()
        except Exception as exc:  # noqa: BLE001 - Spark wraps the task's error
            ours = task_error(exc)
            if ours is None:
                raise
            raise ours from exc
        seen: Counter = Counter()
        messages = n_bytes = digest = 0
        for row in produced:
            if row["time"] >= 0:
                seen[row["time"]] += row["n"]
            messages += row["messages"]
            n_bytes += row["bytes"]
            digest ^= row["digest"]
        return Written(dict(seen), digest, messages, n_bytes)
