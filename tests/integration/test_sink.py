"""CdcSink against a real Kafka broker and a local Spark session.

Every test reads the topic back with the project's codec and reader and checks the exact
reconstructed history, the frontier and that there are no violations.
"""

from __future__ import annotations

import datetime
import decimal
import os
import re
import time
import uuid
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import JvmLog, as_history, count_messages, frame, read_history

from cdc_emitter import CdcSink
from cdc_emitter.errors import BadInputError, BrokerError, LateUpdateError, SchemaError
from cdc_emitter.protocol.codec import CdcCodec
from cdc_emitter.spark import kafka as spark_kafka
from cdc_emitter.spark import settings as spark_settings
from cdc_emitter.spark.schema import data_schema

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

KV = "k long, v string, diff long"
KV_ARROW = pa.schema([("k", pa.int64()), ("v", pa.string()), ("diff", pa.int64())])


def codec_for(df, *, drop=("diff",), **kw) -> CdcCodec:
    from pyspark.sql import types as T

    fields = [f for f in df.schema.fields if f.name not in drop]
    return CdcCodec(data_schema(T.StructType(fields)), **kw)


def kv_codec(spark) -> CdcCodec:
    return codec_for(spark.createDataFrame([], KV))


def check(bootstrap, topic, codec, expected, frontier):
    history, got_frontier, violations, reader = read_history(bootstrap, topic, codec)
    assert violations == []
    assert history == as_history(expected)
    assert got_frontier == frontier
    return reader


class FileStream:
    """A directory of parquet files, one per micro-batch (maxFilesPerTrigger=1)."""

    def __init__(self, root, schema=KV_ARROW):
        self.dir = root / "in"
        self.dir.mkdir()
        self.checkpoint = str(root / "checkpoint")
        self.schema = schema
        self.n = 0

    def add(self, rows):
        cols = list(zip(*rows)) if rows else [[] for _ in self.schema]
        table = pa.Table.from_arrays(
            [pa.array(list(c), t.type) for c, t in zip(cols, self.schema)], schema=self.schema
        )
        path = self.dir / f"batch-{self.n:04d}.parquet"
        # written under a hidden name (the file source skips those) and dated before it is moved
        # in: a file listed between its writing and its dating would be taken as today's, and
        # the source then skips every later file older than that by its maxFileAge (7 days)
        hidden = self.dir / f".{path.name}"
        pq.write_table(table, hidden)
        stamp = 1_700_000_000 + self.n  # file source orders by modification time
        os.utime(hidden, (stamp, stamp))
        os.replace(hidden, path)
        self.n += 1

    def start(self, spark, fn, *, trigger=None, ddl=KV):
        reader = spark.readStream.schema(ddl).option("maxFilesPerTrigger", 1).parquet(str(self.dir))
        writer = reader.writeStream.foreachBatch(fn).option("checkpointLocation", self.checkpoint)
        writer = writer.trigger(**(trigger or {"availableNow": True}))
        return writer.start()

    def run(self, spark, fn, **kw):
        query = self.start(spark, fn, **kw)
        query.awaitTermination(120)
        return query


BATCHES = [
    # duplicates (summed) and a row that cancels inside the batch
    [(1, "a", 1), (1, "a", 1), (2, "b", 1), (3, "c", 1), (3, "c", -1)],
    [(1, "a", -2), (4, "d", 1), (4, "d", 1), (4, "d", -1), (5, None, 3)],
    [(2, "b", -1), (6, "e", 1), (6, "e", -1)],
]


def expected_kv(batches, times):
    return [((k, v), t, d) for rows, t in zip(batches, times) for (k, v, d) in rows]


def test_streaming_query_exact_history_multi_partition(
    spark, kafka_bootstrap, topic_factory, tmp_path
):
    topic = topic_factory(3)
    stream = FileStream(tmp_path)
    for rows in BATCHES:
        stream.add(rows)
    sink = CdcSink(
        kafka_bootstrap,
        topic,
        checkpoint_location=stream.checkpoint,
        time_offset=10,
        max_message_bytes=64,
    )  # tiny messages: many of them, over all 3 partitions
    stream.run(spark, sink)
    reader = check(
        kafka_bootstrap, topic, kv_codec(spark), expected_kv(BATCHES, [10, 11, 12]), (13,)
    )
    assert reader.duplicates == 0
    assert sink.last_result.counts == {12: 1}
    partitions = {
        r.partition
        for r in __import__("cdc_emitter.kafka.reading").kafka.reading.read_topic(
            kafka_bootstrap, topic
        )
    }
    assert len(partitions) > 1


def test_jvm_path_packs_exactly_when_a_spread_message_comes_out_too_big(
    spark, kafka_bootstrap, topic_factory, monkeypatch
):
    """The JVM path spreads updates over arrays by hash; updates near half the limit make some
    array too big, spread again by the batch's size too, and the batch is then packed by running
    size before anything is written."""
    from cdc_emitter.kafka import reading as kafka_reading
    from cdc_emitter.sink import plan as sink_jvm

    topic = topic_factory(2)
    rows = [(i, "x" * (150 + i % 20), 1) for i in range(200)]
    calls = []
    messages = sink_jvm.MessagePlan.messages
    monkeypatch.setattr(
        sink_jvm.MessagePlan,
        "messages",
        lambda self, *a, **kw: calls.append(kw.get("exact", False)) or messages(self, *a, **kw),
    )
    result = CdcSink(
        kafka_bootstrap, topic, encoder="jvm", max_message_bytes=400, time_column="t"
    ).write(frame(spark, rows, KV).selectExpr("*", "1L as t"))
    assert calls == [False, False, True]
    assert result.updates == 200
    sizes = [len(r.value) for r in kafka_reading.read_topic(kafka_bootstrap, topic)]
    assert max(sizes) <= 400 and len(sizes) == result.messages
    check(kafka_bootstrap, topic, kv_codec(spark), [((k, v), 1, d) for k, v, d in rows], (2,))


def test_a_batch_bigger_than_its_spread_is_spread_again_by_its_size(
    spark, kafka_bootstrap, topic_factory, monkeypatch
):
    """A first batch's size is unknown: it is spread over at most FIRST_BUCKETS buckets of
    FANOUT_ARRAYS arrays. One that overflows them (here: rows that carry their times) is spread
    again over as many as its bytes need (no sort), before anything is written; the next batch
    starts from that size."""
    from cdc_emitter.kafka import reading as kafka_reading
    from cdc_emitter.sink import plan as sink_jvm
    from cdc_emitter.sink.distributed import FANOUT_ARRAYS, FIRST_BUCKETS

    topic = topic_factory(3)
    limit = 2032
    rows = [(i, f"value-{i:08d}-" + "x" * (i % 30), 1) for i in range(40_000)]  # ~1.4 MB of updates
    buckets = []
    messages = sink_jvm.MessagePlan.messages
    monkeypatch.setattr(
        sink_jvm.MessagePlan,
        "messages",
        lambda self, *a, **kw: (
            buckets.append((self._buckets, kw.get("fanout"), kw.get("exact", False)))
            or messages(self, *a, **kw)
        ),
    )
    sink = CdcSink(
        kafka_bootstrap,
        topic,
        encoder="jvm",
        max_message_bytes=limit,
        small_batch_rows=0,
        time_column="t",
    )
    df = frame(spark, rows, KV)
    first = sink.write(df.selectExpr("*", "1L as t"))
    assert buckets[0] == (FIRST_BUCKETS, FANOUT_ARRAYS, False)
    assert (
        len(buckets) == 2
        and buckets[1][0] * buckets[1][1] > buckets[0][0] * buckets[0][1]
        and not buckets[1][2]
    )
    assert first.updates == 40_000
    sizes = [len(r.value) for r in kafka_reading.read_topic(kafka_bootstrap, topic)]
    assert max(sizes) <= limit and len(sizes) == first.messages
    respread = buckets[1][0]
    buckets.clear()
    sink.write(
        df.selectExpr("k", "v", "-diff as diff", "2L as t")
    )  # sized from the first: one spread
    assert len(buckets) == 1 and buckets[0][0] == respread > FIRST_BUCKETS and not buckets[0][2]
    check(
        kafka_bootstrap,
        topic,
        kv_codec(spark),
        [((k, v), 1, d) for k, v, d in rows] + [((k, v), 2, -d) for k, v, d in rows],
        (3,),
    )


def test_a_first_batch_of_one_time_bigger_than_its_spread_is_spread_again_by_its_size(
    spark, kafka_bootstrap, topic_factory, monkeypatch
):
    """A first batch of one time goes on the spread guessed for it; one that overflows it is
    spread again by its size before anything is written — every message within the limit,
    every update once — and the next batch is spread for its bytes."""
    from cdc_emitter.kafka import reading as kafka_reading
    from cdc_emitter.sink import plan as sink_jvm
    from cdc_emitter.sink.distributed import FIRST_BUCKETS

    monkeypatch.setattr(sink_jvm, "_repeating", {})  # what earlier tests' batches noted
    topic = topic_factory(3)
    limit = 2032
    rows = [(i, f"value-{i:08d}-" + "x" * (i % 30), 1) for i in range(40_000)]  # ~1.4 MB of updates
    calls: list = []
    _record_messages(monkeypatch, calls)
    sink = CdcSink(
        kafka_bootstrap, topic, encoder="jvm", max_message_bytes=limit, small_batch_rows=0
    )
    df = frame(spark, rows, KV)
    first = sink.write(df, time=1)
    assert calls == ["unconsolidated", "unconsolidated"]
    assert (first.updates, first.finished_on) == (40_000, "executors")
    sizes = [len(r.value) for r in kafka_reading.read_topic(kafka_bootstrap, topic)]
    assert max(sizes) <= limit and len(sizes) == first.messages
    assert sink._paths.distributed.buckets > FIRST_BUCKETS  # sized from the first batch's bytes
    calls.clear()
    second = sink.write(df.selectExpr("k", "v", "-diff as diff"), time=2)
    assert calls == ["unconsolidated"] and second.updates == 40_000
    sizes = [len(r.value) for r in kafka_reading.read_topic(kafka_bootstrap, topic)]
    assert max(sizes) <= limit and len(sizes) == first.messages + second.messages
    check(
        kafka_bootstrap,
        topic,
        kv_codec(spark),
        [((k, v), 1, d) for k, v, d in rows] + [((k, v), 2, -d) for k, v, d in rows],
        (3,),
    )


