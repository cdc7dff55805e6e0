"""The verifying consumer and the CLI against a real Kafka broker.

Topics are written by hand through the codec and CdcProducer, so every scenario (duplicates,
reordering over partitions, each kind of violation, a corrupt message) is exactly controlled.
"""

from __future__ import annotations

import json
import os
import random

import pytest
from click.testing import CliRunner
from helpers import DELTA_TEST_ARGS, delta_package_or_skip, read_history

from cdc_emitter.cli import main
from cdc_emitter.kafka.producer import CdcProducer
from cdc_emitter.protocol import Progress, Update, consolidate, progress_for
from cdc_emitter.protocol.codec import CdcCodec, union_schema
from cdc_emitter.read.verify import verify_topic
from cdc_emitter.spark.session import delta_package

pytestmark = pytest.mark.kafka

PRODUCTS = {
    "type": "record",
    "name": "data",
    "fields": [{"name": "id", "type": "long"}, {"name": "price", "type": ["null", "int"]}],
}

REFERENCE_UPDATES = [
    [Update((5, 10), 5, 1)],
    [Update((5, 12), 4, 1)],
    [Update((5, 12), 5, -1)],
    [Update((5, 10), 6, -1)],
]
REFERENCE_PROGRESS = [
    Progress((0,), (3,), ()),
    Progress((3,), (10,), ((4, 1), (5, 2), (6, 1))),
]
#: The reference example's changefeed in canonical compact notation, one line per message.
REFERENCE_TAIL = (
    '{"array":[{"data":{"id":5,"price":{"int":10}},"time":5,"diff":1}]}\n'
    '{"array":[{"data":{"id":5,"price":{"int":12}},"time":4,"diff":1}]}\n'
    '{"array":[{"data":{"id":5,"price":{"int":12}},"time":5,"diff":-1}]}\n'
    '{"array":[{"data":{"id":5,"price":{"int":10}},"time":6,"diff":-1}]}\n'
    '{"com.materialize.cdc.progress":{"lower":[0],"upper":[3],"counts":[]}}\n'
    '{"com.materialize.cdc.progress":{"lower":[3],"upper":[10],"counts":'
    '[{"time":4,"count":1},{"time":5,"count":2},{"time":6,"count":1}]}}\n'
)


@pytest.fixture
def codec():
    return CdcCodec(PRODUCTS)


@pytest.fixture
def schema_file(tmp_path):
    path = tmp_path / "products.avsc"
    path.write_text(json.dumps(union_schema(PRODUCTS), indent=2))
    return str(path)


def produce(bootstrap, topic, messages):
    """messages: (value_bytes, partition or None) pairs, written in this order."""
    with CdcProducer(bootstrap, topic) as producer:
        for value, partition in messages:
            producer.produce(value, partition=partition)


def encode(codec, message):
    if isinstance(message, Progress):
        return codec.encode_progress(message)
    (value,) = codec.encode_updates(message)
    return value


def write_messages(bootstrap, topic, codec, messages, partition=0):
    produce(bootstrap, topic, [(encode(codec, m), partition) for m in messages])


def cli(*args):
    result = CliRunner().invoke(main, list(args), prog_name="cdc-emitter")
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


CONTRACT_FIELDS = ("frontier", "messages", "updates", "duplicates", "violations")


def contract(summary):
    """The summary's contract fields (DESIGN §6), without the verdict, pending and hints."""
    return {k: summary[k] for k in CONTRACT_FIELDS}


def verify_json(bootstrap, topic, schema_file, *extra, engine="local"):
    result = cli(
        "verify",
        "--bootstrap-servers",
        bootstrap,
        "--topic",
        topic,
        "--schema",
        schema_file,
        "--json",
        "--engine",
        engine,
        *extra,
    )
    lines = result.stdout.splitlines()
    assert len(lines) == 1, result.stdout + result.stderr
    return result.exit_code, json.loads(lines[0]), result


# --- the reference example ------------------------------------------------------------------------


