"""The ``cdc-emitter`` command line: exact output and exit codes, errors included.

Tests without a marker need neither Kafka nor Spark. Those marked ``kafka`` use the session's
real broker; the unreachable-broker test needs none but waits for the metadata timeout.
"""

from __future__ import annotations

import json
import sys
import time

import pytest
from click.testing import CliRunner

from cdc_emitter.cli import main
from cdc_emitter.protocol.materialize import create_source_sql

PRODUCTS = {
    "type": "record",
    "name": "data",
    "fields": [{"name": "id", "type": "long"}, {"name": "price", "type": ["null", "int"]}],
}


def union(data_schema):
    from cdc_emitter.protocol.codec import union_schema

    return union_schema(data_schema)


def run(*args, env=None):
    env = {"KAFKA_BOOTSTRAP_SERVERS": None, **(env or {})}
    result = CliRunner(env=env).invoke(main, list(args), prog_name="cdc-emitter")
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def usage_error(command: str, message: str) -> str:
    return (
        f"Usage: cdc-emitter {command} [OPTIONS]{' [SOURCE]' if command == 'export' else ''}\n"
        f"Try 'cdc-emitter {command} --help' for help.\n\nError: {message}\n"
    )


@pytest.fixture
def schema_file(tmp_path):
    path = tmp_path / "products.avsc"
    path.write_text(json.dumps(union(PRODUCTS), indent=2))
    return str(path)


@pytest.fixture
def data_schema_file(tmp_path):
    path = tmp_path / "data.avsc"
    path.write_text(json.dumps(PRODUCTS))
    return str(path)


# --- help and version ---------------------------------------------------------------------------


def test_group_help_lists_the_commands():
    result = run("--help")
    assert result.exit_code == 0
    for command in ("export", "schema", "tail", "verify"):
        assert f"\n  {command} " in result.stdout


@pytest.mark.parametrize("command", ["verify", "tail", "schema", "export"])
def test_command_help_has_an_example(command):
    result = run(command, "--help")
    assert result.exit_code == 0
    assert result.stdout.startswith(f"Usage: cdc-emitter {command} [OPTIONS]")
    assert "Example" in result.stdout
    assert f"cdc-emitter {command} " in result.stdout.split("Example", 1)[1]


def test_version():
    result = run("--version")
    assert (result.exit_code, result.stdout) == (0, "cdc-emitter, version 0.3.0\n")


