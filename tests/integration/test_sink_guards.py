"""The sink's guards on the real broker: a batch that would leave a topic no reader can read
correctly fails before its first message, and says why and what to do instead."""

from __future__ import annotations

import pytest
from helpers import as_history, count_messages, frame, read_history

from cdc_emitter import CdcSink
from cdc_emitter.errors import ConfigError, SchemaError
from cdc_emitter.kafka.producer import CdcProducer
from cdc_emitter.protocol import MAX_LONG, Update
from cdc_emitter.protocol.codec import CdcCodec
from cdc_emitter.spark.schema import data_schema

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def _df(spark, rows, ddl, *, not_null=()):
    from pyspark.sql import types as T

    struct = spark.createDataFrame([], ddl).schema  # StructType.fromDDL is PySpark 4 only
    struct = T.StructType(
        [T.StructField(f.name, f.dataType, f.name not in not_null) for f in struct.fields]
    )
    return frame(spark, rows, struct)


@pytest.mark.parametrize(
    "second, message",
    [
        (
            ("id long, price int", (), (2, 20)),  # only the nullability of id (a streaming source)
            r"column id is long in the topic, long\? in this batch",
        ),
        (
            ("id long, price int, name string", ("id",), (2, 20, None)),
            r"column name \(string\?\) is new in this batch",
        ),
        (
            ("id long, price string", ("id",), (2, "x")),
            r"column price is int\? in the topic, string\? in this batch",
        ),
        (
            ("price int, id long", ("id",), (20, 2)),
            r"the columns are in another order: id, price in the topic, price, id in this batch",
        ),
    ],
)
def test_a_batch_with_another_data_schema_writes_nothing(
    spark, kafka_bootstrap, topic_factory, second, message
):
    topic = topic_factory()
    first = _df(spark, [(1, 10)], "id long, price int", not_null=("id",))
    CdcSink(kafka_bootstrap, topic).write(first, time=0)
    before = count_messages(kafka_bootstrap, topic, settled=True)
    ddl, not_null, row = second
    with pytest.raises(SchemaError, match=message) as info:
        CdcSink(kafka_bootstrap, topic).write(_df(spark, [row], ddl, not_null=not_null), time=1)
    assert "Nothing was written. Write this data to a new topic" in str(info.value)
    assert count_messages(kafka_bootstrap, topic) == before
    # the same schema again is fine, from a new sink as from the same one
    again = CdcSink(kafka_bootstrap, topic)
    again.write(_df(spark, [(3, 30)], "id long, price int", not_null=("id",)), time=1)
    codec = CdcCodec(data_schema(first.schema))
    history, frontier, violations, _ = read_history(kafka_bootstrap, topic, codec)
    assert (violations, frontier) == ([], (2,))
    assert history == as_history([((1, 10), 0, 1), ((3, 30), 1, 1)])


def test_a_topic_written_by_another_tool_is_checked_by_decoding(
    spark, kafka_bootstrap, topic_factory
):
    topic = topic_factory()
    other = CdcCodec(
        {"type": "record", "name": "data", "fields": [{"name": "x", "type": "double"}]}
    )
    with CdcProducer(kafka_bootstrap, topic) as producer:  # no headers of ours, no progress
        for value in other.encode_updates([Update((0.5,), 0, 1)]):
            producer.produce(value)
    with pytest.raises(
        SchemaError,
        match=r"holds update messages that do not decode with this "
        r"batch's data schema \(k long\?, v string\?\)",
    ):
        CdcSink(kafka_bootstrap, topic).write(frame(spark, [(1, "a")], "k long, v string"))
    assert count_messages(kafka_bootstrap, topic) == 1


def test_diffs_that_overflow_on_the_way_but_not_in_total_consolidate(
    spark, kafka_bootstrap, topic_factory
):
    topic = topic_factory()
    df = frame(
        spark,
        [(1, "a", MAX_LONG), (1, "a", 1), (1, "a", -1), (2, "b", 1)],
        "k long, v string, diff long",
    )
    result = CdcSink(kafka_bootstrap, topic).write(df, time=0)
    assert result.updates == 2
    codec = CdcCodec(data_schema(df.drop("diff").schema))
    history, frontier, violations, _ = read_history(kafka_bootstrap, topic, codec)
    assert (violations, frontier) == ([], (1,))
    assert history == as_history([((1, "a"), 0, MAX_LONG), ((2, "b"), 0, 1)])


