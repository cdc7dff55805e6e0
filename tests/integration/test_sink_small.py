"""Small batches finished on the driver (:mod:`cdc_emitter.sink.driver`) against a real broker: the
same history, digest and guards as the distributed way, and nothing written on bad input."""

from __future__ import annotations

import datetime
import decimal
import json
import math
import threading
import time
import uuid

import pytest
from helpers import as_history, count_messages, frame, read_history

from cdc_emitter import CdcSink
from cdc_emitter.errors import BadInputError, LateUpdateError, ReplayError
from cdc_emitter.kafka.reading import end_offsets, read_topic
from cdc_emitter.protocol.codec import CdcCodec
from cdc_emitter.protocol.headers import HEADER_DIGEST, HEADER_KIND, HEADER_SHAPE
from cdc_emitter.sink.sink import SMALL_BATCH_ROWS as SMALL_DEFAULT
from cdc_emitter.spark.schema import data_schema

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

ROWS_DDL = (
    "id long, x double, f float, s string, dec decimal(20,4), dt date, "
    "st struct<a: double, tags: array<string>>, arr array<double>, diff long"
)


def typed_rows():
    """Rows whose equal values are not all equal bytes (-0.0 and 0.0; NaN), nulls, nesting,
    duplicates and a cancellation."""
    day = datetime.date(2024, 2, 29)
    dec = decimal.Decimal("12.5000")
    nan = float("nan")
    return [
        (1, 0.0, 0.0, "a", dec, day, (0.0, ["p"]), [0.0, 1.5], 1),
        (
            1,
            -0.0,
            -0.0,
            "a",
            dec,
            day,
            (-0.0, ["p"]),
            [-0.0, 1.5],
            2,
        ),  # the same row as the one above
        (2, nan, nan, "ü", None, None, (nan, []), [nan], 1),
        (2, nan, nan, "ü", None, None, (nan, []), [nan], 1),
        (3, None, None, None, None, None, None, None, 5),
        (4, 2.5, 1.25, "z", dec, day, (1.0, None), [], 1),
        (4, 2.5, 1.25, "z", dec, day, (1.0, None), [], -1),  # cancels
    ]


def digests(bootstrap, topic):
    """The digest header of each progress statement, in offset order."""
    return [
        dict(r.headers)[HEADER_DIGEST].decode()
        for r in read_topic(bootstrap, topic)
        if HEADER_DIGEST in dict(r.headers)
    ]


def normal(history):
    """A history with NaN made comparable (NaN != NaN)."""

    def fix(v):
        if isinstance(v, float) and math.isnan(v):
            return "NaN"
        if isinstance(v, tuple):
            return tuple(map(fix, v))
        return v

    return [(fix(u.data), u.time, u.diff) for u in history]


def _recording_messages(monkeypatch) -> list:
    """How the sink asks for each batch's messages, as ``(consolidated, only some arrays)``."""
    from cdc_emitter.sink import plan as sink_jvm

    calls: list = []
    messages = sink_jvm.MessagePlan.messages

    def recording(self, *a, **kw):
        calls.append((kw.get("consolidate", True), kw.get("arrays") is not None))
        return messages(self, *a, **kw)

    monkeypatch.setattr(sink_jvm.MessagePlan, "messages", recording)
    monkeypatch.setattr(sink_jvm, "_repeating", {})  # what earlier tests' batches noted
    return calls


def test_a_small_first_batch_is_joined_into_few_messages_on_the_driver(
    spark, kafka_bootstrap, topic_factory, monkeypatch
):
    """A first batch is spread before its size is known (hundreds of arrays): a small one's
    messages are brought back by the job that checks and packs them — none written by it — and
    joined on the driver into as few as hold them, the same updates as the executors write
    them with small_batch_rows=0, where every message is Spark's."""
    df = frame(spark, [(i, f"v{i % 7}") for i in range(3000)], "k long, v string")
    codec = CdcCodec(data_schema(df.schema))
    calls = _recording_messages(monkeypatch)
    seen = {}
    for rows in (SMALL_DEFAULT, 0):
        topic = topic_factory(3)
        result = CdcSink(
            kafka_bootstrap, topic, small_batch_rows=rows, max_message_bytes=20_000
        ).write(df, time=4)
        history, frontier, violations, _ = read_history(kafka_bootstrap, topic, codec)
        assert (violations, frontier, result.counts) == ([], (5,), {4: 3000})
        seen[rows] = (result, as_history(history))
        assert calls == [(False, False)]  # packed unconsolidated once: nothing computed again
        calls.clear()
    joined, spread = seen[SMALL_DEFAULT][0], seen[0][0]
    assert (joined.finished_on, joined.consolidated_on) == ("driver", "executors")
    assert spread.finished_on == "executors"
    # about 33 KB of updates: 2 messages of at most 20 KB, where the spread made hundreds; each
    # result counts its progress statement too
    assert joined.messages == 3 and spread.messages > 100
    assert seen[SMALL_DEFAULT][1] == seen[0][1]