def test_reference_example_verifies(
    engine, kafka_bootstrap, topic_factory, codec, schema_file, tmp_path
):
    topic = topic_factory()
    write_messages(kafka_bootstrap, topic, codec, REFERENCE_UPDATES + REFERENCE_PROGRESS)
    out = tmp_path / "out.jsonl"
    hist = tmp_path / "hist.jsonl"
    code, summary, _ = verify_json(
        kafka_bootstrap,
        topic,
        schema_file,
        "--until-frontier",
        "10",
        "--timeout",
        "30",
        "--output",
        str(out),
        "--history",
        str(hist),
        engine=engine,
    )
    assert code == 0
    assert contract(summary) == {
        "frontier": [10],
        "messages": 6,
        "updates": 4,
        "duplicates": 0,
        "violations": [],
    }
    assert summary["verdict"] == "verified" and summary["hints"] == []
    assert out.read_text() == ""
    assert hist.read_text() == (
        '{"data":{"id":5,"price":12},"time":4,"diff":1}\n'
        '{"data":{"id":5,"price":10},"time":5,"diff":1}\n'
        '{"data":{"id":5,"price":12},"time":5,"diff":-1}\n'
        '{"data":{"id":5,"price":10},"time":6,"diff":-1}\n'
    )


def test_reference_example_human_summary(
    engine, kafka_bootstrap, topic_factory, codec, schema_file
):
    topic = topic_factory()
    write_messages(kafka_bootstrap, topic, codec, REFERENCE_UPDATES + REFERENCE_PROGRESS)
    result = cli(
        "verify",
        "--engine",
        engine,
        "--bootstrap-servers",
        kafka_bootstrap,
        "--topic",
        topic,
        "--schema",
        schema_file,
    )
    assert result.exit_code == 0
    assert result.stdout == (
        f"topic {topic}: frontier [10], end of topic read\n"
        "6 messages, 4 updates, 0 duplicates dropped\n"
        "verified: no violations\n"
    )
    assert result.stderr == ""


def test_tail_reference_example_is_the_documented_notation(
    kafka_bootstrap, topic_factory, codec, schema_file
):
    topic = topic_factory()
    write_messages(kafka_bootstrap, topic, codec, REFERENCE_UPDATES + REFERENCE_PROGRESS)
    result = cli(
        "tail", "--bootstrap-servers", kafka_bootstrap, "--topic", topic, "--schema", schema_file
    )
    assert result.exit_code == 0, result.stderr
    assert result.stdout == REFERENCE_TAIL
    assert result.stderr == ""
    limited = cli(
        "tail",
        "--bootstrap-servers",
        kafka_bootstrap,
        "--topic",
        topic,
        "--schema",
        schema_file,
        "--max-messages",
        "2",
    )
    assert limited.exit_code == 0
    assert limited.stdout == "".join(REFERENCE_TAIL.splitlines(keepends=True)[:2])


def test_tail_raw_framing(engine, kafka_bootstrap, topic_factory, schema_file):
    raw = CdcCodec(PRODUCTS, framing="raw")
    topic = topic_factory()
    write_messages(kafka_bootstrap, topic, raw, REFERENCE_UPDATES + REFERENCE_PROGRESS)
    result = cli(
        "tail",
        "--bootstrap-servers",
        kafka_bootstrap,
        "--topic",
        topic,
        "--schema",
        schema_file,
        "--framing",
        "raw",
    )
    assert (result.exit_code, result.stdout) == (0, REFERENCE_TAIL)
    code, summary, _ = verify_json(
        kafka_bootstrap, topic, schema_file, "--framing", "raw", engine=engine
    )
    assert (code, summary["frontier"], summary["violations"]) == (0, [10], [])


# --- duplicates and reordering across partitions --------------------------------------------------


def _products_history():
    """Inserts, updates and deletes of a small table over times 0..5 (consolidated)."""
    rng = random.Random(7)
    raw = []
    current = {}
    for time in range(6):
        for pid in range(1, 21):
            action = rng.random()
            if pid not in current and action < 0.5:
                current[pid] = rng.choice([None, rng.randrange(1, 100)])
                raw.append(Update((pid, current[pid]), time, 1))
            elif pid in current and action < 0.3:
                raw.append(Update((pid, current.pop(pid)), time, -1))
            elif pid in current and action < 0.6:
                raw.append(Update((pid, current[pid]), time, -1))
                current[pid] = rng.randrange(1, 100)
                raw.append(Update((pid, current[pid]), time, 1))
    # a row with multiplicity 2
    raw.append(Update((99, 1), 3, 2))
    current_multiset = {(pid, price): 1 for pid, price in current.items()}
    current_multiset[(99, 1)] = 2
    return consolidate(raw), current_multiset


