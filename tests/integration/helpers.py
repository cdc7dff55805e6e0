"""Helpers for integration tests: read a CDC topic back through the codec and the reader; see
what Spark logs."""

from __future__ import annotations

import json
import uuid
from typing import Any

from cdc_emitter.errors import DecodeError
from cdc_emitter.kafka.producer import CdcProducer
from cdc_emitter.kafka.reading import read_topic
from cdc_emitter.protocol import CdcReader, Progress, Update, consolidate
from cdc_emitter.protocol.codec import CdcCodec
from cdc_emitter.protocol.headers import HEADER_KIND, HEADER_SCHEMA

#: The data record of topics written by hand (`produce_by_hand`): ``k long, v string``.
BY_HAND_DATA = {
    "type": "record",
    "name": "data",
    "fields": [{"name": "k", "type": "long"}, {"name": "v", "type": ["null", "string"]}],
}
_STATEMENT_HEADERS = [
    (HEADER_KIND, b"progress"),
    (HEADER_SCHEMA, json.dumps(BY_HAND_DATA).encode()),
]


#: The updates of times 1 and 2 of `MANGLED`, both complete in it.
MANGLED_COMPLETE = (
    Update((1, "a"), 1, 1),
    Update((2, "b"), 1, 1),
    Update((1, "a"), 2, -1),
    Update((3, None), 2, 2),
)
_a, _b, _c, _d = MANGLED_COMPLETE
#: A topic by hand (`produce_by_hand`) with duplicated, reordered and re-batched messages:
#: times 1 and 2 complete, time 3 open (one of its two updates not written).
MANGLED = [
    [_a],
    [_b, _d],  # time 2's updates before any statement
    Progress((0,), (2,), ((1, 2),)),
    [_a, _b],  # duplicates
    Progress((0,), (2,), ((1, 2),)),  # a repeated statement
    Progress((2,), (4,), ((2, 2), (3, 2))),  # time 3 has two updates, one comes later
    [Update((4, "x"), 3, 1)],
    [_c],
]
#: A topic by hand (`produce_by_hand`) that breaks the protocol: two statements that disagree on
#: time 1's count (a ``count_mismatch`` at time 1).
DISAGREEING = [
    [Update((1, "a"), 1, 1)],
    Progress((0,), (2,), ((1, 1),)),
    Progress((0,), (2,), ((1, 2),)),
]


def produce_by_hand(bootstrap: str, topic: str, messages: list) -> None:
    """Write ``messages`` (lists of updates of `BY_HAND_DATA`, or Progress) to partition 0 in
    order, the statements with the headers the sink gives them (the schema among them)."""
    codec = CdcCodec(BY_HAND_DATA)
    with CdcProducer(bootstrap, topic) as producer:
        for message in messages:
            if isinstance(message, Progress):
                value = codec.encode_progress(message)
                producer.produce(value, headers=_STATEMENT_HEADERS, partition=0)
            else:
                for value in codec.encode_updates(message):
                    producer.produce(value, partition=0)


#: Spark settings for a session on the tests' data, a few rows: plans run interpreted, as in the
#: test session (compiling each plan's Java costs more than running it) and without adaptive
#: replanning. The apply job on its own: 202 s with Spark's defaults, 168 s with these; the
#: converter's module 121-122 s, 103-114 s.
#: (The JVM options of every Spark JVM the tests start are in tests/conftest.py: ``JVM_OPTIONS``.)
TINY_DATA_CONF = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    "spark.sql.adaptive.enabled": "false",
}
#: Spark settings for a test's Delta session: Delta rebuilds a table's state in 50 partitions by
#: default, which for a table of a few rows on two cores is most of each command's time (the
#: converter's job took 172 s with them, 82 s with 2).
DELTA_TEST_CONF = {"spark.databricks.delta.snapshotPartitions": "2", **TINY_DATA_CONF}
#: The same as ``--conf`` options of the command line.
DELTA_TEST_ARGS = [
    arg for key, value in DELTA_TEST_CONF.items() for arg in ("--conf", f"{key}={value}")
]


