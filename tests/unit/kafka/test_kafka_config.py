"""Pure parts of the Kafka layer: configuration defaults, overrides and redaction, and how offset
questions are retried (no broker)."""

from __future__ import annotations

import copy

import pytest
from confluent_kafka import KafkaError, KafkaException

from cdc_emitter.errors import BrokerError, CdcError, ConfigError
from cdc_emitter.kafka import config as kafka_config
from cdc_emitter.kafka import reading
from cdc_emitter.kafka.config import (
    PRODUCER_DEFAULTS,
    consumer_config,
    producer_config,
    redact_config,
)
from cdc_emitter.kafka.producer import CdcProducer
from cdc_emitter.kafka.reading import _watermarks


def test_producer_defaults_are_safe():
    cfg = producer_config("127.0.0.1:9092")
    assert cfg["bootstrap.servers"] == "127.0.0.1:9092"
    assert cfg["enable.idempotence"] is True
    assert cfg["acks"] == "all"
    assert cfg["compression.type"] == "lz4"
    assert cfg["linger.ms"] == 20
    assert cfg["max.in.flight.requests.per.connection"] <= 5  # idempotence requires <= 5
    assert cfg["batch.size"] <= cfg["message.max.bytes"]


def test_overrides_win_and_are_not_mutated():
    overrides = {"linger.ms": 5, "sasl.password": "hunter2", "client.id": "me"}
    before = copy.deepcopy(overrides)
    cfg = producer_config("b:1", overrides)
    assert cfg["linger.ms"] == 5 and cfg["client.id"] == "me"
    assert overrides == before
    cfg["acks"] = "1"  # a fresh dict each time: neither defaults nor overrides change
    assert producer_config("b:1")["acks"] == "all"
    assert PRODUCER_DEFAULTS["acks"] == "all"
    assert overrides == before


def test_consumer_config_commits_nothing():
    cfg = consumer_config("b:1")
    assert cfg["enable.auto.commit"] is False
    assert cfg["enable.partition.eof"] is True
    assert consumer_config("b:1")["group.id"] != cfg["group.id"]  # throwaway group ids


@pytest.mark.parametrize("servers", [None, "", "   "])
def test_missing_bootstrap_servers_is_a_config_error(servers):
    with pytest.raises(ConfigError, match="bootstrap"):
        producer_config(servers)


def test_redact_masks_secrets_and_keeps_the_rest():
    cfg = {
        "bootstrap.servers": "b:1",
        "sasl.password": "hunter2",
        "ssl.key.password": "k3y",
        "sasl.oauthbearer.client.secret": "s3cret",
        "sasl.oauthbearer.config": "principal=me",
        "sasl.jaas.config": "org.apache... password='x'",
        "schema.registry.basic.auth.user.info": "u:p",
        "linger.ms": 5,
        "error_cb": print,
    }
    before = dict(cfg)
    out = redact_config(cfg)
    assert cfg == before  # input untouched
    assert out["bootstrap.servers"] == "b:1" and out["linger.ms"] == 5
    text = repr(out)
    for secret in ("hunter2", "k3y", "s3cret", "principal=me", "password='x'", "u:p"):
        assert secret not in text
    assert out["sasl.password"] == "***"
    assert out["error_cb"] == "<print>"
    assert redact_config(None) == {}


def test_bad_client_config_raises_config_error_without_secrets():
    with pytest.raises(ConfigError) as info:
        CdcProducer("127.0.0.1:9", "t", {"no.such.property": 1, "sasl.password": "hunter2"})
    assert "no.such.property" in str(info.value)
    assert "hunter2" not in str(info.value)
    assert isinstance(info.value, CdcError)


def test_spark_kafka_source_options_keep_security_settings_and_name_their_reader_on_a_bad_key():
    from cdc_emitter.spark.kafka import kafka_read_options

    options = kafka_read_options(
        "b:9092", {"security.protocol": "SSL", "linger.ms": "5"}, user="convert"
    )
    assert options == {
        "kafka.bootstrap.servers": "b:9092",
        "kafka.security.protocol": "SSL",
        "kafka.isolation.level": "read_committed",
        "kafka.fetch.max.wait.ms": "10",
    }
    with pytest.raises(
        ConfigError,
        match="kafka_options key 'queued.min.messages' has no equivalent in "
        "Spark's Kafka source, which convert uses: leave it out",
    ):
        kafka_read_options("b:9092", {"queued.min.messages": "5"}, user="convert")


def test_spark_kafka_source_waits_briefly_for_a_fetch_unless_told_otherwise():
    from cdc_emitter.spark.kafka import kafka_read_options

    given = kafka_read_options("b:9092", {"fetch.wait.max.ms": 250}, user="read_cdc")
    assert given["kafka.fetch.max.wait.ms"] == "250"
    assert "kafka.fetch.wait.max.ms" not in given