def test_duplicates_and_reordering_across_partitions(
    engine, kafka_bootstrap, topic_factory, codec, schema_file, tmp_path
):
    history, table = _products_history()
    rng = random.Random(11)
    messages = []
    # every update in a random batch, some batches sent twice (re-batched differently)
    shuffled = list(history)
    rng.shuffle(shuffled)
    i = 0
    while i < len(shuffled):
        n = rng.randrange(1, 6)
        messages.append(shuffled[i : i + n])
        i += n
    for _ in range(10):  # duplicates re-batched into other messages
        start = rng.randrange(len(shuffled))
        messages.append(shuffled[start : start + rng.randrange(1, 4)])
    progress = [
        progress_for([u for u in history if lo <= u.time < hi], lo, hi)
        for lo, hi in ((0, 2), (2, 3), (3, 6))
    ]
    messages += progress + progress[1:2]  # a duplicated progress statement
    rng.shuffle(messages)
    topic = topic_factory(3)
    produce(kafka_bootstrap, topic, [(encode(codec, m), rng.randrange(3)) for m in messages])

    sent = sum(len(m) for m in messages if not isinstance(m, Progress))
    out, hist = tmp_path / "out.jsonl", tmp_path / "hist.jsonl"
    code, summary, _ = verify_json(
        kafka_bootstrap,
        topic,
        schema_file,
        "--until-frontier",
        "6",
        "--timeout",
        "30",
        "--output",
        str(out),
        "--history",
        str(hist),
        engine=engine,
    )
    assert code == 0, summary
    assert contract(summary) == {
        "frontier": [6],
        "messages": len(messages),
        "updates": sent,
        "duplicates": sent - len(history),
        "violations": [],
    }

    def key(data):
        return codec.sort_key(data)

    expected_out = "".join(
        json.dumps({"data": {"id": d[0], "price": d[1]}, "count": c}, separators=(",", ":")) + "\n"
        for d, c in sorted(table.items(), key=lambda kv: key(kv[0]))
    )
    assert out.read_text() == expected_out
    expected_hist = "".join(
        json.dumps(
            {"data": {"id": u.data[0], "price": u.data[1]}, "time": u.time, "diff": u.diff},
            separators=(",", ":"),
        )
        + "\n"
        for u in sorted(history, key=lambda u: (u.time, key(u.data)))
    )
    assert hist.read_text() == expected_hist

    # the library call agrees
    result = verify_topic(
        kafka_bootstrap, topic, codec, until_frontier=6, timeout=30, keep_history=True
    )
    assert result.reached and result.frontier == (6,) and not result.violations
    assert result.collection == table
    assert sorted(result.history, key=lambda u: (u.time, key(u.data))) == result.history
    assert result.history == sorted(history, key=lambda u: (u.time, key(u.data)))


# --- violations -----------------------------------------------------------------------------------

VIOLATION_CASES = {
    "conflicting_diff": (
        [[Update((1, 1), 1, 1)], [Update((1, 1), 1, 2)], Progress((0,), (2,), ((1, 1),))],
        [2],
        [("conflicting_diff", 1, 0, 1)],
    ),
    "over_count": (
        [[Update((1, 1), 1, 1), Update((2, 1), 1, 1)], Progress((0,), (2,), ((1, 1),))],
        [2],
        [("over_count", 1, 0, 1)],
    ),
    "count_mismatch": (
        [Progress((0,), (5,), ((1, 1),)), Progress((0,), (5,), ((1, 2),)), [Update((1, 1), 1, 1)]],
        [5],
        [("count_mismatch", 1, 0, 1)],
    ),
    "count_outside_interval": (
        [Progress((0,), (5,), ((7, 1),))],
        [5],
        [("count_outside_interval", 7, 0, 0)],
    ),
}


@pytest.mark.parametrize("kind", sorted(VIOLATION_CASES))
def test_violations_exit_1(engine, kafka_bootstrap, topic_factory, codec, schema_file, kind):
    messages, frontier, expected = VIOLATION_CASES[kind]
    topic = topic_factory()
    write_messages(kafka_bootstrap, topic, codec, messages)
    code, summary, _ = verify_json(kafka_bootstrap, topic, schema_file, engine=engine)
    assert code == 1
    assert summary["frontier"] == frontier
    got = [
        (v["kind"], v["time"], v.get("partition"), v.get("offset")) for v in summary["violations"]
    ]
    assert got == expected
    assert all(isinstance(v["detail"], str) and v["detail"] for v in summary["violations"])


