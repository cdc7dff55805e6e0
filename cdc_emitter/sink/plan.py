"""The sink's JVM data path: validation, consolidation, Avro encoding, packing into update arrays
and the Kafka write, all as Spark SQL — nothing of ours runs on the executors.

A batch is two Spark jobs over one plan:

1. **Prepare** (``MessagePlan.messages``, then
   `batch_stats`): every row is checked in the map stage,
   before the shuffle (``raise_error``: a null, negative or late time, a null diff, a time
   beyond a re-run's recorded interval); there too each row's data record is encoded by
   ``to_avro`` and hashed with its time; rows are shuffled by that hash, consolidated on the
   encoded bytes (diff sums computed exactly: a 64-bit sum that overflows on the way to a
   total that fits is still right, and a total that does not fit fails the job), each update
   made of its data bytes, time and diff, and packed into update arrays of at most
   ``max_message_bytes`` (joined by ``listagg`` on Spark 4), an array holding updates of any
   times. A batch is first packed unconsolidated instead, each row its own update (no
   aggregation over every row), encoded and packed in its input task, before the shuffle
   (only each task's share of each array moves: see
   `GroupsInMemory` for what a task
   then holds); the arrays where two rows turn out to share data and time
   (found per array, before anything is written) are consolidated again alone — the whole
   batch when they are over half — and when they were over a quarter, the next batch of the
   same data layout is consolidated straight away. A whole batch is consolidated the way
   Spark's own aggregation goes instead (``MessagePlan._combined``): on the data columns (and
   time), partly before the shuffle, so repeated rows shrink before they move; each update is
   encoded after it and packed where the aggregation left it, each task's share of each array
   then shuffled and joined, as for a batch packed unconsolidated. Each message is the Confluent
   header (one owner: `CdcCodec.frame`), the union
   branch, the array's block count (``to_avro`` of a long is its zig-zag varint), the encoded
   updates and the closing zero. The messages are cached; the job's result is the
   per-time update counts and the digest. A bad row fails this job: nothing has been written.
2. **Write** (`write_messages`): Spark's own Kafka writer
   (``spark-sql-kafka-0-10``: producers cached per executor, ``acks=all``) writes the cached
   messages; a delivery error fails the task, and Spark retries it — a retry can only duplicate
   whole update arrays, which readers discard.

Guarantees: no message is written before every row of the batch passed validation and every
consolidated diff fits 64 bits; every message is at most ``max_message_bytes``; the counts are
those of the messages written; the executors need only Spark and the two Spark packages
(``spark-avro``, ``spark-sql-kafka-0-10``; `cdc_emitter.configure_spark` adds them).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from typing import Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.avro.functions import from_avro, to_avro

from cdc_emitter.protocol.updates import MAX_LONG, MIN_LONG
from cdc_emitter.sink.row_checks import (
    BATCH,
    BATCH_TIME,
    ROW,
    Check,
    raise_in_job,
    shortened,
)
from cdc_emitter.spark.columns import (
    DIFF,
    HASH,
    TIME,
    bucket_of,
    digest_share,
    encoded_data,
    group_keys,
    hash_columns,
    not_null_long,
)
from cdc_emitter.spark.schema import contains_map

__all__ = [
    "ENVELOPE",
    "MessagePlan",
    "expect_repeats",
    "note_repeats",
    "forget_layouts",
    "packed_groups",
]

ORDER = "__cdc_order"
DATA = "__cdc_data"
REPEAT = "__cdc_repeat"
ROWS = "__cdc_in"  # input rows behind an update, zero diffs included
#: A batch of one time: its time as 8 little-endian bytes, which ``xxhash64`` hashes as the long,
#: and as its Avro encoding (a zig-zag varint) — binary literals, not written into generated code.
TIME_KEY = "__cdc_tkey"
TIME_ITEM = "__cdc_titem"
#: Bytes a message adds around its updates: Confluent header (5), union branch (1), block
#: count (at most 10) and the closing zero (1), rounded up.
ENVELOPE = 32


class _Exprs:
    """The expressions of a `MessagePlan` that hold a time: one set for rows that carry
    their times (a long column), one for a batch of one time, whose time comes as binary literals
    (`TIME_KEY`, `TIME_ITEM`) — Spark writes a long literal into the Java code it
    generates, so a new time each batch would compile every stage again and run it cold (measured:
    about 0.4 s of a 4M-row batch); a binary literal is passed to the same code as an object."""

    def __init__(self, plan: MessagePlan, one_time: bool) -> None:
        t, d = F.col(TIME), F.col(DIFF)
        if one_time:
            self.time: list = []  # what the rows carry of their time: nothing, it is the batch's
            time_text, time_bytes = F.lit(BATCH_TIME), F.col(TIME_ITEM)
            self.order = plan._order(F.col(TIME_KEY))
        else:
            self.time = [t]
            time_text, time_bytes = t.cast("string"), _avro_long(t)
            self.order = plan._order(t)
        # a consolidated update's diff, and whether more than one live row made it
        self.consolidated = (
            plan._total(time_text),
            (F.col("__cdc_rows") > 1).alias(REPEAT),
            F.col(ROWS),
        )
        # encode each update (an Avro record is its fields' encodings in order: the data
        # record, then time and diff as zig-zag varints); its hash is the digest's share
        if plan.by_bytes:
            data_bytes = F.col(DATA)
        else:  # after the consolidation on canonical keys: any encoding of the data will do
            data_bytes = to_avro(F.struct(*plan._data), json.dumps(plan._record))
        item = F.concat(data_bytes, time_bytes, _long_bytes(d))
        live = d != 0
        # the item is its own column, so that the size check and the value share one encoding
        self.items = (
            F.col("__cdc_bucket"),
            *self.time,
            F.col(ORDER),
            d,
            *plan._data,  # data: for the error's text
            F.when(live, item).alias("__cdc_item"),
            F.col(REPEAT),
            F.col(ROWS),
        )
        size = F.octet_length("__cdc_item")
        too_big = raise_in_job(
            "BadInputError",
            F.lit(f"{BATCH}: row "),
            plan._after_json,
            F.lit(" at time "),
            time_text,
            F.lit(" encodes to "),
            size.cast("string"),
            F.lit(
                f" bytes, over the message limit of {plan._max_message_bytes} bytes less "
                f"{ENVELOPE} for the message envelope (max_message_bytes)"
            ),
        )
        checked_item = F.when(size > F.lit(plan._limit), too_big.cast("binary")).otherwise(
            F.col("__cdc_item")
        )
        self.encoded = (
            F.col("__cdc_bucket"),
            *self.time,
            checked_item.alias("__cdc_item"),
            F.when(live, digest_share(F.col(ORDER), d)).alias(HASH),
            F.when(live, 1).otherwise(0).alias("__cdc_live"),
            F.col(ORDER),
            F.col(REPEAT),
            F.col(ROWS),
        )
        # packing, two ways, each bucket's arrays holding updates of any times. Spread (see
        # messages): by hash over a given number of arrays, with no window — an array can come
        # out over the limit, which batch_stats shows. Exact: by running size in hash order;
        # updates up to half the limit share an array (ends within one half-limit window: at
        # most a whole limit), bigger ones go alone.
        half = plan._limit // 2
        no_item = F.col("__cdc_item").isNull()
        window = Window.partitionBy("__cdc_bucket").orderBy(ORDER)
        small = F.col("__cdc_size") <= F.lit(half)
        running = F.sum(F.when(small, F.col("__cdc_size")).otherwise(0)).over(
            window.rowsBetween(Window.unboundedPreceding, Window.currentRow)
        )
        self.chunk_exact = (
            F.when(no_item, F.lit(None))
            .when(small, F.floor((running - 1) / F.lit(half)))
            .otherwise(-F.row_number().over(window))
        )
        value = F.concat(
            F.lit(plan._frame + b"\x00"),
            _avro_long(F.col("n").cast("long")),
            F.col("__cdc_body"),
            F.lit(b"\x00"),
        )
        if plan._partitions:
            spread = F.xxhash64("__cdc_bucket", "__cdc_chunk")
            partition = F.element_at(
                F.array(*[F.lit(p) for p in plan._partitions]),
                (F.pmod(spread, F.lit(len(plan._partitions))) + 1).cast("int"),
            )
        else:
            partition = F.lit(None).cast("int")
        # an array's times: a batch of one time's, batch_stats is told; else the largest of its
        # updates' (cancelled ones included: the batch's largest time counts them) and each live
        # update's, which batch_stats counts per time — an array is not one time's, so that the
        # arrays of a batch of many times are as few and full as those of a batch of one
        self.times = (
            ()
            if one_time
            else (
                F.max(t).alias("max_time"),
                F.collect_list(F.when(F.col("__cdc_live") == 1, t)).alias("times"),
            )
        )
        self.message = (
            F.col("n"),
            F.col("xor"),
            F.col("rows"),
            F.col("groups"),
            F.when(F.col("n") > 0, value).alias("value"),
            partition.alias("partition"),
            F.col("repeated"),
            F.col("__cdc_bucket").alias("bucket"),
            F.col("__cdc_chunk").alias("array"),
            *([] if one_time else [F.col("max_time"), F.col("times")]),
        )
        # the lists messages() selects and groups by, built once: on a classic session each
        # Column made is several round trips to the JVM (a column name given as text, one).
        # Where a step's columns need only the step before's, they are one select: a classic
        # session analyses each DataFrame step as it is made (10-25 ms each, on 2 cores)
        bucket, order = F.col("__cdc_bucket"), F.col(ORDER)
        self.bucket = bucket
        self.rows = (plan._data_bytes.alias(DATA), *self.time, d, order) if plan.by_bytes else None
        # ... the same, the hash computed in the same step
        self.rows_ordered = (
            (plan._data_bytes.alias(DATA), *self.time, d, self.order.alias(ORDER))
            if plan.by_bytes
            else None
        )
        self.keys = (bucket, order, *plan._keys, *self.time)
        self.after_keys = (bucket, order, *plan._data, *self.time, *self.consolidated)
        unconsolidated = (
            order,
            *plan._data,
            *self.time,
            d,
            F.lit(False).alias(REPEAT),
            F.lit(1).cast("long").alias(ROWS),
        )
        self.unconsolidated = (bucket, *unconsolidated)
        self.unconsolidated_bucketed = (
            plan._bucket.alias("__cdc_bucket"),
            *unconsolidated,
        )  # from ORDER
        self.arrays = (bucket, F.col("__cdc_chunk"))
        if plan.by_bytes:  # MessagePlan._combined's
            self.combined = (
                self.order.alias(ORDER),
                plan._data_bytes.alias(DATA),
                *self.time,
                F.col("__cdc_hi"),
                F.col("__cdc_lo"),
                F.col("__cdc_rows"),
                F.col(ROWS),
            )
            self.combined_updates = (
                plan._bucket.alias("__cdc_bucket"),
                order,
                F.col(DATA),
                *self.time,
                *self.consolidated,
            )


class MessagePlan:
    """How a batch's rows become its messages, for one data schema and message layout.

    The expressions are built once and reused by every batch (`messages`), and by every
    sink of the same layout (`shared`): on a classic session each piece of an expression
    is a round trip to the JVM, some 1,500 per plan. Texts that name the batch say
    `BATCH` instead (and the time of a batch of one time `BATCH_TIME`);
    `cdc_emitter.sink.row_checks.task_error` puts them back. No batch's own value is a long
    literal in them, so every batch of a layout runs the same generated code (`_Exprs`).

    ``buckets``: how many groups the updates are spread over (each packs its own arrays);
    ``partitions``: where messages go (None: Kafka's choice).
    """

    def __init__(
        self,
        *,
        schema: T.StructType,
        data_cols: Sequence[str],
        update_schema: dict,
        frame: bytes,
        max_message_bytes: int,
        buckets: int,
        partitions: Sequence[int] | None,
    ) -> None:
        d = F.col(DIFF)
        # before the shuffle; a message shows SHOWN_CHARS of it (a row may be a megabyte)
        self.row_json = shortened(F.to_json(F.struct(*[F.col(c) for c in data_cols])))
        # 1. before the shuffle: each row's hash of data and time (its bucket, its order in
        # packing, and the seed of its digest share) and, unless the data holds maps (equal
        # maps can encode their entries in other orders), its data record as to_avro bytes: rows
        # are consolidated on those bytes — what readers compare (a collation that groups 'A'
        # with 'a' does not merge them: they are different data in the topic) — so the shuffle
        # and the grouping see one compact column instead of every column
        self._hashed = hash_columns(schema, data_cols)
        self._data_hash = F.xxhash64(*self._hashed)  # what the driver folds time into
        self._record = update_schema["fields"][0]["type"]
        self.by_bytes = not any(contains_map(schema[c].dataType) for c in data_cols)
        if self.by_bytes:
            self._data_bytes = encoded_data(schema, data_cols, self._record)
            self._firsts: list[Column] = []
            self._keys, self._data = [F.col(DATA)], [F.col(DATA)]
            self._columns = [F.col(c) for c in data_cols]  # what a combined batch groups on
            self._after_json = shortened(
                F.to_json(from_avro(F.col(DATA), json.dumps(self._record)))
            )  # only for an error's text
        else:
            self._keys, self._firsts = group_keys(schema, data_cols)
            self._data = [F.col(c) for c in data_cols]
            self._after_json = self.row_json
        # each bucket a label that Spark's hash partitioning sends to a task of its own (the
        # numbers 0..buckets-1 would share tasks: with 4, one task got two buckets, another none)
        self._buckets = buckets
        self._bucket = bucket_of(F.col(ORDER), buckets)
        # 2. consolidation: the 64-bit sum as high and low 32-bit halves, which cannot overflow
        # (fewer than 2^31 rows per update), joined exactly
        self._sums = (
            F.sum(F.shiftright(d, 32)).alias("__cdc_hi"),
            F.sum(d.bitwiseAND(F.lit(0xFFFFFFFF))).alias("__cdc_lo"),
            F.count(F.when(d != 0, F.lit(1))).alias("__cdc_rows"),  # live rows behind the update
            F.count(F.lit(1)).alias(ROWS),
        )  # all of them: what the driver would take
        two32 = F.lit(4294967296).cast("decimal(38,0)")
        self._exact = F.col("__cdc_hi").cast("decimal(38,0)") * two32 + F.col("__cdc_lo").cast(
            "decimal(38,0)"
        )
        self._fast = F.try_add(
            F.try_multiply(F.col("__cdc_hi"), F.lit(4294967296)), F.col("__cdc_lo")
        )
        self._total_one_time = self._total(
            F.lit(BATCH_TIME)
        )  # updates(one_time=True): no time column
        self._max_message_bytes, self._limit = max_message_bytes, max_message_bytes - ENVELOPE
        self._frame, self._partitions = frame, partitions
        self._size = F.coalesce(F.octet_length("__cdc_item"), F.lit(0))
        self._packed = (
            F.sum("__cdc_live").alias("n"),
            F.bit_xor(F.coalesce(F.col(HASH), F.lit(0).cast("long"))).alias("xor"),
            _concat_all(F.col("__cdc_item")).alias("__cdc_body"),
            F.sum(ROWS).alias("rows"),
            F.count(F.lit(1)).alias("groups"),
        )
        # whether an array holds an update made of more than one live row (consolidated), or,
        # unconsolidated, two live rows of one hash — the same (data, time) or, rarely, a
        # collision: either way the array is not to be written
        self._repeated = F.bool_or(REPEAT).alias("repeated")
        orders = F.collect_list(F.when(F.col("__cdc_live") == 1, F.col(ORDER)))
        self._repeated_unconsolidated = (F.size(F.array_distinct(orders)) < F.size(orders)).alias(
            "repeated"
        )
        self._exprs: dict[bool, _Exprs] = {}  # by one_time, built when first needed
        self._chunks: dict[int, Column] = {}  # by fanout (see _fanned)
        self._last_checked: dict[
            str, tuple
        ] = {}  # by column: (checks, the checked column), see _checked

    def _order(self, time: Column) -> Column:
        """A row's hash of its data and ``time`` (a long column, or a one-time batch's
        `TIME_KEY`, which hashes as the long): its bucket, its order in packing and the
        seed of its digest share."""
        return F.xxhash64(*self._hashed, time)

    def _total(self, time_text: Column) -> Column:
        """An update's diff from its halves, exact: the fast sum where it fits, else the decimal
        one, which fails the job with the row's text when the total does not fit 64 bits."""
        slow = F.when(
            (self._exact > F.lit(MAX_LONG)) | (self._exact < F.lit(MIN_LONG)),
            raise_in_job(
                "BadInputError",
                F.lit(f"{BATCH}: the consolidated diff of row "),
                self._after_json,
                F.lit(" at time "),
                time_text,
                F.lit(" is "),
                self._exact.cast("string"),
                F.lit(", which overflows a 64-bit long"),
            ).cast("long"),
        ).otherwise(self._exact.cast("long"))
        return F.when(self._fast.isNotNull(), self._fast).otherwise(slow).alias(DIFF)

    def _time_exprs(self, one_time: bool) -> _Exprs:
        exprs = self._exprs.get(one_time)
        if exprs is None:  # two threads may build it twice: the same expressions
            exprs = self._exprs[one_time] = _Exprs(self, one_time)
        return exprs

    @staticmethod
    def key_of(
        *,
        schema: T.StructType,
        data_cols: Sequence[str],
        update_schema: dict,
        frame: bytes,
        max_message_bytes: int,
        buckets: int,
        partitions: Sequence[int] | None,
    ) -> tuple:
        """What a plan is built from: equal keys, interchangeable plans."""
        return (
            schema.json(),
            tuple(data_cols),
            json.dumps(update_schema),
            frame,
            max_message_bytes,
            buckets,
            tuple(partitions or ()),
        )

    @classmethod
    def shared(cls, session_kind: type, **layout: Any) -> MessagePlan:
        """The plan for ``layout`` on sessions of ``session_kind`` (classic or Connect: their
        Columns differ), built once per process and shared by every sink. A plan's Columns are
        expressions bound to no session or batch, and building them took 0.13-0.19 s of round
        trips to the JVM — otherwise paid again by each new sink of the same layout, e.g. one
        per ``write``. The `SHARED_PLANS` layouts used last are kept."""
        key = (session_kind, cls.key_of(**layout))
        with _shared_lock:
            plan = _shared.pop(key, None)
            if plan is None:
                plan = cls(**layout)
            _shared[key] = plan  # the most recently used last
            while len(_shared) > SHARED_PLANS:
                _shared.pop(next(iter(_shared)))
        return plan

    def messages(
        self,
        prepared: DataFrame,
        checks: Sequence[Check],
        *,
        fanout: int,
        time: int | None = None,
        exact: bool = False,
        consolidate: bool = True,
        arrays: Sequence[tuple[int, int]] | None = None,
    ) -> DataFrame:
        """The batch's messages as a DataFrame (nothing computed yet): one row per update array
        with ``n`` (updates), ``xor`` (XOR of the updates' hashes), ``rows`` (the input rows
        behind its updates, zero diffs included), ``groups`` (its updates, cancelled ones
        included), ``value`` (the message), ``partition`` (null: Kafka's choice), ``repeated``
        (see ``consolidate``) and ``bucket`` and ``array``, which name it; plus one row with
        ``n = 0``, a null value and a null array for each bucket with updates that all
        cancelled. Unless ``time`` is given, also ``max_time`` (the largest time of its
        updates, cancelled ones included) and ``times`` (each live update's time): an array
        holds updates of any times (`batch_stats` counts them per time).

        ``prepared`` has the data columns, ``__cdc_diff`` and, unless ``time`` is given,
        ``__cdc_time``; ``checks`` are the batch's own (built per batch: they hold its frontier).
        ``time``: every row's time (a batch of one time). ``fanout``: spread each bucket's
        updates over that many arrays by hash (no sort and no window: ~30% less time on big
        batches than the exact packing), where a message can exceed ``max_message_bytes`` —
        check the largest message (`batch_stats`) before writing, and pack exactly when it
        does. ``exact``: pack by running size instead, every message at most
        ``max_message_bytes``.

        ``consolidate=False`` (only with `by_bytes`): each row with a non-zero diff is an
        update of its own, with no aggregation over every row — right exactly when no two of the
        batch's rows have the same data and time. ``repeated`` is then true for an array with two
        live rows of one hash (two such rows always share one, so it is never false when they
        exist); such messages are not to be written: consolidate instead. Consolidated,
        ``repeated`` says the array holds an update made of several live rows: whether an
        unconsolidated attempt of the same rows would have found a repeat. Unconsolidated and
        spread, the updates are encoded and packed where the rows are, before the shuffle — each
        task joins its share of every array, and only those shares move, to be joined (the
        repeat check too: each task's hashes of an array, then all of them) — instead of
        shuffling every row to its bucket's task: no packing task per bucket, and a few rows
        shuffled per array instead of one per update. Each input task then holds
        `packed_groups` groups: see `GroupsInMemory`.

        ``arrays``: only the updates of these ``(bucket, array)`` pairs among ``fanout``, the
        rows of others left out before they are encoded or shuffled — to consolidate the few
        arrays an unconsolidated attempt found repeated, and keep its others.

        Consolidated and spread (not exact), data grouped as bytes — a whole batch, or only
        ``arrays`` — goes as `_combined` says: packed where the aggregation's tasks left
        the updates, each of those tasks then holding `packed_groups` groups too."""

        if not (consolidate or self.by_bytes):
            raise ValueError(
                "rows are left unconsolidated only when their data is grouped as bytes"
            )
        one_time = time is not None
        ex = self._time_exprs(one_time)
        if one_time:  # its time comes as binary literals, added where they are used
            prepared = prepared.drop(TIME)
        if self._combines(consolidate, exact):
            return self._combined(
                self._checked(prepared, checks, into=DIFF if one_time else TIME),
                fanout,
                time,
                arrays,
            )
        rows = self._checked(
            prepared, checks, into=DIFF if one_time else TIME, added=_time_columns(time, TIME_KEY)
        )
        if arrays is None and ex.rows_ordered is not None:  # grouped as bytes
            rows = rows.select(*ex.rows_ordered)
        else:
            rows = rows.withColumn(ORDER, ex.order)
            if arrays is not None:
                rows = rows.where(self._of_arrays(fanout, arrays))
            rows = rows.select(*ex.rows) if ex.rows is not None else rows.drop(TIME_KEY)
        if self._packs_in_input_tasks(consolidate, exact, arrays):  # see groups_per_packing_task
            # the shares are joined in at most a task per bucket, as packing was: else in the
            # session's shuffle partitions (200 by default), when adaptive execution is off
            item_time = [c.alias(name) for name, c in _time_columns(time, TIME_ITEM).items()]
            updates = rows.select(*ex.unconsolidated_bucketed, *item_time)
            return self._pack(
                updates, self._fanned(fanout), self._repeated_unconsolidated, ex, None
            ).coalesce(self._buckets)
        rows = rows.withColumn("__cdc_bucket", self._bucket)
        rows = rows.repartition(self._buckets, ex.bucket)
        if consolidate:
            consolidated = (
                rows.groupBy(*ex.keys).agg(*self._sums, *self._firsts).select(*ex.after_keys)
            )
            repeated = self._repeated
        else:  # each row its own update, packed in its bucket's task
            consolidated = rows.select(*ex.unconsolidated)
            repeated = self._repeated_unconsolidated
        chunk = ex.chunk_exact if exact else self._fanned(fanout)
        return self._pack(consolidated, chunk, repeated, ex, time)

    @staticmethod
    def _packs_in_input_tasks(consolidate: bool, exact: bool, arrays: Any) -> bool:
        """Whether `messages` packs where the rows are: unconsolidated and spread."""
        return not (consolidate or exact or arrays is not None)

    def _combines(self, consolidate: bool, exact: bool) -> bool:
        """Whether `messages` consolidates as `_combined` does: consolidated and
        spread, data grouped as bytes."""
        return consolidate and self.by_bytes and not exact

    def groups_per_packing_task(
        self, fanout: int, *, consolidate: bool, exact: bool = False
    ) -> int:
        """How many groups a task before the last shuffle holds computing `messages` of
        these arguments (see `GroupsInMemory`):
        `packed_groups` when it packs a share of every array — unconsolidated where the
        rows are, or consolidated the combined way where the aggregation left them — else 0:
        the updates are packed after the shuffle, a bucket per task."""
        if self._combines(consolidate, exact) or self._packs_in_input_tasks(
            consolidate, exact, None
        ):
            return packed_groups(self._buckets, fanout)
        return 0

    def _checked(
        self,
        prepared: DataFrame,
        checks: Sequence[Check],
        into: str = TIME,
        added: dict[str, Column] | None = None,
    ) -> DataFrame:
        """``prepared`` with its column ``into`` (the time, or the diff) checked: in the map
        stage, each bad row fails the task with its own message (when() evaluates a branch's
        value only for rows that take it); the checked column is what the shuffle hashes, groups
        on or sums, so the check cannot be pruned or moved past the shuffle. ``added``: columns
        added in the same step, by name."""
        last = self._last_checked.get(into)
        if (
            last is not None and last[0] is checks
        ):  # the same checks as the last batch's (built once)
            return prepared.withColumns({into: last[1], **(added or {})})
        t = F.col(into)
        checked = None
        for check in checks:
            parts = [
                self.row_json if p is ROW else F.lit(p) if isinstance(p, str) else p.cast("string")
                for p in check.parts
            ]
            fail = raise_in_job(check.kind, *parts)
            checked = (
                F.when(check.condition, fail)
                if checked is None
                else checked.when(check.condition, fail)
            )
        column = t if checked is None else checked.otherwise(t)
        self._last_checked[into] = (checks, column)
        return prepared.withColumns({into: column, **(added or {})})

    def updates(
        self, prepared: DataFrame, checks: Sequence[Check], *, one_time: bool = False
    ) -> DataFrame:
        """The batch consolidated on the executors, for the driver to finish
        (`cdc_emitter.sink.small_batch.consolidate`, as
        `EncodedRows`): one row per data and time — ``data``,
        its data record as ``to_avro`` bytes; ``h``, Spark's ``xxhash64`` of its data columns;
        ``t``; ``d``, the exact sum of its diffs (zero sums kept: their times count for the
        batch's largest); ``n``, the input rows behind it. Grouped on the
        data columns partly before the shuffle, as `_combined`; a bad row, or a sum over
        64 bits, fails the job. Only for data grouped as bytes (`by_bytes`).

        ``one_time``: every row has the batch's time, which the driver knows: the rows are
        grouped on their data alone, the checks ride on the diff, and there is no ``t``."""
        if not self.by_bytes:
            raise ValueError(
                "a batch is consolidated for the driver only when its data is grouped as bytes"
            )
        t = [] if one_time else [F.col(TIME)]
        diff = self._total_one_time if one_time else self._time_exprs(False).consolidated[0]
        return (
            self._checked(prepared, checks, into=DIFF if one_time else TIME)
            .groupBy(*self._columns, *t)
            .agg(*self._sums)
            .select(
                self._data_bytes.alias(DATA),
                self._data_hash.alias("h"),
                *t,
                "__cdc_hi",
                "__cdc_lo",
                "__cdc_rows",
                ROWS,
            )
            .select(
                F.col(DATA).alias("data"),
                "h",
                *[c.alias("t") for c in t],
                diff.alias("d"),
                F.col(ROWS).alias("n"),
            )
        )

    def _pack(
        self, updates: DataFrame, chunk: Column, repeated: Column, ex: _Exprs, time: int | None
    ) -> DataFrame:
        """Messages from ``updates`` (bucket, order, data, time, diff, repeat; and
        `TIME_ITEM` for a batch of one time, unless ``time`` is given to add it): each update
        encoded, given its array by ``chunk``, and each array's updates joined."""
        items = _with_time(updates, time, TIME_ITEM).select(*ex.items)
        if chunk is ex.chunk_exact:  # by running size
            encoded = (
                items.select(*ex.encoded)
                .withColumn("__cdc_size", self._size)
                .withColumn("__cdc_chunk", chunk)
            )
        else:  # by hash, in the same step: its null test reads the item before the size check,
            # which can only fail the job
            encoded = items.select(*ex.encoded, chunk.alias("__cdc_chunk"))
        return (
            encoded.groupBy(*ex.arrays).agg(*self._packed, repeated, *ex.times).select(*ex.message)
        )

    def _fanned(self, fanout: int) -> Column:
        """The array index among ``fanout`` per bucket (`_array_index`), built once each."""
        fanout = max(1, fanout)
        chunk = self._chunks.get(fanout)
        if chunk is None:
            chunk = self._chunks[fanout] = _array_index(F.lit(fanout))
        return chunk

    def _of_arrays(self, fanout: int, arrays: Sequence[tuple[int, int]]) -> Column:
        """Whether a row (with its `ORDER`) falls in one of ``arrays``, ``(bucket, array)``
        pairs among ``fanout`` arrays per bucket."""
        fanout = max(1, fanout)
        return (self._bucket * F.lit(fanout) + _hash_array(F.lit(fanout))).isin(
            sorted({bucket * fanout + array for bucket, array in arrays})
        )

    def _combined(
        self,
        rows: DataFrame,
        fanout: int,
        time: int | None,
        arrays: Sequence[tuple[int, int]] | None = None,
    ) -> DataFrame:
        """A batch consolidated the way Spark's own aggregation goes: grouped on the data columns
        (collations were taken off before; Spark's grouping normalizes floats as
        `normalized` does) and, unless the batch has one
        ``time``, the time, partly where the rows are, before the shuffle — so repeated rows
        shrink before they move, as the floor's do — then each update hashed, encoded and packed
        as the other ways do (only updates move, not every row): the same updates, arrays,
        counts and digest. ``arrays``: only the rows of these arrays, the others left out before
        anything else (the few arrays an unconsolidated attempt found repeated).

        The updates are packed where the aggregation's tasks leave them, as an unconsolidated
        batch is where its rows are: each of those tasks joins its share of every array, and
        only the shares are shuffled, to be joined in at most a task per bucket — not every
        update to its bucket's task (2,000,000 updates of 4M rows: about 15% less time)."""

        ex = self._time_exprs(time is not None)
        if arrays is not None:
            keyed = _with_time(rows, time, TIME_KEY).withColumn(ORDER, ex.order)
            rows = keyed.where(self._of_arrays(fanout, arrays)).drop(ORDER, TIME_KEY)
        updates = (
            _with_time(rows.groupBy(*self._columns, *ex.time).agg(*self._sums), time, TIME_KEY)
            .select(*ex.combined)
            .select(*ex.combined_updates)
        )
        return self._pack(updates, self._fanned(fanout), self._repeated, ex, time).coalesce(
            self._buckets
        )


