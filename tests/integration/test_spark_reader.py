"""``read_cdc`` on the real broker: CdcSink writes, Spark reads back, and the local reader agrees."""

from __future__ import annotations

import pytest
from helpers import as_history, frame, read_history

from cdc_emitter import CdcSink, read_cdc
from cdc_emitter.errors import BrokerError, CdcError, DecodeError, SchemaError
from cdc_emitter.kafka.producer import CdcProducer
from cdc_emitter.kafka.reading import read_topic
from cdc_emitter.protocol import CdcReader, Progress, Update
from cdc_emitter.protocol.codec import CdcCodec
from cdc_emitter.read import spark_replay
from cdc_emitter.spark.schema import data_schema

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

DDL = "k long, v string, m map<string,long>, diff long"
BATCHES = [  # (time, rows): retractions, a map column, nulls, a row that cancels within a batch
    (
        0,
        [
            (1, "a", {"x": 1}, 1),
            (2, None, None, 2),
            (3, "c", {}, 1),
            (9, "z", None, 1),
            (9, "z", None, -1),
        ],
    ),
    (2, [(1, "a", {"x": 1}, -1), (4, "d", {"y": 2, "x": 1}, 1)]),
    (3, [(2, None, None, -2), (5, "e", None, 3), (4, "d", {"x": 1, "y": 2}, 1)]),
]


def _plain(rows) -> list[tuple]:
    """Spark rows as comparable tuples (maps as sorted item tuples)."""
    return sorted(
        tuple(tuple(sorted(v.items())) if isinstance(v, dict) else v for v in row) for row in rows
    )


def _schema(spark) -> dict:
    return data_schema(spark.createDataFrame([], DDL).drop("diff").schema)


def test_round_trip_collection_and_history_equal_the_input(spark, kafka_bootstrap, topic_factory):
    topic = topic_factory(3)
    sink = CdcSink(kafka_bootstrap, topic)
    for time, rows in BATCHES:
        sink.write(frame(spark, rows, DDL), time=time)
    # every update message once more: duplicates, as a retried task leaves them
    with CdcProducer(kafka_bootstrap, topic) as producer:
        for record in list(read_topic(kafka_bootstrap, topic)):
            if record.value[5:6] == b"\x00":
                producer.produce(record.value, partition=record.partition)

    result = read_cdc(spark, bootstrap_servers=kafka_bootstrap, topic=topic, schema=_schema(spark))

    triples = [
        ((k, v, tuple(sorted(m.items())) if m is not None else None), t, d)
        for t, rows in BATCHES
        for k, v, m, d in rows
    ]
    expected = as_history(triples)
    assert (result.frontier, result.verdict, result.violations) == ((4,), "verified", [])
    # every update arrived twice: received twice, dropped once as a duplicate
    assert (result.statements, result.updates, result.duplicates) == (
        3,
        2 * len(expected),
        len(expected),
    )
    history = _plain(result.history.collect())
    assert history == sorted((*u.data, u.time, u.diff) for u in expected)
    totals: dict = {}
    for u in expected:
        totals[u.data] = totals.get(u.data, 0) + u.diff
    assert _plain(result.collection.collect()) == sorted((*d, n) for d, n in totals.items() if n)
    # the local reader reads the same history
    local, frontier, violations, _ = read_history(kafka_bootstrap, topic, CdcCodec(_schema(spark)))
    assert (frontier, violations) == ((4,), []) and len(local) == len(expected)


