"""`verify` on the real broker: every disagreement it can see, "verified" only when proven,
values that compare and print right, and the parallel decode path agreeing with the serial one.
"""

from __future__ import annotations

import contextlib
import json
import math

import pytest
from click.testing import CliRunner
from helpers import frame

from cdc_emitter.cli import main
from cdc_emitter.kafka.producer import CdcProducer
from cdc_emitter.protocol import Progress, Update
from cdc_emitter.protocol.codec import CdcCodec, union_schema
from cdc_emitter.protocol.headers import HEADER_BATCH, HEADER_KIND, HEADER_WRITER
from cdc_emitter.read.verify import verify_topic

pytestmark = pytest.mark.kafka

KV = {
    "type": "record",
    "name": "data",
    "fields": [{"name": "k", "type": "long"}, {"name": "v", "type": "string"}],
}
WIDE = {
    "type": "record",
    "name": "data",
    "fields": [
        {"name": "k", "type": "long"},
        {"name": "x", "type": ["null", "double"]},
        {
            "name": "d",
            "type": [
                "null",
                {"type": "bytes", "logicalType": "decimal", "precision": 20, "scale": 10},
            ],
        },
    ],
}


def schema_path(tmp_path, data, name="s.avsc"):
    path = tmp_path / name
    path.write_text(json.dumps(union_schema(data)))
    return str(path)


def write(bootstrap, topic, codec, messages, partitions=1):
    with CdcProducer(bootstrap, topic) as producer:
        for i, message in enumerate(messages):
            values = (
                [codec.encode_progress(message)]
                if isinstance(message, Progress)
                else codec.encode_updates(message)
            )
            for value in values:
                producer.produce(value, partition=i % partitions)


def cli(*args):
    result = CliRunner().invoke(main, list(args), prog_name="cdc-emitter")
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def verify(bootstrap, topic, schema, *extra, engine="local"):
    return cli(
        "verify",
        "--bootstrap-servers",
        bootstrap,
        "--topic",
        topic,
        "--schema",
        schema,
        "--engine",
        engine,
        *extra,
    )


# --- every statement against every other -------------------------------------------------------


def test_a_disagreeing_statement_after_the_report_fails_verify(
    engine, kafka_bootstrap, topic_factory, tmp_path
):
    topic = topic_factory()
    codec = CdcCodec(KV)
    write(
        kafka_bootstrap,
        topic,
        codec,
        [
            [Update((1, "a"), 1, 1)],
            Progress((0,), (2,), ((1, 1),)),
            [Update((1, "a"), 1, 1), Update((2, "b"), 1, 1)],
            Progress((0,), (2,), ((1, 2),)),
        ],
    )
    result = verify(kafka_bootstrap, topic, schema_path(tmp_path, KV), "--json", engine=engine)
    assert result.exit_code == 1
    summary = json.loads(result.stdout)
    assert [(v["kind"], v["time"], v["partition"], v["offset"]) for v in summary["violations"]] == [
        ("count_mismatch", 1, 0, 3)
    ]
    assert summary["verdict"] == "violations"


# --- "verified" means proven ---------------------------------------------------------------------


def test_a_count_the_topic_does_not_hold_is_incomplete(
    engine, kafka_bootstrap, topic_factory, tmp_path
):
    topic = topic_factory()
    codec = CdcCodec(KV)
    write(
        kafka_bootstrap,
        topic,
        codec,
        [
            [Update((1, "a"), 0, 1)],
            Progress((0,), (1,), ((0, 1),)),
            [Update((2, "b"), 1, 1), Update((3, "c"), 1, 1)],
            Progress((1,), (3,), ((1, 3),)),
        ],
    )
    result = verify(kafka_bootstrap, topic, schema_path(tmp_path, KV), engine=engine)
    assert result.exit_code == 3
    assert result.stdout == (
        f"topic {topic}: frontier [1], end of topic read\n"
        "4 messages, 3 updates, 0 duplicates dropped\n"
        "pending: time 1 is announced with 3 updates, 2 arrived\n"
        "pending: an unnamed writer claimed [1, 3) (partition 0, offset 3): 1 of 3 counted "
        "updates missing at time 1\n"
        "pending: 2 updates held at times 1, beyond frontier [1]\n"
        "NOT VERIFIED: the topic ends before it proves what it holds beyond frontier [1]\n"
    )
    summary = json.loads(
        verify(kafka_bootstrap, topic, schema_path(tmp_path, KV), "--json", engine=engine).stdout
    )
    assert summary["verdict"] == "incomplete"
    assert summary["pending"] == {
        "updates": 2,
        "times": [1],
        "progress": [3],
        "gap": None,
        "statements": 2,
        "stalled": [{"time": 1, "count": 3, "received": 2}],
        "waiting": [
            {
                "writer": None,
                "batch": None,
                "lower": [1],
                "upper": [3],
                "times": [1],
                "open_times": 1,
                "missing": 1,
                "counted": 3,
                "partition": 0,
                "offset": 3,
            }
        ],
    }