def test_corrupt_message_is_reported_with_partition_and_offset(
    engine, kafka_bootstrap, topic_factory, codec, schema_file
):
    topic = topic_factory(3)
    produce(
        kafka_bootstrap,
        topic,
        [
            (encode(codec, REFERENCE_UPDATES[0]), 0),
            (encode(codec, REFERENCE_UPDATES[1]), 2),
            (b"\x00\x00\x00\x00\x00\x05garbage", 2),  # partition 2, offset 1
            (encode(codec, REFERENCE_UPDATES[2]), 1),
            (encode(codec, REFERENCE_UPDATES[3]), 1),
            (encode(codec, REFERENCE_PROGRESS[0]), 0),
            (encode(codec, REFERENCE_PROGRESS[1]), 2),
        ],
    )
    code, summary, result = verify_json(
        kafka_bootstrap,
        topic,
        schema_file,
        "--until-frontier",
        "10",
        "--timeout",
        "30",
        engine=engine,
    )
    assert code == 1
    assert summary["frontier"] == [10]
    assert summary["messages"] == 7 and summary["updates"] == 4
    (violation,) = summary["violations"]
    assert (violation["kind"], violation["time"], violation["partition"], violation["offset"]) == (
        "undecodable",
        None,
        2,
        1,
    )

    human = cli(
        "verify",
        "--engine",
        engine,
        "--bootstrap-servers",
        kafka_bootstrap,
        "--topic",
        topic,
        "--schema",
        schema_file,
    )
    assert human.exit_code == 1
    lines = human.stdout.splitlines()
    assert lines[0] == f"topic {topic}: frontier [10], end of topic read"
    assert lines[2] == "1 violations:"
    assert lines[3].startswith("  undecodable (partition 2, offset 1): partition 2 offset 1: ")
    assert lines[-1] == "FAILED: protocol violations"

    tailed = cli(
        "tail", "--bootstrap-servers", kafka_bootstrap, "--topic", topic, "--schema", schema_file
    )
    assert tailed.exit_code == 1
    assert len(tailed.stdout.splitlines()) == 6
    assert tailed.stderr.startswith("undecodable message at partition 2 offset 1: ")


def test_violation_takes_precedence_over_not_reached(
    engine, kafka_bootstrap, topic_factory, codec, schema_file
):
    topic = topic_factory()
    write_messages(kafka_bootstrap, topic, codec, VIOLATION_CASES["conflicting_diff"][0])
    code, summary, _ = verify_json(
        kafka_bootstrap,
        topic,
        schema_file,
        "--until-frontier",
        "100",
        "--timeout",
        "2",
        engine=engine,
    )
    assert code == 1
    assert summary["frontier"] == [2]
    assert [v["kind"] for v in summary["violations"]] == ["conflicting_diff"]


# --- targets and timeouts -------------------------------------------------------------------------


def test_frontier_not_reached_in_time_exits_3(
    engine, kafka_bootstrap, topic_factory, codec, schema_file
):
    topic = topic_factory()
    write_messages(kafka_bootstrap, topic, codec, REFERENCE_UPDATES + REFERENCE_PROGRESS[:1])
    code, summary, _ = verify_json(
        kafka_bootstrap,
        topic,
        schema_file,
        "--until-frontier",
        "10",
        "--timeout",
        "2",
        engine=engine,
    )
    assert code == 3
    assert contract(summary) == {
        "frontier": [3],
        "messages": 5,
        "updates": 4,
        "duplicates": 0,
        "violations": [],
    }
    assert summary["verdict"] == "not_reached"
    human = cli(
        "verify",
        "--engine",
        engine,
        "--bootstrap-servers",
        kafka_bootstrap,
        "--topic",
        topic,
        "--schema",
        schema_file,
        "--until-closed",
        "--timeout",
        "1.5",
    )
    assert human.exit_code == 3
    assert human.stdout == (
        f"topic {topic}: frontier [3], target [] (closed) NOT reached within 1.5s\n"
        "5 messages, 4 updates, 0 duplicates dropped\n"
        "NOT VERIFIED: the target was not reached in time\n"
    )


def test_until_closed_follows_new_messages(
    engine, kafka_bootstrap, topic_factory, codec, schema_file
):
    import threading
    import time

    topic = topic_factory()
    write_messages(kafka_bootstrap, topic, codec, REFERENCE_UPDATES + REFERENCE_PROGRESS)

    def later():
        time.sleep(1.5)
        write_messages(kafka_bootstrap, topic, codec, [Progress((10,), (), ())])

    writer = threading.Thread(target=later)
    writer.start()
    try:
        code, summary, _ = verify_json(
            kafka_bootstrap, topic, schema_file, "--until-closed", "--timeout", "30", engine=engine
        )
    finally:
        writer.join()
    assert code == 0
    assert summary["frontier"] == [] and summary["messages"] == 7