def test_the_topics_max_message_bytes_is_checked_before_writing(
    spark, kafka_bootstrap, topic_factory
):
    topic = topic_factory(config={"max.message.bytes": "200000"})
    df = frame(spark, [(k, "v" * 100) for k in range(5000)], "k long, v string")
    with pytest.raises(
        ConfigError,
        match=r"topic '.*' accepts messages of at most 200000 bytes "
        r"\(its max.message.bytes\), but this sink makes messages "
        r"of up to 900000 bytes .*pass max_message_bytes=198976",
    ):
        CdcSink(kafka_bootstrap, topic).write(df, time=0)
    assert count_messages(kafka_bootstrap, topic) == 0
    result = CdcSink(kafka_bootstrap, topic, max_message_bytes=198_976).write(df, time=0)
    assert result.updates == 5000 and result.messages > 3


# --- the replay guard ---------------------------------------------------------------------------


def test_a_rerun_batch_is_compared_with_what_its_first_attempt_wrote(
    spark, kafka_bootstrap, topic_factory, tmp_path
):
    from cdc_emitter.errors import ReplayError

    topic = topic_factory(2)
    checkpoint = str(tmp_path / "checkpoint")
    ddl = "k long, v string"
    rows = [(1, "a"), (2, "b"), (3, "c"), (3, "c")]
    first = CdcSink(kafka_bootstrap, topic, checkpoint_location=checkpoint)
    assert first(frame(spark, rows, ddl), 0).counts == {0: 3}
    written = count_messages(kafka_bootstrap, topic, settled=True)

    # the driver crashed after the write, before Spark committed batch 0: the query restarts;
    # the claim is there, so its updates are written again (the first attempt may have died
    # before they all were): duplicates, and no second statement
    same = CdcSink(kafka_bootstrap, topic, checkpoint_location=checkpoint)
    again = same(frame(spark, list(reversed(rows)), ddl).repartition(3), 0)
    assert (again.lower, again.upper, again.reused, again.messages, again.counts) == (
        0,
        1,
        True,
        1,
        {0: 3},
    )
    written += 1
    assert count_messages(kafka_bootstrap, topic) == written

    other = CdcSink(kafka_bootstrap, topic, checkpoint_location=checkpoint)
    with pytest.raises(
        ReplayError,
        match=r"batch 0: the source replayed different data for batch 0 "
        r"than its first attempt wrote \(the same number of "
        r"updates but other rows\)\. Nothing was written",
    ):
        other(frame(spark, [(1, "a"), (2, "b"), (4, "d")], ddl), 0)
    with pytest.raises(
        ReplayError,
        match=r"\(3 updates \(3 at time 0\) then, 1 updates \(1 at time "
        r"0\) now\)",
    ):
        other(frame(spark, [(1, "a")], ddl), 0)
    assert count_messages(kafka_bootstrap, topic) == written
    codec = CdcCodec(data_schema(spark.createDataFrame([], ddl).schema))
    history, frontier, violations, _ = read_history(kafka_bootstrap, topic, codec)
    assert (violations, frontier) == ([], (1,))
    assert history == as_history([((1, "a"), 0, 1), ((2, "b"), 0, 1), ((3, "c"), 0, 2)])


# --- faults: the first line says what happened --------------------------------------------------