def test_a_small_first_batch_with_repeated_rows_is_consolidated_and_joined(
    spark, kafka_bootstrap, topic_factory, monkeypatch
):
    """A small first batch bet unconsolidated whose every row comes twice: every array has a
    repeat, so the batch is consolidated again before anything is written, and joined on the
    driver — a few full messages, each update once with its diffs summed."""
    rows = [(i, f"v{i % 7}", 1 + i % 3) for i in range(2000)]
    df = frame(spark, rows * 2, "k long, v string, diff long")
    calls = _recording_messages(monkeypatch)
    topic = topic_factory(2)
    result = CdcSink(kafka_bootstrap, topic, max_message_bytes=20_000).write(df, time=2)
    assert calls == [
        (False, False),
        (True, False),
    ]  # packed unconsolidated, then (most arrays repeated) the whole batch consolidated
    assert (result.finished_on, result.consolidated_on, result.counts) == (
        "driver",
        "executors",
        {2: 2000},
    )
    assert (
        result.messages == 1 + 1
    )  # about 18 KB of updates in one message, and the progress statement
    # the statement, its transaction's commit marker, the update message
    assert count_messages(kafka_bootstrap, topic) == 3
    history, frontier, violations, _ = read_history(
        kafka_bootstrap, topic, CdcCodec(data_schema(df.drop("diff").schema))
    )
    assert (violations, frontier) == ([], (3,))
    assert as_history(history) == as_history([((k, v), 2, 2 * d) for k, v, d in rows])


def test_a_small_batch_on_the_driver_writes_what_the_executors_would(
    spark, kafka_bootstrap, topic_factory
):
    df = frame(spark, typed_rows(), ROWS_DDL)
    warm_up = frame(spark, typed_rows()[:1], ROWS_DDL)
    results = {}
    for way, rows in (("driver", 100_000), ("executors", 0)):
        topic = topic_factory(3)
        sink = CdcSink(kafka_bootstrap, topic, small_batch_rows=rows)
        assert (
            sink.write(warm_up, time=0).consolidated_on == "executors"
        )  # a first batch: size unknown
        result = sink.write(df, time=1)
        assert result.finished_on == way
        codec = CdcCodec(data_schema(df.drop("diff").schema))
        history, frontier, violations, _ = read_history(kafka_bootstrap, topic, codec)
        assert (violations, frontier) == ([], (2,))
        results[way] = (result.counts, normal(history), digests(kafka_bootstrap, topic))
    assert results["driver"] == results["executors"]
    counts, history, _ = results["driver"]
    assert counts == {1: 3}  # -0.0 rows joined the 0.0 row, NaN rows joined, row 4 cancelled
    assert [(d[0], t, n) for d, t, n in history if t == 1] == [(1, 1, 3), (2, 1, 2), (3, 1, 5)]


def test_strings_equal_under_a_collation_stay_apart_on_both_ways(
    spark, kafka_bootstrap, topic_factory
):
    """'A' and 'a' group together under UTF8_LCASE, but they are different data in the topic
    (Avro, readers and Materialize compare bytes): both ways consolidate by what is written."""
    from pyspark.sql import types as T

    if not hasattr(T.StringType(), "collation"):
        pytest.skip("collations need Spark 4")
    schema = T.StructType(
        [
            T.StructField("k", T.LongType()),
            T.StructField("v", T.StringType("UTF8_LCASE")),
            T.StructField("diff", T.LongType()),
        ]
    )
    df = frame(spark, [(1, "A", 1), (1, "a", 2), (1, "a", 1), (2, "B", 1)], schema)
    for rows in (100_000, 0):  # the driver after a first batch, or the executors every time
        topic = topic_factory(2)
        sink = CdcSink(kafka_bootstrap, topic, small_batch_rows=rows)
        sink.write(df, time=0)
        sink.write(df, time=1)
        codec = CdcCodec(data_schema(df.drop("diff").schema))
        history, frontier, violations, _ = read_history(kafka_bootstrap, topic, codec)
        assert (violations, frontier) == ([], (2,))
        assert history == as_history(
            [
                (row, t, n)
                for t in (0, 1)
                for row, n in (((1, "A"), 1), ((1, "a"), 3), ((2, "B"), 1))
            ]
        )