def test_verify_and_tail_do_not_import_pyspark(tmp_path):
    import subprocess

    code = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from cdc_emitter.cli import main\n"
        "for cmd in ('verify', 'tail'):\n"
        "    CliRunner().invoke(main, [cmd, '--topic', 't', '--schema', sys.argv[1]])\n"
        "print(any(m == 'pyspark' or m.startswith('pyspark.') for m in sys.modules))\n"
    )
    schema = tmp_path / "s.avsc"
    schema.write_text(json.dumps(PRODUCTS))
    out = subprocess.run(
        [sys.executable, "-c", code, str(schema)],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    assert out.stdout.strip() == "False", out.stderr


# --- usage errors (exit 2) ----------------------------------------------------------------------


@pytest.mark.parametrize("command", ["verify", "tail"])
def test_bad_x_setting_is_a_usage_error(command, schema_file):
    result = run(
        command,
        "--bootstrap-servers",
        "127.0.0.1:1",
        "--topic",
        "t",
        "--schema",
        schema_file,
        "-X",
        "acks=all",
        "-X",
        "linger.ms",
    )
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == usage_error(
        command,
        "Invalid value for '-X': setting number 2 is not of the form key=value (its text "
        "is not shown: it may hold a secret)",
    )


@pytest.mark.parametrize("typo", ["=hunter2", "sasl.password:hunter2", "sasl.password hunter2"])
def test_bad_x_setting_never_echoes_a_value(schema_file, typo):
    result = run("verify", "--topic", "t", "--schema", schema_file, "-X", typo)
    assert result.exit_code == 2
    assert "hunter2" not in result.output
    assert result.stderr == usage_error(
        "verify",
        "Invalid value for '-X': setting number 1 is not of the form key=value (its "
        "text is not shown: it may hold a secret)",
    )


@pytest.mark.parametrize("setting", ["sasl.pasword=hunter2", "sasl.jaas.confg=hunter2"])
def test_a_misspelt_or_misplaced_secret_is_never_echoed(schema_file, setting):
    result = run(
        "verify",
        "--bootstrap-servers",
        "127.0.0.1:1",
        "--topic",
        "t",
        "--schema",
        schema_file,
        "-X",
        setting,
    )
    assert result.exit_code == 2
    key = setting.split("=")[0]
    assert result.stderr == (
        f"error: unknown Kafka setting -X {key}: librdkafka has no such key (check its "
        "spelling: https://github.com/confluentinc/librdkafka/blob/master/CONFIGURATION.md)\n"
    )
    assert "hunter2" not in result.output


def test_a_bad_setting_value_names_the_key_given_and_only_a_public_value(schema_file):
    result = run(
        "verify",
        *("--bootstrap-servers", "127.0.0.1:1", "--topic", "t", "--schema", schema_file),
        *("-X", "acks=maybe", "-X", "sasl.password=hunter2"),
    )
    assert result.exit_code == 2
    assert result.stderr == (
        "error: invalid value for Kafka setting -X acks='maybe': Invalid value for "
        'configuration property "request.required.acks"\n'
    )


def test_missing_schema_file(tmp_path):
    missing = tmp_path / "nope.avsc"
    result = run("verify", "--topic", "t", "--schema", str(missing))
    assert result.exit_code == 2
    assert result.stderr == usage_error(
        "verify", f"Invalid value for '--schema': File '{missing}' does not exist."
    )


def test_missing_topic_option(schema_file):
    result = run("verify", "--schema", schema_file)
    assert result.exit_code == 2
    assert result.stderr == usage_error("verify", "Missing option '--topic'.")


def test_until_frontier_and_until_closed_exclude_each_other(schema_file):
    result = run(
        "verify",
        "--bootstrap-servers",
        "127.0.0.1:1",
        "--topic",
        "t",
        "--schema",
        schema_file,
        "--until-frontier",
        "3",
        "--until-closed",
    )
    assert result.exit_code == 2
    assert result.stderr == usage_error(
        "verify", "--until-frontier and --until-closed exclude each other"
    )


def test_negative_until_frontier(schema_file):
    result = run("verify", "--topic", "t", "--schema", schema_file, "--until-frontier", "-1")
    assert result.exit_code == 2
    assert result.stderr == usage_error(
        "verify", "Invalid value for '--until-frontier': -1 is not in the range x>=0."
    )


def test_bad_framing(schema_file):
    result = run("tail", "--topic", "t", "--schema", schema_file, "--framing", "json")
    assert result.exit_code == 2
    assert result.stderr == usage_error(
        "tail", "Invalid value for '--framing': 'json' is not one of 'confluent', 'raw'."
    )


@pytest.mark.parametrize("command", ["verify", "tail"])
def test_no_bootstrap_servers(command, schema_file):
    result = run(command, "--topic", "t", "--schema", schema_file)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == (
        "error: no Kafka bootstrap servers given: pass --bootstrap-servers HOST:PORT "
        "or set KAFKA_BOOTSTRAP_SERVERS\n"
    )


# --- schema errors (exit 2) ---------------------------------------------------------------------


@pytest.mark.parametrize("text", ["not json at all", '{"type": "string"}', "[1, 2]", ""])
def test_bad_schema_text(tmp_path, text):
    path = tmp_path / "bad.avsc"
    path.write_text(text)
    result = run(
        "verify", "--bootstrap-servers", "127.0.0.1:1", "--topic", "t", "--schema", str(path)
    )
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith(f"error: schema file {path}: ")
    assert result.stderr.count("\n") == 1  # one line, no traceback


def test_schema_from_data_schema_file(data_schema_file):
    result = run("schema", "--data-schema", data_schema_file)
    assert result.exit_code == 0
    assert result.stdout == json.dumps(union(PRODUCTS), indent=2) + "\n"


def test_schema_accepts_the_full_union_schema(schema_file):
    result = run("schema", "--data-schema", schema_file)
    assert (result.exit_code, result.stdout) == (0, json.dumps(union(PRODUCTS), indent=2) + "\n")


def test_schema_sql(data_schema_file):
    result = run(
        "schema",
        "--data-schema",
        data_schema_file,
        "--sql",
        "--topic",
        "shop.products",
        "--bootstrap-servers",
        "kafka:9092",
    )
    assert result.exit_code == 0
    schema_json = json.dumps(union(PRODUCTS), separators=(",", ":"))
    assert result.stdout == (
        "CREATE SOURCE shop_products\n"
        "FROM KAFKA BROKER 'kafka:9092' TOPIC 'shop.products'\n"
        f"FORMAT AVRO USING SCHEMA '{schema_json}'\n"
        "ENVELOPE MATERIALIZE;\n"
    )


def test_schema_sql_name_from_environment_and_quotes(data_schema_file):
    result = run(
        "schema",
        "--data-schema",
        data_schema_file,
        "--sql",
        "--topic",
        "t",
        "--name",
        "My Source",
        env={"KAFKA_BOOTSTRAP_SERVERS": "b:1"},
    )
    assert result.exit_code == 0
    assert result.stdout.startswith(
        "CREATE SOURCE \"My Source\"\nFROM KAFKA BROKER 'b:1' TOPIC 't'\n"
    )


def test_create_source_sql_escapes_single_quotes():
    schema = [{"type": "record", "name": "x", "doc": "it's", "fields": []}]
    sql = create_source_sql("s", "b:1", "o'topic", schema)
    assert "TOPIC 'o''topic'" in sql
    assert '"doc":"it\'\'s"' in sql


@pytest.mark.parametrize("args", [[], ["--columns", "id long", "--data-schema", "x.avsc"]])
def test_schema_needs_exactly_one_input(args, tmp_path):
    (tmp_path / "x.avsc").write_text(json.dumps(PRODUCTS))
    args = [a if a != "x.avsc" else str(tmp_path / "x.avsc") for a in args]
    result = run("schema", *args)
    assert result.exit_code == 2
    assert result.stderr == usage_error(
        "schema", "give exactly one of --columns, --from or --data-schema"
    )


def test_schema_sql_needs_topic(data_schema_file):
    result = run("schema", "--data-schema", data_schema_file, "--sql")
    assert result.exit_code == 2
    assert result.stderr == usage_error("schema", "--sql needs --topic")


def test_schema_sql_needs_bootstrap(data_schema_file):
    result = run("schema", "--data-schema", data_schema_file, "--sql", "--topic", "t")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: no Kafka bootstrap servers given")


def test_export_bad_reader_option():
    result = run("export", "x.parquet", "--topic", "t", "-O", "header")
    assert result.exit_code == 2
    assert result.stderr == usage_error(
        "export",
        "Invalid value for '-O': setting number 1 is not of the form key=value (its "
        "text is not shown: it may hold a secret)",
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["--topic", "t"], "give SOURCE and --topic (or --from-topic TOPIC --to PATH)"),
        (["x.parquet"], "give SOURCE and --topic (or --from-topic TOPIC --to PATH)"),
        (
            ["x.parquet", "--topic", "t", "--as-of", "3", "--to", "y"],
            "--to, --as-of: only with --from-topic",
        ),
        (["--from-topic", "t"], "--from-topic needs --to PATH"),
        (
            ["--from-topic", "t", "--topic", "u", "--close"],
            "--from-topic does not go with --topic, --close",
        ),
    ],
)
def test_export_needs_one_direction(args, message):
    result = run("export", *args)
    assert result.exit_code == 2
    assert result.stderr == usage_error("export", message)