@pytest.mark.parametrize("encoder", ["python", "jvm", "jvm-joined"])
def test_a_broker_down_while_producing_fails_the_batch_with_the_delivery_error_first(
    spark, kafka_local, monkeypatch, encoder
):
    """python: our tasks' producers; jvm: Spark's Kafka writer (small_batch_rows=0: every message
    from the executors); jvm-joined: the first batch's small messages joined and produced by the
    sink's driver producer."""
    import uuid

    from cdc_emitter.errors import DeliveryError
    from cdc_emitter.kafka.topics import ensure_topic

    bootstrap = kafka_local.bootstrap_servers
    topic = f"sink-outage-{uuid.uuid4().hex[:8]}"
    ensure_topic(bootstrap, topic, create=True)
    df = frame(spark, [(k, "v") for k in range(100)], "k long, v string")
    options = {"small_batch_rows": 0} if encoder == "jvm" else {}
    sink = CdcSink(
        bootstrap,
        topic,
        producer_config={"message.timeout.ms": 2000},
        encoder=encoder.split("-")[0],
        **options,
    )
    from cdc_emitter.kafka.claims import ClaimProducer

    claimed = ClaimProducer.commit

    def claim_then_outage(*args, **kwargs):  # the broker goes down once the batch is claimed
        offset = claimed(*args, **kwargs)
        kafka_local.stop_broker()
        return offset

    monkeypatch.setattr(ClaimProducer, "commit", claim_then_outage)
    try:
        with pytest.raises(DeliveryError) as info:
            sink.write(df, time=0)
    finally:
        monkeypatch.undo()
        kafka_local.start_broker()
    first = str(info.value).splitlines()[0]
    assert first.startswith(f"delivery to topic '{topic}' ")
    if encoder == "python":
        assert (
            "[_MSG_TIMED_OUT]: not acknowledged within message.timeout.ms=2000 ms (is the "
            "broker down?)"
        ) in first
        assert first.endswith("(raised in a Spark task, which failed every attempt)")
    elif encoder == "jvm-joined":  # the driver producer's
        assert first.endswith(
            "[_MSG_TIMED_OUT]: not acknowledged within message.timeout.ms=2000 ms (is the "
            "broker down?)"
        )
        assert sink.last_result is None
    else:  # the Java producer's own error, from Spark's Kafka writer
        assert (
            "(delivery.timeout.ms=2000 per attempt): org.apache.kafka.common.errors.TimeoutException"
            in first
        )
    codec = CdcCodec(data_schema(df.schema))
    history, frontier, violations, _ = read_history(bootstrap, topic, codec)
    assert frontier == (0,) and violations == []  # claimed, not complete: readers wait on time 0
    # and the same batch, written again by the same sink once the broker is back, completes it
    assert sink.write(df, time=0).reused
    history, frontier, violations, _ = read_history(bootstrap, topic, codec)
    assert (frontier, violations) == ((1,), [])
    assert history == as_history([((k, "v"), 0, 1) for k in range(100)])


# --- two writers ----------------------------------------------------------------------------------


def _racing(sink, stale, *, then=None, fresh_after=1):
    """Make ``sink`` see the ``stale`` frontier on its first ``fresh_after`` reads of the tail
    (the race), running ``then`` (the other writer) at the first one."""
    learnt, calls = sink.frontier, []

    def frontier(**kw):
        calls.append(1)
        if len(calls) > fresh_after:
            return learnt(**kw)
        if len(calls) == 1 and then is not None:
            then()
        return stale

    sink.frontier = frontier


def test_a_writer_overtaken_before_its_claim_writes_after_the_other(
    spark, kafka_bootstrap, topic_factory
):
    """b decides its batch on a frontier that a's batch then moves: b's claim, taken on the
    state read after b fenced a, goes after a's batch (its time was the frontier: planned
    again); a batch whose time is fixed below a's claim fails naming a, with nothing written."""
    from cdc_emitter.errors import ConcurrentWriterError

    topic = topic_factory()
    ddl = "k long, v string"
    CdcSink(kafka_bootstrap, topic).write(frame(spark, [(1, "a")], ddl), time=0)
    a = CdcSink(kafka_bootstrap, topic, writer_id="writer-a")
    b = CdcSink(kafka_bootstrap, topic, writer_id="writer-b")
    stale = b.frontier()
    a.write(frame(spark, [(2, "b")], ddl))  # a takes [1, 2) while b prepares its batch
    _racing(b, stale)
    assert b.write(frame(spark, [(3, "c")], ddl)).lower == 2  # after a's batch
    written = count_messages(kafka_bootstrap, topic, settled=True)
    c = CdcSink(kafka_bootstrap, topic, writer_id="writer-c")
    _racing(c, stale)
    with pytest.raises(
        ConcurrentWriterError,
        match=r"writer writer-a \[1, 2\) claimed up to frontier 3 while this batch was "
        r"prepared from frontier 1 \(interval \[1, 2\)\), and this batch has updates from time 1",
    ) as err:
        c.write(frame(spark, [(4, "d")], ddl), time=1)
    assert "Nothing was written" in str(err.value)
    assert count_messages(kafka_bootstrap, topic) == written
    codec = CdcCodec(data_schema(spark.createDataFrame([], ddl).schema))
    history, frontier, violations, _ = read_history(kafka_bootstrap, topic, codec)
    assert (violations, frontier) == ([], (3,))
    assert history == as_history([((1, "a"), 0, 1), ((2, "b"), 1, 1), ((3, "c"), 2, 1)])