def test_without_a_schema_the_topic_is_read_with_its_writers(spark, kafka_bootstrap, topic_factory):
    """No ``schema``: the data schema the sink recorded in the topic's progress statements, as
    ``cdc-emitter verify`` reads it; a topic with no such statement is refused, naming the way
    out, before Spark reads."""
    topic = topic_factory()
    sink = CdcSink(kafka_bootstrap, topic)
    for time, rows in BATCHES[:2]:
        sink.write(frame(spark, rows, DDL), time=time)
    given = read_cdc(spark, bootstrap_servers=kafka_bootstrap, topic=topic, schema=_schema(spark))
    found = read_cdc(spark, bootstrap_servers=kafka_bootstrap, topic=topic)
    try:
        assert (found.frontier, found.verdict, found.updates) == (
            given.frontier,
            "verified",
            given.updates,
        )
        assert _plain(found.history.collect()) == _plain(given.history.collect())
        assert found.codec.data_schema == given.codec.data_schema
    finally:
        given.unpersist()
        found.unpersist()

    bare = topic_factory()  # an update array and no statement: no writer's schema
    codec = CdcCodec(_schema(spark))
    with CdcProducer(kafka_bootstrap, bare) as producer:
        for value in codec.encode_updates([Update((1, "a", None), 0, 1)]):
            producer.produce(value, partition=0)
    with pytest.raises(SchemaError) as refused:
        read_cdc(spark, bootstrap_servers=kafka_bootstrap, topic=bare)
    assert str(refused.value) == (
        f"topic {bare!r} has no progress statement with its writer's schema in the last 64 "
        "messages of each partition: pass schema (the data record, as a path or a dict) or "
        "schema_registry_url"
    )
    with pytest.raises(CdcError, match="schema or schema_registry_url, not both"):
        read_cdc(
            spark,
            bootstrap_servers=kafka_bootstrap,
            topic=topic,
            schema=_schema(spark),
            schema_registry_url="http://127.0.0.1:1",
        )


def test_collection_and_history_read_the_cached_reading_until_unpersisted(
    spark, kafka_bootstrap, topic_factory, capsys
):
    """The grouped updates stay cached: the returned DataFrames scan that copy, not Kafka;
    ``unpersist`` frees it (once or twice) and puts new DataFrames in their place, which read
    the topic again, alike."""
    topic = topic_factory(2)
    sink = CdcSink(kafka_bootstrap, topic)
    for time, rows in BATCHES:
        sink.write(frame(spark, rows, DDL), time=time)
    result = read_cdc(spark, bootstrap_servers=kafka_bootstrap, topic=topic, schema=_schema(spark))

    def plans() -> list[str]:
        capsys.readouterr()
        result.history.explain()
        history = capsys.readouterr().out
        result.collection.explain()
        return [history, capsys.readouterr().out]

    assert all("InMemoryTableScan" in plan for plan in plans())
    history, collection = _plain(result.history.collect()), _plain(result.collection.collect())
    assert (len(history), len(collection)) == (8, 3)

    stored, frames = result.cached, (result.history, result.collection)
    assert stored is not None and stored.storageLevel.useMemory
    result.unpersist()
    assert result.cached is None and not stored.storageLevel.useMemory
    # new DataFrames: the ones taken before keep their plan, the cached scan in it
    assert all(new is not old for new, old in zip((result.history, result.collection), frames))
    result.unpersist()
    assert all("InMemoryTableScan" not in plan and "kafka" in plan.lower() for plan in plans())
    assert _plain(result.history.collect()) == history
    assert _plain(result.collection.collect()) == collection


def test_the_collection_sums_the_cached_groups_without_another_shuffle(
    spark, kafka_bootstrap, topic_factory, capsys
):
    """The grouped updates are spread by their data: the collection adds them up where they
    are (a shuffle of every update less on a big topic). Maps, grouped by their sorted entries,
    are left out here: their collection groups those again."""
    topic = topic_factory(2)
    sink = CdcSink(kafka_bootstrap, topic)
    for time, rows in BATCHES:
        plain = [(k, v, d) for k, v, _m, d in rows]
        sink.write(frame(spark, plain, "k long, v string, diff long"), time=time)
    schema = data_schema(spark.createDataFrame([], "k long, v string").schema)
    result = read_cdc(spark, bootstrap_servers=kafka_bootstrap, topic=topic, schema=schema)
    capsys.readouterr()
    result.collection.explain()
    plan = capsys.readouterr().out
    above_the_copy = plan.split("InMemoryTableScan")[0]
    assert "Aggregate" in above_the_copy and "Exchange" not in above_the_copy, plan
    assert sorted(map(tuple, result.collection.collect())) == [
        (3, "c", 1),
        (4, "d", 2),
        (5, "e", 3),
    ]