def frame(spark: Any, rows: Any, schema: Any) -> Any:
    """``spark.createDataFrame(rows, schema)``, its rows held by the JVM: a local relation made
    from an Arrow table, as Spark Connect makes every DataFrame of local rows.

    Spark classic keeps a DataFrame of a Python list as an RDD of pickled rows, so every action
    on it (a sink's batch reads its input several times) runs its tasks through Python workers:
    a 50-row write took 2.0 CPU-seconds that way, 0.8 from Arrow. The list path is kept where
    the two could differ: PySpark 3.5 (its ``createDataFrame`` takes no Arrow table), a schema
    that is not a DDL string or a ``StructType``, rows given as ``Row`` objects or dicts
    (matched by name), and timestamps (Spark reads a naive ``datetime`` in the machine's time
    zone, Arrow as UTC). Values are checked only as far as Arrow's conversion checks them (an
    int in a double column passes): where a test is about Spark's own checks, or needs tasks to
    read its rows (a job that fails, generated code), use ``spark.createDataFrame``.
    """
    import pyarrow as pa
    import pyspark
    from pyspark.sql import Row
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    rows = list(rows)
    if (
        int(pyspark.__version__.split(".")[0]) < 4
        or not isinstance(schema, (str, StructType))
        or any(isinstance(row, (Row, dict)) for row in rows)
    ):
        return spark.createDataFrame(rows, schema)
    struct = schema if isinstance(schema, StructType) else spark.createDataFrame([], schema).schema
    if "timestamp" in struct.simpleString():
        return spark.createDataFrame(rows, struct)
    arrow = to_arrow_schema(struct)
    wrong = [row for row in rows if len(row) != len(arrow)]
    if wrong:
        raise ValueError(
            f"row {wrong[0]!r} has not the {len(arrow)} columns of {struct.simpleString()}"
        )
    columns = list(zip(*rows)) if rows else [() for _ in arrow]
    arrays = [pa.array(list(values), type=field.type) for values, field in zip(columns, arrow)]
    return spark.createDataFrame(pa.Table.from_arrays(arrays, schema=arrow), struct)


def delta_package_or_skip() -> str:
    """The Delta Lake package built for this PySpark, else the test skipped: Delta publishes builds
    for some Spark releases only (none for 4.3 when this was written), so a run of the suite on a
    newer PySpark (``CDC_PYSPARK=...``) says so instead of failing on a package that does not exist."""
    import pyspark
    import pytest

    from cdc_emitter.spark.session import delta_package

    package = delta_package(pyspark.__version__)
    if package is None:
        pytest.skip(
            f"Delta Lake has no build for Spark {pyspark.__version__} (cdc_emitter.spark.session.DELTA_PACKAGES)"
        )
    return package


def read_history(bootstrap: str, topic: str, codec: Any, *, start: int = 0, timeout: float = 60.0):
    """Read every message of ``topic`` and reconstruct its history.

    Returns ``(updates, frontier, violations, reader)``: the consolidated updates the reader
    reported (sorted by time, then data repr, for stable comparisons), its frontier, its
    violations (undecodable messages included) and the reader itself (for counters).
    """
    reader = CdcReader(start)
    finished: list[Update] = []
    for record in read_topic(bootstrap, topic, timeout=timeout):
        try:
            message = codec.decode(record.value)
        except DecodeError as exc:
            reader.violate("undecodable", None, str(exc), record.partition, record.offset)
            continue
        for updates, _frontier in reader.push(
            message, partition=record.partition, offset=record.offset
        ):
            finished.extend(updates)
    history = sorted(consolidate(finished), key=lambda u: (u.time, repr(u.data), u.diff))
    return history, reader.frontier, list(reader.violations), reader


def as_history(triples) -> list[Update]:
    """Expected history from ``(data, time, diff)`` triples, consolidated and sorted like read_history."""
    return sorted(
        consolidate(Update(*t) for t in triples), key=lambda u: (u.time, repr(u.data), u.diff)
    )