def test_a_claim_whose_updates_are_missing_names_its_writer_and_batch(
    engine, kafka_bootstrap, topic_factory, tmp_path
):
    """A writer that died after its claim: the statement (with the sink's headers) is in the
    topic, fewer updates than it counts are. verify waits on those times and says whose they are."""
    topic = topic_factory(2)
    codec = CdcCodec(KV)
    writer = "4d1c7e0a-5b7f-4a53-9d0e-2f6c1b8e9a10"
    with CdcProducer(kafka_bootstrap, topic) as producer:
        producer.produce(codec.encode_progress(Progress((0,), (2,), ((1, 1),))), partition=0)
        producer.produce(
            codec.encode_progress(Progress((2,), (5,), ((2, 2), (4, 3)))),
            partition=0,
            headers=[
                (HEADER_KIND, b"progress"),
                (HEADER_WRITER, writer.encode()),
                (HEADER_BATCH, b"12"),
            ],
        )
        for updates in ([Update((1, "a"), 1, 1)], [Update((2, "b"), 2, 1), Update((4, "d"), 4, 1)]):
            (value,) = codec.encode_updates(updates)
            producer.produce(
                value, partition=1, headers=[(HEADER_KIND, b"updates"), (HEADER_WRITER, b"x")]
            )
    result = verify(kafka_bootstrap, topic, schema_path(tmp_path, KV), engine=engine)
    assert result.exit_code == 3
    assert result.stdout.splitlines()[2:] == [
        "pending: time 2 is announced with 2 updates, 1 arrived",
        "pending: time 4 is announced with 3 updates, 1 arrived",
        f"pending: writer {writer} batch 12 claimed [2, 5) (partition 0, offset 1): 3 of 5 "
        "counted updates missing at times 2, 4",
        "pending: 2 updates held at times 2, 4, beyond frontier [2]",
        "NOT VERIFIED: the topic ends before it proves what it holds beyond frontier [2]",
    ]
    summary = json.loads(
        verify(kafka_bootstrap, topic, schema_path(tmp_path, KV), "--json", engine=engine).stdout
    )
    assert summary["pending"]["waiting"] == [
        {
            "writer": writer,
            "batch": "12",
            "lower": [2],
            "upper": [5],
            "times": [2, 4],
            "open_times": 2,
            "missing": 3,
            "counted": 5,
            "partition": 0,
            "offset": 1,
        }
    ]


