"""``spark.readStream.format("cdcv2")``: each micro-batch holds exactly the updates of the times
proven complete since the one before, on topics written by the sink and by hand (duplicated,
reordered and re-batched messages, a time left open); a restarted query goes on from its
checkpoint with no time twice; a violation stops the stream. PySpark 4.0 or newer."""

from __future__ import annotations

from collections import Counter

import pytest
from helpers import DISAGREEING, MANGLED, MANGLED_COMPLETE, as_history, frame, produce_by_hand

from cdc_emitter.protocol import Progress, Update, consolidate

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


@pytest.fixture(autouse=True)
def _spark_4(spark):
    if not hasattr(spark, "dataSource"):
        pytest.skip("Python data sources need PySpark 4.0 or newer")
    from cdc_emitter import register

    register(spark)


def run_stream(spark, bootstrap, topic, checkpoint, function) -> None:
    """Run a cdcv2 stream into ``function`` (foreachBatch's) until it has processed everything
    the topic holds now."""
    query = (
        spark.readStream.format("cdcv2")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .load()
        .writeStream.foreachBatch(function)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        query.processAllAvailable()
    finally:
        query.stop()


def follow(spark, bootstrap, topic, checkpoint, batches: list) -> None:
    """`run_stream`, each non-empty micro-batch's rows appended to ``batches`` as
    ``(k, v, time, diff)`` tuples."""

    def keep(df, _batch_id):
        rows = [tuple(r) for r in df.collect()]
        if rows:
            batches.append(rows)

    run_stream(spark, bootstrap, topic, checkpoint, keep)


def as_rows(history) -> list[tuple]:
    return sorted((*u.data, u.time, u.diff) for u in history)


def times_of(batch) -> set[int]:
    return {row[2] for row in batch}


def test_a_mangled_topic_streams_each_complete_time_once(
    spark, kafka_bootstrap, topic_factory, tmp_path
):
    topic = topic_factory()
    a, b, c, d = MANGLED_COMPLETE
    produce_by_hand(kafka_bootstrap, topic, MANGLED)
    batches: list = []
    follow(spark, kafka_bootstrap, topic, tmp_path / "ck", batches)
    delivered = [row for batch in batches for row in batch]
    # time 3 is open (1 of its 2 updates): nothing of it is delivered
    assert sorted(delivered) == as_rows(as_history([(*u,) for u in (a, b, c, d)]))
    assert all(3 not in times_of(batch) for batch in batches)
    # its last update, and a next statement: time 3 comes, once, in a later batch
    produce_by_hand(
        kafka_bootstrap,
        topic,
        [[Update((5, "y"), 3, 1), Update((4, "x"), 3, 1)], Progress((4,), (5,), ())],
    )
    follow(spark, kafka_bootstrap, topic, tmp_path / "ck", batches)
    later = [row for batch in batches for row in batch][len(delivered) :]
    assert sorted(later) == [(4, "x", 3, 1), (5, "y", 3, 1)]
    seen = Counter(time for batch in batches for time in times_of(batch))
    assert all(n == 1 for n in seen.values())  # a time is never split nor repeated


def test_a_restarted_query_goes_on_from_its_checkpoint(
    spark, kafka_bootstrap, topic_factory, tmp_path
):
    from cdc_emitter import CdcSink

    topic = topic_factory(2)
    sink = CdcSink(kafka_bootstrap, topic)
    rows = {t: [(t * 10 + i, f"v{i}") for i in range(3)] for t in range(1, 5)}

    def write(t: int) -> None:
        sink.write(frame(spark, rows[t], "k long, v string"), time=t)

    write(1)
    write(2)
    first: list = []
    follow(spark, kafka_bootstrap, topic, tmp_path / "ck", first)
    write(3)
    write(4)
    second: list = []
    follow(spark, kafka_bootstrap, topic, tmp_path / "ck", second)  # a new query, same checkpoint
    assert sorted(r for b in first for r in b) == sorted(
        (*row, t, 1) for t in (1, 2) for row in rows[t]
    )
    assert sorted(r for b in second for r in b) == sorted(
        (*row, t, 1) for t in (3, 4) for row in rows[t]
    )


def test_a_violation_stops_the_stream(spark, kafka_bootstrap, topic_factory, tmp_path):
    topic = topic_factory()
    produce_by_hand(kafka_bootstrap, topic, DISAGREEING)
    with pytest.raises(Exception) as info:
        follow(spark, kafka_bootstrap, topic, tmp_path / "ck", [])
    assert f"topic {topic!r} breaks the CDCv2 protocol: count_mismatch at time 1" in str(info.value)


def test_consolidated_updates_only(spark, kafka_bootstrap, topic_factory, tmp_path):
    """Updates of one data and time in several messages arrive as one row (their diff summed
    by the writer's statement count: distinct updates), never a zero."""
    topic = topic_factory()
    history = consolidate([Update((1, "a"), 1, 2), Update((2, "b"), 1, 1)])
    produce_by_hand(kafka_bootstrap, topic, [history, Progress((0,), (2,), ((1, 2),))])
    batches: list = []
    follow(spark, kafka_bootstrap, topic, tmp_path / "ck", batches)
    assert batches == [[(1, "a", 1, 2), (2, "b", 1, 1)]]


def test_a_batch_that_failed_is_read_again_the_same(
    spark, kafka_bootstrap, topic_factory, tmp_path
):
    """A query that crashed in a batch's sink restarts with that batch, read again from the
    topic between the offsets its checkpoint planned (readBetweenOffsets): the same rows."""
    topic = topic_factory()
    produce_by_hand(
        kafka_bootstrap,
        topic,
        [[Update((1, "a"), 1, 1), Update((2, "b"), 2, 1)], Progress((0,), (3,), ((1, 1), (2, 1)))],
    )
    attempts: list = []

    def crash_once(df, _batch_id):
        rows = [tuple(r) for r in df.collect()]
        attempts.append(rows)
        if rows and not any(attempts[:-1]):  # the first batch with rows fails
            raise RuntimeError("simulated crash in the sink")

    def run() -> None:
        run_stream(spark, kafka_bootstrap, topic, tmp_path / "ck", crash_once)

    with pytest.raises(Exception, match="simulated crash"):
        run()
    produce_by_hand(
        kafka_bootstrap, topic, [[Update((3, "c"), 3, 1)], Progress((3,), (4,), ((3, 1),))]
    )
    run()
    non_empty = [rows for rows in attempts if rows]
    assert non_empty[0] == non_empty[1] == [(1, "a", 1, 1), (2, "b", 2, 1)]
    assert non_empty[2:] == [[(3, "c", 3, 1)]]


def test_logical_and_nested_types_arrive_as_spark_wrote_them(
    spark, kafka_bootstrap, topic_factory, tmp_path, generated_code
):
    import datetime as dt
    from decimal import Decimal

    from cdc_emitter import CdcSink

    topic = topic_factory()
    ddl = (
        "id long, price decimal(10,2), day date, at timestamp, local timestamp_ntz, "
        "tags array<string>, attrs map<string,int>, address struct<city:string,zip:int>, "
        "raw binary, ratio double"
    )
    rows = [
        (
            1,
            Decimal("12.50"),
            dt.date(2026, 11, 28),
            dt.datetime(2026, 11, 28, 12, 30, tzinfo=dt.timezone.utc),
            dt.datetime(2026, 11, 28, 12, 30),
            ["a", None],
            {"x": 1},
            ("Oslo", 150),
            b"\x00\x01",
            float("nan"),
        ),
        (2, None, None, None, None, None, None, None, None, -0.0),
    ]
    df = frame(spark, rows, ddl)
    CdcSink(kafka_bootstrap, topic).write(df, time=5)
    batches: list = []

    def keep(batch, _id):
        batches.extend(batch.collect())

    run_stream(spark, kafka_bootstrap, topic, tmp_path / "ck", keep)
    got = sorted(batches, key=lambda r: r["id"])
    expected = sorted(df.collect(), key=lambda r: r["id"])
    assert [r.asDict(recursive=True) for r in got] == [
        {**r.asDict(recursive=True), "time": 5, "diff": 1} for r in expected
    ] or _same_but_nan(got, expected)


def _same_but_nan(got, expected) -> bool:
    """NaN is not equal to itself: compare the rows with it spelled out."""
    import math

    def spelled(row, extra):
        d = {**row.asDict(recursive=True), **extra}
        return {k: ("NaN" if isinstance(v, float) and math.isnan(v) else v) for k, v in d.items()}

    return [spelled(r, {}) for r in got] == [spelled(r, {"time": 5, "diff": 1}) for r in expected]
