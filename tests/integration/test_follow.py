"""TopicFollower and replay on a real broker, without Spark: complete times only, each once;
a replay gives a range of times again; held updates are warned about; a violation raises. The
same with messages decoded in this process and by decode workers."""

from __future__ import annotations

import logging

import pytest
from helpers import BY_HAND_DATA, produce_by_hand

from cdc_emitter.errors import ViolationError
from cdc_emitter.protocol import Progress, Update
from cdc_emitter.protocol.codec import CdcCodec
from cdc_emitter.read.follow import TopicFollower, replay

pytestmark = pytest.mark.kafka


@pytest.mark.parametrize("workers", [0, 2])
def test_complete_times_once_then_a_replay(kafka_bootstrap, topic_factory, workers):
    topic = topic_factory()
    ups = [Update((k, "x"), t, 1) for t in range(4) for k in range(3)]
    produce_by_hand(
        kafka_bootstrap, topic, [ups[:6], Progress((0,), (3,), ((0, 3), (1, 3), (2, 3)))]
    )
    codec = CdcCodec(BY_HAND_DATA)
    with TopicFollower(kafka_bootstrap, topic, codec, workers=workers) as follower:
        first = follower.advance(5.0)
        assert follower.workers == workers
        assert sorted(first) == sorted(ups[:6])  # times 0 and 1; time 2 has none of its 3 yet
        assert follower.frontier == (2,)
        assert follower.advance(0.5) == []
        produce_by_hand(
            kafka_bootstrap, topic, [ups[6:], ups[3:9], Progress((3,), (4,), ((3, 3),))]
        )
        assert sorted(follower.advance(5.0)) == sorted(ups[6:])  # duplicates dropped
        assert follower.frontier == (4,)
    assert sorted(replay(kafka_bootstrap, topic, codec, 1, 3)) == sorted(ups[3:9])
    with TopicFollower(kafka_bootstrap, topic, codec, start=3) as restarted:
        assert sorted(restarted.advance(5.0)) == sorted(ups[9:])


def test_held_updates_are_warned_about(kafka_bootstrap, topic_factory, caplog):
    topic = topic_factory()
    produce_by_hand(kafka_bootstrap, topic, [[Update((k, None), 7, 1) for k in range(5)]])
    with caplog.at_level(logging.WARNING, logger="cdc_emitter.read.follow"):
        with TopicFollower(kafka_bootstrap, topic, CdcCodec(BY_HAND_DATA), warn_held=4) as follower:
            assert follower.advance(3.0) == []
    assert [r.getMessage() for r in caplog.records] == [
        f"topic {topic}: 5 updates are held beyond frontier [0]: no progress statement proves "
        "them complete yet, and memory grows with them until one does"
    ]


@pytest.mark.parametrize("workers", [0, 2])
def test_a_violation_raises_and_nothing_of_its_time_is_handed_out(
    kafka_bootstrap, topic_factory, workers
):
    topic = topic_factory()
    produce_by_hand(
        kafka_bootstrap,
        topic,
        [
            [Update((1, "a"), 1, 1), Update((2, "b"), 1, 1), Update((3, "c"), 1, 1)],
            Progress((0,), (2,), ((1, 2),)),  # time 1 over-counted: three arrived
        ],
    )
    with TopicFollower(kafka_bootstrap, topic, CdcCodec(BY_HAND_DATA), workers=workers) as follower:
        with pytest.raises(ViolationError, match=f"topic '{topic}' breaks the CDCv2 protocol"):
            follower.advance(3.0)
        with pytest.raises(ViolationError, match="over_count at time 1"):  # and stays broken
            follower.advance(0.1)


@pytest.mark.parametrize("workers", [0, 2])
def test_an_undecodable_message_raises_naming_its_offset(kafka_bootstrap, topic_factory, workers):
    from confluent_kafka import Producer

    topic = topic_factory()
    produce_by_hand(kafka_bootstrap, topic, [[Update((1, "a"), 1, 1)]])
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(topic, b"\x00\x00\x00\x00\x01\xff\xff", partition=0)  # offset 1
    assert producer.flush(10) == 0
    with TopicFollower(kafka_bootstrap, topic, CdcCodec(BY_HAND_DATA), workers=workers) as follower:
        with pytest.raises(ViolationError, match="undecodable.*partition 0 offset 1: "):
            follower.advance(3.0)


@pytest.mark.parametrize("workers", [0, 2])
def test_an_undecodable_message_says_its_likely_cause_as_verify_does(
    kafka_bootstrap, topic_factory, workers
):
    """A message written without the Confluent header, followed with it: the error names the
    message and says to read with framing 'raw', as ``verify`` says it."""
    from confluent_kafka import Producer

    topic = topic_factory()
    (raw,) = CdcCodec(BY_HAND_DATA, framing="raw").encode_updates([Update((1, "a"), 1, 1)])
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(topic, raw, partition=0)
    assert producer.flush(10) == 0
    with TopicFollower(kafka_bootstrap, topic, CdcCodec(BY_HAND_DATA), workers=workers) as follower:
        with pytest.raises(ViolationError) as err:
            follower.advance(3.0)
    assert follower.hints == [
        "the messages carry no Confluent header: read them with framing 'raw' (--framing raw)"
    ]
    assert str(err.value) == (
        f"topic {topic!r} breaks the CDCv2 protocol: undecodable (partition 0, offset 0): "
        f"partition 0 offset 0: {err.value.violations[0].detail.split(': ', 1)[1]}. Likely: the "
        "messages carry no Confluent header: read them with framing 'raw' (--framing raw) (run "
        f"cdc-emitter verify --topic {topic} for the whole report)"
    )
