"""Pure parts of the Kafka layer: configuration defaults, overrides and redaction, and how offset
questions are retried (no broker)."""

from __future__ import annotations

import copy

import pytest
from confluent_kafka import KafkaError, KafkaException

from cdc_emitter.errors import BrokerError, CdcError, ConfigError
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
    assert options == {"kafka.bootstrap.servers": "b:9092", "kafka.security.protocol": "SSL"}
    with pytest.raises(
        ConfigError,
        match="kafka_options key 'fetch.wait.max.ms' has no equivalent in "
        "Spark's Kafka source, which convert uses: leave it out",
    ):
        kafka_read_options("b:9092", {"fetch.wait.max.ms": "5"}, user="convert")


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