def test_verify_engine_options_are_usage_errors(schema_file):
    local = run("verify", "--topic", "t", "--schema", schema_file, "--packages", "a:b:1")
    assert (local.exit_code, local.stderr) == (
        2,
        usage_error("verify", "--packages and --conf are for --engine spark"),
    )
    spark = run(
        "verify", "--topic", "t", "--schema", schema_file, "--engine", "spark", "--workers", "2"
    )
    assert (spark.exit_code, spark.stderr) == (
        2,
        usage_error("verify", "--workers is for --engine local (Spark decodes on its executors)"),
    )


# --- connection errors (exit 2) -----------------------------------------------------------------


@pytest.mark.parametrize("command", ["verify", "tail"])
def test_unreachable_broker_is_answered_in_seconds_naming_the_servers(schema_file, command):
    began = time.monotonic()
    result = run(
        command,
        "--bootstrap-servers",
        "127.0.0.1:1",
        "--topic",
        "t",
        "--schema",
        schema_file,
        "--broker-timeout",
        "2",
    )
    assert time.monotonic() - began < 10
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == (
        "error: cannot reach Kafka at 127.0.0.1:1: connection refused; is a broker listening "
        "there? check --bootstrap-servers\n"
    )


@pytest.mark.kafka
@pytest.mark.parametrize("command", ["verify", "tail"])
def test_missing_topic(command, kafka_bootstrap, schema_file):
    result = run(
        command,
        "--bootstrap-servers",
        kafka_bootstrap,
        "--topic",
        "no-such-topic-cli",
        "--schema",
        schema_file,
    )
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == (
        f"error: topic 'no-such-topic-cli' does not exist on broker {kafka_bootstrap}: nothing "
        "to read (check the topic name and the bootstrap servers)\n"
    )