def test_as_of_a_time_below_the_frontier_and_not_beyond_it(spark, kafka_bootstrap, topic_factory):
    topic = topic_factory()
    sink = CdcSink(kafka_bootstrap, topic)
    for time, rows in BATCHES:
        sink.write(frame(spark, rows, DDL), time=time)
    first = read_cdc(
        spark, bootstrap_servers=kafka_bootstrap, topic=topic, schema=_schema(spark), until=1
    )
    assert _plain(first.collection.select("k", "count").collect()) == [(1, 1), (2, 2), (3, 1)]
    # its history holds times below 1 only: a later time, though below the frontier, is refused
    assert _plain(first.collection_as_of(1).select("k", "count").collect()) == [
        (1, 1),
        (2, 2),
        (3, 1),
    ]
    with pytest.raises(CdcError) as beyond:
        first.collection_as_of(3)
    assert str(beyond.value) == (
        "this reading holds the history below time 1 only (until=1): ask for a time up to 1, "
        "or read without until"
    )
    first.unpersist()
    with pytest.raises(CdcError, match=r"proven complete only up to frontier 4, not up to 5"):
        read_cdc(
            spark, bootstrap_servers=kafka_bootstrap, topic=topic, schema=_schema(spark), until=5
        )


@pytest.mark.parametrize(
    "strict, streamed",
    [(None, False), ("exact", False), ("exact", True)],
    ids=["None", "exact", "exact-streamed"],
)
def test_violations_are_the_local_readers(
    spark, kafka_bootstrap, topic_factory, strict, streamed, monkeypatch
):
    """``streamed``: the driver takes the rows it needs in order a partition at a time, as on a
    topic too big to collect them at once."""
    if streamed:
        monkeypatch.setattr(spark_replay, "COLLECT_AT_MOST", 0)
    topic = topic_factory(2)
    schema = {"type": "record", "name": "row", "fields": [{"name": "k", "type": "long"}]}
    codec = CdcCodec(schema)
    messages = [  # (partition, value)
        (0, codec.encode_updates([Update((1,), 0, 1), Update((2,), 0, 1), Update((2,), 0, 1)])[0]),
        (0, codec.encode_updates([Update((1,), 0, 5), Update((1,), 0, 5)])[0]),  # conflicting twice
        (1, codec.encode_updates([Update((1,), 0, 6), Update((4,), -1, 1), Update((4,), 3, 0)])[0]),
        (0, codec.encode_progress(Progress((0,), (2,), ((0, 2), (1, 1))))),  # time 1 never arrives
        (
            0,
            codec.encode_updates([Update((7,), 0, 1), Update((1,), 0, 2)])[0],
        ),  # late: strict sees it
        (1, codec.encode_progress(Progress((0,), (1,), ((0, 3),)))),  # count mismatch at 0
        (1, codec.encode_progress(Progress((2,), (3,), ((7, 1),)))),  # count outside the interval
        (0, b"\x00\x00\x00\x00\x00\x07garbage"),  # undecodable
        (
            0,
            codec.encode_updates([Update((3,), 5, 1)])[0] + b"\x01",
        ),  # a byte to spare: undecodable
        (1, codec.encode_updates([Update((3,), 5, 1)])[0]),  # held beyond the frontier
    ]
    with CdcProducer(kafka_bootstrap, topic) as producer:
        for partition, value in messages:
            producer.produce(value, partition=partition)

    result = read_cdc(
        spark, bootstrap_servers=kafka_bootstrap, topic=topic, schema=schema, strict=strict
    )
    # the local reader, reading the partitions one after another, decides exactly the same
    local = CdcReader(strict=strict)
    for record in sorted(read_topic(kafka_bootstrap, topic), key=lambda r: (r.partition, r.offset)):
        try:
            local.push(codec.decode(record.value), partition=record.partition, offset=record.offset)
        except DecodeError as exc:
            local.messages += 1
            local.violate(
                "undecodable",
                None,
                f"partition {record.partition} offset {record.offset}: {exc}",
                record.partition,
                record.offset,
            )
    assert result.violations == local.violations
    kinds = {v.kind for v in local.violations}
    assert kinds >= {
        "conflicting_diff",
        "count_mismatch",
        "count_outside_interval",
        "undecodable",
        "negative_time",
        "zero_diff",
    }
    assert ("over_count" in kinds) == (
        strict is not None
    )  # row 7 arrives after time 0 was reported
    assert (result.frontier, result.pending) == (
        local.frontier,
        local.pending(),
    ) and result.frontier == (1,)
    assert (result.messages, result.updates, result.duplicates) == (
        local.messages,
        local.updates_received,
        local.duplicates,
    )
    assert result.verdict == "violations" and result.held == 1
    hints = [codec.diagnose(value) for _p, value in messages]  # what verify says, once each
    assert result.hints == list(dict.fromkeys(h for h in hints if h is not None)) and result.hints