def _record_messages(monkeypatch, calls):
    """Record how the sink asks for each batch's messages: "unconsolidated", "consolidated",
    "some arrays" (consolidated, only arrays found repeated) or "exact"."""
    from cdc_emitter.sink import plan as sink_jvm

    messages = sink_jvm.MessagePlan.messages

    def recording(self, *a, **kw):
        calls.append(
            "exact"
            if kw.get("exact")
            else "some arrays"
            if kw.get("arrays") is not None
            else "consolidated"
            if kw.get("consolidate", True)
            else "unconsolidated"
        )
        return messages(self, *a, **kw)

    monkeypatch.setattr(sink_jvm.MessagePlan, "messages", recording)


def test_jvm_path_consolidates_only_the_arrays_with_repeated_rows(
    spark, kafka_bootstrap, topic_factory, monkeypatch
):
    """A big batch of one time goes unconsolidated first (each row its own update: no
    aggregation over every row). Rows of the same data and time — duplicates, a row and its
    retraction — are found before anything is written: a few repeated arrays are consolidated
    alone; when most arrays have repeats, the whole batch is, and the next batch of that data
    layout, even by a new sink, is consolidated straight away; with few repeats, the one after
    goes unconsolidated again. Rows with a zero diff are no updates either way."""
    from cdc_emitter.sink import plan as sink_jvm

    topic = topic_factory(2)
    calls: list = []
    _record_messages(monkeypatch, calls)
    monkeypatch.setattr(sink_jvm, "_repeating", {})  # what earlier tests' batches noted
    few = [
        (5000, "a", 1),
        (5000, "a", 1),
        (5001, "b", 1),
        (5001, "b", -1),
        (5002, "c", 0),
        (5002, "c", 3),
    ]
    batches = [
        [(k, f"v{k}", 1) for k in range(2000)],  # distinct
        [(k, f"v{k}", -1) for k in range(1000)] + few,  # 3 repeated keys among ~240 arrays
        [(k, f"w{k}", 1) for k in range(1500)] * 2,  # every row twice
        [(k, f"x{k}", 2) for k in range(1500)] + few,
        [(k, f"y{k}", 1) for k in range(1500)]
        + [(6000, "z", 0), (6001, "y", 0), (6001, "y", 0), (6002, "w", 0), (6002, "w", 1)],
    ]
    seen, updates = [], []
    for time_, rows in enumerate(batches):
        calls.clear()
        if time_ in (0, 3):  # many arrays: small messages
            sink = CdcSink(
                kafka_bootstrap, topic, encoder="jvm", small_batch_rows=0, max_message_bytes=2032
            )
        updates.append(sink.write(frame(spark, rows, KV), time=time_).updates)
        seen.append(calls[:])
    assert seen == [
        ["unconsolidated"],
        ["unconsolidated", "some arrays"],
        ["unconsolidated", "consolidated"],
        ["consolidated"],
        ["unconsolidated"],
    ]
    assert updates == [2000, 1002, 1500, 1502, 1501]
    expected = [((k, v), t, d) for t, rows in enumerate(batches) for k, v, d in rows]
    check(kafka_bootstrap, topic, kv_codec(spark), expected, (5,))


def test_packing_where_the_rows_are_leaves_the_sessions_setting_as_it_was(
    spark, kafka_bootstrap, topic_factory, monkeypatch
):
    """An unconsolidated batch is packed in its input tasks, which hold a group per array: Spark's
    setting for how many groups an object aggregation holds is raised for its job only, and put
    back after it — unset, or the user's own value — whether the batch was written or refused."""
    from cdc_emitter.sink import plan as sink_jvm

    monkeypatch.setattr(sink_jvm, "_repeating", {})
    seen: list = []
    at_least = spark_settings.GroupsInMemory.at_least

    def recording(self, groups):
        at_least(self, groups)
        seen.append((groups, int(spark.conf.get(spark_settings.FALLBACK_THRESHOLD))))

    monkeypatch.setattr(spark_settings.GroupsInMemory, "at_least", recording)
    topic = topic_factory(2)
    rows = [(k, f"v{k}", 1) for k in range(3000)]
    for own in (None, "200"):
        if own is not None:
            spark.conf.set(spark_settings.FALLBACK_THRESHOLD, own)
        try:
            sink = CdcSink(kafka_bootstrap, topic, encoder="jvm", small_batch_rows=0)
            t = 0 if own is None else 2
            assert sink.write(frame(spark, rows, KV), time=t).updates == 3000
            assert spark.conf.get(spark_settings.FALLBACK_THRESHOLD, None) == own
            with pytest.raises(BadInputError, match="null diff"):  # fails in its input tasks:
                bad = spark.createDataFrame([*rows, (1, "a", None)], KV)  # rows tasks read
                sink.write(bad, time=t + 1)
            assert spark.conf.get(spark_settings.FALLBACK_THRESHOLD, None) == own
        finally:
            spark.conf.unset(spark_settings.FALLBACK_THRESHOLD)
    assert seen[0] == (8 * 65, 8 * 65)  # a new topic's first batch: 8 buckets of 64 arrays
    assert all(
        in_force >= groups for groups, in_force in seen
    )  # later: spread for the batch before


def _kv_rows(spark, n: int, *, start: int = 0, diff: Any = 1, partitions: int = 4):
    """Rows ``(k, "v<k>", diff)`` for k in [start, start + n), of :data:`KV`'s schema (nullable
    columns, as a DataFrame created from rows has), over ``partitions`` input partitions."""
    from pyspark.sql import functions as F

    k = F.when(F.col("id").isNotNull(), F.col("id"))  # nullable, as KV's
    return spark.range(start, start + n, numPartitions=partitions).select(
        k.alias("k"),
        F.concat(F.lit("v"), k.cast("string")).alias("v"),
        (diff if not isinstance(diff, int) else F.lit(diff)).cast("long").alias("diff"),
    )


def _running_sink(spark, kafka_bootstrap, topic_factory, monkeypatch, first_rows: int, **options):
    """``(sink, topic)``: a JVM-path sink on a new topic, past its first batch (of
    ``first_rows`` rows at time 0, on the spread guessed for a first batch), whose later
    batches are spread for the bytes of the one before."""
    from cdc_emitter.sink import plan as sink_jvm

    monkeypatch.setattr(sink_jvm, "_repeating", {})  # what earlier tests' batches noted
    topic = topic_factory(2)
    sink = CdcSink(kafka_bootstrap, topic, encoder="jvm", small_batch_rows=0, **options)
    assert sink.write(_kv_rows(spark, first_rows), time=0).updates == first_rows
    return sink, topic