def wait_settled(bootstrap: str, topic: str, *, timeout: float = 10.0) -> bool:
    """Wait (up to ``timeout`` seconds) until no Kafka transaction is open on ``topic``: its
    read_committed end offsets equal its high watermarks. True when they do.

    Kafka's transaction coordinator may write a transaction's commit markers after the commit
    returns, and until they land a read_committed end offset stops at the transaction's first
    message: a read taken right after a sink's batch can miss the batch's statement (its claim is
    such a transaction)."""
    import time

    deadline = time.monotonic() + timeout
    while topic_ends(bootstrap, topic) != topic_ends(bootstrap, topic, committed=False):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def count_messages(bootstrap: str, topic: str, *, settled: bool = False) -> int:
    """How many messages the topic holds (sum of high - low watermarks, read_committed).

    ``settled``: first wait (up to 10 s) until no Kafka transaction is open on the topic
    (`wait_settled`)."""
    from cdc_emitter.kafka.reading import end_offsets

    if settled:
        wait_settled(bootstrap, topic)
    return sum(high - low for low, high in end_offsets(bootstrap, topic).values())


class JvmLog:
    """What Spark's loggers under ``name`` log at WARN and above while in use, through a log4j2
    appender of the driver's JVM (where local executors log too), whatever the session's level."""

    def __init__(self, spark, name: str) -> None:
        self._jvm, self._name = spark._jvm, name

    def __enter__(self) -> JvmLog:
        log4j = self._jvm.org.apache.logging.log4j
        self._context = log4j.LogManager.getContext(False)
        self._text = self._jvm.java.io.StringWriter()
        layout = log4j.core.layout.PatternLayout.newBuilder().withPattern("%p %c{1}: %m%n").build()
        self._appender = log4j.core.appender.WriterAppender.createAppender(
            layout, None, self._text, "cdc-test-" + uuid.uuid4().hex[:8], False, True
        )
        self._appender.start()
        self._level = self._context.getLogger(self._name).getLevel()  # the level in force before
        log4j.core.config.Configurator.setLevel(self._name, log4j.Level.WARN)
        self._context.getLogger(self._name).addAppender(self._appender)
        return self

    def text(self) -> str:
        return self._text.toString()

    def clear(self) -> None:
        self._text.getBuffer().setLength(0)

    def __exit__(self, *exc: Any) -> None:
        log4j = self._jvm.org.apache.logging.log4j
        self._context.getLogger(self._name).removeAppender(self._appender)
        self._appender.stop()
        log4j.core.config.Configurator.setLevel(self._name, self._level)


# --- reading a topic as a read_committed consumer (many writers, transactional claims) --------


def watermark(consumer: Any, topic: str, partition: int, *, timeout: float = 30.0) -> int:
    """The end offset of ``topic``'s ``partition`` as ``consumer`` sees it (its isolation level),
    asked again while the partition has no leader yet (a topic just created)."""
    import time

    from confluent_kafka import KafkaError, KafkaException, TopicPartition

    leaderless = {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError._TRANSPORT,
        KafkaError._TIMED_OUT,
    }
    deadline = time.monotonic() + timeout
    while True:
        try:
            return consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=timeout, cached=False
            )[1]
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            again = isinstance(err, KafkaError) and (err.code() in leaderless or err.retriable())
            if not again or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def topic_ends(bootstrap: str, topic: str, *, committed: bool = True) -> dict[int, int]:
    """``{partition: end offset}`` of ``topic``. ``committed``: as a ``read_committed`` consumer
    sees it (the last stable offset: not past an open transaction); else the high watermark."""
    from confluent_kafka import Consumer

    from cdc_emitter.kafka.config import consumer_config
    from cdc_emitter.kafka.reading import close_reader

    level = "read_committed" if committed else "read_uncommitted"
    consumer = Consumer(consumer_config(bootstrap, {"isolation.level": level}))
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        return {p: watermark(consumer, topic, p) for p in sorted(partitions)}
    finally:
        close_reader(consumer, 10)


