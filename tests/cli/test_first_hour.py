"""A new user's mistakes, each answered in seconds with exit 2 and one plain line (issue: the
first hour). None of these needs a broker or Spark: that is the point — they are answered before
either is asked anything."""

from __future__ import annotations

import time

import pytest
from click.testing import CliRunner

from cdc_emitter.cli import main

SETTINGS_URL = "https://github.com/confluentinc/librdkafka/blob/master/CONFIGURATION.md"


def run(*args):
    began = time.monotonic()
    result = CliRunner(env={"KAFKA_BOOTSTRAP_SERVERS": None}).invoke(
        main, list(args), prog_name="cdc-emitter"
    )
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result, time.monotonic() - began


def one_line_error(result, seconds, expected: str) -> None:
    assert (result.exit_code, result.stdout) == (2, ""), result.output
    assert result.stderr == f"error: {expected}\n"
    assert seconds < 10, f"answered after {seconds:.1f}s"


REFUSED = "connection refused; is a broker listening there? check --bootstrap-servers"
UNRESOLVED = "host 'no-such-host.invalid' does not resolve; check --bootstrap-servers"


@pytest.mark.parametrize(
    "command, servers, cause",
    [
        ("export", "127.0.0.1:1", REFUSED),
        ("verify", "127.0.0.1:1", REFUSED),
        ("tail", "no-such-host.invalid:9092", UNRESOLVED),
        ("convert", "no-such-host.invalid:9092", UNRESOLVED),
    ],
)
def test_a_broker_that_is_not_there_is_said_in_seconds(tmp_path, command, servers, cause):
    source = tmp_path / "t.parquet"
    source.write_bytes(b"PAR1" + b"\0" * 16 + b"PAR1")
    table = tmp_path / "table"
    (table / "_delta_log").mkdir(parents=True)
    (table / "_delta_log" / "00000000000000000000.json").write_text("{}\n")
    args = {
        "export": ["export", str(source), "--topic", "t", "--create-topic"],
        "verify": ["verify", "--topic", "t"],
        "tail": ["tail", "--topic", "t"],
        "convert": [
            "convert",
            "delta",
            str(table),
            "--topic",
            "t",
            "--checkpoint",
            str(tmp_path / "c"),
        ],
    }[command]
    result, seconds = run(*args, "--bootstrap-servers", servers)
    one_line_error(result, seconds, f"cannot reach Kafka at {servers}: {cause}")


@pytest.mark.parametrize("command", ["export", "verify"])
def test_a_misspelt_setting_is_named_and_its_value_never_shown(tmp_path, command):
    source = tmp_path / "t.parquet"
    source.write_bytes(b"PAR1" + b"\0" * 16 + b"PAR1")
    args = ["export", str(source)] if command == "export" else ["verify"]
    result, seconds = run(
        *args, "--topic", "t", "--bootstrap-servers", "127.0.0.1:1", "-X", "sasl.pasword=hunter2"
    )
    one_line_error(
        result,
        seconds,
        f"unknown Kafka setting -X sasl.pasword: librdkafka has no such key (check its "
        f"spelling: {SETTINGS_URL})",
    )
    assert "hunter2" not in result.output


@pytest.mark.parametrize(
    "topic, reason",
    [
        ("my topic", "has ' ', which Kafka refuses: use letters, digits, '.', '_' and '-'"),
        ("orders/v1", "has '/', which Kafka refuses: use letters, digits, '.', '_' and '-'"),
    ],
)
def test_a_topic_name_kafka_refuses_is_said_before_connecting(tmp_path, topic, reason):
    source = tmp_path / "t.parquet"
    source.write_bytes(b"PAR1" + b"\0" * 16 + b"PAR1")
    result, seconds = run(
        "export", str(source), "--topic", topic, "--bootstrap-servers", "127.0.0.1:1"
    )
    one_line_error(result, seconds, f"topic name {topic!r} {reason}")


def test_a_topic_name_too_long_says_how_long():
    topic = "t" * 300
    result, seconds = run("verify", "--topic", topic, "--bootstrap-servers", "127.0.0.1:1")
    one_line_error(
        result,
        seconds,
        f"topic name '{'t' * 60}… (300 characters)' is 300 characters long; Kafka takes at "
        "most 249",
    )


@pytest.mark.parametrize(
    "columns, expected",
    [
        ("id lng, x", "column 'id': unknown type 'lng' (did you mean 'long'?)"),
        ("id long, x", "column 'x' has no type (write it as: x TYPE)"),
        (
            "id long, tags array<strng>",
            "column 'tags': unknown type 'strng' (did you mean 'string'?)",
        ),
    ],
)
def test_a_ddl_typo_names_the_column_and_type_without_starting_spark(columns, expected):
    result, seconds = run("schema", "--columns", columns)
    one_line_error(result, seconds, f"--columns {columns!r}: {expected}")
    assert seconds < 5  # no JVM was started


def test_an_input_path_that_does_not_exist_is_said_before_kafka_or_spark(tmp_path):
    missing = tmp_path / "nope.parquet"
    result, seconds = run(
        "export", str(missing), "--topic", "t", "--bootstrap-servers", "127.0.0.1:1"
    )
    one_line_error(
        result,
        seconds,
        f"input path '{missing}' does not exist: check the path; a path on another file "
        "system needs its URI (s3a://..., hdfs://..., abfss://...)",
    )
    assert seconds < 2  # neither the broker (refused: a second) nor Spark was asked


def test_a_parquet_file_named_csv_says_what_it_is(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    source = tmp_path / "products.csv"
    pq.write_table(pa.table({"id": [1, 2]}), str(source))
    result, seconds = run(
        "export", str(source), "--format", "csv", "--topic", "t", "--bootstrap-servers", "x:1"
    )
    one_line_error(
        result, seconds, f"input '{source}' is a Parquet file, not csv: pass --format parquet"
    )


def test_apply_with_a_trigger_interval_spark_would_refuse():
    result, seconds = run(
        "apply",
        "--bootstrap-servers",
        "127.0.0.1:1",
        "--topic",
        "t",
        "--to",
        "/nowhere/table",
        "--trigger-interval",
        "1 fortnight",
    )
    one_line_error(
        result,
        seconds,
        "trigger interval '1 fortnight' is not an interval: write it like '1 second', "
        "'500 milliseconds' or '1 minute 30 seconds'",
    )


def test_apply_to_a_catalog_table_without_a_checkpoint():
    import pyspark

    if int(pyspark.__version__.split(".")[0]) < 4:
        pytest.skip("PySpark 3.5 follows the topic in the driver: no checkpoint to ask for")
    result, seconds = run(
        "apply", "--bootstrap-servers", "127.0.0.1:1", "--topic", "t", "--to", "db.replica"
    )
    assert (result.exit_code, result.stdout) == (2, ""), result.output
    assert result.stderr.endswith(
        "Error: --to db.replica names a catalog table, which has no directory of ours for the "
        "streaming query's checkpoint: pass --checkpoint DIR (or --to a path: ./name)\n"
    ), result.stderr
    assert seconds < 10
