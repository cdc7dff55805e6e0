"""The Kafka layer against a real broker: delivery, read-back, restarts, failures, topics."""

from __future__ import annotations

import collections
import copy
import os
import threading
import time

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource

from cdc_emitter.errors import BrokerError, ConfigError, DeliveryError
from cdc_emitter.kafka.producer import CdcProducer
from cdc_emitter.kafka.reading import KafkaRecord, end_offsets, last_messages, read_topic
from cdc_emitter.kafka.topics import ensure_topic

pytestmark = pytest.mark.kafka


def test_broker_is_a_real_kafka_broker(kafka_bootstrap):
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    md = admin.list_topics(timeout=10)
    assert md.cluster_id, "a real cluster has a cluster id"
    assert md.brokers
    broker_id = str(next(iter(md.brokers)))
    resource = ConfigResource(ConfigResource.Type.BROKER, broker_id)
    configs = admin.describe_configs([resource])[resource].result(timeout=10)
    assert "log.dirs" in configs or "log.dir" in configs
    assert "message.max.bytes" in configs
    if "process.roles" in configs and configs["process.roles"].value:  # KRaft
        assert "broker" in configs["process.roles"].value


def test_idempotent_round_trip_three_partitions(kafka_bootstrap, topic_factory):
    topic = topic_factory(3)
    sent: dict[int, list[bytes]] = collections.defaultdict(list)
    with CdcProducer(kafka_bootstrap, topic) as producer:
        for i in range(3000):
            value = f"value-{i}-".encode() + bytes(i % 251 for _ in range(i % 97))
            producer.produce(value, headers=[("seq", str(i).encode())], partition=i % 3)
            sent[i % 3].append(value)
    assert producer.delivered == 3000 and producer.failed == 0

    records = list(read_topic(kafka_bootstrap, topic))
    assert all(isinstance(r, KafkaRecord) for r in records)
    got: dict[int, list[bytes]] = collections.defaultdict(list)
    for r in records:
        got[r.partition].append(r.value)
        assert r.headers and r.headers[0][0] == "seq"
        assert r.timestamp and r.timestamp > 0
    assert dict(got) == dict(sent)  # exactly as sent, in order, per partition, no duplicates

    assert end_offsets(kafka_bootstrap, topic) == {p: (0, 1000) for p in range(3)}
    tail = last_messages(kafka_bootstrap, topic, n_per_partition=2)
    assert [(r.partition, r.offset) for r in tail] == [(p, o) for p in range(3) for o in (998, 999)]
    assert [r.value for r in tail] == [v for p in range(3) for v in sent[p][-2:]]


def test_read_topic_snapshot_and_follow(kafka_bootstrap, topic_factory):
    topic = topic_factory(2)
    assert list(read_topic(kafka_bootstrap, topic)) == []  # empty topic: ends at once
    assert last_messages(kafka_bootstrap, topic) == []
    with CdcProducer(kafka_bootstrap, topic) as producer:
        for i in range(10):
            producer.produce(str(i).encode())

    reader = read_topic(kafka_bootstrap, topic)
    first = next(reader)
    with CdcProducer(kafka_bootstrap, topic) as producer:  # written after reading began
        producer.produce(b"late")
    values = [first.value] + [r.value for r in reader]
    assert sorted(values) == sorted(str(i).encode() for i in range(10))

    started = time.monotonic()
    followed = [r.value for r in read_topic(kafka_bootstrap, topic, stop_at_end=False, timeout=2)]
    assert sorted(followed) == sorted([b"late"] + [str(i).encode() for i in range(10)])
    assert time.monotonic() - started < 10


@pytest.mark.slow
def test_broker_restart_loses_nothing(kafka_local):
    servers = kafka_local.bootstrap_servers
    topic = f"restart-{os.urandom(4).hex()}"
    ensure_topic(servers, topic, create=True, partitions=3)
    sent: list[bytes] = []
    failure: list[BaseException] = []
    stop = threading.Event()

    def produce_until_stopped() -> None:
        try:
            with CdcProducer(servers, topic) as producer:
                i = 0
                while not stop.is_set():
                    value = f"m{i}".encode()
                    producer.produce(value)
                    sent.append(value)
                    i += 1
                    producer.poll(0.002)
                producer.flush(timeout=120)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            failure.append(exc)

    thread = threading.Thread(target=produce_until_stopped)
    thread.start()
    try:
        time.sleep(1.5)
        kafka_local.stop_broker()
        time.sleep(1.5)  # the producer keeps producing into its queue while the broker is down
        assert kafka_local.start_broker() == servers
        time.sleep(1.5)
    finally:
        stop.set()
        thread.join(timeout=180)
    assert not thread.is_alive()
    assert not failure, failure
    assert len(sent) > 100

    got = collections.Counter(r.value for r in read_topic(servers, topic, timeout=60))
    AdminClient({"bootstrap.servers": servers}).delete_topics([topic])
    missing = [v for v in sent if v not in got]
    assert not missing, f"{len(missing)} of {len(sent)} messages lost, e.g. {missing[:5]}"