def test_a_claim_in_an_aborted_transaction_is_never_read(
    engine, kafka_bootstrap, topic_factory, tmp_path
):
    """Claims go in transactions of one transactional.id shared by a topic's writers. A fenced
    writer's claim stays in the log in an aborted transaction: readers read committed messages
    only, so verify neither counts it nor sees its contradiction, in the middle of the topic
    or at its end."""
    from confluent_kafka import KafkaException, Producer

    topic = topic_factory()
    codec = CdcCodec(KV)
    claims = {"bootstrap.servers": kafka_bootstrap, "transactional.id": f"{topic}-claims"}
    write(
        kafka_bootstrap, topic, codec, [[Update((1, "a"), 0, 1)], Progress((0,), (1,), ((0, 1),))]
    )
    fenced, winner = Producer(claims), None
    try:
        fenced.init_transactions(30)
        fenced.begin_transaction()
        # a claim that contradicts the committed one, and junk that decodes to nothing
        fenced.produce(
            topic, codec.encode_progress(Progress((0,), (3,), ((0, 5), (2, 1)))), partition=0
        )
        fenced.produce(topic, b"not an avro message", partition=0)
        fenced.flush(30)
        winner = Producer(claims)
        winner.init_transactions(60)  # fences the first writer: its transaction is aborted
        with pytest.raises(KafkaException):
            fenced.commit_transaction(30)
        winner.begin_transaction()
        winner.produce(topic, codec.encode_progress(Progress((1,), (2,), ((1, 1),))), partition=0)
        winner.commit_transaction(30)
        write(kafka_bootstrap, topic, codec, [[Update((2, "b"), 1, 1)]])  # updates after the claim

        def verified():
            result = verify(
                kafka_bootstrap,
                topic,
                schema_path(tmp_path, KV),
                "--timeout",
                "120",
                "--json",
                engine=engine,
            )
            summary = json.loads(result.stdout)
            assert summary["violations"] == [] and summary["verdict"] == "verified"
            assert summary["frontier"] == [2] and summary["messages"] == 4
            assert result.exit_code == 0

        verified()
        # the control: a reader told to read uncommitted messages takes the aborted claim as true
        dirty = verify(
            kafka_bootstrap,
            topic,
            schema_path(tmp_path, KV),
            "-X",
            "isolation.level=read_uncommitted",
            "--json",
            engine=engine,
        )
        assert dirty.exit_code == 1
        kinds = {v["kind"] for v in json.loads(dirty.stdout)["violations"]}
        assert {"count_mismatch", "undecodable"} <= kinds
        # the topic now ends with an aborted transaction: its end offset is past what can be read
        winner.begin_transaction()
        winner.produce(topic, codec.encode_progress(Progress((2,), (4,), ((3, 9),))), partition=0)
        winner.flush(30)
        winner.abort_transaction(30)
        verified()
    finally:
        for producer in (fenced, winner):
            if producer is not None:
                with contextlib.suppress(KafkaException):  # the fenced one: its fatal error
                    producer.close()


def test_updates_without_any_progress_and_a_gap_are_incomplete(
    engine, kafka_bootstrap, topic_factory, tmp_path
):
    topic = topic_factory()
    codec = CdcCodec(KV)
    write(kafka_bootstrap, topic, codec, [[Update((k, "x"), k % 3, 1) for k in range(30)]])
    result = verify(kafka_bootstrap, topic, schema_path(tmp_path, KV), engine=engine)
    assert result.exit_code == 3
    assert result.stdout.splitlines()[2:] == [
        "pending: 30 updates (at times 0, 1, 2) and no progress statement at all",
        "NOT VERIFIED: the topic ends before it proves what it holds beyond frontier [0]",
    ]
    gap = topic_factory()
    write(kafka_bootstrap, gap, codec, [Progress((0,), (2,), ()), Progress((5,), (9,), ())])
    result = verify(kafka_bootstrap, gap, schema_path(tmp_path, KV), engine=engine)
    assert result.exit_code == 3
    assert (
        "pending: no progress statement covers [2, 5); statements beyond it wait" in result.stdout
    )


def test_held_updates_beyond_a_still_frontier_warn(kafka_bootstrap, topic_factory):
    topic = topic_factory()
    codec = CdcCodec(KV)
    write(kafka_bootstrap, topic, codec, [[Update((k, "x"), 4, 1) for k in range(250)]] * 2)
    warnings = []
    result = verify_topic(
        kafka_bootstrap, topic, codec, warn_held=100, on_warning=warnings.append, workers=0
    )
    assert result.verdict == "incomplete"
    assert (
        warnings
        == result.warnings
        == [
            "250 updates are held beyond frontier [0] (at times 4): no progress statement proves "
            "them complete yet, and memory grows with them until one does"
        ]
    )


# --- values ---------------------------------------------------------------------------------------