def _with_time(df: DataFrame, time: int | None, name: str) -> DataFrame:
    """``df`` with a batch of one time's ``time`` as the binary literal column ``name``
    (`TIME_KEY` or `TIME_ITEM`); ``df`` itself for rows that carry their times."""
    added = _time_columns(time, name)
    return df.withColumns(added) if added else df


def _time_columns(time: int | None, name: str) -> dict[str, Column]:
    """The column `_with_time` adds, by name (none for rows that carry their times): for a
    step that adds others too."""
    if time is None:
        return {}
    import struct

    from cdc_emitter.protocol.varint import encode_zigzag_long

    value = struct.pack("<q", time) if name == TIME_KEY else encode_zigzag_long(time)
    return {name: F.lit(value)}


#: How many layouts' plans `MessagePlan.shared` keeps.
SHARED_PLANS = 8
_shared: dict[tuple, MessagePlan] = {}
_shared_lock = threading.Lock()
#: Data layouts whose last batch, in this process, had repeated rows in over a
#: quarter of its arrays (see `expect_repeats`); at most `SHARED_PLANS`, the most
#: recently noted last.
_repeating: dict[tuple, bool] = {}


def expect_repeats(schema: T.StructType, data_cols: Sequence[str]) -> bool:
    """Whether the last batch with this data layout, written by any sink of this
    process, had rows of the same data and time in over a quarter of its arrays. Such a batch
    is best consolidated straight away: left unconsolidated, its messages are computed, the
    arrays with a repeat found and consolidated again (all of them, the batch's whole work a
    second time, when they are over half) — more than consolidating at once. A hint for speed
    only: either way the messages written are consolidated."""
    with _shared_lock:
        return _repeating.get((schema.json(), tuple(data_cols)), False)


