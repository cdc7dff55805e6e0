"""Pure parts of the Kafka layer: configuration defaults, overrides and redaction (no broker)."""

from __future__ import annotations

import copy

import pytest

from cdc_emitter.errors import CdcError, ConfigError
from cdc_emitter.kafka_io import (
    PRODUCER_DEFAULTS,
    CdcProducer,
    consumer_config,
    producer_config,
    redact_config,
)


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
    from cdc_emitter.sink_jvm import kafka_read_options

    options = kafka_read_options("b:9092", {"security.protocol": "SSL", "linger.ms": "5"}, user="convert")
    assert options == {"kafka.bootstrap.servers": "b:9092", "kafka.security.protocol": "SSL"}
    with pytest.raises(ConfigError, match="kafka_options key 'fetch.wait.max.ms' has no equivalent in "
                                          "Spark's Kafka source, which convert uses: leave it out"):
        kafka_read_options("b:9092", {"fetch.wait.max.ms": "5"}, user="convert")
