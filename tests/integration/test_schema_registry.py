"""The sink and the readers with a real schema registry (scripts/schema-registry-local: Apicurio
Registry's Confluent-compatible API, behind basic credentials) and the real broker."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from helpers import count_messages, frame

from cdc_emitter import CdcSink
from cdc_emitter.cli import main
from cdc_emitter.errors import ConfigError, SchemaError
from cdc_emitter.kafka.reading import read_topic

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def _df(spark, rows, fields):
    """A DataFrame of ``rows`` with ``fields``: (name, Spark type, nullable)."""
    from pyspark.sql import types as T

    return frame(
        spark, rows, T.StructType([T.StructField(n, t, nullable) for n, t, nullable in fields])
    )


def _v1():
    from pyspark.sql import types as T

    return [("id", T.LongType(), False), ("price", T.IntegerType(), True)]


def _client(url, settings):
    from confluent_kafka.schema_registry import SchemaRegistryClient

    return SchemaRegistryClient({"url": url, **settings})


def _header_ids(bootstrap, topic):
    return [int.from_bytes(r.value[1:5], "big") for r in read_topic(bootstrap, topic, timeout=20)]


def _settings_file(tmp_path, settings):
    path = tmp_path / "registry.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    return f"@{path}"


@pytest.mark.parametrize("encoder", ["auto", "python"])
def test_the_sink_registers_the_topic_schema_and_frames_with_its_id(
    spark, kafka_bootstrap, topic_factory, schema_registry, tmp_path, encoder
):
    url, settings = schema_registry
    topic = topic_factory()
    sink = CdcSink(
        kafka_bootstrap,
        topic,
        schema_registry_url=url,
        schema_registry_config=settings,
        encoder=encoder,
    )
    sink.write(_df(spark, [(1, 10), (2, None)], _v1()), time=0)
    sink.write(_df(spark, [(3, 30)], _v1()), time=1)

    latest = _client(url, settings).get_latest_version(f"{topic}-value")
    registered = json.loads(latest.schema.schema_str)
    assert registered[0]["items"]["fields"][0]["type"]["fields"] == [
        {"name": "id", "type": "long"},
        {"name": "price", "type": ["null", "int"], "default": None},
    ]
    assert registered[1]["name"] == "progress"
    ids = _header_ids(kafka_bootstrap, topic)
    assert len(ids) >= 4 and set(ids) == {latest.schema_id}

    # the readers take the writer schema from the registry by the id in the headers
    runner = CliRunner()
    args = [
        "--bootstrap-servers",
        kafka_bootstrap,
        "--topic",
        topic,
        "--schema-registry",
        url,
        "--schema-registry-config",
        _settings_file(tmp_path, settings),
    ]
    verified = runner.invoke(main, ["verify", *args, "--json"])
    assert verified.exit_code == 0, verified.output
    summary = json.loads(verified.stdout)
    assert (summary["verdict"], summary["frontier"], summary["updates"]) == ("verified", [2], 3)
    tailed = runner.invoke(main, ["tail", *args])
    assert tailed.exit_code == 0, tailed.output
    assert '{"data":{"id":3,"price":{"int":30}},"time":1,"diff":1}' in tailed.output


def test_a_schema_the_registry_refuses_writes_nothing(
    spark, kafka_bootstrap, topic_factory, schema_registry
):
    from pyspark.sql import types as T

    url, settings = schema_registry
    topic = topic_factory()
    client = _client(url, settings)
    CdcSink(kafka_bootstrap, topic, schema_registry_url=url, schema_registry_config=settings).write(
        _df(spark, [(1, 10)], _v1()), time=0
    )
    client.set_compatibility(f"{topic}-value", "BACKWARD")
    before = count_messages(kafka_bootstrap, topic, settled=True)

    changed = [
        ("id", T.LongType(), False),
        ("price", T.StringType(), True),
    ]  # int -> string: not BACKWARD
    sink = CdcSink(kafka_bootstrap, topic, schema_registry_url=url, schema_registry_config=settings)
    with pytest.raises(SchemaError) as info:
        sink.write(_df(spark, [(2, "x")], changed), time=1)
    text = str(info.value)
    assert (
        f"topic '{topic}'" in text
        and "refused the schema" in text
        and "Nothing was written" in text
    )
    assert "(HTTP 409): Incompatible" in text  # the registry's own reason
    assert count_messages(kafka_bootstrap, topic) == before
    assert client.get_versions(f"{topic}-value") == [1]


def test_without_a_compatibility_rule_the_sink_keeps_one_data_schema(
    spark, kafka_bootstrap, topic_factory, schema_registry
):
    from pyspark.sql import types as T

    url, settings = schema_registry
    topic = topic_factory()
    CdcSink(kafka_bootstrap, topic, schema_registry_url=url, schema_registry_config=settings).write(
        _df(spark, [(1, 10)], _v1()), time=0
    )
    _client(url, settings).set_compatibility(f"{topic}-value", "NONE")
    before = count_messages(kafka_bootstrap, topic, settled=True)
    wider = [*_v1(), ("name", T.StringType(), True)]
    with pytest.raises(SchemaError, match=r"compatibility NONE.*Nothing was written"):
        CdcSink(
            kafka_bootstrap, topic, schema_registry_url=url, schema_registry_config=settings
        ).write(_df(spark, [(2, 20, "b")], wider), time=1)
    assert count_messages(kafka_bootstrap, topic) == before


def test_a_compatible_evolution_reads_as_one_history(
    spark, kafka_bootstrap, topic_factory, schema_registry, tmp_path
):
    from pyspark.sql import types as T

    url, settings = schema_registry
    topic = topic_factory()
    client = _client(url, settings)
    subject = f"{topic}-value"
    CdcSink(kafka_bootstrap, topic, schema_registry_url=url, schema_registry_config=settings).write(
        _df(spark, [(1, 10), (2, 20)], _v1()), time=0
    )
    client.set_compatibility(subject, "BACKWARD")
    # a nullable column added (default null in the registered schema): BACKWARD-compatible
    wider = [*_v1(), ("name", T.StringType(), True), ("diff", T.LongType(), False)]
    sink = CdcSink(kafka_bootstrap, topic, schema_registry_url=url, schema_registry_config=settings)
    sink.write(
        _df(spark, [(1, 10, None, -1), (1, 11, "one", 1), (3, 30, "three", 1)], wider), time=1
    )

    versions = client.get_versions(subject)
    assert len(versions) == 2
    ids = set(_header_ids(kafka_bootstrap, topic))
    assert ids == {client.get_version(subject, v).schema_id for v in versions}

    result = CliRunner().invoke(
        main,
        [
            "verify",
            "--bootstrap-servers",
            kafka_bootstrap,
            "--topic",
            topic,
            "--schema-registry",
            url,
            "--schema-registry-config",
            _settings_file(tmp_path, settings),
            "--json",
            "--output",
            str(tmp_path / "collection.jsonl"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["verdict"] == "verified"
    rows = sorted(
        (r["data"]["id"], r["data"]["price"], r["data"]["name"], r["count"])
        for r in map(json.loads, (tmp_path / "collection.jsonl").read_text().splitlines())
    )
    # the first batch's rows read with name = null (the default), and the retraction cancels one
    assert rows == [(1, 11, "one", 1), (2, 20, None, 1), (3, 30, "three", 1)]

    # Spark reads it the same way: each id's writer schema, resolved into the newest
    from cdc_emitter import read_cdc

    read = read_cdc(
        spark,
        bootstrap_servers=kafka_bootstrap,
        topic=topic,
        schema_registry_url=url,
        schema_registry_config=settings,
    )
    assert (read.verdict, read.violations, read.frontier) == ("verified", [], (2,))
    assert sorted(tuple(r) for r in read.collection.collect()) == rows
    on_spark = CliRunner().invoke(
        main,
        [
            "verify",
            "--engine",
            "spark",
            "--bootstrap-servers",
            kafka_bootstrap,
            "--topic",
            topic,
            "--schema-registry",
            url,
            "--schema-registry-config",
            _settings_file(tmp_path, settings),
            "--json",
        ],
    )
    assert on_spark.exit_code == 0, on_spark.output
    assert json.loads(on_spark.stdout)["verdict"] == "verified"


def test_wrong_credentials_fail_with_exit_2_and_no_secret(
    spark, kafka_bootstrap, topic_factory, schema_registry, tmp_path
):
    url, settings = schema_registry
    topic = topic_factory()
    CdcSink(kafka_bootstrap, topic, schema_registry_url=url, schema_registry_config=settings).write(
        _df(spark, [(1, 10)], _v1()), time=0
    )
    secret = "not-the-password-7f3a"
    wrong = {"basic.auth.user.info": f"cdc-emitter:{secret}"}
    for command in ("verify", "tail"):
        result = CliRunner().invoke(
            main,
            [
                command,
                "--bootstrap-servers",
                kafka_bootstrap,
                "--topic",
                topic,
                "--schema-registry",
                url,
                "--schema-registry-config",
                f"basic.auth.user.info=cdc-emitter:{secret}",
            ],
        )
        assert result.exit_code == 2, result.output
        assert "refused the credentials" in result.output and "HTTP 401" in result.output
        assert secret not in result.output

    before = count_messages(kafka_bootstrap, topic, settled=True)
    sink = CdcSink(kafka_bootstrap, topic, schema_registry_url=url, schema_registry_config=wrong)
    with pytest.raises(ConfigError) as info:
        sink.write(_df(spark, [(2, 20)], _v1()), time=1)
    assert "refused the credentials" in str(info.value) and secret not in str(info.value)
    assert secret not in repr(sink.registry)
    assert count_messages(kafka_bootstrap, topic) == before


def test_export_registers_and_frames_with_the_registry_id(
    spark, kafka_bootstrap, topic_factory, schema_registry, tmp_path
):
    url, settings = schema_registry
    topic = topic_factory()
    source = str(tmp_path / "products.parquet")
    _df(spark, [(1, 10), (2, 20)], _v1()).write.parquet(source)
    result = CliRunner().invoke(
        main,
        [
            "export",
            source,
            "--bootstrap-servers",
            kafka_bootstrap,
            "--topic",
            topic,
            "--time",
            "1",
            "--schema-registry",
            url,
            "--schema-registry-config",
            _settings_file(tmp_path, settings),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["updates"] == 2
    latest = _client(url, settings).get_latest_version(f"{topic}-value")
    assert set(_header_ids(kafka_bootstrap, topic)) == {latest.schema_id}
    assert settings["basic.auth.user.info"].split(":", 1)[1] not in result.output