def test_the_way_follows_the_size_of_the_last_batch(spark, kafka_bootstrap, topic_factory):
    topic = topic_factory(1)
    sink = CdcSink(kafka_bootstrap, topic, small_batch_rows=3)
    frames = [
        frame(spark, [(i, "v", 1) for i in range(n)], "k long, v string, diff long")
        for n in (2, 2, 10, 10, 1, 0, 2)
    ]
    ways = [sink.write(df).finished_on for df in frames]
    # the first batch's size is unknown: the executors' way, whose few small messages come back
    # with its figures and are produced on the driver; a batch over 3 rows sends the next one
    # to the executors
    assert ways == ["driver", "driver", "driver", "executors", "executors", "driver", "driver"]
    codec = CdcCodec(data_schema(frames[0].drop("diff").schema))
    history, frontier, violations, _ = read_history(kafka_bootstrap, topic, codec)
    assert (violations, frontier) == ([], (7,))
    expected = [((i, "v"), t, 1) for t, df in enumerate(frames) for i in range(df.count())]
    assert history == as_history(expected)


@pytest.mark.parametrize("time_column", [None, "t"])
def test_rows_that_consolidate_to_few_updates_go_to_the_driver_as_updates(
    spark, kafka_bootstrap, topic_factory, time_column
):
    """The driver would take every row, not every update: after 40 rows over 2 updates (limit 10),
    the next batch is consolidated on the executors and only its updates come to the driver — also
    40 rows whose 4 updates all cancel. A batch sent that way that has 30 updates after all is
    packed on the executors as a batch of unknown size, as a first batch is (its small message
    produced on the driver), and the next is written from the executors. Every way writes the
    same history. (A first batch's size is unknown: it is packed on the executors, and its
    small message produced on the driver.)"""
    from pyspark.sql import functions as F

    topic = topic_factory(2)
    sink = CdcSink(kafka_bootstrap, topic, small_batch_rows=10, time_column=time_column)
    ddl = "k long, v string, diff long"
    frames = {
        "few": frame(spark, [(7, "v", 1)], ddl),
        "many": frame(spark, [(i % 2, "v", 1) for i in range(40)], ddl),
        "cancel": frame(spark, [(i % 4, "v", 1 if i < 20 else -1) for i in range(40)], ddl),
        "spread": frame(spark, [(i % 30, "v", 1) for i in range(40)], ddl),
    }
    updates = {
        "few": [(7, 1)],
        "many": [(0, 20), (1, 20)],
        "cancel": [],
        "spread": [(k, 2 if k < 10 else 1) for k in range(30)],
    }
    kinds = [
        "few",
        "few",
        "many",
        "cancel",
        "few",
        "few",
        "many",
        "many",
        "cancel",
        "few",
        "few",
        "many",
        "spread",
        "few",
    ]
    batches = [frames[kind] for kind in kinds]
    if time_column is not None:  # each batch at a time of its own
        batches = [df.withColumn("t", F.lit(i).cast("long")) for i, df in enumerate(batches)]
    results = [sink.write(df) for df in batches]
    ex, dr, after = ("executors", "executors"), ("driver", "driver"), ("driver", "executors")
    assert [(r.finished_on, r.consolidated_on) for r in results] == [
        after,
        dr,
        dr,
        after,
        after,
        dr,
        dr,
        after,
        after,
        after,
        dr,
        dr,
        after,
        ex,
    ]
    assert [r.updates for r in results] == [len(updates[kind]) for kind in kinds]
    codec = CdcCodec(data_schema(frames["few"].drop("diff").schema))
    history, frontier, violations, _ = read_history(kafka_bootstrap, topic, codec)
    assert (violations, frontier) == ([], (len(kinds),))
    assert history == as_history(
        [((k, "v"), t, n) for t, kind in enumerate(kinds) for k, n in updates[kind]]
    )