def note_repeats(schema: T.StructType, data_cols: Sequence[str], many: bool) -> None:
    """Record whether a batch with this data layout had repeated rows in over a
    quarter of its arrays."""
    key = (schema.json(), tuple(data_cols))
    with _shared_lock:
        _repeating.pop(key, None)
        _repeating[key] = many
        while len(_repeating) > SHARED_PLANS:
            _repeating.pop(next(iter(_repeating)))


def forget_layouts() -> None:
    """Forget what this process learnt of data layouts — the shared plans
    (`MessagePlan.shared`) and which layouts repeat rows (`expect_repeats`) — so that
    the next batch of any sink is what a new process's would be (the JVM aside): for benchmarks
    of a first batch."""
    with _shared_lock:
        _shared.clear()
        _repeating.clear()


def packed_groups(buckets: int, fanout: int) -> int:
    """How many groups a task packing where the rows are (`MessagePlan.messages`) can
    hold: every array of every bucket, and each bucket's group of cancelled updates."""
    return buckets * (max(1, fanout) + 1)


def _array_index(arrays: Column) -> Column:
    """Which of ``arrays`` arrays of its bucket an update goes to (null: no update), when
    spread: from the hash's high half. The bucket is the hash modulo the
    buckets, and an index from the same bits would leave arrays empty whenever the two counts
    share a factor (4 buckets, 10 arrays: only 5 used, each twice as big)."""
    return F.when(F.col("__cdc_item").isNull(), F.lit(None)).otherwise(_hash_array(arrays))


