"""verify, tail and export --from-topic without --schema: the schema the sink wrote into the
header of the topic's progress statements; a --schema file that differs from it is refused.

One topic written by the sink (one small DataFrame) serves every test of the module.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from helpers import frame

from cdc_emitter import CdcSink
from cdc_emitter.cli import main
from cdc_emitter.kafka.producer import CdcProducer
from cdc_emitter.kafka.topic_schema import writer_schema
from cdc_emitter.protocol import Progress, Update
from cdc_emitter.protocol.codec import CdcCodec, union_schema

pytestmark = pytest.mark.kafka

#: the data record the sink writes for ROWS_DDL (id not null, price nullable)
PRODUCTS = {
    "type": "record",
    "name": "data",
    "fields": [{"name": "id", "type": "long"}, {"name": "price", "type": ["null", "int"]}],
}
NO_HEADER = (
    "error: topic {topic!r} has no progress statement with a cdc-emitter-schema header to "
    "take the schema from; pass --schema FILE or --schema-registry URL\n"
)


def cli(*args):
    result = CliRunner().invoke(main, list(args), prog_name="cdc-emitter")
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


@pytest.fixture(scope="module")
def sink_topic(spark, kafka_bootstrap, module_topic_factory):
    """A topic the sink wrote: (1, 10) and (2, null) at time 3, frontier [4]."""
    from pyspark.sql import types as T

    schema = T.StructType(
        [T.StructField("id", T.LongType(), False), T.StructField("price", T.IntegerType())]
    )
    df = frame(spark, [(1, 10), (2, None)], schema)
    topic = module_topic_factory()
    CdcSink(kafka_bootstrap, topic).write(df, time=3)
    return topic


@pytest.fixture
def foreign_topic(kafka_bootstrap, topic_factory):
    """A CDC topic written by a plain producer: the same changefeed, no headers."""
    topic = topic_factory()
    codec = CdcCodec(PRODUCTS)
    with CdcProducer(kafka_bootstrap, topic) as producer:
        for value in [
            codec.encode_progress(Progress((0,), (4,), ((3, 2),))),
            *codec.encode_updates([Update((1, 10), 3, 1), Update((2, None), 3, 1)]),
        ]:
            producer.produce(value, partition=0)
    return topic


def schema_file(tmp_path, data_schema, name="products.avsc"):
    path = tmp_path / name
    path.write_text(json.dumps(union_schema(data_schema), indent=2))
    return str(path)


def test_the_sink_s_header_is_the_writer_schema(kafka_bootstrap, sink_topic, foreign_topic):
    assert writer_schema(kafka_bootstrap, sink_topic) == PRODUCTS
    assert writer_schema(kafka_bootstrap, foreign_topic) is None
    # a tail of one message holds no statement (the updates come after it): the whole topic
    assert writer_schema(kafka_bootstrap, sink_topic, tail=1) == PRODUCTS


def test_verify_without_schema(kafka_bootstrap, sink_topic):
    result = cli("verify", "--bootstrap-servers", kafka_bootstrap, "--topic", sink_topic)
    assert (result.exit_code, result.stderr) == (0, "")
    assert result.stdout == (
        f"topic {sink_topic}: frontier [4], end of topic read\n"
        "2 messages, 2 updates, 0 duplicates dropped\n"
        "verified: no violations\n"
    )


def test_verify_without_schema_with_spark(kafka_bootstrap, sink_topic, tmp_path):
    out = tmp_path / "collection.jsonl"
    result = cli(
        *("verify", "--engine", "spark", "--bootstrap-servers", kafka_bootstrap),
        *("--topic", sink_topic, "--output", str(out)),
    )
    assert (result.exit_code, result.stderr) == (0, "")
    assert result.stdout == (
        f"topic {sink_topic}: frontier [4], end of topic read\n"
        "2 messages, 2 updates, 0 duplicates dropped\n"
        "verified: no violations\n"
    )
    assert out.read_text() == (
        '{"data":{"id":1,"price":10},"count":1}\n{"data":{"id":2,"price":null},"count":1}\n'
    )


def test_tail_without_schema(kafka_bootstrap, sink_topic):
    result = cli("tail", "--bootstrap-servers", kafka_bootstrap, "--topic", sink_topic)
    assert (result.exit_code, result.stderr) == (0, "")
    progress, updates = result.stdout.splitlines()
    assert progress == (
        '{"com.materialize.cdc.progress":{"lower":[0],"upper":[4],"counts":[{"time":3,"count":2}]}}'
    )
    # one message of both updates, in the order the sink's encoding gave them
    assert sorted(json.loads(updates)["array"], key=lambda u: u["data"]["id"]) == [
        {"data": {"id": 1, "price": {"int": 10}}, "time": 3, "diff": 1},
        {"data": {"id": 2, "price": None}, "time": 3, "diff": 1},
    ]


def test_a_schema_file_like_the_writer_s_is_accepted(kafka_bootstrap, sink_topic, tmp_path):
    dressed = {**PRODUCTS, "name": "products", "doc": "the shop's products"}
    result = cli(
        *("verify", "--bootstrap-servers", kafka_bootstrap, "--topic", sink_topic),
        *("--schema", schema_file(tmp_path, dressed)),
    )
    assert (result.exit_code, result.stderr) == (0, "")
    assert result.stdout.endswith("verified: no violations\n")


@pytest.mark.parametrize("command", ["verify", "tail"])
def test_a_schema_file_of_other_nullability_is_refused(
    command, kafka_bootstrap, sink_topic, tmp_path
):
    path = schema_file(
        tmp_path,
        {**PRODUCTS, "fields": [{"name": "id", "type": "long"}, {"name": "price", "type": "int"}]},
    )
    result = cli(
        command, "--bootstrap-servers", kafka_bootstrap, "--topic", sink_topic, "--schema", path
    )
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == (
        f"error: --schema {path} differs from the schema topic {sink_topic!r} was written "
        """with: column 'price' is "int" in the file but ["null","int"] in the topic; drop """
        "--schema to read with the writer's schema\n"
    )


@pytest.mark.parametrize("command", ["verify", "tail"])
def test_a_topic_without_the_header_needs_a_schema(command, kafka_bootstrap, foreign_topic):
    result = cli(command, "--bootstrap-servers", kafka_bootstrap, "--topic", foreign_topic)
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == NO_HEADER.format(topic=foreign_topic)


def test_a_topic_without_the_header_reads_with_a_schema_file(
    kafka_bootstrap, foreign_topic, tmp_path
):
    result = cli(
        *("verify", "--bootstrap-servers", kafka_bootstrap, "--topic", foreign_topic),
        *("--schema", schema_file(tmp_path, PRODUCTS)),
    )
    assert (result.exit_code, result.stderr) == (0, "")
    assert result.stdout == (
        f"topic {foreign_topic}: frontier [4], end of topic read\n"
        "2 messages, 2 updates, 0 duplicates dropped\n"
        "verified: no violations\n"
    )


def test_a_missing_topic_keeps_its_error(kafka_bootstrap):
    result = cli("verify", "--bootstrap-servers", kafka_bootstrap, "--topic", "no-such-topic-sft")
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == (
        f"error: topic 'no-such-topic-sft' does not exist on broker {kafka_bootstrap}: nothing "
        "to read (check the topic name and the bootstrap servers)\n"
    )


def test_export_from_topic_without_schema(spark, kafka_bootstrap, sink_topic, tmp_path):
    to = str(tmp_path / "products.parquet")
    result = cli(
        *("export", "--bootstrap-servers", kafka_bootstrap, "--from-topic", sink_topic),
        *("--to", to),
    )
    assert (result.exit_code, result.stderr) == (0, "")
    assert result.stdout == (
        f"exported topic {sink_topic} (as of time 4, frontier [4]) to {to}: 2 rows\n"
    )
    rows = sorted(tuple(r) for r in spark.read.parquet(to).collect())
    assert rows == [(1, 10), (2, None)]


def test_export_from_a_topic_without_the_header_needs_a_schema(kafka_bootstrap, foreign_topic):
    result = cli(
        *("export", "--bootstrap-servers", kafka_bootstrap, "--from-topic", foreign_topic),
        *("--to", "unused.parquet"),
    )
    assert (result.exit_code, result.stdout) == (2, "")
    # --schema-registry does not go with --from-topic: only the file is offered
    assert result.stderr == (
        f"error: topic {foreign_topic!r} has no progress statement with a cdc-emitter-schema "
        "header to take the schema from; pass --schema FILE\n"
    )


def test_verify_with_a_target_waits_for_the_writers_first_statement(kafka_bootstrap, topic_factory):
    """verify --until-frontier may start before the writer: the schema from the first progress
    statement is waited for as the target is, within --timeout."""
    import threading

    from cdc_emitter.protocol.headers import HEADER_KIND, HEADER_SCHEMA

    topic = topic_factory()
    codec = CdcCodec(PRODUCTS)
    header = [(HEADER_KIND, b"progress"), (HEADER_SCHEMA, json.dumps(PRODUCTS).encode())]

    def write() -> None:
        with CdcProducer(kafka_bootstrap, topic) as producer:
            producer.produce(
                codec.encode_progress(Progress((0,), (4,), ((3, 2),))), headers=header, partition=0
            )
            for value in codec.encode_updates([Update((1, 10), 3, 1), Update((2, None), 3, 1)]):
                producer.produce(value, partition=0)

    writer = threading.Timer(2.0, write)
    writer.start()
    try:
        result = cli(
            *("verify", "--bootstrap-servers", kafka_bootstrap, "--topic", topic),
            *("--until-frontier", "4", "--timeout", "60"),
        )
    finally:
        writer.join()
    assert (result.exit_code, result.stderr) == (0, ""), result.output
    assert result.stdout == (
        f"topic {topic}: frontier [4], target [4] reached\n"
        "2 messages, 2 updates, 0 duplicates dropped\n"
        "verified: no violations\n"
    )


def test_verify_with_a_target_does_not_wait_on_another_writers_topic(
    kafka_bootstrap, foreign_topic
):
    """Messages, and no statement names its schema: no writer will add one, so the usual error
    comes at once (not after --timeout, not never without one)."""
    result = cli(
        *("verify", "--bootstrap-servers", kafka_bootstrap, "--topic", foreign_topic),
        "--until-closed",
    )
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == NO_HEADER.format(topic=foreign_topic)


@pytest.mark.parametrize("as_json", [False, True])
def test_verify_with_a_target_on_a_topic_never_written_is_not_proven(
    kafka_bootstrap, topic_factory, as_json
):
    import time

    topic = topic_factory()
    started = time.monotonic()
    result = cli(
        *("verify", "--bootstrap-servers", kafka_bootstrap, "--topic", topic),
        *("--until-frontier", "4", "--timeout", "2", *(["--json"] if as_json else [])),
    )
    assert time.monotonic() - started >= 2
    assert (result.exit_code, result.stderr) == (3, "")
    hint = (
        f"topic {topic!r} has no progress statement with a cdc-emitter-schema header within 2s "
        "to take the schema from; pass --schema FILE or --schema-registry URL"
    )
    if as_json:
        summary = json.loads(result.stdout)
        assert (summary["verdict"], summary["frontier"], summary["hints"]) == (
            "not_reached",
            [0],
            [hint],
        )
    else:
        assert result.stdout.startswith(
            f"topic {topic}: frontier [0], target [4] NOT reached within 2s\n"
            "0 messages, 0 updates, 0 duplicates dropped\n"
            f"hint: {hint}\n"
        ), result.stdout