SMALL_BAD = {
    "null-time": (
        "k long, t long",
        [(1, 5), (2, None)],
        {"time_column": "t"},
        BadInputError,
        r"""null time in column 't' \(e.g. row \{"k":2\}\)""",
    ),
    "negative-time": (
        "k long, t long",
        [(1, 5), (2, -5)],
        {"time_column": "t"},
        BadInputError,
        r"""negative time -5 in column 't' \(e.g. row \{"k":2\}\)""",
    ),
    "late-time": (
        "k long, t long",
        [(1, 5), (2, 0)],
        {"time_column": "t"},
        LateUpdateError,
        r"""update at time 0 in column 't' is late \(e.g. row \{"k":2\}\): the """
        r"topic is complete up to frontier 1",
    ),
    "null-diff": (
        "k long, diff long",
        [(1, 1), (2, None)],
        {},
        BadInputError,
        r"""null diff in column 'diff' \(e.g. row \{"k":2\}\)""",
    ),
    "diff-overflow": (
        "k long, diff long",
        [(1, 2**62), (1, 2**62), (2, 1)],
        {},
        BadInputError,
        r'row \{"k":1\} at time \d+ is 9223372036854775808, which overflows',
    ),
    "oversized-row": (
        "k long, v string",
        [(1, "x"), (2, "y" * 5000)],
        {"max_message_bytes": 2000},
        BadInputError,
        r"""row \{"k":2,"v":"y{100}.*… \(\d+ more characters\) at time \d+ encodes to """
        r"\d+ bytes, over the message limit of 2000",
    ),
}


@pytest.mark.parametrize("consolidated_on", ["driver", "executors"])
@pytest.mark.parametrize("case", list(SMALL_BAD))
def test_bad_input_in_a_small_batch_writes_nothing(
    spark, kafka_bootstrap, topic_factory, case, consolidated_on
):
    """Either way to the driver: the rows themselves, or (after a batch of repeated rows) their
    updates, consolidated on the executors, whose job fails on a bad row."""
    ddl, rows, options, error, pattern = SMALL_BAD[case]
    topic = topic_factory(1)
    good = [(1, 0)] if "time_column" in options else [(1, 1)] if "diff" in ddl else rows[:1]
    if consolidated_on == "executors":  # 3 rows, 1 update: over the limit, which the update is not
        good, options = good * 3, {**options, "small_batch_rows": 2}
    sink = CdcSink(kafka_bootstrap, topic, **options)
    assert sink.write(frame(spark, good, ddl)).consolidated_on == "executors"  # a first batch
    written = count_messages(kafka_bootstrap, topic, settled=True)
    with pytest.raises(error, match=pattern) as info:  # rows that tasks read: a job fails
        sink.write(spark.createDataFrame(rows, ddl))
    assert str(info.value).startswith(f"topic {topic!r}: ")
    assert len(str(info.value)) < 600 and "\n" not in str(info.value)  # a row shown cut
    assert count_messages(kafka_bootstrap, topic) == written
    still = sink.write(frame(spark, good, ddl).limit(0))  # still usable, the same way
    assert (still.finished_on, still.consolidated_on) == ("driver", consolidated_on)