@pytest.mark.kafka
def test_bad_librdkafka_setting_hides_secrets(kafka_bootstrap, schema_file):
    result = run(
        "verify",
        "--bootstrap-servers",
        kafka_bootstrap,
        "--topic",
        "t",
        "--schema",
        schema_file,
        "-X",
        "sasl.password=hunter2",
        "-X",
        "no.such.setting=1",
    )
    assert result.exit_code == 2
    assert "hunter2" not in result.output
    assert result.stderr.startswith("error: unknown Kafka setting -X no.such.setting: ")
    assert result.stderr.count("\n") == 1


@pytest.mark.kafka
def test_verify_reads_servers_from_environment_and_an_empty_topic_is_not_verified(
    kafka_bootstrap, topic_factory, schema_file
):
    topic = topic_factory()
    result = run(
        "verify",
        "--topic",
        topic,
        "--schema",
        schema_file,
        "--json",
        env={"KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap},
    )
    assert result.exit_code == 3
    assert json.loads(result.stdout) == {
        "frontier": [0],
        "messages": 0,
        "updates": 0,
        "duplicates": 0,
        "violations": [],
        "verdict": "empty",
        "hints": [],
        "pending": {
            "updates": 0,
            "times": [],
            "stalled": [],
            "progress": [0],
            "gap": None,
            "statements": 0,
            "waiting": [],
        },
    }
    text = run(
        "verify",
        "--topic",
        topic,
        "--schema",
        schema_file,
        env={"KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap},
    )
    assert text.exit_code == 3
    assert text.stdout == (
        f"topic {topic}: frontier [0], end of topic read\n"
        "0 messages, 0 updates, 0 duplicates dropped\n"
        "NOT VERIFIED: the topic holds no messages, so nothing is proven\n"
    )


# --- schema --columns (a pure DDL parser; Spark only for syntax it does not know) ---------------


def test_schema_columns_gives_the_reference_schema():
    result = run("schema", "--columns", "id long not null, price int")
    assert result.exit_code == 0
    assert result.stdout == json.dumps(union(PRODUCTS), indent=2) + "\n"


def test_schema_columns_nested_types():
    from cdc_emitter.spark.ddl import parse_ddl_columns

    struct = parse_ddl_columns(
        "`a b` STRUCT<x: INT NOT NULL, y: array<map<string, decimal(10,2)>>> COMMENT 'hi', "
        "d date, ts timestamp, c varchar(3), n decimal"
    )
    assert struct.simpleString() == (
        "struct<a b:struct<x:int,y:array<map<string,decimal(10,2)>>>,d:date,ts:timestamp,"
        "c:varchar(3),n:decimal(10,0)>"
    )
    assert [f.nullable for f in struct.fields] == [True] * 5
    assert struct.fields[0].dataType.fields[0].nullable is False


def test_schema_columns_unsupported_type_names_the_column():
    result = run("schema", "--columns", "id long, m map<int, string>")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith("error: column 'm' ")


# --- --schema-registry --------------------------------------------------------------------------


def test_schema_and_schema_registry_exclude_each_other(schema_file):
    result = run(
        "verify",
        "--bootstrap-servers",
        "127.0.0.1:1",
        "--topic",
        "t",
        "--schema",
        schema_file,
        "--schema-registry",
        "http://127.0.0.1:1",
    )
    assert result.exit_code == 2
    assert result.stderr == usage_error(
        "verify", "--schema and --schema-registry exclude each other"
    )


def _registry_settings(settings: dict) -> list[str]:
    return [
        arg
        for key, value in settings.items()
        for arg in ("--schema-registry-config", f"{key}={value}")
    ]


@pytest.mark.kafka
def test_schema_registry_unknown_id(schema_registry, kafka_bootstrap):
    url, settings = schema_registry
    result = run(
        "verify",
        "--bootstrap-servers",
        kafka_bootstrap,
        "--topic",
        "t",
        "--schema-registry",
        url,
        *_registry_settings(settings),
        "--schema-id",
        "987654",
    )
    assert result.exit_code == 2
    assert result.stderr == f"error: schema registry {url} has no schema id 987654 (HTTP 404)\n"


def test_schema_registry_options_that_exclude_each_other(schema_file):
    result = run(
        "verify",
        "--bootstrap-servers",
        "127.0.0.1:1",
        "--topic",
        "t",
        "--schema",
        schema_file,
        "--schema-registry-config",
        "basic.auth.user.info=u:secret",
    )
    assert result.exit_code == 2
    assert result.stderr == usage_error(
        "verify", "--schema-registry-config needs --schema-registry"
    )
    result = run(
        "tail",
        "--bootstrap-servers",
        "127.0.0.1:1",
        "--topic",
        "t",
        "--schema-registry",
        "http://127.0.0.1:1",
        "--framing",
        "raw",
    )
    assert result.exit_code == 2
    assert result.stderr == usage_error(
        "tail", "--schema-registry with --framing raw needs --schema-id"
    )
    result = run(
        "export",
        "data.parquet",
        "--bootstrap-servers",
        "127.0.0.1:1",
        "--topic",
        "t",
        "--schema-registry",
        "http://127.0.0.1:1",
        "--schema-id",
        "4",
    )
    assert result.exit_code == 2
    assert result.stderr == usage_error(
        "export", "--schema-id and --schema-registry exclude each other: the registry gives the id"
    )
    result = run(
        "verify",
        "--bootstrap-servers",
        "127.0.0.1:1",
        "--topic",
        "t",
        "--schema-registry",
        "http://127.0.0.1:1",
        "--schema-registry-config",
        "@/nonexistent/registry.properties",
    )
    assert result.exit_code == 2
    assert (
        "cannot read /nonexistent/registry.properties: No such file or directory" in result.stderr
    )


@pytest.mark.kafka
def test_schema_registry_unreachable(kafka_bootstrap):
    result = run(
        "tail",
        "--bootstrap-servers",
        kafka_bootstrap,
        "--topic",
        "t",
        "--schema-registry",
        "http://127.0.0.1:1",
        "--schema-id",
        "3",
    )
    assert result.exit_code == 2
    assert result.stderr.startswith(
        "error: cannot reach the schema registry at http://127.0.0.1:1: "
    )


@pytest.mark.kafka
def test_schema_registry_id_from_the_topic(kafka_bootstrap, topic_factory, schema_registry):
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    from cdc_emitter.kafka.producer import CdcProducer
    from cdc_emitter.protocol import Progress, Update
    from cdc_emitter.protocol.codec import CdcCodec

    url, settings = schema_registry
    topic = topic_factory()
    schema_id = SchemaRegistryClient({"url": url, **settings}).register_schema(
        f"{topic}-value", Schema(json.dumps(union(PRODUCTS)), "AVRO")
    )
    codec = CdcCodec(PRODUCTS, schema_id=schema_id)
    with CdcProducer(kafka_bootstrap, topic) as producer:
        producer.produce(codec.encode_updates([Update((5, 10), 1, 1)])[0])
        producer.produce(codec.encode_progress(Progress((0,), (2,), ((1, 1),))))
    result = run(
        "verify",
        "--bootstrap-servers",
        kafka_bootstrap,
        "--topic",
        topic,
        "--schema-registry",
        url,
        *_registry_settings(settings),
        "--json",
    )
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["frontier"] == [2]
    tailed = run(
        "tail",
        "--bootstrap-servers",
        kafka_bootstrap,
        "--topic",
        topic,
        "--schema-registry",
        url,
        *_registry_settings(settings),
        "--schema-id",
        str(schema_id),
    )
    assert tailed.stdout == (
        '{"array":[{"data":{"id":5,"price":{"int":10}},"time":1,"diff":1}]}\n'
        '{"com.materialize.cdc.progress":{"lower":[0],"upper":[2],"counts":[{"time":1,"count":1}]}}\n'
    )


@pytest.mark.kafka
def test_schema_registry_with_raw_framing_reads_by_schema_id(
    kafka_bootstrap, topic_factory, schema_registry
):
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    from cdc_emitter.kafka.producer import CdcProducer
    from cdc_emitter.protocol import Update
    from cdc_emitter.protocol.codec import CdcCodec

    url, settings = schema_registry
    topic = topic_factory()
    schema_id = SchemaRegistryClient({"url": url, **settings}).register_schema(
        f"{topic}-value", Schema(json.dumps(union(PRODUCTS)), "AVRO")
    )
    with CdcProducer(kafka_bootstrap, topic) as producer:
        producer.produce(
            CdcCodec(PRODUCTS, framing="raw").encode_updates([Update((5, 10), 1, 1)])[0]
        )
    tailed = run(
        "tail",
        "--bootstrap-servers",
        kafka_bootstrap,
        "--topic",
        topic,
        "--framing",
        "raw",
        "--schema-registry",
        url,
        *_registry_settings(settings),
        "--schema-id",
        str(schema_id),
    )
    assert tailed.exit_code == 0, tailed.stderr
    assert tailed.stdout == '{"array":[{"data":{"id":5,"price":{"int":10}},"time":1,"diff":1}]}\n'


def test_the_delta_package_follows_sparks_release_and_is_none_where_delta_has_no_build():
    from cdc_emitter.spark.session import delta_package

    assert delta_package("4.1.1") == "io.delta:delta-spark_4.1_2.13:4.4.0"
    assert delta_package("4.2.1") == "io.delta:delta-spark_4.2_2.13:4.4.0"
    assert delta_package("3.5.7") == "io.delta:delta-spark_2.12:3.3.2"  # Scala 2.12, as Spark 3.5's
    assert delta_package("3.4.4") is None


def test_delta_session_settings_only_with_a_delta_package_and_user_conf_wins():
    from cdc_emitter.spark.session import reader_conf as _reader_conf

    delta = ["io.delta:delta-spark_4.1_2.13:4.4.0"]
    assert _reader_conf("delta", delta, {}) == {
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    }
    mine = {"spark.sql.extensions": "my.Ext", "spark.driver.memory": "2g"}
    assert _reader_conf("delta", ["a:b:1", *delta], mine) == {
        "spark.sql.extensions": "my.Ext",
        "spark.driver.memory": "2g",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    }
    assert (
        _reader_conf("delta", [], {}) == {}
    )  # no Delta jar: the extension would fail Spark's start
    assert _reader_conf("parquet", delta, {}) == {}
    assert _reader_conf(None, delta, None) == {}


def test_export_bad_conf_is_a_usage_error_naming_it():
    result = run(
        "export", "t.parquet", "--topic", "t", "--bootstrap-servers", "x:1", "--conf", "nokey"
    )
    assert result.exit_code == 2
    assert (
        "Invalid value for '--conf': setting number 1 is not of the form key=value" in result.stderr
    )