# --- every reader reads committed messages only ----------------------------------------------
# A sink's claim (progress statement) is written in a transaction; one that aborted stays in the
# log, and only a read_committed reader never sees it.


@pytest.fixture
def no_isolation_warned_yet(monkeypatch):
    """The read_uncommitted warning is given once per process: forget it was given."""
    monkeypatch.setattr(kafka_config, "_WARNED_ISOLATION", set())


def test_consumer_config_reads_committed_messages_only():
    assert consumer_config("b:1")["isolation.level"] == "read_committed"
    # other overrides leave it alone, and the caller's mapping is not changed
    overrides = {"security.protocol": "SSL", "fetch.wait.max.ms": 10}
    cfg = consumer_config("b:1", overrides)
    assert cfg["isolation.level"] == "read_committed"
    assert "isolation.level" not in overrides


@pytest.mark.parametrize("value", ["read_uncommitted", "READ_UNCOMMITTED"])
def test_read_uncommitted_is_kept_with_a_warning_given_once(value, caplog, no_isolation_warned_yet):
    with caplog.at_level("WARNING", logger="cdc_emitter.kafka.config"):
        assert consumer_config("b:1", {"isolation.level": value})["isolation.level"] == (
            "read_uncommitted"
        )
        consumer_config("b:1", {"isolation.level": value})
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1
    assert "isolation.level=read_uncommitted" in warnings[0]
    assert "never committed" in warnings[0] and "read_committed" in warnings[0]


def test_read_committed_said_explicitly_warns_nothing(caplog, no_isolation_warned_yet):
    with caplog.at_level("WARNING", logger="cdc_emitter.kafka.config"):
        cfg = consumer_config("b:1", {"isolation.level": "read_committed"})
    assert cfg["isolation.level"] == "read_committed" and not caplog.records


def test_an_unknown_isolation_level_is_a_config_error():
    with pytest.raises(ConfigError, match="isolation.level='serializable'"):
        consumer_config("b:1", {"isolation.level": "serializable"})


class _Refused(Exception):
    """Raised by the fake make_client below: the configuration is all these tests want."""


@pytest.mark.parametrize(
    "read",
    [
        pytest.param(lambda: reading.TopicScan("b:1", "t"), id="TopicScan"),
        pytest.param(lambda: list(reading.read_topic("b:1", "t")), id="read_topic"),
        pytest.param(lambda: reading.end_offsets("b:1", "t"), id="end_offsets"),
        pytest.param(lambda: reading.partition_end("b:1", "t"), id="partition_end"),
        pytest.param(lambda: reading.last_messages("b:1", "t"), id="last_messages"),
        pytest.param(lambda: reading.partition_tails("b:1", "t"), id="partition_tails"),
        pytest.param(lambda: reading.TopicOffsets("b:1", "t").end(0), id="TopicOffsets.end"),
        pytest.param(
            lambda: reading.TopicOffsets(
                "b:1", "t", {"security.protocol": "SSL"}
            ).partition_tails(),
            id="TopicOffsets.partition_tails",
        ),
    ],
)
def test_every_topic_reader_makes_a_read_committed_consumer(read, monkeypatch):
    made = []

    def make_client(kind, cfg):
        made.append((kind, cfg))
        raise _Refused

    monkeypatch.setattr(reading, "make_client", make_client)
    with pytest.raises(_Refused):
        read()
    assert [(kind.__name__, cfg["isolation.level"]) for kind, cfg in made] == [
        ("Consumer", "read_committed")
    ]


def test_spark_kafka_source_reads_committed_messages_only(caplog, no_isolation_warned_yet):
    from cdc_emitter.spark.kafka import kafka_read_options

    assert kafka_read_options("b:1", {}, user="read_cdc")["kafka.isolation.level"] == (
        "read_committed"
    )
    with caplog.at_level("WARNING", logger="cdc_emitter.kafka.config"):
        options = kafka_read_options("b:1", {"isolation.level": "read_uncommitted"}, user="x")
    assert options["kafka.isolation.level"] == "read_uncommitted"
    assert len(caplog.records) == 1
    with pytest.raises(ConfigError, match="isolation.level"):
        kafka_read_options("b:1", {"isolation.level": "dirty"}, user="read_cdc")


class _SparkRead:
    """``spark.read`` as far as a Kafka read's options: ``load`` raises `_Refused`."""

    def __init__(self):
        self.fmt, self.opts = None, {}
        self.read = self

    def format(self, fmt):
        self.fmt = fmt
        return self

    def options(self, **options):
        self.opts.update(options)
        return self

    def option(self, key, value):
        self.opts[key] = value
        return self

    def load(self):
        raise _Refused