def test_a_rerun_is_compared_whichever_way_each_attempt_went(spark, kafka_bootstrap, topic_factory):
    topic = topic_factory(2)
    ddl = "k long, x double, diff long"
    writer = uuid.uuid4().hex
    first = CdcSink(kafka_bootstrap, topic, writer_id=writer)
    first(frame(spark, [(0, 0.0, 1)], ddl), 0)
    batch = [(1, -0.0, 1), (2, 1.5, 2), (2, 1.5, -1)]
    assert first(frame(spark, batch, ddl), 1).finished_on == "driver"

    # a restarted query re-runs batch 1 the distributed way (its first batch): the same digest,
    # so its updates are written again under its claim (duplicates) and no statement
    again = CdcSink(kafka_bootstrap, topic, writer_id=writer, small_batch_rows=0)
    rerun = again(frame(spark, list(reversed(batch)), ddl).repartition(2), 1)
    assert (rerun.reused, rerun.messages, rerun.counts, rerun.finished_on) == (
        True,
        1,
        {1: 2},
        "executors",
    )
    # and the small way, on the sink that wrote it: compared, refused when the data changed
    assert first(frame(spark, batch, ddl), 1).messages == 1
    written = count_messages(kafka_bootstrap, topic, settled=True)
    with pytest.raises(ReplayError, match=r"the same number of updates but other rows"):
        first(frame(spark, [(1, 0.0, 1), (2, 1.5, 2)], ddl), 1)
    assert count_messages(kafka_bootstrap, topic) == written
    codec = CdcCodec(data_schema(spark.createDataFrame([], ddl).drop("diff").schema))
    history, frontier, violations, _ = read_history(kafka_bootstrap, topic, codec)
    assert (violations, frontier) == ([], (2,))
    assert history == as_history([((0, 0.0), 0, 1), ((1, 0.0), 1, 1), ((2, 1.5), 1, 1)])
    assert json.loads(digests(kafka_bootstrap, topic)[-1])["counts"] == [[1, 2]]


def test_the_kept_producer_survives_a_broker_restart_between_batches(spark, kafka_local):
    from cdc_emitter.kafka.topics import ensure_topic

    bootstrap = kafka_local.bootstrap_servers
    topic = f"sink-small-restart-{uuid.uuid4().hex[:8]}"
    ensure_topic(bootstrap, topic, create=True, partitions=2)
    ddl = "k long, v string"
    sink = CdcSink(bootstrap, topic)
    ways = [
        sink.write(frame(spark, [(1, "a")], ddl)).finished_on,
        sink.write(frame(spark, [(2, "b")], ddl)).finished_on,
    ]
    kafka_local.stop_broker()
    kafka_local.start_broker()
    ways.append(sink.write(frame(spark, [(3, "c"), (3, "c")], ddl)).finished_on)
    assert ways == ["driver"] * 3  # the first batch's message, too, came back with its figures
    codec = CdcCodec(data_schema(spark.createDataFrame([], ddl).schema))
    history, frontier, violations, _ = read_history(bootstrap, topic, codec)
    assert (violations, frontier) == ([], (3,))
    assert history == as_history([((1, "a"), 0, 1), ((2, "b"), 1, 1), ((3, "c"), 2, 2)])


def test_a_new_sink_follows_the_topics_last_batch(
    spark, kafka_bootstrap, topic_factory, monkeypatch
):
    """A sink's first batch is written as one after the topic's last batch of the same layout,
    by any sink (the shape header of its progress statement): after a small one, on the driver
    straight away, as a running sink's next batch would be; after one whose rows repeated,
    consolidated straight away — the same history as sinks that do not know."""
    from cdc_emitter.sink import plan as sink_jvm

    df = frame(spark, [(i, f"v{i % 7}") for i in range(3000)], "k long, v string")
    codec = CdcCodec(data_schema(df.schema))
    topic, unknowing = topic_factory(3), topic_factory(3)
    first = CdcSink(kafka_bootstrap, topic).write(df, time=1)
    assert (first.finished_on, first.consolidated_on) == (
        "driver",
        "executors",
    )  # spread, then joined
    shapes = [
        json.loads(dict(r.headers)[HEADER_SHAPE])
        for r in read_topic(kafka_bootstrap, topic)
        if HEADER_SHAPE in dict(r.headers)
    ]
    assert [(s["rows"], s["groups"], s["bytes"] > 0) for s in shapes] == [(3000, 3000, True)]
    second = CdcSink(kafka_bootstrap, topic).write(df, time=2)
    assert (second.finished_on, second.consolidated_on) == ("driver", "driver")
    for t in (1, 2):
        CdcSink(kafka_bootstrap, unknowing, small_batch_rows=0).write(df, time=t)
    histories = [read_history(kafka_bootstrap, name, codec) for name in (topic, unknowing)]
    assert [(h[2], h[1]) for h in histories] == [([], (3,))] * 2
    assert as_history(histories[0][0]) == as_history(histories[1][0])

    twice = df.union(df)  # every row repeated: consolidated straight away by a sink that follows
    repeating = topic_factory(3)
    sink_jvm.forget_layouts()  # as in a new process
    CdcSink(kafka_bootstrap, repeating, small_batch_rows=0).write(twice, time=1)
    sink_jvm.forget_layouts()
    asked = []
    messages = sink_jvm.MessagePlan.messages

    def spy(self, *args, **kwargs):
        asked.append(kwargs.get("consolidate", True))
        return messages(self, *args, **kwargs)

    monkeypatch.setattr(sink_jvm.MessagePlan, "messages", spy)
    result = CdcSink(kafka_bootstrap, repeating, small_batch_rows=0).write(twice, time=2)
    assert asked == [True] and result.counts == {2: 3000}