def test_a_query_carries_its_frontier_and_continues_after_a_foreign_writer(
    spark, kafka_bootstrap, topic_factory
):
    """A running query learns the topic's tail once and carries its frontier forward while no
    other writer fences its claims; another writer's batch between two of its batches fences
    it, and the query then reads the tail again and continues after that batch."""
    topic = topic_factory(2)
    ddl = "k long, v string"
    ours = CdcSink(kafka_bootstrap, topic, writer_id="ours")
    tail_reads, learnt = [], ours.frontier
    ours.frontier = lambda **kw: tail_reads.append(1) or learnt(**kw)
    first = ours(frame(spark, [(1, "a")], ddl), 0)
    reads_after_first = len(tail_reads)
    second = ours(frame(spark, [(2, "b")], ddl), 1)
    assert len(tail_reads) == reads_after_first  # nobody else wrote: no tail read at all
    foreign = CdcSink(kafka_bootstrap, topic, writer_id="theirs")(frame(spark, [(3, "c")], ddl), 0)
    third = ours(frame(spark, [(4, "d")], ddl), 2)
    assert len(tail_reads) > reads_after_first
    assert [(r.lower, r.upper) for r in (first, second, foreign, third)] == [
        (0, 1),
        (1, 2),
        (2, 3),
        (3, 4),
    ]
    assert ours(frame(spark, [(4, "d")], ddl), 2).reused  # a re-run finds its carried interval
    codec = CdcCodec(data_schema(spark.createDataFrame([], ddl).schema))
    history, frontier, violations, _ = read_history(kafka_bootstrap, topic, codec)
    assert (violations, frontier) == ([], (4,))
    assert history == as_history(
        [((1, "a"), 0, 1), ((2, "b"), 1, 1), ((3, "c"), 2, 1), ((4, "d"), 3, 1)]
    )


def test_a_writer_paused_between_its_claim_and_its_updates_completes_its_own_interval(
    spark, kafka_bootstrap, topic_factory
):
    """b's claim is committed, then a writes a whole batch before b's updates are written (a
    pause, a slow job): b's updates land in b's own interval, a's after it; one history."""
    topic = topic_factory(2)
    ddl = "k long, v string"
    a = CdcSink(kafka_bootstrap, topic, writer_id="writer-a")
    b = CdcSink(kafka_bootstrap, topic, writer_id="writer-b")
    claims = b._clients.claims()
    commit = claims.commit
    results = []

    def commit_then_other_writer(messages):
        offset = commit(messages)
        if not results:
            results.append(a.write(frame(spark, [(2, "b")], ddl)))
        return offset

    claims.commit = commit_then_other_writer
    mine = b.write(frame(spark, [(1, "a")], ddl))
    assert [(r.lower, r.upper) for r in (mine, results[0])] == [(0, 1), (1, 2)]
    codec = CdcCodec(data_schema(spark.createDataFrame([], ddl).schema))
    history, frontier, violations, _ = read_history(kafka_bootstrap, topic, codec)
    assert (violations, frontier) == ([], (2,))
    assert history == as_history([((1, "a"), 0, 1), ((2, "b"), 1, 1)])


def test_an_unreachable_broker_fails_the_batch_within_broker_timeout(spark):
    import time

    from cdc_emitter.errors import BrokerError

    sink = CdcSink("127.0.0.1:1", "t", broker_timeout=2)
    began = time.monotonic()
    with pytest.raises(
        BrokerError,
        match=r"^cannot reach Kafka at 127\.0\.0\.1:1 \(asking for topic 't', "
        r"waited 2s\)",
    ):
        sink.write(frame(spark, [(1,)], "k long"))
    assert time.monotonic() - began < 10
    with pytest.raises(
        ConfigError, match=r"broker_timeout must be a positive number of seconds, not 0"
    ):
        CdcSink("127.0.0.1:1", "t", broker_timeout=0)


def test_a_write_interrupted_after_its_claim_is_completed_by_the_same_writer_run_again(
    spark, kafka_bootstrap, topic_factory, monkeypatch
):
    """A process dies between its claim and its updates (readers wait on its time); the same
    command run again — a new sink, the same writer_id, complete_last, the same data — completes
    that batch instead of writing a new one; then other data is a new batch after it."""
    from cdc_emitter.kafka.claims import ClaimProducer

    topic = topic_factory(2)
    ddl = "k long, v string"
    df = frame(spark, [(1, "a"), (2, "b")], ddl)
    CdcSink(kafka_bootstrap, topic).write(frame(spark, [(0, "z")], ddl))
    commit = ClaimProducer.commit

    def commit_then_die(self, messages):
        commit(self, messages)
        raise KeyboardInterrupt  # the process is gone right after its claim

    monkeypatch.setattr(ClaimProducer, "commit", commit_then_die)
    with pytest.raises(KeyboardInterrupt):
        CdcSink(kafka_bootstrap, topic, writer_id="export-1", complete_last=True).write(df)
    monkeypatch.undo()
    codec = CdcCodec(data_schema(df.schema))
    _, frontier, violations, _ = read_history(kafka_bootstrap, topic, codec)
    assert (frontier, violations) == ((1,), [])  # claimed [1, 2), no update: readers wait

    again = CdcSink(kafka_bootstrap, topic, writer_id="export-1", complete_last=True).write(df)
    assert (again.lower, again.upper, again.reused) == (1, 2, True)
    history, frontier, violations, _ = read_history(kafka_bootstrap, topic, codec)
    assert (frontier, violations) == ((2,), [])
    assert history == as_history([((0, "z"), 0, 1), ((1, "a"), 1, 1), ((2, "b"), 1, 1)])

    other = CdcSink(kafka_bootstrap, topic, writer_id="export-1", complete_last=True).write(
        frame(spark, [(3, "c")], ddl)
    )
    assert (other.lower, other.upper, other.reused) == (2, 3, False)