def test_missing_topic_and_unreachable_broker_exit_2(engine, kafka_bootstrap, schema_file):
    missing = cli(
        "verify",
        "--engine",
        engine,
        "--bootstrap-servers",
        kafka_bootstrap,
        "--topic",
        "no-such-topic-verify",
        "--schema",
        schema_file,
    )
    assert (missing.exit_code, missing.stdout) == (2, "")
    assert missing.stderr == (
        f"error: topic 'no-such-topic-verify' does not exist on broker {kafka_bootstrap}: nothing "
        "to read (check the topic name and the bootstrap servers)\n"
    )
    down = cli(
        "verify",
        "--engine",
        engine,
        "--bootstrap-servers",
        "127.0.0.1:1",
        "--topic",
        "t",
        "--schema",
        schema_file,
        "--broker-timeout",
        "2",
    )
    assert (down.exit_code, down.stdout) == (2, "")
    assert down.stderr == (
        "error: cannot reach Kafka at 127.0.0.1:1: connection refused; is a broker listening "
        "there? check --bootstrap-servers\n"
    )


def test_empty_topic_is_not_verified(engine, kafka_bootstrap, topic_factory, codec, schema_file):
    topic = topic_factory(2)
    code, summary, _ = verify_json(kafka_bootstrap, topic, schema_file, engine=engine)
    assert code == 3
    assert contract(summary) == {
        "frontier": [0],
        "messages": 0,
        "updates": 0,
        "duplicates": 0,
        "violations": [],
    }
    assert summary["verdict"] == "empty"
    code, summary, _ = verify_json(
        kafka_bootstrap, topic, schema_file, "--until-frontier", "0", engine=engine
    )
    assert code == 0
    code, summary, _ = verify_json(
        kafka_bootstrap,
        topic,
        schema_file,
        "--until-frontier",
        "1",
        "--timeout",
        "1",
        engine=engine,
    )
    assert code == 3


# --- export (Spark) -------------------------------------------------------------------------------


def _write_parquet(path, rows):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table(
        {
            "id": pa.array([r[0] for r in rows], pa.int64()),
            "name": pa.array([r[1] for r in rows], pa.string()),
            "price": pa.array([r[2] for r in rows], pa.int32()),
        }
    )
    pq.write_table(table, str(path))
    return str(path)


def _lines(path):
    return [json.loads(line) for line in open(path, encoding="utf-8")]


V1 = [(1, "apple", 10), (2, "pear", None), (3, "plum", 7), (3, "plum", 7), (4, "fig", 3)]
V2 = [(1, "apple", 12), (2, "pear", None), (3, "plum", 7), (5, "kiwi", 4), (5, "kiwi", 4)]
V1_TABLE = [  # V1 as the collection verify --output writes
    {"data": {"id": 1, "name": "apple", "price": 10}, "count": 1},
    {"data": {"id": 2, "name": "pear", "price": None}, "count": 1},
    {"data": {"id": 3, "name": "plum", "price": 7}, "count": 2},
    {"data": {"id": 4, "name": "fig", "price": 3}, "count": 1},
]


def _verify_table(bootstrap, topic, source, tmp_path, frontier):
    """verify --output of ``topic`` with the schema of ``source`` (schema --from): its lines."""
    schema = cli("schema", "--from", source)
    assert schema.exit_code == 0, schema.stderr
    schema_file = tmp_path / "t.avsc"
    schema_file.write_text(schema.stdout)
    out = tmp_path / "out.jsonl"
    code, result, _ = verify_json(
        bootstrap,
        topic,
        str(schema_file),
        "--until-frontier",
        str(frontier),
        "--timeout",
        "30",
        "--output",
        str(out),
    )
    assert (code, result["frontier"], result["violations"]) == (0, [frontier], [])
    return _lines(out)


@pytest.mark.spark
def test_export_parquet_then_verify(kafka_bootstrap, topic_factory, spark, tmp_path):
    source = _write_parquet(tmp_path / "v1.parquet", V1)
    topic = f"{topic_factory()}-export"  # a fresh name: export creates it
    exported = cli(
        "export",
        source,
        "--bootstrap-servers",
        kafka_bootstrap,
        "--topic",
        topic,
        "--time",
        "1",
        "--create-topic",
        "--json",
    )
    assert exported.exit_code == 0, exported.stderr
    summary = json.loads(exported.stdout)
    assert summary == {
        "source": source,
        "previous": None,
        "topic": topic,
        "time": 1,
        "lower": [0],
        "upper": [2],
        "frontier": [2],
        "updates": 4,
        "messages": summary["messages"],
    }
    assert summary["messages"] >= 1
    assert _verify_table(kafka_bootstrap, topic, source, tmp_path, 2) == V1_TABLE