def _hash_array(arrays: Column) -> Column:
    """The array among ``arrays`` that a row's hash chooses, whether or not it is an update
    (see `_array_index`): where its rows are, before they are consolidated."""
    return F.pmod(F.shiftright(F.col(ORDER), 32), arrays)


def _long_bytes(c: Column) -> Column:
    """A long column's Avro encoding (a zig-zag varint), with the common diffs +1 and -1 as
    constants instead of a ``to_avro`` call each."""
    return (
        F.when(c == F.lit(1), F.lit(b"\x02"))
        .when(c == F.lit(-1), F.lit(b"\x01"))
        .otherwise(_avro_long(c))
    )


def _avro_long(c: Column) -> Column:
    """``to_avro`` of a long column that is never null where it is evaluated (an update's time
    and diff are encoded only for a non-zero diff, an array's count only when not zero): see
    `not_null_long`."""
    return to_avro(not_null_long(c), '"long"')


def _concat_all(item: Column) -> Column:
    """The aggregate that joins a group's non-null binary values into one: ``listagg`` where
    Spark has it (4.0+: about 40% less time than collecting a list and joining it, measured on
    4M updates), else the list joined as strings (the bytes pass through unchanged)."""
    if hasattr(F, "listagg"):
        return F.listagg(item)
    return F.array_join(F.collect_list(item.cast("string")), "").cast("binary")