def test_read_cdc_reads_with_sparks_source_read_committed():
    from cdc_emitter.read import spark_reader

    spark = _SparkRead()
    with pytest.raises(_Refused):
        spark_reader._read_once(spark, "b:1", "t", None, {}, {0: (0, 5)}, None, None)
    assert spark.fmt == "kafka"
    assert spark.opts["kafka.isolation.level"] == "read_committed"
    assert spark.opts["includeHeaders"] == "true"  # the statements' writer and batch


def test_the_changefeed_converter_reads_its_source_topic_committed():
    from cdc_emitter.convert.changefeed import DIFF, TIME, KafkaChangefeed
    from cdc_emitter.spark.kafka import kafka_read_options

    sink = type("Sink", (), {"time_column": TIME, "diff_column": DIFF})()
    options = kafka_read_options("b:1", {"security.protocol": "SSL"}, user="convert")
    feed = KafkaChangefeed("json", "src", options, None, ["id"], sink, "checkpoint", [0])
    spark = _SparkRead()
    with pytest.raises(_Refused):
        feed._window(spark, {0: 0}, {0: 5})
    assert spark.opts["kafka.isolation.level"] == "read_committed"


class _LeaderlessFor:
    """A consumer whose partition has no leader for its first ``misses`` questions."""

    def __init__(self, misses: int, code: int):
        self.misses, self.code, self.asked = misses, code, 0

    def get_watermark_offsets(self, tp, timeout, cached):
        self.asked += 1
        if self.asked <= self.misses:
            raise KafkaException(KafkaError(self.code))
        return (0, 7)


def test_offsets_are_asked_again_while_a_partition_has_no_leader():
    consumer = _LeaderlessFor(2, KafkaError.NOT_LEADER_FOR_PARTITION)
    assert _watermarks(consumer, "127.0.0.1:9092", "t", [0], timeout=5.0) == {0: (0, 7)}
    assert consumer.asked == 3


def test_a_partition_still_leaderless_after_the_timeout_names_topic_partition_and_servers():
    consumer = _LeaderlessFor(10**6, KafkaError.LEADER_NOT_AVAILABLE)
    with pytest.raises(
        BrokerError, match=r"cannot read the offsets of topic 't' partition 0 on 127.0.0.1:9092"
    ):
        _watermarks(consumer, "127.0.0.1:9092", "t", [0], timeout=0.5)


def test_a_permanent_error_on_offsets_fails_at_once():
    consumer = _LeaderlessFor(10**6, KafkaError.TOPIC_AUTHORIZATION_FAILED)
    with pytest.raises(BrokerError):
        _watermarks(consumer, "127.0.0.1:9092", "t", [0], timeout=30.0)
    assert consumer.asked == 1


def test_spark_kafka_writer_options_batch_several_arrays_per_request_unless_told_otherwise():
    from cdc_emitter.spark.kafka import kafka_write_options

    options = kafka_write_options("b:9092", "t", {})
    assert (options["kafka.acks"], options["kafka.batch.size"], options["topic"]) == (
        "all",
        "1000000",
        "t",
    )
    assert kafka_write_options("b:9092", "t", {"batch.size": 65536})["kafka.batch.size"] == "65536"
    # lz4 unless told otherwise, as the sink's librdkafka producers
    assert options["kafka.compression.type"] == "lz4"
    assert (
        kafka_write_options("b:9092", "t", {"compression.codec": "zstd"})["kafka.compression.type"]
        == "zstd"
    )
    with pytest.raises(ConfigError, match="acks='1': the sink needs acks=all"):
        kafka_write_options("b:9092", "t", {"acks": 1})


class _StuckConsumer:
    """A consumer whose close waits until released, as librdkafka's can while the connections
    to a broker keep breaking."""

    def __init__(self) -> None:
        import threading

        self.release = threading.Event()
        self.closed = threading.Event()

    def close(self) -> None:
        self.release.wait(30)
        self.closed.set()


def test_a_reader_whose_close_hangs_is_left_closing_after_the_timeout(caplog):
    import time

    stuck = _StuckConsumer()
    began = time.monotonic()
    reading.close_reader(stuck, timeout=0.2)
    assert time.monotonic() - began < 5
    assert not stuck.closed.is_set()
    assert "did not close within 0.2 s" in caplog.text
    stuck.release.set()  # the close goes on in the background and ends
    assert stuck.closed.wait(5)


def test_a_reader_that_closes_in_time_is_closed_when_close_reader_returns(caplog):
    stuck = _StuckConsumer()
    stuck.release.set()
    reading.close_reader(stuck, timeout=5)
    assert stuck.closed.is_set() and caplog.text == ""