@pytest.mark.spark
def test_export_previous_writes_the_difference_and_close(
    kafka_bootstrap, topic_factory, spark, tmp_path
):
    v1 = _write_parquet(tmp_path / "v1.parquet", V1)
    v2 = _write_parquet(tmp_path / "v2.parquet", V2)
    topic = topic_factory()
    base = ["--bootstrap-servers", kafka_bootstrap, "--topic", topic]
    first = cli("export", v1, *base, "--time", "1")
    assert first.exit_code == 0, first.stderr
    assert first.stdout == (
        f"exported {v1} to topic {topic} at time 1: 4 updates in "
        f"{first.stdout.split(' in ')[1].split()[0]} messages, frontier [2]\n"
    )
    second = cli("export", v2, "--previous", v1, *base, "--time", "3", "--close", "--json")
    assert second.exit_code == 0, second.stderr
    summary = json.loads(second.stdout)
    assert (summary["lower"], summary["upper"], summary["frontier"], summary["updates"]) == (
        [2],
        [],
        [],
        5,
    )

    schema = cli("schema", "--from", v1)
    schema_file = tmp_path / "s.avsc"
    schema_file.write_text(schema.stdout)
    hist, out = tmp_path / "hist.jsonl", tmp_path / "out.jsonl"
    code, result, _ = verify_json(
        kafka_bootstrap,
        topic,
        str(schema_file),
        "--until-closed",
        "--timeout",
        "30",
        "--history",
        str(hist),
        "--output",
        str(out),
    )
    assert code == 0
    assert result["frontier"] == [] and result["violations"] == []
    history = _lines(hist)
    at3 = [h for h in history if h["time"] == 3]
    assert at3 == [
        {"data": {"id": 1, "name": "apple", "price": 10}, "time": 3, "diff": -1},
        {"data": {"id": 1, "name": "apple", "price": 12}, "time": 3, "diff": 1},
        {"data": {"id": 3, "name": "plum", "price": 7}, "time": 3, "diff": -1},
        {"data": {"id": 4, "name": "fig", "price": 3}, "time": 3, "diff": -1},
        {"data": {"id": 5, "name": "kiwi", "price": 4}, "time": 3, "diff": 2},
    ]
    assert [h["time"] for h in history] == [1] * 4 + [3] * 5
    assert _lines(out) == [
        {"data": {"id": 1, "name": "apple", "price": 12}, "count": 1},
        {"data": {"id": 2, "name": "pear", "price": None}, "count": 1},
        {"data": {"id": 3, "name": "plum", "price": 7}, "count": 1},
        {"data": {"id": 5, "name": "kiwi", "price": 4}, "count": 2},
    ]


def _parquet_rows(path):
    import pyarrow.parquet as pq

    table = pq.read_table(str(path))
    return sorted(
        zip(*(table.column(c).to_pylist() for c in ("id", "name", "price"))),
        key=lambda r: (r[0], r[1], r[2] is None, r[2] or 0),
    )


