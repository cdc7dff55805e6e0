"""``read_cdc_stream``: the cdcv2 batches in the caller's loop, on every PySpark (3.5 too).

Topics written by hand (duplicated, reordered and re-batched messages, a time left open) and by
the sink; a run that starts where the last stopped; one that follows the topic as it grows; a
closed history; a violation; a start the topic does not prove."""

from __future__ import annotations

from collections import Counter

import pytest
from helpers import DISAGREEING, MANGLED, MANGLED_COMPLETE, as_history, frame, produce_by_hand

from cdc_emitter import read_cdc_stream
from cdc_emitter.errors import BrokerError, ViolationError
from cdc_emitter.protocol import Progress, Update

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def rows_of(batches) -> list[tuple]:
    return sorted(tuple(row) for batch in batches for row in batch.df.collect())


def as_rows(triples) -> list[tuple]:
    return sorted((*u.data, u.time, u.diff) for u in as_history(triples))


def test_a_mangled_topic_hands_over_each_complete_time_once(spark, kafka_bootstrap, topic_factory):
    topic = topic_factory()
    a, b, c, d = MANGLED_COMPLETE
    produce_by_hand(kafka_bootstrap, topic, MANGLED)
    first = list(read_cdc_stream(spark, kafka_bootstrap, topic, once=True))
    assert first[0].lower == 0 and first[-1].upper == 3  # time 3 is open: nothing of it
    assert all(x.upper == y.lower for x, y in zip(first, first[1:]))  # they follow one another
    assert rows_of(first) == as_rows([(*u,) for u in (a, b, c, d)])
    assert sum(x.updates for x in first) == len(rows_of(first))

    produce_by_hand(
        kafka_bootstrap,
        topic,
        [[Update((5, "y"), 3, 1), Update((4, "x"), 3, 1)], Progress((4,), (5,), ())],
    )
    later = list(read_cdc_stream(spark, kafka_bootstrap, topic, start=first[-1].upper, once=True))
    assert (later[0].lower, later[-1].upper) == (3, 5)
    assert rows_of(later) == [(4, "x", 3, 1), (5, "y", 3, 1)]  # time 3, once, whole


def test_a_run_goes_on_where_the_last_stopped(spark, kafka_bootstrap, topic_factory):
    from cdc_emitter import CdcSink

    topic = topic_factory(2)
    sink = CdcSink(kafka_bootstrap, topic)
    rows = {t: [(t * 10 + i, f"v{i}") for i in range(3)] for t in range(1, 5)}
    for t in (1, 2):
        sink.write(frame(spark, rows[t], "k long, v string"), time=t)
    first = list(read_cdc_stream(spark, kafka_bootstrap, topic, once=True))
    for t in (3, 4):
        sink.write(frame(spark, rows[t], "k long, v string"), time=t)
    second = list(read_cdc_stream(spark, kafka_bootstrap, topic, start=first[-1].upper, once=True))
    assert rows_of(first) == sorted((*row, t, 1) for t in (1, 2) for row in rows[t])
    assert rows_of(second) == sorted((*row, t, 1) for t in (3, 4) for row in rows[t])
    times = Counter(row[2] for row in rows_of(first) + rows_of(second))
    assert all(n == 3 for n in times.values())  # no time twice


def test_following_a_growing_topic_until_it_closes(spark, kafka_bootstrap, topic_factory):
    topic = topic_factory()
    produce_by_hand(
        kafka_bootstrap, topic, [[Update((1, "a"), 0, 1)], Progress((0,), (1,), ((0, 1),))]
    )
    batches = read_cdc_stream(spark, kafka_bootstrap, topic, max_read_seconds=0.5)
    first = next(batches)
    assert (first.lower, first.upper, first.updates) == (0, 1, 1)
    produce_by_hand(
        kafka_bootstrap, topic, [[Update((2, "b"), 1, 1)], Progress((1,), (), ((1, 1),))]
    )
    last = next(batches)  # waits for the topic to prove more
    assert (last.lower, last.upper) == (1, None)  # the history closed
    assert [tuple(r) for r in last.df.collect()] == [(2, "b", 1, 1)]
    with pytest.raises(StopIteration):
        next(batches)


def test_a_violation_stops_the_batches(spark, kafka_bootstrap, topic_factory):
    topic = topic_factory()
    produce_by_hand(kafka_bootstrap, topic, DISAGREEING)
    with pytest.raises(ViolationError) as info:
        list(read_cdc_stream(spark, kafka_bootstrap, topic, once=True))
    assert str(info.value).startswith(
        f"topic {topic!r} breaks the CDCv2 protocol: count_mismatch at time 1"
    )


def test_a_start_the_topic_does_not_prove_is_refused(spark, kafka_bootstrap, topic_factory):
    topic = topic_factory()
    produce_by_hand(
        kafka_bootstrap, topic, [[Update((1, "a"), 0, 1)], Progress((0,), (1,), ((0, 1),))]
    )
    with pytest.raises(BrokerError) as info:
        list(read_cdc_stream(spark, kafka_bootstrap, topic, start=7, once=True))
    assert str(info.value).startswith(
        f"topic {topic!r} on {kafka_bootstrap} does not prove the times below 7, where the last "
        "run stopped (its frontier is 1)"
    )