class _ProgressWatcher:
    """A reader of partition 0 (where every progress statement goes) in a thread of its own, from
    its end when started: the wall time at which it received each progress statement."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import Consumer, TopicPartition

        self.seen: list[float] = []
        self._stop = threading.Event()
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"watch-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 100,
            }
        )
        self._consumer.assign([TopicPartition(topic, 0, end_offsets(bootstrap, topic)[0][1])])
        self._consumer.poll(0.5)  # connected, and fetching at the end, before the first batch
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.is_set():
            message = self._consumer.poll(0.05)
            if (
                message is not None
                and message.error() is None
                and dict(message.headers() or ()).get(HEADER_KIND) == b"progress"
            ):
                self.seen.append(time.time())

    def wait_for(self, count: int, timeout: float = 10.0) -> float:
        """The wall time of the ``count``-th statement seen (1-based)."""
        deadline = time.monotonic() + timeout
        while len(self.seen) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(self.seen) >= count, f"no progress statement {count} within {timeout} s"
        return self.seen[count - 1]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._consumer.close()


@pytest.mark.parametrize("small_batch_rows", [SMALL_DEFAULT, 0], ids=["driver", "executors"])
@pytest.mark.parametrize("call", ["write", "foreachBatch"])
def test_a_batchs_progress_statement_is_readable_within_a_second_of_its_last_spark_job(
    spark, kafka_bootstrap, topic_factory, monkeypatch, tmp_path, small_batch_rows, call
):
    """Issue 11's bound, measured from the outside: from the moment the batch's last Spark action
    returns on the driver (its job's end) to the moment a reader of the topic receives the
    batch's progress statement, under a second, batch after batch — on the driver's way (200
    rows) and the executors' (every batch by a Spark job that writes), by ``write`` and as a
    streaming query's ``foreachBatch`` function (its sink log beside a checkpoint)."""
    topic = topic_factory(2)
    sink = CdcSink(
        kafka_bootstrap,
        topic,
        small_batch_rows=small_batch_rows,
        checkpoint_location=str(tmp_path / "checkpoint") if call == "foreachBatch" else None,
    )
    rows = spark.range(200).selectExpr("id AS k", "cast(id % 7 AS string) AS v").cache()
    rows.count()

    def batch(n: int):
        df = rows.withColumn("k", rows.k + n * 1_000)
        return sink.write(df, time=n) if call == "write" else sink(df, n)

    batch(0)  # the first batch: a new sink's, whose way may differ
    ended: list[float] = []  # when each Spark action returned to the driver
    frame_class, writer_class = type(rows), type(rows.write)
    for cls, name in ((frame_class, "toArrow"), (frame_class, "collect"), (writer_class, "save")):
        if hasattr(cls, name):

            def timed(*args, __original=getattr(cls, name), **kwargs):  # noqa: B008
                try:
                    return __original(*args, **kwargs)
                finally:
                    ended.append(time.time())

            monkeypatch.setattr(cls, name, timed)
    watcher = _ProgressWatcher(kafka_bootstrap, topic)
    try:
        latencies, ways = [], []
        for n in range(1, 7):
            ended.clear()
            result = batch(n)
            ways.append(result.finished_on)
            assert ended, "the batch ran no Spark action"
            latencies.append(watcher.wait_for(n) - ended[-1])
    finally:
        watcher.close()
        monkeypatch.undo()
    assert ways == ["driver" if small_batch_rows else "executors"] * 6
    assert max(latencies) < 1.0, latencies
    history, frontier, violations, _ = read_history(
        kafka_bootstrap, topic, CdcCodec(data_schema(rows.schema))
    )
    assert (violations, frontier) == ([], (7,))
    assert len(history) == 7 * 200