@pytest.mark.spark
def test_export_from_topic_gives_back_each_exported_table(
    kafka_bootstrap, topic_factory, spark, tmp_path
):
    v1 = _write_parquet(tmp_path / "v1.parquet", V1)
    v2 = _write_parquet(tmp_path / "v2.parquet", V2)
    topic = topic_factory(2)
    base = ["--bootstrap-servers", kafka_bootstrap]
    assert cli("export", v1, *base, "--topic", topic, "--time", "1").exit_code == 0
    assert (
        cli("export", v2, "--previous", v1, *base, "--topic", topic, "--time", "3").exit_code == 0
    )
    schema_file = tmp_path / "s.avsc"
    schema_file.write_text(cli("schema", "--from", v1).stdout)
    back = ["export", "--from-topic", topic, "--schema", str(schema_file), *base]

    latest = cli(*back, "--to", str(tmp_path / "latest"), "--json")
    assert latest.exit_code == 0, latest.stderr
    assert json.loads(latest.stdout) == {
        "topic": topic,
        "to": str(tmp_path / "latest"),
        "format": "parquet",
        "as_of": 4,
        "frontier": [4],
        "verdict": "verified",
        "rows": 5,
    }
    assert _parquet_rows(tmp_path / "latest") == _parquet_rows(v2)
    first = cli(*back, "--to", str(tmp_path / "first"), "--as-of", "2")
    assert first.exit_code == 0, first.stderr
    assert first.stdout == (
        f"exported topic {topic} (as of time 2, frontier [4]) to {tmp_path / 'first'}: 5 rows\n"
    )
    assert _parquet_rows(tmp_path / "first") == _parquet_rows(v1)

    beyond = cli(*back, "--to", str(tmp_path / "beyond"), "--as-of", "5")
    assert (beyond.exit_code, beyond.stderr) == (
        3,
        f"error: topic {topic} is proven only up to frontier [4]: "
        "--as-of 5 is beyond it, nothing written\n",
    )
    again = cli(*back, "--to", str(tmp_path / "latest"))
    assert again.exit_code == 2 and again.stderr.startswith(
        f"error: cannot write parquet table {tmp_path / 'latest'}: "
    )
    assert (
        cli(
            *back, "--to", str(tmp_path / "latest"), "--mode", "overwrite", "--as-of", "2"
        ).exit_code
        == 0
    )
    assert _parquet_rows(tmp_path / "latest") == _parquet_rows(v1)
    assert not (tmp_path / "beyond").exists()

    # a topic with violations: the summary, exit 1, nothing written
    from cdc_emitter.protocol.codec import data_schema_from_text

    codec = CdcCodec(data_schema_from_text(schema_file.read_text()))
    bad = topic_factory()
    write_messages(
        kafka_bootstrap,
        bad,
        codec,
        [[Update((1, "a", 1), 0, 1), Update((2, "b", 1), 0, 1)], Progress((0,), (1,), ((0, 1),))],
    )
    refused = cli(
        "export",
        "--from-topic",
        bad,
        "--schema",
        str(schema_file),
        *base,
        "--to",
        str(tmp_path / "bad"),
    )
    assert refused.exit_code == 1
    assert refused.stdout.splitlines()[-1] == "FAILED: protocol violations"
    assert not (tmp_path / "bad").exists()
    mixed = cli(
        "export", v1, "--from-topic", topic, "--schema", str(schema_file), *base, "--to", "x"
    )
    assert (mixed.exit_code, mixed.stderr.splitlines()[-1]) == (
        2,
        "Error: --from-topic does not go with SOURCE",
    )


SQLITE_JDBC_PACKAGE = "org.xerial:sqlite-jdbc:3.46.1.3"


def export_in_new_process(*args):
    """The real `cdc-emitter export` in its own process: --packages only applies to a new JVM
    (inside this test process getOrCreate() would return the running test session)."""
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "cdc_emitter.cli", "export", *args],
        capture_output=True,
        text=True,
        timeout=600,
    )


def _write_delta(path, rows):
    """A one-commit Delta table: a parquet file and its _delta_log entry (Delta protocol 1/2)."""
    import uuid

    os.makedirs(path / "_delta_log")
    data = _write_parquet(path / "part-00000.parquet", rows)
    fields = [
        {"name": n, "type": t, "nullable": True, "metadata": {}}
        for n, t in (("id", "long"), ("name", "string"), ("price", "integer"))
    ]
    actions = [
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
        {
            "metaData": {
                "id": str(uuid.uuid4()),
                "format": {"provider": "parquet", "options": {}},
                "schemaString": json.dumps({"type": "struct", "fields": fields}),
                "partitionColumns": [],
                "configuration": {},
                "createdTime": 1700000000000,
            }
        },
        {
            "add": {
                "path": "part-00000.parquet",
                "partitionValues": {},
                "size": os.path.getsize(data),
                "modificationTime": 1700000000000,
                "dataChange": True,
            }
        },
    ]
    (path / "_delta_log" / "00000000000000000000.json").write_text(
        "".join(json.dumps(a) + "\n" for a in actions)
    )
    return str(path)


@pytest.mark.spark
def test_export_delta_with_packages(kafka_bootstrap, topic_factory, spark, tmp_path):
    source = _write_delta(tmp_path / "products", V1)
    topic = topic_factory()
    base = [
        source,
        "--format",
        "delta",
        "--bootstrap-servers",
        kafka_bootstrap,
        "--topic",
        topic,
        "--time",
        "1",
    ]
    # without the package: in this process, whose session has no Delta either (no JVM to start)
    without = cli("export", *base)
    assert without.exit_code == 2
    assert without.stdout == ""
    assert f"error: cannot read delta source '{source}': " in without.stderr
    assert "[DATA_SOURCE_NOT_FOUND]" in without.stderr
    named = (
        delta_package(spark.version)
        or f"with the Delta Lake package built for Spark {spark.version}"
    )
    assert f"Spark has no Delta Lake reader loaded: add --packages {named}\n" in without.stderr
    package = delta_package_or_skip()  # the rest needs Delta's package for this Spark

    exported = export_in_new_process(*base, "--packages", package, *DELTA_TEST_ARGS)
    assert exported.returncode == 0, exported.stderr
    assert exported.stdout.startswith(
        f"exported {source} to topic {topic} at time 1: 4 updates in "
    )
    assert (
        _verify_table(
            kafka_bootstrap, topic, _write_parquet(tmp_path / "same.parquet", V1), tmp_path, 2
        )
        == V1_TABLE
    )