def test_nan_rows_cancel_and_output_is_strict_json(
    engine, kafka_bootstrap, topic_factory, tmp_path
):
    import decimal

    topic = topic_factory()
    codec = CdcCodec(WIDE)
    nan, zero = float("nan"), decimal.Decimal("0E-10")
    write(
        kafka_bootstrap,
        topic,
        codec,
        [
            [
                Update((1, nan, zero), 0, 1),
                Update((2, math.inf, None), 0, 1),
                Update((3, -math.inf, decimal.Decimal("12.5")), 0, 1),
                Update((4, -0.0, None), 0, 1),
            ],
            [
                Update((1, float("nan"), zero), 0, 1)
            ],  # a duplicate of the NaN row: not an over-count
            Progress((0,), (1,), ((0, 4),)),
            [Update((1, float("nan"), zero), 1, -1), Update((4, 0.0, None), 1, -1)],  # retractions
            Progress((1,), (2,), ((1, 2),)),
        ],
    )
    out = tmp_path / "out.jsonl"
    result = verify(
        kafka_bootstrap,
        topic,
        schema_path(tmp_path, WIDE),
        "--json",
        "--output",
        str(out),
        engine=engine,
    )
    assert result.exit_code == 0, result.stdout
    summary = json.loads(result.stdout)
    assert (summary["duplicates"], summary["violations"], summary["frontier"]) == (1, [], [2])
    lines = out.read_text().splitlines()
    assert lines == [
        '{"data":{"k":2,"x":"Infinity","d":null},"count":1}',
        '{"data":{"k":3,"x":"-Infinity","d":"12.5000000000"},"count":1}',
    ]
    for line in lines:
        json.loads(line, parse_constant=lambda c: pytest.fail(f"bare {c} in --output"))
    hist = tmp_path / "hist.jsonl"
    verify(
        kafka_bootstrap, topic, schema_path(tmp_path, WIDE), "--history", str(hist), engine=engine
    )
    assert hist.read_text().splitlines() == [
        '{"data":{"k":1,"x":"NaN","d":"0.0000000000"},"time":0,"diff":1}',
        '{"data":{"k":2,"x":"Infinity","d":null},"time":0,"diff":1}',
        '{"data":{"k":3,"x":"-Infinity","d":"12.5000000000"},"time":0,"diff":1}',
        '{"data":{"k":4,"x":0.0,"d":null},"time":0,"diff":1}',
        '{"data":{"k":1,"x":"NaN","d":"0.0000000000"},"time":1,"diff":-1}',
        '{"data":{"k":4,"x":0.0,"d":null},"time":1,"diff":-1}',
    ]


# --- undecodable: the likely cause, once ---------------------------------------------------------


def test_a_wrong_data_schema_is_named_once(engine, kafka_bootstrap, topic_factory, tmp_path):
    topic = topic_factory()
    write(
        kafka_bootstrap,
        topic,
        CdcCodec(WIDE),
        [[Update((k, 0.5, None), t, 1)] for t in range(30) for k in range(2)]
        + [Progress((0,), (30,), tuple((t, 2) for t in range(30)))],
    )
    result = verify(kafka_bootstrap, topic, schema_path(tmp_path, KV), engine=engine)
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert lines[2] == "60 violations:"
    assert lines[3] == (
        "  undecodable (partition 0, offset 0): partition 0 offset 0: the update "
        "array decodes with the schema but leaves 8 of 21 bytes unread"
    )
    assert lines[23] == "  ... and 40 more undecodable (--json lists them all)"
    assert [line for line in lines if line.startswith("hint: ")] == [
        "hint: update arrays do not decode with the data schema (k long, v string): the topic "
        "was probably written with another data schema; the messages name schema id 0; read it "
        "with the schema its writer used"
    ]
    assert lines[-1] == "FAILED: protocol violations"


def test_raw_messages_read_as_confluent_name_the_framing(
    engine, kafka_bootstrap, topic_factory, tmp_path
):
    topic = topic_factory()
    write(
        kafka_bootstrap,
        topic,
        CdcCodec(KV, framing="raw"),
        [[Update((1, "a"), 0, 1)], Progress((0,), (1,), ((0, 1),))],
    )
    summary = json.loads(
        verify(kafka_bootstrap, topic, schema_path(tmp_path, KV), "--json", engine=engine).stdout
    )
    assert [v["kind"] for v in summary["violations"]] == ["undecodable", "undecodable"]
    assert summary["hints"] == [
        "the messages carry no Confluent header: read them with framing 'raw' (--framing raw)"
    ]