def test_dates_before_1582_read_as_the_local_reader_reads_them(
    spark, kafka_bootstrap, topic_factory
):
    """Avro counts a date in days of the proleptic Gregorian calendar, as the local codec
    reads it; Spark 3's Avro reader refuses days before 1582 unless told the same."""
    import datetime

    from cdc_emitter.read.verify import verify_topic

    schema = {
        "type": "record",
        "name": "row",
        "fields": [
            {"name": "k", "type": "long"},
            {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        ],
    }
    codec = CdcCodec(schema)
    days = [datetime.date(1, 1, 1), datetime.date(1582, 10, 4), datetime.date(2026, 11, 30)]
    updates = [Update((k, day), 0, 1) for k, day in enumerate(days)]
    topic = topic_factory(1)
    with CdcProducer(kafka_bootstrap, topic) as producer:
        for value in codec.encode_updates(updates):
            producer.produce(value, partition=0)
        producer.produce(codec.encode_progress(Progress((0,), (1,), ((0, 3),))), partition=0)

    result = read_cdc(spark, bootstrap_servers=kafka_bootstrap, topic=topic, schema=schema)
    local = verify_topic(kafka_bootstrap, topic, codec)
    assert result.violations == local.violations == []
    assert (result.frontier, result.updates) == (local.frontier, local.updates) == ((1,), 3)
    assert sorted((r["k"], r["day"]) for r in result.collection.collect()) == list(enumerate(days))


def test_missing_topic_is_a_broker_error_before_spark_reads(spark, kafka_bootstrap):
    with pytest.raises(BrokerError, match=r"topic 'no-such-topic-for-read-cdc' does not exist"):
        read_cdc(
            spark,
            bootstrap_servers=kafka_bootstrap,
            topic="no-such-topic-for-read-cdc",
            schema={"type": "record", "name": "row", "fields": [{"name": "k", "type": "long"}]},
        )


def _many_types(n: int) -> tuple:
    """A schema of nullable and non-null fields of many types, and ``n`` rows of it with nulls
    wherever they are allowed (a decimal, a date, a timestamp, an array with null items, a
    nullable struct, a map)."""
    import datetime
    import decimal

    from pyspark.sql import types as T

    ddl = T.StructType(
        [
            T.StructField("id", T.LongType(), False),
            T.StructField("amount", T.DecimalType(10, 2), True),
            T.StructField("day", T.DateType(), False),
            T.StructField("ts", T.TimestampType(), True),
            T.StructField("tags", T.ArrayType(T.StringType(), True), False),
            T.StructField(
                "attrs",
                T.StructType(
                    [
                        T.StructField("a", T.IntegerType(), False),
                        T.StructField("b", T.BinaryType(), True),
                    ]
                ),
                True,
            ),
            T.StructField("m", T.MapType(T.StringType(), T.DoubleType(), False), False),
        ]
    )
    rows = [
        (
            k,
            decimal.Decimal(k) / 4 if k % 3 else None,
            datetime.date(2026, 1, 1 + k % 28),
            datetime.datetime(2026, 1, 1, k % 24) if k % 4 else None,
            [None if (k + i) % 4 == 0 else f"t{i}" for i in range(k % 4)],
            (k % 7, bytes([k % 256]) if k % 2 else None) if k % 5 else None,
            {f"x{i}": k / 3 for i in range(k % 3)},
        )
        for k in range(n)
    ]
    return ddl, rows


def test_a_read_logs_no_warning_of_sparks_avro_serializer(spark, kafka_bootstrap, topic_factory):
    """Spark decodes the messages with ``from_avro`` in PERMISSIVE mode (a malformed message is
    reported, not a failed job), which declares every field nullable, and encodes them again to
    check their length, and a violation's data to name it: Spark's Avro serializer warned, in
    each task, of each such field of a non-null Avro type ("will throw runtime exception if there
    is a record with null value") — nine to fourteen lines a read at Spark's default level. The
    reader says which fields are not null, through records, arrays and maps, the violations'
    paths included, and reads the same."""
    from helpers import JvmLog
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import to_avro

    ddl, rows = _many_types(200)
    topic = topic_factory(2)
    sink = CdcSink(kafka_bootstrap, topic)
    sink.write(frame(spark, rows, ddl), time=0)
    sink.write(frame(spark, rows[:50], ddl).withColumn("diff", F.lit(-1)), time=1)
    schema = data_schema(ddl)
    codec = CdcCodec(schema)
    with JvmLog(spark, "org.apache.spark.sql.avro") as log:
        # what the capture sees: the warning of a nullable column given a non-null type
        spark.range(3).select(to_avro(F.when(F.col("id") > 0, F.col("id")), '"long"')).collect()
        assert "nullable catalyst schema" in log.text()
        log.clear()
        read = read_cdc(spark, bootstrap_servers=kafka_bootstrap, topic=topic, schema=schema)
        assert (read.verdict, read.frontier, read.collection.count()) == ("verified", (2,), 150)
        # violations name their rows' data, which the reader encodes again: a zero diff, a
        # conflicting one
        first = next(
            codec.decode(r.value)
            for r in read_topic(kafka_bootstrap, topic)
            if r.value[5:6] == b"\x00"
        )
        data, time = first[0].data, first[0].time
        with CdcProducer(kafka_bootstrap, topic) as producer:
            producer.produce(codec.encode_updates([Update(data, time, 0)])[0], partition=0)
            producer.produce(
                codec.encode_updates([Update(data, time, first[0].diff + 1)])[0], partition=0
            )
        read = read_cdc(
            spark, bootstrap_servers=kafka_bootstrap, topic=topic, schema=schema, strict="exact"
        )
        assert {v.kind for v in read.violations} == {"zero_diff", "conflicting_diff"}
        assert log.text() == ""


def test_values_said_not_null_encode_to_the_same_bytes(spark):
    """What the reader encodes again is only said not null, never changed: ``to_avro`` of a
    PERMISSIVE decoding said not null (every field nullable to Spark), and the length check of a
    FAILFAST decoding, give each message's own bytes and length — else every message would go
    to the driver as suspect, a cost no verdict shows."""
    import json

    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro, to_avro

    from cdc_emitter.read.spark_decode import lengths_as_written
    from cdc_emitter.spark.columns import declared_as_avro

    ddl, rows = _many_types(300)
    record = data_schema(ddl)
    codec = CdcCodec(record)
    updates = json.dumps(codec.union[0])
    df = frame(spark, rows, ddl)
    written = df.select(
        to_avro(
            F.array(
                F.struct(
                    F.struct(*df.columns).alias("data"),
                    F.lit(3).cast("long").alias("time"),
                    (F.col("id") - 150).alias("diff"),
                )
            ),
            updates,
        ).alias("body")
    )
    decoded = written.select("body", from_avro("body", updates, {"mode": "PERMISSIVE"}).alias("u"))
    u_type = decoded.schema["u"].dataType
    assert u_type.containsNull and u_type.elementType["diff"].nullable  # PERMISSIVE: all nullable
    again = decoded.select(
        "body",
        to_avro(declared_as_avro(F.col("u"), u_type, codec.union[0]), updates).alias("again"),
        lengths_as_written(decoded, F.col("body"), [("u", codec.union[0])]).alias("length"),
    )
    assert (
        again.where(
            (F.col("again") != F.col("body")) | (F.col("length") != F.octet_length("body"))
        ).count()
        == 0
    )
    assert again.count() == 300


@pytest.mark.parametrize("streamed", [False, True], ids=["collected", "streamed"])
def test_rows_come_out_in_the_local_readers_order(
    spark, kafka_bootstrap, topic_factory, streamed, monkeypatch
):
    """``collection_rows`` and ``history_rows`` (``verify --output`` and ``--history``) give
    the local reader's data in ``codec.sort_key`` order, ordered by values of many types
    (nulls, decimals, dates, timestamps, arrays, structs, maps): sorted on the driver when the
    rows are few, by Spark when they are too many to collect (``streamed``)."""
    from pyspark.sql import functions as F

    if streamed:
        monkeypatch.setattr(spark_replay, "COLLECT_AT_MOST", 0)
    ddl, rows = _many_types(40)
    # an id shared by several rows, so the other columns decide the order; a string beyond ASCII
    rows = [
        (k % 3, *row[1:4], [*row[4], "é"] if k % 5 == 0 else row[4], *row[5:])
        for k, row in enumerate(rows)
    ]
    topic = topic_factory(2)
    sink = CdcSink(kafka_bootstrap, topic)
    sink.write(frame(spark, rows, ddl), time=0)
    sink.write(frame(spark, rows[::3], ddl).withColumn("diff", F.lit(-1).cast("long")), time=1)
    schema = data_schema(ddl)
    codec = CdcCodec(schema)

    result = read_cdc(spark, bootstrap_servers=kafka_bootstrap, topic=topic, schema=schema)
    history = list(result.history_rows())
    collection = list(result.collection_rows())
    result.unpersist()

    local, frontier, violations, _ = read_history(kafka_bootstrap, topic, codec)
    assert (result.frontier, frontier, violations) == ((2,), (2,), [])
    assert history == sorted(local, key=lambda u: (u.time, codec.sort_key(u.data)))
    totals: dict = {}
    for u in local:
        totals[u.data] = totals.get(u.data, 0) + u.diff
    kept = [(data, n) for data, n in totals.items() if n]
    assert collection == sorted(kept, key=lambda item: codec.sort_key(item[0]))
    assert len(history) > len(collection) > 20


def test_bodies_longer_than_their_updates_are_judged_as_the_local_reader_judges_them(
    spark, kafka_bootstrap, topic_factory
):
    """Spark's Avro reader ignores bytes after an update array; the reader measures every
    array against the updates Spark read of it. Arrays Avro allows but the sink never writes
    (several blocks, a block with its byte size, a longer varint) read as they are; a byte to
    spare, after an array or an empty one, is undecodable, as the local reader says."""
    import io

    import fastavro

    from cdc_emitter.protocol.varint import encode_zigzag_long
    from cdc_emitter.read.verify import verify_topic

    schema = {
        "type": "record",
        "name": "row",
        "fields": [{"name": "k", "type": "long"}, {"name": "v", "type": ["null", "string"]}],
    }
    codec = CdcCodec(schema)
    update_schema = fastavro.parse_schema(codec.union[0]["items"])

    def item(k: int, time: int, diff: int = 1) -> bytes:
        out = io.BytesIO()
        value = {"data": {"k": k, "v": None if k % 2 else "v" * k}, "time": time, "diff": diff}
        fastavro.schemaless_writer(out, update_schema, value)
        return out.getvalue()

    def array(*blocks: bytes) -> bytes:
        return codec.frame + b"\x00" + b"".join(blocks) + b"\x00"

    def block(*items: bytes, sized: bool = False) -> bytes:
        body = b"".join(items)
        if sized:  # a negative count, then the block's byte size
            return encode_zigzag_long(-len(items)) + encode_zigzag_long(len(body)) + body
        return encode_zigzag_long(len(items)) + body

    messages = [
        (0, codec.encode_updates([Update((1, None), 0, 1), Update((2, "vv"), 0, 1)])[0]),
        (0, array(block(item(3, 0)), block(item(4, 0), item(5, 0)))),  # three blocks
        (1, array(block(item(6, 0), item(7, 0), sized=True))),  # a block with its size
        (1, codec.frame + b"\x00\x82\x00" + item(8, 0) + b"\x00"),  # count 1 as two bytes
        (0, array(block(item(9, 0))) + b"\x00"),  # a byte to spare
        (1, codec.frame + b"\x00\x00\x07"),  # an empty array and a byte to spare
        (1, codec.frame + b"\x00\x00"),  # an empty array
        (0, array(block(item(10, 0)), block(item(11, 0))) + b"\x02"),  # blocks and a spare byte
        (0, codec.encode_progress(Progress((0,), (1,), ((0, 8),)))),
        (1, codec.encode_progress(Progress((0,), (1,), ((0, 8),))) + b"\x00"),  # spare byte
    ]
    topic = topic_factory(2)
    with CdcProducer(kafka_bootstrap, topic) as producer:
        for partition, value in messages:
            producer.produce(value, partition=partition)

    result = read_cdc(spark, bootstrap_servers=kafka_bootstrap, topic=topic, schema=schema)
    local = verify_topic(kafka_bootstrap, topic, codec)
    undecodable = sorted((v.partition, v.offset) for v in result.violations)
    assert undecodable == [(0, 2), (0, 3), (1, 2), (1, 4)]
    assert {v.kind for v in result.violations} == {"undecodable"}
    assert sorted(result.violations, key=lambda v: (v.partition, v.offset)) == sorted(
        local.violations, key=lambda v: (v.partition, v.offset)
    )
    assert (result.frontier, result.messages, result.updates) == (
        local.frontier,
        local.messages,
        local.updates,
    )
    assert result.frontier == (1,) and result.updates == 8  # the readable arrays' updates
    assert sorted(r["k"] for r in result.collection.collect()) == [1, 2, 3, 4, 5, 6, 7, 8]


@pytest.mark.parametrize("streamed", [False, True], ids=["collected", "streamed"])
def test_an_array_gone_before_it_is_read_again_stops_the_read_naming_it(spark, streamed):
    """An update array found longer than its updates is read again by its key, for the local
    codec to judge. If the topic lost it in between (retention, compaction), the read stops
    with an error that names it, rather than leave it uncounted: here one of the two keys asked
    for comes back, and the error names the other. The same whether the driver collects the
    messages it judges at once or streams them a partition at a time (more of them)."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from cdc_emitter.read.spark_replay import judge_singles

    data = StructType([StructField("k", LongType()), StructField("v", StringType())])
    codec = CdcCodec(data_schema(data))
    (kept,) = codec.encode_updates([Update((1, "a"), 1, 1)])
    decoded = spark.createDataFrame(
        [],
        "partition int, offset long, p string, suspect binary, tombstone boolean, "
        "u array<long>, headers array<struct<key: string, value: binary>>",
    )
    asked = []

    def values(keys):
        asked.append(list(keys))
        return spark.createDataFrame(
            [(0, 5, bytearray(kept))], "partition int, offset long, value binary"
        )

    with pytest.raises(CdcError) as error:
        judge_singles(decoded, codec, [(0, 5), (1, 7)], values, collect=not streamed)
    assert asked == [[(0, 5), (1, 7)]]
    assert str(error.value) == (
        "partition 1 offset 7 of the topic is gone since read_cdc began (retention or "
        "compaction): read it again"
    )