@pytest.mark.spark
def test_export_jdbc_with_a_driver_package(kafka_bootstrap, topic_factory, spark, tmp_path):
    import sqlite3

    db = tmp_path / "shop.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE products (id INTEGER NOT NULL, name TEXT, price INTEGER)")
        conn.executemany("INSERT INTO products VALUES (?, ?, ?)", V1)
    topic = topic_factory()
    base = [
        "products",
        "--format",
        "jdbc",
        "-O",
        f"url=jdbc:sqlite:{db}",
        "-O",
        "driver=org.sqlite.JDBC",
        "--bootstrap-servers",
        kafka_bootstrap,
        "--topic",
        topic,
        "--time",
        "1",
    ]
    without = cli("export", *base)  # in this process, whose session has no SQLite driver either
    assert without.exit_code == 2
    assert "error: cannot read jdbc source 'products': " in without.stderr
    assert "ClassNotFoundException: org.sqlite.JDBC" in without.stderr
    assert "add --packages with the driver's Maven coordinates" in without.stderr
    exported = export_in_new_process(
        "products",
        "--format",
        "jdbc",
        "-O",
        f"url=jdbc:sqlite:{db}",
        "-O",
        "driver=org.sqlite.JDBC",
        "--packages",
        SQLITE_JDBC_PACKAGE,
        "--bootstrap-servers",
        kafka_bootstrap,
        "--topic",
        topic,
        "--time",
        "1",
        "--json",
    )
    assert exported.returncode == 0, exported.stderr
    summary = json.loads(exported.stdout)
    assert (summary["source"], summary["updates"], summary["frontier"]) == ("products", 4, [2])
    history, frontier, violations, _ = read_history(kafka_bootstrap, topic, _jdbc_codec())
    assert (frontier, violations) == ((2,), [])
    assert sorted((d, t, n) for d, t, n in history) == [
        ((1, "apple", 10), 1, 1),
        ((2, "pear", None), 1, 1),
        ((3, "plum", 7), 1, 2),
        ((4, "fig", 3), 1, 1),
    ]


def _jdbc_codec():
    # Spark's JDBC reader maps SQLite's INTEGER/TEXT to int/string, all nullable
    return CdcCodec(
        {
            "type": "record",
            "name": "data",
            "fields": [
                {"name": "id", "type": ["null", "int"]},
                {"name": "name", "type": ["null", "string"]},
                {"name": "price", "type": ["null", "int"]},
            ],
        }
    )


@pytest.mark.spark
@pytest.mark.parametrize(
    "ddl",
    [
        "id long not null, price int",
        "a tinyint, b smallint, c bigint, d float, e double, f boolean, g string, h binary",
        "d date, ts timestamp, tn timestamp_ntz, n decimal(12, 3), v varchar(5)",
        "s struct<x: int not null, y: array<map<string, double>>>, `odd name` string",
    ],
)
def test_pure_ddl_parser_agrees_with_spark(spark, ddl):
    from cdc_emitter.spark.ddl import parse_ddl_columns
    from cdc_emitter.spark.tables import spark_struct

    assert parse_ddl_columns(ddl) == spark_struct(spark, ddl)


@pytest.mark.spark
def test_schema_columns_falls_back_to_spark(spark):
    result = cli("schema", "--columns", "id long, d interval day")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: column 'd' has type interval day")


def test_tail_follow_prints_new_messages(kafka_bootstrap, topic_factory, codec, schema_file):
    import threading
    import time

    topic = topic_factory()
    write_messages(kafka_bootstrap, topic, codec, REFERENCE_UPDATES)

    def later():
        time.sleep(1.5)
        write_messages(kafka_bootstrap, topic, codec, REFERENCE_PROGRESS)

    writer = threading.Thread(target=later)
    writer.start()
    try:
        result = cli(
            "tail",
            "--bootstrap-servers",
            kafka_bootstrap,
            "--topic",
            topic,
            "--schema",
            schema_file,
            "--follow",
            "--max-messages",
            "6",
            "--timeout",
            "30",
        )
    finally:
        writer.join()
    assert (result.exit_code, result.stdout) == (0, REFERENCE_TAIL)