def test_a_running_sinks_batches_of_one_time_report_the_messages_in_the_topic(
    spark, kafka_bootstrap, topic_factory, monkeypatch
):
    """After a sink's first batch, a batch of one time bet unconsolidated is checked and packed
    by one Spark job and written by a second: the groups setting raised for its packing is back
    after it (unset, or the user's own value); its figures are those of the messages in the
    topic, every message within the limit."""
    from cdc_emitter.kafka import reading as kafka_reading

    sink, topic = _running_sink(
        spark, kafka_bootstrap, topic_factory, monkeypatch, 20_000, max_message_bytes=4096
    )
    results = [sink.last_result]
    for t, own in ((1, None), (2, "200")):
        if own is not None:
            spark.conf.set(spark_settings.FALLBACK_THRESHOLD, own)
        try:
            results.append(sink.write(_kv_rows(spark, 20_000, start=t * 20_000), time=t))
            assert spark.conf.get(spark_settings.FALLBACK_THRESHOLD, None) == own
        finally:
            spark.conf.unset(spark_settings.FALLBACK_THRESHOLD)
    assert [(r.updates, r.finished_on) for r in results[1:]] == [(20_000, "executors")] * 2
    sizes = [len(r.value) for r in kafka_reading.read_topic(kafka_bootstrap, topic)]
    assert max(sizes) <= 4096 and len(sizes) == sum(r.messages for r in results)
    expected = [((k, f"v{k}"), k // 20_000, 1) for k in range(60_000)]
    check(kafka_bootstrap, topic, kv_codec(spark), expected, (3,))


def test_a_bad_row_in_a_running_sinks_batch_writes_nothing(
    spark, kafka_bootstrap, topic_factory, monkeypatch
):
    """A bad row (a null diff) among 40,000 over four input partitions, in a running sink's
    batch: the job that checks and packs it fails, so the topic is as it was; the session's
    setting is back; the same rows without it then write whole."""
    from pyspark.sql import functions as F

    sink, topic = _running_sink(spark, kafka_bootstrap, topic_factory, monkeypatch, 40_000)
    before = count_messages(kafka_bootstrap, topic, settled=True)
    bad = _kv_rows(
        spark,
        40_000,
        start=40_000,
        diff=F.when(F.col("id") == 71_234, F.lit(None)).otherwise(F.lit(1)),
    )
    calls: list = []
    _record_messages(monkeypatch, calls)
    with pytest.raises(
        BadInputError,
        match=r"""null diff in column 'diff' \(e.g. row \{"k":71234,"v":"v71234"\}\)""",
    ):
        sink.write(bad, time=1)
    assert calls == ["unconsolidated"]  # the job that checks and packs it, which failed
    assert count_messages(kafka_bootstrap, topic) == before
    assert spark.conf.get(spark_settings.FALLBACK_THRESHOLD, None) is None
    result = sink.write(bad.where("diff IS NOT NULL"), time=1)
    assert (result.lower, result.upper, result.updates) == (1, 2, 39_999)
    expected = [((k, f"v{k}"), k // 40_000, 1) for k in range(80_000) if k != 71_234]
    check(kafka_bootstrap, topic, kv_codec(spark), expected, (2,))


def test_a_bad_row_in_a_first_batch_writes_nothing(
    spark, kafka_bootstrap, topic_factory, monkeypatch
):
    """A new topic's first batch, spread before its size is known: a bad row (a null diff)
    fails the job that checks and packs it — nothing written, none brought back to the driver,
    no progress statement — and the sink, its setting back, then writes the good rows whole,
    its small messages joined on the driver."""
    from pyspark.sql import functions as F

    from cdc_emitter.sink import plan as sink_jvm

    monkeypatch.setattr(sink_jvm, "_repeating", {})  # what earlier tests' batches noted
    topic = topic_factory(2)
    sink = CdcSink(kafka_bootstrap, topic, encoder="jvm")
    bad = _kv_rows(spark, 3_000, diff=F.when(F.col("id") == 1_234, F.lit(None)).otherwise(F.lit(1)))
    calls: list = []
    _record_messages(monkeypatch, calls)
    with pytest.raises(
        BadInputError, match=r"""null diff in column 'diff' \(e.g. row \{"k":1234,"v":"v1234"\}\)"""
    ):
        sink.write(bad, time=0)
    assert calls == ["unconsolidated"]  # the job that checks and packs it, which failed
    assert count_messages(kafka_bootstrap, topic) == 0 and sink.last_result is None
    assert spark.conf.get(spark_settings.FALLBACK_THRESHOLD, None) is None
    result = sink.write(bad.where("diff IS NOT NULL"), time=0)
    assert (result.lower, result.upper, result.updates) == (0, 1, 2_999)
    assert result.finished_on == "driver"
    check(
        kafka_bootstrap,
        topic,
        kv_codec(spark),
        [((k, f"v{k}"), 0, 1) for k in range(3_000) if k != 1_234],
        (1,),
    )


def test_a_running_sinks_batch_whose_diffs_overflow_64_bits_writes_nothing(
    spark, kafka_bootstrap, topic_factory, monkeypatch
):
    """Two rows of one data and time whose diffs sum beyond 64 bits, in a running sink's batch
    bet unconsolidated: their array, found repeated, is consolidated (here the whole batch: the
    spread sized from 10,000 rows is one array) before anything is written, and the overflow
    fails the batch with the row named; diffs beyond 2^32 whose sums fit are written exactly."""
    sink, topic = _running_sink(spark, kafka_bootstrap, topic_factory, monkeypatch, 10_000)
    before = count_messages(kafka_bootstrap, topic, settled=True)
    calls: list = []
    _record_messages(monkeypatch, calls)
    big = [(k, f"v{k}", 1) for k in range(10_000, 14_000)] + [(1, "v1", 2**62), (1, "v1", 2**62)]
    with pytest.raises(BadInputError, match=r'row \{"k":1,"v":"v1"\}.*overflows'):
        sink.write(frame(spark, big, KV).repartition(4), time=1)
    assert calls == ["unconsolidated", "consolidated"]
    assert count_messages(kafka_bootstrap, topic) == before
    calls.clear()
    fits = big[:-1] + [(2, "v2", -(2**40))]
    assert sink.write(frame(spark, fits, KV).repartition(4), time=1).updates == 4002
    assert calls == ["unconsolidated"]  # no repeat: nothing consolidated
    expected = [((k, f"v{k}"), 0, 1) for k in range(10_000)] + [((k, v), 1, d) for k, v, d in fits]
    check(kafka_bootstrap, topic, kv_codec(spark), expected, (2,))


def test_a_running_sinks_repeated_arrays_and_outgrown_spread_are_mended_before_writing(
    spark, kafka_bootstrap, topic_factory, monkeypatch
):
    """The arrays a running sink's batch finds repeated (rows of one data and time) are
    consolidated again alone, and a batch that outgrew the spread its sink sized from the last
    is spread again by its size — both before anything is written. Every message within the
    limit, the figures counting each update once."""
    from cdc_emitter.kafka import reading as kafka_reading

    limit = 2032
    sink, topic = _running_sink(
        spark, kafka_bootstrap, topic_factory, monkeypatch, 2_000, max_message_bytes=limit
    )
    calls: list = []
    _record_messages(monkeypatch, calls)
    # 1. a few rows repeated: their arrays are consolidated again
    repeats = [(k, f"v{k}", 1) for k in range(2_000, 4_000)] + [
        (2_001, "v2001", 1),
        (2_002, "v2002", -1),
    ]
    result = sink.write(frame(spark, repeats, KV).repartition(4), time=1)
    assert calls == ["unconsolidated", "some arrays"] and result.updates == 1_999
    # 2. a batch 20 times bigger than its spread was sized for: spread again by its size
    calls.clear()
    result = sink.write(_kv_rows(spark, 40_000, start=4_000), time=2)
    assert calls == ["unconsolidated", "unconsolidated"] and result.updates == 40_000
    sizes = [len(r.value) for r in kafka_reading.read_topic(kafka_bootstrap, topic)]
    assert max(sizes) <= limit
    expected = (
        [((k, f"v{k}"), 0, 1) for k in range(2_000)]
        + [((k, v), 1, d) for k, v, d in repeats]
        + [((k, f"v{k}"), 2, 1) for k in range(4_000, 44_000)]
    )
    check(kafka_bootstrap, topic, kv_codec(spark), expected, (3,))


def test_a_running_sinks_batch_of_repeated_rows_is_consolidated_straight_away(
    spark, kafka_bootstrap, topic_factory, monkeypatch
):
    """A batch of a layout whose last batch repeated rows is consolidated straight away: a bad
    row fails it before anything is written; repeated rows are consolidated, each update once;
    a batch that outgrew its spread is spread again by its size before writing. Every message
    within the limit, the figures those of the topic."""
    from pyspark.sql import functions as F

    from cdc_emitter.kafka import reading as kafka_reading
    from cdc_emitter.sink import plan as sink_jvm

    limit = 2032
    sink, topic = _running_sink(
        spark, kafka_bootstrap, topic_factory, monkeypatch, 2_000, max_message_bytes=limit
    )
    results = [sink.last_result]
    calls: list = []
    _record_messages(monkeypatch, calls)
    twice = _kv_rows(spark, 2_000, start=2_000).unionByName(
        _kv_rows(spark, 2_000, start=2_000, diff=2)
    )
    sink_jvm.note_repeats(twice.schema, ["k", "v"], True)  # as a batch that repeated rows notes
    # 1. a bad row: the job that checks and packs it fails, nothing written
    before = count_messages(kafka_bootstrap, topic, settled=True)
    bad = twice.withColumn(
        "diff", F.when(F.col("k") == 3_210, F.lit(None)).otherwise(F.col("diff"))
    )
    sink_jvm.note_repeats(bad.schema, ["k", "v"], True)  # its diff nullable: a layout of its own
    with pytest.raises(
        BadInputError, match=r"""null diff in column 'diff' \(e.g. row \{"k":3210,"v":"v3210"\}\)"""
    ):
        sink.write(bad, time=1)
    assert calls == ["consolidated"]
    assert count_messages(kafka_bootstrap, topic) == before
    # 2. every row twice, diffs 1 and 2: one update of diff 3 each
    calls.clear()
    result = sink.write(twice, time=1)
    assert calls == ["consolidated"] and (result.updates, result.finished_on) == (
        2_000,
        "executors",
    )
    results.append(result)
    # 3. twenty times the rows its spread was sized for: spread again by its size
    calls.clear()
    big = _kv_rows(spark, 40_000, start=4_000)
    result = sink.write(big.unionByName(big.limit(100)), time=2)
    assert calls == ["consolidated", "consolidated"] and result.updates == 40_000
    results.append(result)
    sizes = [len(r.value) for r in kafka_reading.read_topic(kafka_bootstrap, topic)]
    assert max(sizes) <= limit and len(sizes) == sum(r.messages for r in results)
    expected = (
        [((k, f"v{k}"), 0, 1) for k in range(2_000)]
        + [((k, f"v{k}"), 1, 3) for k in range(2_000, 4_000)]
        + [((k, f"v{k}"), 2, 2 if k < 4_100 else 1) for k in range(4_000, 44_000)]
    )
    check(kafka_bootstrap, topic, kv_codec(spark), expected, (3,))


def test_a_write_task_retried_by_sparks_kafka_writer_only_duplicates(
    spark, kafka_bootstrap, topic_factory, monkeypatch
):
    """A write task of a running sink's batch fails after some of its messages reached the
    topic, and Spark retries it: the retry writes its arrays again — duplicates, which readers
    discard — and the figures, taken from the cached messages before writing, count each array
    once, so the progress statement's counts are exact."""
    from faulty_producer import FailOnceAfterRows, pickled_by_value
    from pyspark.sql import functions as F

    pickled_by_value()
    sink, topic = _running_sink(
        spark, kafka_bootstrap, topic_factory, monkeypatch, 6_000, max_message_bytes=400
    )
    write_messages = spark_kafka.write_messages
    # not Arrow-optimized (Spark 4.3's default): rows go to Python in batches of 100, so the
    # values of the batches before the failing row are written before it fails
    fail = F.udf(FailOnceAfterRows(300), "binary", useArrow=False)

    def failing(
        messages, options, headers, **kwargs
    ):  # every message in one task, which fails once
        return write_messages(
            messages.coalesce(1).withColumn("value", fail("value")), options, headers, **kwargs
        )

    monkeypatch.setattr(spark_kafka, "write_messages", failing)
    result = sink.write(_kv_rows(spark, 6_000, start=6_000), time=1)
    assert (result.updates, result.finished_on) == (6_000, "executors")
    expected = [((k, f"v{k}"), k // 6_000, 1) for k in range(12_000)]
    reader = check(kafka_bootstrap, topic, kv_codec(spark), expected, (2,))
    assert reader.duplicates >= 100  # the failed attempt's messages, written again by the retry


def test_rows_whose_hashes_collide_are_consolidated_apart(
    spark, kafka_bootstrap, topic_factory, monkeypatch
):
    """Different rows of one hash (a collision, forced here: three hashes for 600 rows) make
    an unconsolidated array look repeated; its arrays are consolidated (here, over half of them:
    the whole batch), on the data's bytes, and each row stays an update of its own."""
    from pyspark.sql import functions as F

    from cdc_emitter.sink import plan as sink_jvm

    monkeypatch.setattr(
        sink_jvm.MessagePlan, "_order", lambda self, time: F.pmod(F.col("k"), F.lit(3))
    )
    monkeypatch.setattr(sink_jvm, "_shared", {})
    monkeypatch.setattr(sink_jvm, "_repeating", {})
    calls: list = []
    _record_messages(monkeypatch, calls)
    topic = topic_factory(2)
    rows = [(k, f"v{k % 5}", 1 + k % 4) for k in range(600)]
    result = CdcSink(kafka_bootstrap, topic, encoder="jvm", small_batch_rows=0).write(
        frame(spark, rows, KV), time=3
    )
    assert calls == ["unconsolidated", "consolidated"] and result.updates == 600
    check(kafka_bootstrap, topic, kv_codec(spark), [((k, v), 3, d) for k, v, d in rows], (4,))


def test_unconsolidated_messages_hold_what_consolidated_ones_do(spark):
    """On rows that are all different, the arrays left unconsolidated hold the same updates as
    the consolidated ones — counts and digest, what a re-run compares, so it compares equal
    whichever way either attempt went (the consolidated arrays are packed per task of the
    aggregation, the others per hash: their number can differ); a repeat is flagged by both
    ways."""
    from pyspark.sql import functions as F

    from cdc_emitter.protocol.codec import union_schema
    from cdc_emitter.sink import plan as sink_jvm
    from cdc_emitter.sink import plan_stats as sink_figures

    df = frame(spark, [(k, f"v{k % 7}", 1 - 2 * (k % 2)) for k in range(3000)], KV)
    plan = sink_jvm.MessagePlan(
        schema=df.drop("diff").schema,
        data_cols=["k", "v"],
        frame=b"\0\0\0\0\1",
        update_schema=union_schema(data_schema(df.drop("diff").schema))[0]["items"],
        max_message_bytes=4000,
        buckets=3,
        partitions=None,
    )

    def stats(rows, consolidate):
        prepared = rows.select(
            "k", "v", F.lit(7).cast("long").alias("__cdc_time"), F.col("diff").alias("__cdc_diff")
        )
        return sink_figures.batch_stats(
            plan.messages(prepared, [], time=7, fanout=5, consolidate=consolidate), time=7
        )

    unconsolidated, consolidated = stats(df, False), stats(df, True)
    same = ("counts", "digest", "max_time", "repeated")
    assert [getattr(unconsolidated, k) for k in same] == [getattr(consolidated, k) for k in same]
    assert (consolidated.counts, consolidated.repeated) == ({7: 3000}, False)
    repeated = df.union(df.where("k = 42"))
    assert stats(repeated, False).repeated and stats(repeated, True).repeated


@pytest.mark.parametrize(
    "times",
    [[[5, 9, 5], [7, 9], []], [[5, 2**40, 5], [7, 2**40, 2**62], []]],
    ids=["dense", "sparse"],
)
def test_updates_are_counted_per_time_alike_on_the_driver_and_by_spark(spark, monkeypatch, times):
    """A batch of many times has its live updates counted per time from its messages' times: on
    the driver (dense times by the span, sparse ones hashed) or by a Spark aggregation — the same
    counts, in time order."""
    from collections import Counter

    from cdc_emitter.sink import plan_stats as sink_figures

    messages = frame(spark, [(t,) for t in times], "times array<long>")
    expected = dict(sorted(Counter(t for ts in times for t in ts).items()))
    updates = sum(map(len, times))
    assert list(sink_figures.counts_per_time(messages, updates).items()) == list(expected.items())
    monkeypatch.setattr(sink_figures, "DRIVER_COUNTED_UPDATES", 0)
    assert list(sink_figures.counts_per_time(messages, updates).items()) == list(expected.items())


def test_arrays_of_a_batch_of_many_times_hold_any_times_and_are_counted_per_time(
    spark, monkeypatch
):
    """A batch whose rows carry their times is packed like one of one time: a fixed number of
    arrays per bucket, each holding updates of any times — not an array (or more) per time. Its
    live updates are counted per time, its largest time counts a row of diff zero, and every
    way of packing (unconsolidated, consolidated, exact) holds the same updates, counted the
    same in time order, on the driver or by Spark."""
    from collections import Counter

    from pyspark.sql import functions as F

    from cdc_emitter.protocol.codec import CdcCodec, union_schema
    from cdc_emitter.sink import plan as sink_jvm
    from cdc_emitter.sink import plan_stats as sink_figures

    rows = [(k, f"v{k % 7}", 1, k % 400) for k in range(3000)]
    rows.append(
        (-1, "gone", 0, 999)
    )  # a zero diff at the largest time: no update, but the time counts
    df = frame(spark, rows, KV + ", t long").repartition(3)
    data = df.select("k", "v").schema
    avro = data_schema(data)
    plan = sink_jvm.MessagePlan(
        schema=data,
        data_cols=["k", "v"],
        frame=b"\0\0\0\0\1",
        update_schema=union_schema(avro)[0]["items"],
        max_message_bytes=1 << 20,
        buckets=3,
        partitions=None,
    )
    prepared = df.select(
        "k", "v", F.col("t").alias("__cdc_time"), F.col("diff").alias("__cdc_diff")
    )
    codec = CdcCodec(avro, framing="confluent", schema_id=1)
    expected = Counter(t for k, _v, _d, t in rows if k >= 0)
    figures = []
    for options in (dict(consolidate=False), {}, dict(exact=True)):
        messages = plan.messages(prepared, [], fanout=4, **options)
        stats = sink_figures.batch_stats(messages)
        assert list(stats.counts) == sorted(stats.counts)
        with monkeypatch.context() as patched:
            patched.setattr(
                sink_figures, "DRIVER_COUNTED_UPDATES", 0
            )  # counted by a Spark aggregation
            assert list(sink_figures.batch_stats(messages).counts.items()) == list(
                stats.counts.items()
            )
        values = [r.value for r in messages.where("value IS NOT NULL").collect()]
        arrays = [codec.decode(v) for v in values]
        assert len(values) == stats.messages <= 12  # 3 buckets of at most 4 arrays, for 400 times
        assert max(len({u.time for u in a}) for a in arrays) > 100  # an array holds many times
        assert Counter(u.time for a in arrays for u in a) == expected == Counter(stats.counts)
        assert stats.max_time == 999 and not stats.repeated
        figures.append((stats.counts, stats.digest, stats.groups, stats.rows))
    assert figures[0] == figures[1] == figures[2]
    # the values come with the figures when every message is at most the bytes asked for
    largest = max(map(len, values))
    carried = sink_figures.batch_stats(messages, values_up_to=largest)
    assert sorted(carried.values) == sorted(values) and carried.counts == stats.counts
    assert (stats.values, sink_figures.batch_stats(messages, values_up_to=largest - 1).values) == (
        None,
        None,
    )
    repeated = prepared.union(prepared.where("k = 42"))  # one row twice: the same data and time
    assert sink_figures.batch_stats(
        plan.messages(repeated, [], fanout=4, consolidate=False)
    ).repeated


def _generated_code(df) -> list[str]:
    """The Java code Spark generates for ``df``'s plan, a text per whole-stage subtree (without
    the plans printed beside them, which show literal values)."""
    import contextlib
    import io
    import re

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        df.explain("codegen")
    return [
        part.split("== Subtree")[0] for part in re.split(r"Generated code:", out.getvalue())[1:]
    ]


@pytest.mark.parametrize("way", ["unconsolidated", "combined", "exact"])
def test_every_time_of_a_running_sink_runs_the_same_generated_code(spark, way, generated_code):
    """A batch of one time holds its time as binary literals, which Spark hands to the code it
    generates as objects: a running sink's next batch, at a new time, runs the code the last one
    compiled (and the JVM made hot) instead of compiling every stage again — whichever way its
    messages are made."""
    from pyspark.sql import functions as F

    from cdc_emitter.protocol.codec import union_schema
    from cdc_emitter.sink import plan as sink_jvm
    from cdc_emitter.sink import plan_stats as sink_figures

    # rows that tasks read (not `frame`'s local relation, whose projections Spark's optimizer
    # computes itself): the time's literals must reach the generated code to be compared
    df = spark.createDataFrame([(k, f"v{k % 7}", 1) for k in range(500)], KV)
    data = df.drop("diff").schema
    plan = sink_jvm.MessagePlan(
        schema=data,
        data_cols=["k", "v"],
        frame=b"\0\0\0\0\1",
        update_schema=union_schema(data_schema(data))[0]["items"],
        max_message_bytes=4000,
        buckets=3,
        partitions=[1, 2],
    )
    options = {
        "unconsolidated": dict(consolidate=False),
        "combined": {},
        "exact": dict(exact=True),
    }[way]

    def messages(time_):
        prepared = df.select(
            "k",
            "v",
            F.lit(time_).cast("long").alias("__cdc_time"),
            F.col("diff").alias("__cdc_diff"),
        )
        return plan.messages(prepared, [], time=time_, fanout=4, **options)

    first, later = messages(11), messages(2**40 + 12)
    assert _generated_code(first) and _generated_code(first) == _generated_code(later)
    one, other = (
        sink_figures.batch_stats(first, time=11),
        sink_figures.batch_stats(later, time=2**40 + 12),
    )
    assert (one.counts, other.counts) == (
        {11: 500},
        {2**40 + 12: 500},
    ) and one.digest != other.digest


def test_a_batch_combined_before_the_shuffle_holds_what_one_consolidated_after_it_does(spark):
    """A whole batch of one time is consolidated on its columns, partly before the shuffle, and
    packed per task; the exact packing consolidates on the encoded bytes after the shuffle. On
    rows spread over input partitions — repeated, cancelling, zero diffs, nulls, -0.0 beside
    0.0 and NaNs of any sign — both make the same updates: counts, digest, repeats."""
    from pyspark.sql import functions as F

    from cdc_emitter.protocol.codec import union_schema
    from cdc_emitter.sink import plan as sink_jvm
    from cdc_emitter.sink import plan_stats as sink_figures

    floats = [0.0, -0.0, float("nan"), -float("nan"), 1.5]
    rows = [
        (
            k % 10,
            None if k // 50 % 7 == 0 else f"v{k // 350 % 3}",
            floats[k // 10 % 5],
            1 - 2 * (k // 7 % 2) if k % 11 else 0,
        )
        for k in range(4000)
    ]
    rows += [(999, "gone", 1.0, 1), (999, "gone", 1.0, -1)]  # cancels: no update
    df = frame(spark, rows, "k long, v string, x double, diff long").repartition(5)
    data = df.drop("diff").schema
    plan = sink_jvm.MessagePlan(
        schema=data,
        data_cols=["k", "v", "x"],
        frame=b"\0\0\0\0\1",
        update_schema=union_schema(data_schema(data))[0]["items"],
        max_message_bytes=1 << 20,
        buckets=3,
        partitions=None,
    )
    prepared = df.select(
        "k", "v", "x", F.lit(4).cast("long").alias("__cdc_time"), F.col("diff").alias("__cdc_diff")
    )
    combined = sink_figures.batch_stats(plan.messages(prepared, [], time=4, fanout=8), time=4)
    exact = sink_figures.batch_stats(
        plan.messages(prepared, [], time=4, fanout=8, exact=True), time=4
    )
    assert (combined.counts, combined.digest, combined.max_time) == (
        exact.counts,
        exact.digest,
        exact.max_time,
    )
    # 10 keys x 4 strings-or-null x 3 floats (-0.0 is 0.0, every NaN one): at most 120 updates
    assert 0 < combined.counts[4] <= 120 and combined.repeated and exact.repeated
    # the aggregation's tasks pack a share of every array, as unconsolidated input tasks do: the
    # object aggregation must keep that many groups in memory; the exact packing, after its shuffle
    assert plan.groups_per_packing_task(8, consolidate=True) == sink_jvm.packed_groups(3, 8)
    assert plan.groups_per_packing_task(8, consolidate=False) == sink_jvm.packed_groups(3, 8)
    assert plan.groups_per_packing_task(8, consolidate=True, exact=True) == 0


def test_a_bad_row_among_many_writes_nothing_and_the_batch_then_goes_through(
    spark, kafka_bootstrap, topic_factory
):
    """One bad row among 50,000 over four input partitions, in a batch the executors write:
    the job that validates fails before any message is written; the same rows without it
    then write whole."""
    from pyspark.sql import functions as F

    topic = topic_factory(2)
    df = spark.range(50_000, numPartitions=4).select(
        F.col("id").alias("k"),
        F.col("id").cast("string").alias("v"),
        F.when(F.col("id") == 31_337, F.lit(None)).otherwise(F.lit(1)).cast("long").alias("diff"),
    )
    with pytest.raises(
        BadInputError,
        match=r"""null diff in column 'diff' \(e.g. row \{"k":31337,"v":"31337"\}\)""",
    ):
        CdcSink(kafka_bootstrap, topic, encoder="jvm", small_batch_rows=0).write(df, time=0)
    assert count_messages(kafka_bootstrap, topic) == 0
    result = CdcSink(kafka_bootstrap, topic, encoder="jvm").write(
        df.where("diff IS NOT NULL"), time=0
    )
    assert (result.lower, result.upper, result.updates) == (0, 1, 49_999)
    history, frontier, violations, _ = read_history(kafka_bootstrap, topic, codec_for(df))
    assert (violations, frontier) == ([], (1,))
    assert history == as_history(((k, str(k)), 0, 1) for k in range(50_000) if k != 31_337)


def test_bad_rows_in_a_batch_combined_before_the_shuffle_write_nothing(
    spark, kafka_bootstrap, topic_factory, monkeypatch
):
    """A batch of a layout known to repeat goes combined straight away: a null diff fails it
    with the row named before any message is written, and so does a consolidated diff that
    overflows 64 bits; the same sink then writes the good rows exactly."""
    from pyspark.sql import functions as F

    from cdc_emitter.sink import plan as sink_jvm

    calls: list = []
    _record_messages(monkeypatch, calls)
    topic = topic_factory(2)
    key = F.col("id") % 5000
    rows = spark.range(20_000, numPartitions=4).select(
        "id", key.alias("k"), (key % 7).cast("string").alias("v")
    )
    bad_diffs = {  # the error, and the batch's messages asked for
        r"""null diff in column 'diff' \(e.g. row \{"k":4321,"v":"2"\}\)""": (
            F.when(F.col("id") == 14_321, F.lit(None)).otherwise(F.lit(1)),
            ["consolidated"],
        ),
        r"""the consolidated diff of row \{"k":1234,"v":"2"\} at time 0 is 18446744073709551616, """
        r"which overflows a 64-bit long": (
            F.when(F.col("id").isin(1234, 6234, 11_234, 16_234), F.lit(2**62)).otherwise(F.lit(1)),
            ["consolidated"],
        ),
    }
    sink = CdcSink(kafka_bootstrap, topic, encoder="jvm", small_batch_rows=0)
    for message, (diff, asked) in bad_diffs.items():
        monkeypatch.setattr(sink_jvm, "_repeating", {})
        df = rows.withColumn("diff", diff.cast("long")).drop("id")
        sink_jvm.note_repeats(df.schema, ["k", "v"], True)
        calls.clear()
        with pytest.raises(BadInputError, match=message):
            sink.write(df, time=0)
        assert calls == asked
        assert count_messages(kafka_bootstrap, topic) == 0
    good = rows.withColumn("diff", F.lit(1).cast("long")).drop("id")
    sink_jvm.note_repeats(good.schema, ["k", "v"], True)
    calls.clear()
    result = sink.write(good, time=0)
    assert calls == ["consolidated"] and (result.lower, result.upper, result.updates) == (
        0,
        1,
        5000,
    )
    history, frontier, violations, _ = read_history(kafka_bootstrap, topic, codec_for(good))
    assert (violations, frontier) == ([], (1,))
    assert history == as_history(((k, str(k % 7)), 0, 4) for k in range(5000))


@pytest.mark.parametrize("time_column", [None, "t"])
def test_jvm_path_spreads_over_every_array_when_buckets_and_arrays_share_a_factor(
    spark, kafka_bootstrap, topic_factory, monkeypatch, time_column
):
    """4 buckets (the session's shuffle partitions) and an even number of arrays per bucket:
    every array gets its share, no message is over the limit, and the batch is computed once
    (an array index taken from the bits that chose the bucket used only half the arrays).
    Every batch takes a fixed number of arrays per bucket (no window sizes them); with a time
    column, each array holds updates of several times, counted per time."""
    from cdc_emitter.kafka import reading as kafka_reading
    from cdc_emitter.sink import plan as sink_jvm
    from cdc_emitter.sink.distributed import FANOUT_ARRAYS

    topic = topic_factory(2)
    rows = [(i, f"value-{i % 100:03d}", 1, 1 + i % 7) for i in range(3000)]  # ~17 bytes per update
    calls = []
    messages = sink_jvm.MessagePlan.messages
    monkeypatch.setattr(
        sink_jvm.MessagePlan,
        "messages",
        lambda self, *a, **kw: (
            calls.append((kw.get("exact", False), kw.get("fanout"))) or messages(self, *a, **kw)
        ),
    )
    df = frame(spark, rows, KV + ", t long")
    # about 13 kB per bucket in arrays of half of 2,000 bytes: 12 to 14 arrays per bucket
    sink = CdcSink(
        kafka_bootstrap,
        topic,
        encoder="jvm",
        max_message_bytes=2032,
        small_batch_rows=0,
        time_column=time_column,
    )
    result = sink.write(df) if time_column else sink.write(df.drop("t"), time=1)
    assert calls == [(False, FANOUT_ARRAYS)]
    sizes = [
        len(r.value)
        for r in kafka_reading.read_topic(kafka_bootstrap, topic)
        if ("cdc-emitter-kind", b"updates") in r.headers
    ]
    assert max(sizes) <= 2032 and len(sizes) >= 40 and len(sizes) == result.messages - 1
    assert result.updates == 3000
    if time_column:
        assert result.counts == {t: sum(1 for *_, rt in rows if rt == t) for t in range(1, 8)}
        expected, upper = [((k, v), t, d) for k, v, d, t in rows], 8
    else:
        expected, upper = [((k, v), 1, d) for k, v, d, _ in rows], 2
    check(kafka_bootstrap, topic, kv_codec(spark), expected, (upper,))


@pytest.mark.parametrize("encoder", ["jvm", "python"])
def test_each_batch_reports_its_figures_to_the_listener_and_the_log(
    spark, kafka_bootstrap, topic_factory, tmp_path, caplog, encoder
):
    """Metrics: every batch's updates, messages, bytes and seconds per phase reach ``on_batch``
    and the INFO log line, and the counts are those of the messages in the topic."""
    import logging

    from cdc_emitter.kafka import reading as kafka_reading

    topic = topic_factory(2)
    stream = FileStream(tmp_path)
    for rows in BATCHES:
        stream.add(rows)
    seen = []
    sink = CdcSink(
        kafka_bootstrap,
        topic,
        checkpoint_location=stream.checkpoint,
        encoder=encoder,
        max_message_bytes=64,
        on_batch=seen.append,
    )
    with caplog.at_level(logging.INFO, logger="cdc_emitter.sink"):
        stream.run(spark, sink)
    assert [r.batch_id for r in seen] == [0, 1, 2] and seen[-1] is sink.last_result
    assert [r.updates for r in seen] == [
        2,
        3,
        1,
    ]  # consolidated: duplicates summed, cancels dropped
    values = [r.value for r in kafka_reading.read_topic(kafka_bootstrap, topic)]
    assert sum(r.messages for r in seen) == len(values)
    assert sum(r.bytes for r in seen) == sum(map(len, values))
    for result in seen:
        assert result.topic == topic and result.encoder == encoder
        assert list(result.seconds) == ["plan", "check", "commit", "write", "total"]
        assert all(v >= 0 for v in result.seconds.values())
        assert result.seconds["total"] >= sum(v for k, v in result.seconds.items() if k != "total")
    lines = [
        r.getMessage()
        for r in caplog.records
        if r.name == "cdc_emitter.sink" and "interval=" in r.message
    ]
    assert [line.split(" seconds:")[0] for line in lines] == [
        f"cdc sink topic={topic} batch={r.batch_id} interval=[{r.lower}, {r.upper}) updates={r.updates} "
        f"messages={r.messages} bytes={r.bytes}"
        for r in seen
    ]
    assert all("plan=" in line and "total=" in line for line in lines)
    # the JVM path produces a small first batch's messages on the driver (packed on the
    # executors, its size unknown), and after it finishes the next ones there
    assert [(r.finished_on, r.consolidated_on) for r in seen] == (
        [("driver", "executors"), ("driver", "driver"), ("driver", "driver")]
        if encoder == "jvm"
        else [("executors", "executors")] * 3
    )
    assert [line.rsplit(" finished on the ", 1)[1] for line in lines] == [
        r.finished_on
        + (
            " (consolidated on the executors)"
            if (r.finished_on, r.consolidated_on) == ("driver", "executors")
            else ""
        )
        for r in seen
    ]


def test_a_batch_logs_no_warning_of_sparks_avro_serializer(spark, kafka_bootstrap, topic_factory):
    """Spark's Avro serializer warns, in each task, of a column it thinks nullable given a
    non-null Avro type ("will throw runtime exception if there is a record with null value"): in
    a session at Spark's default level (WARN) that was a warning or more in every batch. Every
    long the sink encodes is known not null where encoded, and says so: batches of one time and
    of many, diffs of 1 and others, a first batch and a running sink's. (Spark warns too of a data column the DataFrame says nullable and
    its optimizer proves is not: the data's own declaration, which the topic's schema follows.)"""
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import to_avro

    rows = frame(spark, [(k, f"v{k}", 1 if k % 5 == 0 else 3) for k in range(3_000)], KV)
    with JvmLog(spark, "org.apache.spark.sql.avro") as log:
        # what the capture sees: the warning of a nullable column given a non-null type
        spark.range(3).select(to_avro(F.when(F.col("id") > 0, F.col("id")), '"long"')).collect()
        assert "nullable catalyst schema" in log.text()
        log.clear()
        one_time = CdcSink(
            kafka_bootstrap, topic_factory(2), diff_column="diff", small_batch_rows=0
        )
        many = CdcSink(
            kafka_bootstrap,
            topic_factory(2),
            diff_column="diff",
            time_column="t",
            small_batch_rows=0,
        )
        for t in (0, 1):
            assert one_time.write(rows, time=t).updates == 3_000
            assert many.write(rows.withColumn("t", F.col("k") % 3 + 3 * t)).updates == 3_000
        assert log.text() == ""


def test_a_failing_listener_fails_the_batch_after_it_was_written_and_the_rerun_only_duplicates(
    spark, kafka_bootstrap, topic_factory, tmp_path
):
    topic = topic_factory(1)
    stream = FileStream(tmp_path)
    stream.add(BATCHES[0])
    calls = []

    def listener(result):
        calls.append(result)
        if len(calls) == 1:
            raise RuntimeError("metrics backend is down")

    sink = CdcSink(kafka_bootstrap, topic, checkpoint_location=stream.checkpoint, on_batch=listener)
    with pytest.raises(Exception, match="metrics backend is down"):
        stream.run(spark, sink)
    stream.run(
        spark,
        CdcSink(kafka_bootstrap, topic, checkpoint_location=stream.checkpoint, on_batch=listener),
    )
    assert [(r.batch_id, r.reused) for r in calls] == [(0, False), (0, True)]
    # the re-run finds its claim: its updates again (duplicates), no second statement
    assert calls[0].messages >= 2 and calls[1].messages == calls[0].messages - 1
    check(kafka_bootstrap, topic, kv_codec(spark), expected_kv(BATCHES[:1], [0]), (1,))


def test_on_batch_must_be_callable():
    from cdc_emitter.errors import ConfigError

    with pytest.raises(
        ConfigError, match="on_batch must be a function taking a BatchResult, not 'log'"
    ):
        CdcSink("localhost:9092", "t", on_batch="log")


def test_the_removed_avro_encoder_names_its_replacement():
    from cdc_emitter.errors import ConfigError

    with pytest.raises(
        ConfigError,
        match=r"encoder='avro' was removed in 0\.2: use 'jvm' \(the default with "
        r"configure_spark\) or 'python'",
    ):
        CdcSink("localhost:9092", "t", encoder="avro")
    with pytest.raises(ConfigError, match="encoder must be one of 'auto', 'jvm', 'python'"):
        CdcSink("localhost:9092", "t", encoder="java")


def test_task_retry_after_partial_produce_only_duplicates(spark, kafka_bootstrap, topic_factory):
    topic = topic_factory(2)
    rows = [(i % 300, f"v{i % 300}", 1) for i in range(900)] + [(7, "v7", -3)]
    df = frame(spark, rows, KV)
    from faulty_producer import FailAfterMessages, pickled_by_value

    pickled_by_value()
    sink = CdcSink(kafka_bootstrap, topic, max_message_bytes=120, encoder="python")
    # attempt 0 of partition 0 dies after 3 acknowledged messages
    sink._paths.task_producer = FailAfterMessages(3)
    result = sink.write(df, time=4)
    assert result.updates == 299
    expected = [((k, v), 4, d) for k, v, d in rows]
    reader = check(kafka_bootstrap, topic, kv_codec(spark), expected, (5,))
    assert reader.duplicates >= 3  # the failed attempt's messages, written again by the retry


@pytest.mark.parametrize("with_log", [True, False], ids=["sink-log", "progress-headers"])
def test_crash_after_write_before_commit_restart(
    spark, kafka_bootstrap, topic_factory, tmp_path, with_log
):
    topic = topic_factory(1)
    stream = FileStream(tmp_path)
    for rows in BATCHES[:2]:
        stream.add(rows)
    sink = CdcSink(
        kafka_bootstrap, topic, checkpoint_location=stream.checkpoint if with_log else None
    )
    crashed = []
    results = []

    def crash_once(df, batch_id):
        results.append(sink(df, batch_id))
        if batch_id == 1 and not crashed:
            crashed.append(batch_id)
            raise RuntimeError("simulated driver crash after the write, before the commit")

    with pytest.raises(Exception, match="simulated driver crash"):
        stream.run(spark, crash_once)
    stream.add(BATCHES[2])
    sink2 = CdcSink(
        kafka_bootstrap, topic, checkpoint_location=stream.checkpoint if with_log else None
    )
    sink = sink2  # a new sink object, as after a driver restart
    stream.run(spark, crash_once)
    assert [(r.batch_id, r.lower, r.upper, r.reused) for r in results] == [
        (0, 0, 1, False),
        (1, 1, 2, False),
        (1, 1, 2, True),
        (2, 2, 3, False),
    ]
    reader = check(kafka_bootstrap, topic, kv_codec(spark), expected_kv(BATCHES, [0, 1, 2]), (3,))
    # batch 1's claim is in the topic (with the digest of its updates) and the re-run brings the
    # same data: its updates again, as duplicates, and no second statement
    assert results[2].messages == results[1].messages - 1
    assert results[2].counts == results[1].counts
    assert reader.duplicates == results[1].updates


TKV = "k long, v string, t long, diff long"
TKV_ARROW = pa.schema(
    [("k", pa.int64()), ("v", pa.string()), ("t", pa.int64()), ("diff", pa.int64())]
)


def test_column_mode_restart_reemits_recorded_interval(
    spark, kafka_bootstrap, topic_factory, tmp_path
):
    topic = topic_factory(1)
    stream = FileStream(tmp_path, TKV_ARROW)
    b0 = [(1, "a", 0, 1), (2, "b", 3, 1), (2, "b", 3, 1), (3, "c", 2, 1), (3, "c", 2, -1)]
    b1 = [(1, "a", 7, -1), (4, "d", 5, 1)]
    b2 = [(5, "e", 9, 1)]
    stream.add(b0)
    stream.add(b1)
    sink = CdcSink(kafka_bootstrap, topic, checkpoint_location=stream.checkpoint, time_column="t")
    crashed, results = [], []

    def crash_once(df, batch_id):
        results.append(sink(df, batch_id))
        if batch_id == 1 and not crashed:
            crashed.append(1)
            raise RuntimeError("simulated crash before commit")

    with pytest.raises(Exception, match="simulated crash"):
        stream.run(spark, crash_once, ddl=TKV)
    stream.add(b2)
    sink = CdcSink(kafka_bootstrap, topic, checkpoint_location=stream.checkpoint, time_column="t")
    stream.run(spark, crash_once, ddl=TKV)
    assert [(r.batch_id, r.lower, r.upper, r.reused) for r in results] == [
        (0, 0, 4, False),
        (1, 4, 8, False),
        (1, 4, 8, True),
        (2, 8, 10, False),
    ]
    expected = [((k, v), t, d) for k, v, t, d in b0 + b1 + b2]
    check(
        kafka_bootstrap,
        topic,
        codec_for(spark.createDataFrame([], TKV), drop=("diff", "t")),
        expected,
        (10,),
    )


@pytest.mark.parametrize("with_log", [True, False], ids=["sink-log", "progress-headers"])
def test_a_batch_counting_more_times_than_a_statement_holds_writes_several_that_tile_it(
    spark, kafka_bootstrap, topic_factory, tmp_path, with_log
):
    """Column mode with many distinct times: the progress statement is written as several
    (each fits a message, all in one transaction), and a re-run of the batch finds its claim
    by the last one and writes no statement again."""
    from cdc_emitter.kafka import reading as kafka_reading
    from cdc_emitter.protocol.codec import CdcCodec as Codec

    topic = topic_factory(2)
    stream = FileStream(tmp_path, TKV_ARROW)
    b0 = [(i, f"v{i}", 10 + i, 1) for i in range(300)]
    b1 = [(i, f"w{i}", 400 + i, 1) for i in range(200)] + [(0, "v0", 450, -1)]
    stream.add(b0)
    stream.add(b1)
    checkpoint = stream.checkpoint if with_log else None
    # (1524 - 1024) // 20 = 25 times per statement
    sink = CdcSink(
        kafka_bootstrap,
        topic,
        checkpoint_location=checkpoint,
        time_column="t",
        max_message_bytes=1524,
    )
    crashed, results = [], []

    def crash_once(df, batch_id):
        results.append(sink(df, batch_id))
        if batch_id == 0 and not crashed:
            crashed.append(0)
            raise RuntimeError("simulated crash after the statements, before Spark's commit")

    with pytest.raises(Exception, match="simulated crash"):
        stream.run(spark, crash_once, ddl=TKV)
    sink = CdcSink(
        kafka_bootstrap,
        topic,
        checkpoint_location=checkpoint,
        time_column="t",
        max_message_bytes=1524,
    )
    stream.run(spark, crash_once, ddl=TKV)
    assert [(r.batch_id, r.lower, r.upper, r.reused) for r in results] == [
        (0, 0, 310, False),
        (0, 0, 310, True),
        (1, 310, 600, False),
    ]
    # the last of batch 0's statements carries its digest: the re-run writes its updates only
    assert results[1].messages == results[0].messages - 12
    codec = codec_for(spark.createDataFrame([], TKV), drop=("diff", "t"))
    check(kafka_bootstrap, topic, codec, [((k, v), t, d) for k, v, t, d in b0 + b1], (600,))
    statements = [
        Codec.decode(codec, r.value)
        for r in kafka_reading.read_topic(kafka_bootstrap, topic)
        if dict(r.headers or []).get("cdc-emitter-kind") == b"progress"
    ]
    assert len(statements) == 12 + 8  # 300 times / 25, then 200 times / 25
    assert max(len(s.counts) for s in statements) == 25


def test_a_running_sinks_later_batches_check_and_advance_late_times(
    spark, kafka_bootstrap, topic_factory
):
    """Each batch of a running sink moves, or refuses, late times against its own frontier."""
    topic = topic_factory(1)
    codec = codec_for(spark.createDataFrame([], TKV), drop=("diff", "t"))
    moving = CdcSink(kafka_bootstrap, topic, time_column="t", late="advance", small_batch_rows=0)
    results = [
        moving.write(frame(spark, rows, TKV))
        for rows in (
            [(1, "a", 0, 1), (2, "b", 3, 1)],
            [(3, "c", 2, 1), (4, "d", 6, 1)],
            [(5, "e", 5, 1)],
        )
    ]
    assert [(r.lower, r.upper, r.counts) for r in results] == [
        (0, 4, {0: 1, 3: 1}),
        (4, 7, {4: 1, 6: 1}),
        (7, 8, {7: 1}),
    ]
    strict = CdcSink(kafka_bootstrap, topic, time_column="t", small_batch_rows=0)
    assert strict.write(frame(spark, [(6, "f", 9, 1)], TKV)).counts == {9: 1}
    before = count_messages(kafka_bootstrap, topic, settled=True)
    with pytest.raises(LateUpdateError, match=r"time 3 .*frontier 10"):
        strict.write(frame(spark, [(7, "g", 3, 1), (8, "h", 12, 1)], TKV))
    assert count_messages(kafka_bootstrap, topic) == before  # nothing written
    expected = [
        ((1, "a"), 0, 1),
        ((2, "b"), 3, 1),
        ((3, "c"), 4, 1),
        ((4, "d"), 6, 1),
        ((5, "e"), 7, 1),
        ((6, "f"), 9, 1),
    ]
    check(kafka_bootstrap, topic, codec, expected, (10,))


def test_late_updates_error_and_advance(spark, kafka_bootstrap, topic_factory):
    topic = topic_factory(1)
    codec = codec_for(spark.createDataFrame([], TKV), drop=("diff", "t"))
    first = [(1, "a", 0, 1), (2, "b", 3, 1)]
    CdcSink(kafka_bootstrap, topic, time_column="t").write(frame(spark, first, TKV))
    before = count_messages(kafka_bootstrap, topic, settled=True)

    late = [(3, "c", 2, 1), (4, "d", 6, 1), (5, "e", 4, 1)]
    with pytest.raises(LateUpdateError, match=r"time 2 .*frontier 4"):
        CdcSink(kafka_bootstrap, topic, time_column="t").write(frame(spark, late, TKV))
    assert count_messages(kafka_bootstrap, topic) == before  # nothing written

    # advance: (3, c) moves from 2 to 4 and cancels with a -1 at 4; (5, e) stays at 4
    late_adv = late + [(3, "c", 4, -1)]
    result = CdcSink(kafka_bootstrap, topic, time_column="t", late="advance").write(
        frame(spark, late_adv, TKV)
    )
    assert (result.lower, result.upper, result.counts) == (4, 7, {4: 1, 6: 1})
    expected = [((1, "a"), 0, 1), ((2, "b"), 3, 1), ((4, "d"), 6, 1), ((5, "e"), 4, 1)]
    check(kafka_bootstrap, topic, codec, expected, (7,))

    # a new default-mode sink (another writer) starts at the topic's frontier, not at batch 0
    other = CdcSink(kafka_bootstrap, topic)
    r = other(frame(spark, [(9, "z", 99, 1)], TKV).drop("t"), 0)
    assert (r.lower, r.upper) == (7, 8)
    # closing the history, after which nothing more can be written
    CdcSink(kafka_bootstrap, topic).write(frame(spark, [(8, "y", 1)], KV), close=True)
    with pytest.raises(LateUpdateError, match="closed"):
        CdcSink(kafka_bootstrap, topic).write(frame(spark, [(8, "y", 1)], KV))
    check(kafka_bootstrap, topic, codec, expected + [((9, "z"), 7, 1), ((8, "y"), 8, 1)], ())


def test_broker_restart_during_streaming_query(spark, kafka_local, tmp_path):
    """A batch that meets a stopped broker waits for it, and the query goes on exactly.

    The waits are bounded by conditions, not by a fixed schedule: on a busy machine the broker
    takes longer to stop and start, so the sink is given a longer window (``broker_timeout``)
    than its default, and a failure reports when each step happened.
    """
    from cdc_emitter.kafka.topics import ensure_topic

    bootstrap = kafka_local.bootstrap_servers
    topic = f"sink-broker-restart-{uuid.uuid4().hex[:8]}"
    ensure_topic(bootstrap, topic, create=True, partitions=2)
    stream = FileStream(tmp_path)
    sink = CdcSink(bootstrap, topic, checkpoint_location=stream.checkpoint, broker_timeout=120)
    began = time.monotonic()
    timeline: list[str] = []

    def note(event: str) -> None:
        timeline.append(f"{time.monotonic() - began:6.1f}s {event}")

    started, done = [], []

    def write(df, batch_id):
        started.append(batch_id)
        note(f"batch {batch_id} starts")
        done.append(sink(df, batch_id))
        note(f"batch {batch_id} written")

    def wait_until(condition, seconds: float, what: str) -> None:
        deadline = time.monotonic() + seconds
        while not condition():
            error = query.exception()
            assert error is None, f"{what}: the query failed: {error}; {timeline}"
            assert time.monotonic() < deadline, (  # the status asked for only on a failure
                f"{what}: not within {seconds}s; {timeline}; query status {query.status}"
            )
            time.sleep(0.2)

    stream.add(BATCHES[0])
    query = stream.start(spark, write, trigger={"processingTime": "500 milliseconds"})
    try:
        wait_until(lambda: done, 120, "the first batch")
        kafka_local.stop_broker()
        note("broker stopped")
        try:
            stream.add(BATCHES[1])  # processed while the broker is down: the sink waits
            wait_until(lambda: len(started) > 1, 60, "the second batch to start")
            time.sleep(2)
            assert len(done) == 1, f"a batch was written with the broker down; {timeline}"
        finally:
            kafka_local.start_broker()
            note("broker started")
        stream.add(BATCHES[2])
        wait_until(lambda: len(done) == 3, 240, "three batches")
    finally:
        query.stop()
    check(bootstrap, topic, kv_codec(spark), expected_kv(BATCHES, [0, 1, 2]), (3,))


@pytest.mark.parametrize("encoder", ["python", "jvm"])
def test_spark_types_round_trip(spark, kafka_bootstrap, topic_factory, encoder, generated_code):
    from pyspark.sql import types as T

    topic = topic_factory(3)
    schema = T.StructType(
        [
            T.StructField("id", T.LongType(), False),
            T.StructField("i", T.IntegerType()),
            T.StructField("sh", T.ShortType()),
            T.StructField("by", T.ByteType()),
            T.StructField("d", T.DoubleType()),
            T.StructField("f", T.FloatType()),
            T.StructField("b", T.BooleanType()),
            T.StructField("s", T.StringType()),
            T.StructField("bin", T.BinaryType()),
            T.StructField("dec", T.DecimalType(20, 4)),
            T.StructField("dt", T.DateType()),
            T.StructField("ts", T.TimestampType()),
            T.StructField("ntz", T.TimestampNTZType()),
            T.StructField("arr", T.ArrayType(T.LongType(), True)),
            T.StructField("m", T.MapType(T.StringType(), T.StringType(), True)),
            T.StructField(
                "st",
                T.StructType(
                    [
                        T.StructField("x", T.LongType()),
                        T.StructField("tags", T.ArrayType(T.StringType(), False)),
                        T.StructField("inner", T.StructType([T.StructField("y", T.DoubleType())])),
                    ]
                ),
            ),
            T.StructField("diff", T.LongType(), False),
        ]
    )
    utc = datetime.timezone.utc
    full = (
        1,
        2,
        3,
        4,
        1.5,
        0.25,
        True,
        "ünïcode",
        b"\x00\xff",
        decimal.Decimal("12345.6789"),
        datetime.date(2024, 2, 29),
        datetime.datetime(2024, 1, 2, 3, 4, 5, 678901, tzinfo=utc),
        datetime.datetime(2024, 1, 2, 3, 4, 5, 6),
        [1, None, 3],
        {"a": "x", "b": None},
        (7, ["p", "q"], (2.5,)),
    )
    empty = (2,) + (None,) * 15
    map_order = full[:14] + ({"b": None, "a": "x"},) + full[15:]  # same map, other order
    rows = [full + (1,), empty + (1,), map_order + (1,), (3,) + full[1:] + (-1,)]
    df = frame(spark, rows, schema)
    result = CdcSink(kafka_bootstrap, topic, encoder=encoder, max_message_bytes=400).write(
        df, time=2
    )
    assert result.counts == {2: 3}
    decoded = (
        1,
        2,
        3,
        4,
        1.5,
        0.25,
        True,
        "ünïcode",
        b"\x00\xff",
        decimal.Decimal("12345.6789"),
        datetime.date(2024, 2, 29),
        datetime.datetime(2024, 1, 2, 3, 4, 5, 678901, tzinfo=utc),
        datetime.datetime(2024, 1, 2, 3, 4, 5, 6),
        (1, None, 3),
        (("a", "x"), ("b", None)),
        (7, ("p", "q"), (2.5,)),
    )
    expected = [(decoded, 2, 2), (empty, 2, 1), ((3,) + decoded[1:], 2, -1)]
    check(kafka_bootstrap, topic, codec_for(df), expected, (3,))


BAD = {
    "null-time": (
        "k long, t long",
        [(1, 0), (2, None)],
        {"time_column": "t"},
        BadInputError,
        r"null time in column 't'",
    ),
    "negative-time": (
        "k long, t long",
        [(1, 0), (2, -5)],
        {"time_column": "t"},
        BadInputError,
        r"negative time -5 in column 't'",
    ),
    "diff-overflow": (
        "k long, diff long",
        [(1, 2**62), (1, 2**62), (2, 1)],
        {},
        BadInputError,
        r'row \{"k":1\}.*overflows',
    ),
    "null-diff": (
        "k long, diff long",
        [(1, 1), (2, None)],
        {},
        BadInputError,
        r"""null diff in column 'diff' \(e.g. row \{"k":2\}\)""",
    ),
    "unsupported-type": (
        "k long, span interval day to second",
        None,
        {},
        SchemaError,
        r"column 'span' has type interval day",
    ),
    "oversized-row": (
        "k long, v string",
        [(1, "x"), (2, "y" * 5000)],
        {"max_message_bytes": 2000},
        BadInputError,
        r"over the message limit of 2000",
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_fails_before_the_first_message(spark, kafka_bootstrap, topic_factory, case):
    ddl, rows, options, error, pattern = BAD[case]
    topic = topic_factory(1)
    if rows is None:
        df = spark.sql("SELECT 1L AS k, INTERVAL '1' DAY AS span")
    else:
        df = frame(spark, rows, ddl)
    with pytest.raises(error, match=pattern) as info:
        CdcSink(kafka_bootstrap, topic, **options).write(df)
    if error is BadInputError:  # named by its topic (put back into the plan's reusable texts)
        assert str(info.value).startswith(f"topic {topic!r}: ")
    assert count_messages(kafka_bootstrap, topic) == 0
    assert spark.conf.get(spark_settings.FALLBACK_THRESHOLD, None) is None  # put back


@pytest.mark.parametrize("case", ["null-time", "oversized-row"])
def test_bad_input_read_in_tasks_fails_the_same(spark, kafka_bootstrap, topic_factory, case):
    """The cases above on local rows (`frame`: a local relation, as every DataFrame of local rows
    on Spark Connect is) may fail while Spark plans the batch's cache, its optimizer computing the
    checks itself; here the rows are an RDD of Python rows, which only tasks read, and a bad row
    fails a job: the same error either way."""
    ddl, rows, options, error, pattern = BAD[case]
    topic = topic_factory(1)
    with pytest.raises(error, match=pattern) as info:
        CdcSink(kafka_bootstrap, topic, **options).write(spark.createDataFrame(rows, ddl))
    assert str(info.value).startswith(f"topic {topic!r}: ")
    assert count_messages(kafka_bootstrap, topic) == 0


def test_missing_topic_is_a_clear_error_unless_created(spark, kafka_bootstrap):
    topic = f"sink-missing-{uuid.uuid4().hex[:8]}"
    df = frame(spark, [(1, "a", 1)], KV)
    with pytest.raises(BrokerError, match="does not exist"):
        CdcSink(kafka_bootstrap, topic).write(df)
    config = {"client.id": "cdc-sink-test"}
    sink = CdcSink(
        kafka_bootstrap, topic, create_topic=True, topic_partitions=2, producer_config=config
    )
    sink.write(df, time=0, close=True)
    assert config == {"client.id": "cdc-sink-test"}
    check(kafka_bootstrap, topic, kv_codec(spark), [((1, "a"), 0, 1)], ())


def test_frontier_found_behind_many_update_messages(kafka_bootstrap, topic_factory):
    """The tail is read backwards in growing chunks; foreign (header-less) progress decodes too."""
    from cdc_emitter.kafka.frontier import topic_frontier
    from cdc_emitter.kafka.producer import CdcProducer
    from cdc_emitter.protocol import Progress
    from cdc_emitter.protocol.headers import (
        HEADER_BATCH,
        HEADER_KIND,
        HEADER_LOWER,
        HEADER_UPPER,
        HEADER_WRITER,
    )

    codec = CdcCodec({"type": "record", "name": "data", "fields": [{"name": "k", "type": "long"}]})
    topic = topic_factory(2)
    with CdcProducer(kafka_bootstrap, topic) as producer:
        producer.produce(codec.encode_progress(Progress((0,), (3,), ())), partition=0)  # no headers
    assert topic_frontier(kafka_bootstrap, topic, decode=codec.decode).frontier == 3
    assert topic_frontier(kafka_bootstrap, topic).frontier == 0  # not recognisable without decode
    ours = [
        (HEADER_KIND, b"progress"),
        (HEADER_WRITER, b"w"),
        (HEADER_BATCH, b"7"),
        (HEADER_LOWER, b"3"),
        (HEADER_UPPER, b"9"),
    ]
    update = codec.encode_updates([((1,), 3, 1)])[0]
    with CdcProducer(kafka_bootstrap, topic) as producer:
        producer.produce(
            codec.encode_progress(Progress((3,), (9,), ((3, 1),))), headers=ours, partition=0
        )
        for i in range(700):
            producer.produce(update, headers=[(HEADER_KIND, b"updates")], partition=i % 2)
    state = topic_frontier(kafka_bootstrap, topic, decode=codec.decode)
    assert (state.frontier, state.writer, state.batch) == (9, "w", 7)
    assert state.recorded("w", 7) == (3, 9)


def test_sink_log_put_get_prune(spark, tmp_path):
    from cdc_emitter.sink.log import SinkLog, SinkLogEntry

    log = SinkLog(spark, f"file://{tmp_path}/checkpoint", keep=3)
    assert log.get(0) is None and log.latest() is None
    for b in range(5):
        assert log.put(SinkLogEntry(b, b * 2, b * 2 + 2, b * 2 + 1, "w", "t")).lower == b * 2
    # the first decision for a batch wins
    assert log.put(SinkLogEntry(4, 100, 200, None, "w", "t")) == SinkLogEntry(4, 8, 10, 9, "w", "t")
    assert log.batch_ids() == [2, 3, 4]
    assert log.get(1) is None and log.get(3) == SinkLogEntry(3, 6, 8, 7, "w", "t")
    assert log.latest().batch_id == 4
    closed = log.put(SinkLogEntry(5, 10, None, None, "w", "t"))
    assert SinkLog(spark, f"file://{tmp_path}/checkpoint").get(5) == closed
    assert log.batch_ids() == [3, 4, 5]
    # another process's log: its first record prunes by listing what the last one left; later
    # ones by the ids it holds, gaps included
    again = SinkLog(spark, f"file://{tmp_path}/checkpoint", keep=2)
    again.put(SinkLogEntry(6, 12, 14, 13, "w", "t"))
    assert again.batch_ids() == [5, 6]
    again.put(SinkLogEntry(7, 14, 16, 15, "w", "t"))
    assert again.batch_ids() == [6, 7]
    again.put(SinkLogEntry(10, 20, 22, 21, "w", "t"))  # batches 8 and 9 recorded nothing
    assert again.batch_ids() == [7, 10]
    again.put(SinkLogEntry(11, 22, 24, 23, "w", "t"))
    assert again.batch_ids() == [10, 11]


def test_a_sink_log_record_written_after_its_batch_fails_the_next_batch_if_it_fails(
    spark, kafka_bootstrap, topic_factory, tmp_path, monkeypatch
):
    """A batch's sink log record is written by a thread after the batch returns: one that fails
    fails the sink's next batch, naming its own; a re-run of the batch without a record finds
    its claim in the topic and writes it again under it."""
    from cdc_emitter.errors import CdcError
    from cdc_emitter.sink.log import SinkLog

    topic, checkpoint = topic_factory(1), f"file://{tmp_path}/checkpoint"
    df = frame(spark, [(1, "a"), (2, "b")], "k long, v string")
    put = SinkLog.put

    def disk_full(self, entry):
        raise OSError("disk full")

    monkeypatch.setattr(SinkLog, "put", disk_full)
    # a writer id, as a restarted query's own: stable across sinks
    sink = CdcSink(kafka_bootstrap, topic, checkpoint_location=checkpoint, writer_id="query-1")
    first = sink(df, 0)
    assert (first.lower, first.upper, first.reused) == (0, 1, False)
    monkeypatch.setattr(SinkLog, "put", put)
    with pytest.raises(CdcError) as raised:
        sink(df, 1)
    assert str(raised.value).startswith(
        f"topic {topic!r} batch 0: its interval could not be recorded in the sink log "
        f"{checkpoint}/cdc-emitter-sink: disk full"
    ), str(raised.value)
    assert SinkLog(spark, checkpoint).get(0) is None
    again = CdcSink(kafka_bootstrap, topic, checkpoint_location=checkpoint, writer_id="query-1")(
        df, 0
    )
    assert (again.lower, again.upper, again.reused) == (0, 1, True)
    codec = CdcCodec(data_schema(df.schema))
    history, frontier, violations, _reader = read_history(kafka_bootstrap, topic, codec)
    assert (frontier, violations) == ((1,), [])
    assert history == as_history([((1, "a"), 0, 1), ((2, "b"), 0, 1)])


def test_bucket_labels_go_each_to_a_task_of_their_own(spark):
    """The JVM path's buckets are labels that Spark's hash partitioning sends one to a task
    (``spark_hash_long`` is Spark's ``hash`` of a long, checked here against Spark itself)."""
    from pyspark.sql import functions as F

    from cdc_emitter.spark.columns import bucket_of, partition_labels, spark_hash_long

    values = [0, 1, -1, 7, 2**40 + 7, -(2**63), 2**63 - 1, 123456789]
    hashed = frame(spark, [(v,) for v in values], "v long").select(F.hash("v").alias("h")).collect()
    assert [r.h for r in hashed] == [spark_hash_long(v) for v in values]
    for count in (1, 3, 4, 8, 200):
        labels = partition_labels(count)
        hashes = spark.range(-3 * count, 3 * count).select(F.col("id").alias("order"))
        placed = (
            hashes.withColumn("b", bucket_of(F.col("order"), count))
            .repartition(count, "b")
            .select("b", F.spark_partition_id().alias("p"))
            .distinct()
            .collect()
        )
        assert sorted((r.p, r.b) for r in placed) == list(enumerate(labels))


def test_message_plans_are_shared_by_sinks_of_one_layout(
    spark, kafka_bootstrap, topic_factory, monkeypatch
):
    """A new sink of a layout already planned reuses its plan (building one is some 1,500
    round trips to the JVM); another layout gets its own; the least recently used go first."""
    from cdc_emitter.protocol.codec import union_schema
    from cdc_emitter.sink import plan as sink_jvm
    from cdc_emitter.spark.schema import data_schema

    built = []
    original = sink_jvm.MessagePlan.__init__

    def counting(self, **layout):
        built.append(layout["buckets"])
        original(self, **layout)

    monkeypatch.setattr(sink_jvm.MessagePlan, "__init__", counting)
    monkeypatch.setattr(sink_jvm, "_shared", {})
    df = frame(spark, [(i, f"v{i}") for i in range(20)], "k long, v string")
    for _ in range(2):  # two sinks, one layout: one plan
        CdcSink(kafka_bootstrap, topic_factory(1), encoder="jvm", small_batch_rows=0).write(
            df, time=1
        )
    assert len(built) == 1

    schema = df.schema
    layout = dict(
        schema=schema,
        data_cols=["k", "v"],
        frame=b"\0\0\0\0\1",
        max_message_bytes=1000,
        update_schema=union_schema(data_schema(schema))[0]["items"],
        partitions=None,
    )
    first = sink_jvm.MessagePlan.shared(type(spark), buckets=2, **layout)
    assert sink_jvm.MessagePlan.shared(type(spark), buckets=2, **layout) is first
    assert sink_jvm.MessagePlan.shared(type(spark), buckets=3, **layout) is not first
    for buckets in range(10, 10 + sink_jvm.SHARED_PLANS):  # first is now the least recently used
        sink_jvm.MessagePlan.shared(type(spark), buckets=buckets, **layout)
    assert len(sink_jvm._shared) == sink_jvm.SHARED_PLANS
    assert sink_jvm.MessagePlan.shared(type(spark), buckets=2, **layout) is not first


@pytest.mark.parametrize("encoder", ["jvm", "python"])
def test_a_megabyte_row_over_the_limit_is_shown_cut_and_nothing_is_written(
    spark, kafka_bootstrap, topic_factory, encoder
):
    topic = topic_factory(1)
    rows = [(k, "z" * (1_000_000 if k == 7 else 3), 1) for k in range(20)]
    sink = CdcSink(kafka_bootstrap, topic, encoder=encoder, small_batch_rows=0, create_topic=True)
    with pytest.raises(BadInputError) as info:
        sink.write(frame(spark, rows, KV), time=0)
    text = str(info.value)
    assert len(text) < 600 and "\n" not in text, text[:1000]
    assert re.search(r'row \{"k":7,"v":"z{100}.*… \(\d+ more characters\)', text), text
    assert count_messages(kafka_bootstrap, topic) == 0