@pytest.mark.parametrize("landed", [True, False], ids=["landed", "not-landed"])
@pytest.mark.parametrize("streamed", [False, True], ids=["write", "micro-batch"])
def test_a_claim_in_doubt_is_looked_for_and_the_batch_goes_on(
    spark, kafka_bootstrap, topic_factory, monkeypatch, tmp_path, landed, streamed
):
    """The claim's transaction fails with an error of the broker's that is not a fence (seen as
    `UNKNOWN` when another writer dies mid-claim): the same call looks for the claim in the
    topic and goes on — under it if it landed, with a new one if not — never two claims; the
    claim is this call's new one either way (recorded in the sink log, not a re-run)."""
    from cdc_emitter.kafka.claims import ClaimProducer, InDoubt
    from cdc_emitter.sink.log import SinkLog

    topic, checkpoint = topic_factory(2), f"file://{tmp_path}/checkpoint"
    df = frame(spark, [(1, "a"), (2, "b")], "k long, v string")
    commit, failed = ClaimProducer.commit, []

    def commit_in_doubt(self, messages):
        if not failed:
            failed.append(1)
            if landed:
                commit(self, messages)
            self._drop(abort=False)
            raise InDoubt("Unknown broker error [UNKNOWN]")
        return commit(self, messages)

    monkeypatch.setattr(ClaimProducer, "commit", commit_in_doubt)
    if streamed:
        sink = CdcSink(kafka_bootstrap, topic, checkpoint_location=checkpoint)
        result = sink(df, 0)
        sink.close()  # its record is written by a thread: closing waits for it
        entry = SinkLog(spark, checkpoint).get(0)
        assert entry is not None and (entry.lower, entry.upper) == (0, 1)
    else:
        result = CdcSink(kafka_bootstrap, topic).write(df, time=0)
    assert failed and (result.lower, result.upper, result.reused) == (0, 1, False)
    codec = CdcCodec(data_schema(df.schema))
    history, frontier, violations, reader = read_history(kafka_bootstrap, topic, codec)
    assert (frontier, violations) == ((1,), [])
    assert history == as_history([((1, "a"), 0, 1), ((2, "b"), 0, 1)])
    assert reader.pending().statements == 1  # one claim, not one found and one made again


def test_a_claim_whose_commit_reply_was_lost_is_found_by_the_retry(
    spark, kafka_bootstrap, topic_factory, monkeypatch
):
    """The claim's transaction committed, but its reply was lost (a timeout): the batch fails;
    its retry finds the claim in the topic and writes the updates under it — not a second
    claim after it, which would leave the first waiting for updates forever."""
    from cdc_emitter.errors import DeliveryError
    from cdc_emitter.kafka.claims import ClaimProducer

    topic = topic_factory(2)
    df = frame(spark, [(1, "a"), (2, "b")], "k long, v string")
    commit, lost = ClaimProducer.commit, []

    def commit_reply_lost(self, messages):
        offset = commit(self, messages)
        if not lost:  # as ClaimProducer does on a failed transaction: the producer is let go
            lost.append(1)
            self._drop(abort=False)
            raise DeliveryError("the transaction's reply timed out")
        return offset

    monkeypatch.setattr(ClaimProducer, "commit", commit_reply_lost)
    sink = CdcSink(kafka_bootstrap, topic)
    with pytest.raises(DeliveryError, match="timed out"):
        sink.write(df, time=0)
    result = sink.write(df, time=0)
    assert (result.lower, result.upper, result.reused) == (0, 1, True)
    codec = CdcCodec(data_schema(df.schema))
    history, frontier, violations, _ = read_history(kafka_bootstrap, topic, codec)
    assert (frontier, violations) == ((1,), [])
    assert history == as_history([((1, "a"), 0, 1), ((2, "b"), 0, 1)])
