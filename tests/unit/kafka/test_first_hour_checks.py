"""The checks that answer a new user's mistakes before anything connects: topic names, librdkafka
settings, values cut in messages, DDL typos."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from cdc_emitter.errors import ConfigError, SchemaError, shorten
from cdc_emitter.kafka.config import make_client
from cdc_emitter.kafka.topics import check_topic_name
from cdc_emitter.spark.ddl import DdlUnknown, parse_ddl_columns


@pytest.mark.parametrize("name", ["orders", "a.b_c-D9", "x" * 249, "..."])
def test_names_kafka_takes_pass(name):
    assert check_topic_name(name) == name


@pytest.mark.parametrize(
    "name, expected",
    [
        ("", "a topic name is required"),
        (".", "topic name '.' is not allowed by Kafka"),
        ("..", "topic name '..' is not allowed by Kafka"),
        (
            "a:b",
            "topic name 'a:b' has ':', which Kafka refuses: use letters, digits, '.', '_' and '-'",
        ),
        ("é", "topic name 'é' has 'é', which Kafka refuses: use letters, digits, '.', '_' and '-'"),
    ],
)
def test_names_kafka_refuses_are_said_with_the_character(name, expected):
    with pytest.raises(ConfigError) as info:
        check_topic_name(name)
    assert str(info.value) == expected


@pytest.mark.parametrize(
    "kind, settings, expected",
    [
        (
            AdminClient,
            {"sasl.pasword": "hunter2"},
            "unknown Kafka setting -X sasl.pasword: librdkafka has no such key",
        ),
        (
            Producer,
            {"linger.ms": "soon"},
            "invalid value for Kafka setting -X linger.ms='soon': Invalid value for "
            'configuration property "queue.buffering.max.ms"',
        ),
        (
            Producer,
            {"sasl.password": "hunter2", "sasl.username": "bad value here", "ssl.ca.location": 3},
            None,  # any error: only that no secret is shown
        ),
    ],
)
def test_a_refused_setting_names_its_key_and_no_secret(kind, settings, expected):
    cfg = {"bootstrap.servers": "127.0.0.1:1", **settings}
    try:
        client = make_client(kind, cfg)
    except ConfigError as exc:
        text = str(exc)
    else:
        del client
        assert expected is None
        return
    assert "hunter2" not in text and "bad value here" not in text and "\n" not in text
    if expected is not None:
        assert text.startswith(expected)


def test_shorten_says_how_much_was_cut():
    assert shorten("abc", 5) == "abc"
    assert shorten("a" * 10, 4) == "aaaa… (6 more characters)"


def test_ddl_typos_are_schema_errors_and_spark_only_types_go_to_spark():
    with pytest.raises(SchemaError, match=r"^column 'p': unknown type 'integr' \(did you mean"):
        parse_ddl_columns("p integr")
    with pytest.raises(SchemaError, match=r"^column 'q' has no type"):
        parse_ddl_columns("p int, q")
    with pytest.raises(DdlUnknown):
        parse_ddl_columns("p interval day")  # Spark's parser knows it: left to Spark