def test_delivery_error_on_oversized_message_keeps_first_error(kafka_bootstrap, topic_factory):
    topic = topic_factory(1, config={"max.message.bytes": "2000"})
    producer = CdcProducer(kafka_bootstrap, topic)
    producer.produce(os.urandom(20_000))  # incompressible, over the topic's limit
    with pytest.raises(DeliveryError) as info:
        producer.flush(timeout=30)
    text = str(info.value)
    assert repr(topic) in text and "partition 0" in text
    assert "MSG_SIZE_TOO_LARGE" in text or "too large" in text.lower()
    first = producer.first_error
    with pytest.raises(DeliveryError) as again:  # any further produce fails fast, same error
        producer.produce(b"small")
    assert str(again.value).startswith(first)


def test_delivery_error_on_unknown_partition(kafka_bootstrap, topic_factory):
    topic = topic_factory(1)
    with pytest.raises(DeliveryError) as info:
        with CdcProducer(kafka_bootstrap, topic) as producer:
            producer.produce(b"ok", partition=0)
            producer.flush(timeout=30)
            producer.produce(b"nowhere", partition=7)
    assert repr(topic) in str(info.value)
    assert "partition 7" in str(info.value)


def test_undelivered_messages_at_flush_timeout_are_a_failure():
    producer = CdcProducer("127.0.0.1:1", "nowhere", {"message.timeout.ms": 60_000})
    producer.produce(b"x")
    with pytest.raises(
        DeliveryError, match=r"1 message\(s\) to topic 'nowhere' were not delivered"
    ):
        producer.flush(timeout=0.5)


def test_a_producer_reporting_failures_only_still_knows_when_everything_landed(
    kafka_bootstrap, topic_factory
):
    """With ``delivery.report.only.error`` no report comes for a delivered message: the count
    of undelivered ones falls to 0 all the same, and a flush ends instead of waiting out its
    timeout."""
    topic = topic_factory(1)
    producer = CdcProducer(kafka_bootstrap, topic, {"delivery.report.only.error": True})
    for i in range(5):
        producer.produce(b"x%d" % i)
    producer.flush(timeout=30)
    assert (len(producer), producer.produced, producer.reported) == (0, 5, 0)
    assert len(list(read_topic(kafka_bootstrap, topic))) == 5


def test_ensure_topic_errors_name_the_topic(kafka_bootstrap):
    name = f"missing-{os.urandom(4).hex()}"
    with pytest.raises(BrokerError) as info:
        ensure_topic(kafka_bootstrap, name)
    assert repr(name) in str(info.value) and kafka_bootstrap in str(info.value)
    assert "create" in str(info.value)
    with pytest.raises(BrokerError, match=name):
        list(read_topic(kafka_bootstrap, name))
    with pytest.raises(BrokerError, match=name):
        end_offsets(kafka_bootstrap, name)

    try:
        assert ensure_topic(kafka_bootstrap, name, create=True, partitions=2) == 2
        assert ensure_topic(kafka_bootstrap, name) == 2  # exists now; left as it is
        assert ensure_topic(kafka_bootstrap, name, create=True, partitions=5) == 2
    finally:
        AdminClient({"bootstrap.servers": kafka_bootstrap}).delete_topics([name])

    with pytest.raises(BrokerError) as info:
        ensure_topic("127.0.0.1:1", "some-topic", timeout=2)
    assert "127.0.0.1:1" in str(info.value) and "some-topic" in str(info.value)