# --- the parallel decode path ---------------------------------------------------------------------


def test_decode_workers_give_exactly_what_one_process_gives(
    kafka_bootstrap, topic_factory, tmp_path
):
    topic = topic_factory(1)  # one partition: the same message order in both reads
    codec = CdcCodec(WIDE)
    messages = []
    for t in range(6):
        rows = [
            Update((k, float("nan") if k % 7 == 0 else k / 3, None), t, 1 + k % 2)
            for k in range(t * 50, t * 50 + 400)
        ]
        messages += [rows[:200], rows[150:], rows[:10]]  # overlaps are duplicates
        messages.append(Progress((t,), (t + 1,), ((t, 400),)))
    messages.append([Update((100, 100 / 3, None), 2, 5)])  # a conflicting diff at a reported time
    messages.append(Progress((0,), (6,), ((2, 401),)))  # a disagreeing statement
    write(kafka_bootstrap, topic, codec, messages)
    serial = verify_topic(kafka_bootstrap, topic, codec, workers=0, strict="exact")
    parallel = verify_topic(kafka_bootstrap, topic, codec, workers=2, strict="exact")
    assert parallel.workers == 2 and serial.workers == 0
    assert parallel.summary() == serial.summary()
    assert parallel.collection == serial.collection and len(serial.collection) == 650
    assert [v.kind for v in serial.violations] == ["conflicting_diff"] + ["count_mismatch"] * 6


# --- strict: two writers racing on one topic, written by the real sink --------------------------


@pytest.mark.spark
def test_strict_catches_a_second_writer_with_other_rows_of_the_same_count(
    engine, spark, kafka_bootstrap, topic_factory, tmp_path
):
    from cdc_emitter import CdcSink
    from cdc_emitter.spark.schema import data_schema

    # one partition: the second writer's rows come after the first one's statement reported
    # time 1 (read while the time is open, as across partitions, they are an over_count anyway)
    topic = topic_factory(1)
    ddl = "k long, v string"
    first = frame(spark, [(1, "a"), (2, "b"), (3, "c")], ddl)
    CdcSink(kafka_bootstrap, topic).write(first, time=0)
    a, b = CdcSink(kafka_bootstrap, topic), CdcSink(kafka_bootstrap, topic)
    stale = b.frontier()  # both writers learn the frontier [1] before either writes: a race
    b.frontier = lambda: (
        stale
    )  # ... that b's own checks, before writing and before its statement, miss
    assert a.write(frame(spark, [(4, "d")], ddl)).lower == 1
    assert (b.write(frame(spark, [(5, "e")], ddl)).lower, stale.frontier) == (1, 1)
    schema = schema_path(tmp_path, data_schema(first.schema))

    plain = json.loads(verify(kafka_bootstrap, topic, schema, "--json", engine=engine).stdout)
    assert (plain["verdict"], plain["frontier"]) == ("verified", [2]), plain  # the counts agree
    for mode in ("exact", "bloom"):
        strict = verify(kafka_bootstrap, topic, schema, "--json", "--strict", mode, engine=engine)
        assert strict.exit_code == 1
        summary = json.loads(strict.stdout)
        assert [(v["kind"], v["time"]) for v in summary["violations"]] == [("over_count", 1)]
        assert "(5, 'e')" in summary["violations"][0]["detail"]
    assert (
        verify(kafka_bootstrap, topic, schema, "--strict", engine=engine).exit_code == 1
    )  # --strict alone: exact

    # a racing writer with another number of rows leaves a statement that disagrees
    c = CdcSink(kafka_bootstrap, topic)
    c.frontier = lambda: stale
    c.write(frame(spark, [(6, "f"), (7, "g")], ddl))
    plain = json.loads(verify(kafka_bootstrap, topic, schema, "--json", engine=engine).stdout)
    assert ("count_mismatch", 1) in [(v["kind"], v["time"]) for v in plain["violations"]]