def read_committed_records(
    bootstrap: str, topic: str, *, timeout: float = 60.0
) -> list[tuple[int, int, bytes | None, list]]:
    """Every message of ``topic`` a ``read_committed`` consumer sees, up to the end offsets seen
    at the start: ``(partition, offset, value, headers)``, per partition in offset order.

    Partitions are assigned from their start (no group, nothing committed). Done when each
    partition reported its end (the last stable offset: transaction markers and aborted messages
    take offsets no message is read at). A partition that does not get there within ``timeout``
    seconds fails the test: that is a reader that stalls.
    """
    import time

    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    from cdc_emitter.kafka.config import consumer_config

    ends = topic_ends(bootstrap, topic, committed=True)
    consumer = Consumer(consumer_config(bootstrap, {"isolation.level": "read_committed"}))
    records: list[tuple[int, int, bytes | None, list]] = []
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        pending = {p for p, end in ends.items() if end > 0}
        deadline = time.monotonic() + timeout
        while pending:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"a read_committed reader of {topic!r} did not reach the end offsets {ends} of "
                    f"partitions {sorted(pending)} within {timeout:g}s"
                )
            for msg in consumer.consume(num_messages=500, timeout=0.5):
                p, off, err = msg.partition(), msg.offset(), msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        if off >= ends.get(p, 0):
                            pending.discard(p)
                        continue
                    raise AssertionError(f"reading {topic!r} partition {p}: {err.str()}")
                if off >= ends[p]:
                    pending.discard(p)
                    continue  # written after the snapshot of the end offsets
                records.append((p, off, msg.value(), list(msg.headers() or [])))
                if off >= ends[p] - 1:
                    pending.discard(p)
    finally:
        consumer.close()
    return records


def read_committed_history(
    bootstrap: str,
    topic: str,
    *,
    shuffle_seed: int | None = None,
    duplicate: bool = False,
    codec: Any = None,
    timeout: float = 60.0,
):
    """The topic's history as a ``read_committed`` reader that follows the protocol finds it,
    whatever order its messages come in.

    Reads every message (`read_committed_records`); ``shuffle_seed``: feeds them to the reader
    in a random order (across partitions, and within each); ``duplicate``: a random third of
    them comes twice more. The reader is the verifier's, `CdcReader`, in ``strict="exact"``
    mode (a late update that is not an exact duplicate is a violation, not dropped). Messages are
    decoded with the data schema of the topic's progress headers (else ``codec``'s).

    Returns ``(frontier, collection, violations)``: the reader's frontier, the updates it
    reported (below the frontier, consolidated) as a ``Counter`` of ``(data, time, diff)``, and
    its violations (undecodable messages included). A history that is the same for every order
    is unambiguous.
    """
    import random
    from collections import Counter

    from cdc_emitter.protocol.codec import CdcCodec, data_schema_from_text
    from cdc_emitter.protocol.headers import HEADER_SCHEMA

    records = read_committed_records(bootstrap, topic, timeout=timeout)
    for _p, _off, _value, headers in records:
        schema = dict(headers).get(HEADER_SCHEMA)
        if schema:
            codec = CdcCodec(data_schema_from_text(schema.decode()))
            break
    messages = list(records)
    rng = random.Random(shuffle_seed)
    if duplicate and messages:
        for record in rng.sample(messages, k=max(1, len(messages) // 3)):
            messages += [record, record]
    if shuffle_seed is not None:
        rng.shuffle(messages)
    reader = CdcReader(strict="exact")
    finished: list[Update] = []
    for partition, offset, value, _headers in messages:
        if codec is None:
            reader.violate("undecodable", None, "no data schema in the topic", partition, offset)
            continue
        try:
            message = codec.decode(value)
        except DecodeError as exc:
            reader.violate("undecodable", None, str(exc), partition, offset)
            continue
        for updates, _frontier in reader.push(message, partition=partition, offset=offset):
            finished.extend(updates)
    collection = Counter(tuple(u) for u in consolidate(finished))
    return reader.frontier, collection, list(reader.violations)