def test_config_not_mutated_and_secrets_redacted(kafka_bootstrap, topic_factory):
    topic = topic_factory(1)
    overrides = {"linger.ms": 1, "client.id": "cdc-test"}
    before = copy.deepcopy(overrides)
    with CdcProducer(kafka_bootstrap, topic, overrides) as producer:
        producer.produce(b"v")
    assert overrides == before
    assert producer.config["linger.ms"] == 1 and producer.config["acks"] == "all"

    reader_config = {"fetch.wait.max.ms": 50}
    assert [r.value for r in read_topic(kafka_bootstrap, topic, config=reader_config)] == [b"v"]
    assert reader_config == {"fetch.wait.max.ms": 50}

    with pytest.raises(ConfigError) as info:
        ensure_topic(
            kafka_bootstrap, topic, config={"bogus.setting": 1, "sasl.password": "hunter2"}
        )
    assert "hunter2" not in str(info.value)


def test_the_schema_id_is_found_when_a_transaction_marker_ends_the_topic(
    kafka_bootstrap, topic_factory
):
    # a claim's commit marker can land after the updates that follow it; the newest framed
    # message is then a few offsets before the end
    from confluent_kafka import Producer

    from cdc_emitter.kafka.registry import newest_schema_id

    topic = topic_factory(1)
    with CdcProducer(kafka_bootstrap, topic) as producer:
        producer.produce(b"\x00\x00\x00\x00\x07rest")
    transactional = Producer(
        {"bootstrap.servers": kafka_bootstrap, "transactional.id": f"{topic}-test"}
    )
    transactional.init_transactions(30)
    transactional.begin_transaction()
    transactional.produce(topic, b"\x00\x00\x00\x00\x09rest")
    transactional.commit_transaction(30)
    deadline = time.monotonic() + 30  # the broker writes the marker after the commit returns
    while end_offsets(kafka_bootstrap, topic)[0][1] < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert end_offsets(kafka_bootstrap, topic)[0][1] == 3  # the last offset is the marker
    assert newest_schema_id(kafka_bootstrap, topic) == 9


def test_a_claims_producer_started_in_the_background_fences_once_ready(
    kafka_bootstrap, topic_factory
):
    """``start`` initialises the claims producer in a thread; ``ready`` waits for it and says
    it was just initialised, once. The producer that initialised last fences the other: its
    commit lands, the other's raises `Fenced`."""
    from cdc_emitter.kafka.claims import ClaimProducer, Fenced

    topic = topic_factory()
    first = ClaimProducer(kafka_bootstrap, topic, timeout=15)
    first.start()
    first.start()  # a second start while the first is under way changes nothing
    assert first.ready() is True
    assert first.ready() is False
    assert first.commit([(b"\x00", [])]) == 0
    second = ClaimProducer(kafka_bootstrap, topic, timeout=15)
    second.start()
    assert second.ready() is True  # initialised after `first`: fences it
    with pytest.raises(Fenced):
        first.commit([(b"\x01", [])])
    assert second.commit([(b"\x02", [])]) > 0
    second.close()
    first.close()
    values = [r.value for r in read_topic(kafka_bootstrap, topic)]
    assert values == [b"\x00", b"\x02"]


def test_a_claims_producer_that_cannot_start_fails_when_ready_not_when_started():
    """A broker that is not there: ``start`` returns at once, and ``ready`` raises the error,
    naming the topic and the transactional id; ``close`` after it returns."""
    from cdc_emitter.kafka.claims import ClaimProducer

    claims = ClaimProducer("127.0.0.1:9", "nowhere", timeout=1)
    began = time.monotonic()
    claims.start()
    claims.raise_failed_start()  # under way: does not wait, raises nothing
    assert time.monotonic() - began < 0.5
    with pytest.raises(
        DeliveryError, match=r"topic 'nowhere': the claims producer \(transactional"
    ):
        claims.ready()
    claims.close()


def test_a_failed_background_start_is_raised_before_the_callers_long_work():
    """``raise_failed_start``: once the start has failed, it raises its error without a wait,
    for a sink to fail its batch before its Spark job; the next ``start`` tries again."""
    from cdc_emitter.kafka.claims import ClaimProducer

    claims = ClaimProducer("127.0.0.1:9", "nowhere", timeout=1)
    claims.start()
    deadline = time.monotonic() + 10
    with pytest.raises(DeliveryError, match=r"could not start"):
        while time.monotonic() < deadline:  # the start gives up after its 1 s timeout
            claims.raise_failed_start()
            time.sleep(0.05)
    claims.raise_failed_start()  # raised once: nothing is left to raise
    claims.start()
    with pytest.raises(DeliveryError, match=r"could not start"):
        claims.ready()
    claims.close()
